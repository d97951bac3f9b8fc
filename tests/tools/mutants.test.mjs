// The mutation runner's own test: `scripts/mutants.mjs` on a project small enough to build in a
// second (tests/tools/mutant-fixture), so that what it exists to report is seen reported: a
// mutant no behaviour test sees survives and fails the run, even though a structural test reads
// the mutated text; a recorded killer that misses falls back to the whole suite, and the new
// killer is recorded; a mutant only the simulation sees is killed there, and a mutant of a
// checker by the checker's own test; a replacement that drops a SQL placeholder is refused.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { killersIn, locate, mutated, placeholderChange, rebuilt, runBounded, sameKindFiles, whyNotApplicable } from "../../scripts/mutants-lib.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const fixture = join(root, "tests/tools/mutant-fixture");

/** Runs the runner on a fresh copy of the fixture, its table edited by `edit`. */
function runOnFixture(edit = (t) => t) {
  const dir = mkdtempSync(join(tmpdir(), "orderly-mutants-"));
  cpSync(fixture, dir, { recursive: true });
  const tablePath = join(dir, "tests/mutants.json");
  writeFileSync(tablePath, JSON.stringify(edit(JSON.parse(readFileSync(tablePath, "utf8"))), null, 2));
  const r = spawnSync(process.execPath, [join(root, "scripts/mutants.mjs"), "--root", dir], {
    encoding: "utf8",
    env: { ...process.env, MUTANTS_TARGET_DIR: join(root, "target/mutants-selftest") },
  });
  const table = JSON.parse(readFileSync(tablePath, "utf8"));
  rmSync(dir, { recursive: true, force: true });
  const row = (id) => r.stdout.split("\n").find((l) => l.startsWith(`| ${id} |`)) ?? "";
  return { status: r.status, out: r.stdout + r.stderr, row, table };
}

test("a mutant no behaviour test sees survives and fails the run, though a structural test reads its text", () => {
  const r = runOnFixture();
  assert.equal(r.status, 1, r.out);
  assert.match(r.row("survives-a-comment-only-change"), /\| SURVIVED \|/, r.out);
  assert.match(r.row("killed-by-its-recorded-killer"), /lib::tests::never_more_than_the_whole \| recorded \|/, r.out);
  assert.match(r.row("killed-by-the-suite-when-its-recorded-killer-misses"), /lib::tests::never_less_than_half \| suite \|/);
  assert.deepEqual(
    r.table.mutants.find((m) => m.id === "killed-by-the-suite-when-its-recorded-killer-misses").killers,
    ["lib::tests::never_less_than_half"],
    "the new killer is recorded in the table",
  );
  assert.match(r.row("refused-for-dropping-a-placeholder"), /ERROR: its replacement changes the placeholders the statement uses \(\?1 -> none\)/);
  assert.match(r.row("reported-equivalent"), /equivalent: /);
  // Found by the simulation alone: its baseline run must count, or no mutant could ever be
  // killed there (the runner once reported such a mutant as a survivor).
  assert.match(r.row("killed-by-the-simulation-alone"), /simulation::fixed_seeds_hold_every_invariant \| simulation: /, r.out);
  // A checker's mutant, killed by the checker's own test in the simulation's target: that test
  // must be in the baseline too (the runner once ran only the seeds there).
  assert.match(r.row("killed-by-a-checker-test-of-the-simulation"), /simulation::the_checker_reports_a_jitter_over_the_whole \| recorded \|/, r.out);
  assert.match(r.out, /4 of 7 mutants killed/);
});

test("the structural test would kill the comment-only mutant if the runner counted it (the control)", () => {
  const r = runOnFixture((t) => ({ ...t, structural: [], mutants: t.mutants.slice(0, 1) }));
  assert.match(r.row("survives-a-comment-only-change"), /shape::the_doc_comment_says_equal_jitter/, r.out);
  assert.equal(r.status, 0, r.out);
});

test("a red pristine copy ends the run before any mutant", () => {
  const r = runOnFixture((t) => ({ ...t, mutants: [{ ...t.mutants[1], id: "never-run" }], structural: ["shape"] }));
  assert.equal(r.status, 0, "the fixture is green: the control for the next run");
  const dir = mkdtempSync(join(tmpdir(), "orderly-mutants-red-"));
  cpSync(fixture, dir, { recursive: true });
  const lib = join(dir, "src/lib.rs");
  writeFileSync(lib, readFileSync(lib, "utf8").replace("assert_eq!(jitter(1000, 0.0), 500)", "assert_eq!(jitter(1000, 0.0), 501)"));
  const red = spawnSync(process.execPath, [join(root, "scripts/mutants.mjs"), "--root", dir], {
    encoding: "utf8",
    env: { ...process.env, MUTANTS_TARGET_DIR: join(root, "target/mutants-selftest") },
  });
  rmSync(dir, { recursive: true, force: true });
  assert.equal(red.status, 1);
  assert.match(red.stderr, /baseline: the pristine copy is red \(lib::tests::never_less_than_half\)/);
  assert.doesNotMatch(red.stdout, /mutants killed/);
});

test("cargo's output is read test by test, and a test binary that dies is a kill of its target", () => {
  const out = [
    "     Running unittests src/lib.rs (target/debug/deps/orderly-1)",
    "test backoff::tests::a ... ok",
    "     Running tests/simulation/main.rs (target/debug/deps/simulation-2)",
    "test fixed_seeds_hold_every_invariant ... FAILED",
    "     Running tests/consumer.rs (target/debug/deps/consumer-3)",
    "error: test failed, to rerun pass `--test consumer`",
    "error: 2 targets failed:\n    `--test simulation`\n    `--test consumer`",
  ].join("\n");
  assert.deepEqual(killersIn(out), {
    passed: ["lib::backoff::tests::a"],
    failed: ["simulation::fixed_seeds_hold_every_invariant"],
    crashed: ["consumer"],
    compileError: false,
  });
  assert.equal(killersIn("error[E0308]: mismatched types\nerror: could not compile `orderly-queues`").compileError, true);
});

test("a SQL mutant keeps its statement's placeholders, its comments aside", () => {
  const sql = (find, replace, text = `-- params: ?1 a, ?2 b\nSELECT ?1 LIMIT ?2`) =>
    placeholderChange({ file: "src/ledger/sql/x.sql", find, replace }, text);
  assert.equal(sql("LIMIT ?2", "LIMIT 0 * ?2"), null);
  assert.match(sql("LIMIT ?2", "LIMIT 0"), /\?1 \?2 -> \?1\)/);
  assert.equal(sql("LIMIT ?2", "LIMIT 0", "-- params: ?1 a, ?2 b\nSELECT ?2 LIMIT ?2"), null, "?2 is still used");
  assert.match(sql("LIMIT ?2", "LIMIT 0", "-- params: ?1 a, ?2 b\n-- up to ?2\nSELECT ?1 LIMIT ?2"), /-> \?1\)/);
  assert.equal(placeholderChange({ file: "src/lock.rs", find: "?1", replace: "" }, "?1"), null);
});

test("every mutant of orderly's table applies to the code as it is, and its killers name real test targets", () => {
  // Checked on every test run, so a refactor that moves a mutant's text fails here at once, not
  // in the next mutation run.
  const table = JSON.parse(readFileSync(join(root, "tests/mutants.json"), "utf8"));
  const read = (f) => (existsSync(join(root, f)) ? readFileSync(join(root, f), "utf8") : undefined);
  const target = (t) => t === "lib" || existsSync(join(root, `tests/${t}.rs`)) || existsSync(join(root, `tests/${t}/main.rs`));
  const problems = [];
  const ids = new Set();
  for (const m of table.mutants) {
    if (ids.has(m.id)) problems.push(`${m.id}: two mutants have this id`);
    ids.add(m.id);
    // Where the code moved, the runner finds the mutant in its new file (and records it there).
    const { why } = locate(m, read, sameKindFiles(root, m.file));
    if (why) problems.push(`${m.id}: ${why}`);
    for (const k of m.killers ?? []) if (!target(k.split("::")[0])) problems.push(`${m.id}: killer ${k} names no test target`);
    if (!m.equivalent && !m.test && !m.breaks) problems.push(`${m.id}: no \`breaks\`: what it breaks`);
    // node --test passes a name pattern or a file that runs no test; node-tests.mjs fails it.
    if (m.test && !m.test.startsWith("node scripts/node-tests.mjs ")) problems.push(`${m.id}: its test is not run by node-tests.mjs`);
  }
  for (const s of table.structural) if (!target(s.split("::")[0])) problems.push(`structural ${s} names no test target`);
  assert.deepEqual(problems, []);
  assert.ok(table.mutants.length >= 98);
});

test("the table check refuses what the runner would refuse", () => {
  const m = { file: "src/ledger/sql/x.sql", find: "LIMIT ?2", replace: "LIMIT 0" };
  assert.match(whyNotApplicable(m, "SELECT 1 LIMIT ?2"), /placeholders/);
  assert.match(whyNotApplicable(m, "SELECT 1 LIMIT ?2 UNION SELECT 2 LIMIT ?2"), /found 2 times/);
  assert.match(whyNotApplicable({ ...m, replace: m.find }, "LIMIT ?2"), /changes nothing/);
  assert.match(whyNotApplicable(m, undefined), /does not exist/);
  assert.equal(whyNotApplicable({ ...m, replace: "LIMIT 0 * ?2" }, "LIMIT ?2"), null);
});

test("a mutant survives a reflow and a move: found with whitespace ignored, within its function, in the file it moved to", () => {
  const m = { id: "m", file: "src/a.rs", find: "if left < right {", replace: "if left <= right {" };
  // rustfmt broke the line: still found, once, and the reflowed text is what changes.
  const reflowed = "fn order() {\n    if left\n        < right\n    {\n        go();\n    }\n}\n";
  assert.equal(whyNotApplicable(m, reflowed), null);
  assert.equal(mutated(m, reflowed), "fn order() {\n    if left <= right {\n        go();\n    }\n}\n");
  // Twice in the file: refused, unless the mutant names the function it belongs to.
  const twice = "fn order() { if left < right { a(); } }\nfn other() { if left < right { b(); } }\n";
  assert.match(whyNotApplicable(m, twice), /found 2 times/);
  assert.equal(mutated({ ...m, in: "other" }, twice), "fn order() { if left < right { a(); } }\nfn other() { if left <= right { b(); } }\n");
  assert.match(whyNotApplicable({ ...m, in: "gone" }, twice), /found 0 times in src\/a.rs's gone/);
  // Moved to another file: found there, and said so.
  const files = { "src/a.rs": "fn unrelated() {}\n", "src/b.rs": reflowed, "src/c.rs": "fn c() {}\n" };
  const read = (f) => files[f];
  assert.deepEqual(locate(m, read, Object.keys(files)), { file: "src/b.rs", movedTo: "src/b.rs" });
  // In two other files, or in none: refused, with where it is.
  assert.match(locate(m, read, ["src/a.rs", "src/c.rs"]).why, /found 0 times in src\/a.rs$/);
  files["src/d.rs"] = reflowed;
  assert.match(locate(m, read, Object.keys(files)).why, /it is in src\/b.rs, src\/d.rs/);
  // Where it is, twice: not taken for a move.
  files["src/a.rs"] = twice;
  assert.match(locate(m, read, Object.keys(files)).why, /found 2 times in src\/a.rs$/);
  // And the project's own file list is where moves are looked for.
  assert.ok(sameKindFiles(root, "src/lib.rs").includes("src/consumer/executor.rs"));
  assert.ok(!sameKindFiles(root, "src/lib.rs").some((f) => f.startsWith("target/") || f.startsWith("tests/")));
});

test("a cargo run that did not rebuild the mutated crate is caught", () => {
  const built = "   Compiling orderly-queues v0.1.0 (/work/x)\n    Finished `test` profile\n";
  assert.equal(rebuilt(built, "orderly-queues"), true);
  assert.equal(rebuilt("    Finished `test` profile\n     Running tests/api.rs\n", "orderly-queues"), false);
  assert.equal(rebuilt("   Compiling orderly-queues-extra v0.1.0\n", "orderly-queues"), false, "another crate");
});

test("a command past its time limit is stopped with every process it started, not only its shell", () => {
  // A test binary is cargo's grandchild: here a `sleep` the shell starts in the background and
  // waits on. Stopping only the shell would leave it running (the runner once did, for hours).
  const dir = mkdtempSync(join(tmpdir(), "orderly-bounded-"));
  const started = Date.now();
  const r = runBounded(dir, "sh -c 'sleep 120' & echo $! > pid; wait", process.env, 2000);
  const pid = Number(readFileSync(join(dir, "pid"), "utf8"));
  rmSync(dir, { recursive: true, force: true });
  assert.equal(r.timedOut, true);
  assert.ok(Date.now() - started < 20_000, "stopped at its limit");
  // Running, or stopped but not yet reaped by init (a zombie, "Z", has ended).
  const alive = (p) => existsSync(`/proc/${p}/stat`) && !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${p}/stat`, "utf8"));
  assert.equal(alive(pid), false, `the grandchild ${pid} outlived its limit`);
  // The control: a command that ends in time is not a timeout, whatever its status.
  const quick = runBounded(tmpdir(), "echo out; echo err >&2; exit 124", process.env, 60_000);
  assert.deepEqual(quick, { status: 124, out: "out\nerr\n", timedOut: false });
});
