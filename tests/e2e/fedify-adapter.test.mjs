// client/fedify.js's own rules, in Node: child ids from the message (not its place), requests
// within orderly's body limit, and an enqueue after its task ended refused. The adapter's
// `cloudflare:workers` import is resolved to a bare WorkerEntrypoint here; the real Fedify on
// workerd is tests/e2e/fedify.test.mjs's.
import { test } from "node:test";
import assert from "node:assert/strict";
import { register } from "node:module";

register(
  "data:text/javascript," +
    encodeURIComponent(`
      export async function resolve(specifier, context, next) {
        if (specifier === "cloudflare:workers") return { url: "data:text/javascript,export class WorkerEntrypoint {}", shortCircuit: true };
        return next(specifier, context);
      }`),
);
const { OrderlyMessageQueue, chunks, MAX_REQUEST_BYTES } = await import("../../client/fedify.js");

/** A client that keeps each request's jobs. */
function recorder() {
  const requests = [];
  return { requests, client: { enqueueJobs: async (jobs) => { requests.push(jobs); return jobs.map(() => ({})); } } };
}

/** A federation whose fan-out task enqueues one outbox message per inbox, as Fedify builds them. */
function fanOut(queue, inboxes, late) {
  return {
    async processQueuedTask(_data, message) {
      for (const inbox of inboxes) {
        await queue.enqueue(
          { type: "outbox", id: crypto.randomUUID(), started: new Date().toISOString(), traceContext: { t: String(Math.random()) },
            inbox, activity: message.activity, attempt: 0 },
          { orderingKey: `${message.activity}\n${new URL(inbox).origin}` },
        );
      }
      // Started inside the task and not awaited by it: it enqueues after the task has ended.
      if (late) {
        late.push(new Promise((r) => setTimeout(r, 20)).then(() => queue.enqueue({ type: "outbox", id: crypto.randomUUID(), inbox: "https://late.test/inbox" })));
      }
    },
  };
}

const job = { id: "fedify-task-1", payload: { type: "fedify", message: { type: "fanout", id: "f1", activity: "https://a.test/activities/1" } } };

test("a re-run of a fan-out task enqueues the same jobs, whatever the order of its recipients", async () => {
  const inboxes = ["https://s1.test/inbox", "https://s2.test/inbox", "https://s3.test/inbox"];
  const ids = async (order) => {
    const r = recorder();
    const queue = new OrderlyMessageQueue({ client: r.client });
    await queue.runTask(fanOut(queue, order), undefined, job);
    return Object.fromEntries(r.requests.flat().map((j) => [j.payload.message.inbox, j.options.id]));
  };
  const first = await ids(inboxes);
  const again = await ids([...inboxes].reverse());
  assert.deepEqual(again, first, "each inbox's job has one id, from the message");
  assert.equal(new Set(Object.values(first)).size, 3);
  assert.ok(Object.values(first).every((id) => id.startsWith(`${job.id}/`)), JSON.stringify(first));
});

test("a fan-out's jobs are submitted in requests under orderly's body limit, in order", async () => {
  const r = recorder();
  const queue = new OrderlyMessageQueue({ client: r.client });
  const inboxes = Array.from({ length: 1000 }, (_, i) => `https://s${i}.test/inbox`);
  // Each message carries about 5 KB of keys, as Fedify's do.
  const keys = "k".repeat(5000);
  const federation = {
    async processQueuedTask() {
      for (const inbox of inboxes) await queue.enqueue({ type: "outbox", id: crypto.randomUUID(), inbox, keys }, {});
    },
  };
  await queue.runTask(federation, undefined, job);
  assert.ok(r.requests.length >= 5, `${r.requests.length} requests`);
  for (const jobs of r.requests) {
    assert.ok(Buffer.byteLength(JSON.stringify({ jobs })) < 1024 * 1024, "under POST /jobs' 1 MiB");
    assert.ok(jobs.length <= 500);
  }
  assert.deepEqual(r.requests.flat().map((j) => j.payload.message.inbox), inboxes, "every job, in order");
  assert.deepEqual(chunks([1, 2, 3], { maxJobs: 2 }), [[1, 2], [3]]);
  assert.equal(chunks([], {}).length, 0);
  assert.ok(MAX_REQUEST_BYTES < 1024 * 1024);
});

test("an enqueue after its task ended throws instead of being lost", async () => {
  const r = recorder();
  const queue = new OrderlyMessageQueue({ client: r.client });
  const late = [];
  await queue.runTask(fanOut(queue, ["https://s1.test/inbox"], late), undefined, job);
  await assert.rejects(late[0], /after its task \(orderly job fedify-task-1\) ended would be lost/);
  assert.equal(r.requests.flat().length, 1);
});

test("enqueueMany outside a task is one request, refuses one dedupe key for many, and getDepth counts waiting jobs", async () => {
  const r = recorder();
  const queue = new OrderlyMessageQueue({ client: { ...r.client, counts: async () => ({ PENDING: 4, RUNNING: 3, DONE: 9, DEAD: 1 }) } });
  const messages = [1, 2, 3].map((n) => ({ type: "outbox", id: `m${n}`, inbox: `https://s${n}.test/inbox` }));
  await queue.enqueueMany(messages, { orderingKey: "k" });
  assert.equal(r.requests.length, 1, "one request for the three messages");
  assert.deepEqual(r.requests[0].map((j) => [j.options.id, j.options.orderingKey]), [["fedify-m1", "k"], ["fedify-m2", "k"], ["fedify-m3", "k"]]);
  await assert.rejects(queue.enqueueMany(messages, { deduplicationKey: "once" }), /deduplicationKey names one job/);
  assert.equal(r.requests.length, 1, "nothing submitted for the refused call");
  assert.deepEqual(await queue.getDepth(), { queued: 4 }, "running jobs are not queued");
});

test("an outbox delivery's limit key is its inbox's origin, and can be chosen or turned off", async () => {
  const messages = [
    { type: "outbox", id: "m1", inbox: "https://mastodon.social/users/bob/inbox" },
    { type: "outbox", id: "m2", inbox: "not a url" },
    { type: "fanout", id: "m3", activity: "https://a.test/activities/1" },
  ];
  const limitKeys = async (options) => {
    const r = recorder();
    await new OrderlyMessageQueue({ client: r.client, ...options }).enqueueMany(messages, { orderingKey: "k" });
    return r.requests.flat().map((j) => j.options.limitKey);
  };
  assert.deepEqual(await limitKeys({}), ["https://mastodon.social", undefined, undefined]);
  assert.deepEqual(await limitKeys({ limitKeyOf: (m) => `tenant-${m.id}` }), ["tenant-m1", "tenant-m2", "tenant-m3"]);
  assert.deepEqual(await limitKeys({ limitKeyOf: null }), [undefined, undefined, undefined]);
});

test("a Fedify message's trace context is its job's: each run joins the trace it was enqueued in", async () => {
  const r = recorder();
  const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  await new OrderlyMessageQueue({ client: r.client }).enqueueMany([
    { type: "outbox", id: "t1", inbox: "https://a.test/inbox", traceContext: { traceparent, tracestate: "congo=t61" } },
    { type: "outbox", id: "t2", inbox: "https://b.test/inbox", traceContext: {} },
  ], { orderingKey: "k" });
  const [traced, plain] = r.requests.flat().map((j) => j.options);
  assert.deepEqual([traced.traceparent, traced.tracestate], [traceparent, "congo=t61"]);
  assert.deepEqual([plain.traceparent, plain.tracestate], [undefined, undefined]);
});
