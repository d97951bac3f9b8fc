// orderly in your own Worker (design §13c): the compiled orderly worker (WebAssembly, from this
// package: no Rust toolchain) with your job handlers in JavaScript or TypeScript, in the same
// isolate. No second Worker, no network hop, no signing: orderly calls a handler as it calls a
// service handler (design §13b), through an object in `env` whose `fetch` runs your function.
//
//   import { orderly } from "orderly-queues/worker";
//   export { OrderlyLedger } from "orderly-queues/worker"; // for LEDGER = "do"
//   export default orderly({ handlers: { email: async (job) => ({ sent: job.payload.to }) } });
//
// A handler gets `job` ({id, type, attempt, orderingKey, priority, payload}) and `{signal, env}`,
// and returns the job's result (anything JSON), or `snooze(seconds, payload?)` to run again later
// (no attempt spent, its key held; `payload`, if given, is the next run's, of the same type); it
// throws `new PermanentError(message)` to end the job DEAD at once, `new RetryAfter(seconds,
// message)` to be retried then, or anything else to be retried with backoff. Your own `fetch`
// serves every request outside `mount` (orderly's API and dashboard), when given.
import Orderly, { OrderlyLedger } from "../dist/worker/orderly.js";
import { PermanentError, RetryAfter, Snooze, snooze } from "./answers.js";

export { OrderlyLedger, PermanentError, RetryAfter, Snooze, snooze };

/** The name under which the handlers are put in `env` for orderly (`SERVICE_HANDLERS`). */
export const HANDLERS_BINDING = "ORDERLY_JS_HANDLERS";
/** Longest snooze or Retry-After orderly takes, seconds (Queues' longest delay). */
const MAX_DELAY_SECONDS = 86_400;

const clampDelay = (s) => Math.min(Math.max(Math.ceil(Number(s) || 1), 1), MAX_DELAY_SECONDS);
/** The answer orderly records in the handler's own words, not HTTP's (design §13c): its status says only how the run ended. */
const OWN_WORDS = { "orderly-own-words": "1" };
/** A thrown value as its error: the message, after the error's name where the name says something. */
const words = (e) => {
  if (!(e instanceof Error)) return String(e);
  const plain = e instanceof PermanentError || e instanceof RetryAfter || e.name === "Error" || !e.name;
  return plain ? e.message : `${e.name}: ${e.message}`;
};

/** Runs one job as orderly's service handler contract says (design §13b), in this isolate. */
async function run(handlers, request, env) {
  const job = await request.json();
  const handler = Object.hasOwn(handlers, job.type) ? handlers[job.type] : undefined;
  if (typeof handler !== "function") {
    return new Response(`no JavaScript handler for ${JSON.stringify(job.type)}`, { status: 422, headers: OWN_WORDS });
  }
  const view = {
    id: job.id,
    type: job.type,
    attempt: job.attempt,
    orderingKey: job.ordering_key ?? null,
    priority: job.priority,
    payload: job.payload,
  };
  try {
    const out = await handler(view, { signal: request.signal, env });
    if (out instanceof Snooze) {
      // The next run's payload is of the same type: orderly keeps a job's type in its payload.
      const next = out.payload !== null && typeof out.payload === "object" && !Array.isArray(out.payload)
        ? { ...out.payload, type: job.type }
        : out.payload;
      const body = next === undefined ? {} : { payload: next };
      return Response.json(body, { status: 202, headers: { ...OWN_WORDS, "orderly-snooze": String(clampDelay(out.seconds)) } });
    }
    return Response.json(out === undefined ? null : out, { headers: OWN_WORDS });
  } catch (e) {
    if (e instanceof PermanentError) return new Response(words(e), { status: 422, headers: OWN_WORDS });
    if (e instanceof RetryAfter) {
      return new Response(words(e), { status: 503, headers: { ...OWN_WORDS, "retry-after": String(clampDelay(e.seconds)) } });
    }
    return new Response(words(e), { status: 500, headers: OWN_WORDS });
  }
}

/**
 * The Worker's default export: orderly's queue consumer, cron and API, with `handlers` (job type
 * to function) run in this isolate, and `fetch` serving every request outside `mount`.
 */
export function orderly({ handlers = {}, fetch: own, mount = "/orderly" } = {}) {
  for (const [type, f] of Object.entries(handlers)) {
    if (typeof f !== "function") throw new TypeError(`handlers.${type} must be a function`);
  }
  const types = Object.keys(handlers);
  // orderly reads its handlers from env: each type named in SERVICE_HANDLERS, bound to an object
  // whose fetch runs the type's function with this event's env.
  const withHandlers = (env) => {
    if (types.length === 0) return env;
    const named = types.map((t) => `${t}=${HANDLERS_BINDING}`);
    const listed = [env.SERVICE_HANDLERS, ...named].filter(Boolean).join(",");
    return { ...env, SERVICE_HANDLERS: listed, [HANDLERS_BINDING]: { fetch: (request) => run(handlers, request, env) } };
  };
  const prefix = mount.endsWith("/") ? mount.slice(0, -1) : mount;
  const inMount = (path) => path === prefix || path.startsWith(`${prefix}/`);
  /** orderly's API for a request already meant for it (no mount prefix); what it says names its
   * routes under the mount when the Worker has its own `fetch`. */
  const api = (request, env, ctx) => new Orderly(ctx, { ...withHandlers(env), ...(own ? { ORDERLY_MOUNT: prefix } : {}) }).fetch(request);
  return {
    async fetch(request, env, ctx) {
      const url = new URL(request.url);
      if (own && !inMount(url.pathname)) return own(request, env, ctx);
      if (own) {
        url.pathname = url.pathname.slice(prefix.length) || "/";
        request = new Request(url, request);
      }
      return api(request, env, ctx);
    },
    async queue(batch, env, ctx) {
      return new Orderly(ctx, withHandlers(env)).queue(batch);
    },
    async scheduled(event, env, ctx) {
      const run = () => new Orderly(ctx, withHandlers(env)).scheduled(event);
      // A cron run is a span around orderly's maintenance and schedules, its ledger calls nested
      // in it (design §27.5); the Rust side cannot reach the cron's context to open one itself.
      const tracing = ctx?.tracing;
      if (typeof tracing?.enterSpan !== "function") return run();
      return tracing.enterSpan("orderly.cron", (span) => {
        span?.setAttribute?.("orderly.cron", event.cron);
        return run();
      });
    },
    /**
     * orderly's API as a service binding in this isolate, for `OrderlyClient({ service })` (and
     * Fedify's `OrderlyMessageQueue`): a submission is a call, not a network hop. It may outlive
     * the event that made it (a Fedify queue is made once per isolate), so it takes no event's
     * context: what orderly hands `waitUntil` is awaited by the call itself.
     */
    service(env) {
      return {
        fetch: async (request) => {
          const pending = [];
          const response = await api(request, env, { waitUntil: (p) => pending.push(p), passThroughOnException() {} });
          await Promise.allSettled(pending);
          return response;
        },
      };
    },
  };
}
