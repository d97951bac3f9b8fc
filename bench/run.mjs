// The benchmark (SPEC 10): orderly against a consumer following Fedify's documented algorithm,
// side by side in one run, same handler, same queue settings, under miniflare.
//
// Queues itself is modelled here so that consumer concurrency is a setting (Cloudflare runs up to
// `max_concurrency` invocations at once; miniflare runs one): messages are handed out in batches of
// up to 100 to up to C concurrent `queue()` invocations of the real worker, and each message's
// ack / retry(delay) is applied as Queues would, including `max_retries` and the dead-letter queue.
// KV and D1 are miniflare's; the webhook target is in-process and answers after a short latency.
//
//   npm run bench                       all workloads, concurrency 1 and 4, 3 runs each
//   BENCH_MESSAGES=1000 BENCH_RUNS=3 BENCH_CONCURRENCY=1,4 BENCH_WORKLOADS=hot,keys20,unkeyed
import { Miniflare } from "miniflare";
import { copyFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { migrate, MODULES_RULES } from "../tests/e2e/harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const MESSAGES = Number(process.env.BENCH_MESSAGES ?? 1000);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? "1,4").split(",").map(Number);
const WORKLOADS = (process.env.BENCH_WORKLOADS ?? "hot,keys20,unkeyed").split(",");
const HANDLER_LATENCY_MS = Number(process.env.BENCH_HANDLER_MS ?? 2);
const MAX_BATCH = 100;
const MAX_RETRIES = 100; // wrangler.toml's setting, for both consumers
const DRAIN_LIMIT_MS = 600_000;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The bodies of a workload: Fedify envelopes with a sequence number per key. */
function workload(name) {
  const keyOf = { hot: () => "hot", keys20: (i) => `k${i % 20}`, unkeyed: () => null }[name];
  const seqs = new Map();
  return Array.from({ length: MESSAGES }, (_, i) => {
    const key = keyOf(i);
    const seq = (seqs.get(key) ?? 0) + 1;
    seqs.set(key, seq);
    const payload = { type: "webhook", url: "http://target.test/hook", body: { key, seq } };
    return key === null ? payload : { __fedify_ordering_key__: key, __fedify_payload__: payload };
  });
}

/** The webhook target: counts runs and per-key order inversions. */
function target() {
  const t = { runs: 0, inversions: 0, last: new Map() };
  t.handle = async (request) => {
    const { key, seq } = await request.json();
    t.runs++;
    if (key !== null) {
      if (seq < (t.last.get(key) ?? 0)) t.inversions++;
      t.last.set(key, Math.max(seq, t.last.get(key) ?? 0));
    }
    if (HANDLER_LATENCY_MS > 0) await sleep(HANDLER_LATENCY_MS);
    return new Response("ok");
  };
  return t;
}

async function startConsumer(kind, t) {
  const common = {
    modules: true,
    modulesRules: MODULES_RULES,
    compatibilityDate: "2026-08-01",
    cf: false,
    kvNamespaces: ["ORDERING_KV"],
    outboundService: (req) => t.handle(req),
  };
  const mf =
    kind === "orderly"
      ? new Miniflare({
          ...common,
          scriptPath: join(root, "build/bench-orderly.mjs"),
          modulesRoot: join(root, "build"),
          d1Databases: ["DB"],
          queueProducers: { JOBS: { queueName: "orderly-jobs" } },
          bindings: { ADMIN_TOKEN: "bench", LOCK_RETRY_DELAY_SECONDS: "2", LEASE_SECONDS: "120" },
        })
      : new Miniflare({ ...common, scriptPath: join(root, "build/bench-fedify.mjs"), modulesRoot: join(root, "build") });
  await mf.ready;
  if (kind === "orderly") await migrate(await mf.getD1Database("DB"));
  return { mf, worker: await mf.getWorker() };
}

/** Queues, modelled: batches of up to 100 visible messages to up to `concurrency` invocations. */
async function drain(worker, bodies, concurrency) {
  const t0 = Date.now();
  let seq = 0;
  let pending = bodies.map((body) => ({ id: `m${seq++}`, body, timestamp: new Date(t0), attempts: 1, visibleAt: t0 }));
  const m = { deliveries: 0, deadLettered: 0, batches: 0 };
  const inflight = new Set();
  while (pending.length > 0 || inflight.size > 0) {
    if (Date.now() - t0 > DRAIN_LIMIT_MS) throw new Error("drain did not finish in time");
    const now = Date.now();
    const visible = pending.filter((p) => p.visibleAt <= now);
    if (visible.length > 0 && inflight.size < concurrency) {
      const batch = visible.slice(0, MAX_BATCH);
      const taken = new Set(batch);
      pending = pending.filter((p) => !taken.has(p));
      m.batches++;
      m.deliveries += batch.length;
      const run = worker
        .queue("orderly-jobs", batch.map(({ id, body, timestamp, attempts }) => ({ id, body, timestamp, attempts })))
        .then((r) => {
          const retries = new Map(r.retryMessages.map((x) => [x.msgId, x.delaySeconds ?? 0]));
          for (const msg of batch) {
            const retried = retries.has(msg.id) || (r.retryBatch?.retry && !r.explicitAcks.includes(msg.id)) || (r.outcome !== "ok" && !r.explicitAcks.includes(msg.id));
            if (!retried) continue;
            if (msg.attempts > MAX_RETRIES) {
              m.deadLettered++;
              continue;
            }
            const delay = retries.get(msg.id) ?? r.retryBatch?.delaySeconds ?? 0;
            pending.push({ ...msg, attempts: msg.attempts + 1, visibleAt: Date.now() + delay * 1000 });
          }
        })
        .finally(() => inflight.delete(run));
      inflight.add(run);
      continue;
    }
    const nextVisible = Math.min(...pending.map((p) => p.visibleAt));
    await Promise.race([...inflight, sleep(Math.max(1, Math.min(50, nextVisible - Date.now())))]);
  }
  return { ...m, drainMs: Date.now() - t0 };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function measure(kind, name, concurrency) {
  const results = [];
  for (let r = 0; r < RUNS; r++) {
    const t = target();
    const { mf, worker } = await startConsumer(kind, t);
    try {
      const q = await drain(worker, workload(name), concurrency);
      const stats = await (await mf.dispatchFetch("http://bench.test/__stats")).json();
      results.push({ ...q, ...stats, runs: t.runs, inversions: t.inversions });
    } finally {
      await mf.dispose();
    }
  }
  const pick = (k) => median(results.map((x) => x[k]));
  return {
    drainMs: pick("drainMs"),
    deliveriesPerMsg: pick("deliveries") / MESSAGES,
    kvOpsPerMsg: pick("kvOps") / MESSAGES,
    d1PerBatch: pick("d1RoundTrips") / pick("batches"),
    inversions: pick("inversions"),
    deadLettered: pick("deadLettered"),
    handlerRunsPerMsg: pick("runs") / MESSAGES,
  };
}

const fmt = (x, d = 2) => (Number.isInteger(x) ? String(x) : x.toFixed(d));

async function main() {
  copyFileSync(join(root, "bench/orderly-entry.mjs"), join(root, "build/bench-orderly.mjs"));
  copyFileSync(join(root, "bench/fedify-consumer.mjs"), join(root, "build/bench-fedify.mjs"));
  copyFileSync(join(root, "bench/counting.mjs"), join(root, "build/counting.mjs"));
  console.log(`orderly vs Fedify's algorithm: ${MESSAGES} messages per workload, median of ${RUNS} runs, ` +
    `batches of ${MAX_BATCH}, max_retries ${MAX_RETRIES}, handler latency ${HANDLER_LATENCY_MS} ms\n`);
  const header = ["workload", "C", "consumer", "drain ms", "deliv/msg", "KV ops/msg", "D1 trips/batch", "inversions", "dead-lettered", "runs/msg"];
  const rows = [header];
  const ratios = [["workload", "C", "drain (F/o)", "deliveries (F/o)", "KV ops (F/o)"]];
  for (const name of WORKLOADS) {
    for (const c of CONCURRENCY) {
      const o = await measure("orderly", name, c);
      const f = await measure("fedify", name, c);
      for (const [label, x] of [["orderly", o], ["fedify-algorithm", f]]) {
        rows.push([name, String(c), label, String(x.drainMs), fmt(x.deliveriesPerMsg), fmt(x.kvOpsPerMsg), label === "orderly" ? fmt(x.d1PerBatch) : "-",
          String(x.inversions), String(x.deadLettered), fmt(x.handlerRunsPerMsg)]);
      }
      ratios.push([name, String(c), fmt(f.drainMs / o.drainMs), fmt(f.deliveriesPerMsg / o.deliveriesPerMsg),
        o.kvOpsPerMsg > 0 ? fmt(f.kvOpsPerMsg / o.kvOpsPerMsg) : (f.kvOpsPerMsg > 0 ? "inf" : "-")]);
      console.error(`done: ${name} C=${c}`);
    }
  }
  const table = (t) => {
    const w = t[0].map((_, i) => Math.max(...t.map((r) => r[i].length)));
    return t.map((r) => "| " + r.map((c, i) => c.padEnd(w[i])).join(" | ") + " |").join("\n");
  };
  console.log(table(rows));
  console.log("\nratios, Fedify's algorithm / orderly (above 1: orderly is better)\n");
  console.log(table(ratios));
}

await main();
