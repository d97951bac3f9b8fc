#!/usr/bin/env node
// `npm run mutants` (design §16): proves the tests can fail. Each mutant of tests/mutants.json (one
// text, found exactly once in one file, replaced) is applied alone to a scratch copy of the
// project; the native suite and the simulation's fixed seeds run on it (for a mutant with a `test`
// command, that command), and the table says which tests killed it, the simulation's verdict in a
// column of its own (so what only the simulation, or only a unit test, would catch is visible). A
// survivor, a mutant whose text is not found, or one that does not compile fails the command; an
// `equivalent` mutant (with its reason) is reported, not run. A mutant of the worker that only an
// end-to-end test can kill says `build: true`: its scratch copy builds its own worker first.
//
// Usage: node scripts/mutants.mjs [id ...]   (only these mutants)
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const table = JSON.parse(readFileSync(join(root, "tests/mutants.json"), "utf8")).mutants;
const only = process.argv.slice(2);
const scratch = join(root, "target/mutants/project");
// The project as it is when the run starts: every mutant is applied to a copy of this, so edits
// made while the run goes on do not leak into it.
const pristine = join(root, "target/mutants/pristine");
// One target directory for every mutant: dependencies build once, and each mutant rebuilds only
// the crate (the scratch copy keeps its path, so incremental builds apply).
const env = { ...process.env, CARGO_TARGET_DIR: join(root, "target/mutants/target"), CARGO_TERM_COLOR: "never" };
const COPIED = ["Cargo.toml", "Cargo.lock", "rustfmt.toml", "src", "worker", "tests", "migrations", "scripts", "client", "examples", "bench", "wrangler.toml", "package.json", "tsconfig.json", "template", "bin", "docs", "LICENSE", "CHANGELOG.md"];
const LINKED = ["node_modules", "build"];

rmSync(pristine, { recursive: true, force: true });
mkdirSync(pristine, { recursive: true });
for (const f of COPIED) cpSync(join(root, f), join(pristine, f), { recursive: true });

/** A fresh copy of the project with `m` applied. */
function applied(m) {
  rmSync(scratch, { recursive: true, force: true });
  mkdirSync(scratch, { recursive: true });
  for (const f of COPIED) cpSync(join(pristine, f), join(scratch, f), { recursive: true });
  // A mutant killed only end to end (`build: true`) builds its own worker: the built one is not linked.
  for (const f of LINKED) {
    if (m.build && f === "build") continue;
    if (existsSync(join(root, f))) symlinkSync(join(root, f), join(scratch, f));
  }
  const path = join(scratch, m.file);
  const text = readFileSync(path, "utf8");
  const found = text.split(m.find).length - 1;
  if (found !== 1) throw new Error(`${m.id}: the text to mutate is found ${found} times in ${m.file}`);
  writeFileSync(path, text.replace(m.find, () => m.replace));
}

/** Runs a command in the scratch copy; its exit status and output (stdout and stderr in order). */
function run(cmd, args) {
  const quoted = [cmd, ...args].map((a) => `'${a.replace(/'/g, "'\\''")}'`).join(" ");
  const r = spawnSync("bash", ["-c", `${quoted} 2>&1`], { cwd: scratch, env, encoding: "utf8", maxBuffer: 1 << 28 });
  return { status: r.status, out: r.stdout };
}

/** The failed tests a cargo test run printed, as `target::name`. */
function cargoKillers(out) {
  const killers = [];
  let target = "?";
  for (const line of out.split("\n")) {
    const running = /^\s*Running (?:unittests )?(\S+)/.exec(line);
    if (running) target = running[1].replace(/^tests\//, "").replace(/(\/main)?\.rs$/, "").replace(/^src\/lib$/, "lib");
    const failed = /^test (\S+) \.\.\. FAILED$/.exec(line);
    if (failed) killers.push(`${target}::${failed[1]}`);
  }
  return killers;
}

/** The failed tests a `node --test` run printed. */
function nodeKillers(out) {
  return [...out.matchAll(/^not ok \d+ - (.+)$/gm)].map((m) => m[1]);
}

const SIM = ["test", "--locked", "--test", "simulation", "fixed_seeds_hold_every_invariant"];
const NATIVE = ["test", "--locked", "--no-fail-fast", "--", "--skip", "fixed_seeds_hold_every_invariant", "--skip", "the_detectors_fire", "--skip", "a_seed_replays_exactly"];

const rows = [];
let bad = 0;
for (const m of table.filter((m) => only.length === 0 || only.includes(m.id))) {
  const started = Date.now();
  if (m.equivalent) {
    rows.push([m.id, m.file, "equivalent: " + m.equivalent, "-", "-"]);
    continue;
  }
  let killedBy;
  let simulation = "-";
  try {
    applied(m);
    if (m.build) {
      const b = run("bash", ["-c", "ORDERLY_OPT=0 bash scripts/build.sh"]);
      if (b.status !== 0) throw new Error(`${m.id}: the mutant does not build:\n${b.out.split("\n").slice(-8).join("\n")}`);
    }
    if (m.test) {
      const [cmd, ...args] = m.test.split(" ");
      const r = run(cmd, args);
      killedBy = r.status === 0 ? [] : nodeKillers(r.out).length ? nodeKillers(r.out) : [`${m.test} (exit ${r.status})`];
    } else {
      const native = run("cargo", NATIVE);
      if (/error(\[E\d+\])?: |could not compile/.test(native.out) && cargoKillers(native.out).length === 0) {
        throw new Error(`${m.id}: the mutant does not compile:\n${native.out.split("\n").filter((l) => /^error/.test(l)).slice(0, 5).join("\n")}`);
      }
      killedBy = cargoKillers(native.out);
      const sim = run("cargo", SIM);
      // The first invariant it reports, e.g. "job-3 (attempt 1) started 1917 ms before it was due".
      const first = /failing seed\(s\):\n.*\n\s+(.+)/.exec(sim.out)?.[1]?.trim();
      simulation = sim.status === 0 ? "held" : `failed: ${first ?? "see its output"}`;
      if (sim.status !== 0) killedBy.push("simulation::fixed_seeds_hold_every_invariant");
    }
  } catch (e) {
    bad++;
    rows.push([m.id, m.file, `ERROR: ${e.message}`, "-", "-"]);
    console.error(e.message);
    continue;
  }
  const seconds = Math.round((Date.now() - started) / 1000);
  if (killedBy.length === 0) bad++;
  const native = killedBy.filter((k) => !k.startsWith("simulation::fixed"));
  const shown = native.length === 0 ? (killedBy.length ? "(the simulation only)" : "SURVIVED") : native.slice(0, 2).join(", ") + (native.length > 2 ? ` and ${native.length - 2} more` : "");
  rows.push([m.id, m.file, shown, simulation, `${seconds} s`]);
  console.error(`mutant ${m.id}: ${killedBy.length ? "killed" : "SURVIVED"} (${seconds} s)`);
}

console.log("\n| mutant | file | killed by (native suite, or the node test) | simulation, fixed seeds | time |\n|---|---|---|---|---|");
for (const r of rows) console.log(`| ${r.map((c) => String(c).replace(/\|/g, "\\|")).join(" | ")} |`);
const killed = rows.filter((r) => r[4] !== "-" && r[2] !== "SURVIVED").length;
console.log(`\n${killed} of ${rows.length} mutants killed; ${bad} survived or could not be applied`);
rmSync(scratch, { recursive: true, force: true });
rmSync(pristine, { recursive: true, force: true });
process.exit(bad === 0 ? 0 : 1);
