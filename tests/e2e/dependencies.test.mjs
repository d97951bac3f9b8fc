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
