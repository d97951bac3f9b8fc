#!/usr/bin/env node
// Runs node:test files one at a time, as `node --test` does, but fails when it ran nothing: a
// pattern that matches no file, or a file in which no test ran, is an error. (`node --test` on a
// glob that matches nothing prints `# tests 0` and exits 0, so a renamed folder would turn a
// whole suite green with nothing run.) Its own test: tests/tools/node-tests.test.mjs.
//
// Usage: node scripts/node-tests.mjs [--timeout ms] [--name-pattern re] [--exclude name] pattern ...
//   pattern: a file, or files with `*` in the last part; --name-pattern: only the tests whose name
//   matches (a file none of whose tests match fails); --exclude: leave out the file of that name
//   (npm test runs it on its own), which must be one the patterns match. Each failed test is named on stderr as
//   `node-tests: failed: <name>` (the mutation runner reads these), then `node-tests:   why: <error>`, its
//   error's first lines: the last lines of a long log say what failed and why.
import { readdirSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { run } from "node:test";
import { spec } from "node:test/reporters";

const args = process.argv.slice(2);
const option = (name) => {
  const i = args.indexOf(name);
  return i < 0 ? undefined : args.splice(i, 2)[1];
};
const timeout = Number(option("--timeout") ?? Infinity);
const namePattern = option("--name-pattern");
const exclude = option("--exclude");

/** The files `pattern` names (`*` matches any run of characters in the file name). */
function expand(pattern) {
  const dir = dirname(pattern);
  const re = new RegExp(`^${basename(pattern).split("*").map((p) => p.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".*")}$`);
  let names;
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  return names.filter((n) => re.test(n)).sort().map((n) => resolve(join(dir, n)));
}

const problems = [];
const files = [];
for (const p of args) {
  const found = expand(p);
  if (found.length === 0) problems.push(`no test file matches ${p}`);
  files.push(...found);
}
if (args.length === 0) problems.push("no test files named");
if (exclude !== undefined) {
  // An exclusion that matches nothing would hide a renamed file's absence: an error too.
  const at = files.findIndex((f) => basename(f) === exclude);
  if (at < 0) problems.push(`--exclude ${exclude} matches no file the patterns name`);
  else files.splice(at, 1);
}

const ran = new Map(files.map((f) => [f, 0]));
// Seconds spent in each file's top-level tests, so the slow files are named (npm test's time).
const spent = new Map();
const spend = (d) => {
  if (d.nesting === 0 && d.name !== d.file) spent.set(d.file, (spent.get(d.file) ?? 0) + (d.details?.duration_ms ?? 0) / 1000);
};
let failed = 0;
const failedNames = [];
/** A failure's error in a few lines: node wraps a test's own error as its `cause`. */
function why(error) {
  const e = error?.cause ?? error;
  const text = String(e?.message ?? e ?? "no error reported").trim();
  return text.split("\n").filter((l) => l.trim() !== "").slice(0, 6).map((l) => l.slice(0, 300));
}
// Skipped tests, shown apart, and the files where a test was skipped with its reason.
let skipped = 0;
const explained = new Set();
if (files.length > 0) {
  const stream = run({ files, concurrency: 1, timeout, testNamePatterns: namePattern && [namePattern] });
  // A test that ran: not a suite, and not the file's own entry (which node reports, named by its
  // path, even for a file with no test in it).
  const counted = (d) => d.details?.type !== "suite" && d.name !== d.file;
  stream.on("test:pass", (d) => {
    spend(d);
    if (!counted(d)) return;
    const skip = d.skip ?? d.todo;
    if (skip === undefined) ran.set(d.file, (ran.get(d.file) ?? 0) + 1);
    else {
      skipped++;
      // Skipped with its reason in the test's own code (the e2e install test skips the Durable
      // Object pass on purpose). Not under a name pattern: a test it filters out reads the same.
      if (typeof skip === "string" && !namePattern) explained.add(d.file);
    }
  });
  stream.on("test:fail", (d) => {
    // A suite fails with its failing test, counted on its own; a file that fails to load
    // fails as the file's own entry.
    spend(d);
    if (d.details?.type === "suite") return;
    failed++;
    if (counted(d)) ran.set(d.file, (ran.get(d.file) ?? 0) + 1);
    failedNames.push([d.name, why(d.details?.error)]);
  });
  await new Promise((done) => stream.compose(spec).on("end", done).pipe(process.stdout));
}
for (const [file, n] of ran) if (n === 0 && !explained.has(file)) problems.push(`no test ran in ${file}`);
const total = [...ran.values()].reduce((a, b) => a + b, 0);
console.log(`\n${files.length} file(s), ${total} test(s), ${failed} failed, ${skipped} skipped`);
const slowest = [...spent].sort((a, b) => b[1] - a[1]).filter(([, s]) => s >= 1);
if (slowest.length > 1) console.log(`time per file: ${slowest.map(([f, s]) => `${basename(f)} ${Math.round(s)} s`).join(", ")}`);
for (const [name, lines] of failedNames) {
  console.error(`node-tests: failed: ${name}`);
  for (const line of lines) console.error(`node-tests:   why: ${line}`);
}
for (const p of problems) console.error(`node-tests: ${p}`);
process.exit(failed > 0 || problems.length > 0 ? 1 : 0);
