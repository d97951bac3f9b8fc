// Counts what a consumer costs: deliveries it was handed, KV operations, D1 round trips. Wraps the
// bindings in classes with the binding names workers-rs checks for, so the Rust worker accepts them.
export const stats = { batches: 0, deliveries: 0, kvOps: 0, d1RoundTrips: 0 };

export function reset() {
  for (const k of Object.keys(stats)) stats[k] = 0;
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

/** The same env with counting KV and D1 bindings. */
export function counted(env) {
  return { ...env, ORDERING_KV: new KvNamespace(env.ORDERING_KV), ...(env.DB ? { DB: new D1Database(env.DB) } : {}) };
}

/** `/__stats` and `/__reset` answers, or null for other requests. */
export function statsRoute(request) {
  const path = new URL(request.url).pathname;
  if (path === "/__stats") return Response.json(stats);
  if (path === "/__reset") { reset(); return Response.json(stats); }
  return null;
}
