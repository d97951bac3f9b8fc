#!/usr/bin/env node
// Moves a D1 ledger to SQLite Durable Object shards (docs/design.md §19.7), through the deployed
// worker's `POST /ledger/move` (copy the next page) and `GET /ledger/move` (compare the counts):
//
//   ADMIN_TOKEN=... node scripts/move-ledger.mjs --url https://orderly.example.workers.dev --shards 16
//
// Run it with delivery paused, LEDGER still "d1" and LEDGER_MOVING = "true" (the worker refuses
// every write and the cron does nothing meanwhile); it starts again from nothing (the shards
// emptied first) unless --after resumes it where it stopped, and copies every job with its history, waits
// and batches to the shard of its route, and with the last page every limit key's state, paused
// key and schedule (a copy run again replaces its rows), then prints the counts of D1 and of each
// shard, jobs and every other table's rows, and exits 1 unless they match. Then set LEDGER = "do", LEDGER_SHARDS = the same N,
// deploy, and resume delivery (docs/shards.md: "Moving a D1 ledger to shards").

/** Copies every page from `after` on (a move stopped part way resumes where it stopped: its
 * last page is printed), each page tried up to `tries` times, then verifies:
 * `{ pages, jobs, events, rows, verified, writesRefused }`. `requireRefused`: stop after the
 * first page unless the worker refuses writes meanwhile (`LEDGER_MOVING = "true"`). */
export async function moveLedger({ url, token, shards, after = "", limit = 100, tries = 3, requireRefused = false, fetch = globalThis.fetch, log = () => {}, sleep = (ms) => new Promise((r) => setTimeout(r, ms)) }) {
  const once = async (method, body, query = "") => {
    const target = method === "GET" ? `${url}/ledger/move?shards=${shards}${query}` : `${url}/ledger/move`;
    const res = await fetch(target, {
      method,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const json = await res.json().catch(() => ({}));
    if (res.status !== 200) throw Object.assign(new Error(`${method} /ledger/move answered ${res.status}: ${json.error ?? ""}`), { status: res.status });
    return json;
  };
  // A page copied again is the same copy: a failed one is tried again (a 4xx is not: it will not change).
  const call = async (method, body, query) => {
    for (let i = 1; ; i++) {
      try {
        return await once(method, body, query);
      } catch (e) {
        if (i >= tries || (e.status >= 400 && e.status < 500)) throw e;
        log(`${e.message}; trying again (${i} of ${tries - 1})`);
        await sleep(1000 * 2 ** i);
      }
    }
  };
  let pages = 0;
  let jobs = 0;
  let events = 0;
  let rows = 0;
  let writesRefused = true;
  for (;;) {
    let page;
    try {
      page = await call("POST", { shards, after, limit });
    } catch (e) {
      throw new Error(`${e.message}\nresume with --after ${JSON.stringify(after)} (the pages before it are copied)`);
    }
    pages += 1;
    jobs += page.jobs;
    events += page.events;
    rows += page.rows;
    writesRefused &&= page.writes_refused === true;
    log(`page ${pages} after ${JSON.stringify(after)}: ${page.jobs} jobs, ${page.events} history rows, ${page.rows} other rows`);
    if (requireRefused && !writesRefused) {
      throw new Error("the worker takes writes during the move: set LEDGER_MOVING = \"true\" and deploy first, or a job recorded meanwhile is lost at the switch (docs/shards.md)");
    }
    if (page.next === null || page.next === undefined) break;
    after = page.next;
  }
  // The check: the counts and the tables not a job's own, then every job, a page at a time (each
  // job's row and its own rows compared, each request bounded by the page).
  const verified = await call("GET");
  verified.checked = 0;
  verified.differs = [];
  for (let from = ""; ; ) {
    const page = await call("GET", undefined, `&after=${encodeURIComponent(from)}&limit=${limit}`);
    verified.checked += page.checked;
    verified.differs.push(...page.differs);
    verified.matches &&= page.matches;
    if (page.next === null || page.next === undefined) break;
    from = page.next;
  }
  return { pages, jobs, events, rows, verified, writesRefused };
}

async function main() {
  const arg = (name) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const url = arg("url")?.replace(/\/$/, "");
  const shards = Number(arg("shards"));
  const token = process.env.ADMIN_TOKEN;
  if (!url || !Number.isInteger(shards) || !token) {
    console.error("usage: ADMIN_TOKEN=... node scripts/move-ledger.mjs --url <worker url> --shards <N> [--after <id>] [--allow-writes]");
    process.exit(2);
  }
  // --after resumes a move that stopped (its last page is printed); --allow-writes moves without
  // LEDGER_MOVING, for a ledger nothing writes to.
  const after = arg("after") ?? "";
  const requireRefused = !process.argv.includes("--allow-writes");
  const { jobs, events, rows, verified } = await moveLedger({ url, token, shards, after, requireRefused, log: console.log });
  console.log(`copied ${jobs} jobs, ${events} history rows and ${rows} other rows`);
  const row = (name, c) => console.log(`${name.padEnd(10)} ${[c.PENDING, c.RUNNING, c.DONE, c.DEAD].map((n) => String(n).padStart(8)).join("")}`);
  console.log(`${"".padEnd(10)}  PENDING RUNNING    DONE    DEAD`);
  row("D1", verified.source);
  verified.per_shard.forEach((c, i) => row(`shard ${i}`, c));
  row("shards", verified.shards);
  console.log(`${"table".padEnd(14)}${"D1".padStart(8)}${"shards".padStart(8)}`);
  for (const t of verified.tables) console.log(`${t.table.padEnd(14)}${String(t.source).padStart(8)}${String(t.shards).padStart(8)}`);
  console.log(`${verified.checked} jobs compared one by one (row, history, waits, batch)${verified.differs.length ? `; differing: ${verified.differs.join(", ")}` : ""}`);
  if (!verified.matches) {
    console.error("the shards do not hold what D1 holds: do not switch");
    process.exit(1);
  }
  console.log(`the shards hold what D1 holds: set LEDGER = "do", LEDGER_SHARDS = "${shards}", deploy, resume delivery`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((e) => {
    console.error(e.message);
    process.exit(1);
  });
}
