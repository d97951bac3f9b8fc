// A panic in a Rust handler (a bug in a user's job type): the invocation dies and the wasm instance
// is reset, but the job is not left RUNNING until its lease expires and then DEAD "lease expired"
// with no word of the panic. The panic is recorded as the job's failed attempt, with its message.
// Run on the fixture worker tests/e2e/panicking-worker (one job type, `panicky`).
import assert from "node:assert/strict";
import { test } from "node:test";
import { start, waitFor, ONCE } from "./harness.mjs";

const fixture = { buildDir: "tests/e2e/panicking-worker/build" };

for (const mode of ["lock", "strict"]) {
  test(`${mode} mode: a handler's panic is its job's failed attempt, retried, and says it panicked`, ONCE, async () => {
    // LEASE_SECONDS far beyond the test's wait: only the recorded panic can bring the job back.
    const w = await start({ ...fixture, vars: { ORDERING_MODE: mode, LEASE_SECONDS: "600" } });
    try {
      const submit = async (jobs) => {
        const r = await w.api("POST", "/jobs", { jobs });
        assert.equal(r.status, 202, r.text);
        return r.json.jobs.map((j) => j.id);
      };
      // A key's first job panics once; the job behind it, claimed by the same invocation, died
      // with it and runs after it.
      const [first, second] = await submit([
        { payload: { type: "panicky", panics: 1 }, ordering_key: "k" },
        { payload: { type: "panicky", panics: 0 }, ordering_key: "k" },
      ]);
      await waitFor(async () => (await w.job(second))?.status === "DONE", "the key's jobs done", 60_000);
      const shown = (await w.api("GET", `/jobs/${first}`)).json;
      assert.equal(shown.job.status, "DONE");
      assert.equal(shown.job.attempts, 2);
      assert.deepEqual(shown.history.map((e) => [e.outcome, e.attempt]), [["retry", 1], ["done", 2]]);
      assert.match(shown.history[0].error, /^the handler panicked: index out of bounds/);
      const [a, b] = await Promise.all([first, second].map(async (id) => (await w.job(id)).finished_at));
      assert.ok(a <= b, "the key's order held across the panic");

      // A job that panics every time is DEAD at its last attempt, saying so.
      const [hopeless] = await submit([{ payload: { type: "panicky", panics: 9 }, max_attempts: 2 }]);
      await waitFor(async () => (await w.job(hopeless))?.status === "DEAD", "the always-panicking job DEAD", 60_000);
      const dead = await w.job(hopeless);
      assert.match(dead.last_error, /the handler panicked: index out of bounds/);
      assert.equal(dead.attempts, 2);
    } finally {
      await w.dispose();
    }
  });
}
