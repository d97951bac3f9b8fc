// Service handlers (design §13b) through the real worker under miniflare: orderly runs "notify" jobs
// through the JavaScript Worker of examples/js-handler, bound with a service binding to its
// `Handler` entrypoint; the handler calls the in-process target, which rate-limits and fails.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { start, waitFor, TARGET } from "./harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** examples/js-handler as a second Worker, its outbound fetches answered by the test's target. */
const jsHandler = (target) => [{
  name: "js-handler",
  modules: true,
  scriptPath: join(root, "examples/js-handler/src/index.js"),
  compatibilityDate: "2026-08-01",
  outboundService: (request) => target.handle(request),
}];

const notify = (path, message) => ({ type: "notify", endpoint: `${TARGET}${path}`, message });

for (const mode of ["strict", "lock"]) {
  test(`${mode} mode: a JS service handler runs its jobs in key order, retries, snoozes and dead-letters`, async () => {
    const w = await start({
      vars: { ORDERING_MODE: mode, SERVICE_HANDLERS: "notify=APP" },
      extraWorkers: jsHandler,
      serviceBindings: { APP: { name: "js-handler", entrypoint: "Handler" } },
    });
    try {
      const r = await w.api("POST", "/jobs", { jobs: [
        { payload: notify("/ok/n1", "first"), ordering_key: "acct/1" },
        { payload: notify("/fail/1/n2", "second"), ordering_key: "acct/1" },
        { payload: notify("/limit/1/n3", "third"), ordering_key: "acct/1" },
        { payload: notify("/ok/n4", "fourth"), ordering_key: "acct/1" },
        { payload: notify("/status/404/n5", "refused") },
      ] });
      assert.equal(r.status, 202, r.text);
      const [n1, n2, n3, n4, n5] = r.json.jobs.map((j) => j.id);
      for (const id of [n1, n2, n3, n4]) await waitFor(async () => (await w.job(id))?.status === "DONE", `${id} DONE`);
      await waitFor(async () => (await w.job(n5))?.status === "DEAD", "the refused job DEAD");

      // Delivered once each, in the key's order (a failed or snoozed job holds its key).
      const delivered = w.target.requests.filter((q) => q.path.startsWith("/ok/") || (q.path.match(/^\/(fail|limit)\//) && q.body));
      const firstSuccess = ["n1", "n2", "n3", "n4"].map((n) => w.target.requests.findLastIndex((q) => q.path.endsWith(`/${n}`)));
      assert.deepEqual([...firstSuccess].sort((a, b) => a - b), firstSuccess, `in order: ${delivered.map((q) => q.path)}`);
      const sent = JSON.parse(w.target.to("/ok/n1")[0].body);
      assert.deepEqual(sent, { message: "first", key: "acct/1", attempt: 1 });
      assert.equal(w.target.to("/ok/n1")[0].headers["idempotency-key"], n1);

      // The failure was retried (attempt 2); the rate limit was snoozed (attempt 1, no attempt spent).
      const got = async (id) => (await w.api("GET", `/jobs/${id}`)).json;
      const retried = await got(n2);
      assert.deepEqual(retried.history.map((e) => [e.outcome, e.http_status]), [["retry", 503], ["done", 200]]);
      const snoozed = await got(n3);
      assert.equal(snoozed.job.attempts, 1, "a snooze spends no attempt");
      assert.deepEqual(snoozed.history.map((e) => [e.outcome, e.attempt, e.http_status]), [["snooze", 1, 202], ["done", 1, 200]]);
      assert.deepEqual((await got(n1)).job.result, { delivered: true, status: 200 });
      const refused = await w.job(n5);
      assert.match(refused.last_error, /HTTP 422: the endpoint refused the message: HTTP 404/);
      assert.equal(refused.attempts, 1, "a permanent answer is not retried");
    } finally {
      await w.dispose();
    }
  });
}

test("a SERVICE_HANDLERS binding the worker does not have is a configuration error, not a dead job", async () => {
  const w = await start({ vars: { SERVICE_HANDLERS: "notify=MISSING" } });
  try {
    // Refused at submission, naming the binding: its jobs could never run.
    const r = await w.api("POST", "/jobs", { payload: notify("/ok/x", "x") });
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.error, /configuration error: SERVICE_HANDLERS names binding "MISSING" for type "notify"/);
    // One sent straight to the queue is not dead-lettered: the batch waits for the binding.
    await w.queue.send({ __orderly_job__: { id: "direct" }, ...notify("/ok/y", "y") }, { contentType: "json" });
    await waitFor(() => w.events().find((e) => e.event === "config_error" && /MISSING/.test(e.message)), "a config_error line");
    assert.equal(await w.job("direct"), null, "nothing is recorded, let alone dead-lettered, for a missing binding");
    assert.equal((await w.api("POST", "/jobs", { payload: { type: "webhook", url: "https://x.test/", body: {} } })).status, 202);
    const unknown = await w.api("POST", "/jobs", { payload: { type: "fax" } });
    assert.match(unknown.json.error, /unknown job type "fax" \(known: webhook, notify\)/);
  } finally {
    await w.dispose();
  }
});

test("a service handler past the timeout is aborted, so its run never overlaps the retry", async () => {
  // A handler that sleeps `ms`, then reports "finished" to the target. With
  // WEBHOOK_TIMEOUT_SECONDS = 1, orderly records a retry of the 3 s job after 1 s; four 0.9 s jobs
  // of another key keep the invocation alive past 3 s, so an unaborted call would finish then.
  const slow = (target) => [{
    name: "slow-handler", modules: true, compatibilityDate: "2026-08-01",
    script: `import { WorkerEntrypoint } from "cloudflare:workers";
      export class Handler extends WorkerEntrypoint {
        async fetch(request) {
          const job = await request.json();
          const ms = job.attempt === 1 ? job.payload.ms : 0;
          await new Promise((r) => setTimeout(r, ms));
          await fetch("${TARGET}/ok/finished-" + job.payload.name + "-" + job.attempt);
          return Response.json({ attempt: job.attempt });
        }
      }
      export default { fetch() { return new Response("no", { status: 404 }); } };`,
    outboundService: (request) => target.handle(request),
  }];
  const w = await start({
    vars: { SERVICE_HANDLERS: "slow=SLOW", WEBHOOK_TIMEOUT_SECONDS: "1" },
    extraWorkers: slow,
    serviceBindings: { SLOW: { name: "slow-handler", entrypoint: "Handler" } },
  });
  try {
    const keep = [1, 2, 3, 4].map((n) => ({ payload: { type: "slow", ms: 900, name: `keep${n}` }, ordering_key: "keep" }));
    const r = await w.api("POST", "/jobs", { jobs: [{ payload: { type: "slow", ms: 3000, name: "slow" } }, ...keep] });
    assert.equal(r.status, 202, r.text);
    for (const j of r.json.jobs) await waitFor(async () => (await w.job(j.id))?.status === "DONE", `${j.id} done`, 30_000);
    await new Promise((r) => setTimeout(r, 3500));
    const slowRuns = w.target.requests.map((q) => q.path).filter((p) => p.includes("finished-slow"));
    assert.deepEqual(slowRuns, ["/ok/finished-slow-2"], "the timed-out run was stopped; only the retry finished");
    assert.equal(w.target.requests.filter((q) => q.path.includes("finished-keep")).length, 4);
  } finally {
    await w.dispose();
  }
});
