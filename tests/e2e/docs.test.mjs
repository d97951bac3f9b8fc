// What the README and docs/ show is what the repository runs, and every page is reachable: the
// README's first job is tests/native/readme.rs whole, the handler guide shows the Rust example's whole
// src/lib.rs, the JS example binds what its worker exports, and every relative link resolves.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const read = (p) => readFileSync(join(root, p), "utf8");
const pages = ["README.md", ...readdirSync(join(root, "docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)];

/** GitHub's anchor for a heading. */
const slug = (heading) => heading.trim().toLowerCase().replace(/[^\w\- ]/g, "").replace(/ /g, "-");

/** The headings' anchors of a markdown text (code blocks left out). */
function anchors(text) {
  const out = new Set();
  let fenced = false;
  for (const line of text.split("\n")) {
    if (line.startsWith("```")) fenced = !fenced;
    const h = !fenced && /^#{1,6} (.*)$/.exec(line);
    if (h) out.add(slug(h[1]));
  }
  return out;
}

/** The relative links of `page` (a path from the root, its text `text`) that name no file, or no
 * heading of it: `[link, why]` pairs. */
export function brokenLinks(page, text, readPage = read, exists = (p) => existsSync(join(root, p))) {
  const broken = [];
  const dir = dirname(page);
  for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
    if (/^[a-z]+:/.test(target)) continue;
    const [path, anchor] = target.split("#");
    const file = path === "" ? page : join(dir, path);
    if (!exists(file)) {
      broken.push([target, "no such file"]);
    } else if (anchor !== undefined && file.endsWith(".md") && !anchors(readPage(file)).has(anchor)) {
      broken.push([target, `no heading #${anchor} in ${file}`]);
    }
  }
  return broken;
}

test("the README shows tests/native/readme.rs whole, as it is", () => {
  assert.ok(read("README.md").includes("```rust\n" + read("tests/native/readme.rs") + "```"));
});

test("the handler guide shows the Rust example's whole lib.rs, as it is", () => {
  assert.ok(read("docs/getting-started.md").includes("```rust\n" + read("examples/rust-handler/src/lib.rs") + "```"));
});

test("the README's first job is the TypeScript template's own handler, shown whole, and its curl reaches orderly under the mount", () => {
  const shown = read("template-ts/src/index.ts").replaceAll("{{name}}", "my-worker");
  const readme = read("README.md");
  const first = readme.slice(readme.indexOf("## A first job"), readme.indexOf("### In Rust"));
  assert.ok(first.includes("```ts\n" + shown + "```"), "the README shows template-ts/src/index.ts whole");
  assert.match(first, /curl -X POST http:\/\/localhost:8787\/orderly\/jobs /);
  assert.match(first, /http:\/\/localhost:8787\/orderly\/ is the dashboard/);
});

test("the README is a front door: at most 250 lines, and every page of docs/ is linked from it", () => {
  const readme = read("README.md");
  assert.ok(readme.split("\n").length <= 250, `${readme.split("\n").length} lines`);
  for (const page of pages.filter((p) => p.startsWith("docs/") && p.endsWith(".md"))) {
    if (page === "docs/crate.md") continue; // the crate's own README on crates.io
    assert.ok(readme.includes(`](${page}`), `${page} is not linked from the README`);
  }
});

test("every relative link of the README and docs/ names a file, and a heading of it", () => {
  for (const page of pages) assert.deepEqual(brokenLinks(page, read(page)), [], page);
});

test("the link check reports a missing file and a missing heading", () => {
  const files = { "docs/a.md": "# A\n\n## Here\n" };
  const readPage = (p) => files[p];
  const exists = (p) => p in files;
  const text = "[ok](a.md#here) [gone](b.md) [no heading](a.md#there) [web](https://x.test/y)";
  assert.deepEqual(brokenLinks("docs/x.md", text, readPage, exists), [
    ["b.md", "no such file"],
    ["a.md#there", "no heading #there in docs/a.md"],
  ]);
});

test("the JS example's README binds the entrypoint its worker exports", () => {
  const readme = read("examples/js-handler/README.md");
  const entry = /entrypoint = "(\w+)"/.exec(readme)?.[1];
  assert.equal(entry, "Handler");
  assert.match(read("examples/js-handler/src/index.js"), new RegExp(`export class ${entry} extends WorkerEntrypoint`));
  assert.match(readme, /SERVICE_HANDLERS = "notify=APP"/);
});
