// Local development runs what production runs (design §13c): in a new TypeScript worker, with only
// Node on PATH and the packed npm package installed, `npm start` migrates the local ledger, starts
// `wrangler dev` and fires the Worker's cron every minute, as Cloudflare does. `wrangler dev` fires
// no scheduled event by itself: without this, maintenance never runs locally and a schedule never
// fires. The proof is a per-minute schedule whose job runs under `npm start`.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { applyEdits, modify } from "jsonc-parser";
import { NODE_ONLY, newWorker, npmStart, ONCE, waitFor } from "./harness.mjs";
import { options, readyUrl, untilNextMinute } from "../../bin/dev.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const scratch = mkdtempSync(join(tmpdir(), "orderly-dev-"));
after(() => rmSync(scratch, { recursive: true, force: true }));
/** The new worker both `npm start` tests run, made once. */
let made;
function worker() {
  made ??= newWorker(scratch, "ticker");
  return made;
}

test("wrangler dev's ready line is found in colour or not, over http or https; the options reach the migrations", () => {
  assert.equal(readyUrl("[wrangler:info] Ready on http://localhost:8787"), "http://localhost:8787");
  assert.equal(readyUrl("\x1b[32m[wrangler:info] Ready on \x1b[1mhttps://127.0.0.1:8788/\x1b[22m\x1b[39m"), "https://127.0.0.1:8788");
  assert.equal(readyUrl("[wrangler:info] Starting local server..."), undefined);
  assert.deepEqual(options(["--port", "9000", "-c", "w.jsonc", "--d1", "LEDGER", "--persist-to=.state"]), {
    binding: "LEDGER",
    shared: ["-c", "w.jsonc", "--persist-to=.state"],
    dev: ["--port", "9000", "-c", "w.jsonc", "--persist-to=.state"],
  });
  assert.equal(options([]).binding, "DB");
  assert.throws(() => options(["--d1"]), /--d1 needs a value/);
});

test("the cron's next tick is the next whole minute, a second into it", () => {
  assert.equal(untilNextMinute(Date.UTC(2026, 0, 1, 0, 0, 30)), 31_000);
  assert.equal(untilNextMinute(Date.UTC(2026, 0, 1, 0, 0, 59, 999)), 1_001);
  assert.equal(untilNextMinute(Date.UTC(2026, 0, 1, 0, 1, 0)), 61_000);
});

test("`npm start` in a new TypeScript worker fires orderly's cron every minute: a per-minute schedule's job runs; the README's first job, pasted as it is, runs there", { ...ONCE, timeout: 300_000 }, async () => {
  const app = worker();
  // A schedule every minute, of the template's own job type.
  const config = join(app, "wrangler.jsonc");
  const schedule = [{ name: "beat", cron: "* * * * *", job: { payload: { type: "greet", name: "the clock" } } }];
  const text = readFileSync(config, "utf8");
  writeFileSync(config, applyEdits(text, modify(text, ["vars", "SCHEDULES"], JSON.stringify(schedule), { formattingOptions: { insertSpaces: true, tabSize: 2 } })));
  const token = readFileSync(join(app, ".dev.vars"), "utf8").match(/^ADMIN_TOKEN=(\w+)$/m)[1];
  assert.equal(JSON.parse(readFileSync(join(app, "package.json"), "utf8")).scripts.start, "orderly-queues dev");

  // The README's port: its first job is pasted as it is.
  const port = 8787;
  const dev = npmStart(app, ["--port", String(port)]);
  const out = () => dev.output();
  try {
    const api = async (path) => {
      const res = await fetch(`http://127.0.0.1:${port}/orderly${path}`, { headers: { authorization: `Bearer ${token}` } });
      return res.json();
    };
    await waitFor(async () => /Ready on/.test(out()), "wrangler dev ready", 90_000);
    assert.match(out(), /firing the Worker's cron every minute/);
    // The README's first job, its curl pasted as it is into a shell in the new worker's folder.
    const readme = readFileSync(join(root, "README.md"), "utf8");
    const first = readme.slice(readme.indexOf("## A first job"));
    const curl = /```sh\n(curl [\s\S]*?)```/.exec(first)[1];
    const sent = JSON.parse(execFileSync("sh", ["-c", curl], { cwd: app, encoding: "utf8", env: NODE_ONLY }));
    const id = sent.jobs[0].id;
    await waitFor(async () => (await api(`/jobs/${id}`))?.job?.status === "DONE", "the README's first job DONE");
    assert.deepEqual((await api(`/jobs/${id}`)).job.result, { greeting: "Hello, Ada!" });
    // The first tick comes on the next whole minute: the schedule's job is then enqueued and runs.
    await waitFor(async () => {
      const list = await api("/jobs?type=greet").catch(() => null);
      return list?.jobs?.some((j) => j.id.startsWith("schedule:beat:") && j.status === "DONE");
    }, "the schedule's job DONE under npm start", 150_000);
    const job = (await api("/jobs?type=greet")).jobs.find((j) => j.id.startsWith("schedule:beat:"));
    assert.deepEqual((await api(`/jobs/${encodeURIComponent(job.id)}`)).job.result, { greeting: "Hello, the clock!" });
  } catch (e) {
    console.log(`npm start said:\n${out()}`);
    throw e;
  } finally {
    await dev.stop();
  }
});

test("`orderly-queues dev` over https fires the cron through wrangler's self-signed certificate, and a SIGINT sent to it alone ends wrangler too", { ...ONCE, timeout: 240_000 }, async () => {
  const app = worker();
  const port = 8789;
  // Its own process group: the SIGINT below reaches this command alone, not wrangler with it.
  const dev = spawn(join(app, "node_modules", ".bin", "orderly-queues"), ["dev", "--local-protocol", "https", "--port", String(port)], { cwd: app, env: NODE_ONLY, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  dev.stdout.on("data", (c) => { out += c; });
  dev.stderr.on("data", (c) => { out += c; });
  const ended = new Promise((resolve) => dev.on("close", resolve));
  const answers = () => fetch(`http://localhost:${port}/`).then(() => true, (e) => !/ECONNREFUSED/.test(String(e.cause?.code ?? e.cause ?? e)));
  try {
    await waitFor(async () => /Ready on https:/.test(out), "wrangler dev ready on https", 90_000);
    // The first tick is on the next whole minute.
    await waitFor(async () => /the first cron run answered 200|the cron run (failed|answered)/.test(out), "the first cron run", 100_000);
    assert.match(out, /the first cron run answered 200/);
    assert.doesNotMatch(out, /the cron run failed/);
    process.kill(dev.pid, "SIGINT");
    const code = await Promise.race([ended, new Promise((r) => setTimeout(() => r("still running"), 30_000))]);
    assert.notEqual(code, "still running", "the command ends on a SIGINT of its own");
    await waitFor(async () => !(await answers()), "wrangler's server closed", 15_000);
  } catch (e) {
    console.log(`orderly-queues dev said:\n${out}`);
    throw e;
  } finally {
    try { process.kill(-dev.pid, "SIGKILL"); } catch {}
  }
});
