// The native D1 stand-in held to miniflare's D1 (design §26): every batch the native suite ran
// on the stand-in (npm test runs it with ORDERLY_D1_TRACE=target/d1-trace first) runs again on
// D1, in order, and must answer the same: the same rows, or a refusal where the stand-in refused.
import assert from "node:assert/strict";
import { test } from "node:test";
import { readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { replayer, traces } from "./replay.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const dir = process.env.ORDERLY_D1_TRACE ?? join(root, "target", "d1-trace");

test("every batch the native suite ran on the D1 stand-in answers the same on miniflare's D1", async () => {
  const files = traces(dir);
  // The native suite writes hundreds: a handful means it did not run with ORDERLY_D1_TRACE.
  assert.ok(files.length >= 100, `only ${files.length} traces in ${dir}: run the native suite with ORDERLY_D1_TRACE=${dir}`);
  const r = await replayer();
  try {
    let batches = 0;
    const differences = [];
    for (const f of files) {
      const out = await r.replay(readFileSync(f, "utf8"), f.split("/").pop());
      batches += out.batches;
      differences.push(...out.differences);
    }
    assert.deepEqual(differences, []);
    assert.ok(batches >= 2000, `${batches} batches`);
    // The stand-in's own refusals were among them (tests/native/stand_in.rs), each refused by D1 too.
    const refusals = files.filter((f) => f.includes("stand_in."));
    assert.ok(refusals.length >= 5, `the stand-in's own tests left ${refusals.length} traces`);
  } finally {
    await r.dispose();
  }
});

test("the replay reports an answer D1 does not give, and a refusal it does not make", async () => {
  const r = await replayer();
  try {
    const sql = (n, text) => JSON.stringify({ sql: n, text });
    const trace = [
      JSON.stringify({ migration: "0001_job_ledger.sql" }),
      sql(0, "SELECT typeof(?1) AS t, ?1 || '' AS s, 7 / ?1 AS q"),
      // Right: the platform binds a number as REAL.
      JSON.stringify({ batch: [{ sql: 0, params: [5] }], rows: [[{ t: "real", s: "5.0", q: 1.4 }]] }),
      // Wrong: what SQLite answers for an INTEGER.
      JSON.stringify({ batch: [{ sql: 0, params: [5] }], rows: [[{ t: "integer", s: "5", q: 1 }]] }),
      // Wrong: D1 runs it.
      JSON.stringify({ batch: [{ sql: 0, params: [5] }], error: "refused" }),
      // Right: D1 refuses a 33rd argument (its limits page); miniflare's does not.
      sql(1, `SELECT max(${Array.from({ length: 33 }, (_, i) => i + 1).join(", ")}) AS m`),
      JSON.stringify({ batch: [{ sql: 1, params: [] }], error: "too many arguments on function max" }),
      // Right: D1 refuses an empty batch.
      JSON.stringify({ batch: [], error: "no statements" }),
      // Wrong: D1 refuses an empty batch.
      JSON.stringify({ batch: [], rows: [] }),
    ].join("\n");
    const out = await r.replay(trace, "made");
    assert.equal(out.batches, 6);
    assert.equal(out.platformOnly, 1);
    assert.equal(out.differences.length, 3, out.differences.join("\n"));
    assert.match(out.differences[0], /batch 2 .*integer/);
    assert.match(out.differences[1], /batch 3 .*the stand-in refused it .*D1 ran it/);
    assert.match(out.differences[2], /batch 6 .*the stand-in ran it, D1 refused it/);
  } finally {
    await r.dispose();
  }
});
