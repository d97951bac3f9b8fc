// Cancelling running jobs, cancelling a key, superseding and debouncing (docs/design.md §22)
// through the real worker under miniflare, on the pass's ledger (D1, or shards).
import { test } from "node:test";
import assert from "node:assert/strict";
import { start, webhook, waitFor } from "./harness.mjs";

/** What the worker answers a cancel's bound with (src/consumer/executor.rs, CANCEL_REACH_MS). */
const CANCEL_REACH_MS = 3_000;

test("a webhook held for 30 s is stopped by a cancel: the job is DEAD cancelled within the bound", async () => {
  // Runs may take a minute here, so a 30 s hold is no timeout.
  const w = await start({ vars: { WEBHOOK_TIMEOUT_SECONDS: "60", ORDERING_LOCK_TTL: "120" } });
  try {
    const r = await w.api("POST", "/jobs", { payload: webhook("/hold/30000/cancel-me"), ordering_key: "k" });
    const id = r.json.jobs[0].id;
    await waitFor(() => w.target.to("/hold/30000/cancel-me").length === 1, "the webhook held");
    const asked = Date.now();
    const c = await w.api("POST", `/jobs/${id}/cancel`);
    assert.equal(c.status, 202, c.text);
    assert.deepEqual([c.json.job.status, c.json.cancel_requested, c.json.within_ms], ["RUNNING", true, CANCEL_REACH_MS]);
    const dead = await waitFor(async () => {
      const j = await w.job(id);
      return j?.status === "DEAD" && j;
    }, "the job DEAD", 10_000);
    const took = Date.now() - asked;
    console.log(`# cancel of a running webhook: DEAD ${took} ms after the cancel's answer (bound ${CANCEL_REACH_MS} ms + round trips)`);
    assert.equal(dead.last_error, "cancelled");
    assert.ok(took < CANCEL_REACH_MS + 2_000, `DEAD after ${took} ms`);
    const held = w.target.to("/hold/30000/cancel-me")[0];
    if (held.aborted) console.log(`# the target saw the request aborted ${held.aborted - asked} ms after the cancel`);
    const history = (await w.api("GET", `/jobs/${id}`)).json.history;
    assert.deepEqual(history.map((e) => [e.kind, e.outcome ?? null, e.error ?? null]), [
      ["cancel_requested", null, null],
      ["attempt", "dead", "cancelled"],
    ]);
    // Never run again, and its key moves on.
    const next = (await w.api("POST", "/jobs", { payload: webhook("/ok/after-cancel"), ordering_key: "k" })).json.jobs[0].id;
    await waitFor(async () => (await w.job(next))?.status === "DONE", "the key's next job DONE");
    assert.equal(w.target.to("/hold/30000/cancel-me").length, 1, "the cancelled job never ran again");
  } finally {
    await w.dispose();
  }
});

test("cancelling a key ends its pending jobs at once and asks the ones its chain claimed ahead to stop; none of them runs", async () => {
  const w = await start({ vars: { ORDERING_MODE: "strict" } });
  try {
    // Strict mode: the first job's chain claims the key's jobs behind it too (RUNNING, waiting).
    const r = await w.api("POST", "/jobs", { jobs: [
      { payload: webhook("/slow/4000/head"), ordering_key: "k" },
      ...[1, 2, 3].map((n) => ({ payload: webhook(`/ok/behind-${n}`), ordering_key: "k" })),
      { payload: webhook("/ok/other-key"), ordering_key: "other" },
    ] });
    const [head, ...rest] = r.json.jobs.map((j) => j.id);
    await waitFor(() => w.target.to("/slow/4000/head").length === 1, "the head running");
    // A job submitted now waits PENDING behind the chain's.
    const late = (await w.api("POST", "/jobs", { payload: webhook("/ok/behind-late"), ordering_key: "k" })).json.jobs[0].id;
    const dry = await w.api("POST", "/jobs/cancel", { filter: { ordering_key: "k" }, dry_run: true });
    assert.deepEqual([dry.status, dry.json.matched, dry.json.running], [200, 5, 4], dry.text);
    const c = await w.api("POST", "/keys/k/cancel");
    assert.deepEqual([c.status, c.json.cancelled, c.json.cancel_requested, c.json.remaining], [200, 1, 4, 0], c.text);
    assert.deepEqual(c.json.ids, [late]);
    for (const id of [head, ...rest.slice(0, 3), late]) {
      await waitFor(async () => (await w.job(id))?.status === "DEAD", `${id} DEAD`, CANCEL_REACH_MS + 5_000);
      assert.equal((await w.job(id)).last_error, "cancelled");
    }
    await waitFor(async () => (await w.job(rest[3]))?.status === "DONE", "another key's job runs");
    assert.equal(w.target.to("/ok/behind").length, 0, "no job behind the head was delivered");
  } finally {
    await w.dispose();
  }
});

test("a replacement keeps its place in its key's order", async () => {
  const w = await start({ vars: { ORDERING_MODE: "strict" } });
  try {
    const r = await w.api("POST", "/jobs", { jobs: [
      { payload: webhook("/slow/1500/first"), ordering_key: "doc" },
      // Submitted to be replaced: no chain claims it ahead of its start (design §22.3).
      { payload: webhook("/echo/second", { v: 1 }), ordering_key: "doc", dedupe_key: "doc-2", on_duplicate: "replace" },
      { payload: webhook("/ok/third"), ordering_key: "doc" },
    ] });
    const second = r.json.jobs[1].id;
    await waitFor(() => w.target.to("/slow/1500/first").length === 1, "the first running");
    const again = await w.api("POST", "/jobs", {
      payload: webhook("/echo/second", { v: 2 }), ordering_key: "doc", dedupe_key: "doc-2", on_duplicate: "replace",
    });
    assert.equal(again.status, 202, again.text);
    assert.deepEqual(again.json.jobs[0], { id: second, status: "PENDING", duplicate: true, replaced: true });
    await waitFor(() => w.target.to("/ok/third").length === 1, "the third delivered");
    assert.deepEqual(w.target.requests.map((q) => q.path), ["/slow/1500/first", "/echo/second", "/ok/third"]);
    assert.deepEqual(JSON.parse(w.target.to("/echo/second")[0].body), { v: 2 }, "the newer payload ran, once");
    const history = (await w.api("GET", `/jobs/${second}`)).json.history;
    assert.equal(history[0].kind, "superseded");
  } finally {
    await w.dispose();
  }
});

test("a debounce of 2 s with five submissions 0.5 s apart runs once, with the fifth payload", async () => {
  const w = await start({ vars: { ORDERING_MODE: "strict" } });
  try {
    const answers = [];
    let last = 0;
    for (let v = 1; v <= 5; v++) {
      const r = await w.api("POST", "/jobs", {
        payload: webhook("/echo/debounced", { v }), ordering_key: "search", dedupe_key: "reindex", debounce_seconds: 2,
      });
      assert.equal(r.status, 202, r.text);
      answers.push(r.json.jobs[0]);
      last = Date.now();
      if (v < 5) await new Promise((res) => setTimeout(res, 500));
    }
    assert.ok(answers.every((a) => a.id === answers[0].id), JSON.stringify(answers));
    await waitFor(() => w.target.to("/echo/debounced").length === 1, "the debounced job delivered");
    const [delivered] = w.target.to("/echo/debounced");
    assert.deepEqual(JSON.parse(delivered.body), { v: 5 });
    assert.ok(delivered.at - last >= 1_900, `ran ${delivered.at - last} ms after the fifth submission`);
    await new Promise((res) => setTimeout(res, 2500));
    assert.equal(w.target.to("/echo/debounced").length, 1, "once");
  } finally {
    await w.dispose();
  }
});
