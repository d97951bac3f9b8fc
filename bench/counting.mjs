// Counts what a consumer costs: deliveries it was handed, KV operations, D1 round trips; and
// captures what it sends to its own queue (wake-ups, re-sends, API submissions) so the model of
// Queues delivers those too. Wraps the bindings in classes with the names workers-rs checks for,
// so the Rust worker accepts them.
export const stats = { batches: 0, deliveries: 0, kvOps: 0, d1RoundTrips: 0, sent: 0 };
/** Messages the worker sent, not yet collected by the model: {body, delaySeconds}. */
let outbox = [];

export function reset() {
  for (const k of Object.keys(stats)) stats[k] = 0;
  outbox = [];
}

class KvNamespace {
  constructor(inner) { this.inner = inner; }
  get(...a) { stats.kvOps++; return this.inner.get(...a); }
  put(...a) { stats.kvOps++; return this.inner.put(...a); }
  delete(...a) { stats.kvOps++; return this.inner.delete(...a); }
  list(...a) { stats.kvOps++; return this.inner.list(...a); }
  getWithMetadata(...a) { stats.kvOps++; return this.inner.getWithMetadata(...a); }
}

class D1Database {
  constructor(inner) { this.inner = inner; }
  prepare(sql) { return this.inner.prepare(sql); }
  batch(stmts) { stats.d1RoundTrips++; return this.inner.batch(stmts); }
  exec(sql) { stats.d1RoundTrips++; return this.inner.exec(sql); }
}

class WorkerQueue {
  /** `queue`: the queue this producer binding sends to. */
  constructor(queue) { this.queue = queue; }
  async send(body, options) {
    stats.sent++;
    outbox.push({ queue: this.queue, body, delaySeconds: options?.delaySeconds ?? 0 });
  }
  async sendBatch(messages, options) {
    for (const m of messages) {
      stats.sent++;
      outbox.push({ queue: this.queue, body: m.body, delaySeconds: m.delaySeconds ?? options?.delaySeconds ?? 0 });
    }
  }
}

/** The same env with counting KV and D1 bindings and captured queue producers (the urgent
 * lane's too when `BENCH_LANE` is "1"). */
export function counted(env) {
  return {
    ...env,
    ORDERING_KV: new KvNamespace(env.ORDERING_KV),
    ...(env.DB ? { DB: new D1Database(env.DB) } : {}),
    JOBS: new WorkerQueue("orderly-jobs"),
    ...(env.BENCH_LANE === "1" ? { JOBS_URGENT: new WorkerQueue("orderly-jobs-urgent") } : {}),
  };
}

/** `/__stats`, `/__reset` and `/__outbox` answers, or null for other requests. */
export function statsRoute(request) {
  const path = new URL(request.url).pathname;
  if (path === "/__stats") return Response.json(stats);
  if (path === "/__reset") { reset(); return Response.json(stats); }
  if (path === "/__outbox") { const out = outbox; outbox = []; return Response.json(out); }
  return null;
}
