// What `scripts/mutants.mjs` reads and decides, apart from the commands it runs, so its own test
// (tests/tools/mutants.test.mjs) can feed it cargo's output directly, and the one place it runs
// a command under a time limit.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

/**
 * Runs `cmd` with bash in `cwd`; its exit status, its output (stdout and stderr in order) and
 * whether it ran past `timeoutMs`. At the limit the whole process group goes, not only the shell:
 * cargo's test binaries are its grandchildren, and a limit that killed only the shell once left a
 * hung mutant's test binary spinning for hours after the run had counted it. coreutils' `timeout`
 * runs the command in a process group of its own and signals all of it (TERM, then KILL 10 s on).
 */
export function runBounded(cwd, cmd, env, timeoutMs) {
  const started = Date.now();
  const argv = timeoutMs
    ? ["timeout", "--kill-after=10", `${Math.ceil(timeoutMs / 1000)}`, "bash", "-c", `exec 2>&1; ${cmd}`]
    : ["bash", "-c", `exec 2>&1; ${cmd}`];
  const r = spawnSync(argv[0], argv.slice(1), { cwd, env, encoding: "utf8", maxBuffer: 1 << 28 });
  // 124: timed out and ended by TERM; 137: needed the KILL. A command that exits 124 itself
  // before its limit is not a timeout.
  const timedOut = Boolean(timeoutMs) && [124, 137].includes(r.status) && Date.now() - started >= timeoutMs - 1000;
  return { status: r.status, out: r.stdout ?? "", timedOut };
}

/**
 * A cargo test run's verdicts, each test as `target::name` (`lib` for the crate's unit tests,
 * `consumer` for tests/consumer.rs, `simulation` for tests/simulation/main.rs): the tests that
 * passed, failed, the targets whose test binary died without naming a failed test, and whether
 * the code did not compile.
 */
export function killersIn(out) {
  const passed = [];
  const failed = [];
  const failedTargets = new Set();
  let target = "?";
  for (const line of out.split("\n")) {
    const running = /^\s*Running (?:unittests )?(\S+)/.exec(line);
    if (running) target = targetName(running[1]);
    const verdict = /^test (\S+) \.\.\. (ok|FAILED)$/.exec(line);
    if (verdict) (verdict[2] === "ok" ? passed : failed).push(`${target}::${verdict[1]}`);
  }
  // `error: test failed, to rerun pass `--test consumer`` (or `--lib`), and with
  // --no-fail-fast the list of failed targets.
  for (const m of out.matchAll(/`(--lib|--test \S+)`/g)) {
    failedTargets.add(m[1] === "--lib" ? "lib" : m[1].slice("--test ".length));
  }
  const crashed = [...failedTargets].filter((t) => !failed.some((f) => f.startsWith(`${t}::`)));
  const compileError = /^error: could not compile|^error\[E\d+\]/m.test(out);
  return { passed, failed, crashed, compileError };
}

/** `tests/simulation/main.rs` -> `simulation`, `tests/api.rs` -> `api`, `src/lib.rs` -> `lib`. */
export function targetName(path) {
  if (/^src\/lib\.rs$/.test(path)) return "lib";
  return path.replace(/^tests\//, "").replace(/(\/main)?\.rs$/, "");
}

/**
 * The root package's test targets from `cargo metadata --no-deps` (`lib` and each integration
 * test), with the table's structural tests: `structural` holds whole targets (`"house"`), `skips`
 * the names to skip inside others (`"lib::ledger::params::"` -> `ledger::params::`); `crate` is
 * the package's name.
 */
export function targetsOf(metadata, table) {
  const meta = JSON.parse(metadata);
  const rootId = meta.workspace_default_members?.[0] ?? meta.packages[0].id;
  const pkg = meta.packages.find((p) => p.id === rootId) ?? meta.packages[0];
  const names = pkg.targets
    .filter((t) => t.kind.includes("lib") || t.kind.includes("rlib") || t.kind.includes("test"))
    .map((t) => (t.kind.includes("test") ? t.name : "lib"));
  const targets = [...new Set(names)];
  const structural = new Set();
  const skips = [];
  for (const s of table.structural ?? []) {
    const [target, ...rest] = s.split("::");
    if (rest.length === 0 || rest.join("::") === "") structural.add(target);
    else skips.push(rest.join("::"));
  }
  for (const t of structural) {
    if (!targets.includes(t)) throw new Error(`the table names a structural test target ${t} that does not exist`);
  }
  return Object.assign(targets, { structural, skips, crate: pkg.name });
}

/**
 * Why a mutant of a SQL file (whose whole text is `text`) would be killed by the statement's
 * parameter check alone, or null: the statement's body, its `--` comments aside, must use the
 * same placeholders before and after, as src/ledger/params.rs requires. A mutant must change
 * behaviour, not the statement's declared shape.
 */
export function placeholderChange(m, text) {
  if (!m.file.endsWith(".sql")) return null;
  const of = (sql) => {
    const body = sql.split("\n").filter((l) => !l.trimStart().startsWith("--")).join("\n");
    return [...new Set(body.match(/\?\d+/g) ?? [])].sort().join(" ");
  };
  const [before, after] = [of(text), of(mutated(m, text))];
  return before === after ? null : `its replacement changes the placeholders the statement uses (${before || "none"} -> ${after || "none"})`;
}

/**
 * Where mutant `m`'s text is in `text`: each `[start, end)` span of it, only inside the function
 * `m.in` when the mutant names one (`fn name`, `function name`: from its name to the brace that
 * closes its body). Found as it is written; when it is nowhere as written, found with whitespace
 * ignored on both sides (a reflow by rustfmt or prettier moves no mutant).
 */
export function spansOf(m, text) {
  const [from, to] = m.in ? bodyOf(m.in, text) ?? [0, 0] : [0, text.length];
  const exact = [];
  for (let i = text.indexOf(m.find, from); i >= 0 && i + m.find.length <= to; i = text.indexOf(m.find, i + 1)) {
    exact.push([i, i + m.find.length]);
  }
  if (exact.length > 0 || m.find === "") return exact;
  // The region's characters but whitespace, each with its place in `text`.
  const at = [];
  let compact = "";
  for (let i = from; i < to; i++) {
    if (!/\s/.test(text[i])) {
      compact += text[i];
      at.push(i);
    }
  }
  const needle = m.find.replace(/\s+/g, "");
  const spans = [];
  for (let i = needle ? compact.indexOf(needle) : -1; i >= 0; i = compact.indexOf(needle, i + 1)) {
    spans.push([at[i], at[i + needle.length - 1] + 1]);
  }
  return spans;
}

/** The span of each function `name` in `text`, from `fn name` (or `function name`) to the brace
 * that closes its body. */
export function bodiesOf(name, text) {
  const spans = [];
  const head = new RegExp(`\\b(?:fn|function)\\s+${name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\b`, "g");
  for (const m of text.matchAll(head)) {
    let depth = 0;
    let end = text.length;
    for (let i = text.indexOf("{", m.index); i >= 0 && i < text.length; i++) {
      if (text[i] === "{") depth++;
      if (text[i] === "}" && --depth === 0) {
        end = i + 1;
        break;
      }
    }
    spans.push([m.index, end]);
  }
  return spans;
}

/** The span of the first function `name` in `text` (see [`bodiesOf`]), or undefined. */
function bodyOf(name, text) {
  return bodiesOf(name, text)[0];
}

/** `text` with mutant `m` applied at its one place (see [`spansOf`]). */
export function mutated(m, text) {
  const [[start, end]] = spansOf(m, text);
  return text.slice(0, start) + m.replace + text.slice(end);
}

/**
 * Why mutant `m` cannot be applied to its file's text `text`, or null: its text must be found
 * exactly once (whitespace aside, within `m.in` when named), its replacement must change it, and
 * keep a SQL statement's placeholders.
 */
export function whyNotApplicable(m, text) {
  if (text === undefined) return `its file ${m.file} does not exist`;
  const found = spansOf(m, text).length;
  if (found !== 1) return `the text to mutate is found ${found} times in ${m.in ? `${m.file}'s ${m.in}` : m.file}`;
  if (m.replace === m.find) return "its replacement is its text: it changes nothing";
  const changed = placeholderChange(m, text);
  return changed && `${changed}: the SQL parameter check would kill it whatever the behaviour tests do`;
}

/**
 * Mutant `m` where it is now: in its own file, or, when the code moved, in the one file among
 * `others` (paths, read with `read`) that holds its text once, with the file it moved to in
 * `movedTo`; or why it cannot be applied.
 */
export function locate(m, read, others) {
  const own = read(m.file);
  const why = whyNotApplicable(m, own);
  if (!why) return { file: m.file };
  // Found where it is, but more than once or refused for what it does: not a move.
  if (own !== undefined && spansOf(m, own).length > 0) return { why };
  const holders = others.filter((f) => f !== m.file && spansOf(m, read(f) ?? "").length > 0);
  if (holders.length !== 1) return { why: holders.length ? `${why}; it is in ${holders.join(", ")}` : why };
  const moved = { ...m, file: holders[0] };
  const again = whyNotApplicable(moved, read(holders[0]));
  return again ? { why: again } : { file: holders[0], movedTo: holders[0] };
}

/**
 * Whether a cargo run on a mutant built the mutated crate (`Compiling <crate>`): a run that did
 * not would judge the mutant by test binaries built for something else.
 */
export function rebuilt(out, crate) {
  return new RegExp(`^\\s*Compiling ${crate.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} v`, "m").test(out);
}

/**
 * The names of the node tests in a test file's text: each `test("...")`, and a template name
 * (`test(\`${mode} mode: ...\`)`) once for each string of the array the loop just above it walks
 * (`for (const mode of ["lock", "strict"])`), every `${...}` in it replaced by that string.
 */
export function nodeTestNames(text) {
  const names = [];
  const string = /"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'/g;
  const loops = [...text.matchAll(/for \(const [^\n]*? of \[([\s\S]*?)\]\s*\) \{/g)];
  for (const m of text.matchAll(/\btest\(\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|`([^`]*)`)/g)) {
    if (m[3] === undefined) {
      names.push(m[1] ?? m[2]);
      continue;
    }
    const loop = loops.filter((l) => l.index < m.index).pop();
    // Only the first string of each array item names it (`[["Fedify's retry policy", {...}], ...]`).
    const items = loop ? [...loop[1].matchAll(/(?:^|\[|,)\s*\[?\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')/g)] : [];
    const values = items.map((i) => [...i[1].matchAll(string)][0]).map((s) => s[1] ?? s[2]);
    for (const v of values.length ? values : [""]) names.push(m[3].replace(/\$\{[^}]*\}/g, v));
  }
  return names;
}

/**
 * What in mutation table `table` names a test that does not exist, each as a sentence: a
 * mutant's `test` command whose `--name-pattern` matches no test of its files (the command would
 * run nothing, and the run would stop at its baseline), and a recorded killer (`target::path::fn`)
 * whose function is defined nowhere. `read(path)` gives a file's text (undefined when absent);
 * `rustDefines(name)` says whether a Rust test function of that name exists.
 */
export function missingKillers(table, read, rustDefines) {
  const problems = [];
  for (const m of table.mutants) {
    if (m.test) {
      const words = m.test.match(/"[^"]*"|\S+/g).map((w) => w.replace(/^"(.*)"$/, "$1"));
      const at = words.indexOf("--name-pattern");
      const files = words.filter((w) => /^tests\/.*\.mjs$/.test(w));
      for (const f of files) if (read(f) === undefined) problems.push(`${m.id}: its test file ${f} does not exist`);
      if (at >= 0) {
        const pattern = new RegExp(words[at + 1]);
        const names = files.flatMap((f) => nodeTestNames(read(f) ?? ""));
        if (!names.some((n) => pattern.test(n))) {
          problems.push(`${m.id}: no test in ${files.join(", ")} matches --name-pattern "${words[at + 1]}"`);
        }
      }
    }
    for (const k of m.killers ?? []) {
      if (!rustDefines(k.split("::").pop())) problems.push(`${m.id}: its killer ${k} is defined nowhere`);
    }
  }
  return problems;
}

/** The project's files that end as `file` does (`.rs`, `.sql`, `.mjs`...), paths relative to `root`:
 * where a mutant of `file` may have moved. Build output, installs and tests are not looked in. */
export function sameKindFiles(root, file) {
  const ext = file.slice(file.lastIndexOf("."));
  const out = [];
  const walk = (rel) => {
    for (const e of readdirSync(join(root, rel), { withFileTypes: true })) {
      const p = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory() && !["node_modules", "target", "build", ".git", ".tools", "tests"].includes(e.name)) walk(p);
      else if (e.isFile() && e.name.endsWith(ext)) out.push(p);
    }
  };
  walk("");
  return out;
}

/** Every function name defined in the `.rs` files under `dirs` (paths relative to `root`). */
export function rustFunctionNames(root, dirs = ["src", "tests"]) {
  const names = new Set();
  const walk = (dir) => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith(".rs")) for (const m of readFileSync(p, "utf8").matchAll(/\bfn (\w+)/g)) names.add(m[1]);
    }
  };
  for (const d of dirs) walk(join(root, d));
  return names;
}

/** `missingKillers` of the table of the project at `root`, read from its files. */
export function missingKillersIn(root, table) {
  const fns = rustFunctionNames(root);
  const read = (f) => (existsSync(join(root, f)) ? readFileSync(join(root, f), "utf8") : undefined);
  return missingKillers(table, read, (name) => fns.has(name));
}
