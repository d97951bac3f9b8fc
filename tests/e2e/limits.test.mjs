// Flow control per limit key (design §20) end to end: the built worker under miniflare with real
// simulated Queues and D1 (or the Durable Object shards), LIMITS from its vars, an operator's
// pause through the API, and an in-process HTTP target that counts what runs at once.
import { test } from "node:test";
import assert from "node:assert/strict";
import { start, webhook, waitFor, sleep } from "./harness.mjs";

const LIMITS = JSON.stringify({
  "one.test": { concurrency: 1 },
  "down.test": { trip_after: 2, cooldown_seconds: 5 },
});

async function submit(w, jobs) {
  const r = await w.api("POST", "/jobs", { jobs });
  assert.equal(r.status, 202, r.text);
  return r.json.jobs.map((j) => j.id);
}

const finished = (w, ids) =>
  waitFor(async () => (await Promise.all(ids.map((id) => w.job(id)))).every((j) => j?.status === "DONE"), `jobs ${ids} done`, 60_000);

test("a limit key's concurrency holds across invocations, its pause holds everything, its resume wakes the parked", async () => {
  const w = await start({ vars: { LIMITS } });
  try {
    let inflight = 0;
    let most = 0;
    w.target.onRequest = async (e) => {
      if (!e.path.startsWith("/ok/one/")) return;
      inflight++;
      most = Math.max(most, inflight);
      await sleep(300);
      inflight--;
    };
    // Six jobs of six ordering keys (nothing orders them) under one limit key of concurrency 1.
    const ids = await submit(w, Array.from({ length: 6 }, (_, i) => ({
      payload: webhook(`/ok/one/${i}`), ordering_key: `k${i}`, limit_key: "one.test",
    })));
    await finished(w, ids);
    assert.equal(most, 1, "never two of one.test's jobs at once");
    for (const id of ids) assert.equal((await w.job(id)).attempts, 1, `${id}: a job that waited for its slot spent no attempt`);
    let shown = (await w.api("GET", "/limits/one.test")).json;
    assert.deepEqual([shown.running, shown.waiting, shown.policy], [0, 0, { concurrency: 1 }]);

    // Paused: a job of the key is parked, not run, no attempt spent; resumed: it runs.
    const paused = await w.api("PUT", "/limits/one.test", { paused: true });
    assert.equal(paused.status, 200, paused.text);
    const [held] = await submit(w, [{ payload: webhook("/ok/one/paused"), limit_key: "one.test" }]);
    await waitFor(async () => (await w.api("GET", "/limits/one.test")).json.waiting === 1, "the job parked", 30_000);
    await sleep(1_000);
    assert.equal(w.target.to("/ok/one/paused").length, 0, "nothing of a paused key runs");
    const parked = await w.job(held);
    assert.deepEqual([parked.status, parked.attempts], ["PENDING", 0]);
    const resumed = await w.api("PUT", "/limits/one.test", { paused: false });
    assert.equal(resumed.status, 200, resumed.text);
    await finished(w, [held]);
    shown = (await w.api("GET", "/limits")).json.limits.find((l) => l.limit_key === "one.test");
    assert.deepEqual([shown.paused, shown.waiting], [false, 0]);
  } finally {
    await w.dispose();
  }
});

test("a limit key's breaker opens after its failures, holds its jobs without spending attempts, and a probe closes it", async () => {
  const w = await start({ vars: { LIMITS } });
  try {
    // Two failures in a row (each job fails once, then succeeds) open down.test's breaker.
    const failing = await submit(w, [
      { payload: webhook("/fail/1/a"), limit_key: "down.test", max_attempts: 3 },
      { payload: webhook("/fail/1/b"), limit_key: "down.test", max_attempts: 3 },
    ]);
    await waitFor(async () => (await w.api("GET", "/limits/down.test")).json.breaker.open_until != null, "the breaker open", 30_000);
    const [later] = await submit(w, [{ payload: webhook("/ok/down/later"), limit_key: "down.test" }]);
    await sleep(1_000);
    assert.equal(w.target.to("/ok/down/later").length, 0, "nothing starts while the breaker is open");
    assert.equal((await w.job(later)).attempts, 0, "a job held by the breaker spends no attempt");
    // Past the cool-down one job probes; its success closes the breaker and the rest run.
    await finished(w, [...failing, later]);
    const shown = (await w.api("GET", "/limits/down.test")).json;
    assert.deepEqual([shown.breaker.failures, shown.breaker.open_until], [0, null]);
    assert.equal((await w.job(later)).attempts, 1);
  } finally {
    await w.dispose();
  }
});

test("a tripped breaker beside a concurrency resumes when its cool-down ends, without the cron", async () => {
  // Issue 38 as a user met it: the README's policy shape for a remote host, the host down for its
  // first three requests. The breaker's open key must not hold a slot nobody runs in: the first
  // job after the cool-down starts within a second of its end (a held job comes back a batch wait
  // early and its invocation waits for the end, design §20.4), with no cron tick in this test to
  // rescue a stuck key.
  const limits = JSON.stringify({ "host.test": { concurrency: 1, trip_after: 3, cooldown_seconds: 4 } });
  const w = await start({ vars: { LIMITS: limits } });
  try {
    const paths = Array.from({ length: 6 }, (_, i) => `/host/${i}`);
    for (const p of paths) w.target.answers.set(p, 503);
    let seen = 0;
    w.target.onRequest = (e) => {
      if (e.path.startsWith("/host/") && ++seen > 3) w.target.answers.clear();
    };
    const ids = await submit(w, paths.map((p, i) => ({
      payload: webhook(p), ordering_key: `k${i}`, limit_key: "host.test", max_attempts: 5,
    })));
    const openUntil = await waitFor(async () => (await w.api("GET", "/limits/host.test")).json.breaker.open_until, "the breaker open", 30_000);
    await finished(w, ids);
    const first = w.target.to("/host/")[3];
    console.log(`the first start after the opening came ${first.at - openUntil} ms after its cool-down ended`);
    assert.ok(first.at <= openUntil + 1_000, `the first start after the opening came ${first.at - openUntil} ms after its cool-down ended`);
    const shown = (await w.api("GET", "/limits/host.test")).json;
    assert.deepEqual([shown.running, shown.waiting, shown.breaker.open_until], [0, 0, null]);
  } finally {
    await w.dispose();
  }
});

test("a job past its deadline is DEAD \"expired\" without running, and a run past its timeout is stopped and retried", async () => {
  const w = await start({ vars: { LIMITS } });
  try {
    // Parked behind a pause past its 2 s deadline: when the resume wakes it, it expires.
    assert.equal((await w.api("PUT", "/limits/one.test", { paused: true })).status, 200);
    const [late] = await submit(w, [{ payload: webhook("/ok/one/late"), limit_key: "one.test", deadline_seconds: 2 }]);
    await waitFor(async () => (await w.api("GET", "/limits/one.test")).json.waiting === 1, "the job parked", 30_000);
    await sleep(2_500);
    assert.equal((await w.api("PUT", "/limits/one.test", { paused: false })).status, 200);
    await waitFor(async () => (await w.job(late))?.status === "DEAD", "the late job dead", 60_000);
    assert.match((await w.job(late)).last_error, /^expired: not started by its deadline/);
    assert.equal(w.target.to("/ok/one/late").length, 0, "an expired job never runs");

    // The target holds its first request 5 s; the job's timeout is 1 s: stopped, then run again.
    let calls = 0;
    w.target.onRequest = async (e) => {
      if (e.path === "/ok/slow" && ++calls === 1) await sleep(5_000);
    };
    const [slow] = await submit(w, [{ payload: webhook("/ok/slow"), timeout_seconds: 1 }]);
    await finished(w, [slow]);
    const { job, history } = (await w.api("GET", `/jobs/${slow}`)).json;
    assert.equal(job.attempts, 2, "the stopped run spent its attempt");
    assert.match(history[0].error ?? "", /timed out/, JSON.stringify(history));
  } finally {
    await w.dispose();
  }
});
