// The webhook job's outbound rules under miniflare: redirects are not followed, private targets
// are refused at submission (no traffic is ever sent to them), a malformed signing secret is a
// configuration error that defers the batch.
import { test } from "node:test";
import assert from "node:assert/strict";
import { start, webhook, waitFor } from "./harness.mjs";

test("a redirect is permanent and never followed", async () => {
  const w = await start();
  try {
    const r = await w.api("POST", "/jobs", { jobs: [302, 307].map((c) => ({ payload: webhook(`/redirect/${c}/r`, { secret: "body" }) })) });
    const ids = r.json.jobs.map((j) => j.id);
    await waitFor(async () => (await Promise.all(ids.map(w.job))).every((j) => j?.status === "DEAD"), "both DEAD");
    for (const id of ids) assert.match((await w.job(id)).last_error, /HTTP 30[27] \(redirects are not followed\)/);
    assert.equal(w.target.requests.length, 2, "one request each, none to the Location");
    assert.ok(w.target.requests.every((q) => q.path.startsWith("/redirect/")));
  } finally {
    await w.dispose();
  }
});

test("loopback, link-local and private targets are refused at submission", async () => {
  const w = await start();
  try {
    for (const url of ["http://127.0.0.1:8787/x", "http://169.254.169.254/latest/meta-data", "http://10.0.0.1/", "http://localhost/", "http://[::1]/"]) {
      const r = await w.api("POST", "/jobs", { payload: { type: "webhook", url } });
      assert.equal(r.status, 400, url);
      assert.match(r.json.error, /loopback, private or link-local/, url);
    }
    for (const url of ["http://h:99999/", "http://[::1/x", "http://%zz/"]) {
      assert.equal((await w.api("POST", "/jobs", { payload: { type: "webhook", url } })).status, 400, url);
    }
    assert.equal((await w.api("POST", "/jobs", { payload: { ...webhook("/ok/h"), headers: { "x(y": "1" } } })).status, 400);
    assert.deepEqual(await w.counts(), { PENDING: 0, RUNNING: 0, DONE: 0, DEAD: 0 });
  } finally {
    await w.dispose();
  }
});

test("a malformed whsec_ secret defers the batch instead of signing with the wrong key", async () => {
  const w = await start({ vars: { WEBHOOK_SECRET: "whsec_!!not-base64!!" } });
  try {
    // Delivered straight to the consumer, so its verdict is seen before absence is asserted.
    const body = { ...webhook("/ok/unsigned"), __orderly_job__: { id: "unsigned" } };
    const q = await w.worker.queue("orderly-jobs", [{ id: "m-unsigned", timestamp: new Date(), body, attempts: 1 }]);
    assert.deepEqual(q.explicitAcks, []);
    assert.deepEqual(q.retryMessages.map((m) => m.msgId), ["m-unsigned"], "deferred, not dropped");
    assert.equal(w.target.to("/ok/unsigned").length, 0, "nothing sent with a wrong signature");
    assert.equal(await w.job("unsigned"), null, "the batch was deferred before touching the ledger");
  } finally {
    await w.dispose();
  }
});
