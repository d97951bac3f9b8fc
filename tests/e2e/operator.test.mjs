// The operator's and producer's view through the real worker under miniflare: each attempt in a
// job's history, results kept on DONE, cancel, bulk redrive with a dry run, per-minute activity,
// and the structured log lines Workers Logs filters on.
import { test } from "node:test";
import assert from "node:assert/strict";
import { start, webhook, waitFor } from "./harness.mjs";

test("every attempt is in the job's history and the receiver's answer is the job's result", async () => {
  const w = await start();
  try {
    const r = await w.api("POST", "/jobs", { jobs: [
      { payload: webhook("/fail/2/hist") },
      { payload: webhook("/echo/result", { hello: "world" }) },
      { payload: webhook("/big/5000/result") },
    ] });
    const [flaky, echo, big] = r.json.jobs.map((j) => j.id);
    for (const id of [flaky, echo, big]) await waitFor(async () => (await w.job(id))?.status === "DONE", `${id} DONE`);

    const got = (await w.api("GET", `/jobs/${flaky}`)).json;
    const runs = got.history.map((e) => [e.kind, e.attempt, e.outcome, e.http_status]);
    assert.deepEqual(runs, [["attempt", 1, "retry", 500], ["attempt", 2, "retry", 500], ["attempt", 3, "done", 200]]);
    assert.match(got.history[0].error, /HTTP 500/);
    assert.ok(got.history.every((e) => e.started_at <= e.at && e.actor.startsWith("inv-")));
    assert.deepEqual(got.job.result, { status: 200, content_type: "text/plain;charset=UTF-8", body: "no" });

    const echoed = (await w.api("GET", `/jobs/${echo}`)).json.job.result;
    assert.equal(echoed.status, 200);
    assert.equal(echoed.content_type, "application/json");
    assert.deepEqual(JSON.parse(echoed.body), { received: JSON.stringify({ hello: "world" }) });

    const bigResult = (await w.api("GET", `/jobs/${big}`)).json.job.result;
    assert.equal(bigResult.body.length, 1024, "only the start of a large body is read and kept");
  } finally {
    await w.dispose();
  }
});

test("a PENDING job is cancelled and audited; a finished one is refused", async () => {
  const w = await start();
  try {
    const r = await w.api("POST", "/jobs", { jobs: [{ payload: webhook("/ok/later"), delay_seconds: 600 }, { payload: webhook("/ok/now") }] });
    const [later, now] = r.json.jobs.map((j) => j.id);
    await waitFor(async () => (await w.job(now))?.status === "DONE", "the other job DONE");
    const c = await w.api("POST", `/jobs/${later}/cancel`);
    assert.equal(c.status, 200, c.text);
    assert.equal(c.json.job.status, "DEAD");
    assert.equal(c.json.job.last_error, "cancelled");
    const again = await w.api("POST", `/jobs/${later}/cancel`);
    assert.equal(again.status, 409);
    const done = await w.api("POST", `/jobs/${now}/cancel`);
    assert.equal(done.status, 409);
    assert.match(done.json.error, /DONE/);
    const history = (await w.api("GET", `/jobs/${later}`)).json.history;
    assert.deepEqual(history.map((e) => [e.kind, e.actor]), [["cancel", "api"]], "audited once, on real D1");
    assert.equal(w.target.to("/ok/later").length, 0, "never delivered");
  } finally {
    await w.dispose();
  }
});

test("bulk redrive counts first, then redrives exactly the matching dead letters", async () => {
  const w = await start();
  try {
    const r = await w.api("POST", "/jobs", { jobs: [
      { payload: webhook("/status/404/bulk-a") },
      { payload: webhook("/status/404/bulk-b") },
      { payload: webhook("/status/410/bulk-c") },
    ] });
    const ids = r.json.jobs.map((j) => j.id);
    for (const id of ids) await waitFor(async () => (await w.job(id))?.status === "DEAD", `${id} DEAD`);
    const dry = await w.api("POST", "/jobs/redrive", { dry_run: true, filter: { error: "HTTP 404" } });
    assert.deepEqual([dry.status, dry.json.matched], [200, 2]);
    assert.equal((await w.counts()).DEAD, 3, "the dry run changed nothing");

    w.target.answers.set("/status/404/bulk-a", 200);
    w.target.answers.set("/status/404/bulk-b", 200);
    const run = await w.api("POST", "/jobs/redrive", { filter: { error: "HTTP 404" } });
    assert.deepEqual([run.status, run.json.redriven, run.json.remaining], [200, 2, 0], run.text);
    for (const id of ids.slice(0, 2)) await waitFor(async () => (await w.job(id))?.status === "DONE", `${id} DONE again`);
    assert.equal((await w.job(ids[2])).status, "DEAD", "the 410 did not match");
    const h = (await w.api("GET", `/jobs/${ids[0]}`)).json.history.map((e) => e.kind === "attempt" ? e.outcome : e.kind);
    assert.deepEqual(h, ["dead", "redrive", "done"]);
  } finally {
    await w.dispose();
  }
});

test("activity counts this test's runs in the current minute", async () => {
  const w = await start();
  try {
    const r = await w.api("POST", "/jobs", { jobs: [
      { payload: webhook("/ok/act-1") }, { payload: webhook("/ok/act-2") }, { payload: webhook("/fail/1/act-3") },
      { payload: webhook("/status/404/act-4") },
    ] });
    for (const { id } of r.json.jobs) await waitFor(async () => ["DONE", "DEAD"].includes((await w.job(id))?.status), `${id} finished`);
    const { minutes } = (await w.api("GET", "/jobs/activity")).json;
    assert.equal(minutes.length, 60);
    const sum = (f) => minutes.reduce((a, m) => a + m[f], 0);
    assert.deepEqual([sum("done"), sum("failed"), sum("dead")], [3, 1, 1]);
    assert.equal(minutes[59].backlog, 0, "nothing left now");
  } finally {
    await w.dispose();
  }
});

test("log lines are JSON objects with stable fields: batches and dead jobs", async () => {
  const w = await start();
  try {
    const r = await w.api("POST", "/jobs", { payload: webhook("/status/404/logged") });
    const id = r.json.jobs[0].id;
    await waitFor(async () => (await w.job(id))?.status === "DEAD", "DEAD");
    const dead = await waitFor(() => w.events().find((e) => e.event === "job_dead" && e.job_id === id), "a job_dead line");
    assert.equal(dead.level, "warn");
    assert.equal(dead.job_type, "webhook");
    assert.match(dead.error, /HTTP 404/);
    const batch = w.events().find((e) => e.event === "batch");
    for (const field of ["queue", "mode", "messages", "acked", "retried", "deferred", "duration_ms"]) {
      assert.ok(field in batch, `batch lines carry ${field}`);
    }
    assert.equal(batch.mode, "lock");
  } finally {
    await w.dispose();
  }
});

test("lock mode: cancelling a key's failed holder lets the key's jobs run, none dead-lettered by polling", async () => {
  // Long backoffs: the failed job would hold its key for minutes.
  const w = await start({ vars: { BACKOFF_BASE_SECONDS: "600", BACKOFF_CAP_SECONDS: "3600" }, mainQueue: { maxRetries: 10 } });
  try {
    const a = (await w.api("POST", "/jobs", { payload: webhook("/status/503/holder"), ordering_key: "acct-1" })).json.jobs[0].id;
    await waitFor(async () => (await w.job(a))?.attempts === 1 && (await w.job(a)).status === "PENDING", "the holder failed once");
    assert.equal(await w.kv.get("__fedify_ordering_acct-1"), `orderly:${a}`, "it holds its key for its retry");
    const b = (await w.api("POST", "/jobs", { payload: webhook("/ok/waiting"), ordering_key: "acct-1" })).json.jobs[0].id;
    await waitFor(async () => (await w.job(b))?.deferrals >= 1, "the next job put off behind it");
    const c = await w.api("POST", `/jobs/${a}/cancel`);
    assert.equal(c.status, 200, c.text);
    assert.equal(c.json.woken, b);
    await waitFor(async () => (await w.job(b))?.status === "DONE", "the waiting job DONE");
    const after = (await w.api("POST", "/jobs", { payload: webhook("/ok/after"), ordering_key: "acct-1" })).json.jobs[0].id;
    await waitFor(async () => (await w.job(after))?.status === "DONE", "a job submitted after the cancel DONE");
    assert.equal((await w.counts()).DEAD, 1, "only the cancelled job is DEAD");
    assert.equal(await w.kv.get("__fedify_ordering_acct-1"), null, "the key is let go");
  } finally {
    await w.dispose();
  }
});

test("strict mode: cancelling a delayed head wakes the next job of its key at once", async () => {
  const w = await start({ vars: { ORDERING_MODE: "strict" } });
  try {
    const r = await w.api("POST", "/jobs", { jobs: [
      { payload: webhook("/ok/late-head"), ordering_key: "k", delay_seconds: 3600 },
      { payload: webhook("/ok/behind"), ordering_key: "k" },
    ] });
    const [head, behind] = r.json.jobs.map((j) => j.id);
    await new Promise((res) => setTimeout(res, 1500));
    assert.equal((await w.job(behind)).status, "PENDING", "waits behind its delayed head");
    const c = await w.api("POST", `/jobs/${head}/cancel`);
    assert.deepEqual([c.status, c.json.woken], [200, behind]);
    await waitFor(async () => (await w.job(behind))?.status === "DONE", "the next job DONE without waiting for the cron");
    assert.equal(w.target.to("/ok/late-head").length, 0);
  } finally {
    await w.dispose();
  }
});

test("log lines never carry a webhook URL's query string; the ledger keeps its path", async () => {
  const w = await start();
  try {
    const r = await w.api("POST", "/jobs", { payload: { type: "webhook", url: "http://target.test/status/404/services/T0?token=xoxb-s3cret", body: {} } });
    const id = r.json.jobs[0].id;
    await waitFor(async () => (await w.job(id))?.status === "DEAD", "DEAD");
    const dead = await waitFor(() => w.events().find((e) => e.event === "job_dead" && e.job_id === id), "a job_dead line");
    assert.match(dead.error, /http:\/\/target\.test\/status\/404\/services\/T0\?\[redacted\]/);
    assert.ok(!w.logs.some((l) => l.message.includes("xoxb-s3cret")), "no log line carries the secret");
    assert.match((await w.job(id)).last_error, /\/status\/404\/services\/T0/);
  } finally {
    await w.dispose();
  }
});
