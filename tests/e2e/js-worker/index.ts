// A Worker that embeds orderly with its handlers in TypeScript (design §13c), as a user writes
// it: the compiled worker from the npm package, no Rust toolchain, no second Worker.
import { orderly, PermanentError, RetryAfter, snooze, type Job } from "orderly-queues/worker";
export { OrderlyLedger } from "orderly-queues/worker";

interface Greeting {
  name: string;
}

/** Successful runs so far, in this isolate: each result says its place, so the test reads the order. */
let done = 0;

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
  },
  fetch: async (request: Request) => new Response(`the user's own route: ${new URL(request.url).pathname}`),
});
