// A ledger's life (design "The ledger's life"): what an operator, a producer or the dashboard
// polls costs the open work or a constant, never the history. The same open work is read on
// miniflare's D1, which bills rows as D1 does (`meta.rows_read`, index entries included), over a
// history of 20,000 finished jobs and then of 200,000, every one its own ordering key and a
// fiftieth of them DEAD; the rows each polled statement reads may grow at most 1.5x. (Before the
// tally of migration 0020 the counts read x9.98.)
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { Miniflare } from "miniflare";
import { migrate, ONCE } from "./harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const sql = (name) => readFileSync(join(root, "src/ledger/sql", `${name}.sql`), "utf8");

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** Finished jobs `from`..`to` (ids), finished two days ago and earlier: each its own key. */
const GROW = `WITH RECURSIVE n(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
INSERT INTO job (id, type, status, ordering_key, max_attempts, attempts, next_run_at, created_at, updated_at,
                 finished_at, started_at, ran_by, last_error)
SELECT 'old-' || i, 'type-' || (i % 7), CASE WHEN i % 50 = 0 THEN 'DEAD' ELSE 'DONE' END, 'key-' || i, 1, 1,
       ?3 - i * 10, ?3 - i * 10, ?3 - i * 10, ?3 - i * 10, ?3 - i * 10, 'inv-old',
       CASE WHEN i % 50 = 0 THEN 'failed' END
FROM n`;

/** The open work: 40 PENDING jobs, unkeyed and keyed, due now. */
const OPEN = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40)
INSERT INTO job (id, type, status, ordering_key, max_attempts, next_run_at, created_at, updated_at)
SELECT 'open-' || i, 'webhook', 'PENDING', CASE WHEN i % 2 = 0 THEN 'open-key-' || i END, 5, ?1, ?1, ?1 FROM n`;

/** Every statement a poll runs: GET /jobs/counts, GET /metrics, the dashboard's charts. */
function polled(now) {
  return {
    counts: [sql("counts")],
    metrics: [sql("metrics_jobs"), now, "block"],
    "blocked keys": [sql("blocked_keys"), 200],
    "activity (jobs)": [sql("activity_jobs"), now - HOUR],
    "activity (runs)": [sql("activity_runs"), now - HOUR],
    "run times": [sql("run_times"), now - HOUR, 500],
  };
}

async function rowsRead(db, now) {
  const out = {};
  for (const [name, [text, ...args]] of Object.entries(polled(now))) {
    const r = await db.prepare(text).bind(...args).all();
    out[name] = r.meta.rows_read;
  }
  return out;
}

test("what a poll reads grows at most 1.5x from 20,000 finished jobs to 200,000", ONCE, async () => {
  const mf = new Miniflare({ modules: true, script: "export default { fetch() { return new Response('') } }", d1Databases: ["DB"], cf: false });
  try {
    const db = await mf.getD1Database("DB");
    await migrate(db);
    const now = Date.now();
    await db.prepare(OPEN).bind(now).run();
    await db.prepare(GROW).bind(1, 20_000, now - 2 * DAY).run();
    const small = await rowsRead(db, now);
    for (let from = 20_001; from <= 200_000; from += 60_000) {
      await db.prepare(GROW).bind(from, Math.min(from + 59_999, 200_000), now - 2 * DAY).run();
    }
    const large = await rowsRead(db, now);
    console.log(`rows read per poll statement at 20,000 / 200,000 finished jobs: ${JSON.stringify({ small, large })}`);
    // The counts are still right: the tally holds what the rows say.
    const counts = Object.fromEntries((await db.prepare(sql("counts")).all()).results.map((r) => [r.status, r.n]));
    assert.deepEqual(counts, { PENDING: 40, DONE: 196_000, DEAD: 4_000 });
    for (const name of Object.keys(small)) {
      assert.ok(large[name] <= Math.max(1.5 * small[name], small[name] + 10), `${name}: ${small[name]} rows read at 20,000 finished jobs, ${large[name]} at 200,000`);
    }
  } finally {
    await mf.dispose();
  }
});

// The same through the worker itself (bench/ledger.mjs, the scale bench's own measure): its
// counts, a scrape, the dashboard's poll and a new job's life read what they read at 20,000
// finished jobs at 200,000; a cron tick reads per job it purges (plus one) what it read, and
// purges all 9,800 DONE jobs past retention in one run (at least a minute's intake of one D1,
// 7,500). Before purge_tally.sql read its jobs once, a tick read 28 rows per job purged.
test("the worker's polls, a job's life and a cron tick read the same per call from 20,000 finished jobs to 200,000", ONCE, async () => {
  const { measureLedger } = await import("../../bench/ledger.mjs");
  const [small, large] = await measureLedger([20_000, 200_000], 10_000);
  console.log(`the worker at 20,000 / 200,000 finished jobs: ${JSON.stringify({ small, large })}`);
  const perJob = (x) => x.read / (x.purged + 1);
  for (const [name, a, b] of [
    ["counts", small.counts.read, large.counts.read],
    ["scrape", small.metrics.read, large.metrics.read],
    ["dashboard poll", small.dashboard.read, large.dashboard.read],
    ["job life", small.life.read, large.life.read],
    ["tick per job purged", perJob(small.tick), perJob(large.tick)],
    ["idle tick", small.idle.read, large.idle.read],
  ]) {
    assert.ok(b <= 1.5 * a, `${name}: ${a} rows read at 20,000 finished jobs, ${b} at 200,000`);
  }
  for (const r of [small, large]) {
    // The 200 DEAD jobs past RETENTION_DAYS are kept until DEAD_RETENTION_DAYS.
    assert.equal(r.tick.purged, 9_800, `one tick purges every DONE job past retention at ${r.size}`);
    assert.ok(perJob(r.tick) <= 20, `a tick reads ${perJob(r.tick).toFixed(1)} rows per job it purges at ${r.size}`);
  }
});
