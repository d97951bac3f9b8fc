// What a query of orderly's Analytics Engine dataset may say, checked without Cloudflare's SQL API
// (nothing local answers it): the columns are the ones docs/operations.md's table says each
// finished attempt writes (observe.test.mjs holds the worker's points to that table), the outcomes
// are the ones the worker names (src/observe.rs, `AttemptEnd::as_str`), and the functions are the ones
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
 * sql-reference/functions/, which says "Function names are case-insensitive", and
 * .../analytics-engine/sql-reference/date-time-functions/), the ones a query here may use;
 * Cloudflare's Grafana guide uses intDiv and toUInt32. Add a function only from those pages. */
export const FUNCTIONS = new Set(
  [
    "count", "sum", "avg", "min", "max", "countIf", "sumIf", "avgIf", "quantileWeighted",
    "quantileExactWeighted", "argMax", "argMin", "topK", "topKWeighted", "intDiv", "toUInt32",
    "toDateTime", "toUnixTimestamp", "toStartOfInterval", "now", "formatDateTime",
  ].map((f) => f.toLowerCase()),
);

/** The SQL words a query here may use: the clauses the queries need (Analytics Engine's SELECT
 * statement page) and the operators its operators page lists (IN, NOT IN, BETWEEN beside
 * =, !=, <>, <, >). A word outside this list and the functions is read as a column, so an
 * unsupported keyword is reported. */
const KEYWORDS = new Set("select from where and or not in between as group by order desc asc limit interval second minute hour day".split(" "));

/** The columns docs/operations.md's table says a data point has, in order of the table
 * (`index1`, `blob1`, ..., `double4`). */
export function documentedColumns(text = read("docs/operations.md")) {
  const section = text.slice(text.indexOf("**Time series: Analytics Engine.**"));
  const table = section.slice(section.indexOf("| field | what |"), section.indexOf("\n\n", section.indexOf("| field | what |")));
  return [...table.matchAll(/`((?:index|blob|double)\d+)`/g)].map((m) => m[1]);
}

/** The outcomes the worker writes as blob2 (src/observe.rs). */
export function outcomes(text = read("src/observe.rs")) {
  return [...text.matchAll(/AttemptEnd::\w+ => "(\w+)"/g)].map((m) => m[1]);
}

/** Grafana's expansion of the variables a dashboard query uses: its time range (`$__from`,
 * `$__to`: numbers, however written) and the `dataset` textbox variable, which must be written
 * `${dataset:raw}`: the Altinity plugin quotes a textbox variable otherwise, and
 * `FROM 'orderly'` names no table. */
export function expand(sql, vars = { __from: "1733529600000", __to: "1733551200000", dataset: "orderly" }) {
  const value = (name, raw) => (raw || name.startsWith("__") ? vars[name] : undefined);
  return sql
    .replace(/\$\{(\w+)(?::(\w+))?\}/g, (whole, name, format) => value(name, format === "raw") ?? whole)
    .replace(/\$(\w+)/g, (whole, name) => value(name, false) ?? whole);
}

/** What is wrong with `sql` as a query of the dataset: a list of sentences, empty when nothing is. */
export function problems(sql, { columns = [...ALWAYS, ...documentedColumns()], known = outcomes(), dataset = "orderly" } = {}) {
  const out = [];
  const text = expand(sql).replace(/--[^\n]*/g, " ");
  for (const m of text.matchAll(/\$\{?[\w:]+\}?/g)) out.push(`${m[0]}: a macro or variable nothing expands (a textbox variable is \${name:raw})`);
  // Every outcome the query compares blob2 with, whichever way round and in a list.
  const compared = [
    ...[...text.matchAll(/\bblob2\s*(?:=|!=|<>)\s*'([^']*)'/g)].map((m) => m[1]),
    ...[...text.matchAll(/'([^']*)'\s*(?:=|!=|<>)\s*blob2\b/g)].map((m) => m[1]),
    ...[...text.matchAll(/\bblob2\s+(?:NOT\s+)?IN\s*\(([^)]*)\)/gi)].flatMap((m) => [...m[1].matchAll(/'([^']*)'/g)].map((v) => v[1])),
  ];
  for (const value of compared) if (!known.includes(value)) out.push(`blob2 compared with '${value}': no attempt ends '${value}' (${known.join(", ")})`);
  for (const m of text.matchAll(/\bINTERVAL\s+(?!')\S+/gi)) out.push(`${m[0]}: Analytics Engine writes an interval's number quoted (INTERVAL '1' DAY)`);
  const code = text.replace(/'[^']*'/g, "''");
  const from = [...code.matchAll(/\bFROM\s+(\w+)/gi)].map((m) => m[1]);
  if (from.length === 0) out.push("no FROM");
  for (const f of from) if (f !== dataset) out.push(`FROM ${f}: not the dataset ${dataset}`);
  // An alias is a name the SELECT list gives (`... AS name`); other clauses may use it.
  const list = /\bSELECT\b([\s\S]*?)\bFROM\b/i.exec(code)?.[1] ?? "";
  const aliases = new Set([...list.matchAll(/\bAS\s+(\w+)/gi)].map((m) => m[1]));
  let selecting = false;
  for (const m of code.matchAll(/[A-Za-z_]\w*/g)) {
    const word = m[0];
    const lower = word.toLowerCase();
    if (lower === "select") selecting = true;
    if (lower === "from") selecting = false;
    if (KEYWORDS.has(lower) || /\bFROM\s+$/i.test(code.slice(0, m.index))) continue;
    // The name an `AS` gives is the alias itself, not a use of one.
    if (selecting && /\bAS\s+$/i.test(code.slice(0, m.index))) continue;
    if (/^\s*\(/.test(code.slice(m.index + word.length))) {
      if (!FUNCTIONS.has(lower)) out.push(`${word}(): not a function Analytics Engine's SQL lists`);
    } else if (!columns.includes(word) && !(aliases.has(word) && !selecting)) {
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
