// What a query of orderly's Analytics Engine dataset may say, checked without Cloudflare's SQL API
// (nothing local answers it): the columns are the ones docs/operations.md's table says each
// finished attempt writes (observe.test.mjs holds the worker's points to that table), the outcomes
// are the ones the worker names (src/observe.rs, `Ran::as_str`), and the functions are the ones
// Analytics Engine's SQL reference lists. Grafana's `$__from`/`$__to` and the dashboard's
// `$dataset` are expanded first, as Grafana does before the data source sends the query.
import { readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const read = (p) => readFileSync(join(root, p), "utf8");

/** The dataset's columns besides the written ones: the write's time and Analytics Engine's
 * sampling weight (developers.cloudflare.com/analytics/analytics-engine/sql-api/). */
const ALWAYS = ["timestamp", "_sample_interval", "dataset"];

/** Functions Analytics Engine's SQL reference lists (developers.cloudflare.com/analytics/sql-api/
 * sql-reference/functions/ and .../analytics-engine/sql-reference/date-time-functions/), the
 * ones a query here may use; Cloudflare's Grafana guide uses intDiv and toUInt32. Lower case:
 * AE's function names are case-insensitive. */
export const FUNCTIONS = new Set(
  [
    "count", "sum", "avg", "min", "max", "countIf", "sumIf", "avgIf", "quantileWeighted",
    "quantileExactWeighted", "argMax", "argMin", "topK", "topKWeighted", "if", "intDiv",
    "toUInt32", "toDateTime", "toUnixTimestamp", "toStartOfInterval", "now", "today", "formatDateTime",
  ].map((f) => f.toLowerCase()),
);

const KEYWORDS = new Set(
  "select from where and or not as group by order desc asc limit interval second minute hour day week month having in is null case when then else end distinct"
    .split(" "),
);

/** The columns docs/operations.md's table says a data point has, in order of the table
 * (`index1`, `blob1`, ..., `double4`). */
export function documentedColumns(text = read("docs/operations.md")) {
  const section = text.slice(text.indexOf("**Time series: Analytics Engine.**"));
  const table = section.slice(section.indexOf("| field | what |"), section.indexOf("\n\n", section.indexOf("| field | what |")));
  return [...table.matchAll(/`((?:index|blob|double)\d+)`/g)].map((m) => m[1]);
}

/** The outcomes the worker writes as blob2 (src/observe.rs). */
export function outcomes(text = read("src/observe.rs")) {
  return [...text.matchAll(/Ran::\w+ => "(\w+)"/g)].map((m) => m[1]);
}

/** Grafana's expansion of the variables a dashboard query uses. */
export function expand(sql, vars = { __from: "1733529600000", __to: "1733551200000", dataset: "orderly" }) {
  return sql.replace(/\$(\w+)/g, (whole, name) => vars[name] ?? whole);
}

/** What is wrong with `sql` as a query of the dataset: a list of sentences, empty when nothing is. */
export function problems(sql, { columns = [...ALWAYS, ...documentedColumns()], known = outcomes(), dataset = "orderly" } = {}) {
  const out = [];
  const text = expand(sql).replace(/--[^\n]*/g, " ");
  for (const m of text.matchAll(/\$\w+/g)) out.push(`${m[0]}: a macro or variable nothing expands`);
  for (const [, op, value] of text.matchAll(/\bblob2\s*(=|!=)\s*'([^']*)'/g)) {
    if (!known.includes(value)) out.push(`blob2 ${op} '${value}': no attempt ends '${value}' (${known.join(", ")})`);
  }
  const code = text.replace(/'[^']*'/g, "''");
  const from = [...code.matchAll(/\bFROM\s+(\w+)/gi)].map((m) => m[1]);
  if (from.length === 0) out.push("no FROM");
  for (const f of from) if (f !== dataset) out.push(`FROM ${f}: not the dataset ${dataset}`);
  const aliases = new Set([...code.matchAll(/\bAS\s+(\w+)/gi)].map((m) => m[1]));
  for (const m of code.matchAll(/[A-Za-z_]\w*/g)) {
    const word = m[0];
    const after = code.slice(m.index + word.length);
    if (KEYWORDS.has(word.toLowerCase()) || /\bFROM\s+$/i.test(code.slice(0, m.index))) continue;
    if (/^\s*\(/.test(after)) {
      if (!FUNCTIONS.has(word.toLowerCase())) out.push(`${word}(): not a function Analytics Engine's SQL lists`);
    } else if (!aliases.has(word) && !columns.includes(word)) {
      out.push(`${word}: no such column (${columns.join(", ")})`);
    }
  }
  return out;
}

/** The queries of a Grafana dashboard: `[panel title, query]` pairs. */
export function dashboardQueries(dashboard) {
  return dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => [p.title, t.query]));
}

/** The SQL blocks of a markdown text that read the dataset. */
export function sqlBlocks(text, dataset = "orderly") {
  return [...text.matchAll(/```sql\n([\s\S]*?)```/g)]
    .map((m) => m[1])
    .filter((b) => new RegExp(`\\bFROM\\s+${dataset}\\b`).test(b))
    .flatMap((b) => b.split(/;\s*\n/).map((q) => q.trim()).filter((q) => /\bSELECT\b/i.test(q)));
}
