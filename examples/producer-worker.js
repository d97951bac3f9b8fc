// @ts-check
// A producer Worker that hands work to orderly: through a service binding with orderly's client,
// and, as a Fedify app's `WorkersMessageQueue` does, straight onto orderly's queue.
// Type-checked against client/index.d.ts and run under miniflare by tests/e2e/client.test.mjs.
import { OrderlyClient, OrderlyError } from "../client/index.js";

/**
 * @typedef {object} Env
 * @property {{ fetch(request: Request): Promise<Response> }} ORDERLY  service binding to orderly
 * @property {string} ORDERLY_TOKEN  orderly's ADMIN_TOKEN (a secret)
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
