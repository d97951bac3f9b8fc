// The ledger's schema ships with the library (design §21): a worker on a D1 database that is not
// migrated, or migrated by an older or newer release, refuses to run on it and says what fixes it;
// `POST /admin/migrate` applies what the database lacks, recorded where `wrangler d1 migrations
// apply` records it; a job sent meanwhile waits and is not lost. The D1 ledger only (shards
// migrate themselves: the DO run of the suite covers them everywhere else).
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { start, waitFor, webhook, SCHEMA, ONCE } from "./harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const FILES = readdirSync(join(root, "migrations")).filter((f) => f.endsWith(".sql")).sort();
const listed = async (w) => (await w.db.prepare("SELECT name FROM d1_migrations ORDER BY id").all()).results.map((r) => r.name);

test("an unmigrated D1 ledger is refused, naming the fix; POST /admin/migrate applies it all and the waiting job runs", ONCE, async () => {
  const w = await start({ ledger: null, migrations: 0 });
  try {
    const refused = await w.api("GET", "/jobs");
    assert.equal(refused.status, 503, refused.text);
    assert.match(refused.json.error, /no orderly ledger yet \(schema 0 of \d+\).*POST \/admin\/migrate/);
    const submitted = await w.api("POST", "/jobs", { payload: webhook("/ok/early") });
    assert.equal(submitted.status, 503, "nothing is accepted that could not be recorded");

    // A job sent straight to the queue meanwhile is deferred, not dropped.
    await w.queue.send({ ...webhook("/ok/sent-early"), __orderly_job__: { id: "sent-early" } });
    await waitFor(() => w.logs.some((l) => /no orderly ledger yet/.test(l.message)), "the consumer's refusal logged");

    const standing = await w.api("GET", "/admin/migrate");
    assert.equal(standing.status, 200, standing.text);
    assert.deepEqual([standing.json.current, standing.json.schema, standing.json.migrations], [false, SCHEMA, []]);
    assert.equal((await w.api("POST", "/admin/migrate", {}, "not-the-admin-token")).status, 401);

    const migrated = await w.api("POST", "/admin/migrate", {});
    assert.equal(migrated.status, 200, migrated.text);
    assert.deepEqual(migrated.json, { ledger: "d1", schema: SCHEMA, applied: FILES });
    assert.deepEqual(await listed(w), FILES, "recorded as wrangler records them");
    assert.deepEqual((await w.api("POST", "/admin/migrate", {})).json.applied, [], "a second run applies nothing");
    assert.equal((await w.api("GET", "/admin/migrate")).json.current, true);

    const r = await w.api("POST", "/jobs", { payload: webhook("/ok/after") });
    assert.equal(r.status, 202, r.text);
    await waitFor(async () => (await w.job(r.json.jobs[0].id))?.status === "DONE", "a job submitted after the migration DONE");
    // The deferred message comes back after its 30 s delay and runs.
    await waitFor(async () => (await w.job("sent-early"))?.status === "DONE", "the job sent before the migration DONE", 90_000);
  } finally {
    await w.dispose();
  }
});

test("a D1 ledger an older release migrated is refused naming what it lacks; the migration adds only that", ONCE, async () => {
  const w = await start({ ledger: null, migrations: FILES.length - 2 });
  try {
    const refused = await w.api("GET", "/jobs/counts");
    assert.equal(refused.status, 503);
    assert.ok(refused.json.error.includes(`${FILES.length - 2} of ${SCHEMA} migrations; missing ${FILES.slice(-2).join(", ")}`), refused.json.error);
    const migrated = await w.api("POST", "/admin/migrate", {});
    assert.deepEqual(migrated.json.applied, FILES.slice(-2));
    const r = await w.api("POST", "/jobs", { payload: webhook("/ok/x"), ordering_key: "k", deadline_seconds: 600 });
    assert.equal(r.status, 202, r.text);
    await waitFor(async () => (await w.job(r.json.jobs[0].id))?.status === "DONE", "the job DONE on the migrated ledger");
  } finally {
    await w.dispose();
  }
});

test("a D1 ledger a newer release migrated is refused, and not migrated back", ONCE, async () => {
  const w = await start({ ledger: null });
  try {
    await w.db.prepare("INSERT INTO d1_migrations (name) VALUES ('9999_from_the_future.sql')").run();
    const refused = await w.api("GET", "/jobs");
    assert.equal(refused.status, 503);
    assert.match(refused.json.error, /newer than this orderly's \(d1_migrations lists 9999_from_the_future\.sql/);
    const migrate = await w.api("POST", "/admin/migrate", {});
    assert.equal(migrate.status, 503);
    assert.match(migrate.json.error, /newer than this orderly's/);
  } finally {
    await w.dispose();
  }
});

test("with the ledger on Durable Object shards there is nothing to migrate by hand", ONCE, async () => {
  const w = await start({ ledger: { shards: 2 } });
  try {
    const r = await w.api("POST", "/admin/migrate", {});
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.ledger, "do");
    assert.match(r.json.note, /applies the migrations it lacks on its first request/);
  } finally {
    await w.dispose();
  }
});
