// Moving a D1 ledger to Durable Object shards (design §19.7), as an operator would: a worker on D1
// with jobs in every state (done, a key blocked by a DEAD head with jobs waiting behind it, an
// unkeyed DEAD job, a job waiting on a blocked one, a paused key's job, a trace context),
// `scripts/move-ledger.mjs` copying it to four shards in small pages (and once more: a move run
// again is the same move) and comparing the counts, jobs and every other table's rows; then the
// same worker on the shards (LEDGER = "do") goes on where D1 left off: the blocked key's jobs run
// in order after a skip and release the job waiting on them, the paused key's job waits for its
// resume, a redriven job runs, a new job of a key takes the next place in its order.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { start, webhook, waitFor, TOKEN, ONCE } from "./harness.mjs";
import { moveLedger } from "../../scripts/move-ledger.mjs";

const BLOCK = { ORDERING_MODE: "strict", ON_DEAD: "block" };
const PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const objects = { LEDGER_OBJECT: { className: "OrderlyLedger", useSQLite: true } };

test("a D1 ledger moved to four shards goes on where it left off", ONCE, async () => {
  const dir = mkdtempSync(join(tmpdir(), "orderly-move-"));
  let w = await start({ ledger: null, vars: BLOCK, workerOptions: { durableObjects: objects, durableObjectsPersist: join(dir, "do") } });
  let ids;
  try {
    const m = await w.api("POST", "/jobs", { jobs: [1, 2, 3].map((n) => ({ payload: webhook(`/ok/m/${n}`, { n }), ordering_key: "m" })) });
    const b = await w.api("POST", "/jobs", {
      jobs: [
        { payload: webhook("/status/410/b", { n: 1 }), ordering_key: "b" },
        { payload: webhook("/ok/b/2", { n: 2 }), ordering_key: "b" },
        { payload: webhook("/ok/b/3", { n: 3 }), ordering_key: "b" },
      ],
    });
    const u = await w.api("POST", "/jobs", { payload: webhook("/status/404/u"), max_attempts: 1 });
    ids = { m: m.json.jobs.map((j) => j.id), b: b.json.jobs.map((j) => j.id), u: u.json.jobs[0].id };
    // d runs after b's last job (held behind the DEAD head); p's key is paused before p is sent.
    assert.equal((await w.api("PUT", "/keys/p", { paused: true })).status, 200);
    const later = await w.api("POST", "/jobs", {
      jobs: [
        { id: "d", payload: webhook("/ok/d"), ordering_key: "d", after: [ids.b[2]], traceparent: PARENT },
        { id: "p", payload: webhook("/ok/p"), ordering_key: "p" },
      ],
    });
    assert.equal(later.status, 202, later.text);
    await waitFor(async () => {
      const c = await w.counts();
      return c.DONE === 3 && c.DEAD === 2 && c.PENDING === 4;
    }, "3 DONE, 2 DEAD, 2 waiting behind the DEAD head, one on them, one paused", 30_000);
    const before = await w.counts();
    // Moving needs the admin: no token, no move.
    assert.equal((await w.api("POST", "/ledger/move", { shards: 4 }, null)).status, 401);
    const fetch = (url, init) => w.mf.dispatchFetch(url, init);
    // A move cut short (its third page's request fails) resumes where it stopped.
    let posts = 0;
    const failing = (url, init) => (init.method === "POST" && ++posts === 3 ? Promise.resolve(new Response("{}", { status: 502 })) : fetch(url, init));
    const cut = await moveLedger({ url: "http://orderly.test", token: TOKEN, shards: 4, limit: 2, fetch: failing, tries: 1 }).catch((e) => e);
    const resume = /resume with --after (".*")/.exec(cut.message);
    assert.ok(resume, cut.message);
    const rest = await moveLedger({ url: "http://orderly.test", token: TOKEN, shards: 4, limit: 2, fetch, after: JSON.parse(resume[1]) });
    assert.equal(rest.jobs, 5, "the rest: the two pages before the cut are not copied again");
    assert.ok(rest.verified.matches, JSON.stringify(rest.verified));
    assert.equal(rest.writesRefused, false, "LEDGER_MOVING unset here: nothing writes meanwhile");
    // Begun again from the start, twice: the same copy.
    for (let round = 0; round < 2; round++) {
      const moved = await moveLedger({ url: "http://orderly.test", token: TOKEN, shards: 4, limit: 2, fetch });
      assert.equal(moved.jobs, 9);
      const rows = Object.fromEntries(moved.verified.tables.map((t) => [t.table, [t.source, t.shards]]));
      assert.deepEqual(rows.key_pause, [1, 1], JSON.stringify(rows));
      // Every job compared with its copy, a page at a time: its row, history, wait and waiter.
      assert.equal(moved.verified.checked, 9);
      assert.deepEqual(moved.verified.differs, []);
      assert.ok(moved.pages >= 4, `pages ${moved.pages}`);
      assert.ok(moved.verified.matches, JSON.stringify(moved.verified));
      assert.deepEqual(moved.verified.shards, before);
      assert.ok(moved.verified.per_shard.filter((c) => c.DONE + c.DEAD + c.PENDING > 0).length >= 2, "spread over shards");
    }
  } finally {
    await w.dispose();
  }
  // The switch: the same shards' storage, LEDGER = "do".
  w = await start({ ledger: { shards: 4 }, vars: BLOCK, workerOptions: { durableObjectsPersist: join(dir, "do") } });
  try {
    assert.deepEqual(await w.counts(), { PENDING: 4, RUNNING: 0, DONE: 3, DEAD: 2 });
    const d = (await w.api("GET", "/jobs/d")).json.job;
    assert.deepEqual([d.waiting_on, d.traceparent], [[ids.b[2]], PARENT], "its wait and its trace moved");
    assert.deepEqual((await w.api("GET", "/keys?state=paused")).json.keys.map((k) => [k.key, k.waiting]), [["p", 1]]);
    const done = await w.api("GET", `/jobs/${ids.m[0]}`);
    assert.equal(done.json.job.status, "DONE");
    assert.ok(done.json.history.length >= 1, "its history moved with it");
    const blocked = await w.api("GET", "/keys?state=blocked");
    assert.deepEqual(blocked.json.keys.map((k) => [k.key, k.head.id, k.waiting]), [["b", ids.b[0], 2]]);
    assert.equal((await w.api("POST", "/keys/b/skip")).status, 200);
    await waitFor(async () => (await w.job(ids.b[2]))?.status === "DONE", "b's waiting jobs DONE, on the shards");
    assert.deepEqual(w.target.to("/ok/b").map((r) => r.path), ["/ok/b/2", "/ok/b/3"]);
    await waitFor(async () => (await w.job("d"))?.status === "DONE", "d, released by b's last job, DONE");
    assert.equal((await w.job("p")).status, "PENDING", "p's key still paused");
    assert.equal((await w.api("PUT", "/keys/p", { paused: false })).status, 200);
    await waitFor(async () => (await w.job("p"))?.status === "DONE", "p DONE once its key resumed");
    w.target.answers.set("/status/404/u", 200);
    const redrive = await w.api("POST", `/jobs/${ids.u}/redrive`);
    assert.equal(redrive.status, 200, redrive.text);
    await waitFor(async () => (await w.job(ids.u))?.status === "DONE", "the redriven job DONE");
    const next = await w.api("POST", "/jobs", { payload: webhook("/ok/m/4", { n: 4 }), ordering_key: "m" });
    await waitFor(async () => (await w.job(next.json.jobs[0].id))?.status === "DONE", "a new job of m DONE");
    assert.equal((await w.job(next.json.jobs[0].id)).seq, 4, "the key's order went on from D1's");
  } finally {
    await w.dispose();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("while LEDGER_MOVING is set nothing writes to D1: the API refuses, the cron rests, the move copies", ONCE, async () => {
  const w = await start({ ledger: null, vars: { LEDGER_MOVING: "true" }, workerOptions: { durableObjects: objects } });
  try {
    const r = await w.api("POST", "/jobs", { payload: webhook("/ok/x") });
    assert.equal(r.status, 503, r.text);
    assert.match(r.json.error, /being moved/);
    assert.equal((await w.api("GET", "/jobs/counts")).status, 200, "reads answer");
    // A DONE job long past retention: the cron would purge it, but rests during a move.
    const db = await w.mf.getD1Database("DB");
    const old = Date.now() - 30 * 86_400_000;
    await db.prepare("INSERT INTO job (id, type, status, max_attempts, next_run_at, created_at, updated_at, finished_at) VALUES ('old', 'webhook', 'DONE', 1, ?1, ?1, ?1, ?1)").bind(old).run();
    await w.worker.scheduled({ cron: "* * * * *" });
    assert.equal((await w.job("old"))?.status, "DONE", "not purged during the move");
    const page = await w.api("POST", "/ledger/move", { shards: 2 });
    assert.equal(page.status, 200, page.text);
    assert.equal(page.json.writes_refused, true);
    assert.equal(page.json.jobs, 1);
  } finally {
    await w.dispose();
  }
});
