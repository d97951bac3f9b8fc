// Dependencies (design §24) end to end: the built worker under miniflare, jobs submitted with
// "after" through the API and the JS client, delivered through the real queue to the in-process
// target, in both ordering modes, on D1 and on the Durable Object shards.
import { test } from "node:test";
import assert from "node:assert/strict";
import { OrderlyClient } from "../../client/index.js";
import { start, webhook, waitFor, TOKEN } from "./harness.mjs";

/** The JS client over the worker under test. */
function clientOf(w) {
  const fetch = async (input, init) => {
    const r = new Request(input, init);
    const body = ["GET", "HEAD"].includes(r.method) ? undefined : await r.text();
    return w.mf.dispatchFetch(r.url, { method: r.method, headers: r.headers, body });
  };
  return new OrderlyClient({ token: TOKEN, baseUrl: w.url.href, fetch });
}

for (const mode of ["lock", "strict"]) {
  test(`${mode} mode: a diamond of four jobs over three ordering keys runs in a valid order`, async () => {
    const w = await start({ vars: { ORDERING_MODE: mode } });
    try {
      const client = clientOf(w);
      // a takes a while, so b and c are submitted long before it finishes; d waits for both.
      const jobs = [
        { payload: webhook("/slow/400/a"), options: { id: "a", orderingKey: "k1" } },
        { payload: webhook("/ok/b"), options: { id: "b", orderingKey: "k2", after: ["a"] } },
        { payload: webhook("/slow/200/c"), options: { id: "c", orderingKey: "k3", after: ["a"] } },
        { payload: webhook("/ok/d"), options: { id: "d", orderingKey: "k1", after: ["b", "c"] } },
      ];
      const answer = await client.enqueueJobs(jobs);
      assert.deepEqual(answer.map((j) => j.id), ["a", "b", "c", "d"]);
      const waiting = (await client.get("d")).job;
      assert.deepEqual(waiting.waiting_on, ["b", "c"], "GET /jobs/{id} shows what it waits on");
      await waitFor(async () => (await w.job("d"))?.status === "DONE", "d DONE");
      const at = (name) => {
        const r = w.target.requests.filter((q) => q.path.endsWith(`/${name}`));
        assert.equal(r.length, 1, `${name} delivered once`);
        return r[0].at;
      };
      const finished = async (id) => (await w.job(id)).finished_at;
      for (const [later, earlier] of [["b", "a"], ["c", "a"], ["d", "b"], ["d", "c"]]) {
        assert.ok(at(later) >= (await finished(earlier)), `${later} started after ${earlier} finished`);
      }
      assert.equal((await client.get("d")).job.waiting_on, undefined, "nothing left to wait on");
    } finally {
      await w.dispose();
    }
  });
}

test("a DEAD dependency ends its dependents DEAD, saying which, unless they run anyway; an unknown one is refused", async () => {
  const w = await start();
  try {
    const r = await w.api("POST", "/jobs", {
      jobs: [
        { id: "x", payload: webhook("/status/410/x") },
        { id: "y", payload: webhook("/ok/y"), ordering_key: "k", after: ["x"] },
        { id: "z", payload: webhook("/ok/z"), after: ["y"] },
        { id: "anyway", payload: webhook("/ok/anyway"), after: ["x"], after_dead: "run" },
      ],
    });
    assert.equal(r.status, 202, JSON.stringify(r.json));
    await waitFor(async () => (await w.job("anyway"))?.status === "DONE", "anyway DONE");
    await waitFor(async () => (await w.job("z"))?.status === "DEAD", "z DEAD");
    assert.equal((await w.job("x")).status, "DEAD");
    assert.equal((await w.job("y")).last_error, "a job it runs after ended DEAD: x");
    assert.equal((await w.job("z")).last_error, "a job it runs after ended DEAD: y");
    assert.equal(w.target.to("/ok/y").length + w.target.to("/ok/z").length, 0, "y and z never ran");

    const unknown = await w.api("POST", "/jobs", { payload: webhook("/ok/u"), after: ["nope"] });
    assert.equal(unknown.status, 400);
    assert.match(unknown.json.error, /"nope": no such job/);
    const forward = await w.api("POST", "/jobs", { jobs: [{ id: "p", payload: webhook("/ok/p"), after: ["q"] }, { id: "q", payload: webhook("/ok/q") }] });
    assert.equal(forward.status, 400);
    assert.equal(forward.json.index, 0);
    assert.equal(await w.job("p"), null, "nothing recorded");
  } finally {
    await w.dispose();
  }
});

test("a batch of 50 jobs over 10 ordering keys calls back once with 50 results", async () => {
  const w = await start({ vars: { ORDERING_MODE: "strict" } });
  try {
    const client = clientOf(w);
    const jobs = Array.from({ length: 50 }, (_, i) => ({
      payload: webhook(`/echo/m${i}`, { n: i }),
      options: { id: `m${i}`, orderingKey: `k${i % 10}` },
    }));
    const then = { payload: webhook("/echo/callback", { report: "nightly" }), options: { id: "batch-1" } };
    const answer = await client.enqueueBatch(jobs, then);
    assert.equal(answer.jobs.length, 50);
    assert.equal(answer.then.id, "batch-1");
    await waitFor(async () => (await w.job("batch-1"))?.status === "DONE", "the callback DONE", 60_000);
    const calls = w.target.to("/echo/callback");
    assert.equal(calls.length, 1, "called back once");
    const body = JSON.parse(calls[0].body);
    assert.equal(body.report, "nightly", "its own body kept");
    assert.equal(body.batch.id, "batch-1");
    assert.equal(body.batch.jobs.length, 50, "every job");
    body.batch.jobs.forEach((m, i) => {
      assert.equal(m.id, `m${i}`, "in the batch's order");
      assert.equal(m.status, "DONE");
      assert.deepEqual(JSON.parse(m.result.body), { received: JSON.stringify({ n: i }) }, "its result");
    });
    for (let i = 0; i < 50; i++) {
      const member = w.target.requests.filter((r) => r.path === `/echo/m${i}`);
      assert.equal(member.length, 1);
      assert.ok(member[0].at <= calls[0].at, `m${i} ran before the callback`);
    }
    const progress = await client.batch("batch-1");
    assert.deepEqual([progress.total, progress.finished, progress.done, progress.dead, progress.then.status], [50, 50, 50, 0, "DONE"]);
  } finally {
    await w.dispose();
  }
});

// Running after jobs that have already finished is the common case, not an edge: on D1 the
// registration of waits whose dependencies had all finished was a batch of no statements, which D1
// refuses, and stranded the job and, in strict mode, its key (design §26).
for (const mode of ["lock", "strict"]) {
  test(`${mode} mode: jobs after jobs already DONE or DEAD, keyed and unkeyed, run or die at once, and their keys move on`, async () => {
    const w = await start({ vars: { ORDERING_MODE: mode } });
    try {
      const first = await w.api("POST", "/jobs", {
        jobs: [
          { id: "done1", payload: webhook("/ok/done1"), ordering_key: "k" },
          { id: "done2", payload: webhook("/ok/done2") },
          { id: "dead1", payload: webhook("/status/410/dead1"), ordering_key: "k3" },
        ],
      });
      assert.equal(first.status, 202, JSON.stringify(first.json));
      for (const [id, status] of [["done1", "DONE"], ["done2", "DONE"], ["dead1", "DEAD"]]) {
        await waitFor(async () => (await w.job(id))?.status === status, `${id} ${status}`);
      }
      const r = await w.api("POST", "/jobs", {
        jobs: [
          { id: "a", payload: webhook("/ok/a"), ordering_key: "k", after: ["done1"] },
          { id: "u", payload: webhook("/ok/u"), after: ["done1", "done2"] },
          { id: "b", payload: webhook("/ok/b"), ordering_key: "k2", after: ["dead1"] },
          { id: "c", payload: webhook("/ok/c"), after: ["done1", "dead1"] },
          { id: "anyway", payload: webhook("/ok/anyway"), ordering_key: "k2", after: ["done2", "dead1"], after_dead: "run" },
          { id: "next", payload: webhook("/ok/next"), ordering_key: "k" },
        ],
      });
      assert.equal(r.status, 202, JSON.stringify(r.json));
      for (const [id, status] of [["a", "DONE"], ["u", "DONE"], ["anyway", "DONE"], ["next", "DONE"], ["b", "DEAD"], ["c", "DEAD"]]) {
        await waitFor(async () => (await w.job(id))?.status === status, `${id} ${status}`);
      }
      assert.equal((await w.job("b")).last_error, "a job it runs after ended DEAD: dead1");
      assert.equal((await w.job("c")).last_error, "a job it runs after ended DEAD: dead1");
      assert.equal(w.target.to("/ok/b").length + w.target.to("/ok/c").length, 0, "b and c never ran");
      assert.ok(w.target.to("/ok/next")[0].at >= w.target.to("/ok/a")[0].at, "the key's next job ran after the one that waited");
      // Submitting again changes nothing: the same jobs, duplicates.
      const again = await w.api("POST", "/jobs", { id: "a", payload: webhook("/ok/a"), ordering_key: "k", after: ["done1"] });
      assert.equal(again.status, 202, JSON.stringify(again.json));
      assert.deepEqual(again.json.jobs, [{ id: "a", status: "DONE", duplicate: true }]);
    } finally {
      await w.dispose();
    }
  });
}

test("maintenance registers a wait a submission left unregistered after its dependency finished, and bulk actions matching nothing answer 200", async () => {
  const w = await start({ vars: { ORDERING_MODE: "strict" } });
  try {
    const r = await w.api("POST", "/jobs", {
      jobs: [
        { id: "dep", payload: webhook("/slow/1500/dep"), ordering_key: "m1" },
        { id: "s", payload: webhook("/ok/s"), ordering_key: "m2", after: ["dep"] },
      ],
    });
    assert.equal(r.status, 202, JSON.stringify(r.json));
    // As a submission that died between recording the wait and registering it leaves it, a while ago.
    await w.db.prepare("DELETE FROM job_waiter WHERE job_id = ?1").bind("s").run();
    await w.db.prepare("UPDATE job_wait SET registered = 0, created_at = created_at - 600000 WHERE job_id = ?1").bind("s").run();
    await waitFor(async () => (await w.job("dep"))?.status === "DONE", "dep DONE");
    assert.equal((await w.job("s")).status, "PENDING", "nothing released s");
    await w.worker.scheduled({ cron: "* * * * *" });
    await waitFor(async () => (await w.job("s"))?.status === "DONE", "s DONE after maintenance");
    assert.equal(w.target.to("/ok/s").length, 1);

    for (const path of ["/jobs/redrive", "/jobs/cancel"]) {
      for (const dry_run of [true, false]) {
        const none = await w.api("POST", path, { filter: { type: "none-such" }, dry_run });
        assert.equal(none.status, 200, `${path} ${dry_run}: ${JSON.stringify(none.json)}`);
        assert.equal(none.json.remaining ?? 0, 0);
      }
    }
  } finally {
    await w.dispose();
  }
});
