#!/usr/bin/env node
// Moves a D1 ledger to SQLite Durable Object shards (docs/design.md §19.7), through the deployed
// worker's `POST /ledger/move` (copy the next page) and `GET /ledger/move` (compare the counts):
//
//   ADMIN_TOKEN=... node scripts/move-ledger.mjs --url https://orderly.example.workers.dev --shards 16
//
// Run it with delivery paused and LEDGER still "d1"; it copies every job with its history, waits
// and batches to the shard of its route, and with the last page every limit key's state, paused
// key and schedule (a copy run again replaces its rows), then prints the counts of D1 and of each
// shard, jobs and every other table's rows, and exits 1 unless they match. Then set LEDGER = "do", LEDGER_SHARDS = the same N,
// deploy, and resume delivery (docs/shards.md: "Moving a D1 ledger to shards").

/** Copies every page, then verifies: `{ pages, jobs, events, rows, verified }`. */
export async function moveLedger({ url, token, shards, limit = 100, fetch = globalThis.fetch, log = () => {} }) {
  const call = async (method, body) => {
    const target = method === "GET" ? `${url}/ledger/move?shards=${shards}` : `${url}/ledger/move`;
    const res = await fetch(target, {
      method,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const json = await res.json().catch(() => ({}));
    if (res.status !== 200) throw new Error(`${method} /ledger/move answered ${res.status}: ${json.error ?? ""}`);
    return json;
  };
  let after = "";
  let pages = 0;
  let jobs = 0;
  let events = 0;
  let rows = 0;
  for (;;) {
    const page = await call("POST", { shards, after, limit });
    pages += 1;
    jobs += page.jobs;
    events += page.events;
    rows += page.rows;
    log(`page ${pages}: ${page.jobs} jobs, ${page.events} history rows, ${page.rows} other rows`);
    if (page.next === null || page.next === undefined) break;
    after = page.next;
  }
  const verified = await call("GET");
  return { pages, jobs, events, rows, verified };
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
    console.error("usage: ADMIN_TOKEN=... node scripts/move-ledger.mjs --url <worker url> --shards <N>");
    process.exit(2);
  }
  const { jobs, events, rows, verified } = await moveLedger({ url, token, shards, log: console.log });
  console.log(`copied ${jobs} jobs, ${events} history rows and ${rows} other rows`);
  const row = (name, c) => console.log(`${name.padEnd(10)} ${[c.PENDING, c.RUNNING, c.DONE, c.DEAD].map((n) => String(n).padStart(8)).join("")}`);
  console.log(`${"".padEnd(10)}  PENDING RUNNING    DONE    DEAD`);
  row("D1", verified.source);
  verified.per_shard.forEach((c, i) => row(`shard ${i}`, c));
  row("shards", verified.shards);
  console.log(`${"table".padEnd(14)}${"D1".padStart(8)}${"shards".padStart(8)}`);
  for (const t of verified.tables) console.log(`${t.table.padEnd(14)}${String(t.source).padStart(8)}${String(t.shards).padStart(8)}`);
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
