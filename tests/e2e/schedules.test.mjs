// Periodic jobs (design §23) end to end: the built worker under miniflare, SCHEDULES from its vars,
// cron runs dispatched at chosen scheduled times, the jobs delivered through the real queue to the
// in-process target, on D1 and on the Durable Object shards.
import { test } from "node:test";
import assert from "node:assert/strict";
import { OrderlyClient } from "../../client/index.js";
import { start, webhook, waitFor, TOKEN } from "./harness.mjs";

const MIN = 60_000;

test("a schedule of every minute: two runs in one minute and a skipped minute enqueue one job a minute, one caught up", async () => {
  const SCHEDULES = JSON.stringify([
    { name: "beat", cron: "* * * * *", job: { payload: webhook("/ok/beat"), ordering_key: "beats" } },
  ]);
  const w = await start({ vars: { SCHEDULES } });
  try {
    const t0 = Math.floor(Date.now() / MIN) * MIN;
    const run = (at) => w.worker.scheduled({ cron: "* * * * *", scheduledTime: new Date(at) });
    await run(t0);
    await run(t0 + 30_000);
    // Minute 1 has no run.
    await run(t0 + 2 * MIN);
    await run(t0 + 2 * MIN + 1_000);
    const ids = [0, 1, 2].map((m) => `schedule:beat:${t0 + m * MIN}`);
    await waitFor(async () => (await Promise.all(ids.map((id) => w.job(id)))).every((j) => j?.status === "DONE"), "the three minutes' jobs DONE");
    const listed = await w.api("GET", "/jobs?ordering_key=beats&limit=50");
    assert.deepEqual(listed.json.jobs.map((j) => j.id).sort(), ids, "one job a minute, no more");
    assert.equal(w.target.requests.filter((r) => r.path === "/ok/beat").length, 3, "each delivered once");

    const [beat] = (await w.api("GET", "/schedules")).json.schedules;
    assert.equal(beat.last_period, t0 + 2 * MIN);
    assert.equal(beat.last_job_id, ids[2]);
    assert.equal(beat.next_period, Math.floor(Date.now() / MIN) * MIN + MIN);

    // Paused (through the JS client): a run enqueues nothing, and the resume catches none of the
    // pause up.
    const fetch = async (input, init) => {
      const r = new Request(input, init);
      const body = ["GET", "HEAD"].includes(r.method) ? undefined : await r.text();
      return w.mf.dispatchFetch(r.url, { method: r.method, headers: r.headers, body });
    };
    const client = new OrderlyClient({ token: TOKEN, baseUrl: w.url.href, fetch });
    assert.equal((await client.pauseSchedule("beat")).paused, true);
    assert.equal((await client.schedules())[0].paused, true);
    await run(t0 + 3 * MIN);
    assert.equal(await w.job(`schedule:beat:${t0 + 3 * MIN}`), null);
    assert.equal((await client.pauseSchedule("beat", false)).paused, false);
    await run(t0 + 4 * MIN);
    await waitFor(async () => (await w.job(`schedule:beat:${t0 + 4 * MIN}`))?.status === "DONE", "minute 4 DONE");
    assert.equal(await w.job(`schedule:beat:${t0 + 3 * MIN}`), null, "the paused minute is not caught up");
  } finally {
    await w.dispose();
  }
});

test("a bad SCHEDULES is a configuration error the API names", async () => {
  const w = await start({ vars: { SCHEDULES: '[{"name": "x", "cron": "61 * * * *", "job": {"payload": 1}}]' } });
  try {
    const r = await w.api("GET", "/schedules");
    assert.equal(r.status, 500);
    assert.match(r.json.error, /SCHEDULES.*minute field: 61 is outside 0-59/);
  } finally {
    await w.dispose();
  }
});
