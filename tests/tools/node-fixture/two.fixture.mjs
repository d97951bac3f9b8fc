// A file with two tests, one inside a suite (node-tests.test.mjs).
import { describe, test } from "node:test";
test("one", () => {});
describe("a suite", () => test("two", () => {}));
