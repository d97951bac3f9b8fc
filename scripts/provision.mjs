#!/usr/bin/env node
// `npm run provision`: creates what orderly needs on Cloudflare (its queues, the KV namespace
// and the D1 database named in wrangler.toml) with wrangler, finding existing ones instead of
// creating them twice, and writes the KV and D1 ids into wrangler.toml. Says what it did.
// Run it once per account (again any time: it is idempotent); then `npm run deploy`.
//
// Usage: node scripts/provision.mjs [--config wrangler.toml]
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";

const args = process.argv.slice(2);
const configAt = args.indexOf("--config");
const configPath = configAt >= 0 && args[configAt + 1] ? args[configAt + 1] : "wrangler.toml";
const PLACEHOLDER_KV = /^0+$/;
const PLACEHOLDER_D1 = /^0{8}-0{4}-0{4}-0{4}-0{12}$/;

/** Runs wrangler; its stdout, or throws with what it said. */
function wrangler(...argv) {
  const r = spawnSync("wrangler", argv, { encoding: "utf8", env: { ...process.env, WRANGLER_SEND_METRICS: "false" } });
  if (r.error) throw new Error(`could not run wrangler: ${r.error.message}`);
  if (r.status !== 0) {
    const e = new Error(`wrangler ${argv.join(" ")} failed (exit ${r.status}): ${(r.stderr || r.stdout).trim()}`);
    e.output = `${r.stdout}\n${r.stderr}`;
    throw e;
  }
  return r.stdout;
}

/** JSON from wrangler output that may have a banner before it. */
function jsonIn(text) {
  const start = text.search(/[[{]/);
  if (start < 0) throw new Error(`expected JSON from wrangler, got: ${text.trim().slice(0, 200)}`);
  return JSON.parse(text.slice(start));
}

/** The resources wrangler.toml names. */
export function resourcesOf(toml) {
  const queues = [...new Set([...toml.matchAll(/^\s*queue\s*=\s*"([^"]+)"/gm), ...toml.matchAll(/^\s*dead_letter_queue\s*=\s*"([^"]+)"/gm)].map((m) => m[1]))];
  const kv = /\[\[kv_namespaces\]\][^[]*?binding\s*=\s*"([^"]+)"[^[]*?\bid\s*=\s*"([^"]*)"/s.exec(toml);
  const d1 = /\[\[d1_databases\]\][^[]*?database_name\s*=\s*"([^"]+)"[^[]*?database_id\s*=\s*"([^"]*)"/s.exec(toml);
  if (!kv || !d1) throw new Error(`${configPath} lacks a [[kv_namespaces]] or [[d1_databases]] entry`);
  return { queues, kv: { binding: kv[1], id: kv[2] }, d1: { name: d1[1], id: d1[2] } };
}

function main() {
  let toml = readFileSync(configPath, "utf8");
  const want = resourcesOf(toml);
  const did = [];

  for (const q of want.queues) {
    try {
      wrangler("queues", "info", q);
      did.push(`queue ${q}: exists`);
    } catch (e) {
      if (!/not exist|not found|10007|11000/i.test(e.output ?? "")) throw e;
      wrangler("queues", "create", q);
      did.push(`queue ${q}: created`);
    }
  }

  const namespaces = jsonIn(wrangler("kv", "namespace", "list"));
  // Titles wrangler has given this binding's namespace: the binding itself, or worker-binding.
  const titles = [want.kv.binding, `orderly-${want.kv.binding}`];
  let kvId = namespaces.find((n) => titles.includes(n.title))?.id;
  if (kvId) {
    did.push(`KV namespace ${want.kv.binding}: exists (${kvId})`);
  } else {
    const out = wrangler("kv", "namespace", "create", want.kv.binding);
    kvId = /\bid"?\s*[=:]\s*"([0-9a-f]{32})"/.exec(out)?.[1];
    if (!kvId) throw new Error(`wrangler created the KV namespace but printed no id: ${out.trim()}`);
    did.push(`KV namespace ${want.kv.binding}: created (${kvId})`);
  }

  const dbs = jsonIn(wrangler("d1", "list", "--json"));
  let dbId = dbs.find((d) => d.name === want.d1.name)?.uuid;
  if (dbId) {
    did.push(`D1 database ${want.d1.name}: exists (${dbId})`);
  } else {
    const out = wrangler("d1", "create", want.d1.name);
    dbId = /database_id"?\s*[=:]\s*"([0-9a-f-]{36})"/.exec(out)?.[1];
    if (!dbId) throw new Error(`wrangler created the D1 database but printed no id: ${out.trim()}`);
    did.push(`D1 database ${want.d1.name}: created (${dbId})`);
  }

  const before = toml;
  toml = toml.replace(/(\[\[kv_namespaces\]\][^[]*?\bid\s*=\s*")([^"]*)(")/s, `$1${kvId}$3`);
  toml = toml.replace(/(\[\[d1_databases\]\][^[]*?database_id\s*=\s*")([^"]*)(")/s, `$1${dbId}$3`);
  // The placeholders' "replace with ..." hints are done with.
  toml = toml.replace(/(id = "[0-9a-f]{32}")\s*#.*$/m, "$1").replace(/(database_id = "[0-9a-f-]{36}")\s*#.*$/m, "$1");
  if (toml !== before) {
    writeFileSync(configPath, toml);
    did.push(`${configPath}: ids written`);
  } else {
    did.push(`${configPath}: ids already current`);
  }
  for (const line of did) console.log(`orderly provision: ${line}`);
  if (PLACEHOLDER_KV.test(kvId) || PLACEHOLDER_D1.test(dbId)) throw new Error("wrangler answered placeholder ids");
  console.log("orderly provision: done; next: `npm run deploy` (migrations, then the worker)");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  try {
    main();
  } catch (e) {
    console.error(`orderly provision failed: ${e.message}`);
    console.error("Is wrangler logged in (`npx wrangler login`, or CLOUDFLARE_API_TOKEN set)?");
    process.exit(1);
  }
}
