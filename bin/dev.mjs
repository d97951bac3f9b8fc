// `npx orderly-queues dev [wrangler dev options]`: local development that runs what production
// runs. It applies the ledger's migrations to the local D1 database, starts `wrangler dev`, and
// fires the Worker's cron every minute, as Cloudflare does: `wrangler dev` fires no scheduled
// event by itself, so without this, maintenance never runs locally and no schedule ever fires.
// The cron is fired through wrangler's `--test-scheduled` route (`/__scheduled`), on the minute.
import { spawn, spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { join } from "node:path";

/** The wrangler the project installed (its `node_modules`), run with this Node. */
function wrangler(cwd) {
  try {
    const pkg = createRequire(join(cwd, "package.json")).resolve("wrangler/package.json");
    return [process.execPath, join(pkg, "..", "bin", "wrangler.js")];
  } catch {
    return ["wrangler"];
  }
}

/** The local URL wrangler dev says it is ready on, from its output. */
const READY = /Ready on (http:\/\/[^\s]+)/;

/** Milliseconds until the next whole minute, and a second into it (a cron tick's moment). */
export function untilNextMinute(now = Date.now()) {
  return 60_000 - (now % 60_000) + 1_000;
}

export async function run(args, { cwd = process.cwd(), log = console.log } = {}) {
  const [cmd, ...pre] = wrangler(cwd);
  const binding = args.includes("--d1") ? args[args.indexOf("--d1") + 1] : "DB";
  const devArgs = args.includes("--d1") ? args.filter((_, i) => i !== args.indexOf("--d1") && i !== args.indexOf("--d1") + 1) : args;
  const env = { ...process.env, WRANGLER_SEND_METRICS: process.env.WRANGLER_SEND_METRICS ?? "false" };
  const migrated = spawnSync(cmd, [...pre, "d1", "migrations", "apply", binding, "--local"], { cwd, env, stdio: "inherit" });
  if (migrated.status !== 0) {
    log(`orderly: the local ledger's migrations did not apply (wrangler d1 migrations apply ${binding} --local)`);
    process.exit(migrated.status ?? 1);
  }
  const dev = spawn(cmd, [...pre, "dev", "--test-scheduled", ...devArgs], { cwd, env, stdio: ["inherit", "pipe", "inherit"] });
  let timer;
  let url;
  const tick = async () => {
    timer = setTimeout(tick, untilNextMinute());
    try {
      const res = await fetch(`${url}/__scheduled?cron=${encodeURIComponent("* * * * *")}`);
      await res.text();
      if (!res.ok) log(`orderly: the cron run answered ${res.status}`);
    } catch (e) {
      log(`orderly: the cron run failed: ${e.message}`);
    }
  };
  dev.stdout.on("data", (chunk) => {
    process.stdout.write(chunk);
    const ready = !url && READY.exec(String(chunk));
    if (ready) {
      url = ready[1].replace(/\/$/, "");
      log(`orderly: firing the Worker's cron every minute, as Cloudflare does (wrangler dev fires none by itself): maintenance and schedules run locally`);
      timer = setTimeout(tick, untilNextMinute());
    }
  });
  const stop = (signal) => dev.kill(signal);
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
  dev.on("exit", (code, signal) => {
    clearTimeout(timer);
    process.exit(code ?? (signal ? 1 : 0));
  });
}
