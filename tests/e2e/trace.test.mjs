// Trace context carried with a job (design §27), end to end on D1 and on four Durable Object
// shards: a request with a W3C `traceparent` submits a job that fails once and then succeeds; the
// job keeps the context, and each attempt's webhook request carries a `traceparent` of the same
// trace with a span of its own, so the trace the user's request started leads to every attempt.
// Features combined in one trace: a sealed job, a service handler's snooze and the run after it, a
// run cancelled while it ran, and the batch's callback, each a span of the request's trace.
import { test } from "node:test";
import assert from "node:assert/strict";
import { start, webhook, waitFor, TOKEN } from "./harness.mjs";

const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT = `00-${TRACE_ID}-00f067aa0ba902b7-01`;

test("a job submitted in a trace: each attempt's webhook request is a span of that trace", async () => {
  const w = await start();
  try {
    const res = await w.mf.dispatchFetch(`${w.url}jobs`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", traceparent: PARENT, tracestate: "congo=t61" },
      body: JSON.stringify({ id: "traced", payload: webhook("/fail/1/traced"), ordering_key: "k" }),
    });
    assert.equal(res.status, 202, await res.text());
    await waitFor(async () => (await w.job("traced"))?.status === "DONE", "traced DONE", 30_000);
    const job = (await w.api("GET", "/jobs/traced")).json.job;
    assert.deepEqual([job.traceparent, job.tracestate], [PARENT, "congo=t61"]);
    const calls = w.target.to("/fail/1/traced");
    assert.equal(calls.length, 2, "failed once, then done");
    const spans = calls.map((c) => c.headers.traceparent);
    for (const span of spans) {
      const [version, trace, parent, flags] = span.split("-");
      assert.deepEqual([version, trace, flags], ["00", TRACE_ID, "01"], span);
      assert.match(parent, /^[0-9a-f]{16}$/);
      assert.notEqual(parent, "00f067aa0ba902b7", "the run is a span of its own");
    }
    assert.notEqual(spans[0], spans[1], "each attempt its own span");
    assert.ok(calls.every((c) => c.headers.tracestate === "congo=t61"));

    // A job submitted with none carries none on.
    assert.equal((await w.api("POST", "/jobs", { id: "plain", payload: webhook("/ok/plain") })).status, 202);
    await waitFor(async () => (await w.job("plain"))?.status === "DONE", "plain DONE");
    assert.equal(w.target.to("/ok/plain")[0].headers.traceparent, undefined);
  } finally {
    await w.dispose();
  }
});

/** A service handler (design §13b) that tells the test's target which trace context its request
 * carried, and snoozes the first time it runs a job. */
const NAPPER = `
import { WorkerEntrypoint } from "cloudflare:workers";
export class Handler extends WorkerEntrypoint {
  async fetch(request) {
    const job = await request.json();
    const run = job.payload.napped ? "after" : "before";
    await fetch("http://target.test/ok/" + job.id + "/" + run, {
      method: "POST", headers: { traceparent: request.headers.get("traceparent") ?? "none" }, body: "{}",
    });
    if (run === "before") return Response.json({ payload: { ...job.payload, napped: true } }, { status: 202, headers: { "orderly-snooze": "1" } });
    return Response.json({ ok: true });
  }
}
export default { fetch: () => new Response("service binding only", { status: 404 }) };`;

test("features combined in one trace: a sealed job, a snooze, a cancel and a batch's callback each run as spans of the request's trace", async () => {
  const w = await start({
    vars: { PAYLOAD_KEY: `k1:${Buffer.alloc(32, 3).toString("base64")}`, SERVICE_HANDLERS: "nap=APP" },
    extraWorkers: (target) => [{ name: "napper", modules: true, script: NAPPER, compatibilityDate: "2026-08-01", outboundService: (r) => target.handle(r) }],
    serviceBindings: { APP: { name: "napper", entrypoint: "Handler" } },
  });
  try {
    const res = await w.mf.dispatchFetch(`${w.url}jobs`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", traceparent: PARENT },
      body: JSON.stringify({
        jobs: [
          { id: "tr-sealed", payload: webhook("/ok/tr-sealed"), sensitive: true },
          { id: "tr-nap", payload: { type: "nap" } },
          { id: "tr-held", payload: webhook("/hold/30000/tr-held") },
        ],
        then: { id: "tr-then", payload: webhook("/ok/tr-then") },
      }),
    });
    assert.equal(res.status, 202, await res.text());
    await waitFor(() => w.target.to("/hold/30000/tr-held").length === 1, "the held webhook running");
    assert.equal((await w.api("POST", "/jobs/tr-held/cancel")).status, 202);
    for (const [id, status] of [["tr-sealed", "DONE"], ["tr-nap", "DONE"], ["tr-held", "DEAD"], ["tr-then", "DONE"]]) {
      await waitFor(async () => (await w.job(id))?.status === status, `${id} ${status}`, 30_000);
    }
    // The sealed job keeps its trace beside its sealed payload; the callback took the batch's.
    for (const id of ["tr-sealed", "tr-then"]) assert.equal((await w.api("GET", `/jobs/${id}`)).json.job.traceparent, PARENT, id);
    const spans = [
      ["the sealed job's webhook", w.target.to("/ok/tr-sealed")],
      ["the snoozed run", w.target.to("/ok/tr-nap/before")],
      ["the run after the snooze", w.target.to("/ok/tr-nap/after")],
      ["the cancelled run's webhook", w.target.to("/hold/30000/tr-held")],
      ["the batch's callback", w.target.to("/ok/tr-then")],
    ].map(([what, calls]) => {
      assert.equal(calls.length, 1, what);
      const [version, trace, span] = calls[0].headers.traceparent.split("-");
      assert.deepEqual([version, trace], ["00", TRACE_ID], `${what}: ${calls[0].headers.traceparent}`);
      assert.notEqual(span, "00f067aa0ba902b7", `${what}: a span of its own`);
      return span;
    });
    assert.equal(new Set(spans).size, spans.length, `every run its own span: ${spans}`);
  } finally {
    await w.dispose();
  }
});
