// The benchmark's cost counter (design §15) checked against one job worked out by hand: an unkeyed
// job sent straight to the queue, run once by lock mode, then purged, is exactly these nine D1
// statements (and the two of the isolate's schema check, its first) (a success writes no history row: its DONE row describes it), one queue message (a write, a read, a delete) and no KV operation. Each statement's
// billed rows are taken from D1 itself, run alone on a fresh ledger; the benchmark's figure for
// the job must be their sum, so a counter that drops or double-counts anything is seen.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { Miniflare } from "miniflare";
import { migrate, ONCE } from "./harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const sql = (name) => readFileSync(join(root, "src/ledger/sql", `${name}.sql`), "utf8");

test("the benchmark counts one job's D1 rows, statements and queue operations as worked out by hand", ONCE, async () => {
  // By hand: the job's life, statement by statement, as lock mode and the purge run them.
  const mf = new Miniflare({ modules: true, script: "export default { fetch() { return new Response('') } }", d1Databases: ["DB"], cf: false });
  let byHand = { written: 0, read: 0, statements: 0 };
  try {
    const db = await mf.getD1Database("DB");
    await migrate(db);
    const now = Date.now();
    const payload = JSON.stringify({ type: "webhook", url: "http://target.test/hook", body: {} });
    const life = [
      // Once per isolate, before its first statement: the D1 ledger's schema check (ledger/schema.rs).
      ["CREATE TABLE IF NOT EXISTS d1_migrations(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE, applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL)"],
      ["SELECT name FROM d1_migrations ORDER BY id"],
      // ... priority, limit_key, deadline_at, timeout_seconds, sent_at (claim.sql's params).
      [sql("claim"), "job-1", "webhook", null, null, payload, 8, "inv-1", now + 120_000, now, now + 2_000, 5, null, null, null, now],
      [sql("get"), "job-1"],
      [sql("complete"), "job-1", "inv-1", now + 5, '{"status":200}', 200, now + 1],
      // The cancel rule rides with every run's transition (design §22.1): it reads the row, changes nothing.
      [sql("settle_cancelled"), "job-1", now + 5],
      ...["purge_tally", "purge_events", "purge_waits", "purge_batches", "purge"].map((s) => [sql(s), 0, now + 10, "DONE", 1000, 0]),
    ];
    for (const [text, ...args] of life) {
      const r = await db.prepare(text).bind(...args).run();
      byHand = { written: byHand.written + r.meta.rows_written, read: byHand.read + r.meta.rows_read, statements: byHand.statements + 1 };
    }
    // D1 bills a row for each table row written and each index entry inserted (migration 0007):
    // the insert writes the row and its job_created and job_open entries, the completion the row
    // its job_finished entry and its type's tally row (migration 0020), the purge the row and
    // the tally row once for its batch.
    assert.equal(byHand.written, 3 + 3 + 2, "rows written over the job's life");
  } finally {
    await mf.dispose();
  }

  process.env.BENCH_MESSAGES = "1";
  process.env.BENCH_HANDLER_MS = "0";
  const bench = await import("../../bench/run.mjs");
  bench.install();
  const got = await bench.measure("lock-direct", "unkeyed", 1);
  assert.deepEqual(
    { written: got.d1RowsWritten, read: got.d1RowsRead, statements: got.d1Statements, queueOps: got.queueOps, kv: got.kvReads + got.kvWrites },
    { written: byHand.written, read: byHand.read, statements: byHand.statements, queueOps: 3, kv: 0 },
  );
});

test("the benchmark's observation switch hides only the tracing API, and its CPU counter counts workerd's time", ONCE, async () => {
  // `-bare` consumers: orderly is handed the event context without `tracing` (design §27.5);
  // the rest of the context works as before, on the real context.
  const { context } = await import("../../bench/counting.mjs");
  const calls = [];
  const ctx = { tracing: { enterSpan() {} }, waitUntil(p) { calls.push(this === ctx && p); } };
  assert.equal(context(ctx, {}), ctx, "spans: the context as workerd gives it");
  const bare = context(ctx, { BENCH_OBSERVE: "bare" });
  assert.equal(typeof Reflect.get(bare, "tracing"), "undefined", "bare: no tracing API");
  assert.ok(!("tracing" in bare), "bare: not even its name");
  const p = Promise.resolve();
  bare.waitUntil(p);
  assert.deepEqual(calls, [p], "waitUntil still reaches the real context");

  // The counter: a worker that computes for a while shows as workerd CPU time; one that idles, not.
  const { workerdCpuMs } = await import("../../bench/run.mjs");
  const script = `export default { fetch(r) {
    let x = 0; const n = Number(new URL(r.url).searchParams.get("n"));
    for (let i = 0; i < n; i++) x = (x * 31 + i) | 0;
    return new Response(String(x));
  } }`;
  const mf = new Miniflare({ modules: true, script, cf: false });
  try {
    await (await mf.dispatchFetch("http://bench.test/?n=1")).text();
    const before = workerdCpuMs();
    await new Promise((r) => setTimeout(r, 300));
    const idle = workerdCpuMs() - before;
    const t0 = performance.now();
    await (await mf.dispatchFetch("http://bench.test/?n=300000000")).text();
    const wall = performance.now() - t0;
    const busy = workerdCpuMs() - before - idle;
    assert.ok(idle < 100, `idle for 300 ms: ${idle} ms of CPU`);
    // A fixed computation's CPU time hardly moves when other processes share the cores (its wall
    // time does): at least 100 ms of it, and no more than the time it took.
    assert.ok(busy >= 100 && busy <= wall + 50, `computing for ${wall.toFixed(0)} ms: ${busy} ms of CPU`);
  } finally {
    await mf.dispose();
  }
});
