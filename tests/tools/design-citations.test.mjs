// Every `design §N` citation in the project (code, tests, scripts, docs) names a heading of
// docs/design.md: a section (`## 22.`) or one of its numbered parts (`### 22.1`), each a heading a
// reader can link to and jump to. A citation of a part that is no heading, or of a section that no
// longer exists, fails here; so does a section named for the review or the issue it came from
// (the design is a map by topic; its history is CHANGELOG.md's).
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const SKIP = new Set(["node_modules", "target", "build", ".git", ".tools", ".wrangler"]);
const TEXT = /\.(rs|sql|mjs|js|ts|md|json|jsonc|toml|sh|html)$/;

/** The ids of design.md's headings: `## 3b. ...` -> "3b", `### 22.1 ...` -> "22.1". */
export function headingIds(design) {
  return new Set([...design.matchAll(/^#{2,4} (\d+[a-z]?(?:\.\d+)?)[. ]/gm)].map((m) => m[1]));
}

/** Each `design §id` in `text` whose id is no heading: "file:line: design §id". */
export function unresolved(file, text, ids) {
  const out = [];
  for (const [n, line] of text.split("\n").entries()) {
    for (const m of line.matchAll(/design §(\d+[a-z]?(?:\.\d+)?)/g)) {
      if (!ids.has(m[1])) out.push(`${file}:${n + 1}: design §${m[1]}`);
    }
  }
  return out;
}

/** Headings of design.md named for where they came from, not what they are about. */
export function historyHeadings(design) {
  return design.split("\n").filter((l) => /^#{1,4} /.test(l) && /\breview\b|\bissue \d+|\bsession\b/i.test(l));
}

function files(dir, rel = "") {
  const out = [];
  for (const e of readdirSync(join(dir, rel), { withFileTypes: true })) {
    const p = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory() && !SKIP.has(e.name)) out.push(...files(dir, p));
    else if (e.isFile() && TEXT.test(e.name)) out.push(p);
  }
  return out;
}

test("every design § citation in the project names a heading of docs/design.md, and no heading is named for its history", () => {
  const design = readFileSync(join(root, "docs/design.md"), "utf8");
  const ids = headingIds(design);
  // This file's own examples of what fails are not citations.
  const all = files(root).filter((f) => f !== "tests/tools/design-citations.test.mjs");
  assert.ok(all.includes("src/consumer/executor.rs") && all.includes("docs/testing.md"), "the project's files are walked");
  const cited = all.flatMap((f) => unresolved(f, readFileSync(join(root, f), "utf8"), ids));
  assert.deepEqual(cited, []);
  assert.deepEqual(historyHeadings(design), []);
  // The walk finds citations at all (a pattern that matched none would pass anything).
  const count = all.reduce((n, f) => n + (readFileSync(join(root, f), "utf8").match(/design §\d/g) ?? []).length, 0);
  assert.ok(count > 300, `citations found: ${count}`);
});

test("the checker reports a citation of a list item, of a section that is gone, and a heading named for a review", () => {
  const design = "# d\n\n## 3. Consumer\n\n### 3.1 Decode\n\n## 3b. Strict\n\n1. **Order.** a list item\n\n## 17. The third review: snoozes\n";
  const ids = headingIds(design);
  assert.deepEqual([...ids], ["3", "3.1", "3b", "17"]);
  const code = "// design §3.1, design §3b and design §17\n// design §3b.1 (a list item)\n/// design §40 (gone)";
  assert.deepEqual(unresolved("src/x.rs", code, ids), ["src/x.rs:2: design §3b.1", "src/x.rs:3: design §40"]);
  assert.deepEqual(historyHeadings(design), ["## 17. The third review: snoozes"]);
});
