// `npm run provision` against a stub wrangler (tests/e2e/stub/wrangler) that keeps an account's
// resources and answers like wrangler 4: it creates what is missing, finds what exists, writes the
// ids into wrangler.toml, and is idempotent.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { ONCE } from "./harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

function setup(account = {}) {
  const dir = mkdtempSync(join(tmpdir(), "orderly-provision-"));
  copyFileSync(join(root, "wrangler.toml"), join(dir, "wrangler.toml"));
  const state = join(dir, "account.json");
  writeFileSync(state, JSON.stringify(account));
  const run = () => spawnSync(process.execPath, [join(root, "scripts/provision.mjs"), "--config", join(dir, "wrangler.toml")], {
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
