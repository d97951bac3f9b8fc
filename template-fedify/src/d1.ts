// The actor's key pair and its followers, in the app's D1 database (the `DB` binding orderly's
// ledger uses too; these tables are the app's own). D1 has one primary, so "insert if absent" is
// exact: two isolates making the actor's first key pair at once keep one, and every follower is
// one row, read a page at a time (Workers KV allows 1,000 operations per invocation, and is
// eventually consistent: the last of two first keys written would win there).

/** The D1 binding, as much of it as this file uses. */
export interface D1Database {
  prepare(sql: string): D1Statement;
}
interface D1Statement {
  bind(...values: unknown[]): D1Statement;
  first<T>(): Promise<T | null>;
  all<T>(): Promise<{ results: T[] }>;
  run(): Promise<unknown>;
}

/** A follower: who, and where to deliver: its own inbox, or its server's shared inbox, which
 * takes one delivery for all of that server's followers. */
export interface Follower {
  id: string;
  inbox: string;
  sharedInbox: string | null;
}

/** A key pair as JSON Web Keys. */
export interface KeyPairJwk {
  privateKey: JsonWebKey;
  publicKey: JsonWebKey;
}

const TABLES = [
  "CREATE TABLE IF NOT EXISTS fedify_actor_key (identifier TEXT PRIMARY KEY, private_key TEXT NOT NULL, public_key TEXT NOT NULL)",
  "CREATE TABLE IF NOT EXISTS fedify_follower (id TEXT PRIMARY KEY, inbox TEXT NOT NULL, shared_inbox TEXT)",
];

/** A follower table made before shared inboxes were recorded gains their column. */
async function sharedInboxColumn(db: D1Database): Promise<void> {
  try {
    await db.prepare("ALTER TABLE fedify_follower ADD COLUMN shared_inbox TEXT").run();
  } catch (e) {
    if (!/duplicate column/i.test(String(e))) throw e;
  }
}

const made = new WeakMap<D1Database, Promise<unknown>>();

/** The app's tables, made once per isolate and database (each statement is a no-op once they exist). */
function tables(db: D1Database): Promise<unknown> {
  let done = made.get(db);
  if (!done) {
    done = Promise.all(TABLES.map((sql) => db.prepare(sql).run())).then(() => sharedInboxColumn(db)).catch((e) => {
      made.delete(db);
      throw e;
    });
    made.set(db, done);
  }
  return done;
}

/** The actor's key pair: the one recorded, or else `make()`'s, recorded unless another isolate's
 * came first (then that one): never replaced once recorded. */
export async function actorKeys(db: D1Database, identifier: string, make: () => Promise<KeyPairJwk>): Promise<KeyPairJwk> {
  await tables(db);
  const read = async () => {
    const row = await db.prepare("SELECT private_key, public_key FROM fedify_actor_key WHERE identifier = ?1").bind(identifier).first<{ private_key: string; public_key: string }>();
    return row ? { privateKey: JSON.parse(row.private_key), publicKey: JSON.parse(row.public_key) } : null;
  };
  const kept = await read();
  if (kept) return kept;
  const pair = await make();
  await db
    .prepare("INSERT INTO fedify_actor_key (identifier, private_key, public_key) VALUES (?1, ?2, ?3) ON CONFLICT (identifier) DO NOTHING")
    .bind(identifier, JSON.stringify(pair.privateKey), JSON.stringify(pair.publicKey))
    .run();
  return (await read()) ?? pair;
}

/** Records a follower (again: its inboxes may have moved). */
export async function recordFollower(db: D1Database, f: Follower): Promise<void> {
  await tables(db);
  await db
    .prepare("INSERT INTO fedify_follower (id, inbox, shared_inbox) VALUES (?1, ?2, ?3) ON CONFLICT (id) DO UPDATE SET inbox = excluded.inbox, shared_inbox = excluded.shared_inbox")
    .bind(f.id, f.inbox, f.sharedInbox)
    .run();
}

/** Forgets a follower. */
export async function forgetFollower(db: D1Database, id: string): Promise<void> {
  await tables(db);
  await db.prepare("DELETE FROM fedify_follower WHERE id = ?1").bind(id).run();
}

/** Every follower, a page of `size` at a time, in id order: one query per page. */
export async function* followers(db: D1Database, size = 500): AsyncIterable<Follower[]> {
  await tables(db);
  for (let after = ""; ; ) {
    const { results } = await db
      .prepare("SELECT id, inbox, shared_inbox AS sharedInbox FROM fedify_follower WHERE id > ?1 ORDER BY id LIMIT ?2")
      .bind(after, size)
      .all<Follower>();
    if (results.length > 0) yield results;
    if (results.length < size) return;
    after = results[results.length - 1].id;
  }
}
