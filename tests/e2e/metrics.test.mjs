// GET /metrics (design §27) end to end, on D1 and on four Durable Object shards: the built worker
// answers the ledger's state in the Prometheus text format, read here by a Prometheus text parser
// (parse-prometheus-text-format), not by patterns: jobs by status and type, the oldest due job,
// paused keys, limit keys (named by a hash keyed with KEY_HASH_SECRET), schedules; admin only.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import parse from "parse-prometheus-text-format";
import { start, webhook, waitFor, TOKEN } from "./harness.mjs";

/** A key as a label names it: an HMAC-SHA-256 under KEY_HASH_SECRET, its first 8 bytes in hex. */
const KEY_HASH_SECRET = "a-secret-only-the-worker-holds";
const hashed = (key) => "hmac:" + createHmac("sha256", KEY_HASH_SECRET).update(key).digest("hex").slice(0, 16);

const SCHEDULES = JSON.stringify([{ name: "hourly", cron: "0 * * * *", job: { payload: webhook("/ok/hourly") } }]);

test("GET /metrics answers the ledger's state as Prometheus gauges a scraper parses", async () => {
  const w = await start({ vars: { ORDERING_MODE: "strict", SCHEDULES, KEY_HASH_SECRET } });
  try {
    // A paused key's job waits; a paused limit key shows as paused.
    assert.equal((await w.api("PUT", "/keys/paused-key", { paused: true })).status, 200);
    assert.equal((await w.api("PUT", "/limits/host-1", { paused: true })).status, 200);
    const r = await w.api("POST", "/jobs", { jobs: [
      { id: "ok", payload: webhook("/ok/one"), ordering_key: "k" },
      { id: "dead", payload: webhook("/status/410/dead") },
      { id: "later", payload: webhook("/ok/later"), delay_seconds: 3600 },
      { id: "held", payload: webhook("/ok/held"), ordering_key: "paused-key" },
    ] });
    assert.equal(r.status, 202, r.text);
    await waitFor(async () => (await w.job("ok"))?.status === "DONE" && (await w.job("dead"))?.status === "DEAD", "ok DONE, dead DEAD");

    const res = await w.mf.dispatchFetch(`${w.url}metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-type"), "text/plain; version=0.0.4; charset=utf-8");
    const text = await res.text();
    const families = Object.fromEntries(parse(text).map((f) => [f.name, f]));
    const value = (name, labels = {}) => {
      const family = families[name];
      assert.ok(family, `${name} exposed: ${Object.keys(families)}`);
      assert.equal(family.type, "GAUGE");
      const m = family.metrics.find((s) => Object.entries(labels).every(([k, v]) => s.labels?.[k] === v));
      return m === undefined ? undefined : Number(m.value);
    };
    assert.equal(value("orderly_jobs", { status: "DONE" }), 1);
    assert.equal(value("orderly_jobs", { status: "DEAD" }), 1);
    const pending = value("orderly_jobs", { status: "PENDING" });
    assert.ok(pending === 2, `later and held PENDING: ${pending}`);
    assert.equal(value("orderly_jobs_by_type", { status: "DEAD", type: "webhook" }), 1);
    assert.equal(value("orderly_jobs_by_type", { status: "PENDING", type: "webhook" }), 2);
    assert.ok(value("orderly_oldest_due_job_age_seconds") >= 0);
    assert.equal(value("orderly_keys", { state: "paused" }), 1);
    // Keys are labelled as spans name them: hashed under the worker's secret, never in plain.
    assert.equal(value("orderly_paused_key_waiting_jobs", { ordering_key: hashed("paused-key") }), 1);
    assert.equal(value("orderly_limit_paused", { limit_key: hashed("host-1") }), 1);
    assert.ok(!text.includes("paused-key") && !text.includes("host-1"), text);
    const next = value("orderly_schedule_next_period_seconds", { schedule: "hourly" });
    assert.ok(next > Date.now() / 1000 && next <= Date.now() / 1000 + 3600 && next % 3600 === 0, `the next hour: ${next}`);

    // Admin only.
    assert.equal((await w.mf.dispatchFetch(`${w.url}metrics`)).status, 401);
  } finally {
    await w.dispose();
  }
});
