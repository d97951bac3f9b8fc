#!/usr/bin/env node
// `npm run mutants` (design §16): proves the tests can fail. Each mutant of the table (one text,
// found exactly once in one file, replaced) is applied alone to a scratch copy of the project and
// must make a behaviour test fail that passes on the project as it is.
//
// How a run goes:
//   1. The baseline, on a pristine copy: the whole native suite once, its structural tests
//      included (the table's `structural`: the house rules and the SQL parameter check read the
//      code's text, so a mutant would fail them whatever its behaviour), then the
//      simulation's tests (its fixed seeds and its checkers' own tests), then each node `test`
//      command of the table. Anything red there
//      ends the run: a killer is a test that passed on the pristine copy and fails on a mutant.
//   2. Each mutant: its recorded `killers` first, target by target, stopping at the first that
//      fails; only when none of them kills it, the whole native suite without the structural
//      tests (stopping at the first failing test binary) and then the simulation, optimized
//      (cargo profile `sim`); the tests that killed it then are recorded in the table as its new
//      `killers`. A mutant with a `test` command (a JavaScript mutant, or one of the worker's edge
//      that only an end-to-end test sees, `build: true`) runs that command instead.
//   3. A table of who killed what. A survivor, a mutant that does not apply or does not compile,
//      fails the command; an `equivalent` mutant (with its reason) is reported, not run.
//
// Usage: node scripts/mutants.mjs [--file F] [--table T] [--root DIR] [id ...]
//   --file F   only the mutants of file F        id ...   only these mutants
//   --table T  the table (default tests/mutants.json)     --root DIR  the project (default: this one)
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { killersIn, locate, missingKillersIn, mutated, rebuilt, runBounded, sameKindFiles, targetsOf } from "./mutants-lib.mjs";

const args = process.argv.slice(2);
const option = (name) => {
  const i = args.indexOf(name);
  if (i < 0) return undefined;
  const [, value] = args.splice(i, 2);
  return value;
};
const root = resolve(option("--root") ?? join(dirname(fileURLToPath(import.meta.url)), ".."));
const tablePath = resolve(option("--table") ?? join(root, "tests/mutants.json"));
const onlyFile = option("--file");
const only = args;
const table = JSON.parse(readFileSync(tablePath, "utf8"));
const work = join(root, "target/mutants");
// The project as it is when the run starts: every mutant is applied to a copy of this, so edits
// made while the run goes on do not leak into it.
const pristine = join(work, "pristine");
const scratch = join(work, "project");
// Not copied: build output and installs (linked instead, so the node tests find them).
const LINKED = ["node_modules", "build"];
const SKIPPED = new Set(["target", ".git", ".tools", ...LINKED]);
// One target directory for every mutant: dependencies build once, and each mutant rebuilds only
// the crate.
const env = {
  ...process.env,
  CARGO_TARGET_DIR: process.env.MUTANTS_TARGET_DIR ?? join(work, "target"),
  CARGO_TERM_COLOR: "never",
};
// A suite that hangs on a mutant is a kill (CI would stop it too); a hang on the pristine copy is not.
const MINUTES = 60_000;

function copyProject(to) {
  rmSync(to, { recursive: true, force: true });
  mkdirSync(to, { recursive: true });
  for (const f of readdirSync(root)) {
    // New times on purpose: the pristine copy and the scratch copy share one target directory (and
    // cargo gives their crates the same artifacts), so a file copied with its old time would
    // look older than the last mutant's build and cargo would not rebuild it.
    if (!SKIPPED.has(f)) cpSync(join(root, f), join(to, f), { recursive: true });
  }
  for (const f of LINKED) if (existsSync(join(root, f))) symlinkSync(join(root, f), join(to, f));
}

/** Runs a command in `cwd` (its whole process group stopped at `timeout`, in ms). */
const run = (cwd, cmd, timeout) => runBounded(cwd, cmd, env, timeout);

const quote = (a) => `'${a.replace(/'/g, "'\\''")}'`;
const targets = targetsOf(run(root, "cargo metadata --no-deps --format-version 1 --locked").out, table);
const sim = table.simulation; // {"target", "test", "profile"}, or none
/** Cargo's option that selects one test target. */
const selector = (target) => (target === "lib" ? "--lib" : `--test ${quote(target)}`);
/** The cargo command for `tests` (target::name) of one target, exact names. */
function cargoExact(target, names) {
  const profile = sim && target === sim.target ? ` --profile ${sim.profile}` : "";
  return `cargo test --locked${profile} ${selector(target)} -- --exact ${names.map(quote).join(" ")}`;
}
/** The native suite: every test target but the simulation; without the structural tests unless `all`. */
function nativeCommand(all) {
  const chosen = targets.filter((t) => t !== sim?.target && (all || !targets.structural.has(t)));
  const skips = all ? [] : targets.skips.flatMap((s) => ["--skip", quote(s)]);
  const sel = chosen.map(selector).join(" ");
  return `cargo test --locked ${all ? "--no-fail-fast " : ""}${sel} -- ${skips.join(" ")}`;
}
// Every test of the simulation's target: its seeds and its checkers' own tests (a checker's
// mutant is killed by the test that shows it reporting; run only the seeds, and no such kill
// could ever count, as none passed in the baseline).
const simCommand = sim && `cargo test --locked --profile ${sim.profile} ${selector(sim.target)}`;

/** Red on the pristine copy: the run cannot tell a kill from what was already failing. */
function baseline() {
  console.error("baseline: the native suite on the pristine copy");
  const native = run(pristine, nativeCommand(true), 60 * MINUTES);
  const { passed, failed, compileError } = killersIn(native.out);
  if (native.status !== 0 || compileError) {
    throw new Error(`the pristine copy is red (${failed.join(", ") || "see its output"}):\n${native.out.split("\n").slice(-30).join("\n")}`);
  }
  if (!rebuilt(native.out, targets.crate)) throw new Error(`cargo did not rebuild ${targets.crate} for the pristine copy`);
  if (simCommand) {
    console.error("baseline: the simulation (its fixed seeds and its checkers' tests)");
    const s = run(pristine, simCommand, 30 * MINUTES);
    if (s.status !== 0) throw new Error(`the simulation fails on the pristine copy:\n${s.out.split("\n").slice(-20).join("\n")}`);
    // Its tests passed here too: a kill counts only for a test that passed before, so left out,
    // the simulation could never kill a mutant (it once reported every mutant it saw a survivor).
    passed.push(...killersIn(s.out).passed);
  }
  for (const cmd of new Set(chosen.filter((m) => m.test).map((m) => m.test))) {
    console.error(`baseline: ${cmd}`);
    const r = run(pristine, cmd, 20 * MINUTES);
    if (r.status !== 0) throw new Error(`\`${cmd}\` fails on the pristine copy:\n${r.out.split("\n").slice(-20).join("\n")}`);
  }
  return new Set(passed);
}

/** Applies `m` to the scratch copy, where its text is now (a reflow or a move of the code is
 * followed, and a move recorded in the table); undoes it with the returned function. */
function apply(m) {
  const read = (f) => (existsSync(join(pristine, f)) ? readFileSync(join(pristine, f), "utf8") : undefined);
  const { why, file, movedTo } = locate(m, read, sameKindFiles(pristine, m.file));
  if (why) throw new Error(why);
  if (movedTo) {
    console.error(`mutant ${m.id}: its text moved from ${m.file} to ${movedTo}; the table now says so`);
    saveRow(m.id, (row) => { row.file = movedTo; });
  }
  const path = join(scratch, file);
  const text = read(file);
  writeFileSync(path, mutated({ ...m, file }, text));
  if (m.build) {
    rmSync(join(scratch, "build"), { recursive: true, force: true });
    const b = run(scratch, "ORDERLY_OPT=0 bash scripts/build.sh", 30 * MINUTES);
    if (b.status !== 0) throw new Error(`the mutant does not build:\n${b.out.split("\n").slice(-8).join("\n")}`);
  }
  return () => {
    writeFileSync(path, text);
    if (m.build) {
      rmSync(join(scratch, "build"), { recursive: true, force: true });
      symlinkSync(join(root, "build"), join(scratch, "build"));
    }
  };
}

/**
 * The behaviour tests a cargo run saw fail that passed on the pristine copy. `built` holds the
 * profiles already built for this mutant: the first run in each must rebuild the crate, or stale
 * test binaries would judge the mutant.
 */
function cargoKills(r, passedBefore, what, built, profile = "test") {
  const { failed, crashed, compileError } = killersIn(r.out);
  if (r.timedOut) return [`${what} (timed out)`];
  if (compileError) throw new Error(`the mutant does not compile:\n${r.out.split("\n").filter((l) => /^error/.test(l)).slice(0, 5).join("\n")}`);
  if (rebuilt(r.out, targets.crate)) built.add(profile);
  if (!built.has(profile)) throw new Error(`${what}: cargo did not rebuild ${targets.crate}, so stale test binaries would judge the mutant`);
  return [...failed.filter((t) => passedBefore.has(t)), ...crashed.map((t) => `${t}::(the test binary died)`)];
}

/** The test of `target` that passed before and is named as `name` ends (`a::b::t` -> `t`), when
 * exactly one is: the killer `name` after its module moved. */
function movedTest(passedBefore, target, name) {
  const last = `::${name.split("::").pop()}`;
  const found = [...passedBefore].filter((t) => t.startsWith(`${target}::`) && (t.endsWith(last) || t === `${target}${last}`));
  return found.length === 1 ? found[0].slice(target.length + 2) : undefined;
}

/** Changes the table's row `id` with `change`, written at once (a stopped run keeps what it learnt). */
function saveRow(id, change) {
  const saved = JSON.parse(readFileSync(tablePath, "utf8"));
  const row = saved.mutants.find((x) => x.id === id);
  if (row) {
    change(row);
    writeFileSync(tablePath, JSON.stringify(saved, null, 2) + "\n");
  }
}

/** Who kills `m`, and how it was found: its recorded killers, the whole suite, the simulation. */
function hunt(m, passedBefore) {
  const built = new Set();
  if (m.test) {
    // scripts/node-tests.mjs names each failed test; a command that ran no test fails too.
    const r = run(scratch, m.test, 20 * MINUTES);
    const failed = [...r.out.matchAll(/^node-tests: failed: (.+)$/gm)].map((x) => x[1]);
    return { killedBy: r.status === 0 ? [] : failed.length ? failed : [`${m.test} (exit ${r.status})`], how: "its test" };
  }
  const byTarget = new Map();
  for (const k of m.killers ?? []) {
    const [target, ...name] = k.split("::");
    if (!byTarget.has(target)) byTarget.set(target, []);
    byTarget.get(target).push(name.join("::"));
  }
  for (const [target, names] of byTarget) {
    // A recorded killer whose module was renamed is the one test of its name in its target; one
    // the pristine run did not pass otherwise (renamed, gone) is looked for again below.
    const known = names.map((n) => (passedBefore.has(`${target}::${n}`) ? n : movedTest(passedBefore, target, n))).filter(Boolean);
    if (known.length === 0 || (!targets.includes(target) && target !== sim?.target)) continue;
    const profile = target === sim?.target ? sim.profile : "test";
    const killedBy = cargoKills(run(scratch, cargoExact(target, known), 15 * MINUTES), passedBefore, target, built, profile);
    if (killedBy.length) return { killedBy, how: "recorded" };
  }
  const native = cargoKills(run(scratch, nativeCommand(false), 30 * MINUTES), passedBefore, "the native suite", built);
  if (native.length) return { killedBy: native, how: "suite", record: true };
  if (!simCommand) return { killedBy: [], how: "suite" };
  const s = run(scratch, simCommand, 20 * MINUTES);
  const first = /failing seed\(s\):\n.*\n\s+(.+)/.exec(s.out)?.[1]?.trim();
  if (s.timedOut) return { killedBy: [`${sim.target}::${sim.test}`], how: "simulation (timed out)", record: true };
  const killedBy = cargoKills(s, passedBefore, sim.target, built, sim.profile);
  return { killedBy, how: killedBy.length ? `simulation: ${first ?? "see its output"}` : "suite and simulation", record: true };
}

const chosen = table.mutants.filter(
  (m) => (only.length === 0 || only.includes(m.id)) && (!onlyFile || m.file === onlyFile),
);
if (chosen.length === 0) {
  console.error(`no mutant of the table matches ${[...only, onlyFile].filter(Boolean).join(", ")}`);
  process.exit(2);
}
// A killer that names no test (a test renamed since) would stop the run at its baseline, an hour
// in: said at once instead.
const missing = missingKillersIn(root, table);
if (missing.length) {
  console.error(`the table names tests that do not exist:\n  ${missing.join("\n  ")}`);
  process.exit(1);
}
mkdirSync(work, { recursive: true });
copyProject(pristine);
let passedBefore;
try {
  passedBefore = baseline();
} catch (e) {
  console.error(`baseline: ${e.message}`);
  process.exit(1);
}
copyProject(scratch);

const rows = [];
let bad = 0;
const started = Date.now();
for (const m of chosen) {
  const t0 = Date.now();
  if (m.equivalent) {
    rows.push([m.id, `\`${m.file}\``, `equivalent: ${m.equivalent}`, "-", "-"]);
    continue;
  }
  let result;
  let undo;
  try {
    undo = apply(m);
    result = hunt(m, passedBefore);
  } catch (e) {
    bad++;
    rows.push([m.id, `\`${m.file}\``, `ERROR: ${e.message.split("\n")[0]}`, "-", "-"]);
    console.error(`mutant ${m.id}: ${e.message}`);
    continue;
  } finally {
    undo?.();
  }
  const seconds = Math.round((Date.now() - t0) / 1000);
  const { killedBy, how } = result;
  if (killedBy.length === 0) bad++;
  if (result.record && killedBy.length) {
    // The next run tries these first. Written at once, so a stopped run keeps what it learnt.
    saveRow(m.id, (row) => { row.killers = killedBy.filter((k) => !k.includes("(")); });
  }
  const shown = killedBy.length === 0 ? "SURVIVED" : killedBy.slice(0, 2).join(", ") + (killedBy.length > 2 ? ` and ${killedBy.length - 2} more` : "");
  rows.push([m.id, `\`${m.file}\``, shown, how, `${seconds} s`]);
  console.error(`mutant ${m.id}: ${killedBy.length ? "killed" : "SURVIVED"} (${how}, ${seconds} s)`);
}

console.log("\n| mutant | file | killed by | found by | time |\n|---|---|---|---|---|");
for (const r of rows) console.log(`| ${r.map((c) => String(c).replace(/\|/g, "\\|")).join(" | ")} |`);
const killed = rows.filter((r) => r[4] !== "-" && r[2] !== "SURVIVED").length;
const minutes = Math.round((Date.now() - started) / MINUTES);
console.log(`\n${killed} of ${rows.length} mutants killed in ${minutes} min (after the baseline); ${bad} survived or could not be applied`);
process.exit(bad === 0 ? 0 : 1);
