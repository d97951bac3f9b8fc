// Installed the way users install it (design §21): from a scratch folder outside the repository,
// with only the packed crate (`cargo package`) and the packed npm package (`npm pack`), nothing
// pointing into the repository. `npx orderly-queues new` makes a Rust worker with its own job
// type; it builds against the crate unpacked from its `.crate` file, starts under miniflare on an
// empty D1 database, is migrated with the documented command (`POST /admin/migrate`) and runs a
// job; the repository's Rust example builds the same way. A Fedify app installs the npm package
// and Fedify by name, imports `orderly-queues/fedify`, and delivers an activity through that
// worker. `npx orderly-queues new` without `--rust` makes a TypeScript worker that wrangler bundles
// from the packed npm package with no Rust toolchain on PATH, and that runs its jobs. Only the
// tools (cargo, worker-build, esbuild, wrangler, miniflare) are the repository's. Run with the D1
// ledger only: it starts its own workers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { appendFileSync, cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { start, waitFor } from "./harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const { version } = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const skip = process.env.ORDERLY_E2E_LEDGER === "do" && "starts its own workers on D1 (run once, in the D1 pass)";
const run = (cmd, args, cwd, env = {}) =>
  execFileSync(cmd, args, { cwd, encoding: "utf8", env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });

/** The scratch folder with both packages in it, as a release would publish them. */
function packages() {
  const scratch = mkdtempSync(join(tmpdir(), "orderly-install-"));
  run("cargo", ["package", "--allow-dirty", "--no-verify", "-p", "orderly-queues", "--target-dir", join(scratch, "cargo")], root);
  const crate = join(scratch, "cargo/package", `orderly-queues-${version}.crate`);
  mkdirSync(join(scratch, "vendor"));
  run("tar", ["xzf", crate, "-C", join(scratch, "vendor")], scratch);
  const tgz = run("npm", ["pack", "--silent", "--pack-destination", scratch], root).trim().split("\n").pop();
  return { scratch, crate: join(scratch, "vendor", `orderly-queues-${version}`), tgz: join(scratch, tgz) };
}

test("a new Rust worker from the template, on the packed crate, migrates and runs its job; a Fedify app on the packed npm package delivers through it", { skip, timeout: 900_000 }, async () => {
  const { scratch, crate, tgz } = packages();

  // The template, by the package's own bin, as `npx orderly-queues new greeter` runs it.
  run("npm", ["exec", "--yes", `--package=${tgz}`, "--", "orderly-queues", "new", "greeter", "--rust"], scratch);
  const app = join(scratch, "greeter");
  assert.ok(readdirSync(app).includes(".dev.vars") && readdirSync(app).includes(".gitignore"));
  const cargoToml = readFileSync(join(app, "Cargo.toml"), "utf8");
  assert.match(cargoToml, new RegExp(`orderly = \\{ package = "orderly-queues", version = "${version}" \\}`));
  assert.match(readFileSync(join(app, "wrangler.toml"), "utf8"), /migrations_dir = "node_modules\/orderly-queues\/migrations"/);
  const token = readFileSync(join(app, ".dev.vars"), "utf8").match(/^ADMIN_TOKEN=(\w{32})$/m)[1];
  // The crate is not on crates.io yet: the registry's copy is the unpacked .crate file.
  const patch = `\n[patch.crates-io]\norderly-queues = { path = "${crate}" }\n`;
  appendFileSync(join(app, "Cargo.toml"), patch);
  // wrangler's [build] command; the repository's target folder only as a cache of compiled crates.
  const cache = { CARGO_TARGET_DIR: process.env.CARGO_TARGET_DIR ?? join(root, "target") };
  run("worker-build", ["--release", "--no-opt"], app, cache);

  // The repository's Rust example as a user's worker: its files, the crate by version, not by path.
  const example = join(scratch, "rust-handler");
  cpSync(join(root, "examples/rust-handler"), example, { recursive: true, filter: (f) => !f.startsWith(join(root, "examples/rust-handler/build")) });
  const manifest = readFileSync(join(example, "Cargo.toml"), "utf8")
    .replace('orderly = { package = "orderly-queues", path = "../.." }', `orderly = { package = "orderly-queues", version = "${version}" }`);
  assert.ok(!manifest.includes("path ="), "the example's manifest points nowhere into the repository");
  writeFileSync(join(example, "Cargo.toml"), manifest + patch);
  run("worker-build", ["--release", "--no-opt"], example, cache);
  assert.ok(readdirSync(join(example, "build/worker")).includes("shim.mjs"), "the example builds on the packed crate");

  // A Fedify app: Fedify and orderly's package installed by name (the package from its tarball).
  const fedify = join(scratch, "fedify-app");
  mkdirSync(join(fedify, "src"), { recursive: true });
  const fedifyVersion = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).devDependencies["@fedify/fedify"];
  writeFileSync(join(fedify, "package.json"), JSON.stringify({ name: "fedify-app", private: true, type: "module",
    dependencies: { "@fedify/fedify": fedifyVersion, "@fedify/vocab": fedifyVersion, "orderly-queues": `file:${tgz}` } }, null, 2));
  writeFileSync(join(fedify, "src/index.js"), FEDIFY_APP);
  run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts"], fedify);
  await build({
    entryPoints: [join(fedify, "src/index.js")], absWorkingDir: fedify,
    bundle: true, format: "esm", platform: "browser", conditions: ["workerd", "worker", "browser"],
    external: ["node:*", "cloudflare:*"], outfile: join(fedify, "dist/index.mjs"), logLevel: "warning",
  });

  const inbox = [];
  const w = await start({
    ledger: null,
    migrations: 0,
    adminToken: token,
    buildDir: relative(root, join(app, "build")),
    vars: { ORDERING_MODE: "strict", SERVICE_HANDLERS: "fedify=FEDIFY", PRODUCER_TOKEN: "fedify-app-producer-token",
      PAYLOAD_KEY: `k1:${Buffer.alloc(32, 7).toString("base64")}` },
    extraWorkers: [{
      name: "fedify", modules: true, scriptPath: join(fedify, "dist/index.mjs"), modulesRoot: fedify, compatibilityDate: "2026-08-01",
      compatibilityFlags: ["nodejs_compat"], serviceBindings: { ORDERLY: "orderly" },
      bindings: { ORDERLY_TOKEN: "fedify-app-producer-token" },
      outboundService: async (request) => {
        inbox.push({ url: request.url, activity: await request.json() });
        return new Response(null, { status: 202 });
      },
    }],
    serviceBindings: { FEDIFY: { name: "fedify", entrypoint: "OrderlyFedifyHandler" } },
  });
  try {
    // An empty database: refused, naming the command; the command; then the job runs.
    const refused = await w.api("POST", "/jobs", { payload: { type: "greet", name: "Ada" } });
    assert.equal(refused.status, 503);
    assert.match(refused.json.error, /POST \/admin\/migrate/);
    const migrated = await w.api("POST", "/admin/migrate", {});
    assert.equal(migrated.status, 200, migrated.text);
    assert.equal(migrated.json.applied.length, readdirSync(join(crate, "migrations")).length, "every migration the crate ships");

    const r = await w.api("POST", "/jobs", { jobs: [
      { payload: { type: "greet", name: "Ada" }, ordering_key: "people" },
      { payload: { type: "greet", name: " " }, ordering_key: "people" },
    ] });
    assert.equal(r.status, 202, r.text);
    const [ada, blank] = r.json.jobs.map((j) => j.id);
    await waitFor(async () => (await w.job(ada))?.status === "DONE", "the template's greet job DONE");
    assert.deepEqual((await w.api("GET", `/jobs/${ada}`)).json.job.result, { greeting: "Hello, Ada!" });
    await waitFor(async () => (await w.job(blank))?.status === "DEAD", "the empty name DEAD");
    assert.match((await w.job(blank)).last_error, /name is empty/);
    assert.match((await w.api("POST", "/jobs", { payload: { type: "resize" } })).json.error, /known: greet, webhook/);

    // The Fedify app's delivery, through the new worker's ledger and back to the app.
    const fed = await w.mf.getWorker("fedify");
    const sent = await fed.fetch("https://fedify.test/send", { method: "POST", body: JSON.stringify({ inbox: "https://a.test/inbox" }) });
    assert.equal(sent.status, 202, await sent.text());
    await waitFor(() => inbox.length === 1, "the activity delivered to the inbox", 60_000);
    assert.equal(inbox[0].url, "https://a.test/inbox");
    assert.equal(inbox[0].activity.type, "Create");
    const fedJobs = (await w.db.prepare("SELECT status FROM job WHERE type = 'fedify'").all()).results;
    assert.deepEqual(fedJobs.map((j) => j.status), ["DONE"], "one fedify job, run by the new worker");
  } finally {
    await w.dispose();
  }
  rmSync(scratch, { recursive: true, force: true });
});

test("a new TypeScript worker from the template, with no Rust toolchain on PATH: wrangler bundles it from the packed npm package, and it migrates and runs its jobs", { skip, timeout: 300_000 }, async () => {
  const scratch = mkdtempSync(join(tmpdir(), "orderly-install-ts-"));
  const tgz = join(scratch, run("npm", ["pack", "--silent", "--pack-destination", scratch], root).trim().split("\n").pop());
  // Only node on PATH (and the system's tools): no cargo, rustc or worker-build.
  const bare = { PATH: [dirname(process.execPath), "/usr/bin", "/bin"].join(":") };
  for (const tool of ["cargo", "rustc", "worker-build"]) {
    assert.throws(() => run("which", [tool], scratch, bare), `${tool} is not on the test's PATH`);
  }
  run(process.execPath, [join(root, "bin/orderly-queues.mjs"), "new", "greeter"], scratch, bare);
  const app = join(scratch, "greeter");
  assert.match(readFileSync(join(app, "wrangler.jsonc"), "utf8"), /"migrations_dir": "node_modules\/orderly-queues\/migrations"/);
  assert.equal(JSON.parse(readFileSync(join(app, "package.json"), "utf8")).dependencies["orderly-queues"], `^${version}`);
  const token = readFileSync(join(app, ".dev.vars"), "utf8").match(/^ADMIN_TOKEN=(\w{32})$/m)[1];
  // `npm install`, offline: the package from its tarball; wrangler and TypeScript are the repository's.
  mkdirSync(join(app, "node_modules/orderly-queues"), { recursive: true });
  run("tar", ["xzf", tgz, "-C", join(app, "node_modules/orderly-queues"), "--strip-components=1"], scratch);
  for (const dep of ["wrangler", "typescript"]) symlinkSync(join(root, "node_modules", dep), join(app, "node_modules", dep));
  // The user adds a job type beside the template's: one that fails its first run when asked to,
  // and says its place among the isolate's runs (the test reads each key's order from it).
  const source = join(app, "src/index.ts");
  const added = readFileSync(source, "utf8").replace("  handlers: {\n", `  handlers: {
    record: async (job: Job<{ fail?: boolean }>) => {
      if (job.payload.fail && job.attempt < 2) throw new Error("not yet");
      return { place: ++places };
    },
`);
  assert.notEqual(added, readFileSync(source, "utf8"), "the template lists its handlers as the test expects");
  writeFileSync(source, `let places = 0;\n${added}`);
  run(process.execPath, ["node_modules/typescript/bin/tsc", "-p", "."], app, bare);
  const out = run(process.execPath, ["node_modules/wrangler/bin/wrangler.js", "deploy", "--dry-run", "--outdir", "dist"], app,
    { ...bare, WRANGLER_SEND_METRICS: "false" });
  // What a user deploys: the bundle wrangler made, against the plans' limits (3 MB gzip on the free plan).
  const [, total, gzip] = /Total Upload: ([\d.]+) KiB \/ gzip: ([\d.]+) KiB/.exec(out);
  console.log(`the TypeScript template's bundle: ${total} KiB, ${gzip} KiB gzip`);
  assert.ok(Number(gzip) < 3 * 1024, `${gzip} KiB gzip`);
  // The README's figures are this measurement's, within 5%.
  const [, said, saidGzip] = /compiled \(([\d,]+) KiB, ([\d,]+) KiB gzip as\s+wrangler bundles the template\)/.exec(readFileSync(join(root, "README.md"), "utf8"));
  for (const [text, measured] of [[said, total], [saidGzip, gzip]]) {
    const shown = Number(text.replaceAll(",", ""));
    assert.ok(Math.abs(shown - Number(measured)) / Number(measured) < 0.05, `the README says ${shown} KiB, wrangler measured ${measured} KiB`);
  }

  const w = await start({
    ledger: null,
    migrations: 0,
    adminToken: token,
    vars: { ORDERING_MODE: "strict" },
    workerOptions: { scriptPath: join(app, "dist/index.js"), modulesRoot: join(app, "dist") },
  });
  try {
    assert.match(await (await w.mf.dispatchFetch("http://greeter.test/")).text(), /orderly's API and dashboard are at \/orderly\//);
    // An empty database: refused, naming the command; the command; then jobs run.
    const refused = await w.api("POST", "/orderly/jobs", { payload: { type: "greet", name: "Ada" } });
    assert.equal(refused.status, 503);
    // It names the route under the Worker's mount, the local and the remote command, and a page that ships.
    assert.match(refused.json.error, /`POST \/orderly\/admin\/migrate`/);
    assert.match(refused.json.error, /migrations apply DB --local/);
    assert.match(refused.json.error, /migrations apply DB --remote/);
    assert.match(refused.json.error, /CHANGELOG\.md/);
    const migrated = await w.api("POST", "/orderly/admin/migrate", {});
    assert.equal(migrated.status, 200, migrated.text);
    const r = await w.api("POST", "/orderly/jobs", { jobs: [
      { payload: { type: "greet", name: "Ada" }, ordering_key: "people" },
      { payload: { type: "greet", name: "" }, ordering_key: "people" },
      { payload: { type: "record", fail: true }, ordering_key: "k" },
      { payload: { type: "record" }, ordering_key: "k" },
      { payload: { type: "record" }, ordering_key: "k" },
    ] });
    assert.equal(r.status, 202, r.text);
    const [ada, blank, ...records] = r.json.jobs.map((j) => j.id);
    const got = async (id) => (await w.api("GET", `/orderly/jobs/${id}`)).json;
    await waitFor(async () => (await got(ada)).job.status === "DONE", "the template's greet job DONE");
    assert.deepEqual((await got(ada)).job.result, { greeting: "Hello, Ada!" });
    await waitFor(async () => (await got(blank)).job.status === "DEAD", "the empty name DEAD");
    assert.match((await got(blank)).job.last_error, /no name to greet/);
    // The key's jobs in order, the first retried before the others ran.
    for (const id of records) await waitFor(async () => (await got(id)).job.status === "DONE", `${id} DONE`);
    const done = await Promise.all(records.map(got));
    assert.deepEqual(done.map((j) => j.job.result.place), [1, 2, 3]);
    assert.deepEqual(done[0].history.map((e) => e.outcome), ["retry", "done"]);
    // The dashboard answers under the Worker's mount.
    const page = await w.mf.dispatchFetch("http://greeter.test/orderly/");
    assert.equal(page.status, 200);
    assert.match(await page.text(), /<title>orderly/);
  } finally {
    await w.dispose();
  }
  rmSync(scratch, { recursive: true, force: true });
});

test("`npx orderly-queues init` adds orderly's bindings to an existing Worker's wrangler.jsonc, which wrangler then bundles and whose jobs run", { skip, timeout: 300_000 }, async () => {
  const scratch = mkdtempSync(join(tmpdir(), "orderly-init-"));
  const tgz = join(scratch, run("npm", ["pack", "--silent", "--pack-destination", scratch], root).trim().split("\n").pop());
  const app = join(scratch, "my-app");
  mkdirSync(join(app, "src"), { recursive: true });
  // A Worker as `npm create cloudflare` makes it (tabs, comments, a trailing comma), with vars of its own.
  const before = `/**
 * For more details on how to configure Wrangler, refer to:
 * https://developers.cloudflare.com/workers/wrangler/configuration/
 */
{
\t"$schema": "node_modules/wrangler/config-schema.json",
\t"name": "my-app",
\t"main": "src/index.ts",
\t"compatibility_date": "2026-08-01",
\t"observability": {
\t\t"enabled": true
\t},
\t// "vars": { "MY_VARIABLE": "production_value" },
\t"vars": { "GREETING": "hi" },
}
`;
  writeFileSync(join(app, "wrangler.jsonc"), before);
  writeFileSync(join(app, "src/index.ts"), `import { orderly } from "orderly-queues/worker";
export default orderly({ handlers: { hello: async (job) => ({ hello: job.payload.to }) }, fetch: async () => new Response("my app") });
`);
  const bare = { PATH: [dirname(process.execPath), "/usr/bin", "/bin"].join(":") };
  // A .dev.vars of the user's own, without a token: init adds one and keeps what was there.
  writeFileSync(join(app, ".dev.vars"), "MY_SECRET=mine");
  const said = run(process.execPath, [join(root, "bin/orderly-queues.mjs"), "init"], app, bare);
  assert.match(said, /added the queue producer JOBS \(my-app-jobs\)/);
  assert.match(said, /npx orderly-queues dev/);
  const devVars = readFileSync(join(app, ".dev.vars"), "utf8");
  assert.match(devVars, /^MY_SECRET=mine\nADMIN_TOKEN=\w{32}\n$/);
  const config = readFileSync(join(app, "wrangler.jsonc"), "utf8");
  assert.ok(config.includes('// "vars": { "MY_VARIABLE": "production_value" },'), "its comments kept");
  assert.match(config, /\t\t"GREETING": "hi",/, "its vars kept, indented with its tabs");
  assert.match(config, /"migrations_dir": "node_modules\/orderly-queues\/migrations"/);
  assert.match(run(process.execPath, [join(root, "bin/orderly-queues.mjs"), "init"], app, bare), /has orderly's bindings already/);
  assert.equal(readFileSync(join(app, "wrangler.jsonc"), "utf8"), config, "a second init changes nothing");
  assert.equal(readFileSync(join(app, ".dev.vars"), "utf8"), devVars, "nor the token it wrote");

  mkdirSync(join(app, "node_modules/orderly-queues"), { recursive: true });
  run("tar", ["xzf", tgz, "-C", join(app, "node_modules/orderly-queues"), "--strip-components=1"], scratch);
  symlinkSync(join(root, "node_modules/wrangler"), join(app, "node_modules/wrangler"));
  const out = run(process.execPath, ["node_modules/wrangler/bin/wrangler.js", "deploy", "--dry-run", "--outdir", "dist"], app,
    { ...bare, WRANGLER_SEND_METRICS: "false" });
  for (const binding of ["env.JOBS (my-app-jobs)", "env.ORDERING_KV", "env.DB (my-app)", 'env.GREETING ("hi")', 'env.ORDERING_MODE ("strict")']) {
    assert.ok(out.includes(binding), `wrangler reads ${binding}: ${out}`);
  }
  const w = await start({
    ledger: null,
    vars: { ORDERING_MODE: "strict" },
    workerOptions: { scriptPath: join(app, "dist/index.js"), modulesRoot: join(app, "dist") },
  });
  try {
    const r = await w.api("POST", "/orderly/jobs", { payload: { type: "hello", to: "world" } });
    assert.equal(r.status, 202, r.text);
    const id = r.json.jobs[0].id;
    await waitFor(async () => (await w.api("GET", `/orderly/jobs/${id}`)).json.job.status === "DONE", "the job DONE");
    assert.deepEqual((await w.api("GET", `/orderly/jobs/${id}`)).json.job.result, { hello: "world" });
  } finally {
    await w.dispose();
  }
  rmSync(scratch, { recursive: true, force: true });
});

/** A user's Fedify app on orderly, as the README shows it: only package imports. */
const FEDIFY_APP = `
import { createFederation, generateCryptoKeyPair, MemoryKvStore } from "@fedify/fedify";
import { Create, Note, Person } from "@fedify/vocab";
import { OrderlyMessageQueue, orderlyHandler } from "orderly-queues/fedify";

let app;
let keyPair;

function setup(env) {
  if (app) return app;
  const queue = new OrderlyMessageQueue({ token: env.ORDERLY_TOKEN, service: env.ORDERLY });
  const federation = createFederation({ kv: new MemoryKvStore(), queue, manuallyStartQueue: true, allowPrivateAddress: true });
  federation
    .setActorDispatcher("/users/{identifier}", async (ctx, identifier) => new Person({
      id: ctx.getActorUri(identifier), preferredUsername: identifier, inbox: ctx.getInboxUri(identifier),
      publicKey: (await ctx.getActorKeyPairs(identifier))[0]?.cryptographicKey,
    }))
    .setKeyPairsDispatcher(async () => [(keyPair ??= await generateCryptoKeyPair("RSASSA-PKCS1-v1_5"))]);
  federation.setInboxListeners("/users/{identifier}/inbox", "/inbox");
  app = { federation, queue, contextData: undefined };
  return app;
}

export const OrderlyFedifyHandler = orderlyHandler(setup);

export default {
  async fetch(request, env) {
    const { federation } = setup(env);
    const { inbox } = await request.json();
    const ctx = federation.createContext(request, undefined);
    const note = "https://fedify.test/notes/1";
    await ctx.sendActivity(
      { identifier: "alice" },
      [{ id: new URL("https://a.test/users/bob"), inboxId: new URL(inbox) }],
      new Create({ id: new URL("/activities/1", request.url), actor: ctx.getActorUri("alice"), object: new Note({ id: new URL(note), content: "hello" }) }),
      { orderingKey: note },
    );
    return new Response(null, { status: 202 });
  },
};
`;
