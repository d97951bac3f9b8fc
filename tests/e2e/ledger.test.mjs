// The ledger, the API and maintenance end to end under miniflare.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { execFileSync } from "node:child_process";
import { start, webhook, waitFor, TOKEN } from "./harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

test("counts add up after a mixed run", async () => {
  const w = await start();
  try {
    const jobs = [
      ...Array.from({ length: 6 }, (_, i) => ({ payload: webhook(`/ok/mix/${i}`) })),
      ...Array.from({ length: 3 }, (_, i) => ({ payload: webhook(`/status/410/mix/${i}`) })),
      ...Array.from({ length: 2 }, (_, i) => ({ payload: webhook(`/fail/1/mix/${i}`), ordering_key: `mix-${i}` })),
    ];
    const res = await w.api("POST", "/jobs", { jobs });
    assert.equal(res.status, 202);
    const final = await waitFor(async () => {
      const c = await w.counts();
      return c.DONE + c.DEAD === 11 && c;
    }, "all 11 jobs finished");
    assert.deepEqual(final, { PENDING: 0, RUNNING: 0, DONE: 8, DEAD: 3 });
    console.log("counts after the mixed run:", JSON.stringify(final));
  } finally {
    await w.dispose();
  }
});

test("a duplicate delivery of a DONE job does not reach the webhook target twice", async () => {
  const w = await start();
  try {
    const body = { ...webhook("/ok/once"), __orderly_job__: { id: "once" } };
    await w.queue.send(body);
    await waitFor(async () => (await w.job("once"))?.status === "DONE", "first delivery DONE");
    const before = await w.job("once");
    // The same job delivered again, as at-least-once delivery may: straight to the consumer, so
    // its verdict is seen before the target is counted.
    const direct = await w.worker.queue("orderly-jobs", [{ id: "dup-msg", timestamp: new Date(), body, attempts: 1 }]);
    assert.deepEqual(direct.explicitAcks, ["dup-msg"], "the duplicate is acked");
    assert.equal(w.target.to("/ok/once").length, 1);
    assert.deepEqual(await w.job("once"), before, "the row is untouched");
  } finally {
    await w.dispose();
  }
});

test("a job failing max_attempts times is DEAD, listed, and redrive runs it to DONE", async () => {
  const w = await start();
  try {
    const res = await w.api("POST", "/jobs", { payload: webhook("/status/503/down"), max_attempts: 3 });
    const id = res.json.jobs[0].id;
    await waitFor(async () => (await w.job(id))?.status === "DEAD", "DEAD after 3 attempts");
    const row = (await w.api("GET", `/jobs/${id}`)).json.job;
    assert.equal(row.attempts, 3);
    assert.match(row.last_error, /HTTP 503.*attempt 3 of 3/);
    assert.equal(w.target.to("/status/503/down").length, 3);
    const dead = (await w.api("GET", "/jobs?status=DEAD")).json;
    assert.ok(dead.jobs.some((j) => j.id === id));

    w.target.answers.set("/status/503/down", 200); // the endpoint heals
    const redriven = await w.api("POST", `/jobs/${id}/redrive`);
    assert.equal(redriven.status, 200, redriven.text);
    await waitFor(async () => (await w.job(id))?.status === "DONE", "DONE after redrive");
    assert.match((await w.job(id)).last_error, /^redriven; before: .*HTTP 503/);
    assert.equal((await w.api("POST", `/jobs/${id}/redrive`)).status, 409, "only DEAD jobs are redriven");
  } finally {
    await w.dispose();
  }
});

test("a hot key with more messages than max_retries loses none to DEAD", async () => {
  // max_retries 3: a consumer that locks per message and retries while the lock is held would
  // push most of these through more than 3 deliveries and into the dead-letter queue.
  const w = await start({ mainQueue: { maxRetries: 3 } });
  try {
    await w.kv.put("__fedify_ordering_hot", "fedify-holder", { expirationTtl: 60 });
    const n = 40;
    for (let i = 0; i < n; i += 10) {
      await w.queue.sendBatch(Array.from({ length: 10 }, (_, k) => ({
        body: { __fedify_ordering_key__: "hot", __fedify_payload__: webhook(`/ok/hot/${i + k}`), __orderly_job__: { id: `h${i + k}` } },
      })));
    }
    await waitFor(async () => (await w.job("h39"))?.deferrals >= 1, "deferrals while the lock is held");
    await w.kv.delete("__fedify_ordering_hot");
    const ids = Array.from({ length: n }, (_, i) => `h${i}`);
    await waitFor(async () => (await Promise.all(ids.map((id) => w.job(id)))).every((r) => r?.status === "DONE" || r?.status === "DEAD"), "hot key drained");
    const rows = await Promise.all(ids.map((id) => w.job(id)));
    assert.deepEqual(rows.filter((r) => r.status !== "DONE").map((r) => r.id), [], "none DEAD");
    assert.ok(rows.every((r) => r.attempts === 1), "each ran on its first attempt");
    assert.deepEqual(w.target.to("/ok/hot/").map((r) => r.path), ids.map((_, i) => `/ok/hot/${i}`));
  } finally {
    await w.dispose();
  }
});

test("the API refuses missing and wrong tokens, and answers 503 without one configured", async () => {
  const w = await start();
  try {
    assert.equal((await w.api("GET", "/jobs/counts", undefined, null)).status, 401);
    assert.equal((await w.api("GET", "/jobs/counts", undefined, "wrong")).status, 401);
    const refused = await w.api("POST", "/jobs", { payload: webhook("/ok/nope") }, "wrong");
    assert.equal(refused.status, 401);
    assert.ok(refused.json.error);
    assert.equal((await w.api("GET", "/jobs/counts", undefined, TOKEN)).status, 200);
    assert.equal((await w.api("POST", "/jobs", "{not json")).status, 400);
    assert.equal((await w.api("GET", "/jobs/missing")).status, 404);
  } finally {
    await w.dispose();
  }
  const bare = await start({ adminToken: null });
  try {
    const r = await bare.api("GET", "/jobs/counts", undefined, "anything");
    assert.equal(r.status, 503);
    assert.match(r.json.error, /ADMIN_TOKEN/);
  } finally {
    await bare.dispose();
  }
});

test("a message on the dead-letter queue is recorded DEAD", async () => {
  const w = await start();
  try {
    const body = { ...webhook("/ok/never"), __orderly_job__: { id: "exhausted" } };
    const r = await w.worker.queue("orderly-dlq", [{ id: "m1", timestamp: new Date(), body, attempts: 101 }]);
    assert.deepEqual(r.explicitAcks, ["m1"]);
    const row = await w.job("exhausted");
    assert.equal(row.status, "DEAD");
    assert.equal(row.last_error, "delivery attempts exhausted");
    assert.equal(w.target.to("/ok/never").length, 0);
  } finally {
    await w.dispose();
  }
});

test("a bad var defers the batch and makes the API answer 500 naming it", async () => {
  const w = await start({ vars: { BACKOFF_CAP_SECONDS: "99999" } });
  try {
    const r = await w.api("POST", "/jobs", { payload: webhook("/ok/x") });
    assert.equal(r.status, 500);
    assert.match(r.json.error, /BACKOFF_CAP_SECONDS.*99999/);
    const body = { ...webhook("/ok/deferred"), __orderly_job__: { id: "deferred" } };
    const q = await w.worker.queue("orderly-jobs", [{ id: "m1", timestamp: new Date(), body, attempts: 1 }]);
    assert.deepEqual(q.explicitAcks, []);
    assert.deepEqual(q.retryMessages.map((m) => m.msgId), ["m1"], "deferred, not dropped");
    assert.equal(await w.job("deferred"), null);
    assert.equal(w.target.requests.length, 0);
  } finally {
    await w.dispose();
  }
});

test("maintenance re-sends a job whose runner died, and it completes", async () => {
  const w = await start();
  try {
    const now = Date.now();
    await w.db.prepare(
      `INSERT INTO job (id, type, status, payload, attempts, max_attempts, lease_owner, lease_until, next_run_at, created_at, updated_at)
       VALUES ('orphan', 'webhook', 'RUNNING', ?1, 1, 8, 'inv-dead', ?2, ?2, ?2, ?2)`,
      { route: "orphan" },
    ).bind(JSON.stringify(webhook("/ok/orphan")), now - 1000).run();
    await w.worker.scheduled({ cron: "* * * * *" });
    await waitFor(async () => (await w.job("orphan"))?.status === "DONE", "orphan DONE");
    const row = await w.job("orphan");
    assert.equal(row.attempts, 2);
    assert.match(row.last_error, /lease of inv-dead expired/);
  } finally {
    await w.dispose();
  }
});

test("the dashboard page is served without a token and carries no data", async () => {
  const w = await start();
  try {
    const r = await w.api("POST", "/jobs", { payload: webhook("/ok/page-secret", { card: "4111-secret" }), ordering_key: "acct-secret" });
    const id = r.json.jobs[0].id;
    await waitFor(async () => (await w.job(id))?.status === "DONE", "the job DONE");
    const page = await w.api("GET", "/", undefined, null);
    assert.equal(page.status, 200);
    assert.match(page.text, /<title>orderly<\/title>/);
    for (const data of [id, "4111-secret", "acct-secret", "page-secret"]) {
      assert.ok(!page.text.includes(data), `the page served without a token carries ${data}`);
    }
  } finally {
    await w.dispose();
  }
});

test("wrangler applies the migrations to a local D1", () => {
  const dir = mkdtempSync(join(tmpdir(), "orderly-migrate-"));
  try {
    const out = execFileSync(
      join(root, "node_modules/.bin/wrangler"),
      ["d1", "migrations", "apply", "DB", "--local", "--persist-to", dir, "--config", join(root, "wrangler.toml")],
      { cwd: root, encoding: "utf8", env: { ...process.env, CI: "1", WRANGLER_SEND_METRICS: "false" } },
    );
    assert.match(out, /0001_job_ledger\.sql/);
    const tables = execFileSync(
      join(root, "node_modules/.bin/wrangler"),
      ["d1", "execute", "DB", "--local", "--persist-to", dir, "--config", join(root, "wrangler.toml"), "--json",
        "--command", "SELECT name FROM sqlite_master WHERE type = 'index' AND name = 'job_dedupe_active'"],
      { cwd: root, encoding: "utf8", env: { ...process.env, CI: "1", WRANGLER_SEND_METRICS: "false" } },
    );
    assert.match(tables, /job_dedupe_active/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a renamed dead-letter queue is recognised from DEAD_LETTER_QUEUE, and an unknown queue's batch is deferred", async () => {
  const w = await start({
    vars: { DEAD_LETTER_QUEUE: "jobs-dead" },
    dlqName: "jobs-dead",
    extraConsumers: { stray: { maxBatchSize: 10, maxBatchTimeout: 1, maxRetries: 1 } },
    extraProducers: { TO_DLQ: { queueName: "jobs-dead" } },
  });
  try {
    await (await w.mf.getQueueProducer("TO_DLQ")).send({ ...webhook("/ok/never-dlq"), __orderly_job__: { id: "dl" } });
    await waitFor(async () => (await w.job("dl"))?.status === "DEAD", "the dead letter recorded");
    assert.match((await w.job("dl")).last_error, /delivery attempts exhausted/);
    // The stray queue's batch delivered straight to the consumer: its verdict is seen first.
    const body = { ...webhook("/ok/never-stray"), __orderly_job__: { id: "stray" } };
    const q = await w.worker.queue("stray", [{ id: "m-stray", timestamp: new Date(), body, attempts: 1 }]);
    assert.deepEqual(q.explicitAcks, []);
    assert.deepEqual(q.retryMessages.map((m) => m.msgId), ["m-stray"], "deferred, not dropped");
    assert.equal(await w.job("stray"), null, "a stray queue's message is neither run nor recorded");
    assert.equal(w.target.requests.length, 0);
  } finally {
    await w.dispose();
  }
});
