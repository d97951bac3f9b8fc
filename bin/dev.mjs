// `npx orderly-queues dev [wrangler dev options]`: local development that runs what production
// runs. It applies the ledger's migrations to the local D1 database, starts `wrangler dev`, and
// fires the Worker's cron every minute, as Cloudflare does: `wrangler dev` fires no scheduled
// event by itself, so without this, maintenance never runs locally and no schedule ever fires.
// The cron is fired through wrangler's `--test-scheduled` route (`/__scheduled`), on the minute,
// as `* * * * *` (orderly's maintenance and schedules run on every tick whatever its expression).
// `--d1 <binding>` names the ledger's D1 binding (default `DB`); `--config`, `--env` and
// `--persist-to` reach the migrations too, so they land where `wrangler dev` reads.
import { spawn, spawnSync } from "node:child_process";
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
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

/** The local URL wrangler dev says it is ready on, in a line of its output (colours taken out). */
export function readyUrl(line) {
  const ready = /Ready on (https?:\/\/[^\s]+)/.exec(line.replace(/\x1b\[[0-9;]*m/g, ""));
  return ready ? ready[1].replace(/\/$/, "") : undefined;
}

/** Milliseconds until the next whole minute, and a second into it (a cron tick's moment). */
export function untilNextMinute(now = Date.now()) {
  return 60_000 - (now % 60_000) + 1_000;
}

/** Fires one cron run at the dev server `url` (wrangler's `/__scheduled` route) and answers its
 * HTTP status. Over https the certificate is not checked: `wrangler dev --local-protocol https`
 * serves a self-signed one, made for this server, which Node's `fetch` refuses; the request is to
 * the server this command started, at the address it printed, and carries nothing secret. */
export function fireCron(url) {
  const target = new URL(`${url}/__scheduled?cron=${encodeURIComponent("* * * * *")}`);
  const send = target.protocol === "https:" ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = send(target, { rejectUnauthorized: false }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode));
      res.on("error", reject);
    });
    req.setTimeout(60_000, () => req.destroy(new Error("no answer within 60 s")));
    req.on("error", reject);
    req.end();
  });
}

/** `args` split: the D1 binding (`--d1`), the options the migrations share with `wrangler dev`, and the rest. */
export function options(args) {
  const rest = [...args];
  const take = (name) => {
    const i = rest.indexOf(name);
    if (i < 0) return undefined;
    const value = rest[i + 1];
    if (value === undefined || value.startsWith("-")) throw new Error(`${name} needs a value`);
    rest.splice(i, 2);
    return value;
  };
  const binding = take("--d1") ?? "DB";
  const shared = [];
  for (const [i, a] of rest.entries()) {
    if (["--config", "-c", "--env", "-e", "--persist-to"].includes(a) && rest[i + 1] !== undefined) shared.push(a, rest[i + 1]);
    if (/^--(config|env|persist-to)=/.test(a)) shared.push(a);
  }
  return { binding, shared, dev: rest };
}

export async function run(args, { cwd = process.cwd(), log = console.log } = {}) {
  const [cmd, ...pre] = wrangler(cwd);
  let opts;
  try {
    opts = options(args);
  } catch (e) {
    log(`orderly dev: ${e.message}`);
    process.exit(2);
  }
  const env = { ...process.env, WRANGLER_SEND_METRICS: process.env.WRANGLER_SEND_METRICS ?? "false" };
  const migrated = spawnSync(cmd, [...pre, "d1", "migrations", "apply", opts.binding, "--local", ...opts.shared], { cwd, env, stdio: "inherit" });
  if (migrated.error || migrated.status !== 0) {
    const why = migrated.error ? `wrangler did not start: ${migrated.error.message}` : `wrangler d1 migrations apply ${opts.binding} --local failed`;
    log(`orderly dev: the local ledger's migrations did not apply (${why})`);
    process.exit(migrated.status || 1);
  }
  const dev = spawn(cmd, [...pre, "dev", "--test-scheduled", ...opts.dev], { cwd, env, stdio: ["inherit", "pipe", "inherit"] });
  let timer;
  let url;
  let ticked = false;
  const tick = async () => {
    timer = setTimeout(tick, untilNextMinute());
    try {
      const status = await fireCron(url);
      if (status < 200 || status > 299) log(`orderly dev: the cron run answered ${status}`);
      else if (!ticked) log(`orderly dev: the first cron run answered ${status}`);
      ticked = true;
    } catch (e) {
      log(`orderly dev: the cron run failed: ${e.message}`);
    }
  };
  // Whole lines: wrangler's output may arrive in pieces.
  let partial = "";
  dev.stdout.on("data", (chunk) => {
    process.stdout.write(chunk);
    const lines = (partial + chunk).split("\n");
    partial = lines.pop();
    for (const line of lines) {
      const ready = url ? undefined : readyUrl(line);
      if (ready) {
        url = ready;
        log(`orderly: firing the Worker's cron every minute, as Cloudflare does (wrangler dev fires none by itself): maintenance and schedules run locally`);
        timer = setTimeout(tick, untilNextMinute());
      }
    }
  });
  // Ctrl-C in a terminal reaches wrangler with this process's group; a SIGINT sent to this process
  // alone (a process manager, an editor's stop button) must end wrangler too. Either way this
  // process waits for wrangler to end rather than ending first; a second SIGINT ends it at once.
  let interrupted = 0;
  const forward = (signal) => () => {
    interrupted += 1;
    if (interrupted > 1) dev.kill("SIGKILL");
    else setTimeout(() => dev.exitCode === null && dev.signalCode === null && dev.kill(signal), 2000).unref();
  };
  process.on("SIGINT", forward("SIGINT"));
  process.on("SIGTERM", forward("SIGTERM"));
  dev.on("error", (e) => {
    log(`orderly dev: wrangler did not start: ${e.message}`);
    process.exit(1);
  });
  dev.on("close", (code, signal) => {
    clearTimeout(timer);
    process.exit(code ?? (signal ? 1 : 0));
  });
}
