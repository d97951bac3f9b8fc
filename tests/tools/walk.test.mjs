// docs/development.md's "One message's walk" is the code's: each hop's file exists and defines
// its function, and the function it is entered from calls it under the name the table gives
// (that text appears in one of the caller's definitions of that name). A rename, a move or a new
// hop in between fails here until the walk is written again.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { bodiesOf } from "../../scripts/mutants-lib.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");

/** The walk tables under `## One message's walk`, by their `###` heading: rows {n, file, fn, from, as}. */
export function walks(doc) {
  const section = doc.slice(doc.indexOf("## One message's walk"));
  const out = {};
  let mode;
  for (const line of section.split("\n")) {
    const h = /^### (.+)$/.exec(line);
    if (h) mode = h[1];
    const row = /^\|\s*(\d+)\s*\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|\s*(\d*)\s*\|\s*`?([^`|]*?)`?\s*\|$/.exec(line);
    if (row && mode) (out[mode] ??= []).push({ n: Number(row[1]), file: row[2], fn: row[3], from: row[4] ? Number(row[4]) : undefined, as: row[5].trim() });
  }
  return out;
}

/** Each body of a function named `name` in `text`: from `fn name` to the brace closing it. */
export function bodies(text, name) {
  return bodiesOf(name, text).map(([from, to]) => text.slice(from, to));
}

/** Whether `body` has `call` as a whole name (`leaf` is not in `renamed_leaf()`). */
function calls(body, call) {
  const word = /\w/;
  const escaped = call.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const pattern = `${word.test(call[0]) ? "(?<!\\w)" : ""}${escaped}${word.test(call.at(-1)) ? "(?!\\w)" : ""}`;
  return new RegExp(pattern).test(body);
}

/** Where a walk and the code differ, in words; none when they match. */
export function mismatches(rows, read) {
  const problems = [];
  const byN = new Map(rows.map((r) => [r.n, r]));
  rows.forEach((r, i) => {
    if (r.n !== i + 1) problems.push(`hop ${r.n} is numbered out of order`);
    const text = read(r.file);
    if (text === undefined) return problems.push(`hop ${r.n}: ${r.file} does not exist`);
    if (bodies(text, r.fn).length === 0) return problems.push(`hop ${r.n}: ${r.file} defines no fn ${r.fn}`);
    if (r.from === undefined) return;
    const caller = byN.get(r.from);
    if (!caller || caller.n >= r.n) return problems.push(`hop ${r.n}: entered from hop ${r.from}, which is not before it`);
    const callerText = read(caller.file) ?? "";
    if (!bodies(callerText, caller.fn).some((b) => calls(b, r.as))) {
      problems.push(`hop ${r.n}: ${caller.file}'s ${caller.fn} does not call \`${r.as}\``);
    }
  });
  return problems;
}

const read = (f) => (existsSync(join(root, f)) ? readFileSync(join(root, f), "utf8") : undefined);

test("the walk of one message in docs/development.md matches the code, in lock mode and in strict mode", () => {
  const doc = readFileSync(join(root, "docs/development.md"), "utf8");
  const found = walks(doc);
  assert.deepEqual(Object.keys(found), ["Lock mode", "Strict mode"]);
  for (const [mode, rows] of Object.entries(found)) {
    assert.ok(rows.length >= 10, `${mode}: ${rows.length} hops read`);
    assert.deepEqual(mismatches(rows, read), [], mode);
    // The count the prose gives is the table's.
    const files = new Set(rows.map((r) => r.file)).size;
    const section = doc.slice(doc.indexOf(`### ${mode}`));
    assert.match(section, new RegExp(`${rows.length} functions in ${files} files`), `${mode}'s count`);
  }
});

test("the walk checker reports a function gone, a call renamed, and a hop entered from after it", () => {
  const files = {
    "a.rs": "fn first() { second(); }\nfn second() { leaf() }\nfn leaf() {}\n",
  };
  const rd = (f) => files[f];
  const rows = [
    { n: 1, file: "a.rs", fn: "first" },
    { n: 2, file: "a.rs", fn: "second", from: 1, as: "second" },
    { n: 3, file: "a.rs", fn: "leaf", from: 2, as: "leaf" },
  ];
  assert.deepEqual(mismatches(rows, rd), []);
  files["a.rs"] = "fn first() { second(); }\nfn second() { renamed_leaf() }\nfn renamed_leaf() {}\n";
  assert.deepEqual(mismatches(rows, rd), ["hop 3: a.rs defines no fn leaf"]);
  assert.deepEqual(mismatches([rows[0], rows[1], { ...rows[2], fn: "renamed_leaf" }], rd), ["hop 3: a.rs's second does not call `leaf`"]);
  assert.deepEqual(mismatches([rows[0], { ...rows[1], from: 3 }], rd), ["hop 2: entered from hop 3, which is not before it"]);
  assert.deepEqual(mismatches([{ ...rows[0], file: "gone.rs" }], rd), ["hop 1: gone.rs does not exist"]);
  const doc = "## One message's walk\n\n### Lock mode\n\n| # | file | function | from | as |\n|---|---|---|---|---|\n| 1 | `a.rs` | `first` | | |\n| 2 | `a.rs` | `second` | 1 | `second` |\n";
  assert.deepEqual(walks(doc), { "Lock mode": [{ n: 1, file: "a.rs", fn: "first", from: undefined, as: "" }, { n: 2, file: "a.rs", fn: "second", from: 1, as: "second" }] });
});
