// What a JavaScript handler answers besides its result (design §13c): a snooze, a permanent
// failure, a retry at a time. Shared by the embedded worker (client/worker.js) and the Fedify
// adapter's embedded handler (client/fedify.js), which must not import the compiled worker (a
// Fedify app of two Workers bundles the adapter alone).

/** A handler's answer to run the job again in `seconds`, with `payload` for that run if given. */
export class Snooze {
  constructor(seconds, payload) {
    this.seconds = seconds;
    this.payload = payload;
  }
}

/** Returned by a handler: run the job again in `seconds` (1..86,400), no attempt spent. */
export function snooze(seconds, payload) {
  return new Snooze(seconds, payload);
}

/** Thrown by a handler: the job is DEAD at once, with this message as its error. */
export class PermanentError extends Error {
  name = "PermanentError";
}

/** Thrown by a handler: retry the job in `seconds` (a remote's Retry-After), its attempt spent. */
export class RetryAfter extends Error {
  name = "RetryAfter";
  constructor(seconds, message = `retry after ${seconds} s`) {
    super(message);
    this.seconds = seconds;
  }
}
