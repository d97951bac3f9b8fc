// The Fedify starter's D1 records (template-fedify/src/d1.ts), on miniflare's D1: the actor's key
// pair is made once however many first requests race (insert if absent; KV, eventually
// consistent, let the last of two writes win and followers saw the key change), and followers are
// read a page at a time (one KV get each passed KV's 1,000 operations per invocation at ~990).
import assert from "node:assert/strict";
import { test } from "node:test";
import { Miniflare } from "miniflare";
import { ONCE } from "./harness.mjs";
import { actorKeys, followers, forgetFollower, recordFollower } from "../../template-fedify/src/d1.ts";

/** miniflare's D1, counting the statements prepared on it. */
async function d1() {
  const mf = new Miniflare({ modules: true, script: "export default { fetch() { return new Response('') } }", d1Databases: ["DB"], cf: false });
  const db = await mf.getD1Database("DB");
  const counted = { statements: 0, prepare: (sql) => (counted.statements++, db.prepare(sql)) };
  return { mf, db: counted };
}

test("the actor's first key pair is recorded once, however many first requests race", ONCE, async () => {
  const { mf, db } = await d1();
  try {
    let made = 0;
    const make = async () => ({ privateKey: { k: `private-${++made}` }, publicKey: { k: `public-${made}` } });
    const got = await Promise.all(Array.from({ length: 10 }, () => actorKeys(db, "social", make)));
    assert.ok(made > 1, `the race happened: ${made} pairs made`);
    assert.equal(new Set(got.map((p) => p.publicKey.k)).size, 1, "every request answers the one recorded");
    assert.deepEqual(await actorKeys(db, "social", make), got[0], "and it is never replaced");
    // Another isolate's first request read before this key was recorded and records its own
    // after it was answered: it answers the first, which stays.
    let release;
    const late = actorKeys(db, "other", async () => {
      await new Promise((r) => (release = r));
      return { privateKey: { k: "late" }, publicKey: { k: "late" } };
    });
    while (!release) await new Promise((r) => setTimeout(r, 10));
    const first = await actorKeys(db, "other", async () => ({ privateKey: { k: "first" }, publicKey: { k: "first" } }));
    release();
    assert.deepEqual(await late, first, "the late one answers the key already given");
    assert.deepEqual(await actorKeys(db, "other", make), first, "which is the key for good");
  } finally {
    await mf.dispose();
  }
});

test("followers are read a page at a time: 10,000 in 21 queries, each once, in order", ONCE, async () => {
  const { mf, db } = await d1();
  try {
    await recordFollower(db, { id: "https://a.example/users/0", inbox: "https://a.example/inbox", sharedInbox: null });
    const values = Array.from({ length: 10_000 }, (_, i) => `('https://f.example/users/${String(i).padStart(5, "0")}', 'https://f.example/inbox/${i}')`);
    for (let i = 0; i < values.length; i += 500) {
      await db.prepare(`INSERT INTO fedify_follower (id, inbox) VALUES ${values.slice(i, i + 500).join(", ")}`).run();
    }
    await forgetFollower(db, "https://a.example/users/0");
    db.statements = 0;
    const seen = [];
    let pages = 0;
    for await (const page of followers(db, 500)) {
      pages++;
      assert.ok(page.length <= 500);
      seen.push(...page.map((f) => f.id));
    }
    assert.equal(seen.length, 10_000);
    assert.equal(new Set(seen).size, 10_000, "each once");
    assert.deepEqual(seen, [...seen].sort(), "in id order");
    assert.equal(pages, 20);
    assert.ok(db.statements <= 21, `queries: ${db.statements}`);
  } finally {
    await mf.dispose();
  }
});

test("a follower table made before shared inboxes were recorded gains their column, and a follow records one", ONCE, async () => {
  const { mf, db } = await d1();
  try {
    await db.prepare("CREATE TABLE fedify_follower (id TEXT PRIMARY KEY, inbox TEXT NOT NULL)").run();
    await db.prepare("INSERT INTO fedify_follower (id, inbox) VALUES ('https://old.example/users/a', 'https://old.example/users/a/inbox')").run();
    await recordFollower(db, { id: "https://new.example/users/b", inbox: "https://new.example/users/b/inbox", sharedInbox: "https://new.example/inbox" });
    // Followed again, from a server that no longer names a shared inbox.
    await recordFollower(db, { id: "https://b.example/users/c", inbox: "https://b.example/users/c/inbox", sharedInbox: "https://b.example/inbox" });
    await recordFollower(db, { id: "https://b.example/users/c", inbox: "https://b.example/users/c/inbox2", sharedInbox: null });
    const all = [];
    for await (const page of followers(db, 500)) all.push(...page);
    assert.deepEqual(all, [
      { id: "https://b.example/users/c", inbox: "https://b.example/users/c/inbox2", sharedInbox: null },
      { id: "https://new.example/users/b", inbox: "https://new.example/users/b/inbox", sharedInbox: "https://new.example/inbox" },
      { id: "https://old.example/users/a", inbox: "https://old.example/users/a/inbox", sharedInbox: null },
    ]);
  } finally {
    await mf.dispose();
  }
});
