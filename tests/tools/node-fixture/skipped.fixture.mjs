// A file whose one test is skipped with its reason (node-tests.test.mjs), and one without.
import { test } from "node:test";
test("skipped on purpose", { skip: "why it is skipped" }, () => {});
test("skipped with no reason", { skip: true }, () => {});
