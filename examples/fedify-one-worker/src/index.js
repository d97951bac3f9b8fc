// A Fedify app and orderly in one Worker (docs/fedify.md: "In one Worker"): orderly embedded from
// the npm package (`orderly-queues/worker`, the compiled worker: no Rust toolchain), Fedify's queue
// submitting to it through a call in the isolate (`service(env)`), and its tasks run by the
// `fedify` handler in the same isolate. No second Worker, no service binding, no network hop.
// Bundled as wrangler bundles it (nodejs_compat); run by tests/e2e/fedify.test.mjs, which delivers
// to in-process inboxes.
import { createExponentialBackoffPolicy, createFederation, generateCryptoKeyPair, MemoryKvStore } from "@fedify/fedify";
import { Create, Delete, Note, Person, Update } from "@fedify/vocab";
import { fedifyHandler, OrderlyMessageQueue } from "orderly-queues/fedify";
import { orderly } from "orderly-queues/worker";
// The ledger's shards, for LEDGER = "do".
export { OrderlyLedger } from "orderly-queues/worker";

let app;
let keyPair;

/**
 * The federation, built once per isolate: orderly as its queue, one actor with a key pair.
 * `OUTBOX_MAX_ATTEMPTS`, if set, is Fedify's outbox retry policy's limit (Fedify's default is 10):
 * orderly carries each attempt's count into the next run, so Fedify's policy ends the retries.
 */
function setup(env) {
  if (app) return app;
  // orderly's API in this isolate; the token may only submit and read (PRODUCER_TOKEN).
  const queue = new OrderlyMessageQueue({ token: env.PRODUCER_TOKEN, service: worker.service(env) });
  const maxAttempts = Number(env.OUTBOX_MAX_ATTEMPTS);
  const federation = createFederation({
    kv: new MemoryKvStore(),
    queue,
    // orderly runs each task through the `fedify` handler below; nothing may call queue.listen().
    manuallyStartQueue: true,
    allowPrivateAddress: true,
    ...(maxAttempts > 0 ? { outboxRetryPolicy: createExponentialBackoffPolicy({ maxAttempts, initialDelay: { seconds: 1 } }) } : {}),
  });
  federation
    .setActorDispatcher("/users/{identifier}", async (ctx, identifier) => {
      const keys = await ctx.getActorKeyPairs(identifier);
      return new Person({
        id: ctx.getActorUri(identifier),
        preferredUsername: identifier,
        inbox: ctx.getInboxUri(identifier),
        publicKey: keys[0]?.cryptographicKey,
      });
    })
    .setKeyPairsDispatcher(async () => {
      keyPair ??= await generateCryptoKeyPair("RSASSA-PKCS1-v1_5");
      return [keyPair];
    });
  federation.setInboxListeners("/users/{identifier}/inbox", "/inbox");
  app = { federation, queue, contextData: undefined };
  return app;
}

const ACTIVITIES = { Create, Update, Delete };

/** The Worker: orderly (its API and dashboard under /orderly) with Fedify's task handler, and the app. */
const worker = orderly({
  handlers: { fedify: fedifyHandler(setup) },
  async fetch(request, env) {
    const { federation } = setup(env);
    const url = new URL(request.url);
    if (request.method === "POST" && url.pathname === "/send") {
      // {kind, n, object, recipients: [{id, inbox}], fanout?}: one activity about `object` to each
      // inbox, ordered per object (Fedify appends each recipient's origin to the key).
      const { kind, n, object, recipients, fanout } = await request.json();
      const ctx = federation.createContext(request, undefined);
      const activity = new ACTIVITIES[kind]({
        id: new URL(`/activities/${n}`, url),
        actor: ctx.getActorUri("alice"),
        object: new Note({ id: new URL(object), content: `version ${n}` }),
      });
      await ctx.sendActivity(
        { identifier: "alice" },
        recipients.map((r) => ({ id: new URL(r.id), inboxId: new URL(r.inbox) })),
        activity,
        // fanout "force": one fan-out task that enqueues the outbox messages when it runs.
        { orderingKey: object, ...(fanout ? { fanout } : {}) },
      );
      return new Response(null, { status: 202 });
    }
    return federation.fetch(request, { contextData: undefined });
  },
});

export default worker;
