// @ts-check
// A producer Worker that hands work to orderly: through a service binding with orderly's client,
// and, as a Fedify app's `WorkersMessageQueue` does, straight onto orderly's queue.
// Imports the client by its package name. Type-checked against its types and run under
// miniflare, bundled from the packed package, by tests/e2e/client.test.mjs.
//
// AN EXAMPLE, NOT A SERVICE TO DEPLOY AS IT IS: its routes submit, cancel and redrive jobs with
// orderly's ADMIN_TOKEN. It answers only requests bearing its own secret PRODUCER_TOKEN (and 503
// when that is not set); a real app calls the client from its own code, behind its own auth.
import { OrderlyClient, OrderlyError } from "orderly-queues";

/**
 * @typedef {object} Env
 * @property {{ fetch(request: Request): Promise<Response> }} ORDERLY  service binding to orderly
 * @property {string} ORDERLY_TOKEN  orderly's ADMIN_TOKEN (a secret)
 * @property {string} [PRODUCER_TOKEN]  this example's own bearer token (a secret)
 * @property {{ send(body: unknown, options?: { contentType?: "json" | "text" | "bytes" | "v8", delaySeconds?: number }): Promise<void> }} ORDERLY_JOBS
 *   producer binding to orderly's queue, "orderly-jobs"
 */

export default {
  /**
   * @param {Request} request
   * @param {Env} env
   * @returns {Promise<Response>}
   */
  async fetch(request, env) {
    if (!env.PRODUCER_TOKEN) return Response.json({ error: "PRODUCER_TOKEN is not set" }, { status: 503 });
    if (!(await sameSecret(request.headers.get("authorization") ?? "", `Bearer ${env.PRODUCER_TOKEN}`))) {
      return Response.json({ error: "missing or wrong bearer token" }, { status: 401 });
    }
    const orderly = new OrderlyClient({ token: env.ORDERLY_TOKEN, service: env.ORDERLY });
    const url = new URL(request.url);
    /** @type {Record<string, any>} */
    const body = request.method === "POST" ? await request.json() : {};
    try {
      switch (url.pathname) {
        case "/notify": {
          // One webhook per account, in the account's order; urgent ones take the urgent lane.
          const job = await orderly.enqueue(
            { type: "webhook", url: body.url, body: body.event },
            { orderingKey: `acct/${body.account}`, priority: body.priority, dedupeKey: body.dedupe },
          );
          return Response.json({ id: job.id, status: job.status, duplicate: job.duplicate }, { status: 202 });
        }
        case "/notify-many": {
          /** @type {string[]} */
          const urls = body.urls;
          const jobs = await orderly.enqueue(urls.map((u) => ({ type: "webhook", url: u, body: {} })), { orderingKey: body.key });
          return Response.json(jobs.map((j) => j.id), { status: 202 });
        }
        case "/job": {
          const { job, history } = await orderly.get(url.searchParams.get("id") ?? "");
          return Response.json({ status: job.status, result: job.result, attempts: history.length });
        }
        case "/counts":
          return Response.json(await orderly.counts());
        case "/redrive":
          return Response.json(await orderly.redrive(body.id));
        case "/cancel":
          return Response.json(await orderly.cancel(body.id));
        case "/fedify": {
          // What `new WorkersMessageQueue(env.ORDERLY_JOBS).enqueue(payload, { orderingKey })`
          // sends: Fedify's envelope as a JSON message. orderly runs it like an API job.
          await env.ORDERLY_JOBS.send(
            { __fedify_ordering_key__: body.orderingKey, __fedify_payload__: body.payload },
            { contentType: "json" },
          );
          return new Response(null, { status: 202 });
        }
        default:
          return new Response("not found", { status: 404 });
      }
    } catch (e) {
      if (e instanceof OrderlyError) {
        return Response.json({ error: e.name, status: e.status, message: e.message }, { status: 502 });
      }
      throw e;
    }
  },
};

/**
 * Compares two secrets in constant time (by their SHA-256 digests, so lengths leak nothing).
 * @param {string} a
 * @param {string} b
 */
async function sameSecret(a, b) {
  const digest = async (/** @type {string} */ s) => new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(s)));
  const [x, y] = await Promise.all([digest(a), digest(b)]);
  let diff = 0;
  for (let i = 0; i < x.length; i++) diff |= x[i] ^ y[i];
  return diff === 0;
}
