// examples/rust-handler: a worker of its own built on the orderly library, with a job type of its
// own (`archive`: fetch a page, keep it in R2), run under miniflare with real Queues, KV, D1 and
// R2: its jobs run in key order, a failure retries, a rate limit snoozes without spending an
// attempt, and its jobs are in orderly's API (and so on the dashboard).
import assert from "node:assert/strict";
import { test } from "node:test";
import { start, waitFor, TARGET, ONCE } from "./harness.mjs";

const example = { buildDir: "examples/rust-handler/build", workerOptions: { r2Buckets: ["ARCHIVE"] } };
const archive = (path, key) => ({ type: "archive", url: `${TARGET}${path}`, key });

for (const mode of ["strict", "lock"]) {
  test(`${mode} mode: the example's own job type runs in order, retries, snoozes and keeps history`, ONCE, async () => {
    const w = await start({ ...example, vars: { ORDERING_MODE: mode } });
    try {
      const r = await w.api("POST", "/jobs", { jobs: [
        { payload: archive("/ok/p1", "site/p1"), ordering_key: "site" },
        { payload: archive("/fail/1/p2", "site/p2"), ordering_key: "site" },
        { payload: archive("/limit/1/p3", "site/p3"), ordering_key: "site" },
        { payload: archive("/echo/p4", "site/p4"), ordering_key: "site" },
        { payload: archive("/status/404/p5", "site/p5") },
      ] });
      assert.equal(r.status, 202, r.text);
      const [p1, p2, p3, p4, p5] = r.json.jobs.map((j) => j.id);
      for (const id of [p1, p2, p3, p4]) await waitFor(async () => (await w.job(id))?.status === "DONE", `${id} DONE`);
      await waitFor(async () => (await w.job(p5))?.status === "DEAD", "the 404 DEAD");

      const bucket = await w.mf.getR2Bucket("ARCHIVE");
      assert.equal(await (await bucket.get("site/p1")).text(), "ok");
      assert.ok(await bucket.get("site/p2"), "stored after its retry");
      assert.equal(await bucket.get("site/p5"), null);

      const successes = ["p1", "p2", "p3", "p4"].map((n) => w.target.requests.findLastIndex((q) => q.path.endsWith(`/${n}`)));
      assert.deepEqual([...successes].sort((a, b) => a - b), successes, "the key's pages archived in order");

      const got = async (id) => (await w.api("GET", `/jobs/${id}`)).json;
      assert.deepEqual((await got(p1)).job.result, { key: "site/p1", bytes: 2 });
      assert.deepEqual((await got(p2)).history.map((e) => [e.outcome, e.attempt, e.http_status]), [["retry", 1, 500], ["done", 2, 200]]);
      const snoozed = await got(p3);
      assert.equal(snoozed.job.attempts, 1, "the rate limit spent no attempt");
      assert.deepEqual(snoozed.history.map((e) => [e.outcome, e.attempt, e.http_status]), [["snooze", 1, 429], ["done", 1, 200]]);
      assert.match((await w.job(p5)).last_error, /HTTP 404/);
      const listed = (await w.api("GET", "/jobs?type=archive&limit=10")).json.jobs;
      assert.equal(listed.length, 5, "the example's jobs are in the API the dashboard reads");
    } finally {
      await w.dispose();
    }
  });
}

test("the example refuses a payload its type cannot read, naming the field, and lists its types", ONCE, async () => {
  const w = await start(example);
  try {
    const bad = await w.api("POST", "/jobs", { payload: { type: "archive", url: `${TARGET}/ok/x` } });
    assert.equal(bad.status, 400);
    assert.match(bad.json.error, /missing field `key`/);
    const unknown = await w.api("POST", "/jobs", { payload: { type: "resize" } });
    assert.match(unknown.json.error, /unknown job type "resize" \(known: archive, webhook\)/);
    // A message sent straight to the queue that does not fit is DEAD with the same reason.
    await w.queue.send({ type: "archive", key: 7 }, { contentType: "json" });
    await waitFor(async () => {
      const rows = (await w.db.prepare("SELECT last_error FROM job WHERE status = 'DEAD'").all()).results;
      return rows.find((row) => row.last_error === 'payload is not a "archive" job at key: invalid type: integer `7`, expected a string');
    }, "the unreadable archive job DEAD naming the field");
  } finally {
    await w.dispose();
  }
});

test("the example's cron enqueues archive jobs from Rust, which run and land in R2", ONCE, async () => {
  const w = await start({ ...example, vars: { ARCHIVE_URLS: `${TARGET}/ok/daily, ${TARGET}/echo/news` } });
  try {
    await w.worker.scheduled({ cron: "* * * * *" });
    const rows = await waitFor(async () => {
      const r = (await w.db.prepare("SELECT id, ordering_key, dedupe_key, status, payload FROM job WHERE type = 'archive' ORDER BY ordering_key").all()).results;
      return r.length === 2 && r.every((j) => j.status === "DONE") && r;
    }, "two archive jobs DONE");
    assert.deepEqual(rows.map((j) => j.ordering_key), [`${TARGET}/echo/news`, `${TARGET}/ok/daily`]);
    assert.ok(rows.every((j) => /@\d+$/.test(j.dedupe_key)), "one per page and hour");
    const bucket = await w.mf.getR2Bucket("ARCHIVE");
    const listed = (await bucket.list()).objects.map((o) => o.key).sort();
    assert.equal(listed.length, 2);
    assert.match(listed[1], /^target\.test\/ok\/daily\/\d+\.html$/);
  } finally {
    await w.dispose();
  }
});
