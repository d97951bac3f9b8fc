// A file whose one test fails (node-tests.test.mjs).
import { test } from "node:test";
test("red", () => {
  throw new Error("red on purpose");
});
