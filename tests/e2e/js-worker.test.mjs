// orderly in your own Worker (design §13c): a TypeScript Worker (tests/e2e/js-worker/index.ts)
// that embeds the compiled worker from the packed npm package, its handlers in TypeScript in the
// same isolate: no Rust toolchain, no second Worker. Its jobs run in their key's order with
// retries, snoozes and dead letters; its own route and orderly's API share the Worker.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { bundleWorker, packedPackage, start, waitFor, writeAtomically, TOKEN } from "./harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const pass = process.env.ORDERLY_E2E_LEDGER === "do" ? "do" : "d1";
const out = join(root, `build/js-worker-${pass}`);
mkdirSync(out, { recursive: true });
const bundle = join(out, "index.mjs");
const taken = await bundleWorker(join(root, "tests/e2e/js-worker/index.ts"), bundle);

test("the Worker takes orderly from the package alone: the compiled worker and its wrapper", () => {
  assert.ok(taken.includes("client/worker.js"), `${taken}`);
  assert.ok(taken.includes("dist/worker/orderly.js"), `${taken}`);
});

test("its handlers and the README's example type-check against the package's types, and a wrong handler does not", () => {
  const dir = packedPackage();
  copyFileSync(join(root, "tests/e2e/js-worker/index.ts"), join(dir, "index.ts"));
  writeAtomically(join(dir, "wrong.ts"), `import { orderly, snooze } from "orderly-queues/worker";
orderly({ handlers: { bad: 42 as any, worse: "no" } });
snooze("soon");
`);
  // The README's example too, as it is shown.
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const shown = /### Handlers in JavaScript or TypeScript[\s\S]*?```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(shown, "the README shows a TypeScript worker");
  writeAtomically(join(dir, "readme.ts"), shown);
  const options = { noEmit: true, strict: true, target: "ES2022", module: "ES2022", moduleResolution: "bundler", lib: ["ES2022", "DOM"] };
  writeAtomically(join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions: options, include: ["index.ts", "readme.ts"] }));
  execFileSync(join(root, "node_modules/.bin/tsc"), ["-p", dir], { encoding: "utf8" });
  writeAtomically(join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions: options, include: ["wrong.ts"] }));
  let found = "";
  try { execFileSync(join(root, "node_modules/.bin/tsc"), ["-p", dir], { encoding: "utf8" }); } catch (e) { found = String(e.stdout); }
  assert.match(found, /wrong\.ts\(2,\d+\): error TS2322/, found);
  assert.match(found, /wrong\.ts\(3,\d+\): error TS2345/, found);
});

for (const mode of ["strict", "lock"]) {
  test(`${mode} mode: TypeScript handlers in the same isolate run in key order, with retries, snoozes and dead letters`, async () => {
    const w = await start({
      vars: { ORDERING_MODE: mode },
      workerOptions: { scriptPath: bundle, modulesRoot: out },
    });
    try {
      assert.equal(await (await w.mf.dispatchFetch("http://orderly.test/hello")).text(), "the user's own route: /hello");
      const r = await w.api("POST", "/orderly/jobs", { jobs: [
        { payload: { type: "greet", name: "ada" }, ordering_key: "k" },
        { payload: { type: "flaky" }, ordering_key: "k" },
        { payload: { type: "later" }, ordering_key: "k" },
        { payload: { type: "greet", name: "bob" }, ordering_key: "k" },
        { payload: { type: "doomed" } },
        { payload: { type: "typed" } },
      ] });
      assert.equal(r.status, 202, r.text);
      const [ada, flaky, later, bob, doomed, typed] = r.json.jobs.map((j) => j.id);
      const got = async (id) => (await w.api("GET", `/orderly/jobs/${id}`)).json;
      for (const id of [ada, flaky, later, bob]) await waitFor(async () => (await got(id))?.job.status === "DONE", `${id} DONE`, 60_000);
      await waitFor(async () => (await got(doomed))?.job.status === "DEAD", "the doomed job DEAD");
      const [a, f, l, b] = await Promise.all([ada, flaky, later, bob].map(got));
      // Each success says its place among the isolate's successes: the key's order.
      assert.deepEqual([a, f, l, b].map((j) => j.job.result.place), [1, 2, 3, 4]);
      assert.deepEqual(a.job.result, { hello: "ada", attempt: 1, key: "k", place: 1 });
      // The failure was retried; the snooze spent no attempt and gave its next run its payload.
      assert.deepEqual(f.history.map((e) => e.outcome), ["retry", "done"]);
      assert.deepEqual(l.history.map((e) => e.outcome), ["snooze", "done"]);
      assert.deepEqual([l.job.attempts, l.job.result.steps], [1, 1]);
      const dead = await got(doomed);
      assert.equal(dead.job.attempts, 1, "a PermanentError is not retried");
      // Each is recorded in the handler's own words, with no HTTP status: no HTTP was involved.
      assert.equal(dead.job.last_error, "this one never works");
      assert.deepEqual(f.history.map((e) => [e.error ?? null, e.http_status ?? null]), [["not yet", null], [null, null]]);
      assert.equal(l.history[0].error, "snoozed for 1 s: the handler asked");
      assert.equal(l.history[0].http_status ?? null, null);
      assert.equal(a.job.http_status ?? null, null);
      await waitFor(async () => (await got(typed))?.job.status === "DONE", "the typed job DONE", 60_000);
      const t = await got(typed);
      assert.deepEqual(t.history.map((e) => e.error ?? null), ["TypeError: no such thing", "the remote said later", null]);
    } finally {
      await w.dispose();
    }
  });
}

test("a cancel of a running TypeScript handler aborts its signal, and the job ends DEAD cancelled", async () => {
  const w = await start({ workerOptions: { scriptPath: bundle, modulesRoot: out } });
  try {
    const id = (await w.api("POST", "/orderly/jobs", { payload: { type: "waits" }, ordering_key: "k" })).json.jobs[0].id;
    const got = async () => (await w.api("GET", `/orderly/jobs/${id}`)).json?.job;
    await waitFor(async () => (await got())?.status === "RUNNING", "the handler running");
    const c = await w.api("POST", `/orderly/jobs/${id}/cancel`);
    assert.equal(c.status, 202, c.text);
    await waitFor(async () => (await got())?.status === "DEAD", "the job DEAD", 10_000);
    assert.equal((await got()).last_error, "cancelled");
    const seen = await (await w.mf.dispatchFetch("http://orderly.test/aborted")).json();
    assert.deepEqual(seen, [id], "the handler's signal aborted");
  } finally {
    await w.dispose();
  }
});

test("orderly's dashboard works under the Worker's mount: it calls the API where it is served", async () => {
  const w = await start({ workerOptions: { scriptPath: bundle, modulesRoot: out } });
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"] });
  try {
    const r = await w.api("POST", "/orderly/jobs", { payload: { type: "doomed" } });
    assert.equal(r.status, 202, r.text);
    const id = r.json.jobs[0].id;
    await waitFor(async () => (await w.api("GET", `/orderly/jobs/${id}`)).json?.job.status === "DEAD", "a dead letter");
    const page = await browser.newPage();
    await page.goto(new URL("/orderly/", w.url).href);
    await page.fill("#token", TOKEN);
    await page.click("button[type=submit]");
    await page.waitForSelector(`tr[data-id="${id}"]`);
    assert.equal(await page.textContent('[data-status="DEAD"] b'), "1");
  } finally {
    await browser.close();
    await w.dispose();
  }
});
