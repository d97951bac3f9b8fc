// Priority lanes (design §12) under miniflare: urgent jobs travel on orderly-jobs-urgent, consumed
// independently of the main queue's backlog; a key's order holds across mixed priorities.
import { test } from "node:test";
import assert from "node:assert/strict";
import { start, webhook, waitFor } from "./harness.mjs";

const BACKLOG = 120;

/** Submits a backlog of slow normal jobs, then one urgent job; how many of the backlog were DONE
 * when the urgent job finished. */
async function urgentBehindBacklog(w) {
  const jobs = Array.from({ length: BACKLOG }, (_, i) => ({ payload: webhook(`/slow/100/backlog-${i}`) }));
  const r = await w.api("POST", "/jobs", { jobs });
  assert.equal(r.status, 202, r.text);
  const u = await w.api("POST", "/jobs", { payload: webhook("/ok/urgent"), priority: 0 });
  const id = u.json.jobs[0].id;
  await waitFor(async () => (await w.job(id))?.status === "DONE", "the urgent job DONE", 60_000);
  const urgentAt = (await w.job(id)).finished_at;
  const before = await w.db.prepare("SELECT count(*) AS n FROM job WHERE status = 'DONE' AND finished_at < ? AND id <> ?").bind(urgentAt, id).first();
  await waitFor(async () => (await w.counts()).DONE === BACKLOG + 1, "the backlog drained", 60_000);
  return before.n;
}

test("an urgent job submitted last overtakes the normal backlog on its own lane", async () => {
  // Small batches on the main queue, one at a time: a backlog that takes a while to drain.
  const w = await start({ mainQueue: { maxBatchSize: 10 } });
  try {
    const ahead = await urgentBehindBacklog(w);
    console.log(`backlog jobs finished before the urgent one: ${ahead} of ${BACKLOG}`);
    assert.ok(ahead < BACKLOG / 2, `the urgent job waited for ${ahead} of ${BACKLOG} backlog jobs`);
    const urgentMsgs = w.target.to("/ok/urgent").length;
    assert.equal(urgentMsgs, 1);
  } finally {
    await w.dispose();
  }
});

test("without the lane the urgent job queues behind the backlog (the lane is what helps)", async () => {
  const w = await start({ mainQueue: { maxBatchSize: 10 }, urgentLane: false });
  try {
    const ahead = await urgentBehindBacklog(w);
    console.log(`without a lane: ${ahead} of ${BACKLOG} finished first`);
    assert.ok(ahead >= BACKLOG / 2, `${ahead}`);
  } finally {
    await w.dispose();
  }
});

for (const mode of ["strict", "lock"]) {
  test(`a key's jobs run in their order across mixed priorities (${mode} mode)`, async () => {
    const w = await start({ vars: { ORDERING_MODE: mode } });
    try {
      const priorities = [9, 0, 5, 0, 2, 7, 1, 0];
      const jobs = priorities.map((p, i) => ({ payload: webhook(`/ok/mixed-${i}`), ordering_key: "acct/mixed", priority: p }));
      const r = await w.api("POST", "/jobs", { jobs });
      for (const { id } of r.json.jobs) await waitFor(async () => (await w.job(id))?.status === "DONE", `${id} DONE`);
      const order = w.target.to("/ok/mixed-").map((q) => Number(q.path.split("-").pop()));
      assert.deepEqual(order, priorities.map((_, i) => i), "submission order, whatever the priorities");
      const urgent = await w.db.prepare("SELECT count(*) AS n FROM job WHERE priority <= 2").first();
      assert.equal(urgent.n, 5);
    } finally {
      await w.dispose();
    }
  });
}
