// The Grafana dashboard (docs/grafana-dashboard.json) and docs/operations.md's SQL ask Analytics
// Engine only what orderly writes there: each query names the dataset's columns, the outcomes the
// worker writes and functions Analytics Engine has (tests/e2e/analytics-sql.mjs); the dashboard
// imports onto the data source Cloudflare's guide names, and its checker reports each kind of
// mistake it exists to catch.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { ONCE } from "./harness.mjs";
import { dashboardQueries, documentedColumns, outcomes, problems, sqlBlocks } from "./analytics-sql.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const read = (p) => readFileSync(join(root, p), "utf8");

/** The data source "Querying Workers Analytics Engine from Grafana" names
 * (developers.cloudflare.com/analytics/analytics-engine/grafana/). */
const PLUGIN = "vertamedia-clickhouse-datasource";

test("the dashboard imports onto the Analytics Engine data source, every panel and query on it", ONCE, () => {
  const d = JSON.parse(read("docs/grafana-dashboard.json"));
  const [input] = d.__inputs;
  assert.deepEqual([d.__inputs.length, input.type, input.pluginId], [1, "datasource", PLUGIN]);
  // 3.1.1: the first release after 3.0.0 broke queries of Analytics Engine (Altinity/clickhouse-grafana#558).
  assert.deepEqual(d.__requires.filter((r) => r.type === "datasource").map((r) => [r.id, r.version]), [[PLUGIN, "3.1.1"]]);
  const uid = `\${${input.name}}`;
  assert.ok(d.panels.length >= 4);
  for (const p of d.panels) {
    assert.deepEqual(p.datasource, { type: PLUGIN, uid }, p.title);
    assert.ok(d.__requires.some((r) => r.type === "panel" && r.id === p.type), `${p.title}: panel ${p.type} required`);
    assert.ok(p.targets.length >= 1, p.title);
    for (const t of p.targets) {
      assert.deepEqual(t.datasource, { type: PLUGIN, uid }, p.title);
      assert.ok(["time_series", "table"].includes(t.format), p.title);
      // The plugin otherwise rewrites a chart's last point from the two before it (a made-up p95).
      assert.equal(t.extrapolate, false, p.title);
      assert.match(t.query, /\nFROM \$\{dataset:raw\}\n/, `${p.title}: the dataset unquoted`);
      // A time series' first column is the plugin's time: milliseconds, named t.
      if (t.format === "time_series") assert.match(t.query, /^SELECT intDiv\(toUInt32\(timestamp\), \d+\) \* \d+ \* 1000 AS t,/, p.title);
    }
  }
  const vars = d.templating.list.map((v) => [v.name, v.query]);
  assert.deepEqual(vars, [["dataset", "orderly"]], "the dataset is a variable, orderly by default as in docs/operations.md");
});

test("every query of the dashboard and of docs/operations.md reads only what orderly writes", ONCE, () => {
  const queries = [
    ...dashboardQueries(JSON.parse(read("docs/grafana-dashboard.json"))),
    ...sqlBlocks(read("docs/operations.md")).map((q) => ["docs/operations.md", q]),
  ];
  assert.ok(queries.filter(([where]) => where === "docs/operations.md").length >= 2, "the docs' queries found");
  for (const [where, q] of queries) assert.deepEqual(problems(q), [], `${where}:\n${q}`);
  // Every panel that charts time reads the time range Grafana gives it.
  for (const [title, q] of dashboardQueries(JSON.parse(read("docs/grafana-dashboard.json")))) {
    assert.match(q, /timestamp >= toDateTime\(intDiv\(\$__from, 1000\)\) AND timestamp < toDateTime\(intDiv\(\$__to, 1000\)\)/, title);
  }
});

test("the checker knows the columns and outcomes orderly writes, and reports each mistake", ONCE, () => {
  assert.deepEqual(documentedColumns(), ["index1", "blob1", "blob2", "double1", "double2", "double3", "double4"]);
  assert.deepEqual(outcomes(), ["done", "retry", "snooze", "dead", "cancelled", "waited"]);
  const good = "SELECT blob1 AS type, SUM(_sample_interval) AS runs FROM orderly WHERE blob2 = 'done' GROUP BY type";
  assert.deepEqual(problems(good), []);
  const cases = [
    [good.replace("blob1", "blob3"), /blob3: no such column/],
    [good.replace("SUM(", "quantile(0.5)("), /quantile\(\): not a function/],
    [good.replace("'done'", "'failed'"), /no attempt ends 'failed'/],
    [good.replace("FROM orderly", "FROM jobs"), /FROM jobs: not the dataset/],
    [`${good.replace("GROUP", "AND $timeFilter GROUP")}`, /\$timeFilter: a macro or variable nothing expands/],
    [good.replace(" FROM orderly", ""), /no FROM/],
    [good.replace("FROM orderly", "FROM $dataset"), /\$dataset: a macro or variable nothing expands/],
    [good.replace("FROM orderly", "FROM ${dataset:text}"), /nothing expands/],
    [good.replace("blob1 AS type", "blob3 AS blob3"), /blob3: no such column/],
    [good.replace("blob1 AS type", "blob1 AS type, type AS t"), /type: no such column/],
    [good.replace("blob2 = 'done'", "'failed' = blob2"), /no attempt ends 'failed'/],
    [good.replace("blob2 = 'done'", "blob2 IN ('done', 'failed')"), /no attempt ends 'failed'/],
    [good.replace("blob2 = 'done'", "blob2 <> 'failed'"), /no attempt ends 'failed'/],
    [good.replace("blob2 = 'done'", "timestamp > NOW() - INTERVAL 1 DAY"), /INTERVAL 1: .* quoted/],
    [good.replace("GROUP BY type", "GROUP BY type HAVING runs > 1"), /HAVING: no such column/],
    [good.replace("blob2 = 'done'", "timestamp > today()"), /today\(\): not a function/],
  ];
  assert.deepEqual(problems(good.replace("blob2 = 'done'", "timestamp > NOW() - INTERVAL '1' DAY AND blob2 IN ('done', 'dead')")), []);
  assert.deepEqual(problems(good.replace("FROM orderly", "FROM ${dataset:raw}")), []);
  for (const [sql, why] of cases) assert.match(problems(sql).join("\n"), why, sql);
  // A docs table that lost a row is seen: the columns come from the page, not from the checker.
  const page = read("docs/operations.md").replace("| `double2` | run time, ms |\n", "");
  assert.ok(!documentedColumns(page).includes("double2"));
  assert.match(problems("SELECT double2 FROM orderly", { columns: documentedColumns(page), known: outcomes() }).join(), /double2: no such column/);
});
