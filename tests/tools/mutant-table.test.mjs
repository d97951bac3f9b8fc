// The mutation table names only tests that exist (scripts/mutants-lib.mjs `missingKillers`): a
// killer command whose --name-pattern matches no test stopped `npm run mutants` at its baseline,
// an hour in, once a test was renamed. Checked here on every `npm test`, with the checker's own
// failing cases beside it.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { missingKillers, missingKillersIn, nodeTestNames } from "../../scripts/mutants-lib.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");

test("every killer in the mutation table names a test that exists", () => {
  const table = JSON.parse(readFileSync(join(root, "tests/mutants.json"), "utf8"));
  assert.deepEqual(missingKillersIn(root, table), []);
});

const files = {
  "tests/e2e/a.test.mjs": [
    'test("the dashboard shows its batch, and the batch\'s progress on its callback", async () => {});',
    'for (const mode of ["lock", "strict"]) {',
    "  test(`${mode} mode: a panic is a failed attempt`, async () => {});",
    "}",
    'for (const [limit, vars] of [',
    '  ["Fedify\'s retry policy", {}],',
    '  ["orderly\'s MAX_SNOOZES", { MAX_SNOOZES: "2" }],',
    "]) {",
    "  test(`an inbox answering 429: ${limit} ends the retries`, async () => {});",
    "}",
  ].join("\n"),
};
const read = (f) => files[f];
const mutant = (test, killers) => ({ id: "m", file: "src/x.rs", find: "a", replace: "b", test, killers });
const check = (...mutants) => missingKillers({ mutants }, read, (name) => name === "a_test_that_exists");

test("a template test name is read once for each value its loop gives it", () => {
  assert.deepEqual(nodeTestNames(files["tests/e2e/a.test.mjs"]), [
    "the dashboard shows its batch, and the batch's progress on its callback",
    "lock mode: a panic is a failed attempt",
    "strict mode: a panic is a failed attempt",
    "an inbox answering 429: Fedify's retry policy ends the retries",
    "an inbox answering 429: orderly's MAX_SNOOZES ends the retries",
  ]);
});

test("the checker reports a --name-pattern no test matches, a file that does not exist, a killer defined nowhere", () => {
  const cmd = (pattern, file = "tests/e2e/a.test.mjs") => `node scripts/node-tests.mjs --timeout 1 --name-pattern ${pattern} ${file}`;
  // What exists passes: a plain name, a template name through its loop, a regex, a killer.
  assert.deepEqual(check(mutant(cmd('"the batch\'s progress"')), mutant(cmd('"strict mode"')), mutant(cmd("retry.policy"))), []);
  assert.deepEqual(check(mutant(undefined, ["lib::a::a_test_that_exists"])), []);
  // What does not is reported (the renamed test that stopped the run).
  assert.deepEqual(check(mutant(cmd("\"a batch's progress\""))), [
    'm: no test in tests/e2e/a.test.mjs matches --name-pattern "a batch\'s progress"',
  ]);
  assert.deepEqual(check(mutant(cmd("stricter"))), ['m: no test in tests/e2e/a.test.mjs matches --name-pattern "stricter"']);
  assert.match(check(mutant(cmd("lock", "tests/e2e/gone.test.mjs")))[0], /its test file tests\/e2e\/gone\.test\.mjs does not exist/);
  assert.deepEqual(check(mutant(undefined, ["native::consumer::a_renamed_test"])), [
    "m: its killer native::consumer::a_renamed_test is defined nowhere",
  ]);
});
