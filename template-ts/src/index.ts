// {{name}}: your job types, run by orderly in each key's order, with retries and dead letters.
// orderly's API and dashboard are under /orderly; every other request is yours (`fetch` below).
import { orderly, PermanentError, type Job } from "orderly-queues/worker";

interface Greet {
  name: string;
}

export default orderly({
  handlers: {
    // A job's result is what its handler returns; a thrown error retries it with backoff, a
    // PermanentError makes it DEAD at once, with the reason.
    greet: async (job: Job<Greet>) => {
      if (!job.payload.name) throw new PermanentError("no name to greet");
      return { greeting: `Hello, ${job.payload.name}!` };
    },
  },
  fetch: async () => new Response("{{name}}: orderly's API and dashboard are at /orderly/"),
});
