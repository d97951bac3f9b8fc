// orderly's service handler contract (design §13b) in JavaScript: a Worker that runs orderly jobs of
// type "notify", bound to orderly with a service binding to its `Handler` entrypoint (which the
// internet cannot reach: only Workers bound to it can call it).
//
// orderly calls `POST /orderly/run` with {"id", "type", "attempt", "ordering_key", "priority",
// "payload"} and reads the answer: 2xx done (a JSON body is kept as the job's result); a header
// `orderly-snooze: SECONDS` snoozes the job (it runs again then, no attempt spent, its key held;
// a JSON body `{"payload": ...}` is the payload of that next run, same type; past orderly's
// MAX_SNOOZES the job is DEAD);
// 429/503 with Retry-After, 408, 425, 5xx, a thrown error or the timeout retry with backoff; any
// other status is permanent (the job is DEAD with this answer's text as its error).
import { WorkerEntrypoint } from "cloudflare:workers";

export class Handler extends WorkerEntrypoint {
  async fetch(request) {
    const url = new URL(request.url);
    if (request.method !== "POST" || url.pathname !== "/orderly/run") {
      return new Response("not found", { status: 404 });
    }
    const job = await request.json();
    switch (job.type) {
      case "notify":
        return notify(job);
      default:
        return new Response(`this worker has no handler for ${JSON.stringify(job.type)}`, { status: 422 });
    }
  }
}

/** How long a job may keep waiting out 429s before it gives up (from its first 429). */
const RATE_LIMIT_PATIENCE_MS = 24 * 60 * 60 * 1000;

/**
 * Delivers `payload.message` to `payload.endpoint`, an API that rate-limits its callers: a 429
 * is waited out with a snooze (never a spent attempt), for a day at most: the snooze carries when
 * the waiting began in the job's next payload, and past that the job is DEAD saying so (an
 * endpoint that answers 429 for ever must not hold its key for ever). A 5xx is retried, any other
 * refusal is permanent. The job id is the idempotency key, so a repeated delivery is recognised.
 */
async function notify(job) {
  const { endpoint, message } = job.payload;
  if (typeof endpoint !== "string" || !/^https?:\/\//.test(endpoint)) {
    return new Response("payload.endpoint must be an http(s) URL", { status: 422 });
  }
  const res = await fetch(endpoint, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": job.id },
    body: JSON.stringify({ message, key: job.ordering_key, attempt: job.attempt }),
  });
  await res.body?.cancel();
  if (res.status === 429) {
    const since = Number.isFinite(job.payload.rateLimitedSince) ? job.payload.rateLimitedSince : Date.now();
    if (Date.now() - since > RATE_LIMIT_PATIENCE_MS) {
      return new Response(`the endpoint has answered 429 since ${new Date(since).toISOString()}: giving up`, { status: 422 });
    }
    const wait = Math.min(Math.max(Number.parseInt(res.headers.get("retry-after") ?? "", 10) || 30, 1), 86400);
    return Response.json(
      { payload: { ...job.payload, rateLimitedSince: since } },
      { status: 202, headers: { "orderly-snooze": String(wait) } },
    );
  }
  if (res.ok) return Response.json({ delivered: true, status: res.status });
  if (res.status >= 500) return new Response(`the endpoint answered ${res.status}`, { status: 503 });
  return new Response(`the endpoint refused the message: HTTP ${res.status}`, { status: 422 });
}

export default {
  fetch() {
    return new Response("orderly's JS handler example: reached through a service binding only", { status: 404 });
  },
};
