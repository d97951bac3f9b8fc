// Fedify on orderly (design §14): `OrderlyMessageQueue` is a Fedify 2.x `MessageQueue` that hands
// Fedify's tasks to orderly, which runs them in strict per-key order through a service handler:
// the Fedify worker exports `orderlyHandler(...)`'s `WorkerEntrypoint`, which calls
// `federation.processQueuedTask` for each job. Types: fedify.d.ts. Needs `nodejs_compat` (for
// AsyncLocalStorage), which Fedify itself needs on Workers.
//
// - In one Worker with orderly embedded (`orderly-queues/worker`), `fedifyHandler(setup)` is the
//   "fedify" type's handler and the queue submits through `app.service(env)`: no second Worker.
// - Jobs are of type "fedify", sensitive (their payloads carry private keys: orderly seals them
//   under PAYLOAD_KEY and shows them "redacted"), keyed by Fedify's `orderingKey` as given.
// - An outbox delivery's limit key is its inbox's origin (design §20): a policy in orderly's
//   LIMITS for that origin (or a prefix such as `https://*`) throttles, caps and breaks the
//   circuit for that one server, and holds only its own deliveries (`limitKeyOf` changes it).
// - A message's job id is derived from its Fedify id, so enqueueing it twice is idempotent; a
//   message enqueued while a task runs gets an id derived from the task's job and the message
//   itself (a digest of it without the fields Fedify makes anew each time: `id`, `started`,
//   `traceContext`), so a retried task (whose Fedify ids are new) enqueues the same jobs again,
//   whatever their order or number. An enqueue after its task has ended throws: it would be lost.
// - Retry in place: while a task runs, Fedify re-enqueues the message it is processing (same id,
//   its `attempt` counted up, its circuit-breaker state noted) to honour a `Retry-After` or an
//   open circuit breaker. Appended as a new job it would land behind later messages of its key;
//   instead the running job is snoozed for that delay, keeps its place, and its next run gets the
//   re-enqueued message (orderly seals it again), so Fedify's own retry policy, `heldActivityTtl`
//   and permanent-failure handler see every attempt and end it where they say. orderly's
//   `MAX_SNOOZES` ends any job that snoozes for ever (DEAD, with the reason).
// - Fan-out: the messages a task enqueues are collected and submitted together when it ends, in
//   requests under orderly's body limit (1 MiB; a Fedify outbox message with its keys is about
//   5 KB, so one request takes about 180) and its 500 jobs; if one fails, the task fails and
//   orderly retries it (the jobs already in are duplicates then, by their ids).
import { AsyncLocalStorage } from "node:async_hooks";
import { WorkerEntrypoint } from "cloudflare:workers";
import { PermanentError, snooze } from "./answers.js";
import { OrderlyClient } from "./index.js";

/** The task running in this async context: {jobId, messageId, pending: [], snooze, ended}. */
const running = new AsyncLocalStorage();

/** Most bytes of jobs in one `POST /jobs`: orderly's body limit is 1 MiB (1,048,576), less room for the wrapper. */
export const MAX_REQUEST_BYTES = 1_000_000;
/** Most jobs in one `POST /jobs` (orderly's limit). */
export const MAX_REQUEST_JOBS = 500;
/** Longest job id orderly takes, in bytes. */
const MAX_ID_BYTES = 256;
/** Fields Fedify sets anew each time it builds a message: not part of what the message is. */
const VOLATILE = new Set(["id", "started", "traceContext"]);

const encoder = new TextEncoder();

/** JSON with object keys sorted, so the same message always has the same text. */
function stable(value) {
  if (Array.isArray(value)) return `[${value.map(stable).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value).filter((k) => value[k] !== undefined).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${stable(value[k])}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

/** The id of a message a task enqueues: its task's job id and a digest of what the message is. */
export async function childId(taskJobId, message) {
  const what = message !== null && typeof message === "object" && !Array.isArray(message)
    ? Object.fromEntries(Object.entries(message).filter(([k]) => !VOLATILE.has(k)))
    : message;
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(stable(what))));
  const hex = Array.from(digest.slice(0, 16), (b) => b.toString(16).padStart(2, "0")).join("");
  const id = `${taskJobId}/${hex}`;
  return encoder.encode(id).length <= MAX_ID_BYTES ? id : `fedify-${hex}`;
}

/** Splits jobs into requests of at most `maxBytes` (as `{"jobs": [...]}`) and `maxJobs`, in order. */
export function chunks(jobs, { maxBytes = MAX_REQUEST_BYTES, maxJobs = MAX_REQUEST_JOBS } = {}) {
  const out = [];
  let current = [];
  let bytes = 0;
  for (const job of jobs) {
    // A job's own size as orderly reads it (its fields, as the client sends them), and a comma.
    const size = encoder.encode(JSON.stringify(job)).length + 1;
    if (current.length > 0 && (bytes + size > maxBytes || current.length >= maxJobs)) {
      out.push(current);
      current = [];
      bytes = 0;
    }
    current.push(job);
    bytes += size;
  }
  if (current.length > 0) out.push(current);
  return out;
}

/** Seconds in a Fedify delay (a Temporal.Duration, or a number of milliseconds), rounded up. */
function delaySeconds(delay) {
  if (delay == null) return 0;
  const ms = typeof delay === "number" ? delay : typeof delay.total === "function" ? delay.total({ unit: "millisecond" }) : 0;
  return Math.min(86_400, Math.max(0, Math.ceil(ms / 1000)));
}

/** A message's limit key by default: an outbox delivery's inbox's origin (one remote server). */
export function inboxOrigin(message) {
  if (message?.type !== "outbox" || typeof message.inbox !== "string") return undefined;
  try {
    return new URL(message.inbox).origin;
  } catch {
    return undefined;
  }
}

export class OrderlyMessageQueue {
  /** orderly retries failed tasks itself (with backoff, holding the key). */
  nativeRetrial = true;
  #client;
  #limitKeyOf;

  /**
   * @param {{ client?: OrderlyClient, token?: string, service?: { fetch: typeof fetch }, baseUrl?: string, fetch?: typeof fetch }} options
   *   an `OrderlyClient`, or what one takes: orderly's PRODUCER_TOKEN (it only submits and counts) and a service binding to orderly.
   *   `limitKeyOf(message)`: a message's limit key ([`inboxOrigin`] by default; `null` for none).
   */
  constructor(options = {}) {
    const { limitKeyOf = inboxOrigin, ...clientOptions } = options;
    this.#client = options.client ?? new OrderlyClient(clientOptions);
    this.#limitKeyOf = limitKeyOf ?? (() => undefined);
  }

  /** The job for one Fedify message. */
  #job(message, options, id) {
    const opts = { sensitive: true, id };
    if (options?.orderingKey != null) opts.orderingKey = options.orderingKey;
    if (options?.deduplicationKey != null) opts.dedupeKey = options.deduplicationKey;
    const limitKey = this.#limitKeyOf(message);
    if (limitKey != null) opts.limitKey = limitKey;
    const delay = delaySeconds(options?.delay);
    if (delay > 0) opts.delaySeconds = delay;
    // Fedify's message carries the trace it was enqueued in (W3C): each run joins it (design §27).
    const trace = message?.traceContext;
    if (typeof trace?.traceparent === "string") {
      opts.traceparent = trace.traceparent;
      if (typeof trace.tracestate === "string") opts.tracestate = trace.tracestate;
    }
    return { payload: { type: "fedify", message }, options: opts };
  }

  async #submit(jobs) {
    // Each job keeps its own options; a request carries as many as fit orderly's limits, in order.
    for (const chunk of chunks(jobs)) await this.#client.enqueueJobs(chunk);
  }

  /** Enqueues one Fedify message (see the file's notes on retry in place and fan-out). */
  async enqueue(message, options) {
    const task = running.getStore();
    if (task?.ended) {
      throw new Error(`a message enqueued after its task (orderly job ${task.jobId}) ended would be lost; await it inside the task`);
    }
    if (task && message?.id != null && message.id === task.messageId) {
      // Fedify's own retry state rides in the message: the job's next run gets this one.
      task.snooze = { seconds: Math.max(1, delaySeconds(options?.delay)), message };
      return;
    }
    if (task) {
      task.pending.push(this.#job(message, options, await childId(task.jobId, message)));
      return;
    }
    await this.#submit([this.#job(message, options, message?.id != null ? `fedify-${message.id}` : undefined)]);
  }

  /**
   * Enqueues many messages with the same options: in a task, collected like `enqueue`'s; outside
   * one, submitted in as few requests as orderly's limits allow (not one per message). A
   * `deduplicationKey` names one job, so it is refused here rather than keeping one message.
   */
  async enqueueMany(messages, options) {
    if (options?.deduplicationKey != null && messages.length > 1) {
      throw new TypeError("a deduplicationKey names one job: enqueue the messages one by one, each with its own key");
    }
    const task = running.getStore();
    if (task) {
      for (const m of messages) await this.enqueue(m, options);
      return;
    }
    const jobs = messages.map((m) => this.#job(m, options, m?.id != null ? `fedify-${m.id}` : undefined));
    await this.#submit(jobs);
  }

  /** orderly delivers Fedify's tasks to the Worker's `orderlyHandler` entrypoint: nothing listens. */
  listen() {
    throw new TypeError("OrderlyMessageQueue does not listen: orderly calls the Worker's orderlyHandler entrypoint");
  }

  /** Jobs waiting to run, from orderly's counts (running ones are not queued any more). */
  async getDepth() {
    const c = await this.#client.counts();
    return { queued: c.PENDING };
  }

  /**
   * Runs one Fedify task for orderly: its enqueues collected and submitted when it ends.
   * Returns `{seconds, message}` when Fedify asked to retry it in place (snooze the job that long,
   * its next run gets `message`), or null.
   */
  async runTask(federation, contextData, job) {
    const task = { jobId: job.id, messageId: job.payload?.message?.id, pending: [], snooze: null, ended: false };
    try {
      await running.run(task, () => federation.processQueuedTask(contextData, job.payload.message));
    } finally {
      task.ended = true;
    }
    if (task.pending.length > 0) await this.#submit(task.pending);
    return task.snooze;
  }
}

/**
 * The `fedify` job type's handler for a Worker that embeds orderly (`orderly-queues/worker`,
 * design §13c): Fedify's tasks run in the same isolate, `orderly({ handlers: { fedify:
 * fedifyHandler(setup) } })`. `setup(env)` returns the worker's `{federation, queue,
 * contextData?}`; its queue submits through `app.service(env)`, a call in the isolate, not a hop.
 */
export function fedifyHandler(setup) {
  return async (job, { env }) => {
    if (job.payload?.message == null) throw new PermanentError(`not a fedify job: ${JSON.stringify(job.type)}`);
    const { federation, queue, contextData } = await setup(env);
    const next = await queue.runTask(federation, contextData, job);
    // The snooze's payload is the job's next: Fedify's re-enqueued message.
    return next == null ? { done: true } : snooze(next.seconds, { message: next.message });
  };
}

/**
 * The `WorkerEntrypoint` class a Fedify worker exports for orderly's service handler
 * (`SERVICE_HANDLERS = "fedify=FEDIFY"`, bound with `entrypoint`). `setup(env)` returns the
 * worker's `{federation, queue, contextData?}`.
 */
export function orderlyHandler(setup) {
  return class OrderlyFedifyHandler extends WorkerEntrypoint {
    async fetch(request) {
      const url = new URL(request.url);
      if (request.method !== "POST" || url.pathname !== "/orderly/run") return new Response("not found", { status: 404 });
      const job = await request.json();
      if (job.type !== "fedify" || job.payload?.message == null) {
        return new Response(`not a fedify job: ${JSON.stringify(job.type)}`, { status: 422 });
      }
      const { federation, queue, contextData } = await setup(this.env);
      try {
        const snooze = await queue.runTask(federation, contextData, job);
        if (snooze != null) {
          // The snooze's body is the job's next payload: Fedify's re-enqueued message.
          return Response.json(
            { payload: { type: "fedify", message: snooze.message } },
            { status: 202, headers: { "orderly-snooze": String(snooze.seconds) } },
          );
        }
        return Response.json({ done: true });
      } catch (e) {
        // Retried by orderly with backoff, its key held.
        return new Response(`fedify task failed: ${e?.message ?? e}`, { status: 500 });
      }
    }
  };
}
