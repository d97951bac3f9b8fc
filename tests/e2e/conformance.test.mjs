// The ledger's conformance suite (src/ledger/conformance.rs) on D1 under miniflare: the same cases
// tests/conformance.rs runs on SQLite, through the fixture worker tests/e2e/panicking-worker
// (`GET /__conformance`), on the D1 database the migrations built.
import { test } from "node:test";
import assert from "node:assert/strict";
import { start } from "./harness.mjs";

test("the ledger conforms on D1", async () => {
  const w = await start({ buildDir: "tests/e2e/panicking-worker/build" });
  try {
    for (const prefix of ["d1", "again"]) {
      const res = await w.mf.dispatchFetch(`${w.url}__conformance?${prefix}`);
      assert.equal(res.status, 200);
      const report = await res.json();
      assert.deepEqual(report.failed, [], JSON.stringify(report.failed));
      assert.equal(report.passed.length, 7, JSON.stringify(report));
    }
  } finally {
    await w.dispose();
  }
});
