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
const { version } = JSON.parse(readFileSync(join(here, "package.json"), "utf8"));

function usage(code) {
  console.error(`orderly-queues ${version}

  npx orderly-queues new <dir>           a new worker on orderly in <dir> (which must not exist or be
                                         empty), its job handlers in TypeScript
  npx orderly-queues new <dir> --rust    the same in Rust (needs Rust and worker-build)
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

function create(dir, rust) {
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
  cpSync(join(here, rust ? "template" : "template-ts"), target, { recursive: true });
  // npm leaves a package's .gitignore out; the template keeps it as `gitignore`.
  renameSync(join(target, "gitignore"), join(target, ".gitignore"));
  for (const f of files(target)) {
    writeFileSync(f, readFileSync(f, "utf8").replaceAll("{{name}}", name).replaceAll("{{version}}", version));
  }
  writeFileSync(join(target, ".dev.vars"), `ADMIN_TOKEN=${randomBytes(16).toString("hex")}\n`);
  // A TypeScript worker serves orderly under /orderly (its own fetch has the rest); a Rust one at the root.
  const at = rust ? "http://localhost:8787" : "http://localhost:8787/orderly";
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
const rust = args.includes("--rust");
const [command, arg] = args.filter((a) => a !== "--rust");
if (command === "new" && arg && !arg.startsWith("-")) create(arg, rust);
else if (command === "migrations") console.log(join(here, "migrations"));
else if (command === "provision") (await import("./provision.mjs")).run();
else if (command === "dev") (await import("./dev.mjs")).run(args.slice(1));
else if (command === "init") (await import("./init.mjs")).run(args);
else usage(command ? 1 : 0);
