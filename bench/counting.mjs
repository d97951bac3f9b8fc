// Counts what a consumer costs: deliveries it was handed, KV operations (reads and writes apart:
// they are priced apart), D1 round trips, statements and the rows D1 bills (each result's
// `meta.rows_written` / `meta.rows_read`, which miniflare's local D1 fills as D1 bills them,
// index entries included); and captures what it sends to its own queue (wake-ups, re-sends, API
// submissions) so the model of Queues delivers those too. Wraps the bindings in classes with the names workers-rs checks for,
// so the Rust worker accepts them.
export const stats = { batches: 0, deliveries: 0, kvOps: 0, kvReads: 0, kvWrites: 0, d1RoundTrips: 0, d1Statements: 0, d1RowsWritten: 0, d1RowsRead: 0, sent: 0, doRequests: 0 };
/** Billed rows per statement (keyed by the SQL file's first comment line), for
 * `BENCH_PROFILE=1`: where a job's rows go. */
export let profile = {};
/** Messages the worker sent, not yet collected by the model: {body, delaySeconds}. */
let outbox = [];

export function reset() {
  for (const k of Object.keys(stats)) stats[k] = 0;
  outbox = [];
  profile = {};
}

const read = () => { stats.kvOps++; stats.kvReads++; };
const write = () => { stats.kvOps++; stats.kvWrites++; };

class KvNamespace {
  constructor(inner) { this.inner = inner; }
  get(...a) { read(); return this.inner.get(...a); }
  getWithMetadata(...a) { read(); return this.inner.getWithMetadata(...a); }
  // KV prices a write, a delete and a list alike.
  put(...a) { write(); return this.inner.put(...a); }
  delete(...a) { write(); return this.inner.delete(...a); }
  list(...a) { write(); return this.inner.list(...a); }
}

/** Adds a D1 result's billed rows to the stats. */
export function countRows(result) {
  stats.d1RowsWritten += result?.meta?.rows_written ?? 0;
  stats.d1RowsRead += result?.meta?.rows_read ?? 0;
}

/** What names a statement in the profile: its SQL's first line (the file's first comment). */
const names = new WeakMap();
const nameOf = (sql) => sql.trimStart().split("\n")[0].slice(0, 70);

class D1Database {
  constructor(inner) { this.inner = inner; }
  prepare(sql) {
    const stmt = this.inner.prepare(sql);
    const bind = stmt.bind.bind(stmt);
    // workers-rs binds the prepared statement and batches the bound copy: name both.
    stmt.bind = (...a) => { const b = bind(...a); names.set(b, nameOf(sql)); return b; };
    names.set(stmt, nameOf(sql));
    return stmt;
  }
  async batch(stmts) {
    stats.d1RoundTrips++;
    stats.d1Statements += stmts.length;
    const out = await this.inner.batch(stmts);
    out.forEach(countRows);
    out.forEach((r, i) => {
      const p = (profile[names.get(stmts[i]) ?? "?"] ??= { statements: 0, rowsWritten: 0, rowsRead: 0 });
      p.statements++;
      p.rowsWritten += r?.meta?.rows_written ?? 0;
      p.rowsRead += r?.meta?.rows_read ?? 0;
    });
    return out;
  }
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
/** The ledger shards' namespace (LEDGER = "do"): every request to a shard object counted. */
class DurableObjectNamespace {
  constructor(inner) { this.inner = inner; }
  idFromName(name) { return this.inner.idFromName(name); }
  get(id) { return new DurableObjectStub(this.inner.get(id)); }
  getByName(name) { return new DurableObjectStub(this.inner.getByName(name)); }
}
class DurableObjectStub {
  constructor(inner) { this.inner = inner; }
  fetch(...args) { stats.doRequests++; return this.inner.fetch(...args); }
}

export function counted(env) {
  return {
    ...env,
    ORDERING_KV: new KvNamespace(env.ORDERING_KV),
    ...(env.DB ? { DB: new D1Database(env.DB) } : {}),
    ...(env.LEDGER_OBJECT ? { LEDGER_OBJECT: new DurableObjectNamespace(env.LEDGER_OBJECT) } : {}),
    JOBS: new WorkerQueue("orderly-jobs"),
    ...(env.BENCH_LANE === "1" ? { JOBS_URGENT: new WorkerQueue("orderly-jobs-urgent") } : {}),
  };
}

/** The event context orderly is handed: as workerd gives it, or, for the `-bare` consumers
 * (BENCH_OBSERVE = "bare"), without Workers' tracing API, so that orderly observes nothing: the
 * bench's measure of what being observed costs (docs/performance.md). */
export function context(ctx, env) {
  if (env.BENCH_OBSERVE !== "bare") return ctx;
  return new Proxy(ctx, {
    has: (target, name) => name !== "tracing" && Reflect.has(target, name),
    get(target, name) {
      if (name === "tracing") return undefined;
      const value = Reflect.get(target, name);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** `/__stats`, `/__reset` and `/__outbox` answers, or null for other requests. */
export function statsRoute(request) {
  const path = new URL(request.url).pathname;
  if (path === "/__stats") return Response.json(stats);
  if (path === "/__reset") { reset(); return Response.json(stats); }
  if (path === "/__profile") return Response.json(profile);
  if (path === "/__outbox") { const out = outbox; outbox = []; return Response.json(out); }
  return null;
}
