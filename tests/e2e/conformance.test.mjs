// The ledger's conformance suite (src/ledger/conformance.rs) on D1 under miniflare: the same cases
// tests/native/conformance.rs runs on SQLite, through the fixture worker tests/e2e/panicking-worker
// (`GET /__conformance`), on the D1 database the migrations built, and on four SQLite-backed
// Durable Object shards (LEDGER = "do"), each preparing its own schema on first use.
import assert from "node:assert/strict";
import { test } from "node:test";
import { start, ONCE } from "./harness.mjs";

test("the ledger conforms on D1", ONCE, async () => {
  const w = await start({ buildDir: "tests/e2e/panicking-worker/build" });
  try {
    for (const prefix of ["d1", "again"]) {
      const res = await w.mf.dispatchFetch(`${w.url}__conformance?prefix=${prefix}`);
      assert.equal(res.status, 200);
      const report = await res.json();
      assert.deepEqual(report.failed, [], JSON.stringify(report.failed));
      assert.equal(report.passed.length, 7, JSON.stringify(report));
    }
  } finally {
    await w.dispose();
  }
});

test("the ledger conforms on four Durable Object shards", ONCE, async () => {
  const w = await start({ buildDir: "tests/e2e/panicking-worker/build", ledger: { shards: 4, className: "ConformanceLedger" } });
  try {
    for (const prefix of ["do", "again"]) {
      const res = await w.mf.dispatchFetch(`${w.url}__conformance?prefix=${prefix}&shards=4`);
      assert.equal(res.status, 200);
      const report = await res.json();
      assert.deepEqual(report.failed, [], JSON.stringify(report.failed));
      assert.equal(report.passed.length, 7, JSON.stringify(report));
    }
    // The jobs are in the shards, none in D1, and more than one shard holds some.
    const d1 = await w.d1.prepare("SELECT count(*) AS n FROM job").first();
    assert.equal(d1.n, 0);
    const perShard = [];
    for (let i = 0; i < 4; i++) perShard.push((await w.shardQuery(i, "SELECT count(*) AS n FROM job"))[0].n);
    assert.ok(perShard.filter((n) => n > 0).length >= 2, `jobs per shard ${perShard}`);
    // Every shard recorded its place; a request routing over another count is refused.
    await assert.rejects(w.shardQuery(1, "SELECT 1", [], { shards: 8 }), /LEDGER_SHARDS cannot change/);
    await assert.rejects(w.shardQuery(1, "SELECT 1", [], { schema: 1 }), /version skew/);
    // A new shard object asks shard 0 first: a raised count is refused there too.
    await assert.rejects(w.shardQuery(6, "SELECT 1", [], { shards: 8 }), /shard 0 refuses/);
    // A batch is one transaction (transactionSync): a failing statement undoes the ones before it.
    const insert = {
      sql: "INSERT INTO job (id, status, attempts, max_attempts, deferrals, next_run_at, created_at, updated_at) VALUES (?1, 'PENDING', 0, 1, 0, 0, 0, 0)",
      params: ["half"],
    };
    const failed = await w.shardBatch(2, [insert, { sql: "SELECT * FROM no_such_table", params: [] }]);
    assert.ok(failed.failed, JSON.stringify(failed));
    assert.equal((await w.shardQuery(2, "SELECT count(*) AS n FROM job WHERE id = 'half'"))[0].n, 0, "half applied");
    assert.ok((await w.shardBatch(2, [insert])).rows, "the insert alone applies");
    assert.equal((await w.shardQuery(2, "SELECT count(*) AS n FROM job WHERE id = 'half'"))[0].n, 1);
  } finally {
    await w.dispose();
  }
});
