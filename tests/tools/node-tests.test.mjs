// The test command's file runner (scripts/node-tests.mjs) reports what it exists to report: a
// pattern that matches nothing, a file in which no test ran, a failing test and an exclusion that
// excludes nothing each fail the run; a file with tests passes and is counted.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const fixtures = "tests/tools/node-fixture";
const runner = (...patterns) => {
  // Not a child of this test run: node:test skips run() called from inside a test file.
  const env = { ...process.env, NODE_TEST_CONTEXT: "" };
  delete env.NODE_TEST_CONTEXT;
  const r = spawnSync(process.execPath, ["scripts/node-tests.mjs", ...patterns], { cwd: root, encoding: "utf8", env });
  return { status: r.status, out: r.stdout + r.stderr };
};

test("a file with tests passes, its tests counted", () => {
  const r = runner(`${fixtures}/two.fixture.mjs`);
  assert.equal(r.status, 0, r.out);
  assert.match(r.out, /1 file\(s\), 2 test\(s\), 0 failed/);
});

test("a pattern that matches no file fails the run", () => {
  const r = runner(`${fixtures}/*.nothing-is-named-this.mjs`);
  assert.equal(r.status, 1, r.out);
  assert.match(r.out, /no test file matches tests\/tools\/node-fixture\/\*\.nothing-is-named-this\.mjs/);
});

test("a file in which no test ran fails the run, beside one that passes", () => {
  const r = runner(`${fixtures}/two.fixture.mjs`, `${fixtures}/none.fixture.mjs`);
  assert.equal(r.status, 1, r.out);
  assert.match(r.out, /no test ran in .*none\.fixture\.mjs/);
});

test("a failing test fails the run", () => {
  const r = runner(`${fixtures}/two.fixture.mjs`, `${fixtures}/red.fixture.mjs`);
  assert.equal(r.status, 1, r.out);
  assert.match(r.out, /2 file\(s\), 3 test\(s\), 1 failed/);
});

test("a test skipped with its reason counts for its file; one skipped without a reason does not", () => {
  const explained = runner(`${fixtures}/skipped.fixture.mjs`);
  assert.equal(explained.status, 0, explained.out);
  assert.match(explained.out, /0 test\(s\), 0 failed, 2 skipped/);
  const unexplained = runner(`${fixtures}/unexplained.fixture.mjs`);
  assert.equal(unexplained.status, 1, unexplained.out);
  assert.match(unexplained.out, /no test ran in .*unexplained\.fixture\.mjs/);
});

test("a name pattern runs only the tests it matches, and one that matches none in a file fails the run", () => {
  const one = runner("--name-pattern", "^one$", `${fixtures}/two.fixture.mjs`);
  assert.equal(one.status, 0, one.out);
  assert.match(one.out, /1 file\(s\), 1 test\(s\), 0 failed/);
  const none = runner("--name-pattern", "no test is named this", `${fixtures}/two.fixture.mjs`);
  assert.equal(none.status, 1, none.out);
  assert.match(none.out, /no test ran in .*two\.fixture\.mjs/);
});

test("an excluded file is not run, and an exclusion that matches no file fails the run", () => {
  const r = runner("--exclude", "red.fixture.mjs", `${fixtures}/two.fixture.mjs`, `${fixtures}/red.fixture.mjs`);
  assert.equal(r.status, 0, r.out);
  assert.match(r.out, /1 file\(s\), 2 test\(s\), 0 failed/);
  const stale = runner("--exclude", "gone.fixture.mjs", `${fixtures}/two.fixture.mjs`);
  assert.equal(stale.status, 1, stale.out);
  assert.match(stale.out, /--exclude gone\.fixture\.mjs matches no file/);
});

test("each failed test is named for the mutation runner", () => {
  const r = runner(`${fixtures}/red.fixture.mjs`);
  assert.match(r.out, /^node-tests: failed: red$/m);
  assert.match(r.out, /^node-tests: {3}why: red on purpose$/m, "the reason follows the name");
});

test("a file that fails as it loads fails the run, named as the file", () => {
  const r = runner(`${fixtures}/broken.fixture.mjs`);
  assert.equal(r.status, 1, r.out);
  assert.match(r.out, /0 test\(s\), 1 failed/);
  assert.match(r.out, /^node-tests: failed: .*broken\.fixture\.mjs$/m);
});
