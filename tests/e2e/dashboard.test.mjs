// The operator page in a real browser (headless Chromium): connect with the token, see the counts
// and the dead letter, redrive it, and watch it complete.
import { test } from "node:test";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";
import { start, webhook, waitFor, TOKEN } from "./harness.mjs";

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
    if (process.env.DASHBOARD_SCREENSHOT) await page.screenshot({ path: process.env.DASHBOARD_SCREENSHOT, fullPage: true });

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
