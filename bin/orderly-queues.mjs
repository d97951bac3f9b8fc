#!/usr/bin/env node
// `npx orderly-queues new <dir>`: a new worker on orderly from the package's template (one job type
// in TypeScript, on the compiled orderly this package ships: no Rust toolchain; or with `--rust`, a
// Rust worker on the crate), with orderly's bindings, `npm start` and `npm run deploy`, its name
// taken from the folder's, on the same orderly release as this package, with a local ADMIN_TOKEN
// in `.dev.vars`. `npx orderly-queues init`: orderly's bindings added to an existing Worker's
// wrangler.jsonc (bin/init.mjs). `npx orderly-queues provision`: the Worker's queues, KV and D1 on Cloudflare
// (bin/provision.mjs). `npx orderly-queues dev`: local development that runs what production runs,
// the cron included (bin/dev.mjs). `npx orderly-queues migrations`: where the ledger's migrations
// are (for a wrangler config's `migrations_dir`).
import { randomBytes } from "node:crypto";
import { cpSync, existsSync, readFileSync, readdirSync, renameSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(dirname(fileURLToPath(import.meta.url)));
const manifest = JSON.parse(readFileSync(join(here, "package.json"), "utf8"));
const { version } = manifest;
/** The Fedify release this orderly is tested with: the Fedify starter pins it, @fedify/vocab alike. */
const fedify = manifest.devDependencies?.["@fedify/fedify"] ?? "^2.3.6";

function usage(code) {
  console.error(`orderly-queues ${version}

  npx orderly-queues new <dir>           a new worker on orderly in <dir> (which must not exist or be
                                         empty), its job handlers in TypeScript
  npx orderly-queues new <dir> --rust    the same in Rust (needs Rust and worker-build)
  npx orderly-queues new <dir> --fedify  a Fedify server with orderly as its queue, in one Worker:
                                         an actor, its inbox, notes sent to its followers in order
  npx orderly-queues dev [options]       local development: the local ledger migrated, wrangler dev
                                         started (options passed on), and the Worker's cron fired
                                         every minute, as Cloudflare does
  npx orderly-queues init [--config F]        orderly's bindings added to this Worker's wrangler.jsonc
  npx orderly-queues provision [--config F]   the queues, KV namespace and D1 database the Worker's
                                         wrangler config names, created (or found) and their ids
                                         written into it
  npx orderly-queues migrations          the folder of the ledger's migrations`);
  process.exit(code);
}

/** Every file under `dir`, depth first. */
function files(dir) {
  return readdirSync(dir).flatMap((f) => (statSync(join(dir, f)).isDirectory() ? files(join(dir, f)) : [join(dir, f)]));
}

function create(dir, kind) {
  const target = resolve(dir);
  if (existsSync(target) && readdirSync(target).length > 0) {
    console.error(`${target} is not empty: choose a new folder`);
    process.exit(1);
  }
  const name = basename(target).toLowerCase().replace(/[^a-z0-9-]+/g, "-").replace(/^-+|-+$/g, "");
  if (!/^[a-z][a-z0-9-]{0,62}$/.test(name)) {
    console.error(`${basename(target)}: a worker's name starts with a letter and has letters, digits and dashes`);
    process.exit(1);
  }
  cpSync(join(here, { rust: "template", fedify: "template-fedify", ts: "template-ts" }[kind]), target, { recursive: true });
  // npm leaves a package's .gitignore out; the template keeps it as `gitignore`.
  renameSync(join(target, "gitignore"), join(target, ".gitignore"));
  for (const f of files(target)) {
    const text = readFileSync(f, "utf8").replaceAll("{{name}}", name).replaceAll("{{version}}", version);
    writeFileSync(f, text.replaceAll("{{fedify}}", fedify));
  }
  // Local secrets for wrangler dev, never for production. A Fedify server's queued messages carry
  // its private keys: orderly seals them under PAYLOAD_KEY; its queue submits with PRODUCER_TOKEN;
  // it reaches private addresses only when told to (ALLOW_PRIVATE_ADDRESS): a dev server reached
  // through a tunnel would otherwise let any remote actor make it call this machine and its LAN,
  // and `wrangler secret bulk .dev.vars` would carry it to production.
  const secret = () => randomBytes(16).toString("hex");
  const local = kind === "fedify"
    ? `ADMIN_TOKEN=${secret()}\nPRODUCER_TOKEN=${secret()}\nPAYLOAD_KEY=local:${randomBytes(32).toString("base64")}\n` +
      "# true: Fedify may reach servers on this machine and your LAN, and deliver to plain-http inboxes,\n" +
      "# to federate with a server you run locally. Never in production.\nALLOW_PRIVATE_ADDRESS=false\n"
    : `ADMIN_TOKEN=${secret()}\n`;
  writeFileSync(join(target, ".dev.vars"), local);
  // A TypeScript worker serves orderly under /orderly (its own fetch has the rest); a Rust one at the root.
  const at = kind === "rust" ? "http://localhost:8787" : "http://localhost:8787/orderly";
  if (kind === "fedify") {
    console.log(`Created ${name} in ${target}, a Fedify server on orderly ${version} (Fedify ${fedify}). Next:

  cd ${dir}
  npm install
  npm start      # local Queues, KV and D1, the ledger migrated, the cron every minute

The actor is http://localhost:8787/users/${name}. Post a note to its followers (the admin token is in .dev.vars):

  curl -X POST http://localhost:8787/notes -H "authorization: Bearer $(sed -n 's/^ADMIN_TOKEN=//p' .dev.vars)" -d '{"content": "Hello, fediverse!"}'

and open ${at}/ for orderly's dashboard: each delivery, in order per inbox.
`);
    return;
  }
  console.log(`Created ${name} in ${target}, on orderly ${version}. Next:

  cd ${dir}
  npm install
  npm start      # local Queues, KV and D1, the ledger migrated, the cron every minute

Then send a job (the admin token is in .dev.vars):

  curl -X POST ${at}/jobs -H "authorization: Bearer $(sed -n 's/^ADMIN_TOKEN=//p' .dev.vars)" \\
    -H 'content-type: application/json' -d '{"payload": {"type": "greet", "name": "Ada"}, "ordering_key": "ada"}'

and open ${at}/ for the dashboard.
`);
}

const args = process.argv.slice(2);
const kind = args.includes("--rust") ? "rust" : args.includes("--fedify") ? "fedify" : "ts";
const [command, arg] = args.filter((a) => a !== "--rust" && a !== "--fedify");
if (command === "new" && args.includes("--rust") && args.includes("--fedify")) {
  console.error("--rust and --fedify: choose one (the Fedify server is TypeScript)");
  process.exit(1);
} else if (command === "new" && arg && !arg.startsWith("-")) create(arg, kind);
else if (command === "migrations") console.log(join(here, "migrations"));
else if (command === "provision") (await import("./provision.mjs")).run();
else if (command === "dev") (await import("./dev.mjs")).run(args.slice(1));
else if (command === "init") (await import("./init.mjs")).run(args);
else usage(command ? 1 : 0);
