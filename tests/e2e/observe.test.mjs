// Each attempt observed (design §27.5), end to end on D1 and on four Durable Object shards: with an
// `ORDERLY_METRICS` Analytics Engine binding, every finished attempt writes one data point (type,
// outcome, queue wait, run time, attempt), features combined: a sealed job, a retried one, a dead
// one, a cancelled one and a batch's callback, each with its own outcome. Miniflare's own dataset
// binding takes writes and keeps nothing, so the binding here is a recording stand-in that refuses
// what Analytics Engine refuses (its documented limits), and writes each point as a log line the
// test reads. Runs under miniflare's workerd, whose `ctx.tracing` (enterSpan, startActiveSpan) is
// called for every span: the runs' spans are opened and ended with no error there.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { start, webhook, waitFor, TARGET, TOKEN } from "./harness.mjs";
import { documentedColumns } from "./analytics-sql.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const PAYLOAD_KEY = `k1:${Buffer.alloc(32, 7).toString("base64")}`;

/** Analytics Engine's limits on one data point (developers.cloudflare.com/analytics/analytics-engine/limits). */
const RECORDER = `
export default function () {
  return {
    writeDataPoint(p = {}) {
      const { blobs = [], doubles = [], indexes = [] } = p;
      if (blobs.length > 20 || doubles.length > 20) throw new TypeError("over 20 blobs or doubles");
      if (indexes.length > 1) throw new TypeError("more than one index");
      if (indexes.some((i) => new TextEncoder().encode(i).length > 96)) throw new TypeError("an index over 96 bytes");
      if (blobs.reduce((n, b) => n + new TextEncoder().encode(String(b)).length, 0) > 16_384) throw new TypeError("blobs over 16 KB");
      if (doubles.some((d) => typeof d !== "number" || !Number.isFinite(d))) throw new TypeError("a double that is not a number");
      console.log(JSON.stringify({ test_data_point: { blobs, doubles, indexes } }));
    },
  };
}`;

const recorded = (w) =>
  w.logs.flatMap(({ message }) => {
    try {
      const p = JSON.parse(message).test_data_point;
      return p ? [p] : [];
    } catch {
      return [];
    }
  });

test("every finished attempt is one data point with its outcome: done, retry, snooze, dead, cancelled, a sealed job and a batch callback", async () => {
  const w = await start({
    vars: { PAYLOAD_KEY, SERVICE_HANDLERS: "notify=APP" },
    // examples/js-handler's Worker runs "notify" jobs; the target's /limit/1/ path has it snooze once.
    extraWorkers: (target) => [
      { name: "metrics-recorder", modules: true, script: RECORDER },
      { name: "js-handler", modules: true, scriptPath: join(root, "examples/js-handler/src/index.js"), compatibilityDate: "2026-08-01",
        outboundService: (request) => target.handle(request) },
    ],
    serviceBindings: { APP: { name: "js-handler", entrypoint: "Handler" } },
    workerOptions: { wrappedBindings: { ORDERLY_METRICS: { scriptName: "metrics-recorder" } } },
  });
  try {
    const r = await w.api("POST", "/jobs", { jobs: [
      { id: "obs-ok", payload: webhook("/ok/obs-ok"), ordering_key: "alice" },
      { id: "obs-flaky", payload: webhook("/fail/1/obs-flaky") },
      { id: "obs-dead", payload: webhook("/status/404/obs-dead") },
      { id: "obs-sealed", payload: webhook("/ok/obs-sealed"), sensitive: true },
      { id: "obs-held", payload: webhook("/hold/30000/obs-held") },
      { id: "obs-nap", payload: { type: "notify", endpoint: `${TARGET}/limit/1/obs-nap`, message: "later, please" } },
    ], then: { id: "obs-then", payload: webhook("/ok/obs-then") } });
    assert.equal(r.status, 202, r.text);
    await waitFor(() => w.target.to("/hold/30000/obs-held").length === 1, "the held webhook running");
    assert.equal((await w.api("POST", "/jobs/obs-held/cancel")).status, 202, "a running job: asked to stop");
    for (const id of ["obs-ok", "obs-flaky", "obs-dead", "obs-sealed", "obs-held", "obs-nap", "obs-then"]) {
      await waitFor(async () => ["DONE", "DEAD"].includes((await w.job(id))?.status), `${id} finished`, 30_000);
    }
    // The callback's point is written as its run ends, a moment after its row is DONE.
    await waitFor(() => recorded(w).length >= 9, "nine data points", 10_000);
    const points = recorded(w);
    const outcomes = points.map((p) => p.blobs[1]).sort();
    assert.deepEqual(outcomes, ["cancelled", "dead", "done", "done", "done", "done", "done", "retry", "snooze"], JSON.stringify(points));
    // Each point has the fields docs/operations.md's table names, which the docs' SQL and the
    // Grafana dashboard read (grafana.test.mjs).
    const columns = documentedColumns();
    const count = (kind) => columns.filter((c) => c.startsWith(kind)).length;
    for (const p of points) {
      assert.deepEqual([p.blobs.length, p.doubles.length, p.indexes.length], [count("blob"), count("double"), count("index")], JSON.stringify(p));
      assert.ok(["webhook", "notify"].includes(p.blobs[0]), JSON.stringify(p));
      assert.deepEqual(p.indexes, [p.blobs[0]], JSON.stringify(p));
      const [wait, run, attempt, priority] = p.doubles;
      assert.ok(wait >= 0 && run >= 0 && attempt >= 1 && priority >= 0, JSON.stringify(p));
    }
    // The snooze and the run after it: both attempt 1 (a snooze spends no attempt).
    const notify = points.filter((p) => p.blobs[0] === "notify").map((p) => [p.blobs[1], p.doubles[2]]);
    assert.deepEqual(notify, [["snooze", 1], ["done", 1]]);
    const retried = points.filter((p) => p.doubles[2] === 2);
    assert.equal(retried.length, 1, "the flaky job's second attempt counts as attempt 2");
    const held = points.find((p) => p.blobs[1] === "cancelled");
    assert.ok(held.doubles[1] >= 500, `the cancelled run ran until it was stopped: ${held.doubles[1]} ms`);
    // Nothing of a sealed job's payload reaches a data point: its type and numbers only.
    assert.ok(!JSON.stringify(points).includes("obs-sealed"));
  } finally {
    await w.dispose();
  }
});

test("with miniflare's own Analytics Engine binding, jobs run and record as without one", async () => {
  const w = await start({ workerOptions: { analyticsEngineDatasets: { ORDERLY_METRICS: { dataset: "orderly" } } } });
  try {
    assert.equal((await w.api("POST", "/jobs", { id: "ae-ok", payload: webhook("/fail/1/ae-ok") })).status, 202);
    await waitFor(async () => (await w.job("ae-ok"))?.status === "DONE", "DONE through the real binding", 30_000);
    assert.equal((await w.job("ae-ok")).attempts, 2);
    assert.ok(!w.logs.some((l) => /writeDataPoint|TypeError/.test(l.message)), JSON.stringify(w.logs.slice(-5)));
  } finally {
    await w.dispose();
  }
});
