// What the README shows is what the repository runs: the Rust example's whole src/lib.rs, and
// the service binding lines of the JS example.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const read = (p) => readFileSync(join(root, p), "utf8");

test("the README shows the Rust example's whole lib.rs, as it is", () => {
  assert.ok(read("README.md").includes("```rust\n" + read("examples/rust-handler/src/lib.rs") + "```"));
});

test("the JS example's README binds the entrypoint its worker exports", () => {
  const readme = read("examples/js-handler/README.md");
  const entry = /entrypoint = "(\w+)"/.exec(readme)?.[1];
  assert.equal(entry, "Handler");
  assert.match(read("examples/js-handler/src/index.js"), new RegExp(`export class ${entry} extends WorkerEntrypoint`));
  assert.match(readme, /SERVICE_HANDLERS = "notify=APP"/);
});
