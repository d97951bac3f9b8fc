// {{name}}: a Fedify server with orderly as its queue, in one Worker. Fedify speaks ActivityPub (the
// actor, its inbox, signatures); orderly runs Fedify's deliveries with strict order per inbox and
// per note, retries, dead letters and a dashboard (under /orderly). No second Worker, no Rust.
//
//   POST   /notes       {"content"}   a note, sent to every follower as Create
//   PUT    /notes/{id}  {"content"}   sent as Update
//   DELETE /notes/{id}                sent as Delete
// each with `authorization: Bearer <ADMIN_TOKEN>`. Every follower's inbox gets a note's activities
// in the order they were sent, once each, signed.
import {
  createFederation,
  exportJwk,
  generateCryptoKeyPair,
  importJwk,
  type Context,
  type Federation,
} from "@fedify/fedify";
import { Accept, Create, Delete, Follow, Note, Person, Tombstone, Undo, Update } from "@fedify/vocab";
import { fedifyHandler, OrderlyMessageQueue } from "orderly-queues/fedify";
import { orderly } from "orderly-queues/worker";
import { WorkersKvStore, type KvNamespace } from "./kv";
import { actorKeys, followers, forgetFollower, recordFollower, type D1Database } from "./d1";
// The ledger's shards, for LEDGER = "do".
export { OrderlyLedger } from "orderly-queues/worker";

interface Env {
  FEDIFY_KV: KvNamespace;
  /** The app's D1 database: the actor's keys and its followers (and orderly's ledger). */
  DB: D1Database;
  ACTOR: string;
  ADMIN_TOKEN: string;
  PRODUCER_TOKEN: string;
  /** "true" lets Fedify reach private addresses and follower inboxes on plain http: local
   * development with servers on this machine only. */
  ALLOW_PRIVATE_ADDRESS?: string;
}

interface App {
  federation: Federation<void>;
  queue: OrderlyMessageQueue;
  store: WorkersKvStore;
}

let app: App | undefined;

/** The federation, built once per isolate, with orderly as its queue. */
function setup(env: Env): App {
  if (app) return app;
  const store = new WorkersKvStore(env.FEDIFY_KV);
  // Fedify's queue is orderly's API in this isolate: a submission is a call, not a network hop.
  const queue: OrderlyMessageQueue = new OrderlyMessageQueue({ token: env.PRODUCER_TOKEN, service: worker.service(env) });
  const federation: Federation<void> = createFederation<void>({
    kv: store,
    queue,
    // orderly runs each of Fedify's tasks through the `fedify` handler below.
    manuallyStartQueue: true,
    allowPrivateAddress: env.ALLOW_PRIVATE_ADDRESS === "true",
  });
  federation
    .setActorDispatcher("/users/{identifier}", async (ctx, identifier) => {
      if (identifier !== env.ACTOR) return null;
      const keys = await ctx.getActorKeyPairs(identifier);
      return new Person({
        id: ctx.getActorUri(identifier),
        preferredUsername: identifier,
        inbox: ctx.getInboxUri(identifier),
        publicKey: keys[0]?.cryptographicKey,
        assertionMethods: keys.map((k) => k.multikey),
      });
    })
    .setKeyPairsDispatcher(async (_ctx, identifier) => {
      // One RSA key pair, made on first use and recorded in D1 if none is yet, never replaced: two
      // isolates' first requests keep the same one (followers verify every signature against it).
      // A key an earlier version kept in KV is the one recorded.
      const kept = await actorKeys(env.DB, identifier, async () => {
        const old = await store.get<{ privateKey: JsonWebKey; publicKey: JsonWebKey }>(["keys", identifier]);
        if (old) return old;
        const pair = await generateCryptoKeyPair("RSASSA-PKCS1-v1_5");
        return { privateKey: await exportJwk(pair.privateKey), publicKey: await exportJwk(pair.publicKey) };
      });
      return [{ privateKey: await importJwk(kept.privateKey, "private"), publicKey: await importJwk(kept.publicKey, "public") }];
    });
  federation.setObjectDispatcher(Note, "/notes/{id}", async (ctx, { id }) => {
    const note = await store.get<{ content: string }>(["notes", id]);
    return note ? new Note({ id: ctx.getObjectUri(Note, { id }), attribution: ctx.getActorUri(env.ACTOR), content: note.content }) : null;
  });
  federation
    .setInboxListeners("/users/{identifier}/inbox", "/inbox")
    .on(Follow, async (ctx, follow) => {
      if (follow.objectId?.href !== ctx.getActorUri(env.ACTOR).href || !follow.actorId) return;
      const follower = await follow.getActor();
      if (!follower?.id || !follower.inboxId) return;
      // Deliveries go to https inboxes only (plain http to servers on this machine while developing).
      const schemes = env.ALLOW_PRIVATE_ADDRESS === "true" ? ["https:", "http:"] : ["https:"];
      if (!schemes.includes(follower.inboxId.protocol)) return;
      const shared = follower.endpoints?.sharedInbox;
      const sharedInbox = shared && schemes.includes(shared.protocol) ? shared.href : null;
      await recordFollower(env.DB, { id: follower.id.href, inbox: follower.inboxId.href, sharedInbox });
      await ctx.sendActivity({ identifier: env.ACTOR }, follower, new Accept({ actor: ctx.getActorUri(env.ACTOR), object: follow }));
    })
    .on(Undo, async (_ctx, undo) => {
      const follow = await undo.getObject();
      if (!(follow instanceof Follow) || !undo.actorId) return;
      await forgetFollower(env.DB, undo.actorId.href);
    });
  app = { federation, queue, store };
  return app;
}

/** Sends `activity` about the note `id` to every follower, in order per inbox and note: the
 * followers read from D1 a page at a time, each page one send (Fedify fans it out through
 * orderly), so a note reaches 10,000 followers within the platform's per-invocation limits. A
 * server with a shared inbox gets one delivery for all its followers, not one per follower: a
 * shared inbox one page sent to is left out of the pages after it. */
async function toFollowers(ctx: Context<void>, env: Env, id: string, activity: Create | Update | Delete) {
  const sent = new Set<string>();
  for await (const page of followers(env.DB)) {
    const recipients = page
      .filter((f) => !f.sharedInbox || !sent.has(f.sharedInbox))
      .map((f) => ({ id: new URL(f.id), inboxId: new URL(f.inbox), endpoints: { sharedInbox: f.sharedInbox ? new URL(f.sharedInbox) : null } }));
    if (recipients.length === 0) continue;
    // orderly keeps each inbox's activities about one note in order (Fedify adds the inbox's origin).
    await ctx.sendActivity({ identifier: env.ACTOR }, recipients, activity, { orderingKey: ctx.getObjectUri(Note, { id }).href, preferSharedInbox: true });
    for (const f of page) if (f.sharedInbox) sent.add(f.sharedInbox);
  }
}

/** Whether `request` carries the admin token: none set, none accepted; compared by digest, in constant time. */
async function isAdmin(request: Request, env: Env): Promise<boolean> {
  if (!env.ADMIN_TOKEN) return false;
  const digest = async (text: string) => new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  const [given, wanted] = await Promise.all([digest(request.headers.get("authorization") ?? ""), digest(`Bearer ${env.ADMIN_TOKEN}`)]);
  return given.reduce((diff, b, i) => diff | (b ^ wanted[i]), 0) === 0;
}

/** The notes API: POST /notes, PUT /notes/{id}, DELETE /notes/{id}, with the admin token. */
async function notes(request: Request, env: Env): Promise<Response | undefined> {
  const url = new URL(request.url);
  const [, first, id] = url.pathname.split("/");
  if (first !== "notes" || request.method === "GET") return undefined;
  if (!(await isAdmin(request, env))) return Response.json({ error: "unauthorized: the admin token (ADMIN_TOKEN) is needed" }, { status: 401 });
  const { federation, store } = setup(env);
  const ctx = federation.createContext(request, undefined);
  const actor = ctx.getActorUri(env.ACTOR);
  const content = async () => {
    const body = (await request.json().catch(() => null)) as { content?: unknown } | null;
    return typeof body?.content === "string" && body.content !== "" ? body.content : null;
  };
  if (request.method === "POST" && !id) {
    const text = await content();
    if (!text) return Response.json({ error: "content: a non-empty string" }, { status: 400 });
    const note = crypto.randomUUID();
    await store.set(["notes", note], { content: text });
    const object = new Note({ id: ctx.getObjectUri(Note, { id: note }), attribution: actor, content: text });
    await toFollowers(ctx, env, note, new Create({ id: new URL(`#create`, object.id!), actor, object }));
    return Response.json({ id: note, url: object.id!.href }, { status: 202 });
  }
  if (!id || !(await store.get(["notes", id]))) return Response.json({ error: "no such note" }, { status: 404 });
  const object = ctx.getObjectUri(Note, { id });
  if (request.method === "PUT") {
    const text = await content();
    if (!text) return Response.json({ error: "content: a non-empty string" }, { status: 400 });
    await store.set(["notes", id], { content: text });
    const activity = new Update({ id: new URL(`#update-${Date.now()}`, object), actor, object: new Note({ id: object, attribution: actor, content: text }) });
    await toFollowers(ctx, env, id, activity);
    return Response.json({ id }, { status: 202 });
  }
  if (request.method === "DELETE") {
    await store.delete(["notes", id]);
    await toFollowers(ctx, env, id, new Delete({ id: new URL(`#delete`, object), actor, object: new Tombstone({ id: object }) }));
    return Response.json({ id }, { status: 202 });
  }
  return Response.json({ error: "method not allowed" }, { status: 405 });
}

const worker: ReturnType<typeof orderly> = orderly({
  handlers: { fedify: fedifyHandler(setup) },
  fetch: async (request: Request, env: Env): Promise<Response> =>
    (await notes(request, env)) ?? setup(env).federation.fetch(request, { contextData: undefined }),
});

export default worker;
