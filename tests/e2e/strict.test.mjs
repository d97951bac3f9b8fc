// Strict mode (design §3b) through real (simulated) Queues, KV and D1: order with failures, parking,
// ON_DEAD = block then skip, redrive of a blocked head, and the cron waking a key whose wake-up
// was lost.
import { test } from "node:test";
import assert from "node:assert/strict";
import { start, webhook, waitFor, sleep } from "./harness.mjs";

const STRICT = { ORDERING_MODE: "strict" };
const BLOCK = { ORDERING_MODE: "strict", ON_DEAD: "block" };

/** The `n` of every request the target saw for `prefix`, in arrival order. */
const seen = (w, prefix) => w.target.to(prefix).map((r) => JSON.parse(r.body).n);

test("jobs of a key run in submission order through failures, and the ones behind wait unpolled", async () => {
  const w = await start({ vars: STRICT });
  try {
    // 12 jobs; the 3rd and 7th fail once. Submitted in two requests so they arrive in several batches.
    const job = (n) => ({
      payload: webhook(n === 3 || n === 7 ? `/fail/1/strict/${n}` : `/ok/strict/${n}`, { n }),
      ordering_key: "s",
    });
    const first = await w.api("POST", "/jobs", { jobs: [1, 2, 3, 4, 5, 6].map(job) });
    const second = await w.api("POST", "/jobs", { jobs: [7, 8, 9, 10, 11, 12].map(job) });
    const ids = [...first.json.jobs, ...second.json.jobs].map((j) => j.id);
    await waitFor(async () => (await w.counts()).DONE === 12, "12 DONE", 30_000);
    // Every attempt, failed ones included, in seq order: nothing overtook a failed job.
    assert.deepEqual(seen(w, "/"), [1, 2, 3, 3, 4, 5, 6, 7, 7, 8, 9, 10, 11, 12]);
    const rows = await Promise.all(ids.map((id) => w.job(id)));
    assert.deepEqual(rows.map((r) => r.seq), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    assert.deepEqual(rows.map((r) => r.attempts), [1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 1, 1], "waiting is not an attempt");
    // No KV lock in strict mode.
    assert.equal((await w.kv.list()).keys.length, 0);
  } finally {
    await w.dispose();
  }
});

test("ON_DEAD=block holds the key behind a DEAD head until an operator skips it", async () => {
  const w = await start({ vars: BLOCK });
  try {
    const r = await w.api("POST", "/jobs", {
      jobs: [
        { payload: webhook("/status/410/blk", { n: 1 }), ordering_key: "blk" },
        { payload: webhook("/ok/blk/2", { n: 2 }), ordering_key: "blk" },
      ],
    });
    const [a, b] = r.json.jobs.map((j) => j.id);
    await waitFor(async () => (await w.job(a))?.status === "DEAD", "the head DEAD");
    await sleep(1500);
    assert.equal((await w.job(b)).status, "PENDING", "b waits behind the DEAD head");
    assert.equal(w.target.to("/ok/blk").length, 0);

    const blocked = await w.api("GET", "/keys?state=blocked");
    assert.equal(blocked.status, 200);
    assert.deepEqual(blocked.json.keys.map((k) => [k.key, k.head.id, k.waiting]), [["blk", a, 1]]);
    assert.match(blocked.json.keys[0].head.last_error, /HTTP 410/);

    const skip = await w.api("POST", "/keys/blk/skip");
    assert.equal(skip.status, 200, skip.text);
    await waitFor(async () => (await w.job(b))?.status === "DONE", "b DONE after the skip");
    assert.deepEqual((await w.api("GET", "/keys?state=blocked")).json.keys, []);
    assert.equal((await w.api("POST", "/keys/blk/skip")).status, 409, "nothing left to skip");
    assert.equal((await w.job(a)).status, "DEAD", "a skipped head stays DEAD");
  } finally {
    await w.dispose();
  }
});

test("redriving a blocked head runs it first, then the jobs behind it", async () => {
  const w = await start({ vars: BLOCK });
  try {
    const r = await w.api("POST", "/jobs", {
      jobs: [1, 2, 3].map((n) => ({ payload: webhook(n === 1 ? "/status/503/rd" : `/ok/rd/${n}`, { n }), ordering_key: "rd", max_attempts: 1 })),
    });
    const ids = r.json.jobs.map((j) => j.id);
    await waitFor(async () => (await w.job(ids[0]))?.status === "DEAD", "the head DEAD (out of attempts)");
    w.target.answers.set("/status/503/rd", 200); // the receiver is fixed
    assert.equal((await w.api("POST", `/jobs/${ids[0]}/redrive`)).status, 200);
    await waitFor(async () => (await w.counts()).DONE === 3, "all three DONE");
    assert.deepEqual(seen(w, "/"), [1, 1, 2, 3]);
  } finally {
    await w.dispose();
  }
});

test("the cron wakes a key whose head is due and whose wake-up was lost", async () => {
  const w = await start({ vars: STRICT });
  try {
    // A recorded head with no message in flight (its wake-up was lost).
    const old = Date.now() - 120_000;
    await w.db.prepare(
      `INSERT INTO job (id, type, status, ordering_key, payload, attempts, max_attempts, next_run_at, created_at, updated_at, seq)
       VALUES ('lost-head', 'webhook', 'PENDING', 'lost', ?1, 1, 8, ?2, ?2, ?2, 1)`,
      { route: "lost" },
    ).bind(JSON.stringify(webhook("/ok/lost", { n: 1 })), old).run();
    await sleep(1000);
    assert.equal((await w.job("lost-head")).status, "PENDING");
    await w.worker.scheduled({ cron: "* * * * *" });
    await waitFor(async () => (await w.job("lost-head"))?.status === "DONE", "the woken head DONE");
  } finally {
    await w.dispose();
  }
});

test("a direct producer's messages of one key run in first-recorded order", async () => {
  const w = await start({ vars: STRICT });
  try {
    const body = (n) => ({ __fedify_ordering_key__: "d", __fedify_payload__: webhook(`/ok/d/${n}`, { n }), __orderly_job__: { id: `d${n}` } });
    await w.queue.sendBatch([1, 2, 3, 4, 5].map((n) => ({ body: body(n) })));
    await waitFor(async () => (await w.counts()).DONE === 5, "5 DONE");
    assert.deepEqual(seen(w, "/ok/d"), [1, 2, 3, 4, 5]);
    assert.deepEqual(await Promise.all([1, 2, 3, 4, 5].map(async (n) => (await w.job(`d${n}`)).seq)), [1, 2, 3, 4, 5]);
  } finally {
    await w.dispose();
  }
});

test("a key's runs are recorded each with its own start and end: one after another, each within its run", async () => {
  const w = await start({ vars: STRICT });
  try {
    // Ten jobs of one key in one request: strict mode runs them as one chain, the target holding
    // each request 60 ms. Each recorded attempt must begin after the one before it ended, and
    // lie around the target's own sight of its request (the chain's claim time, recorded for
    // all ten, once read 82, 145, ... 652 ms for a 60 ms run).
    const jobs = Array.from({ length: 10 }, (_, i) => ({ payload: webhook(`/slow/60/chain/${i + 1}`, { n: i + 1 }), ordering_key: "chain" }));
    const ids = (await w.api("POST", "/jobs", { jobs })).json.jobs.map((j) => j.id);
    await waitFor(async () => (await w.counts()).DONE === 10, "10 DONE", 30_000);
    const runs = [];
    for (const id of ids) {
      const got = (await w.api("GET", `/jobs/${id}`)).json;
      const attempts = got.history.filter((e) => e.kind === "attempt");
      assert.equal(attempts.length, 1, JSON.stringify(got.history));
      runs.push({ id, started: attempts[0].started_at, ended: attempts[0].at, finished: got.job.finished_at });
    }
    const seenAt = w.target.to("/slow/60/chain/").map((r) => r.at);
    for (const [i, r] of runs.entries()) {
      assert.equal(r.finished, r.ended, `${r.id}: the row and its history agree`);
      assert.ok(r.ended - r.started >= 55 && r.ended - r.started < 1_000, `${r.id} ran ${r.ended - r.started} ms for a 60 ms request`);
      assert.ok(r.started <= seenAt[i] && seenAt[i] <= r.ended, `${r.id}'s recorded run [${r.started}, ${r.ended}] holds the target's sight of it (${seenAt[i]})`);
      if (i > 0) assert.ok(r.started >= runs[i - 1].ended, `${r.id} is recorded as starting before ${runs[i - 1].id} ended`);
    }
  } finally {
    await w.dispose();
  }
});
