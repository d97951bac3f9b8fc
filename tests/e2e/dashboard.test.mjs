// The operator page in a real browser (headless Chromium): connect with the token, see the counts
// and the dead letter, redrive it, and watch it complete.
import { test } from "node:test";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";
import { start, webhook, waitFor, sleep, TOKEN } from "./harness.mjs";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

test("the dashboard shows counts and dead letters, and redrives one to DONE", async () => {
  const w = await start();
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  try {
    const res = await w.api("POST", "/jobs", { payload: webhook("/status/404/dash", { from: "dashboard" }) });
    const id = res.json.jobs[0].id;
    await waitFor(async () => (await w.job(id))?.status === "DEAD", "a dead letter");
    w.target.answers.set("/status/404/dash", 200); // the receiver is fixed

    const page = await browser.newPage();
    await page.goto(w.url.href);
    await page.fill("#token", TOKEN);
    await page.click("button[type=submit]");
    await page.waitForSelector(`tr[data-id="${id}"]`);
    assert.equal(await page.textContent('[data-status="DEAD"] b'), "1");
    assert.match(await page.textContent(`tr[data-id="${id}"] td.err`), /HTTP 404/);

    await page.click(`tr[data-id="${id}"] button`);
    await waitFor(async () => (await w.job(id))?.status === "DONE", "the redriven job DONE");
    await page.click("#refresh");
    await page.waitForFunction(() => document.querySelector('[data-status="DONE"] b')?.textContent === "1");
    assert.equal(await page.locator("#dead tr").count(), 0);
  } finally {
    await browser.close();
    await w.dispose();
  }
});

test("the dashboard says so when the token is wrong", async () => {
  const w = await start();
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"] });
  try {
    const page = await browser.newPage();
    await page.goto(w.url.href);
    await page.fill("#token", "not-the-token");
    await page.click("button[type=submit]");
    await page.waitForFunction(() => document.querySelector("#status")?.textContent.includes("bearer token"));
  } finally {
    await browser.close();
    await w.dispose();
  }
});

test("the dashboard lists a blocked key and its Skip button lets the key move on", async () => {
  const w = await start({ vars: { ORDERING_MODE: "strict", ON_DEAD: "block" } });
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  try {
    const r = await w.api("POST", "/jobs", {
      jobs: [
        { payload: webhook("/status/404/dash-blk"), ordering_key: "acct/1" },
        { payload: webhook("/ok/dash-blk"), ordering_key: "acct/1" },
      ],
    });
    const [head, next] = r.json.jobs.map((j) => j.id);
    await waitFor(async () => (await w.job(head))?.status === "DEAD", "the head DEAD");

    const page = await browser.newPage();
    await page.goto(w.url.href);
    await page.fill("#token", TOKEN);
    await page.click("button[type=submit]");
    const row = 'tr[data-key="acct/1"]';
    await page.waitForSelector(row);
    assert.equal(await page.textContent(`${row} td:nth-child(2)`), head);
    assert.equal(await page.textContent(`${row} td:nth-child(3)`), "1");
    assert.match(await page.textContent(`${row} td.err`), /HTTP 404/);

    await page.click(`${row} button[data-action=skip]`);
    await waitFor(async () => (await w.job(next))?.status === "DONE", "the job behind DONE");
    await page.waitForFunction(() => document.querySelectorAll("#blocked tr").length === 0);
  } finally {
    await browser.close();
    await w.dispose();
  }
});

const launch = () => chromium.launch({
  executablePath: CHROMIUM,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});

test("the dashboard charts the jobs a test ran, shows a job's timeline, cancels and bulk-redrives", async () => {
  const w = await start();
  const browser = await launch();
  try {
    const r = await w.api("POST", "/jobs", { jobs: [
      { payload: webhook("/fail/2/dash-flaky"), ordering_key: "acct/7", priority: 1, limit_key: "dash.test", deadline_seconds: 3600, timeout_seconds: 20 },
      { payload: webhook("/ok/dash-1") },
      { payload: webhook("/ok/dash-2") },
      { payload: webhook("/status/404/dash-a") },
      { payload: webhook("/status/404/dash-b") },
      { payload: webhook("/ok/dash-later"), delay_seconds: 600 },
    ] });
    const [flaky, , , deadA, deadB, later] = r.json.jobs.map((j) => j.id);
    for (const id of [flaky, deadA, deadB]) {
      await waitFor(async () => ["DONE", "DEAD"].includes((await w.job(id))?.status), `${id} finished`);
    }
    await waitFor(async () => (await w.counts()).DONE === 3, "three DONE");

    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(w.url.href);
    await page.fill("#token", TOKEN);
    await page.click("button[type=submit]");
    // The charts: this test's runs, by minute, drawn as bars whose values add up.
    await page.waitForSelector('[data-chart="done"] rect');
    const bars = (chart) => page.$$eval(`[data-chart="${chart}"] rect`, (rs) => rs.reduce((a, r) => a + Number(r.dataset.value), 0));
    assert.equal(await bars("done"), 3);
    assert.equal(await bars("failed"), 2, "the flaky job's two failed attempts");
    assert.equal(await bars("dead"), 2);
    assert.match(await page.textContent('[data-total="backlog"]'), /now 1/, "the delayed job is the backlog");
    // Each chart's axis: the hour, and its top value.
    assert.match(await page.textContent('[data-chart="done"] .axis'), /60 min ago.*peak \d+\/min.*now/);
    // The time charts (design §27.6): run time over every run of the hour, queue wait over the
    // successful ones, as p50 and p95 per type, written out.
    await page.waitForSelector('[data-times="run"] tr[data-type="webhook"]');
    const timed = (field) => page.$eval(`[data-times="${field}"] tr[data-type="webhook"]`, (tr) => ({
      p50: Number(tr.dataset.p50), p95: Number(tr.dataset.p95), cells: [...tr.querySelectorAll("td")].map((td) => td.textContent),
    }));
    const run = await timed("run");
    assert.equal(run.cells[3], "7", `3 done, 2 failed, 2 dead: 7 runs timed: ${JSON.stringify(run)}`);
    assert.ok(run.p50 >= 0 && run.p50 <= run.p95, JSON.stringify(run));
    assert.match(run.cells[1], /^\d+(\.\d)? (ms|s)$/, JSON.stringify(run));
    const wait = await timed("wait");
    assert.equal(wait.cells[3], "3", `the queue wait of each successful run: ${JSON.stringify(wait)}`);
    assert.ok(wait.p50 <= wait.p95, JSON.stringify(wait));

    // The job view: its attempts as a timeline, and its result.
    await page.click(`tr[data-job="${flaky}"] a.job`);
    await page.waitForSelector("#timeline li");
    const steps = await page.$$eval("#timeline li", (lis) => lis.map((li) => li.className));
    assert.deepEqual(steps, ["retry", "retry", "done"], JSON.stringify(await w.job(flaky)));
    assert.match(await page.textContent("#timeline li:last-child"), /attempt 3: done \(HTTP 200\)/);
    assert.match(await page.textContent("#result"), /"status": 200/);
    assert.match(await page.textContent("#detail"), /priority 1/);
    assert.match(await page.textContent("#detail"), /limit key dash\.test · deadline .+ · timeout 20 s/);
    // `npm run screenshot` keeps this view for the README.
    if (process.env.DASHBOARD_SCREENSHOT) await page.screenshot({ path: process.env.DASHBOARD_SCREENSHOT, fullPage: true });

    // Filters: by key, and by priority.
    await page.fill("#f-key", "acct/7");
    await page.click("#list-filter button");
    await page.waitForFunction(() => document.querySelectorAll("#jobs tr").length === 1);
    await page.fill("#f-key", "");
    await page.selectOption("#f-priority", "1");
    await page.click("#list-filter button");
    await page.waitForFunction((id) => [...document.querySelectorAll("#jobs tr")].map((tr) => tr.dataset.job).join() === id, flaky);
    await page.selectOption("#f-priority", "");

    // Cancel the delayed job from its view.
    await page.fill("#f-key", "");
    await page.selectOption("#f-status", "PENDING");
    await page.click("#list-filter button");
    await page.waitForSelector(`tr[data-job="${later}"]`);
    // A refresh in flight when the operator opens another job must not draw over it: the
    // refresh's read of the open job (the flaky one) answers late, after the new view is drawn.
    const isFlaky = (url) => url.pathname.endsWith(`/jobs/${flaky}`);
    await page.route(isFlaky, async (route) => {
      await new Promise((r) => setTimeout(r, 1500));
      // The page's next poll may ask for the job again while this route is being removed below:
      // the removal lets that request through, and continuing it again throws.
      await route.continue().catch((e) => {
        if (!/already handled/.test(e.message)) throw e;
      });
    });
    const slowAsked = page.waitForRequest((r) => isFlaky(new URL(r.url())));
    const slowAnswered = page.waitForResponse((r) => isFlaky(new URL(r.url())));
    await page.click("#refresh");
    await slowAsked;
    await page.click(`tr[data-job="${later}"] a.job`);
    await page.waitForSelector('#detail button[data-action="cancel"]');
    await slowAnswered;
    await page.waitForTimeout(300);
    assert.equal(await page.getAttribute("#detail", "data-id"), later, "the late answer drew over the job the operator opened");
    await page.unroute(isFlaky);
    await page.click('#detail button[data-action="cancel"]');
    await waitFor(async () => (await w.job(later))?.last_error === "cancelled", "the job cancelled");
    await page.waitForSelector('#timeline li[data-kind="cancel"]');

    // Bulk redrive: count the 404s first, then redrive them.
    w.target.answers.set("/status/404/dash-a", 200);
    w.target.answers.set("/status/404/dash-b", 200);
    await page.fill("#b-error", "HTTP 404");
    await page.click("#b-count");
    await page.waitForFunction(() => document.querySelector("#b-result")?.dataset.matched === "2");
    assert.equal((await w.counts()).DEAD, 3, "counting changes nothing");
    await page.click("#b-redrive");
    await page.waitForFunction(() => document.querySelector("#b-result")?.dataset.redriven === "2");
    for (const id of [deadA, deadB]) await waitFor(async () => (await w.job(id))?.status === "DONE", `${id} DONE`);
    assert.equal((await w.job(later)).status, "DEAD", "the cancelled job was not in the filter");
  } finally {
    await browser.close();
    await w.dispose();
  }
});

test("the dashboard shows a limit key, pauses and resumes it, and sets its policy", async () => {
  const w = await start({ vars: { LIMITS: JSON.stringify({ "host.test": { concurrency: 2 } }) } });
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"] });
  try {
    const res = await w.api("POST", "/jobs", { payload: webhook("/ok/limited"), limit_key: "host.test" });
    await waitFor(async () => (await w.job(res.json.jobs[0].id))?.status === "DONE", "the limited job DONE");
    const page = await browser.newPage();
    await page.goto(w.url.href);
    await page.fill("#token", TOKEN);
    await page.click("button[type=submit]");
    const row = 'tr[data-limit="host.test"]';
    await page.waitForSelector(row);
    assert.match(await page.textContent(`${row} td:nth-child(2)`), /"concurrency":2/);

    await page.click(`${row} button[data-action="pause"]`);
    await waitFor(async () => (await w.api("GET", "/limits/host.test")).json.paused === true, "the key paused");
    await page.waitForSelector(`${row} button[data-action="resume"]`);
    await page.click(`${row} button[data-action="resume"]`);
    await waitFor(async () => (await w.api("GET", "/limits/host.test")).json.paused === false, "the key resumed");

    await page.fill("#l-key", "host.test");
    await page.fill("#l-policy", '{"rate": 5, "concurrency": 1}');
    await page.click("#limit-form button");
    await waitFor(async () => (await w.api("GET", "/limits/host.test")).json.overridden === true, "the policy set");
    assert.deepEqual((await w.api("GET", "/limits/host.test")).json.policy, { rate: 5, per_seconds: 1, burst: 1, concurrency: 1 });
    await page.waitForFunction(() => document.querySelector('tr[data-limit="host.test"] td:nth-child(2)')?.textContent.includes("set here"));
  } finally {
    await browser.close();
    await w.dispose();
  }
});

test("the dashboard lists a schedule with its last job, and pauses and resumes it", async () => {
  const SCHEDULES = JSON.stringify([{ name: "beat", cron: "*/5 * * * *", job: { payload: webhook("/ok/beat") } }]);
  const w = await start({ vars: { SCHEDULES } });
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"] });
  try {
    const period = Math.floor(Date.now() / 300_000) * 300_000;
    await w.worker.scheduled({ cron: "* * * * *", scheduledTime: new Date(period) });
    const page = await browser.newPage();
    await page.goto(w.url.href);
    await page.fill("#token", TOKEN);
    await page.click("button[type=submit]");
    const row = 'tr[data-schedule="beat"]';
    await page.waitForSelector(`${row} a.job`);
    assert.equal(await page.textContent(`${row} a.job`), `schedule:beat:${period}`);
    assert.equal(await page.textContent(`${row} td:nth-child(2)`), "*/5 * * * *");
    await page.click(`${row} button[data-action="pause"]`);
    await waitFor(async () => (await w.api("GET", "/schedules")).json.schedules[0].paused === true, "the schedule paused");
    await page.waitForSelector(`${row} button[data-action="resume"]`);
    await page.click(`${row} button[data-action="resume"]`);
    await waitFor(async () => (await w.api("GET", "/schedules")).json.schedules[0].paused === false, "the schedule resumed");
  } finally {
    await browser.close();
    await w.dispose();
  }
});

test("the dashboard shows what a job waits for, what waits for it, its batch, and the batch's progress on its callback", async () => {
  const w = await start();
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"] });
  try {
    // b waits for a, which is held for a while; the batch's callback waits for both.
    const r = await w.api("POST", "/jobs", {
      jobs: [{ id: "a", payload: webhook("/slow/4000/a") }, { id: "b", payload: webhook("/ok/b"), after: ["a"] }],
      then: { id: "cb", payload: webhook("/ok/cb") },
    });
    assert.equal(r.status, 202, JSON.stringify(r.json));
    const page = await browser.newPage();
    await page.goto(w.url.href);
    await page.fill("#token", TOKEN);
    await page.click("button[type=submit]");
    await page.evaluate(() => show("b"));
    await page.waitForSelector('#detail[data-id="b"]');
    assert.match(await page.textContent("#facts"), /waits for a/);
    // a, still running, names what waits on it, each a link to its job.
    await page.evaluate(() => show("a"));
    await page.waitForSelector('#detail[data-id="a"]');
    assert.match(await page.textContent("#facts"), /waited for by b, cb/);
    await page.click('#facts a.job:text-is("cb")');
    await page.waitForSelector('#detail[data-id="cb"]');
    assert.match(await page.textContent("#facts"), /waits for a, b/);
    await waitFor(async () => (await w.job("cb"))?.status === "DONE", "the callback DONE");
    await page.evaluate(() => show("cb"));
    await page.waitForSelector('#detail[data-id="cb"]');
    assert.match(await page.textContent("#facts"), /batch of 2: 2 finished, 0 dead/);
    // Finished, a's dependents released, a still names its batch, a link to the callback.
    await page.evaluate(() => show("a"));
    await page.waitForSelector('#detail[data-id="a"]');
    const facts = await page.textContent("#facts");
    assert.ok(!facts.includes("waited for by"), facts);
    assert.match(facts, /· batch cb/);
    await page.click('#facts a.job:text-is("cb")');
    await page.waitForSelector('#detail[data-id="cb"]');
  } finally {
    await browser.close();
    await w.dispose();
  }
});

test("the dashboard pauses an ordering key, shows its waiting jobs, and resumes it", async () => {
  const w = await start();
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"] });
  try {
    const page = await browser.newPage();
    await page.goto(w.url.href);
    await page.fill("#token", TOKEN);
    await page.click("button[type=submit]");
    await page.fill("#p-key", "tenant/7");
    await page.click("#pause-form button");
    const row = 'tr[data-paused="tenant/7"]';
    await page.waitForSelector(row);
    const res = await w.api("POST", "/jobs", { payload: webhook("/ok/paused-key"), ordering_key: "tenant/7" });
    const id = res.json.jobs[0].id;
    await sleep(1_500);
    assert.equal((await w.job(id)).status, "PENDING", "a paused key's job waits");
    assert.equal(w.target.to("/ok/paused-key").length, 0);
    await page.click("#refresh");
    await page.waitForFunction(() => document.querySelector('tr[data-paused="tenant/7"] td:nth-child(3)')?.textContent === "1");
    await page.click(`${row} button[data-action="resume"]`);
    await waitFor(async () => (await w.job(id))?.status === "DONE", "the resumed key's job DONE");
    await page.waitForFunction(() => !document.querySelector('tr[data-paused="tenant/7"]'));
  } finally {
    await browser.close();
    await w.dispose();
  }
});

test("the dashboard cancels a running job from its view, and a key's jobs after counting them", async () => {
  const w = await start({ vars: { WEBHOOK_TIMEOUT_SECONDS: "60", ORDERING_LOCK_TTL: "120" } });
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking"] });
  try {
    const held = (await w.api("POST", "/jobs", { payload: webhook("/hold/30000/dash-held"), ordering_key: "a" })).json.jobs[0].id;
    const later = (await w.api("POST", "/jobs", { jobs: [1, 2].map((n) => ({ payload: webhook(`/ok/dash-later-${n}`), ordering_key: "b", delay_seconds: 600 })) })).json.jobs.map((j) => j.id);
    await waitFor(() => w.target.to("/hold/30000/dash-held").length === 1, "the held job running");
    const page = await browser.newPage();
    await page.goto(w.url.href);
    await page.fill("#token", TOKEN);
    await page.click("button[type=submit]");
    await page.selectOption("#f-status", "RUNNING");
    await page.click("#list-filter button");
    await page.click(`tr[data-job="${held}"] a.job`);
    await page.click('#detail button[data-action="cancel"]');
    await waitFor(async () => (await w.job(held))?.last_error === "cancelled", "the running job cancelled", 10_000);

    await page.fill("#c-key", "b");
    await page.click("#cancel-key-form button[type=submit]");
    await page.waitForFunction(() => document.querySelector("#c-result")?.dataset.matched === "2");
    assert.equal((await w.job(later[0])).status, "PENDING", "counting changes nothing");
    await page.click("#c-cancel");
    await page.waitForFunction(() => document.querySelector("#c-result")?.dataset.cancelled === "2");
    for (const id of later) assert.equal((await w.job(id)).last_error, "cancelled");
  } finally {
    await browser.close();
    await w.dispose();
  }
});
