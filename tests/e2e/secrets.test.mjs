// Secrets at rest through the real worker under miniflare: a sensitive job's payload and result
// are sealed in D1 by WebCrypto's AES-256-GCM under PAYLOAD_KEY (opened here with Node's own
// WebCrypto: the format is the one src/seal.rs documents), the API shows "redacted", the webhook
// receives the plain body, and no log line carries the secret.
import { test } from "node:test";
import assert from "node:assert/strict";
import { webcrypto } from "node:crypto";
import { start, webhook, waitFor } from "./harness.mjs";

const KEY = Buffer.alloc(32, 7);
const PAYLOAD_KEY = `2026-12:${KEY.toString("base64")}`;
const SECRET = "d=hunter2-private-jwk";

/** Opens `sealed:v1:<kid>:<base64url(nonce ‖ ciphertext ‖ tag)>` sealed for `jobId`. */
async function open(sealed, jobId) {
  const [, , kid, b64] = sealed.split(":");
  assert.equal(kid, "2026-12");
  const body = Buffer.from(b64, "base64url");
  const key = await webcrypto.subtle.importKey("raw", KEY, { name: "AES-GCM" }, false, ["decrypt"]);
  const plain = await webcrypto.subtle.decrypt({ name: "AES-GCM", iv: body.subarray(0, 12), additionalData: Buffer.from(jobId) }, key, body.subarray(12));
  return Buffer.from(plain).toString("utf8");
}

test("a sensitive job is sealed at rest, redacted in the API, and delivered in plain", async () => {
  const w = await start({ vars: { PAYLOAD_KEY } });
  try {
    const payload = webhook("/echo/sealed", { jwk: SECRET });
    const r = await w.api("POST", "/jobs", { payload, sensitive: true, ordering_key: "acct" });
    assert.equal(r.status, 202, r.text);
    const id = r.json.jobs[0].id;
    await waitFor(async () => (await w.job(id))?.status === "DONE", "DONE");
    assert.deepEqual(JSON.parse(w.target.to("/echo/sealed")[0].body), { jwk: SECRET }, "the receiver gets the plain body");

    const row = await w.job(id);
    for (const col of ["payload", "result"]) {
      assert.match(row[col], /^sealed:v1:2026-12:/);
      assert.ok(!row[col].includes("hunter2"), `${col} is sealed`);
    }
    assert.deepEqual(JSON.parse(await open(row.payload, id)), payload);
    assert.equal(JSON.parse(await open(row.result, id)).status, 200);
    const dump = JSON.stringify((await w.db.prepare("SELECT * FROM job").all()).results) +
      JSON.stringify((await w.db.prepare("SELECT * FROM job_event").all()).results);
    assert.ok(!dump.includes("hunter2"), "nothing in D1 holds the secret in plain");

    const shown = (await w.api("GET", `/jobs/${id}`)).json.job;
    assert.deepEqual([shown.payload, shown.result], ["redacted", "redacted"]);
    assert.ok(!w.logs.some((l) => l.message.includes("hunter2")), "no log line carries it");
  } finally {
    await w.dispose();
  }
});

test("without PAYLOAD_KEY a sensitive job is refused, naming the secret; a malformed key is a configuration error", async () => {
  const w = await start();
  try {
    const r = await w.api("POST", "/jobs", { payload: webhook("/ok/x"), sensitive: true });
    assert.equal(r.status, 400);
    assert.match(r.json.error, /PAYLOAD_KEY/);
  } finally {
    await w.dispose();
  }
  const bad = await start({ vars: { PAYLOAD_KEY: "k:too-short" } });
  try {
    const r = await bad.api("GET", "/jobs/counts");
    assert.equal(r.status, 500);
    assert.match(r.json.error, /PAYLOAD_KEY/);
  } finally {
    await bad.dispose();
  }
});
