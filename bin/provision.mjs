#!/usr/bin/env node
// `npx orderly-queues provision` (`npm run provision` here): creates what orderly needs on
// Cloudflare (its queues, the KV namespace and the D1 database named in the Worker's wrangler
// config: wrangler.toml, or the wrangler.jsonc `npm create cloudflare` and the TypeScript template
// make) with wrangler, finding existing ones instead of creating them twice, and writes the KV and
// D1 ids into the config. Says what it did. Run it once per account (again any time: it is
// idempotent); then `npm run deploy`. It ships in the npm package, so any Worker that embeds
// orderly provisions without a clone of this repository.
//
// Usage: node bin/provision.mjs [--config wrangler.jsonc|wrangler.toml]
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";

const args = process.argv.slice(2);
const configAt = args.indexOf("--config");
/** The config: as given, else the first of wrangler.jsonc, wrangler.json and wrangler.toml here. */
const configPath = configAt >= 0 && args[configAt + 1]
  ? args[configAt + 1]
  : (["wrangler.jsonc", "wrangler.json"].find((f) => existsSync(f)) ?? "wrangler.toml");
const jsonConfig = /\.jsonc?$/.test(configPath);
const PLACEHOLDER_KV = /^0+$/;
const PLACEHOLDER_D1 = /^0{8}-0{4}-0{4}-0{4}-0{12}$/;
/** What Cloudflare's ids look like: a KV namespace id is 32 hex digits, a D1 database id a UUID. */
const KV_ID = /^[0-9a-f]{32}$/;
const D1_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** `id` if it has the shape of `what`'s ids and is not a placeholder; else throws. */
export function checkedId(what, id, shape, placeholder) {
  if (typeof id !== "string" || !shape.test(id)) throw new Error(`wrangler answered ${what} id ${JSON.stringify(id)}, which is not one`);
  if (placeholder.test(id)) throw new Error(`wrangler answered a placeholder ${what} id (${id})`);
  return id;
}

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

/** JSON from wrangler output that may have a banner or `[WARNING]` lines before it: the rest of the
 * output from the first line at which it parses. */
export function jsonIn(text) {
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    if (!/^\s*[[{]/.test(lines[i])) continue;
    try {
      return JSON.parse(lines.slice(i).join("\n"));
    } catch {
      // a bracketed banner line such as "[WARNING] ...": try the next line
    }
  }
  throw new Error(`expected JSON from wrangler, got: ${text.trim().slice(0, 200)}`);
}

/** A JSONC text without its comments (outside strings), for JSON.parse. */
export function withoutComments(text) {
  let out = "";
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      const end = /"(?:[^"\\\n]|\\.)*"/y;
      end.lastIndex = i;
      const m = end.exec(text);
      const s = m ? m[0] : text.slice(i);
      out += s;
      i += s.length - 1;
    } else if (c === "/" && text[i + 1] === "/") {
      while (i < text.length && text[i] !== "\n") i++;
      out += "\n";
    } else if (c === "/" && text[i + 1] === "*") {
      const close = text.indexOf("*/", i + 2);
      i = close < 0 ? text.length : close + 1;
    } else {
      out += c;
    }
  }
  // Trailing commas, which JSONC allows.
  return out.replace(/,(\s*[}\]])/g, "$1");
}

/** The resources a wrangler.jsonc names. */
export function resourcesOfJson(text) {
  const c = JSON.parse(withoutComments(text));
  const q = c.queues ?? {};
  const queues = [...new Set([...(q.producers ?? []).map((p) => p.queue), ...(q.consumers ?? []).flatMap((k) => [k.queue, k.dead_letter_queue])].filter(Boolean))];
  const kv = (c.kv_namespaces ?? [])[0];
  const d1 = (c.d1_databases ?? [])[0];
  if (!kv || !d1) throw new Error(`${configPath} lacks a kv_namespaces or d1_databases entry`);
  return { queues, kv: { binding: kv.binding, id: kv.id ?? "" }, d1: { name: d1.database_name, id: d1.database_id ?? "" } };
}

/** The resources wrangler.toml names. */
export function resourcesOf(toml) {
  const queues = [...new Set([...toml.matchAll(/^\s*queue\s*=\s*"([^"]+)"/gm), ...toml.matchAll(/^\s*dead_letter_queue\s*=\s*"([^"]+)"/gm)].map((m) => m[1]))];
  const kv = /\[\[kv_namespaces\]\][^[]*?binding\s*=\s*"([^"]+)"[^[]*?\bid\s*=\s*"([^"]*)"/s.exec(toml);
  const d1 = /\[\[d1_databases\]\][^[]*?database_name\s*=\s*"([^"]+)"[^[]*?database_id\s*=\s*"([^"]*)"/s.exec(toml);
  if (!kv || !d1) throw new Error(`${configPath} lacks a [[kv_namespaces]] or [[d1_databases]] entry`);
  return { queues, kv: { binding: kv[1], id: kv[2] }, d1: { name: d1[1], id: d1[2] } };
}

export function main() {
  let toml = readFileSync(configPath, "utf8");
  const want = jsonConfig ? resourcesOfJson(toml) : resourcesOf(toml);
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
    checkedId("KV namespace", kvId, KV_ID, PLACEHOLDER_KV);
    did.push(`KV namespace ${want.kv.binding}: exists (${kvId})`);
  } else {
    const out = wrangler("kv", "namespace", "create", want.kv.binding);
    kvId = /\bid"?\s*[=:]\s*"([^"\n]*)"/.exec(out)?.[1];
    if (!kvId) throw new Error(`wrangler created the KV namespace but printed no id: ${out.trim()}`);
    checkedId("KV namespace", kvId, KV_ID, PLACEHOLDER_KV);
    did.push(`KV namespace ${want.kv.binding}: created (${kvId})`);
  }

  const dbs = jsonIn(wrangler("d1", "list", "--json"));
  let dbId = dbs.find((d) => d.name === want.d1.name)?.uuid;
  if (dbId) {
    checkedId("D1 database", dbId, D1_ID, PLACEHOLDER_D1);
    did.push(`D1 database ${want.d1.name}: exists (${dbId})`);
  } else {
    const out = wrangler("d1", "create", want.d1.name);
    dbId = /database_id"?\s*[=:]\s*"([^"\n]*)"/.exec(out)?.[1];
    if (!dbId) throw new Error(`wrangler created the D1 database but printed no id: ${out.trim()}`);
    checkedId("D1 database", dbId, D1_ID, PLACEHOLDER_D1);
    did.push(`D1 database ${want.d1.name}: created (${dbId})`);
  }

  // Every id is checked above; the file is written only now, and with function replacements, so
  // no text wrangler printed is read as a replacement pattern.
  const before = toml;
  if (jsonConfig) {
    toml = toml.replace(/("kv_namespaces"[\s\S]*?"id"\s*:\s*")([^"]*)(")/, (_, a, _old, c) => a + kvId + c);
    toml = toml.replace(/("d1_databases"[\s\S]*?"database_id"\s*:\s*")([^"]*)(")/, (_, a, _old, c) => a + dbId + c);
  } else {
    toml = toml.replace(/(\[\[kv_namespaces\]\][^[]*?\bid\s*=\s*")([^"]*)(")/s, (_, a, _old, c) => a + kvId + c);
    toml = toml.replace(/(\[\[d1_databases\]\][^[]*?database_id\s*=\s*")([^"]*)(")/s, (_, a, _old, c) => a + dbId + c);
  }
  // The placeholders' "replace with ..." hints are done with.
  toml = toml.replace(/(id = "[0-9a-f]{32}")\s*#.*$/m, (_, a) => a).replace(/(database_id = "[0-9a-f-]{36}")\s*#.*$/m, (_, a) => a);
  if (toml !== before) {
    writeFileSync(configPath, toml);
    did.push(`${configPath}: ids written`);
  } else {
    did.push(`${configPath}: ids already current`);
  }
  for (const line of did) console.log(`orderly provision: ${line}`);
  console.log("orderly provision: done; next: `npm run deploy` (migrations, then the worker)");
}

/** Runs `main`, stopping with the reason (and the likely cause) when it fails. */
export function run() {
  try {
    main();
  } catch (e) {
    console.error(`orderly provision failed: ${e.message}`);
    console.error("Is wrangler logged in (`npx wrangler login`, or CLOUDFLARE_API_TOKEN set)?");
    process.exit(1);
  }
}

if (import.meta.url === `file://${process.argv[1]}`) run();
