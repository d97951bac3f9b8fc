// Starts the built worker under miniflare with real (simulated) Queues, KV and D1, the ledger
// migrated from migrations/, and an in-process HTTP target that answers the worker's webhooks.
import { Miniflare } from "miniflare";
import { build } from "esbuild";
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, readFileSync, readdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { basename, join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const TOKEN = "test-admin-token";
export const TARGET = "http://target.test";

/** Vars as in wrangler.toml, with delays shortened so tests run in seconds. */
export const FAST_VARS = {
  ORDERING_KEY_PREFIX: "__fedify_ordering_",
  ORDERING_LOCK_TTL: "60",
  MAX_ATTEMPTS: "8",
  BACKOFF_BASE_SECONDS: "1",
  BACKOFF_CAP_SECONDS: "1",
  LOCK_RETRY_DELAY_SECONDS: "1",
  LEASE_SECONDS: "120",
  RETENTION_DAYS: "7",
  WEBHOOK_TIMEOUT_SECONDS: "30",
};

/**
 * The webhook target. Paths decide the answer:
 *   /ok/<name>              200
 *   /fail/<n>/<name>        500 for the first n requests to this path, then 200
 *   /status/<code>/<name>   always <code>
 *   /slow/<ms>/<name>       200 after <ms>
 *   /hold/<ms>/<name>       200 after <ms>, unless the worker aborts the request first (noted as
 *                           the entry's `aborted`, ms)
 *   /redirect/<code>/<name> <code> with a Location on another host
 *   /echo/<name>            200, JSON {"received": <request body>}
 *   /big/<bytes>/<name>     200, <bytes> bytes of text
 *   /limit/<n>/<name>       429 with Retry-After: 1 for the first n requests to this path, then 200
 * Every request is recorded in arrival order with its body, headers and arrival time (`at`, ms).
 */
export class Target {
  constructor() {
    this.requests = [];
    this.counts = new Map();
    this.onRequest = null;
    /** Path -> status, overriding what the path says (e.g. to heal a failing endpoint). */
    this.answers = new Map();
  }
  async handle(request) {
    const url = new URL(request.url);
    const body = await request.text();
    const entry = { path: url.pathname, method: request.method, body, headers: Object.fromEntries(request.headers), at: Date.now() };
    this.requests.push(entry);
    if (this.onRequest) await this.onRequest(entry);
    const n = (this.counts.get(url.pathname) ?? 0) + 1;
    this.counts.set(url.pathname, n);
    if (this.answers.has(url.pathname)) return new Response("set", { status: this.answers.get(url.pathname) });
    const parts = url.pathname.split("/").filter(Boolean);
    if (parts[0] === "fail") return new Response("no", { status: n <= Number(parts[1]) ? 500 : 200 });
    if (parts[0] === "status") return new Response("x", { status: Number(parts[1]) });
    if (parts[0] === "limit" && n <= Number(parts[1])) return new Response("slow down", { status: 429, headers: { "retry-after": "1" } });
    if (parts[0] === "echo") {
      return new Response(JSON.stringify({ received: body }), { headers: { "content-type": "application/json" } });
    }
    if (parts[0] === "big") return new Response("b".repeat(Number(parts[1])), { headers: { "content-type": "text/plain" } });
    if (parts[0] === "redirect") {
      return new Response(null, { status: Number(parts[1]), headers: { location: "http://elsewhere.test/stolen" } });
    }
    if (parts[0] === "slow") {
      await new Promise((r) => setTimeout(r, Number(parts[1])));
      return new Response("ok");
    }
    if (parts[0] === "hold") {
      await new Promise((r) => {
        const timer = setTimeout(r, Number(parts[1]));
        request.signal?.addEventListener("abort", () => {
          entry.aborted = Date.now();
          clearTimeout(timer);
          r();
        });
      });
      return new Response("held");
    }
    return new Response("ok");
  }
  /** Requests to paths starting with `prefix`, in arrival order. */
  to(prefix) {
    return this.requests.filter((r) => r.path.startsWith(prefix));
  }
}

/** The ledger's schema: how many migrations there are (src/ledger/schema.rs, SCHEMA). */
export const SCHEMA = readdirSync(join(root, "migrations")).filter((f) => f.endsWith(".sql")).length;

/**
 * The npm package as `npm pack` makes it, unpacked where a bundler finds it by name
 * (build/npm-d1/node_modules/orderly-queues); build/npm-d1 is a package of its own, so nothing
 * there resolves `orderly-queues` to the repository's own files. One per pass (`-d1`, `-do`): the
 * two passes run at once, and each unpacks its own.
 */
export function packedPackage() {
  const dir = join(root, `build/npm-${process.env.ORDERLY_E2E_LEDGER === "do" ? "do" : "d1"}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, "node_modules/orderly-queues"), { recursive: true });
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "packed-package-user", private: true }));
  const tgz = execFileSync("npm", ["pack", "--silent", "--pack-destination", dir], { cwd: root, encoding: "utf8" }).trim().split("\n").pop();
  execFileSync("tar", ["xzf", join(dir, tgz), "-C", join(dir, "node_modules/orderly-queues"), "--strip-components=1"]);
  return dir;
}

/**
 * Writes `data` to `path` whole or not at all (a file beside it, renamed over it): `npm test` runs
 * the D1 and Durable Object passes at once, and both write the same bundles and fixtures, so a
 * reader must never see one half written.
 */
export function writeAtomically(path, data) {
  const part = `${path}.${process.pid}.part`;
  writeFileSync(part, data);
  renameSync(part, path);
}

/**
 * Bundles a worker as wrangler does (nodejs_compat), its `orderly-queues` imports resolved in the
 * packed package only. Returns the files it took from that package (relative to it).
 */
export async function bundleWorker(entry, outfile) {
  const packed = packedPackage();
  const fromPackage = {
    name: "orderly-queues from its tarball",
    setup(b) {
      b.onResolve({ filter: /^orderly-queues(\/.*)?$/ }, (args) =>
        args.pluginData === "packed" ? undefined : b.resolve(args.path, { kind: args.kind, resolveDir: packed, pluginData: "packed" }));
    },
  };
  // A wasm module (the compiled worker, `orderly-queues/worker`) is imported as wrangler imports
  // it: a module of its own beside the bundle.
  const wasmBeside = {
    name: "wasm modules beside the bundle",
    setup(b) {
      b.onResolve({ filter: /\.wasm$/ }, (args) => {
        const from = join(args.resolveDir, args.path);
        writeAtomically(join(dirname(outfile), basename(from)), readFileSync(from));
        return { path: `./${basename(from)}`, external: true };
      });
    },
  };
  const out = await build({
    entryPoints: [entry], bundle: true, format: "esm", platform: "browser", conditions: ["workerd", "worker", "browser"],
    external: ["node:*", "cloudflare:*"], outfile, logLevel: "warning", metafile: true, plugins: [fromPackage, wasmBeside], write: false,
  });
  for (const f of out.outputFiles) writeAtomically(f.path, f.contents);
  // Paths are relative to the working directory, through a linked build/ too (a mutation run's copy).
  const inPackage = `build/${basename(packed)}/node_modules/orderly-queues/`;
  return Object.keys(out.metafile.inputs).filter((f) => f.includes(inPackage)).map((f) => f.split(inPackage)[1]);
}

/**
 * The deployable worker's size budget, gzip bytes (issue 38): Cloudflare's limit is 3 MB gzip on
 * the free plan, but start-up time grows with the module, so growth is watched, not just capped.
 * Raised from 600,000 with dependencies (design §24), which took the worker to 624,474
 * (docs/performance.md).
 */
export const WORKER_GZIP_BUDGET = 700_000;

/** The built worker's wasm: its bytes, and its size raw and gzip (level 9, as `scripts/build.sh`). */
export function workerSize() {
  const bytes = readFileSync(join(root, "build/index_bg.wasm"));
  return { bytes, raw: bytes.length, gzip: gzipSync(bytes, { level: 9 }).length };
}

/** Module rules for worker-build's output. */
export const MODULES_RULES = [
  { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
  { type: "CompiledWasm", include: ["**/*.wasm"] },
];

/**
 * Applies migrations/ to a D1 binding as `wrangler d1 migrations apply` does: each file (split into
 * statements, comments dropped) and its row in `d1_migrations`, one batch. `upTo`: only the first n.
 */
/**
 * A migration's text (its comments removed) as statements: split at each `;`, except inside a
 * `CREATE TRIGGER` before its `END` (its body's statements end in `;` too), as the worker's
 * splitter does (src/ledger/schema.rs).
 */
export function splitStatements(text) {
  const out = [];
  let current = "";
  for (const part of text.split(";")) {
    current += current ? `;${part}` : part;
    const words = current.trim().toUpperCase().split(/\s+/);
    if (words[0] === "CREATE" && words[1] === "TRIGGER" && words.at(-1) !== "END") continue;
    out.push(current.trim());
    current = "";
  }
  if (current.trim()) out.push(current.trim());
  return out.filter(Boolean);
}

export async function migrate(db, { upTo = Infinity } = {}) {
  const dir = join(root, "migrations");
  await db.prepare("CREATE TABLE IF NOT EXISTS d1_migrations(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE, applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL)").run();
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".sql")).sort().slice(0, upTo)) {
    const text = readFileSync(join(dir, file), "utf8")
      .split("\n")
      .map((l) => l.replace(/--.*$/, ""))
      .join("\n");
    const stmts = splitStatements(text);
    await db.batch([...stmts.map((s) => db.prepare(s)), db.prepare("INSERT INTO d1_migrations (name) VALUES (?1)").bind(file)]);
  }
}

/**
 * The options of a test whose workers choose their own ledger (or none), `test(name, ONCE, fn)`:
 * the pass's ledger changes nothing in it, so it runs once, in the D1 pass, and is skipped with
 * this reason in the Durable Object pass (`npm test` runs the two passes at once).
 */
export const ONCE = { skip: process.env.ORDERLY_E2E_LEDGER === "do" && "chooses its own ledger: run once, in the D1 pass" };

/**
 * [`ONCE`] for a long test, run in the Durable Object pass instead, so that the two passes, run at
 * once, take about as long. `npm test` marks its D1 pass with ORDERLY_E2E_PASS=d1; run alone,
 * the test runs.
 */
export const ONCE_IN_SHARDS_PASS = { skip: process.env.ORDERLY_E2E_PASS === "d1" && "chooses its own ledger: run once, in the shards' pass" };

/**
 * The ledger of a test that does not choose: D1, or with ORDERLY_E2E_LEDGER=do four Durable Object
 * shards (`npm test` runs the suites that read jobs through the API both ways).
 */
function defaultLedger() {
  return process.env.ORDERLY_E2E_LEDGER === "do" ? { shards: 4 } : undefined;
}

/**
 * Starts orderly under miniflare. `ledger: { shards, className }` runs the ledger on `shards`
 * SQLite-backed Durable Objects of the worker's class `className` (LEDGER = "do") instead of D1;
 * then `job(id)` reads the job through the API (there is no one database to read).
 */
export async function start({ ledger, migrations = Infinity, vars = {}, bindings, mainQueue = {}, urgentQueue = {}, adminToken = TOKEN, dlqName = "orderly-dlq", extraConsumers = {}, extraProducers = {}, urgentLane = true, extraWorkers, serviceBindings, buildDir = "build", workerOptions = {} } = {}) {
  if (ledger === undefined && buildDir === "build") ledger = defaultLedger();
  const target = new Target();
  // Other Workers may reach the target too: give them `outboundService: target` as a function.
  if (typeof extraWorkers === "function") extraWorkers = extraWorkers(target);
  const orderly = {
    name: "orderly",
    modules: true,
    // The deployable worker, or another worker built on the orderly library (buildDir).
    scriptPath: join(root, buildDir, "worker/shim.mjs"),
    modulesRoot: join(root, buildDir),
    modulesRules: MODULES_RULES,
    compatibilityDate: "2026-08-01",
    cf: false,
    kvNamespaces: ["ORDERING_KV"],
    d1Databases: ["DB"],
    queueProducers: {
      JOBS: { queueName: "orderly-jobs" },
      ...(urgentLane ? { JOBS_URGENT: { queueName: "orderly-jobs-urgent" } } : {}),
      ...extraProducers,
    },
    queueConsumers: {
      "orderly-jobs": { maxBatchSize: 100, maxBatchTimeout: 1, maxRetries: 100, deadLetterQueue: dlqName, ...mainQueue },
      ...(urgentLane
        ? { "orderly-jobs-urgent": { maxBatchSize: 10, maxBatchTimeout: 0, maxRetries: 100, deadLetterQueue: dlqName, ...urgentQueue } }
        : {}),
      [dlqName]: { maxBatchSize: 100, maxBatchTimeout: 1, maxRetries: 10 },
      ...extraConsumers,
    },
    bindings: bindings ?? {
      ...FAST_VARS,
      ...(adminToken ? { ADMIN_TOKEN: adminToken } : {}),
      ...(ledger ? { LEDGER: "do", LEDGER_SHARDS: String(ledger.shards) } : {}),
      ...vars,
    },
    ...(ledger ? { durableObjects: { LEDGER_OBJECT: { className: ledger.className ?? "OrderlyLedger", useSQLite: true } } } : {}),
    outboundService: (request) => target.handle(request),
    ...(serviceBindings ? { serviceBindings } : {}),
    ...workerOptions,
  };
  // The worker's log lines, kept for tests (printed too with ORDERLY_E2E_LOGS=1).
  const logs = [];
  const shared = {
    handleStructuredLogs: ({ level, message }) => {
      logs.push({ level, message });
      if (process.env.ORDERLY_E2E_LOGS) console.log(`[${level}] ${message}`);
    },
  };
  // Other Workers (e.g. a producer with a service binding to "orderly") run beside it.
  const mf = new Miniflare(extraWorkers ? { ...shared, workers: [orderly, ...extraWorkers] } : { ...shared, ...orderly });
  const url = await mf.ready;
  const d1 = await mf.getD1Database("DB");
  await migrate(d1, { upTo: migrations });
  const kv = await mf.getKVNamespace("ORDERING_KV");
  const worker = await mf.getWorker();
  const queue = await mf.getQueueProducer("JOBS");

  const api = async (method, path, body, token = adminToken) => {
    const headers = token ? { authorization: `Bearer ${token}` } : {};
    if (body !== undefined) headers["content-type"] = "application/json";
    const res = await mf.dispatchFetch(`http://orderly.test${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    });
    const text = await res.text();
    let json;
    try { json = JSON.parse(text); } catch { json = undefined; }
    return { status: res.status, json, text };
  };
  /**
   * Runs `sql` on ledger shard `shard` (LEDGER = "do") as the worker does, a request to the shard's
   * object (src/ledger/object.rs): its rows, or throws with the object's refusal or failure.
   */
  const shardBatch = async (shard, stmts, { shards = ledger?.shards, schema = SCHEMA } = {}) => {
    const ns = await mf.getDurableObjectNamespace("LEDGER_OBJECT");
    // miniflare's synchronous proxy (Node to workerd) can trip on its own message ids under load
    // ("message?.id === id", before anything reaches the object): getting the stub is tried again.
    let stub;
    for (let tries = 1; !stub; tries++) {
      try {
        stub = ns.get(ns.idFromName(`orderly-ledger-${shard}`));
      } catch (e) {
        if (tries >= 3 || !String(e?.message).includes("message?.id === id")) throw e;
      }
    }
    const res = await stub.fetch("https://orderly-ledger/batch", {
      method: "POST",
      body: JSON.stringify({ schema, shard, shards, stmts }),
    });
    return res.json();
  };
  const shardQuery = async (shard, sql, params = [], opts = {}) => {
    const answer = await shardBatch(shard, [{ sql, params }], opts);
    if (!answer.rows) throw new Error(JSON.stringify(answer));
    return answer.rows[0];
  };

  // With shards, `db` reads and writes every shard (shardedDb), the way a test reads D1.
  const db = ledger ? shardedDb(shardQuery, ledger.shards) : d1;
  // With shards, the job's row is read from whichever shard holds it, as D1's would be.
  const job = ledger
    ? async (id) => {
      for (let i = 0; i < ledger.shards; i++) {
        const [row] = await shardQuery(i, "SELECT * FROM job WHERE id = ?1", [id]);
        if (row) return row;
      }
      return null;
    }
    : async (id) => (await db.prepare("SELECT * FROM job WHERE id = ?").bind(id).first()) ?? null;
  const counts = async () => (await api("GET", "/jobs/counts")).json;

  /** orderly's structured log lines (src/log.rs) seen so far, parsed. */
  const events = () => logs.flatMap(({ message }) => {
    try { const v = JSON.parse(message); return v && typeof v.event === "string" ? [v] : []; } catch { return []; }
  });
  return { mf, url, db, d1, kv, worker, queue, target, api, job, counts, logs, events, shardQuery, shardBatch, dispose: () => mf.dispose() };
}

/**
 * D1's `prepare(sql).bind(...).first()/all()/run()` over every shard of a sharded ledger, for the
 * tests' own reads and writes: a statement runs on each shard; `all()` merges the rows, in the
 * statement's `ORDER BY` (plain columns, ASC or DESC); `first()` is the first row found, or for a
 * `count(*) AS n` the sum over the shards.
 */
function shardedDb(shardQuery, shards) {
  // `prepare(sql, { route })` (D1 ignores the second argument): only the shard of that ordering key
  // (or unkeyed job's id), as the worker routes it; else every shard.
  const onEvery = async (sql, params, route) => {
    if (route !== undefined) return [await shardQuery(shardOf(route, shards), sql, params)];
    const out = [];
    for (let i = 0; i < shards; i++) out.push(await shardQuery(i, sql, params));
    return out;
  };
  const order = (sql) => {
    const m = /ORDER BY\s+([\w\s,]+?)\s*(LIMIT|$)/i.exec(sql);
    if (!m) return [];
    return m[1].split(",").map((c) => c.trim().split(/\s+/)).map(([col, dir]) => [col, /desc/i.test(dir ?? "") ? -1 : 1]);
  };
  const compare = (cols) => (a, b) => {
    for (const [c, dir] of cols) {
      if (a[c] === b[c]) continue;
      if (a[c] === null) return -dir;
      if (b[c] === null) return dir;
      return (a[c] < b[c] ? -1 : 1) * dir;
    }
    return 0;
  };
  const prepare = (sql, route, params = []) => ({
    bind: (...args) => prepare(sql, route, args),
    all: async () => ({ results: (await onEvery(sql, params, route)).flat().sort(compare(order(sql))) }),
    run: async () => { await onEvery(sql, params, route); return { success: true }; },
    first: async () => {
      const rows = (await onEvery(sql, params, route)).map((r) => r[0]).filter(Boolean);
      if (/count\(\*\)\s+AS\s+n\b/i.test(sql)) return { n: rows.reduce((a, r) => a + r.n, 0) };
      return rows[0] ?? null;
    },
  });
  return { prepare: (sql, hint) => prepare(sql, hint?.route) };
}

/**
 * The shard of a job routed by `text` (its ordering key, else its dedupe key, else its id) among
 * `shards`: 64-bit FNV-1a of the UTF-8 bytes, mod the count, written here apart from
 * src/ledger/placement.rs so that a test placing a row by it checks the worker's routing.
 */
export function shardOf(text, shards) {
  let h = 0xcbf29ce484222325n;
  for (const byte of new TextEncoder().encode(text)) {
    h ^= BigInt(byte);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return Number(h % BigInt(shards));
}

/** A webhook payload to the target. */
export function webhook(path, body = {}) {
  return { type: "webhook", url: `${TARGET}${path}`, body };
}

/** Polls `fn` until it returns a truthy value; fails with `what` after `timeoutMs`. */
export async function waitFor(fn, what, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await fn();
    if (last) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(last)})`);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The PATH of a newcomer with only Node: no cargo, rustc or worker-build. */
export const NODE_ONLY = { PATH: [dirname(process.execPath), "/usr/bin", "/bin"].join(":"), HOME: process.env.HOME };

/**
 * A new worker `name` made in `scratch` by `npx orderly-queues new` (with `flags`) and installed as
 * an offline `npm install` would: the packed npm package from its tarball, `deps` (wrangler,
 * TypeScript, Fedify) the repository's own, and the commands npm links into `node_modules/.bin`.
 * Only Node is on PATH. Returns the worker's folder.
 */
export function newWorker(scratch, name, flags = [], deps = ["wrangler"]) {
  const tgz = join(scratch, execFileSync("npm", ["pack", "--silent", "--pack-destination", scratch], { cwd: root, encoding: "utf8" }).trim().split("\n").pop());
  execFileSync(process.execPath, [join(root, "bin/orderly-queues.mjs"), "new", name, ...flags], { cwd: scratch, env: NODE_ONLY });
  const app = join(scratch, name);
  mkdirSync(join(app, "node_modules/.bin"), { recursive: true });
  mkdirSync(join(app, "node_modules/orderly-queues"));
  execFileSync("tar", ["xzf", tgz, "-C", join(app, "node_modules/orderly-queues"), "--strip-components=1"]);
  for (const dep of deps) {
    mkdirSync(dirname(join(app, "node_modules", dep)), { recursive: true });
    symlinkSync(join(root, "node_modules", dep), join(app, "node_modules", dep));
  }
  const bins = { "orderly-queues": "orderly-queues/bin/orderly-queues.mjs", wrangler: "wrangler/bin/wrangler.js", typescript: "typescript/bin/tsc" };
  symlinkSync(`../${bins["orderly-queues"]}`, join(app, "node_modules/.bin/orderly-queues"));
  for (const dep of deps.filter((d) => bins[d])) symlinkSync(`../${bins[dep]}`, join(app, "node_modules/.bin", dep === "typescript" ? "tsc" : dep));
  return app;
}

/**
 * `npm start -- ...args` in `app`, with only Node on PATH, in its own process group: its output so
 * far (`output()`), and `stop()`, which ends the whole group (npm, wrangler, workerd).
 */
export function npmStart(app, args) {
  const dev = spawn("npm", ["start", "--", ...args], { cwd: app, env: NODE_ONLY, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  dev.stdout.on("data", (c) => { out += c; });
  dev.stderr.on("data", (c) => { out += c; });
  return {
    output: () => out,
    async stop() {
      try { process.kill(-dev.pid, "SIGTERM"); } catch {}
      await sleep(1000);
      try { process.kill(-dev.pid, "SIGKILL"); } catch {}
    },
  };
}
