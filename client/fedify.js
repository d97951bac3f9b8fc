// Fedify on orderly (SPEC 14): `OrderlyMessageQueue` is a Fedify 2.x `MessageQueue` that hands
// Fedify's tasks to orderly, which runs them in strict per-key order through a service handler:
// the Fedify worker exports `orderlyHandler(...)`'s `WorkerEntrypoint`, which calls
// `federation.processQueuedTask` for each job. Types: fedify.d.ts. Needs `nodejs_compat` (for
// AsyncLocalStorage), which Fedify itself needs on Workers.
//
// - Jobs are of type "fedify", sensitive (their payloads carry private keys: orderly seals them
//   under PAYLOAD_KEY and shows them "redacted"), keyed by Fedify's `orderingKey` as given.
// - A message's job id is derived from its Fedify id, so enqueueing it twice is idempotent; a
//   message enqueued while a task runs gets an id derived from the task's job and its place in
//   the task, so a retried task (whose Fedify ids are new) enqueues the same jobs again.
// - Retry in place: while a task runs, Fedify re-enqueues the very message it is processing
//   (same id) to honour a `Retry-After` or an open circuit breaker. Appended as a new job it would
//   land behind later messages of its key; instead the running job is snoozed for that delay and
//   keeps its place.
// - Fan-out: the messages a task enqueues are collected and submitted together when it ends (one
//   request for up to 500: the free plan allows 50 subrequests per invocation); if that fails, the
//   task fails and orderly retries it.
import { AsyncLocalStorage } from "node:async_hooks";
import { WorkerEntrypoint } from "cloudflare:workers";
import { OrderlyClient } from "./index.js";

/** The task running in this async context: {jobId, messageId, pending: [], snooze: seconds|null}. */
const running = new AsyncLocalStorage();

/** Seconds in a Fedify delay (a Temporal.Duration, or a number of milliseconds), rounded up. */
function delaySeconds(delay) {
  if (delay == null) return 0;
  const ms = typeof delay === "number" ? delay : typeof delay.total === "function" ? delay.total({ unit: "millisecond" }) : 0;
  return Math.min(43_200, Math.max(0, Math.ceil(ms / 1000)));
}

export class OrderlyMessageQueue {
  /** orderly retries failed tasks itself (with backoff, holding the key). */
  nativeRetrial = true;
  #client;

  /**
   * @param {{ client?: OrderlyClient, token?: string, service?: { fetch: typeof fetch }, baseUrl?: string, fetch?: typeof fetch }} options
   *   an `OrderlyClient`, or what one takes: orderly's ADMIN_TOKEN and a service binding to orderly.
   */
  constructor(options = {}) {
    this.#client = options.client ?? new OrderlyClient(options);
  }

  /** The job for one Fedify message. */
  #job(message, options, id) {
    const opts = { sensitive: true, id };
    if (options?.orderingKey != null) opts.orderingKey = options.orderingKey;
    if (options?.deduplicationKey != null) opts.dedupeKey = options.deduplicationKey;
    const delay = delaySeconds(options?.delay);
    if (delay > 0) opts.delaySeconds = delay;
    return { payload: { type: "fedify", message }, options: opts };
  }

  async #submit(jobs) {
    // Each job keeps its own options; one request carries up to 500 of them (POST /jobs' limit).
    for (let i = 0; i < jobs.length; i += 500) {
      await this.#client.enqueueJobs(jobs.slice(i, i + 500));
    }
  }

  /** Enqueues one Fedify message (see the file's notes on retry in place and fan-out). */
  async enqueue(message, options) {
    const task = running.getStore();
    if (task && message?.id != null && message.id === task.messageId) {
      task.snooze = Math.max(1, delaySeconds(options?.delay));
      return;
    }
    if (task) {
      task.pending.push(this.#job(message, options, `${task.jobId}/${task.pending.length + 1}`));
      return;
    }
    await this.#submit([this.#job(message, options, message?.id != null ? `fedify-${message.id}` : undefined)]);
  }

  /** Enqueues many messages with the same options. */
  async enqueueMany(messages, options) {
    for (const m of messages) await this.enqueue(m, options);
  }

  /** orderly delivers Fedify's tasks to the Worker's `orderlyHandler` entrypoint: nothing listens. */
  listen() {
    throw new TypeError("OrderlyMessageQueue does not listen: orderly calls the Worker's orderlyHandler entrypoint");
  }

  /** Jobs not finished, from orderly's counts. */
  async getDepth() {
    const c = await this.#client.counts();
    return { queued: c.PENDING + c.RUNNING };
  }

  /**
   * Runs one Fedify task for orderly: its enqueues collected and submitted when it ends.
   * Returns the seconds to snooze the job for (Fedify asked to retry it in place), or null.
   */
  async runTask(federation, contextData, job) {
    const task = { jobId: job.id, messageId: job.payload?.message?.id, pending: [], snooze: null };
    await running.run(task, () => federation.processQueuedTask(contextData, job.payload.message));
    if (task.pending.length > 0) await this.#submit(task.pending);
    return task.snooze;
  }
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
        if (snooze != null) return new Response(null, { status: 202, headers: { "orderly-snooze": String(snooze) } });
        return Response.json({ done: true });
      } catch (e) {
        // Retried by orderly with backoff, its key held.
        return new Response(`fedify task failed: ${e?.message ?? e}`, { status: 500 });
      }
    }
  };
}
