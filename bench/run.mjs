// The benchmark (design §10): orderly in lock mode and in strict mode, a consumer following Fedify's
// documented algorithm, and an ack-only floor, side by side in one run, under miniflare.
//
// Queues itself is modelled here so that consumer concurrency is a setting (Cloudflare runs up to
// `max_concurrency` invocations at once; miniflare runs one): visible messages are handed out in
// batches of up to 100 to up to C concurrent `queue()` invocations of the real worker, each
// message's ack / retry(delay) is applied as Queues would (with `max_retries` and the dead-letter
// queue), and what the worker sends to its own queue (API submissions, strict mode's wake-ups)
// goes back into the model and counts as deliveries. KV and D1 are miniflare's; the webhook
// target is in-process, answers after a short latency and counts per-key order inversions.
//
// The `urgent` workload (design §12) submits the job count as a normal backlog, then 10 jobs of
// priority 0, and counts how many backlog jobs finish before each urgent one (median): consumers
// ending in `-lane` have the urgent lane (`JOBS_URGENT`, its own queue and C invocations, as
// Cloudflare runs each queue's consumer independently), the others send everything to one queue.
// Lane consumers run only that workload.
//
// The flow-control workloads (design §20). `throttle5` and `throttle100`: jobs on 20 ordering keys
// sharing one limit key throttled to 5/s and 100/s, at C=1 and C=4, with the queue's batch wait
// (wrangler.toml's `max_batch_timeout = 1`: a batch goes out when full or when its oldest visible
// message has waited 1 s); the target times every start, for the achieved rate over the run
// (against the configured one) and the most starts in any one-second window.
// `hotlimit`: 10,000 jobs of one limit key (100 ordering keys, at most 2 running at once) beside
// 50 quiet keys of 10 jobs each arriving over 10 s, against `quiet`, the quiet keys alone: the
// quiet jobs' p95 wait (arrival to first start) in each. In `hotlimit` the quiet jobs arrive with
// the hot burst, behind its 10,000 messages in the queue; in `hotlate` 60 s later, while the hot
// key's parked jobs drain at its limit. These run strict-direct (an arrival time is a message's
// visibility: the burst is in the queue ahead of the quiet jobs) and strict-api (the burst is
// submitted through POST /jobs before the drain, each quiet job at its arrival time: in strict
// mode the burst waits in its limit key's line, design §20.12); lock mode does not drain 10,000
// jobs of one limit key within the drain limit.
//
//   npm run bench
//   BENCH_MESSAGES=1000 BENCH_RUNS=1 BENCH_CONCURRENCY=1,4,16 BENCH_WORKLOADS=hot,keys20,unkeyed,hotfail,urgent,throttle5,throttle100,throttle100burst10,quiet,hotlimit,hotlate,ledger (bench/ledger.mjs)
//   BENCH_CONSUMERS=lock-api,lock-direct,strict-api,strict-direct,shards-api,fedify-direct,floor-direct,lock-api-lane,strict-api-lane
//   (`shards-api`: strict mode, POST /jobs, the ledger on four Durable Object shards)
//   BENCH_CONSUMERS=strict-api-bare,strict-api,strict-api-metrics: orderly observed or not (design
//   §27.5): `-bare` hides the tracing API and has no metrics binding, `-metrics` has miniflare's
//   Analytics Engine dataset; the "workerd CPU ms/job" column is the consumer's workerd processes'
//   CPU time (/proc) from submission to the drain's end, over the jobs
//   BENCH_BEFORE=<another checkout, built> BENCH_CONSUMERS=strict-api,strict-api-before: this
//   build against an earlier one, side by side in one run (a consumer named `-before` runs that
//   checkout's build/); each cell's runs alternate between them
import { Miniflare } from "miniflare";
import { readdirSync, readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { gzipSync } from "node:zlib";
import { fileURLToPath } from "node:url";
import { migrate, MODULES_RULES, WORKER_GZIP_BUDGET, workerSize, writeAtomically } from "../tests/e2e/harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
/** Another checkout, built, whose worker the `-before` consumers run (BENCH_BEFORE). */
const BEFORE = process.env.BENCH_BEFORE;

/** The checkout whose build a consumer runs: this one, or BENCH_BEFORE's for a `-before` one. */
function checkoutOf(parts) {
  if (!parts.includes("before")) return root;
  if (!BEFORE) throw new Error("a -before consumer needs BENCH_BEFORE, the checkout whose build it runs");
  return BEFORE;
}
const MESSAGES = Number(process.env.BENCH_MESSAGES ?? 1000);
const RUNS = Number(process.env.BENCH_RUNS ?? 1);
const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? "1,4,16").split(",").map(Number);
const WORKLOADS = (process.env.BENCH_WORKLOADS ?? "hot,keys20,unkeyed,hotfail,urgent,throttle5,throttle100,throttle100burst10,quiet,hotlimit,hotlate,ledger").split(",");
const CONSUMERS = (process.env.BENCH_CONSUMERS ?? "lock-api,lock-direct,strict-api,strict-direct,shards-api,fedify-direct,floor-direct,lock-api-lane,strict-api-lane").split(",");
const URGENT_JOBS = 10;
/** wrangler.toml's `max_batch_timeout`, modelled for the throttle workloads (the others hand out
 * whatever is visible at once, as their figures always have). */
const BATCH_WAIT_MS = 1000;
/** The flow-control workloads: their policies (`LIMITS`), job counts, and the concurrency they run at. */
/** The hot limit key's concurrency: half the consumer's invocations, so the quiet keys have room
 * (at BENCH_HOT_CONCURRENCY=4 the hot key may hold all four). */
const HOT_CONCURRENCY = Number(process.env.BENCH_HOT_CONCURRENCY ?? 2);
const FLOW = {
  throttle5: { limits: { api: { rate: 5 } }, jobs: 100, batchWaitMs: BATCH_WAIT_MS },
  throttle100: { limits: { api: { rate: 100 } }, jobs: 1000, batchWaitMs: BATCH_WAIT_MS },
  // The same with a burst the size of one invocation's turnaround (about 100 ms at 100/s): at one
  // invocation at a time each batch's first start waits for the invocation before it to end, and
  // a burst of 1 cannot make that up (docs/flow-control.md).
  throttle100burst10: { limits: { api: { rate: 100, burst: 10 } }, jobs: 1000, batchWaitMs: BATCH_WAIT_MS },
  quiet: { limits: { hot: { concurrency: HOT_CONCURRENCY } }, jobs: 0 },
  hotlimit: { limits: { hot: { concurrency: HOT_CONCURRENCY } }, jobs: 10_000 },
  hotlate: { limits: { hot: { concurrency: HOT_CONCURRENCY } }, jobs: 10_000, quietFromMs: 60_000 },
};
/** The concurrencies the flow-control workloads run at: a throttle at one invocation at a time
 * (`max_concurrency = 1`, miniflare's own consumer) as at four; the hot-key workloads at four. */
const flowConcurrency = (name) => (name.startsWith("throttle") ? [1, 4] : [4]);
const QUIET_KEYS = 50;
const QUIET_JOBS_PER_KEY = 10;
const QUIET_ARRIVAL_MS = 10_000;
const arrivalTimed = (name) => name === "quiet" || name.startsWith("hot");
const QUEUES = ["orderly-jobs", "orderly-jobs-urgent"];
const HANDLER_LATENCY_MS = Number(process.env.BENCH_HANDLER_MS ?? 2);
const MAX_BATCH = Number(process.env.BENCH_MAX_BATCH ?? 100);
const MAX_RETRIES = 100; // wrangler.toml's setting, for every consumer
const DRAIN_LIMIT_MS = 600_000;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Cloudflare's list prices, USD (Workers Paid; checked 2026-12-01, docs/performance.md "Cost per job"), and
 * the free plan's daily allowances. */
const PRICE = { d1RowWritten: 1.0 / 1e6, d1RowRead: 0.001 / 1e6, queueOp: 0.4 / 1e6, kvRead: 0.5 / 1e6, kvWrite: 5.0 / 1e6, doRequest: 0.15 / 1e6 };
const FREE_PER_DAY = { d1RowsWritten: 100_000, d1RowsRead: 5_000_000, queueOps: 10_000, kvReads: 100_000, kvWrites: 1_000 };

/** USD per million jobs, and jobs a day within the free plan, from per-job counts. */
function cost(j) {
  const usd = 1e6 * (j.d1RowsWritten * PRICE.d1RowWritten + j.d1RowsRead * PRICE.d1RowRead + j.queueOps * PRICE.queueOp +
    j.kvReads * PRICE.kvRead + j.kvWrites * PRICE.kvWrite + (j.doRequests ?? 0) * PRICE.doRequest);
  const freeJobs = Math.min(...Object.entries(FREE_PER_DAY).map(([k, cap]) => (j[k] > 0 ? cap / j[k] : Infinity)));
  return { usd, freeJobs };
}

/** The ledger's purge of every DONE job now, with the worker's own SQL, as the cron would run it
 * once they are older than RETENTION_DAYS: its billed rows are part of each job's cost. */
async function purge(mf) {
  const db = await mf.getD1Database("DB");
  const sql = (name) => readFileSync(join(root, "src/ledger/sql", `${name}.sql`), "utf8");
  const before = Date.now() + 1;
  const statements = ["purge_tally", "purge_events", "purge_waits", "purge_batches", "purge"];
  const out = await db.batch(statements.map((s) => db.prepare(sql(s)).bind(0, before, "DONE", 1_000_000, 0)));
  return {
    rowsWritten: out.reduce((a, r) => a + (r.meta?.rows_written ?? 0), 0),
    rowsRead: out.reduce((a, r) => a + (r.meta?.rows_read ?? 0), 0),
    statements: out.length,
  };
}

/** Jobs of a workload: key and per-key sequence number; `hotfail` fails every 10th job once;
 * `urgent` is an unkeyed backlog followed by URGENT_JOBS jobs of priority 0; the flow-control
 * workloads give jobs a limit key, and `quiet`'s jobs (also in `hotlimit`) an arrival time. */
function workload(name) {
  if (FLOW[name]) return flowWorkload(name);
  const keyOf = { hot: () => "hot", hotfail: () => "hot", keys20: (i) => `k${i % 20}`, unkeyed: () => null, urgent: () => null }[name];
  const seqs = new Map();
  const count = MESSAGES + (name === "urgent" ? URGENT_JOBS : 0);
  return Array.from({ length: count }, (_, i) => {
    const key = keyOf(i);
    const seq = (seqs.get(key) ?? 0) + 1;
    seqs.set(key, seq);
    const failOnce = name === "hotfail" && seq % 10 === 0;
    const urgent = name === "urgent" && i >= MESSAGES;
    return { key, priority: urgent ? 0 : undefined, payload: { type: "webhook", url: "http://target.test/hook", body: { key, seq, failOnce, urgent } } };
  });
}

function flowWorkload(name) {
  const job = (key, seq, limitKey, extra = {}) =>
    ({ key, limitKey, payload: { type: "webhook", url: "http://target.test/hook", body: { key, seq, ...extra } } });
  const { jobs } = FLOW[name];
  if (name.startsWith("throttle")) return Array.from({ length: jobs }, (_, i) => job(`k${i % 20}`, Math.floor(i / 20) + 1, "api"));
  const hot = Array.from({ length: jobs }, (_, i) => job(`hot-${i % 100}`, Math.floor(i / 100) + 1, "hot"));
  // Quiet jobs arrive evenly over QUIET_ARRIVAL_MS, each key's in order; their limit keys have no policy.
  const n = QUIET_KEYS * QUIET_JOBS_PER_KEY;
  const quiet = Array.from({ length: n }, (_, i) => {
    const arriveMs = (FLOW[name].quietFromMs ?? 0) + Math.floor((i * QUIET_ARRIVAL_MS) / n);
    return { ...job(`q${i % QUIET_KEYS}`, Math.floor(i / QUIET_KEYS) + 1, `quiet-${i % QUIET_KEYS}`, { quiet: true, arriveMs }), arriveMs };
  });
  return [...hot, ...quiet];
}

/** A producer's message body for a job sent straight to the queue (Fedify's envelope when keyed). */
const directBody = ({ key, limitKey, payload }) => {
  const body = key === null ? { ...payload } : { __fedify_ordering_key__: key, __fedify_payload__: payload };
  if (limitKey) body.__orderly_job__ = { limit_key: limitKey };
  return body;
};

/** The webhook target: counts runs, distinct jobs run, and per-key order inversions; times every
 * start, and each quiet job's wait from its arrival (`t.t0` is when the drain began). */
export function target() {
  const t = { runs: 0, inversions: 0, last: new Map(), done: new Set(), attempts: new Map(), backlogDone: 0, urgentAfter: [],
    starts: [], quietWaits: [], t0: Date.now() };
  t.handle = async (request) => {
    const { key, seq, failOnce, urgent, quiet, arriveMs } = await request.json();
    t.runs++;
    t.starts.push(Date.now());
    const id = `${key}/${seq}`;
    if (quiet && !t.attempts.has(id)) t.quietWaits.push(Date.now() - (t.t0 + arriveMs));
    const n = (t.attempts.get(id) ?? 0) + 1;
    t.attempts.set(id, n);
    if (HANDLER_LATENCY_MS > 0) await sleep(HANDLER_LATENCY_MS);
    if (failOnce && n === 1) return new Response("busy", { status: 503, headers: { "retry-after": "0" } });
    if (key !== null) {
      if (seq < (t.last.get(key) ?? 0)) t.inversions++;
      t.last.set(key, Math.max(seq, t.last.get(key) ?? 0));
    }
    if (!t.done.has(id)) {
      // For the urgent workload: how many backlog jobs finished before each urgent one.
      if (urgent) t.urgentAfter.push(t.backlogDone);
      else t.backlogDone++;
    }
    t.done.add(id);
    return new Response("ok");
  };
  return t;
}

/** How much orderly is observed (design §27.5), from a consumer name's last part: `bare`, nothing
 * (the tracing API hidden, no metrics binding); `metrics`, spans and an Analytics Engine dataset
 * (miniflare's); otherwise spans only, as a deployment without the binding. Under local workerd the
 * spans are the real API's calls, recorded nowhere (`isTraced` is false), as with tracing off. */
const observation = (parts) => parts.find((p) => p === "bare" || p === "metrics") ?? "spans";

/** The CPU time (user + system, ms) the workerd processes under this one have used so far: the
 * consumer's worker and its local KV, D1 and Durable Objects, as Linux counts it (/proc). Null
 * where there is no /proc. */
export function workerdCpuMs() {
  let entries;
  try {
    entries = readdirSync("/proc").filter((d) => /^\d+$/.test(d));
  } catch {
    return null;
  }
  const procs = new Map();
  for (const pid of entries) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      // The command sits in parentheses and may hold spaces; the fields after it are fixed.
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      procs.set(Number(pid), { comm, ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) });
    } catch {
      // The process ended between the listing and the read.
    }
  }
  const under = (pid) => {
    for (let p = procs.get(pid)?.ppid; p; p = procs.get(p)?.ppid) if (p === process.pid) return true;
    return false;
  };
  let ticks = 0;
  for (const [pid, p] of procs) if (p.comm === "workerd" && under(pid)) ticks += p.ticks;
  return (ticks * 1000) / CLOCK_TICKS;
}
/** Linux's USER_HZ, the unit of /proc's CPU times: 100 on every architecture Linux runs here. */
const CLOCK_TICKS = 100;

export async function startConsumer(kind, t, lane, limits, observe = "spans", checkout = root) {
  const common = {
    modules: true,
    modulesRules: MODULES_RULES,
    compatibilityDate: "2026-08-01",
    cf: false,
    kvNamespaces: ["ORDERING_KV"],
    outboundService: (req) => t.handle(req),
    modulesRoot: join(checkout, "build"),
    // The workers' log lines: per-batch info is noise here; warnings and errors go to stderr.
    handleStructuredLogs: ({ level, message }) => { if (level !== "info" && level !== "log") console.error(message); },
  };
  const vars = { ADMIN_TOKEN: "bench-token-0123456789", LOCK_RETRY_DELAY_SECONDS: "2", LEASE_SECONDS: "120", BACKOFF_BASE_SECONDS: "1" };
  // `shards`: strict mode with the ledger on four SQLite Durable Objects (LEDGER = "do"), which
  // miniflare runs in process: it measures the shards' overhead against D1, not their scale.
  const orderly = (mode, shards) => new Miniflare({
    ...common,
    scriptPath: join(checkout, "build/bench-orderly.mjs"),
    d1Databases: ["DB"],
    queueProducers: { JOBS: { queueName: "orderly-jobs" } },
    ...(observe === "metrics" ? { analyticsEngineDatasets: { ORDERLY_METRICS: { dataset: "orderly" } } } : {}),
    ...(shards ? { durableObjects: { LEDGER_OBJECT: { className: "OrderlyLedger", useSQLite: true } } } : {}),
    bindings: {
      ...vars,
      ORDERING_MODE: mode,
      BENCH_OBSERVE: observe,
      BENCH_LANE: lane ? "1" : "0",
      ...(limits ? { LIMITS: JSON.stringify(limits) } : {}),
      ...(shards ? { LEDGER: "do", LEDGER_SHARDS: String(shards) } : {}),
    },
  });
  const mf = {
    lock: () => orderly("lock"),
    strict: () => orderly("strict"),
    shards: () => orderly("strict", 4),
    fedify: () => new Miniflare({ ...common, scriptPath: join(root, "build/bench-fedify.mjs") }),
    floor: () => new Miniflare({ ...common, scriptPath: join(root, "build/bench-floor.mjs") }),
  }[kind]();
  await mf.ready;
  if (kind === "lock" || kind === "strict") await migrate(await mf.getD1Database("DB"));
  return { mf, worker: await mf.getWorker() };
}

/** Queues, modelled: per queue, batches of up to 100 visible messages to up to `concurrency`
 * invocations (each queue's consumer scales on its own, as Cloudflare runs them). */
export async function drain(mf, worker, initial, concurrency, timed = [], batchWaitMs = 0) {
  const t0 = Date.now();
  let seq = 0;
  const message = (body, delaySeconds = 0, arriveMs = 0) =>
    ({ id: `m${seq++}`, body, timestamp: new Date(), attempts: 1, visibleAt: Date.now() + delaySeconds * 1000 + arriveMs });
  const pending = Object.fromEntries(QUEUES.map((q) => [q, []]));
  const inflight = Object.fromEntries(QUEUES.map((q) => [q, new Set()]));
  const enqueue = (o) => pending[o.queue ?? "orderly-jobs"].push(message(o.body, o.delaySeconds, o.arriveMs));
  initial.forEach(enqueue);
  const m = { deliveries: 0, deadLettered: 0, batches: 0, acks: 0, maxInflight: 0, submitMs: [], submitLagMs: [] };
  const collect = async () => {
    const out = await (await mf.dispatchFetch("http://bench.test/__outbox")).json();
    out.forEach(enqueue);
  };
  // Jobs submitted through POST /jobs during the drain, each at its arrival time and on its own,
  // as independent producers send them (one after another, a slow answer would delay every later
  // arrival and count as their wait). What a submission sent is handed out at once: `kick` ends
  // the loop's wait.
  let outstanding = timed.length;
  let kicked = false;
  let kick = () => {};
  const submissions = timed.map(async (j) => {
    const arrival = t0 + j.arriveMs;
    await sleep(Math.max(0, arrival - Date.now()));
    const at = Date.now();
    m.submitLagMs.push(at - arrival);
    try {
      await submit(mf, [j]);
      m.submitMs.push(Date.now() - at);
      await collect();
    } finally {
      // A refused submission still counts as ended, so the drain cannot wait for it until its limit;
      // its error ends the run.
      outstanding--;
      kicked = true;
      kick();
    }
  });
  const busy = () => outstanding > 0 || QUEUES.some((q) => pending[q].length > 0 || inflight[q].size > 0);
  while (busy()) {
    if (Date.now() - t0 > DRAIN_LIMIT_MS) throw new Error("drain did not finish in time");
    const now = Date.now();
    let started = false;
    let waitUntil = Infinity;
    for (const q of QUEUES) {
      const visible = pending[q].filter((p) => p.visibleAt <= now);
      if (visible.length === 0 || inflight[q].size >= concurrency) continue;
      // A batch not yet full waits until its oldest message has been visible batchWaitMs.
      const oldest = Math.min(...visible.map((p) => p.visibleAt));
      if (visible.length < MAX_BATCH && now - oldest < batchWaitMs) {
        waitUntil = Math.min(waitUntil, oldest + batchWaitMs);
        continue;
      }
      const batch = visible.slice(0, MAX_BATCH);
      const taken = new Set(batch);
      pending[q] = pending[q].filter((p) => !taken.has(p));
      m.batches++;
      m.deliveries += batch.length;
      const run = worker
        .queue(q, batch.map(({ id, body, timestamp, attempts }) => ({ id, body, timestamp, attempts })))
        .then(async (r) => {
          const retries = new Map(r.retryMessages.map((x) => [x.msgId, x.delaySeconds ?? 0]));
          for (const msg of batch) {
            const retried = retries.has(msg.id) || (r.retryBatch?.retry && !r.explicitAcks.includes(msg.id)) || (r.outcome !== "ok" && !r.explicitAcks.includes(msg.id));
            if (!retried) {
              m.acks++;
              continue;
            }
            if (msg.attempts > MAX_RETRIES) {
              m.deadLettered++;
              continue;
            }
            const delay = retries.get(msg.id) ?? r.retryBatch?.delaySeconds ?? 0;
            pending[q].push({ ...msg, attempts: msg.attempts + 1, visibleAt: Date.now() + delay * 1000 });
          }
          await collect();
        })
        .finally(() => inflight[q].delete(run));
      inflight[q].add(run);
      m.maxInflight = Math.max(m.maxInflight, inflight[q].size);
      started = true;
    }
    if (started) continue;
    const all = QUEUES.flatMap((q) => pending[q]);
    const nextVisible = Math.min(waitUntil, ...all.map((p) => p.visibleAt).filter((v) => v > now), Date.now() + 50);
    if (kicked) {
      kicked = false;
      continue;
    }
    const woken = new Promise((r) => { kick = r; });
    await Promise.race([...QUEUES.flatMap((q) => [...inflight[q]]), woken, sleep(Math.max(1, Math.min(50, nextVisible - Date.now())))]);
    kicked = false;
  }
  await Promise.all(submissions);
  return { ...m, drainMs: Date.now() - t0 };
}

/** Submits jobs through POST /jobs, in chunks of 500. */
async function submit(mf, jobs) {
  for (let i = 0; i < jobs.length; i += 500) {
    const chunk = jobs.slice(i, i + 500).map((j) => ({ payload: j.payload, ordering_key: j.key, priority: j.priority, limit_key: j.limitKey }));
    const res = await mf.dispatchFetch("http://bench.test/jobs", {
      method: "POST",
      headers: { authorization: "Bearer bench-token-0123456789", "content-type": "application/json" },
      body: JSON.stringify({ jobs: chunk }),
    });
    if (res.status !== 202) throw new Error(`POST /jobs answered ${res.status}: ${await res.text()}`);
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const p95 = (xs) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * 0.95))];

/** Handler starts per second from first to last start, and the most starts in any one second
 * (a window [s, s + 1000 ms) from each start). */
function startRate(starts) {
  const s = [...starts].sort((a, b) => a - b);
  let worst = 0;
  for (let i = 0, j = 0; i < s.length; i++) {
    while (j < s.length && s[j] < s[i] + 1000) j++;
    worst = Math.max(worst, j - i);
  }
  const span = s.length > 1 ? (s[s.length - 1] - s[0]) / 1000 : 0;
  const longestGapMs = s.slice(1).reduce((g, t, i) => Math.max(g, t - s[i]), 0);
  return { perSecond: span > 0 ? (s.length - 1) / span : 0, worstWindow: worst, longestGapMs };
}

/** One consumer on one workload at one concurrency: medians over RUNS. */
export async function measure(consumer, name, concurrency) {
  const [kind, path, ...rest] = consumer.split("-");
  const results = [];
  for (let r = 0; r < RUNS; r++) {
    const t = target();
    const { mf, worker } = await startConsumer(kind, t, rest.includes("lane"), FLOW[name]?.limits, observation(rest), checkoutOf(rest));
    // The consumer's workerd alone runs from here to the drain's end (one Miniflare at a time).
    const cpu0 = workerdCpuMs();
    try {
      const jobs = workload(name);
      let initial;
      let submitted = null;
      if (path === "api") {
        // Submitted through POST /jobs (recorded, sequenced, sent): the sends are the messages.
        // Jobs with an arrival time (the quiet keys') are submitted at it, during the drain.
        await submit(mf, jobs.filter((j) => j.arriveMs === undefined));
        initial = await (await mf.dispatchFetch("http://bench.test/__outbox")).json();
        // What the submission cost (its D1 rows; its sends are the queue's first writes) is part
        // of each job's cost; the rest of the stats start from here.
        submitted = await (await mf.dispatchFetch("http://bench.test/__stats")).json();
        await mf.dispatchFetch("http://bench.test/__reset");
      } else {
        initial = jobs.map((j) => ({ body: directBody(j), delaySeconds: 0, arriveMs: j.arriveMs ?? 0 }));
      }
      t.t0 = Date.now();
      const timed = path === "api" ? jobs.filter((j) => j.arriveMs !== undefined) : [];
      const q = await drain(mf, worker, initial, concurrency, timed, FLOW[name]?.batchWaitMs ?? 0);
      // How long a quiet job's own POST /jobs took: part of its wait, from its arrival.
      if (q.submitMs.length) {
        console.log(`${consumer} ${name}: one quiet job's POST /jobs took ${median(q.submitMs)} ms (median), ${p95(q.submitMs)} ms (p95); ` +
          `it began ${median(q.submitLagMs)} ms (median), ${p95(q.submitLagMs)} ms (p95) after its arrival time`);
      }
      const stats = await (await mf.dispatchFetch("http://bench.test/__stats")).json();
      const cpuMs = cpu0 === null ? null : workerdCpuMs() - cpu0;
      const purged = kind === "lock" || kind === "strict" ? await purge(mf) : { rowsWritten: 0, rowsRead: 0, statements: 0 };
      const sub = (k) => submitted?.[k] ?? 0;
      if (process.env.BENCH_PROFILE === "1") {
        // Rows per job by statement (the submission and the purge apart).
        const profile = await (await mf.dispatchFetch("http://bench.test/__profile")).json();
        console.log(`\n${consumer} ${name} C=${concurrency}: per job (submission: ${fmt(sub("d1RowsWritten") / jobs.length)} written, ${fmt(sub("d1RowsRead") / jobs.length)} read; purge: ${fmt(purged.rowsWritten / jobs.length)} written)`);
        for (const [sql, p] of Object.entries(profile).sort((a, b) => b[1].rowsWritten - a[1].rowsWritten)) {
          console.log(`  ${fmt(p.rowsWritten / jobs.length).padStart(7)} w ${fmt(p.rowsRead / jobs.length).padStart(8)} r ${fmt(p.statements / jobs.length).padStart(6)} st  ${sql}`);
        }
      }
      results.push({ ...q, ...stats, cpuMs, jobs: jobs.length, runs: t.runs, inversions: t.inversions, neverRun: jobs.length - t.done.size,
        urgentAfter: t.urgentAfter.length ? median(t.urgentAfter) : null,
        ...startRate(t.starts), quietP95: t.quietWaits.length ? p95(t.quietWaits) : null,
        // Whole life: submission, every delivery and transition, the purge.
        d1RowsWritten: sub("d1RowsWritten") + stats.d1RowsWritten + purged.rowsWritten,
        d1RowsRead: sub("d1RowsRead") + stats.d1RowsRead + purged.rowsRead,
        d1Statements: sub("d1Statements") + stats.d1Statements + purged.statements,
        doRequests: sub("doRequests") + stats.doRequests,
        // Queues bills a write, a read and a delete per message (per 64 KB; these are smaller):
        // every message sent (the producer's, or the API's, and the worker's own wake-ups and
        // re-sends), every delivery (a retry is another read), every ack.
        queueOps: initial.length + stats.sent + q.deliveries + q.acks });
    } finally {
      await mf.dispose();
    }
  }
  const pick = (k) => median(results.map((x) => x[k]));
  const perJob = (k) => pick(k) / results[0].jobs;
  return {
    drainMs: pick("drainMs"),
    cpuMsPerJob: results[0].cpuMs === null ? null : perJob("cpuMs"),
    deliveriesPerJob: perJob("deliveries"),
    kvOpsPerJob: perJob("kvOps"),
    d1PerJob: perJob("d1RoundTrips"),
    inversions: pick("inversions"),
    neverRun: pick("neverRun"),
    deadLettered: pick("deadLettered"),
    runsPerJob: perJob("runs"),
    urgentAfter: results[0].urgentAfter === null ? null : pick("urgentAfter"),
    perSecond: pick("perSecond"),
    worstWindow: pick("worstWindow"),
    longestGapMs: pick("longestGapMs"),
    quietP95: results[0].quietP95 === null ? null : pick("quietP95"),
    d1RowsWritten: perJob("d1RowsWritten"),
    d1RowsRead: perJob("d1RowsRead"),
    d1Statements: perJob("d1Statements"),
    queueOps: perJob("queueOps"),
    kvReads: perJob("kvReads"),
    kvWrites: perJob("kvWrites"),
    doRequests: perJob("doRequests"),
  };
}

const fmt = (x, d = 2) => (Number.isInteger(x) ? String(x) : x.toFixed(d));

/** Puts the benchmark's consumers next to the build output (whole files: see `writeAtomically`). */
export function install() {
  for (const f of ["orderly-entry.mjs:bench-orderly.mjs", "fedify-consumer.mjs:bench-fedify.mjs", "floor-consumer.mjs:bench-floor.mjs", "counting.mjs:counting.mjs"]) {
    const [from, to] = f.split(":");
    for (const checkout of BEFORE ? [root, BEFORE] : [root]) {
      writeAtomically(join(checkout, "build", to), readFileSync(join(root, "bench", from)));
    }
  }
}

/** The worker's size and the time V8 (workerd's engine) takes to compile its module, median of 5. */
function startUp() {
  const { bytes, raw, gzip } = workerSize();
  const times = [];
  for (let i = 0; i < 5; i++) {
    const t0 = performance.now();
    new WebAssembly.Module(bytes);
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return { raw, gzip, compileMs: times[2] };
}

async function main() {
  install();
  const w = startUp();
  console.log(`the worker: ${w.raw} bytes raw, ${w.gzip} bytes gzip (budget ${WORKER_GZIP_BUDGET}, ` +
    `${((100 * w.gzip) / WORKER_GZIP_BUDGET).toFixed(0)}% of it); its module compiles in ${w.compileMs.toFixed(1)} ms (median of 5)\n`);
  if (BEFORE) {
    const before = readFileSync(join(BEFORE, "build/index_bg.wasm"));
    const gzip = gzipSync(before, { level: 9 }).length;
    console.log(`the -before worker (${BEFORE}): ${before.length} bytes raw, ${gzip} bytes gzip; this one is ${w.gzip - gzip >= 0 ? "+" : ""}${w.gzip - gzip} bytes gzip\n`);
  }
  console.log(`${MESSAGES} jobs per workload, median of ${RUNS} run(s), batches of ${MAX_BATCH}, max_retries ${MAX_RETRIES}, ` +
    `handler latency ${HANDLER_LATENCY_MS} ms; api = submitted through POST /jobs, direct = sent straight to the queue\n`);
  const header = ["workload", "C", "consumer", "drain ms", "workerd CPU ms/job", "deliveries/job", "inversions", "never run", "dead-lettered", "KV ops/job", "D1 trips/job", "handler runs/job", "backlog before urgent"];
  const rows = [header];
  const costs = [["workload", "C", "consumer", "D1 rows written/job", "D1 rows read/job", "D1 statements/job", "Queues ops/job", "KV reads/job", "KV writes/job", "DO requests/job", "USD per million jobs", "jobs/day on the free plan"]];
  const drains = new Map();
  const cpus = new Map();
  const flow = [["workload", "C", "consumer", "configured", "starts/s over the run", "achieved/configured", "most starts in 1 s", "longest gap ms", "deliveries/job", "quiet jobs' p95 wait ms"]];
  const quietP95 = new Map();
  for (const name of WORKLOADS.filter((w) => w !== "ledger")) {
    for (const c of FLOW[name] ? flowConcurrency(name) : CONCURRENCY) {
      for (const consumer of CONSUMERS) {
        // The lane only matters for urgent jobs; the urgent workload needs submissions (priority).
        if (name === "urgent" ? !consumer.includes("-api") : consumer.endsWith("-lane")) continue;
        // Limits are orderly's; an arrival time is a direct message's visibility.
        // Lock mode does not drain hotlimit's 10,000 jobs within DRAIN_LIMIT_MS (its followers
        // poll a held key): the quiet keys' comparison is strict mode's.
        if (FLOW[name] && (consumer.startsWith("fedify") || consumer.startsWith("floor") || (arrivalTimed(name) && consumer !== "strict-direct" && consumer !== "strict-api"))) continue;
        const x = await measure(consumer, name, c);
        if (FLOW[name]) {
          const api = FLOW[name].limits.api;
          const t = (v) => (api ? v : "-");
          flow.push([name, String(c), consumer, api ? `${api.rate}/s, burst ${api.burst ?? 1}` : `hot: concurrency ${HOT_CONCURRENCY}`, t(fmt(x.perSecond)),
            t(fmt(x.perSecond / (api?.rate ?? 1))), t(String(x.worstWindow)), t(String(x.longestGapMs)), fmt(x.deliveriesPerJob),
            x.quietP95 === null ? "-" : String(x.quietP95)]);
          if (x.quietP95 !== null) quietP95.set(`${name}/${consumer}`, x.quietP95);
        }
        drains.set(`${name}/${c}/${consumer}`, x.drainMs);
        cpus.set(`${name}/${c}/${consumer}`, x.cpuMsPerJob);
        const orderly = consumer.startsWith("lock") || consumer.startsWith("strict") || consumer.startsWith("shards");
        rows.push([name, String(c), consumer, String(x.drainMs), x.cpuMsPerJob === null ? "-" : fmt(x.cpuMsPerJob), fmt(x.deliveriesPerJob), name === "unkeyed" ? "-" : String(x.inversions),
          String(x.neverRun), String(x.deadLettered), fmt(x.kvOpsPerJob), orderly ? fmt(x.d1PerJob) : "-", fmt(x.runsPerJob),
          x.urgentAfter === null ? "-" : `${x.urgentAfter} of ${MESSAGES}`]);
        if (name !== "urgent") {
          const { usd, freeJobs } = cost(x);
          // The shards' own rows are not counted: miniflare's objects report none, and the cron's
          // purge of the shards is not run here. They are the statements D1 runs (strict-api's rows).
          const shards = consumer.startsWith("shards");
          const rows = (v) => (shards ? "not counted" : fmt(v));
          costs.push([name, String(c), consumer, rows(x.d1RowsWritten), rows(x.d1RowsRead), rows(x.d1Statements), fmt(x.queueOps),
            fmt(x.kvReads), fmt(x.kvWrites), fmt(x.doRequests), shards ? `${usd.toFixed(2)} + rows` : usd.toFixed(2),
            shards ? "-" : String(Math.floor(freeJobs))]);
        }
        console.error(`done: ${name} C=${c} ${consumer} ${x.drainMs} ms`);
      }
    }
  }
  const table = (t) => {
    const w = t[0].map((_, i) => Math.max(...t.map((r) => r[i].length)));
    return t.map((r) => "| " + r.map((c, i) => c.padEnd(w[i])).join(" | ") + " |").join("\n");
  };
  console.log(table(rows));
  console.log("\nFlow control (design §20): a throttle's achieved rate and worst second; a hot limit key's effect on quiet keys:\n");
  for (const consumer of CONSUMERS) {
    for (const hot of ["hotlimit", "hotlate"]) {
      const [with_, without] = [quietP95.get(`${hot}/${consumer}`), quietP95.get(`quiet/${consumer}`)];
      if (with_ !== undefined && without) flow.push([`${hot} / quiet`, String(flowConcurrency(hot)[0]), consumer, "p95 ratio", "-", "-", "-", "-", "-", fmt(with_ / without)]);
    }
  }
  console.log(table(flow));
  console.log("\nCost per job over its whole life (submission, deliveries, transitions, history, results, purge), " +
    "at Cloudflare's list prices (docs/performance.md: Cost per job); the handler's own cost (the webhook) is not counted:\n");
  console.log(table(costs));
  // The targets of the strict-mode work, as ratios of drain times from this one run.
  const d = (k) => drains.get(k);
  const ratios = [["comparison", "ratio (below 1: the first is faster)"]];
  const add = (label, a, b) => { if (d(a) && d(b)) ratios.push([label, fmt(d(a) / d(b))]); };
  add("strict-api hot C=16 / lock-api hot C=1", "hot/16/strict-api", "hot/1/lock-api");
  // What being observed costs (design §27.5): spans, and spans with metrics, against neither.
  for (const w of WORKLOADS) {
    for (const c of CONCURRENCY) {
      for (const [on, what] of [["strict-api", "spans"], ["strict-api-metrics", "spans and metrics"]]) {
        const [a, b] = [`${w}/${c}/${on}`, `${w}/${c}/strict-api-bare`];
        add(`${on} ${w} C=${c} / strict-api-bare: drain (${what} on / off)`, a, b);
        if (cpus.get(a) && cpus.get(b)) ratios.push([`${on} ${w} C=${c} / strict-api-bare: workerd CPU per job (${what} on / off)`, fmt(cpus.get(a) / cpus.get(b))]);
      }
    }
  }
  add("strict-api keys20 C=4 / lock-api keys20 C=1", "keys20/4/strict-api", "keys20/1/lock-api");
  add("shards-api keys20 C=4 / strict-api keys20 C=4 (LEDGER do / d1)", "keys20/4/shards-api", "keys20/4/strict-api");
  add("strict-api keys20 C=4 / strict-api unkeyed C=4", "keys20/4/strict-api", "unkeyed/4/strict-api");
  add("strict-api keys20 C=4 / fedify-direct keys20 C=4", "keys20/4/strict-api", "keys20/4/fedify-direct");
  add("strict-api hot C=4 / fedify-direct hot C=4", "hot/4/strict-api", "hot/4/fedify-direct");
  console.log("\n" + table(ratios));
  if (WORKLOADS.includes("ledger")) {
    // The ledger's life at scale (bench/ledger.mjs): what polls and ticks read as history grows.
    const { measureLedger, ledgerTable, LEDGER_SIZES, LEDGER_DUE } = await import("./ledger.mjs");
    console.log(`\nThe ledger's life (bench/ledger.mjs): rows D1 bills per call and per cron tick, at ${LEDGER_SIZES.join(", ")} finished jobs ` +
      `with ${LEDGER_DUE} more past retention and 40 open:\n`);
    console.log(ledgerTable(await measureLedger(LEDGER_SIZES, LEDGER_DUE)));
  }
}

// Run as a script (npm run bench); imported, it only lends `measure` (tests/e2e/cost.test.mjs).
if (import.meta.url === `file://${process.argv[1]}`) await main();
