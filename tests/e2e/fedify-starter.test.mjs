// The Fedify starter (`npx orderly-queues new <dir> --fedify`): a Fedify server with orderly as its
// queue in one Worker, run as a user runs it, with `npm start` and only Node on PATH. Its follower
// is a real Fedify server in this process (bob, on a local port): bob follows the starter's actor
// (Fedify verifies bob's signature and fetches his actor), the starter accepts through orderly, then
// posts, edits and deletes a note, and bob's inbox receives Create, Update and Delete in that order,
// once each, each verified by Fedify as signed by the starter's actor.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createFederation, generateCryptoKeyPair, MemoryKvStore } from "@fedify/fedify";
import { Accept, Create, Delete, Endpoints, Follow, Person, Update } from "@fedify/vocab";
import { NODE_ONLY, newWorker, npmStart, ONCE_IN_SHARDS_PASS, waitFor } from "./harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const HOST = "127.0.0.1";
const PORT = 8788;

/** bob: a Fedify server in this process, recording what reaches his inbox (Fedify verifies each signature). */
async function bob() {
  const got = [];
  let keys;
  const federation = createFederation({ kv: new MemoryKvStore(), allowPrivateAddress: true });
  federation
    .setActorDispatcher("/users/{identifier}", async (ctx, identifier) => {
      if (identifier !== "bob") return null;
      const pairs = await ctx.getActorKeyPairs(identifier);
      // A shared inbox, as most servers have: the starter records it and delivers there.
      return new Person({ id: ctx.getActorUri(identifier), preferredUsername: identifier, inbox: ctx.getInboxUri(identifier), endpoints: new Endpoints({ sharedInbox: ctx.getInboxUri() }), publicKey: pairs[0]?.cryptographicKey });
    })
    .setKeyPairsDispatcher(async () => {
      keys ??= await generateCryptoKeyPair("RSASSA-PKCS1-v1_5");
      return [keys];
    });
  const record = (type) => async (ctx, activity) => {
    got.push({ type, id: activity.id?.href, actor: activity.actorId?.href, object: activity.objectId?.href, shared: ctx.recipient == null });
  };
  federation.setInboxListeners("/users/{identifier}/inbox", "/inbox")
    .on(Accept, record("Accept")).on(Create, record("Create")).on(Update, record("Update")).on(Delete, record("Delete"));
  const server = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = chunks.length ? Buffer.concat(chunks) : undefined;
    const request = new Request(`http://${HOST}:${server.address().port}${req.url}`, { method: req.method, headers: req.headers, body });
    const response = await federation.fetch(request, { contextData: undefined });
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(Buffer.from(await response.arrayBuffer()));
  });
  await new Promise((r) => server.listen(0, HOST, r));
  const origin = `http://${HOST}:${server.address().port}`;
  return { got, federation, origin, close: () => server.close() };
}

/** Inbox servers standing in for many followers' servers: one at each of `hosts` loopback
 * addresses (127.0.2.1, 127.0.2.2, ...), on one port. Each answers 202 to every POST to its
 * shared inbox `/inbox` or a follower's own `/inbox/{n}`, and counts the deliveries to each inbox
 * (by URL), and whether each carried a signature. */
async function countingInboxes(hosts) {
  const count = new Map();
  let unsigned = 0;
  const handle = async (req, res) => {
    for await (const _ of req);
    if (req.method !== "POST" || !/^\/inbox(\/\d+)?$/.test(req.url)) return res.writeHead(404).end();
    if (!req.headers.signature && !req.headers["signature-input"]) unsigned += 1;
    const inbox = `http://${req.socket.localAddress}:${req.socket.localPort}${req.url}`;
    count.set(inbox, (count.get(inbox) ?? 0) + 1);
    res.writeHead(202).end();
  };
  const first = createServer(handle);
  await new Promise((r) => first.listen(0, "127.0.2.1", r));
  const port = first.address().port;
  const servers = [first];
  for (let h = 2; h <= hosts; h++) {
    const server = createServer(handle);
    await new Promise((r) => server.listen(port, `127.0.2.${h}`, r));
    servers.push(server);
  }
  return {
    count,
    unsigned: () => unsigned,
    port,
    close: () => servers.forEach((s) => s.close()),
  };
}

test("`new --fedify`: a Fedify server on orderly in one Worker, under `npm start` with no Rust, delivers Create, Update, Delete to a follower in order, signed, once each; a note reaches 10,000 followers", { ...ONCE_IN_SHARDS_PASS, timeout: 1_200_000 }, async () => {
  const scratch = mkdtempSync(join(tmpdir(), "orderly-fedify-"));
  for (const tool of ["cargo", "rustc", "worker-build"]) {
    assert.throws(() => execFileSync("which", [tool], { env: NODE_ONLY, stdio: "ignore" }), `${tool} is not on the test's PATH`);
  }
  // Fedify, wrangler and TypeScript the repository's, at the versions the manifest names.
  const app = newWorker(scratch, "social", ["--fedify"], ["wrangler", "typescript", "@fedify/fedify", "@fedify/vocab"]);
  const manifest = JSON.parse(readFileSync(join(app, "package.json"), "utf8"));
  const fedify = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).devDependencies["@fedify/fedify"];
  assert.deepEqual([manifest.dependencies["@fedify/fedify"], manifest.dependencies["@fedify/vocab"]], [fedify, fedify], "one coherent Fedify version");
  execFileSync("npm", ["run", "check"], { cwd: app, env: NODE_ONLY, encoding: "utf8" });
  const vars = readFileSync(join(app, ".dev.vars"), "utf8");
  const token = vars.match(/^ADMIN_TOKEN=(\w+)$/m)[1];
  // Off unless asked for; bob is on this machine (127.0.0.1), so this test asks.
  assert.match(vars, /^ALLOW_PRIVATE_ADDRESS=false$/m);
  writeFileSync(join(app, ".dev.vars"), vars.replace(/^ALLOW_PRIVATE_ADDRESS=false$/m, "ALLOW_PRIVATE_ADDRESS=true"));

  const follower = await bob();
  try {
    await deliver(app, token, follower);
  } finally {
    // A failure anywhere must not leave bob's server holding the test file open.
    follower.close();
    rmSync(scratch, { recursive: true, force: true });
  }
});

/** The starter's two halves under `npm start`: bob's follow and a note's life, then a note to
 * 10,000 followers. */
async function deliver(app, token, follower) {
  const dev = npmStart(app, ["--ip", HOST, "--port", String(PORT)]);
  const base = `http://${HOST}:${PORT}`;
  const actor = `${base}/users/social`;
  try {
    await waitFor(async () => /Ready on/.test(dev.output()), "wrangler dev ready", 90_000);
    // The actor's first requests, at once: each makes a key pair, one is recorded, all answer it.
    const firsts = await Promise.all([1, 2, 3, 4, 5].map(async () => (await fetch(actor, { headers: { accept: "application/activity+json" } })).json()));
    const keys = new Set(firsts.map((p) => p.publicKey?.publicKeyPem));
    assert.equal(keys.size, 1, `one key across concurrent first requests: ${keys.size}`);
    const person = await (await fetch(actor, { headers: { accept: "application/activity+json" } })).json();
    assert.equal(person.publicKey.publicKeyPem, [...keys][0], "and the same key after");
    assert.equal(person.inbox, `${actor}/inbox`);
    // bob follows the starter's actor; its Accept reaches him through orderly.
    const ctx = follower.federation.createContext(new URL(follower.origin), undefined);
    await ctx.sendActivity({ identifier: "bob" }, { id: new URL(actor), inboxId: new URL(person.inbox) },
      new Follow({ id: new URL(`${follower.origin}/follows/1`), actor: ctx.getActorUri("bob"), object: new URL(actor) }));
    await waitFor(async () => follower.got.some((a) => a.type === "Accept"), "bob's follow accepted", 60_000);

    const notes = async (method, path, body) => {
      const res = await fetch(`${base}${path}`, { method, headers: { authorization: `Bearer ${token}` }, body: body && JSON.stringify(body) });
      assert.equal(res.status, 202, await res.clone().text());
      return res.json();
    };
    // The notes API is the admin's alone.
    for (const authorization of [undefined, "Bearer wrong", `Bearer ${token}x`]) {
      const res = await fetch(`${base}/notes`, { method: "POST", headers: authorization ? { authorization } : {}, body: JSON.stringify({ content: "no" }) });
      assert.equal(res.status, 401, await res.text());
    }
    const { id, url } = await notes("POST", "/notes", { content: "Hello, fediverse!" });
    await notes("PUT", `/notes/${id}`, { content: "Hello again" });
    await notes("DELETE", `/notes/${id}`);
    await waitFor(async () => follower.got.filter((a) => a.type !== "Accept").length >= 3, "three activities in bob's inbox", 90_000);
    // Any more would arrive within a few seconds (a repeat, a late retry): none may.
    await new Promise((r) => setTimeout(r, 3000));
    const about = follower.got.filter((a) => a.type !== "Accept");
    assert.deepEqual(about.map((a) => a.type), ["Create", "Update", "Delete"], "in the order sent, once each");
    assert.ok(about.every((a) => a.actor === actor), "each verified by Fedify as the starter's actor's");
    assert.ok(about.every((a) => a.shared), "each to bob's server's shared inbox, which his actor names");
    assert.equal(about[2].object, url);
    // Each delivery was an orderly job, DONE, on the note's key for bob's inbox.
    const jobs = await (await fetch(`${base}/orderly/jobs?type=fedify&limit=100`, { headers: { authorization: `Bearer ${token}` } })).json();
    const toBob = jobs.jobs.filter((j) => j.ordering_key?.startsWith(url));
    assert.equal(toBob.length, 3, JSON.stringify(jobs.jobs));
    assert.ok(toBob.every((j) => j.status === "DONE"));
  } catch (e) {
    console.log(`npm start said:\n${dev.output()}`);
    throw e;
  } finally {
    await dev.stop();
  }

  // A real account's size: 10,000 followers recorded in the app's D1 (as Follows would leave
  // them), and one note. Every follower gets it once, signed: read a page at a time, fanned out
  // by Fedify, each delivery an orderly job (KV's 1,000 operations per invocation once ended a
  // note past about 990 followers). 9,000 are on 96 servers with a shared inbox (about 94 each,
  // about 104 followers a server in all, so most pages of 500 end inside a server's followers:
  // its shared inbox still gets the note once); 1,000 have only their own inboxes, each
  // delivered to on its own: 1,096 deliveries in all.
  const HOSTS = 96;
  const FOLLOWERS = 10_000;
  const OWN = 1_000;
  const inboxes = await countingInboxes(HOSTS);
  const server = `'http://127.0.2.' || (i % ${HOSTS} + 1) || ':${inboxes.port}'`;
  const seed = `INSERT INTO fedify_follower (id, inbox, shared_inbox) WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ${FOLLOWERS}) SELECT ${server} || '/users/' || i, ${server} || '/inbox/' || i, CASE WHEN i < ${FOLLOWERS - OWN} THEN ${server} || '/inbox' END FROM n`;
  execFileSync(join(app, "node_modules", ".bin", "wrangler"), ["d1", "execute", "DB", "--local", "--command", seed], { cwd: app, env: NODE_ONLY, stdio: "ignore" });
  const DELIVERIES = HOSTS + OWN;
  const again = npmStart(app, ["--ip", HOST, "--port", String(PORT)]);
  try {
    await waitFor(async () => /Ready on/.test(again.output()), "wrangler dev ready", 90_000);
    const started = Date.now();
    const res = await fetch(`${base}/notes`, { method: "POST", headers: { authorization: `Bearer ${token}` }, body: JSON.stringify({ content: "To everyone" }) });
    assert.equal(res.status, 202, await res.clone().text());
    await waitFor(async () => inboxes.count.size >= DELIVERIES, `the note in ${DELIVERIES} inboxes`, 600_000);
    console.log(`a note reached ${FOLLOWERS} followers (${DELIVERIES} inboxes) in ${((Date.now() - started) / 1000).toFixed(0)} s`);
    await new Promise((r) => setTimeout(r, 3000));
    const twice = [...inboxes.count.values()].filter((c) => c !== 1).length;
    assert.equal(twice, 0, "each inbox got the note once");
    const shared = [...inboxes.count.keys()].filter((inbox) => inbox.endsWith("/inbox"));
    assert.equal(shared.length, HOSTS, "each server's shared inbox, once for all its followers");
    assert.equal(inboxes.count.size, DELIVERIES, "and each follower without one, at its own inbox");
    assert.equal(inboxes.unsigned(), 0, "every delivery signed");
    // bob, a follower too, got it once, in his own page of followers.
    await waitFor(async () => follower.got.filter((a) => a.type === "Create").length >= 2, "the note in bob's inbox", 60_000);
    assert.equal(follower.got.filter((a) => a.type === "Create").length, 2);
  } catch (e) {
    console.log(`npm start said:\n${again.output().slice(-20_000)}; ${inboxes.count.size} inboxes reached`);
    throw e;
  } finally {
    await again.stop();
    inboxes.close();
  }
}
