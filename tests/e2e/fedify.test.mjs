// Fedify on orderly (design §14), with the real @fedify/fedify from npm: a Fedify app (examples/
// fedify-worker, bundled as wrangler bundles it, nodejs_compat) whose queue is orderly's
// OrderlyMessageQueue sends Create, Update, Update, Delete of one note to followers on three
// servers; orderly (strict mode, PAYLOAD_KEY set) runs each outbox task through the app's
// OrderlyFedifyHandler entrypoint. One server answers 503 for a while, one 429 with Retry-After
// once, one is healthy: each inbox receives the note's activities in order, each once, and no
// private key is in D1 or the API in plain.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";
import { start, waitFor, migrate, bundleWorker, MODULES_RULES, writeAtomically } from "./harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const TOKEN = "test-admin-token";
/** The Fedify app holds orderly's producer token: submit and read only. */
const PRODUCER = "test-producer-token-0123";
const PAYLOAD_KEY = `k1:${Buffer.alloc(32, 9).toString("base64")}`;

/** The example, bundled as wrangler bundles it, importing orderly's package by name from its tarball. */
async function bundle() {
  const taken = await bundleWorker(join(root, "examples/fedify-worker/src/index.js"), join(root, "build/fedify-worker.mjs"));
  assert.deepEqual(taken.sort(), ["client/answers.js", "client/fedify.js", "client/index.js"], "orderly's adapter from the packed package, without the compiled worker");
}

/** Three inbox servers: a.test healthy; b.test 503 for its first 4 requests, c.test 429 with
 * Retry-After for its first 2 (Fedify knocks twice per delivery, with two signature specs, so
 * each is a failed delivery or two). */
function inboxes() {
  const got = { "a.test": [], "b.test": [], "c.test": [] };
  const calls = { "a.test": 0, "b.test": 0, "c.test": 0 };
  const handle = async (request) => {
    const url = new URL(request.url);
    const host = url.host;
    if (!(host in got)) return new Response("not found", { status: 404 });
    if (request.method !== "POST") return new Response("not found", { status: 404 });
    calls[host]++;
    if (host === "b.test" && calls[host] <= 4) return new Response("busy", { status: 503 });
    if (host === "c.test" && calls[host] <= 2) return new Response("slow down", { status: 429, headers: { "retry-after": "2" } });
    const activity = await request.json();
    got[host].push({ type: activity.type, id: activity.id, signed: request.headers.has("signature") || request.headers.has("signature-input") });
    return new Response(null, { status: 202 });
  };
  return { got, calls, handle };
}

test("a Fedify app's deliveries run through orderly in each inbox's order, once each, keys sealed", async () => {
  await bundle();
  const inbox = inboxes();
  const fedify = (target) => [{
    name: "fedify",
    modules: true,
    scriptPath: join(root, "build/fedify-worker.mjs"),
    compatibilityDate: "2026-08-01",
    compatibilityFlags: ["nodejs_compat"],
    serviceBindings: { ORDERLY: "orderly" },
    bindings: { ORDERLY_TOKEN: PRODUCER },
    outboundService: (request) => inbox.handle(request),
  }];
  const w = await start({
    vars: { ORDERING_MODE: "strict", SERVICE_HANDLERS: "fedify=FEDIFY", PAYLOAD_KEY, PRODUCER_TOKEN: PRODUCER },
    extraWorkers: fedify,
    serviceBindings: { FEDIFY: { name: "fedify", entrypoint: "OrderlyFedifyHandler" } },
  });
  try {
    const app = await w.mf.getWorker("fedify");
    const recipients = ["a.test", "b.test", "c.test"].map((h) => ({ id: `https://${h}/users/bob`, inbox: `https://${h}/inbox` }));
    const object = "https://fedify.test/notes/1";
    const sends = [["Create", 1], ["Update", 2], ["Update", 3], ["Delete", 4]];
    for (const [kind, n] of sends) {
      const r = await app.fetch("https://fedify.test/send", { method: "POST", body: JSON.stringify({ kind, n, object, recipients }) });
      assert.equal(r.status, 202, await r.text());
    }
    const want = sends.map(([, n]) => `https://fedify.test/activities/${n}`);
    for (const host of Object.keys(inbox.got)) {
      await waitFor(() => inbox.got[host].length >= 4, `${host}: four activities`, 60_000);
    }
    for (const host of Object.keys(inbox.got)) {
      assert.deepEqual(inbox.got[host].map((a) => a.id), want, `${host} received the note's activities in order, once each`);
      assert.ok(inbox.got[host].every((a) => a.signed), "signed by Fedify");
    }
    // An inbox has its activity a moment before the run's completion is recorded: wait for the ledger.
    const read = async () => (await w.db.prepare("SELECT id, type, status, ordering_key, limit_key, attempts, payload FROM job ORDER BY ordering_key, seq").all()).results;
    await waitFor(async () => (await read()).every((j) => j.status === "DONE"), "every delivery recorded DONE", 20_000);
    const jobs = await read();
    assert.equal(jobs.length, 12, "one job per activity and inbox");
    assert.ok(jobs.every((j) => j.type === "fedify" && j.status === "DONE"));
    assert.ok(jobs.every((j) => j.ordering_key.startsWith(`${object}\n`)), "Fedify's key, with the recipient's origin");
    assert.ok(jobs.every((j) => j.limit_key === j.ordering_key.split("\n")[1]), "each delivery's limit key is its server's origin");
    const dump = JSON.stringify(jobs) + JSON.stringify((await w.db.prepare("SELECT * FROM job_event").all()).results);
    assert.ok(!/"d"\s*:/.test(dump) && !dump.includes("privateKey"), "no private JWK in D1");
    assert.ok(jobs.every((j) => j.payload.startsWith("sealed:v1:k1:")));
    const history = async (host) => {
      const out = [];
      for (const j of jobs.filter((x) => x.ordering_key.endsWith(`https://${host}`))) {
        const got = (await w.api("GET", `/jobs/${encodeURIComponent(j.id)}`)).json;
        assert.equal(got.job.payload, "redacted", "the API never shows a fedify payload");
        out.push(...got.history.map((e) => e.outcome));
      }
      return out;
    };
    assert.deepEqual(await history("a.test"), ["done", "done", "done", "done"]);
    const b = await history("b.test");
    assert.ok(b.includes("retry") && b.filter((o) => o === "done").length === 4, `b.test's failures retried by orderly: ${b}`);
    // Fedify re-enqueued the message it was running (Retry-After): the job snoozed in place, no
    // new job behind the note's later activities.
    assert.deepEqual(await history("c.test"), ["snooze", "done", "done", "done", "done"]);
  } finally {
    await w.dispose();
  }
});

test("in one Worker: a Fedify app with orderly embedded delivers in each inbox's order, its tasks run in the same isolate", async () => {
  const pass = process.env.ORDERLY_E2E_LEDGER === "do" ? "do" : "d1";
  const out = join(root, `build/fedify-one-worker-${pass}`);
  mkdirSync(out, { recursive: true });
  const taken = await bundleWorker(join(root, "examples/fedify-one-worker/src/index.js"), join(out, "index.mjs"));
  for (const f of ["client/fedify.js", "client/worker.js", "dist/worker/orderly.js"]) assert.ok(taken.includes(f), `${f}: ${taken}`);
  const inbox = inboxes();
  const w = await start({
    vars: { ORDERING_MODE: "strict", PAYLOAD_KEY, PRODUCER_TOKEN: PRODUCER },
    workerOptions: {
      scriptPath: join(out, "index.mjs"),
      modulesRoot: out,
      compatibilityFlags: ["nodejs_compat"],
      outboundService: (request) => inbox.handle(request),
    },
  });
  try {
    const recipients = ["a.test", "b.test", "c.test"].map((h) => ({ id: `https://${h}/users/bob`, inbox: `https://${h}/inbox` }));
    const object = "https://fedify.test/notes/1";
    const sends = [["Create", 1], ["Update", 2], ["Delete", 3]];
    for (const [kind, n] of sends) {
      const r = await w.mf.dispatchFetch("https://fedify.test/send", { method: "POST", body: JSON.stringify({ kind, n, object, recipients }) });
      assert.equal(r.status, 202, await r.text());
    }
    const want = sends.map(([, n]) => `https://fedify.test/activities/${n}`);
    for (const host of Object.keys(inbox.got)) {
      await waitFor(() => inbox.got[host].length >= 3, `${host}: three activities`, 60_000);
    }
    for (const host of Object.keys(inbox.got)) {
      assert.deepEqual(inbox.got[host].map((a) => a.id), want, `${host} received the note's activities in order, once each`);
      assert.ok(inbox.got[host].every((a) => a.signed), "signed by Fedify");
    }
    // One job per activity and inbox, every one run by the Worker's own fedify handler. An inbox
    // has its activity a moment before the run's completion is recorded: wait for the ledger.
    const list = async () => (await w.api("GET", "/orderly/jobs?type=fedify&limit=100")).json.jobs;
    await waitFor(async () => (await list()).every((j) => j.status === "DONE"), "every delivery recorded DONE", 20_000);
    const jobs = await list();
    assert.equal(jobs.length, 9, JSON.stringify(jobs));
    assert.ok(jobs.every((j) => j.status === "DONE"), JSON.stringify(jobs.map((j) => j.status)));
    assert.equal((await w.api("GET", `/orderly/jobs/${encodeURIComponent(jobs[0].id)}`)).json.job.payload, "redacted", "sealed: the API never shows it");
    const history = async (host) => {
      const outcomes = [];
      for (const j of jobs.filter((x) => x.ordering_key.endsWith(`https://${host}`))) {
        outcomes.push(...(await w.api("GET", `/orderly/jobs/${encodeURIComponent(j.id)}`)).json.history.map((e) => e.outcome));
      }
      return outcomes;
    };
    assert.ok((await history("b.test")).includes("retry"), "b.test's 503s retried by orderly");
    assert.ok((await history("c.test")).includes("snooze"), "c.test's Retry-After snoozed the job in place");
  } finally {
    await w.dispose();
  }
});

test("OrderlyMessageQueue type-checks as Fedify's own MessageQueue", () => {
  const dir = join(root, "build/typecheck-fedify");
  mkdirSync(dir, { recursive: true });
  writeAtomically(join(dir, "use.ts"), `
import type { MessageQueue } from "@fedify/fedify";
import { OrderlyMessageQueue } from "../../client/fedify.js";
const queue: MessageQueue = new OrderlyMessageQueue({ token: "t", service: { fetch: (r: Request) => fetch(r) } });
export default queue;
`);
  writeAtomically(join(dir, "misuse.ts"), `
import { OrderlyMessageQueue } from "../../client/fedify.js";
new OrderlyMessageQueue({ tokn: "t" });
`);
  const tsconfig = (file) => JSON.stringify({
    compilerOptions: { noEmit: true, strict: true, target: "ES2022", module: "ES2022", moduleResolution: "bundler", lib: ["ES2022", "DOM"], skipLibCheck: true, allowJs: false },
    include: [file],
  });
  // One config per file, so the D1 and Durable Object passes, which run at once, write the same.
  const tsc = (file) => {
    const config = join(dir, `tsconfig.${file}.json`);
    writeAtomically(config, tsconfig(file));
    try {
      execFileSync(join(root, "node_modules/.bin/tsc"), ["-p", config], { cwd: root, encoding: "utf8" });
      return "";
    } catch (e) {
      return String(e.stdout);
    }
  };
  assert.equal(tsc("use.ts"), "", "the adapter is a MessageQueue");
  assert.match(tsc("misuse.ts"), /misuse\.ts.*error TS/, "and the types bite");
});

test("a fan-out task's deliveries are submitted when it ends, with ids from the task: in order, once", async () => {
  await bundle();
  const inbox = inboxes();
  const w = await start({
    vars: { ORDERING_MODE: "strict", SERVICE_HANDLERS: "fedify=FEDIFY", PAYLOAD_KEY, PRODUCER_TOKEN: PRODUCER },
    extraWorkers: () => [{
      name: "fedify", modules: true, scriptPath: join(root, "build/fedify-worker.mjs"), compatibilityDate: "2026-08-01",
      compatibilityFlags: ["nodejs_compat"], serviceBindings: { ORDERLY: "orderly" }, bindings: { ORDERLY_TOKEN: PRODUCER },
      outboundService: (request) => inbox.handle(request),
    }],
    serviceBindings: { FEDIFY: { name: "fedify", entrypoint: "OrderlyFedifyHandler" } },
  });
  try {
    const app = await w.mf.getWorker("fedify");
    const recipients = ["a.test", "b.test", "c.test"].map((h) => ({ id: `https://${h}/users/bob`, inbox: `https://${h}/inbox` }));
    const object = "https://fedify.test/notes/2";
    for (const [kind, n] of [["Create", 11], ["Update", 12], ["Delete", 13]]) {
      const r = await app.fetch("https://fedify.test/send", { method: "POST", body: JSON.stringify({ kind, n, object, recipients, fanout: "force" }) });
      assert.equal(r.status, 202, await r.text());
    }
    for (const host of Object.keys(inbox.got)) await waitFor(() => inbox.got[host].length >= 3, `${host}: three activities`, 60_000);
    const want = [11, 12, 13].map((n) => `https://fedify.test/activities/${n}`);
    for (const host of Object.keys(inbox.got)) assert.deepEqual(inbox.got[host].map((a) => a.id), want, host);
    const jobs = (await w.db.prepare("SELECT id, ordering_key, status FROM job ORDER BY created_at").all()).results;
    const fanouts = jobs.filter((j) => j.ordering_key === object);
    const outbox = jobs.filter((j) => j.ordering_key !== object);
    assert.equal(fanouts.length, 3, "one fan-out task per activity, keyed by the object");
    assert.equal(outbox.length, 9, "three deliveries each, submitted by the task");
    assert.ok(outbox.every((j) => fanouts.some((f) => j.id.startsWith(`${f.id}/`))), "ids from their task: a retried task submits the same jobs");
    assert.ok(jobs.every((j) => j.status === "DONE"));
  } finally {
    await w.dispose();
  }
});

for (const concurrency of [4, 16]) {
  test(`at C=${concurrency} through a model of Queues: each inbox still gets the note's activities in order, once`, async () => {
    // Miniflare runs one consumer invocation at a time; the benchmark's model of Queues hands
    // batches to up to C invocations of the real worker at once, and delivers what it sends.
    await bundle();
    // Batches of 2: the 15 deliveries and their wake-ups are spread over concurrent invocations.
    process.env.BENCH_MAX_BATCH = "2";
    const bench = await import("../../bench/run.mjs");
    bench.install();
    const inbox = inboxes();
    const mf = new Miniflare({
      workers: [
        {
          name: "orderly", modules: true, modulesRules: MODULES_RULES, compatibilityDate: "2026-08-01", cf: false,
          scriptPath: join(root, "build/bench-orderly.mjs"), modulesRoot: join(root, "build"),
          kvNamespaces: ["ORDERING_KV"], d1Databases: ["DB"], queueProducers: { JOBS: { queueName: "orderly-jobs" } },
          bindings: { ADMIN_TOKEN: TOKEN, PRODUCER_TOKEN: PRODUCER, ORDERING_MODE: "strict", SERVICE_HANDLERS: "fedify=FEDIFY", PAYLOAD_KEY, BACKOFF_BASE_SECONDS: "1", BACKOFF_CAP_SECONDS: "2", BENCH_LANE: "0" },
          serviceBindings: { FEDIFY: { name: "fedify", entrypoint: "OrderlyFedifyHandler" } },
        },
        {
          name: "fedify", modules: true, scriptPath: join(root, "build/fedify-worker.mjs"), compatibilityDate: "2026-08-01",
          compatibilityFlags: ["nodejs_compat"], serviceBindings: { ORDERLY: "orderly" }, bindings: { ORDERLY_TOKEN: PRODUCER },
          outboundService: (request) => inbox.handle(request),
        },
      ],
    });
    try {
      await mf.ready;
      await migrate(await mf.getD1Database("DB"));
      const app = await mf.getWorker("fedify");
      const recipients = ["a.test", "b.test", "c.test"].map((h) => ({ id: `https://${h}/users/bob`, inbox: `https://${h}/inbox` }));
      const object = "https://fedify.test/notes/3";
      const sends = [["Create", 21], ["Update", 22], ["Update", 23], ["Update", 24], ["Delete", 25]];
      for (const [kind, n] of sends) {
        const r = await app.fetch("https://fedify.test/send", { method: "POST", body: JSON.stringify({ kind, n, object, recipients }) });
        assert.equal(r.status, 202, await r.text());
      }
      const initial = await (await mf.dispatchFetch("http://orderly.test/__outbox")).json();
      const q = await bench.drain(mf, await mf.getWorker("orderly"), initial, concurrency);
      assert.equal(q.deadLettered, 0);
      assert.ok(q.maxInflight > 1, `invocations overlapped (at most ${q.maxInflight} at once)`);
      const want = sends.map(([, n]) => `https://fedify.test/activities/${n}`);
      for (const host of Object.keys(inbox.got)) {
        assert.deepEqual(inbox.got[host].map((a) => a.id), want, `${host}: in order, once each, at C=${concurrency}`);
      }
      const db = await mf.getD1Database("DB");
      const jobs = (await db.prepare("SELECT status FROM job").all()).results;
      assert.ok(jobs.length === 15 && jobs.every((j) => j.status === "DONE"), JSON.stringify(jobs));
    } finally {
      await mf.dispose();
    }
  });
}

/** orderly and the Fedify app beside it, the app's inboxes answered by `handle`. */
async function fedifyPair(handle, { vars = {}, appBindings = {} } = {}) {
  return start({
    vars: { ORDERING_MODE: "strict", SERVICE_HANDLERS: "fedify=FEDIFY", PAYLOAD_KEY, PRODUCER_TOKEN: PRODUCER, ...vars },
    extraWorkers: () => [{
      name: "fedify", modules: true, scriptPath: join(root, "build/fedify-worker.mjs"), compatibilityDate: "2026-08-01",
      compatibilityFlags: ["nodejs_compat"], serviceBindings: { ORDERLY: "orderly" },
      bindings: { ORDERLY_TOKEN: PRODUCER, ...appBindings },
      outboundService: handle,
    }],
    serviceBindings: { FEDIFY: { name: "fedify", entrypoint: "OrderlyFedifyHandler" } },
  });
}

test("a fan-out to 1,000 inboxes is submitted under the body limit and delivers to each, in order", async () => {
  // Each outbox job carries the actor's keys (about 5 KB): 1,000 of them are 5 MB, five times
  // POST /jobs' 1 MiB limit, so the adapter submits them in several requests.
  await bundle();
  const got = new Map();
  const handle = async (request) => {
    const url = new URL(request.url);
    if (request.method !== "POST" || url.pathname !== "/inbox") return new Response("not found", { status: 404 });
    const activity = await request.json();
    if (!got.has(url.host)) got.set(url.host, []);
    got.get(url.host).push(activity.id);
    return new Response(null, { status: 202 });
  };
  const w = await fedifyPair(handle, { vars: { STRICT_RUN_BUDGET: "1000" } });
  try {
    const app = await w.mf.getWorker("fedify");
    const hosts = Array.from({ length: 1000 }, (_, i) => `s${i}.test`);
    const recipients = hosts.map((h) => ({ id: `https://${h}/users/bob`, inbox: `https://${h}/inbox` }));
    const object = "https://fedify.test/notes/1000";
    for (const [kind, n] of [["Create", 31], ["Delete", 32]]) {
      const r = await app.fetch("https://fedify.test/send", { method: "POST", body: JSON.stringify({ kind, n, object, recipients }) });
      assert.equal(r.status, 202, await r.text());
    }
    const delivered = () => [...got.values()].reduce((n, ids) => n + ids.length, 0);
    await waitFor(() => delivered() >= 2000, "2,000 deliveries", 170_000);
    const want = [31, 32].map((n) => `https://fedify.test/activities/${n}`);
    assert.equal(got.size, 1000, "every server got the note");
    for (const h of hosts) assert.deepEqual(got.get(h), want, `${h}: Create then Delete, once each`);
    const counts = (await w.api("GET", "/jobs/counts")).json;
    assert.equal(counts.DEAD, 0, JSON.stringify(counts));
  } finally {
    await w.dispose();
  }
});

for (const [limit, vars, appBindings] of [
  ["Fedify's retry policy", {}, { OUTBOX_MAX_ATTEMPTS: "3" }],
  ["orderly's MAX_SNOOZES", { MAX_SNOOZES: "2" }, {}],
]) {
  test(`an inbox answering 429 for ever: ${limit} ends the retries, the reason in the job`, async () => {
    // Fedify re-enqueues the message it runs (attempt + 1, Retry-After: 1); orderly snoozes the job
    // with that message as its next payload, so Fedify's count goes up and its policy can end it.
    await bundle();
    const calls = [];
    const handle = async (request) => {
      const url = new URL(request.url);
      if (request.method !== "POST" || url.pathname !== "/inbox") return new Response("not found", { status: 404 });
      calls.push(Date.now());
      return new Response("slow down", { status: 429, headers: { "retry-after": "1" } });
    };
    const w = await fedifyPair(handle, { vars, appBindings });
    try {
      const app = await w.mf.getWorker("fedify");
      const recipients = [{ id: "https://busy.test/users/bob", inbox: "https://busy.test/inbox" }];
      const r = await app.fetch("https://fedify.test/send", {
        method: "POST", body: JSON.stringify({ kind: "Create", n: 41, object: "https://fedify.test/notes/41", recipients }),
      });
      assert.equal(r.status, 202, await r.text());
      const finished = async () => (await w.db.prepare("SELECT id, status, snoozes, last_error FROM job WHERE status IN ('DONE', 'DEAD')").all()).results;
      await waitFor(async () => (await finished()).length === 1, "the job ends", 90_000);
      const [job] = await finished();
      const history = (await w.api("GET", `/jobs/${encodeURIComponent(job.id)}`)).json.history.map((e) => e.outcome);
      if (appBindings.OUTBOX_MAX_ATTEMPTS) {
        // Fedify's attempts 0, 1 and 2 are retried in place; attempt 3 reaches its policy's limit,
        // Fedify gives up (its log and its permanent-failure handler say so) and the task ends.
        assert.equal(job.status, "DONE", JSON.stringify(job));
        assert.deepEqual(history, ["snooze", "snooze", "snooze", "done"], "Fedify saw its attempts count up");
        assert.equal(job.snoozes, 3);
      } else {
        assert.equal(job.status, "DEAD", JSON.stringify(job));
        assert.match(job.last_error, /snoozed 2 times already, MAX_SNOOZES \(2\) allows no more/);
        assert.deepEqual(history, ["snooze", "snooze", "dead"]);
      }
      const n = calls.length;
      await new Promise((r) => setTimeout(r, 3000));
      assert.equal(calls.length, n, "no more requests once it ended");
    } finally {
      await w.dispose();
    }
  });
}
