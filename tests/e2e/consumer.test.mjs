// The consumer end to end: the built worker under miniflare with real simulated Queues, KV and
// D1, and an in-process HTTP target answering the webhooks.
import { test } from "node:test";
import assert from "node:assert/strict";
import { start, webhook, waitFor, sleep, TARGET } from "./harness.mjs";

const keyed = (key, payload, meta) => ({
  __fedify_ordering_key__: key,
  __fedify_payload__: payload,
  ...(meta ? { __orderly_job__: meta } : {}),
});

async function allDone(w, ids) {
  await waitFor(async () => {
    const rows = await Promise.all(ids.map((id) => w.job(id)));
    return rows.every((r) => r && (r.status === "DONE" || r.status === "DEAD"));
  }, `jobs ${ids.join(",")} finished`);
}

test("messages of one key are delivered in send order", async () => {
  const w = await start();
  try {
    // Sent one by one (distinct timestamps) and as one batch (same timestamp, batch order).
    for (let i = 0; i < 15; i++) await w.queue.send(keyed("actor:1", webhook(`/ok/order/${i}`), { id: `o${i}` }));
    await w.queue.sendBatch(Array.from({ length: 15 }, (_, k) => ({ body: keyed("actor:1", webhook(`/ok/order/${15 + k}`), { id: `o${15 + k}` }) })));
    await allDone(w, Array.from({ length: 30 }, (_, i) => `o${i}`));
    assert.deepEqual(w.target.to("/ok/order/").map((r) => r.path), Array.from({ length: 30 }, (_, i) => `/ok/order/${i}`));
    assert.equal(await w.kv.get("__fedify_ordering_actor:1"), null, "the lock key is gone after processing");
  } finally {
    await w.dispose();
  }
});

test("a lock written as Fedify would makes the key's messages retry until it is gone", async () => {
  const w = await start();
  try {
    await w.kv.put("__fedify_ordering_busy", "fedify-holder", { expirationTtl: 60 });
    for (let i = 0; i < 3; i++) await w.queue.send(keyed("busy", webhook(`/ok/busy/${i}`), { id: `b${i}` }));
    await w.queue.send(webhook("/ok/free")); // another, unkeyed job is not blocked
    await waitFor(() => w.target.to("/ok/free").length === 1, "the unkeyed job");
    await waitFor(async () => (await w.job("b2"))?.deferrals >= 2, "deferrals of the held key");
    assert.equal(w.target.to("/ok/busy/").length, 0, "nothing ran while the key was held");
    const held = await w.job("b0");
    assert.equal(held.status, "PENDING");
    assert.equal(held.attempts, 0, "deferrals are not attempts");

    await w.kv.delete("__fedify_ordering_busy");
    await allDone(w, ["b0", "b1", "b2"]);
    assert.deepEqual(w.target.to("/ok/busy/").map((r) => r.path), ["/ok/busy/0", "/ok/busy/1", "/ok/busy/2"]);
    assert.equal((await w.job("b0")).attempts, 1);
    assert.equal(await w.kv.get("__fedify_ordering_busy"), null);
  } finally {
    await w.dispose();
  }
});

test("a custom prefix and a TTL below 60 (clamped) work", async () => {
  // KV refuses an expirationTtl below 60: unclamped, every keyed job would fail to lock.
  const w = await start({ vars: { ORDERING_KEY_PREFIX: "custom:", ORDERING_LOCK_TTL: "5" } });
  try {
    const seen = [];
    w.target.onRequest = async (r) => { if (r.path.startsWith("/ok/prefixed")) seen.push(await w.kv.get("custom:k")); };
    await w.queue.send(keyed("k", webhook("/ok/prefixed"), { id: "p1" }));
    await allDone(w, ["p1"]);
    assert.deepEqual(seen, ["orderly:p1"], "the lock is held under the custom prefix while the job runs");
    assert.equal(await w.kv.get("custom:k"), null);

    await w.kv.put("custom:k2", "someone", { expirationTtl: 60 });
    await w.queue.send(keyed("k2", webhook("/ok/prefixed2"), { id: "p2" }));
    await waitFor(async () => (await w.job("p2"))?.deferrals >= 1, "a deferral under the custom prefix");
    assert.equal(w.target.to("/ok/prefixed2").length, 0);
  } finally {
    await w.dispose();
  }
});

test("an unkeyed raw body passes through unchanged", async () => {
  const w = await start();
  try {
    const body = { text: "héllo ✓", nested: { list: [1, 2.5, null, true, { deep: "x" }], empty: {} }, big: 2 ** 40 };
    await w.queue.send({ ...webhook("/ok/raw", body), __orderly_job__: { id: "raw1" } });
    await allDone(w, ["raw1"]);
    const got = w.target.to("/ok/raw");
    assert.equal(got.length, 1);
    assert.deepEqual(JSON.parse(got[0].body), body);
    assert.equal(got[0].headers["content-type"], "application/json");
    const row = await w.job("raw1");
    assert.equal(row.ordering_key, null);
    assert.deepEqual(JSON.parse(row.payload), webhook("/ok/raw", body), "metadata never leaks into the payload");
  } finally {
    await w.dispose();
  }
});

test("a 5xx is retried and later succeeds", async () => {
  const w = await start();
  try {
    await w.queue.send({ ...webhook("/fail/2/flaky"), __orderly_job__: { id: "flaky" } });
    await waitFor(async () => (await w.job("flaky"))?.status === "DONE", "flaky DONE");
    assert.equal(w.target.to("/fail/2/flaky").length, 3);
    assert.equal((await w.job("flaky")).attempts, 3);
  } finally {
    await w.dispose();
  }
});

test("a webhook that outlasts WEBHOOK_TIMEOUT_SECONDS is aborted and retried", async () => {
  const w = await start({ vars: { WEBHOOK_TIMEOUT_SECONDS: "1" } });
  try {
    // The receiver hangs on the first request only.
    w.target.onRequest = (r) => { if (r.path === "/slow/4000/t") setTimeout(() => w.target.answers.set(r.path, 200), 50); };
    const started = Date.now();
    await w.queue.send({ ...webhook("/slow/4000/t"), __orderly_job__: { id: "slow" } });
    await waitFor(async () => (await w.job("slow"))?.status === "DONE", "slow DONE");
    const row = await w.job("slow");
    assert.equal(row.attempts, 2);
    assert.match(row.last_error, /timed out after 1000 ms/);
    assert.ok(Date.now() - started < 4000 + 1000, "the first request was abandoned, not awaited");
  } finally {
    await w.dispose();
  }
});

test("a 4xx goes to DEAD at once, with the reason", async () => {
  const w = await start();
  try {
    await w.queue.send({ ...webhook("/status/404/gone"), __orderly_job__: { id: "gone" } });
    await waitFor(async () => (await w.job("gone"))?.status === "DEAD", "gone DEAD");
    const row = await w.job("gone");
    assert.match(row.last_error, /HTTP 404/);
    assert.equal(row.attempts, 1);
    await sleep(1500);
    assert.equal(w.target.to("/status/404/gone").length, 1, "a permanent failure is not retried");
  } finally {
    await w.dispose();
  }
});

test("malformed bodies do not disturb the rest of the batch", async () => {
  const w = await start();
  try {
    await w.queue.sendBatch([
      { body: keyed("m", webhook("/ok/mal/1"), { id: "g1" }) },
      { body: new Uint8Array([1, 2, 3]), contentType: "bytes" },
      { body: { __fedify_ordering_key__: 5, __fedify_payload__: {} } },
      { body: "just text", contentType: "text" },
      { body: { type: "webhook", __orderly_job__: { max_attempts: "many" } } },
      { body: keyed("m", webhook("/ok/mal/2"), { id: "g2" }) },
    ]);
    await allDone(w, ["g1", "g2"]);
    await waitFor(async () => (await w.counts()).DEAD === 4, "four DEAD records");
    assert.deepEqual(w.target.to("/ok/mal/").map((r) => r.path), ["/ok/mal/1", "/ok/mal/2"]);
    const dead = (await w.api("GET", "/jobs?status=DEAD")).json.jobs.map((j) => j.last_error).sort();
    assert.equal(dead.length, 4);
    assert.ok(dead.some((e) => /bytes/.test(e)), dead.join(" | "));
    assert.ok(dead.some((e) => /__fedify_ordering_key__ must be a string/.test(e)), dead.join(" | "));
    assert.ok(dead.some((e) => /no "type"/.test(e)), dead.join(" | "));
    assert.ok(dead.some((e) => /max_attempts/.test(e)), dead.join(" | "));
  } finally {
    await w.dispose();
  }
});

test("a key held by a failing job lets no later message of that key overtake it", async () => {
  const w = await start();
  try {
    const res = await w.api("POST", "/jobs", {
      jobs: [
        { payload: webhook("/fail/1/hold-a"), ordering_key: "hold" },
        { payload: webhook("/ok/hold-b"), ordering_key: "hold" },
        { payload: webhook("/ok/hold-c"), ordering_key: "hold" },
        { payload: webhook("/ok/other-key"), ordering_key: "other" },
      ],
    });
    assert.equal(res.status, 202);
    const ids = res.json.jobs.map((j) => j.id);
    await allDone(w, ids);
    const order = w.target.requests.filter((r) => r.path.includes("hold")).map((r) => r.path);
    assert.deepEqual(order, ["/fail/1/hold-a", "/fail/1/hold-a", "/ok/hold-b", "/ok/hold-c"]);
    assert.ok(w.target.requests.findIndex((r) => r.path === "/ok/other-key") < 2, "another key is never blocked");
    const b = await w.job(ids[1]);
    assert.equal(b.attempts, 1, "the held-back job ran once");
    assert.ok(b.deferrals >= 1);
    assert.equal(await w.kv.get("__fedify_ordering_hold"), null, "the key is released after success");
  } finally {
    await w.dispose();
  }
});

test("webhooks are signed per Standard Webhooks when WEBHOOK_SECRET is set", async () => {
  const secret = "whsec_" + Buffer.from("a test signing key of 32 bytes!!").toString("base64");
  const w = await start({ vars: { WEBHOOK_SECRET: secret } });
  try {
    await w.queue.send({ ...webhook("/ok/signed", { a: 1 }), __orderly_job__: { id: "sig1" } });
    await allDone(w, ["sig1"]);
    const [req] = w.target.to("/ok/signed");
    const { createHmac } = await import("node:crypto");
    const key = Buffer.from(secret.slice("whsec_".length), "base64");
    const expected = createHmac("sha256", key).update(`${req.headers["webhook-id"]}.${req.headers["webhook-timestamp"]}.${req.body}`).digest("base64");
    assert.equal(req.headers["webhook-id"], "sig1");
    assert.ok(Math.abs(Number(req.headers["webhook-timestamp"]) - Date.now() / 1000) < 60);
    assert.equal(req.headers["webhook-signature"], `v1,${expected}`);
  } finally {
    await w.dispose();
  }
});
