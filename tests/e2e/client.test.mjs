// The producer client (client/) and the producer example (examples/producer-worker.js): the
// example imports the client by its package name; it is type-checked against client/index.d.ts,
// then bundled from the packed package and run as a second Worker under miniflare with a service
// binding to orderly, and sends a Fedify-enveloped message straight to the queue.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { start, webhook, waitFor, bundleWorker, TOKEN, MODULES_RULES, writeAtomically } from "./harness.mjs";
import { OrderlyClient, UnavailableError, TooLargeError, OrderlyError } from "../../client/index.js";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const tsc = (project) => execFileSync(join(root, "node_modules/.bin/tsc"), ["-p", project], { cwd: root, encoding: "utf8" });

test("the producer example type-checks against the client's types, and misuse does not", () => {
  tsc(root);
  const dir = join(root, "build/typecheck");
  mkdirSync(dir, { recursive: true });
  writeAtomically(join(dir, "misuse.js"), `// @ts-check
import { OrderlyClient } from "../../client/index.js";
const c = new OrderlyClient({ token: "t" });
c.enqueue({ type: "webhook" }, { priority: "urgent" });
c.enqueue([{}]).then((jobs) => jobs.id);
`);
  writeAtomically(join(dir, "tsconfig.json"), JSON.stringify({
    compilerOptions: { allowJs: true, checkJs: true, noEmit: true, strict: true, target: "ES2022", module: "ES2022", moduleResolution: "bundler", lib: ["ES2022", "DOM"] },
    include: ["misuse.js"],
  }));
  let out = "";
  try { tsc(dir); } catch (e) { out = String(e.stdout); }
  assert.match(out, /misuse\.js\(4,\d+\): error TS2769/, "a string priority is a type error");
  assert.match(out, /misuse\.js\(5,.*'id' does not exist/s, "many payloads answer an array");
});

const PRODUCER_TOKEN = "producer-example-token";
/** A request to the producer example with its token. */
const authed = (init = {}) => ({ ...init, headers: { authorization: `Bearer ${PRODUCER_TOKEN}` } });

/** The example, bundled as wrangler bundles it: the files it took from the packed package. */
const bundled = await bundleWorker(join(root, "examples/producer-worker.js"), join(root, "build/producer-worker.mjs"));

const producer = {
  name: "producer",
  modules: true,
  scriptPath: join(root, "build/producer-worker.mjs"),
  modulesRoot: root,
  modulesRules: MODULES_RULES,
  compatibilityDate: "2026-08-01",
  serviceBindings: { ORDERLY: "orderly" },
  bindings: { ORDERLY_TOKEN: TOKEN, PRODUCER_TOKEN },
  queueProducers: { ORDERLY_JOBS: { queueName: "orderly-jobs" } },
};

test("a producer Worker uses the client through a service binding; errors come back typed", async () => {
  assert.deepEqual(bundled, ["client/index.js"], "the client from the packed package");
  const w = await start({ extraWorkers: [producer] });
  try {
    const p = await w.mf.getWorker("producer");
    const call = async (path, body) => {
      const res = await p.fetch(`http://producer.test${path}`, authed(body === undefined ? {} : { method: "POST", body: JSON.stringify(body) }));
      return { status: res.status, json: await res.json().catch(() => null) };
    };
    const one = await call("/notify", { account: 7, url: "http://target.test/echo/client", event: { n: 1 }, priority: 1 });
    assert.equal(one.status, 202);
    assert.equal(one.json.status, "PENDING");
    await waitFor(async () => (await w.job(one.json.id))?.status === "DONE", "the client's job DONE");
    const row = await w.job(one.json.id);
    assert.equal(row.ordering_key, "acct/7");
    assert.equal(row.priority, 1);
    const seen = await call(`/job?id=${one.json.id}`);
    assert.deepEqual([seen.json.status, seen.json.result.status, seen.json.attempts], ["DONE", 200, 1]);

    const many = await call("/notify-many", { key: "acct/8", urls: ["http://target.test/ok/c1", "http://target.test/ok/c2"] });
    assert.equal(many.json.length, 2);
    for (const id of many.json) await waitFor(async () => (await w.job(id))?.status === "DONE", `${id} DONE`);
    assert.deepEqual(w.target.to("/ok/c").map((r) => r.path), ["/ok/c1", "/ok/c2"]);
    assert.equal((await call("/counts")).json.DONE, 3);

    // Typed errors: 400 (bad job), 409 (redrive of a job that is not DEAD), 404, and a duplicate.
    const bad = await call("/notify", { account: 1, url: "ftp://nope", event: {} });
    assert.deepEqual([bad.status, bad.json.error, bad.json.status], [502, "BadRequestError", 400]);
    const conflict = await call("/redrive", { id: one.json.id });
    assert.deepEqual([conflict.json.error, conflict.json.status], ["ConflictError", 409]);
    const missing = await call("/cancel", { id: "no-such-job" });
    assert.deepEqual([missing.json.error, missing.json.status], ["NotFoundError", 404]);
    const d1 = await call("/notify", { account: 2, url: "http://target.test/slow/300/dup", event: {}, dedupe: "welcome-2" });
    const d2 = await call("/notify", { account: 2, url: "http://target.test/slow/300/dup", event: {}, dedupe: "welcome-2" });
    assert.deepEqual([d2.json.id, d2.json.duplicate], [d1.json.id, true]);
  } finally {
    await w.dispose();
  }
});

test("the producer example answers nobody without its own token", async () => {
  const w = await start({ extraWorkers: [producer, { ...producer, name: "unset", bindings: { ORDERLY_TOKEN: TOKEN } }] });
  try {
    const p = await w.mf.getWorker("producer");
    for (const path of ["/job?id=x", "/counts", "/cancel", "/redrive", "/notify", "/fedify"]) {
      const anonymous = await p.fetch(`http://producer.test${path}`, { method: "POST", body: "{}" });
      assert.equal(anonymous.status, 401, path);
      const wrong = await p.fetch(`http://producer.test${path}`, { method: "POST", body: "{}", headers: { authorization: "Bearer nope" } });
      assert.equal(wrong.status, 401, path);
    }
    const unset = await (await w.mf.getWorker("unset")).fetch("http://producer.test/counts", authed());
    assert.equal(unset.status, 503, "no PRODUCER_TOKEN: closed");
    assert.equal(w.target.requests.length, 0);
    assert.equal((await w.counts()).PENDING, 0, "nothing was submitted");
  } finally {
    await w.dispose();
  }
});

test("a wrong token is an UnauthorizedError", async () => {
  const w = await start({ extraWorkers: [{ ...producer, bindings: { ORDERLY_TOKEN: "not-the-token", PRODUCER_TOKEN } }] });
  try {
    const p = await w.mf.getWorker("producer");
    const res = await p.fetch("http://producer.test/counts", authed());
    assert.deepEqual(await res.json().then((b) => [b.error, b.status]), ["UnauthorizedError", 401]);
  } finally {
    await w.dispose();
  }
});

test("a message sent the way Fedify's WorkersMessageQueue sends it runs in its key's order", async () => {
  const w = await start({ extraWorkers: [producer] });
  try {
    const p = await w.mf.getWorker("producer");
    for (const i of [1, 2, 3]) {
      const res = await p.fetch("http://producer.test/fedify", {
        ...authed(),
        method: "POST",
        body: JSON.stringify({ orderingKey: "https://example.social/users/alice", payload: webhook(`/ok/fedify-${i}`, { i }) }),
      });
      assert.equal(res.status, 202);
    }
    await waitFor(() => w.target.to("/ok/fedify-").length === 3, "three deliveries");
    assert.deepEqual(w.target.to("/ok/fedify-").map((r) => JSON.parse(r.body).i), [1, 2, 3]);
    const rows = await w.db.prepare("SELECT ordering_key, status FROM job WHERE ordering_key = ?").bind("https://example.social/users/alice").all();
    assert.deepEqual(rows.results.map((r) => r.status), ["DONE", "DONE", "DONE"]);
  } finally {
    await w.dispose();
  }
});

test("the client maps 413 and 503 answers, and works with plain fetch", async () => {
  const answers = [
    [413, { error: "more than 500 jobs in one request" }],
    [503, { error: "D1: unavailable; try again" }],
    [418, { error: "teapot" }],
  ];
  const fake = async (request) => {
    assert.equal(request.headers.get("authorization"), "Bearer t0k");
    const [status, body] = answers.shift();
    return new Response(JSON.stringify(body), { status });
  };
  const c = new OrderlyClient({ token: "t0k", baseUrl: "https://orderly.example/", fetch: fake });
  await assert.rejects(c.enqueue([1, 2]), (e) => e instanceof TooLargeError && e.status === 413);
  await assert.rejects(c.counts(), (e) => e instanceof UnavailableError && /unavailable/.test(e.message));
  await assert.rejects(c.counts(), (e) => e instanceof OrderlyError && e.name === "OrderlyError" && e.status === 418);
  assert.throws(() => new OrderlyClient({}), /ADMIN_TOKEN/);
});

test("a 2xx answer that is not orderly's JSON is an error, and the token never shows", async () => {
  const bodies = ["<html>proxy login</html>", "", "[1]"];
  const fake = async () => new Response(bodies.shift(), { status: 200, headers: { "content-type": "text/html" } });
  const c = new OrderlyClient({ token: "s3cret-t0ken", baseUrl: "https://orderly.example", fetch: fake });
  await assert.rejects(c.enqueue({ type: "webhook" }), (e) => e instanceof OrderlyError && /without a JSON object/.test(e.message));
  await assert.rejects(c.counts(), (e) => e instanceof OrderlyError && e.status === 200);
  await assert.rejects(c.enqueue({ type: "webhook" }), (e) => e instanceof OrderlyError && /does not list/.test(e.message));
  assert.ok(!JSON.stringify(c).includes("s3cret"), JSON.stringify(c));
  assert.ok(!Object.values(c).some((v) => String(v).includes("s3cret")));
  const { inspect } = await import("node:util");
  assert.ok(!inspect(c, { showHidden: true }).includes("s3cret"), inspect(c));
});

test("the client replaces a pending job in its place, debounces, and cancels a key and a filter", async () => {
  const w = await start({ vars: { ORDERING_MODE: "strict" } });
  try {
    const fetch = async (input, init) => {
      const r = new Request(input, init);
      const body = ["GET", "HEAD"].includes(r.method) ? undefined : await r.text();
      return w.mf.dispatchFetch(r.url, { method: r.method, headers: r.headers, body });
    };
    const c = new OrderlyClient({ token: TOKEN, baseUrl: w.url.href, fetch });
    const later = { orderingKey: "doc", delaySeconds: 600 };
    const first = await c.enqueue(webhook("/ok/v1"), { ...later, dedupeKey: "doc-1" });
    const again = await c.enqueue(webhook("/ok/v2"), { ...later, dedupeKey: "doc-1", onDuplicate: "replace" });
    assert.deepEqual([again.id, again.duplicate, again.replaced], [first.id, true, true]);
    assert.match(JSON.stringify((await c.get(first.id)).job.payload), /\/ok\/v2/);
    const debounced = await c.enqueue(webhook("/ok/d"), { orderingKey: "other", dedupeKey: "d", debounceSeconds: 300 });
    assert.equal((await c.enqueue(webhook("/ok/d2"), { orderingKey: "other", dedupeKey: "d", debounceSeconds: 300 })).id, debounced.id);
    assert.deepEqual(await c.cancelKey("doc").then((r) => [r.cancelled, r.ids]), [1, [first.id]]);
    const dry = await c.cancelMatching({ ordering_key: "other" }, { dryRun: true });
    assert.deepEqual([dry.dry_run, dry.matched, dry.running], [true, 1, 0]);
    assert.equal((await c.cancelMatching({ ordering_key: "other" })).cancelled, 1);
    assert.equal((await c.get(debounced.id)).job.last_error, "cancelled");
  } finally {
    await w.dispose();
  }
});
