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
const N = Number(process.env.N ?? 1000);
const ins = [];
for (let i = 0; i < N; i++) ins.push(db.prepare(q("enqueue")).bind(`j${i}`, "t", "hot", null, "{}", 3, T, T, 5));
await db.batch(ins);
const show = (label, r) => console.log(label.padEnd(40), "w", r.meta.rows_written, "r", r.meta.rows_read, "rows", r.results?.length);
const alt = process.env.ALT ? readFileSync(process.env.ALT, "utf8") : q("claim_next");
for (let round = 0; round < 3; round++) {
  const r = await db.prepare(alt).bind("hot", "w", T + 99999, T, T, "block", 50, null).run();
  show(`claim_next round ${round}`, r);
  const done = [];
  for (const j of r.results) done.push(db.prepare(q("complete")).bind(j.id, "w", T + 1, null, null));
  const out = await db.batch(done);
  show("complete x50 (sum)", { meta: { rows_written: out.reduce((a, x) => a + x.meta.rows_written, 0), rows_read: out.reduce((a, x) => a + x.meta.rows_read, 0) }, results: [] });
}
show("park existing", await db.prepare(q("park")).bind("j999", "t", "hot", null, "{}", 3, T, 5).run());
show("get", await db.prepare(q("get")).bind("j999").run());
show("head", await db.prepare(q("head")).bind("hot", "block").run());
const pe = await db.prepare(q("purge_events")).bind(T + 10, 1000000).run(); show("purge_events (150 DONE)", pe);
const p = await db.prepare(q("purge")).bind(T + 10, 1000000).run(); show("purge (150 DONE)", p);
await mf.dispose();
