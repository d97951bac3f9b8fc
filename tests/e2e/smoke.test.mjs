import { test } from "node:test";
import assert from "node:assert/strict";
import { start, webhook, waitFor } from "./harness.mjs";

test("a job submitted through the API is delivered to its webhook and recorded DONE", async () => {
  const w = await start();
  try {
    const res = await w.api("POST", "/jobs", { payload: webhook("/ok/smoke", { hello: "world", n: [1, 2] }) });
    assert.equal(res.status, 202, res.text);
    const id = res.json.jobs[0].id;
    await waitFor(async () => (await w.job(id))?.status === "DONE", "job DONE");
    assert.deepEqual(JSON.parse(w.target.to("/ok/smoke")[0].body), { hello: "world", n: [1, 2] });
  } finally {
    await w.dispose();
  }
});
