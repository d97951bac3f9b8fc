// The HTTP edge over a real socket to the local server: the token is checked before the body is
// read, a body is capped whether or not it declares its length, the dashboard's security headers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { request } from "node:http";
import { start, webhook, waitFor, TOKEN } from "./harness.mjs";

/** Sends a chunked POST, writing `chunks` (strings) without a declared length; `end` ends it. */
function chunked(url, headers, chunks, end) {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: "POST", headers: { ...headers, "transfer-encoding": "chunked" } }, (res) => {
      let body = "";
      res.on("data", (d) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode, body }));
    });
    req.on("error", reject);
    for (const c of chunks) req.write(c);
    if (end) req.end();
    else setTimeout(() => { req.destroy(); reject(new Error("no answer while the body was still open")); }, 10_000);
  });
}

test("an unauthenticated body is refused before it is read", async () => {
  const w = await start();
  try {
    // The body never ends: a worker that read it before checking the token would never answer.
    const r = await chunked(new URL("/jobs", w.url), { "content-type": "application/json" }, ['{"payload": '], false);
    assert.equal(r.status, 401);
  } finally {
    await w.dispose();
  }
});

test("a streamed body over the cap is refused with 413 though it declares no length", async () => {
  const w = await start();
  try {
    const mib = "x".repeat(64 * 1024);
    const chunks = ['{"payload": {"type": "webhook", "url": "http://target.test/ok/big", "body": "', ...Array(17).fill(mib), '"}}'];
    const r = await chunked(new URL("/jobs", w.url), { authorization: `bearer ${TOKEN}`, "content-type": "application/json" }, chunks, true);
    assert.equal(r.status, 413, r.body);
    assert.equal((await w.counts()).PENDING, 0);
  } finally {
    await w.dispose();
  }
});

test("the dashboard is served with a strict content security policy", async () => {
  const w = await start();
  try {
    const res = await fetch(new URL("/", w.url));
    assert.equal(res.status, 200);
    const csp = res.headers.get("content-security-policy");
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'sha256-[A-Za-z0-9+/=]+'/);
    assert.match(csp, /frame-ancestors 'none'/);
    assert.doesNotMatch(csp, /unsafe-inline/);
    assert.equal(res.headers.get("x-content-type-options"), "nosniff");
    const api = await fetch(new URL("/jobs/counts", w.url), { headers: { authorization: `BEARER ${TOKEN}` } });
    assert.equal(api.status, 200, "the scheme is case-insensitive");
    assert.equal(api.headers.get("x-content-type-options"), "nosniff");
  } finally {
    await w.dispose();
  }
});

test("a job that fits a queue message is delivered, one that does not is refused at submission", async () => {
  const w = await start();
  try {
    // The message is the envelope around this payload: aim just under Cloudflare's 128,000 bytes.
    const fits = await w.api("POST", "/jobs", { payload: webhook("/ok/near-limit", { pad: "x".repeat(127_200) }) });
    assert.equal(fits.status, 202, fits.text);
    const id = fits.json.jobs[0].id;
    await waitFor(async () => (await w.job(id))?.status === "DONE", "the near-limit job DONE");
    const over = await w.api("POST", "/jobs", { payload: webhook("/ok/over-limit", { pad: "x".repeat(128_000) }) });
    assert.equal(over.status, 413);
    assert.match(over.json.error, /128,000/);
  } finally {
    await w.dispose();
  }
});

test("a poisonous v8 body is recorded DEAD and its batch-mates run", async () => {
  const w = await start();
  try {
    const sparse = [];
    sparse[3_000_000] = 1; // a few bytes as v8, megabytes of nulls as JSON
    await w.queue.sendBatch([
      { body: sparse, contentType: "v8" },
      { body: { ...webhook("/ok/mate"), __orderly_job__: { id: "mate" } } },
    ]);
    await waitFor(async () => (await w.job("mate"))?.status === "DONE", "the batch-mate DONE");
    const dead = await w.db.prepare("SELECT * FROM job WHERE status = 'DEAD'").all();
    assert.equal(dead.results.length, 1);
    assert.match(dead.results[0].last_error, /over the 256000-byte limit/);
    assert.equal(dead.results[0].payload, null);
  } finally {
    await w.dispose();
  }
});

test("a webhook body arrives exactly as submitted: big integers, 1.0 and key order", async () => {
  const w = await start();
  try {
    const body = '{"z":9007199254740993,"a":1.0,"1":"one","n":[0.10,-0]}';
    const r = await w.api("POST", "/jobs", `{"payload": {"type": "webhook", "url": "http://target.test/ok/exact", "body": ${body}}}`);
    assert.equal(r.status, 202, r.text);
    await waitFor(() => w.target.to("/ok/exact").length === 1, "the delivery");
    assert.equal(w.target.to("/ok/exact")[0].body, body);
    const row = await w.job(r.json.jobs[0].id);
    assert.ok(row.payload.includes(body), row.payload);
  } finally {
    await w.dispose();
  }
});
