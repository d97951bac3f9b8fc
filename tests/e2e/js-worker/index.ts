// A Worker that embeds orderly with its handlers in TypeScript (design §13c), as a user writes
// it: the compiled worker from the npm package, no Rust toolchain, no second Worker.
import { orderly, PermanentError, RetryAfter, snooze, type Job } from "orderly-queues/worker";
export { OrderlyLedger } from "orderly-queues/worker";

interface Greeting {
  name: string;
}

/** Successful runs so far, in this isolate: each result says its place, so the test reads the order. */
let done = 0;
/** Jobs whose run saw its signal abort (a cancel), in this isolate. */
const aborted: string[] = [];

export default orderly({
  handlers: {
    greet: async (job: Job<Greeting>) => ({ hello: job.payload.name, attempt: job.attempt, key: job.orderingKey, place: ++done }),
    // Fails its first run, then succeeds: retried with backoff by orderly.
    flaky: async (job: Job) => {
      if (job.attempt < 2) throw new Error("not yet");
      return { lucky: true, place: ++done };
    },
    doomed: async () => {
      throw new PermanentError("this one never works");
    },
    later: async (job: Job<{ step?: number }>) => {
      const step = job.payload.step ?? 0;
      return step < 1 ? snooze(1, { step: step + 1 }) : { steps: step, place: ++done };
    },
    limited: async () => {
      throw new RetryAfter(1, "the remote said later");
    },
    // A TypeError, then a Retry-After, then done: each failure recorded as the handler said it.
    typed: async (job: Job) => {
      if (job.attempt === 1) throw new TypeError("no such thing");
      if (job.attempt === 2) throw new RetryAfter(1, "the remote said later");
      return { attempts: job.attempt };
    },
    // Waits up to 20 s, unless its run is cancelled: the signal aborts, and it stops.
    waits: async (job: Job, { signal }) => {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 20_000);
        signal.addEventListener("abort", () => {
          clearTimeout(timer);
          aborted.push(job.id);
          resolve();
        });
      });
      return { aborted: signal.aborted };
    },
  },
  fetch: async (request: Request) => {
    const path = new URL(request.url).pathname;
    return path === "/aborted" ? Response.json(aborted) : new Response(`the user's own route: ${path}`);
  },
});
