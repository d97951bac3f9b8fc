// The ledger's life at scale (design "The ledger's life"): what the worker's own polled calls and
// its cron tick cost on a D1 ledger with a long history, at each of several sizes. For each size a
// fresh ledger is grown, in SQL, to that many finished jobs (each its own ordering key, a fiftieth
// of them DEAD, all finished within retention), with 40 open jobs and `due` more finished jobs past
// retention; then, through the real worker behind the benchmark's counting bindings, it measures
// the rows D1 bills (`meta.rows_read` / `meta.rows_written`, index entries included) for:
//   - `GET /jobs/counts` (also Fedify's `getDepth`) and one `GET /metrics` scrape;
//   - the dashboard's poll (every call its refresh makes, every 5 s while open);
//   - one new job's whole life (submitted, run by lock mode);
//   - one cron tick with `due` jobs past retention (the purge's rate: jobs purged per tick), and
//     one tick with nothing to purge (maintenance alone).
//
//   node bench/ledger.mjs                       (BENCH_LEDGER_SIZES=20000,200000,1000000 BENCH_LEDGER_DUE=10000)
// `npm run bench` runs it after the consumers' tables (the `ledger` workload, on by default).
import { startConsumer, target, drain, install } from "./run.mjs";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
/** The worker's default RETENTION_DAYS (src/config.rs). */
const RETENTION_DAYS = 7;
const TOKEN = "bench-token-0123456789";
/** The sizes measured, and the jobs past retention at each (a minute's intake at 125 jobs/s, what
 * one D1 takes in, is 7,500). */
export const LEDGER_SIZES = (process.env.BENCH_LEDGER_SIZES ?? "20000,200000,1000000").split(",").map(Number);
export const LEDGER_DUE = Number(process.env.BENCH_LEDGER_DUE ?? 10_000);

/** Finished jobs `?1`..`?2` (their ids), the last finished at `?3`, 10 ms apart, each its own key. */
const GROW = `WITH RECURSIVE n(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
INSERT INTO job (id, type, status, ordering_key, max_attempts, attempts, next_run_at, created_at, updated_at,
                 finished_at, started_at, ran_by, last_error)
SELECT ?4 || i, 'type-' || (i % 7), CASE WHEN i % 50 = 0 THEN 'DEAD' ELSE 'DONE' END, ?4 || 'key-' || i, 1, 1,
       ?3 - i * 10, ?3 - i * 10, ?3 - i * 10, ?3 - i * 10, ?3 - i * 10, 'inv-old',
       CASE WHEN i % 50 = 0 THEN 'failed' END
FROM n`;

/** The open work: 40 PENDING jobs due in an hour, unkeyed and keyed (not yet overdue: a tick
 * leaves them alone, as it would a healthy backlog's). */
const OPEN = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40)
INSERT INTO job (id, type, status, ordering_key, max_attempts, next_run_at, created_at, updated_at)
SELECT 'open-' || i, 'webhook', 'PENDING', CASE WHEN i % 2 = 0 THEN 'open-key-' || i END, 5, ?1 + ${HOUR}, ?1, ?1 FROM n`;

/** The calls the dashboard's refresh makes (src/dashboard.html), in one poll. */
const DASHBOARD = ["/jobs/counts", "/jobs/activity", "/jobs?limit=50", "/keys?state=blocked&limit=50", "/keys?state=paused&limit=50",
  "/limits?limit=50", "/jobs?status=DEAD&limit=50", "/schedules"];

/** Grows `db` to `size` finished jobs within retention and `due` past it, in statements of at most
 * 50,000 rows (each one transaction). */
async function grow(db, size, due, now) {
  const step = 50_000;
  for (let from = 1; from <= size; from += step) {
    await db.prepare(GROW).bind(from, Math.min(from + step - 1, size), now - DAY, "old-").run();
  }
  for (let from = 1; from <= due; from += step) {
    await db.prepare(GROW).bind(from, Math.min(from + step - 1, due), now - (RETENTION_DAYS + 1) * DAY, "due-").run();
  }
}

/** What `fn` cost the worker in D1: rows read and written, statements. */
async function counted(mf, fn) {
  await mf.dispatchFetch("http://bench.test/__reset");
  const t0 = performance.now();
  await fn();
  const ms = performance.now() - t0;
  const s = await (await mf.dispatchFetch("http://bench.test/__stats")).json();
  return { read: s.d1RowsRead, written: s.d1RowsWritten, statements: s.d1Statements, ms };
}

async function call(mf, path, init = {}) {
  const res = await mf.dispatchFetch(`http://bench.test${path}`, { ...init, headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" } });
  if (res.status >= 300) throw new Error(`${path} answered ${res.status}: ${await res.text()}`);
  return res.text();
}

async function finished(db, prefix) {
  return (await db.prepare("SELECT count(*) AS n FROM job WHERE id LIKE ?1").bind(`${prefix}%`).first()).n;
}

/** One size: a fresh ledger grown to `size` finished jobs (and `due` past retention), measured. */
export async function measureSize(size, due) {
  const t = target();
  const { mf, worker } = await startConsumer("lock", t, false, null);
  try {
    const db = await mf.getD1Database("DB");
    const now = Date.now();
    await db.prepare(OPEN).bind(now).run();
    await grow(db, size, due, now);
    const out = { size, due };
    out.counts = await counted(mf, () => call(mf, "/jobs/counts"));
    out.metrics = await counted(mf, () => call(mf, "/metrics"));
    out.dashboard = await counted(mf, () => Promise.all(DASHBOARD.map((p) => call(mf, p))));
    out.life = await counted(mf, async () => {
      await call(mf, "/jobs", { method: "POST", body: JSON.stringify({ payload: { type: "webhook", url: "http://target.test/hook", body: { key: null, seq: 1 } } }) });
      const sent = await (await mf.dispatchFetch("http://bench.test/__outbox")).json();
      await drain(mf, worker, sent, 1);
    });
    out.tick = await counted(mf, () => worker.scheduled({ cron: "* * * * *" }));
    out.tick.purged = due - (await finished(db, "due-"));
    if (process.env.BENCH_PROFILE === "1") {
      // Where the tick's rows go, by statement (each SQL file's first line).
      console.error(`the tick at ${size}: ${JSON.stringify(await (await mf.dispatchFetch("http://bench.test/__profile")).json(), null, 1)}`);
    }
    out.idle = await counted(mf, () => worker.scheduled({ cron: "* * * * *" }));
    out.idle.purged = due - out.tick.purged - (await finished(db, "due-"));
    return out;
  } finally {
    await mf.dispose();
  }
}

/** Each size in `sizes`, measured. */
export async function measureLedger(sizes, due) {
  install();
  const out = [];
  for (const size of sizes) {
    out.push(await measureSize(size, due));
    console.error(`done: ledger at ${size} finished jobs`);
  }
  return out;
}

/** The table `npm run bench` prints: rows per call and per tick at each size, and the growth. */
export function ledgerTable(results) {
  const first = results[0];
  const g = (x, a) => (a > 0 ? (x / a).toFixed(2) : "-");
  const rows = [["finished jobs", "counts read", "scrape read", "dashboard poll read", "job life read / written", "tick: purged, read, written, ms",
    "tick read per (purged + 1)", "idle tick read", "growth from the first (counts, scrape, poll, life, tick per job)"]];
  for (const r of results) {
    const perJob = (x) => x.read / (x.purged + 1);
    rows.push([String(r.size), String(r.counts.read), String(r.metrics.read), String(r.dashboard.read), `${r.life.read} / ${r.life.written}`,
      `${r.tick.purged}, ${r.tick.read}, ${r.tick.written}, ${Math.round(r.tick.ms)}`, perJob(r.tick).toFixed(1), String(r.idle.read),
      [g(r.counts.read, first.counts.read), g(r.metrics.read, first.metrics.read), g(r.dashboard.read, first.dashboard.read),
        g(r.life.read, first.life.read), g(perJob(r.tick), perJob(first.tick))].join(", ")]);
  }
  const w = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r) => "| " + r.map((c, i) => c.padEnd(w[i])).join(" | ") + " |").join("\n");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const results = await measureLedger(LEDGER_SIZES, LEDGER_DUE);
  console.log(`\nThe ledger's life on miniflare's D1: ${LEDGER_DUE} finished jobs past retention and 40 open jobs at each size; rows as D1 bills them\n`);
  console.log(ledgerTable(results));
}
