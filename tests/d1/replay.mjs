// Replays the native suite's D1 traces on miniflare's D1 (design §26): every batch the ledger
// ran on the native stand-in (tests/support/mod.rs, with ORDERLY_D1_TRACE set), in order, on a
// fresh database built by the same migrations, each answer compared with the stand-in's. A batch
// the stand-in refused must be refused here, one it ran must run and answer the same rows: so
// the stand-in is held to D1, not only the ledger to the stand-in.
import { Miniflare } from "miniflare";
import { readFileSync, readdirSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { splitStatements } from "../e2e/harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/**
 * Refusals of D1's documented limits (developers.cloudflare.com/d1/platform/limits, "Maximum
 * arguments per SQL function: 32") that miniflare's local D1 does not make: a batch the stand-in
 * refused for one of these may run locally. Each entry must be a limit the page lists.
 */
export const ONLY_ON_THE_PLATFORM = [/too many arguments on function/];

/** A migration file as statements (as tests/e2e/harness.mjs applies them). */
function migration(name) {
  const text = readFileSync(join(root, "migrations", name), "utf8")
    .split("\n")
    .map((l) => l.replace(/--.*$/, ""))
    .join("\n");
  return splitStatements(text);
}

// The replaying worker: empties its D1 database, applies the migrations given, then runs each
// batch, answering each one's rows or error. One request per trace.
const SCRIPT = `
export default {
  async fetch(request, env) {
    const { migrations, batches } = await request.json();
    const db = env.DB;
    const objects = (await db.prepare("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' AND name NOT LIKE '_cf_%' AND type IN ('table', 'view')").all()).results;
    for (const o of objects) await db.prepare("DROP " + o.type.toUpperCase() + " IF EXISTS \\"" + o.name + "\\"").run();
    for (const stmts of migrations) await db.batch(stmts.map((s) => db.prepare(s)));
    const answers = [];
    for (const batch of batches) {
      try {
        const out = await db.batch(batch.map((s) => db.prepare(s.sql).bind(...s.params)));
        answers.push({ rows: out.map((r) => r.results) });
      } catch (e) {
        answers.push({ error: String(e && e.message || e) });
      }
    }
    return Response.json(answers);
  },
};`;

/** A miniflare with one D1 database and the replaying worker. */
export async function replayer() {
  const mf = new Miniflare({
    modules: true,
    script: SCRIPT,
    compatibilityDate: "2026-08-01",
    d1Databases: { DB: "replay" },
    cf: false,
  });
  await mf.ready;
  return {
    /** Replays one trace's text: the batches whose answers differ from the stand-in's. */
    async replay(text, name = "trace") {
      const sqls = [];
      const migrations = [];
      const batches = [];
      for (const line of text.split("\n").filter(Boolean)) {
        const v = JSON.parse(line);
        if (v.migration !== undefined) migrations.push(migration(v.migration));
        else if (v.text !== undefined) sqls[v.sql] = v.text;
        else batches.push(v);
      }
      const res = await mf.dispatchFetch("http://replay.test/", {
        method: "POST",
        body: JSON.stringify({ migrations, batches: batches.map((b) => b.batch.map((s) => ({ sql: sqls[s.sql], params: s.params }))) }),
      });
      if (res.status !== 200) throw new Error(`${name}: the replaying worker answered ${res.status}: ${await res.text()}`);
      const answers = await res.json();
      const differences = [];
      let platformOnly = 0;
      batches.forEach((b, i) => {
        const d1 = answers[i];
        const where = `${name} batch ${i + 1} (${b.batch.map((s) => firstLine(sqls[s.sql])).join(" | ") || "no statements"})`;
        if (b.error !== undefined && d1.error === undefined && ONLY_ON_THE_PLATFORM.some((re) => re.test(b.error))) {
          platformOnly += 1;
        } else if ((b.error !== undefined) !== (d1.error !== undefined)) {
          differences.push(`${where}: the stand-in ${b.error !== undefined ? `refused it (${b.error})` : "ran it"}, D1 ${d1.error !== undefined ? `refused it (${d1.error})` : "ran it"}`);
        } else if (b.error === undefined && !same(b.rows, d1.rows)) {
          differences.push(`${where}: the stand-in answered ${JSON.stringify(b.rows)}, D1 ${JSON.stringify(d1.rows)}`);
        }
      });
      return { batches: batches.length, differences, platformOnly };
    },
    dispose: () => mf.dispose(),
  };
}

function firstLine(sql = "") {
  return sql.split("\n").find((l) => l.trim() && !l.trim().startsWith("--"))?.trim().slice(0, 60) ?? "";
}

/** Rows equal as D1 gives them to a Worker: numbers by value, objects by their columns. */
export function same(a, b) {
  if (typeof a === "number" && typeof b === "number") return a === b;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => same(x, b[i]));
  if (a && b && typeof a === "object" && typeof b === "object") {
    const ka = Object.keys(a).sort();
    const kb = Object.keys(b).sort();
    return same(ka, kb) && ka.every((k) => same(a[k], b[k]));
  }
  return a === b;
}

/** The trace files in `dir`. */
export function traces(dir) {
  try {
    return readdirSync(dir).filter((f) => f.endsWith(".jsonl")).sort().map((f) => join(dir, f));
  } catch {
    return [];
  }
}
