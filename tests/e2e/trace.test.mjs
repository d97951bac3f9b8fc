// Trace context carried with a job (design §27), end to end on D1 and on four Durable Object
// shards: a request with a W3C `traceparent` submits a job that fails once and then succeeds; the
// job keeps the context, and each attempt's webhook request carries a `traceparent` of the same
// trace with a span of its own, so the trace the user's request started leads to every attempt.
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
