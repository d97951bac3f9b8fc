// The HTTP edge over a real socket to the local server: the token is checked before the body is
// read, a body is capped whether or not it declares its length, the dashboard's security headers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { request } from "node:http";
import { start, TOKEN } from "./harness.mjs";

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
