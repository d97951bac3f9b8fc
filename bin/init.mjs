// `npx orderly-queues init`: adds orderly's bindings to an existing Worker's wrangler.jsonc (the
// format `npm create cloudflare` makes): the jobs queue and its consumer, the dead-letter queue,
// the KV namespace, the D1 ledger with its migrations from this package, a cron for maintenance,
// and orderly's vars. Whatever the config already has stays as it is, comments included, and
// running it again adds nothing. For local development it writes a local ADMIN_TOKEN into `.dev.vars`
// (beside the config; never over a token already there), as `new` does. Then `npx orderly-queues
// dev` runs it locally, and `npx orderly-queues provision` creates its resources on Cloudflare.
import { randomBytes } from "node:crypto";
import { appendFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { applyEdits, modify, parse } from "jsonc-parser";


/** `text` (a wrangler.jsonc) with orderly's bindings added where missing; and what was added. */
export function withOrderly(text) {
  const errors = [];
  const config = parse(text, errors, { allowTrailingComma: true });
  if (errors.length > 0 || config === null || typeof config !== "object") {
    throw new Error("the config is not JSON with comments as wrangler reads it");
  }
  if (typeof config.name !== "string" || config.name === "") throw new Error('the config names no Worker ("name")');
  const jobs = `${config.name}-jobs`;
  const dlq = `${config.name}-dlq`;
  const added = [];
  let out = text;
  // Indented as the file is: tabs (as `npm create cloudflare` writes it) or spaces.
  const format = { formattingOptions: { insertSpaces: !/^\t/m.test(text), tabSize: 2 } };
  const set = (path, value, what) => {
    out = applyEdits(out, modify(out, path, value, format));
    added.push(what);
  };
  const producers = config.queues?.producers ?? [];
  if (!producers.some((p) => p.binding === "JOBS")) {
    set(["queues", "producers", producers.length], { binding: "JOBS", queue: jobs }, `the queue producer JOBS (${jobs})`);
  }
  const consumers = config.queues?.consumers ?? [];
  const queueOf = producers.find((p) => p.binding === "JOBS")?.queue ?? jobs;
  if (!consumers.some((c) => c.queue === queueOf)) {
    const consumer = { queue: queueOf, max_batch_size: 100, max_batch_timeout: 1, max_retries: 100, dead_letter_queue: dlq };
    set(["queues", "consumers", consumers.length], consumer, `its consumer, dead letters to ${dlq}`);
  }
  const dead = (config.queues?.consumers ?? []).find((c) => c.queue === queueOf)?.dead_letter_queue ?? dlq;
  if (!consumers.some((c) => c.queue === dead)) {
    const at = parse(out, [], { allowTrailingComma: true }).queues.consumers.length;
    set(["queues", "consumers", at], { queue: dead, max_batch_size: 100, max_batch_timeout: 1, max_retries: 10 }, `the dead-letter consumer (${dead})`);
  }
  const kv = config.kv_namespaces ?? [];
  if (!kv.some((k) => k.binding === "ORDERING_KV")) {
    set(["kv_namespaces", kv.length], { binding: "ORDERING_KV", id: "0".repeat(32) }, "the KV namespace ORDERING_KV");
  }
  const d1 = config.d1_databases ?? [];
  if (!d1.some((d) => d.binding === "DB")) {
    const db = {
      binding: "DB",
      database_name: config.name,
      database_id: "00000000-0000-0000-0000-000000000000",
      migrations_dir: "node_modules/orderly-queues/migrations",
    };
    set(["d1_databases", d1.length], db, `the D1 ledger DB (${config.name}), its migrations from orderly-queues`);
  }
  if (!(config.triggers?.crons ?? []).length) set(["triggers", "crons"], ["* * * * *"], "a cron a minute (orderly's maintenance)");
  const vars = config.vars ?? {};
  const want = { ORDERING_MODE: "strict", JOBS_QUEUE: queueOf, DEAD_LETTER_QUEUE: dead };
  for (const [k, v] of Object.entries(want)) {
    if (!(k in vars)) set(["vars", k], v, `the var ${k} = ${JSON.stringify(v)}`);
  }
  return { text: out, added };
}

/** Runs `init` on the config here (or `--config F`): edits it, says what it did and what is next. */
export function run(args) {
  const at = args.indexOf("--config");
  const path = at >= 0 && args[at + 1] ? args[at + 1] : ["wrangler.jsonc", "wrangler.json"].find((f) => existsSync(f));
  if (!path || !/\.jsonc?$/.test(path)) {
    console.error("orderly init edits a wrangler.jsonc (or wrangler.json): none here. For a wrangler.toml, the lines to add are in orderly's docs/getting-started.md.");
    process.exit(1);
  }
  let result;
  try {
    result = withOrderly(readFileSync(path, "utf8"));
  } catch (e) {
    console.error(`orderly init: ${path}: ${e.message}`);
    process.exit(1);
  }
  if (result.added.length === 0) {
    console.log(`orderly init: ${path} has orderly's bindings already`);
  } else {
    writeFileSync(path, result.text);
    for (const what of result.added) console.log(`orderly init: ${path}: added ${what}`);
  }
  // A local admin token for the API and dashboard under `wrangler dev` (wrangler reads .dev.vars).
  const devVars = join(dirname(path), ".dev.vars");
  const vars = existsSync(devVars) ? readFileSync(devVars, "utf8") : "";
  if (/^ADMIN_TOKEN=/m.test(vars)) {
    console.log(`orderly init: ${devVars} has an ADMIN_TOKEN already`);
  } else {
    appendFileSync(devVars, `${vars && !vars.endsWith("\n") ? "\n" : ""}ADMIN_TOKEN=${randomBytes(16).toString("hex")}\n`);
    console.log(`orderly init: ${devVars}: added a local ADMIN_TOKEN (for wrangler dev only; keep .dev.vars out of git)`);
  }
  console.log(`Next:
  - your main module: export default orderly({ handlers: { ... } }) from "orderly-queues/worker"
    (and export { OrderlyLedger } from it for LEDGER = "do"); orderly's API and dashboard are then
    under /orderly
  - npx orderly-queues dev         # locally: the ledger migrated (wrangler d1 migrations apply DB --local),
                                   # wrangler dev, and the cron every minute; the token is in .dev.vars
  - npx orderly-queues provision   # the queues, KV and D1 on your account, their ids into ${path}
  - npx wrangler secret put ADMIN_TOKEN   # the deployed Worker's own token`);
}
