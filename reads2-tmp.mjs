import { Miniflare } from "miniflare";
import { readFileSync, readdirSync } from "node:fs";
const mf = new Miniflare({ modules: true, script: "export default { fetch() { return new Response('x') } }", d1Databases: ["DB"] });
const db = await mf.getD1Database("DB");
for (const f of readdirSync("migrations").sort()) {
  const sql = readFileSync("migrations/" + f, "utf8").replace(/--.*$/gm, "");
  for (const s of sql.split(";").map((x) => x.trim()).filter(Boolean)) await db.prepare(s).run();
}
const q = (n) => readFileSync(`src/ledger/sql/${n}.sql`, "utf8");
const T = 1_700_000_000_000;
const ins = [];
for (let i = 0; i < 1000; i++) ins.push(db.prepare(q("enqueue")).bind(`j${i}`, "t", "hot", null, "{}", 3, T, T, 5));
await db.batch(ins);
const show = (label, r) => console.log(label.padEnd(50), "w", r.meta.rows_written, "r", r.meta.rows_read, "rows", r.results?.length);
const tries = [
  ["window select", "SELECT id, seq, status, next_run_at FROM job WHERE ordering_key = 'hot' AND seq IS NOT NULL AND passed_at IS NULL ORDER BY seq LIMIT 50"],
  ["window ids only", "SELECT id FROM job WHERE ordering_key = 'hot' AND seq IS NOT NULL AND passed_at IS NULL ORDER BY seq LIMIT 50"],
  ["one row by id", "SELECT * FROM job WHERE id = 'j5'"],
  ["update one by id", "UPDATE job SET updated_at = 1 WHERE id = 'j5'"],
  ["update one by id returning", "UPDATE job SET updated_at = 1 WHERE id = 'j5' RETURNING *"],
  ["update 50 by id list", `UPDATE job SET updated_at = 2 WHERE id IN (${Array.from({length:50},(_,i)=>`'j${i+100}'`).join(",")})`],
  ["update 50 by subquery", "UPDATE job SET updated_at = 3 WHERE id IN (SELECT id FROM job WHERE ordering_key = 'hot' AND seq IS NOT NULL AND passed_at IS NULL ORDER BY seq LIMIT 50)"],
  ["update 50 status by subquery", "UPDATE job SET status='RUNNING', lease_owner='w', lease_until=5 WHERE id IN (SELECT id FROM job WHERE ordering_key = 'hot' AND seq IS NOT NULL AND passed_at IS NULL ORDER BY seq LIMIT 50) RETURNING *"],
];
for (const [l, s] of tries) show(l, await db.prepare(s).run());
await mf.dispose();
