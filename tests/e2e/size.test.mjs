// The deployable worker stays within its size budget (issue 38): the build's wasm, gzip level 9,
// at most WORKER_GZIP_BUDGET bytes. The size and the module's compile time are in `npm run bench`.
import assert from "node:assert/strict";
import { test } from "node:test";
import { WORKER_GZIP_BUDGET, workerSize } from "./harness.mjs";

test("the built worker is within its gzip size budget", () => {
  const { raw, gzip } = workerSize();
  assert.ok(raw > 100_000, `build/index_bg.wasm is ${raw} bytes: not the worker`);
  assert.ok(gzip <= WORKER_GZIP_BUDGET, `the worker is ${gzip} bytes gzip, over its budget of ${WORKER_GZIP_BUDGET}`);
});
