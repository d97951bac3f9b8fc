// `npm run provision` against a stub wrangler (tests/e2e/stub/wrangler) that keeps an account's
// resources and answers like wrangler 4: it creates what is missing, finds what exists, writes the
// ids into wrangler.toml, and is idempotent; and `npx orderly-queues provision`, from the package,
// in the TypeScript template's Worker, on its wrangler.jsonc.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { ONCE } from "./harness.mjs";
import { withoutComments } from "../../bin/provision.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

function setup(account = {}) {
  const dir = mkdtempSync(join(tmpdir(), "orderly-provision-"));
  copyFileSync(join(root, "wrangler.toml"), join(dir, "wrangler.toml"));
  const state = join(dir, "account.json");
  writeFileSync(state, JSON.stringify(account));
  const run = () => spawnSync(process.execPath, [join(root, "bin/provision.mjs"), "--config", join(dir, "wrangler.toml")], {
    encoding: "utf8",
    env: { ...process.env, PATH: `${join(root, "tests/e2e/stub")}:${process.env.PATH}`, STUB_STATE: state },
  });
  const account_ = () => JSON.parse(readFileSync(state, "utf8"));
  const toml = () => readFileSync(join(dir, "wrangler.toml"), "utf8");
  return { run, account: account_, toml };
}

test("provision creates the queues, KV namespace and D1 database and writes their ids", ONCE, () => {
  const p = setup();
  const r = p.run();
  assert.equal(r.status, 0, r.stderr);
  const a = p.account();
  assert.deepEqual(a.queues.sort(), ["orderly-dlq", "orderly-jobs", "orderly-jobs-urgent"]);
  assert.equal(a.kv.length, 1);
  assert.equal(a.d1.length, 1);
  const toml = p.toml();
  assert.match(toml, new RegExp(`id = "${a.kv[0].id}"`));
  assert.match(toml, new RegExp(`database_id = "${a.d1[0].uuid}"`));
  assert.doesNotMatch(toml, /0{32}|00000000-0000/, "no placeholder left");
  assert.match(r.stdout, /queue orderly-jobs: created/);
  assert.match(r.stdout, /D1 database orderly: created/);

  // Again: nothing new is created, the ids stay.
  const again = p.run();
  assert.equal(again.status, 0, again.stderr);
  assert.equal(p.account().kv.length, 1);
  assert.equal(p.account().d1.length, 1);
  assert.equal(p.toml(), toml);
  assert.match(again.stdout, /queue orderly-jobs: exists/);
  assert.match(again.stdout, /ids already current/);
  const creates = p.account().calls.filter((c) => c.includes("create"));
  assert.equal(creates.length, 5, `three queues, one namespace, one database: ${creates}`);
});

test("provision finds resources the account already has", ONCE, () => {
  const p = setup({ queues: ["orderly-jobs"], kv: [{ id: "a".repeat(32), title: "ORDERING_KV" }], d1: [{ uuid: "11111111-2222-3333-4444-555555555555", name: "orderly" }] });
  const r = p.run();
  assert.equal(r.status, 0, r.stderr);
  assert.match(p.toml(), /id = "a{32}"/);
  assert.match(p.toml(), /database_id = "11111111-2222-3333-4444-555555555555"/);
  assert.deepEqual(p.account().calls.filter((c) => c.includes("create")), ["queues create orderly-jobs-urgent", "queues create orderly-dlq"]);
});

test("provision stops with the reason when wrangler is not logged in, leaving wrangler.toml alone", ONCE, () => {
  const p = setup({ loggedOut: true });
  const before = p.toml();
  const r = p.run();
  assert.equal(r.status, 1);
  assert.match(r.stderr, /not authenticated/);
  assert.match(r.stderr, /wrangler login/);
  assert.equal(p.toml(), before);
});

test("provision reads JSON after wrangler's [WARNING] lines", ONCE, () => {
  const p = setup({ warn: true, kv: [{ id: "b".repeat(32), title: "ORDERING_KV" }], d1: [{ uuid: "11111111-2222-3333-4444-555555555555", name: "orderly" }] });
  const r = p.run();
  assert.equal(r.status, 0, r.stderr);
  assert.match(p.toml(), /id = "b{32}"/);
});

test("provision writes no id it did not check, and nothing at all when one is bad", ONCE, () => {
  const hostile = [
    { kv: [{ id: 'x"\n[vars]\nADMIN_TOKEN = "pwned', title: "ORDERING_KV" }] },
    { kv: [{ id: "c".repeat(32), title: "ORDERING_KV" }], d1: [{ uuid: "$` and $&-not-a-uuid", name: "orderly" }] },
    { kv: [{ id: "0".repeat(32), title: "ORDERING_KV" }] },
  ];
  for (const account of hostile) {
    const p = setup(account);
    const before = p.toml();
    const r = p.run();
    assert.equal(r.status, 1, `${JSON.stringify(account)}: ${r.stdout}`);
    assert.match(r.stderr, /is not one|placeholder/);
    assert.equal(p.toml(), before, "wrangler.toml is left exactly as it was");
  }
});

test("`npx orderly-queues provision` provisions the TypeScript template's worker from its wrangler.jsonc, comments kept", ONCE, () => {
  const dir = mkdtempSync(join(tmpdir(), "orderly-provision-ts-"));
  const made = spawnSync(process.execPath, [join(root, "bin/orderly-queues.mjs"), "new", "shop"], { cwd: dir, encoding: "utf8" });
  assert.equal(made.status, 0, made.stderr);
  const app = join(dir, "shop");
  const state = join(dir, "account.json");
  writeFileSync(state, JSON.stringify({ kv: [{ id: "d".repeat(32), title: "ORDERING_KV" }] }));
  const run = () => spawnSync(process.execPath, [join(root, "bin/orderly-queues.mjs"), "provision"], {
    cwd: app,
    encoding: "utf8",
    env: { ...process.env, PATH: `${join(root, "tests/e2e/stub")}:${process.env.PATH}`, STUB_STATE: state },
  });
  const r = run();
  assert.equal(r.status, 0, r.stderr);
  const account = JSON.parse(readFileSync(state, "utf8"));
  assert.deepEqual(account.queues.sort(), ["shop-dlq", "shop-jobs"]);
  const config = readFileSync(join(app, "wrangler.jsonc"), "utf8");
  assert.match(config, new RegExp(`"id": "${"d".repeat(32)}"`), "the namespace the account had");
  assert.match(config, new RegExp(`"database_id": "${account.d1[0].uuid}"`));
  assert.match(config, /\/\/ The ledger's migrations ship with orderly/, "its comments kept");
  assert.match(r.stdout, /wrangler\.jsonc: ids written/);
  const again = run();
  assert.equal(again.status, 0, again.stderr);
  assert.equal(readFileSync(join(app, "wrangler.jsonc"), "utf8"), config, "idempotent");
});

test("a JSONC config's comments and trailing commas are read, and strings with slashes are kept", () => {
  const text = `{
  // a comment with "quotes"
  "a": "http://x.test/*not a comment*/", /* a block */
  "b": [1, 2,],
}`;
  assert.deepEqual(JSON.parse(withoutComments(text)), { a: "http://x.test/*not a comment*/", b: [1, 2] });
});
