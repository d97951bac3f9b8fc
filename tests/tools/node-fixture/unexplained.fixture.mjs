// A file whose only test is skipped with no reason (node-tests.test.mjs): a run of it fails.
import { test } from "node:test";
test("skipped with no reason", { skip: true }, () => {});
