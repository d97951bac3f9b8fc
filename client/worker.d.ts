// Types of client/worker.js: orderly in your own Worker, with handlers in JavaScript or TypeScript
// (checked by `tsc` in tests/e2e/js-worker.test.mjs).

/** One run of a job, as a handler sees it. */
export interface Job<P = unknown> {
  readonly id: string;
  readonly type: string;
  /** 1 on the first run; a snooze spends none. */
  readonly attempt: number;
  readonly orderingKey: string | null;
  readonly priority: number;
  readonly payload: P;
}

/** What a handler gets beside its job. */
export interface RunContext<Env = any> {
  /** Aborted when orderly gives up on the run (its timeout). */
  readonly signal: AbortSignal;
  /** The Worker's bindings. */
  readonly env: Env;
}

/** A handler's answer to run the job again later. */
export class Snooze {
  readonly seconds: number;
  readonly payload: unknown;
  constructor(seconds: number, payload?: unknown);
}

/** Returned by a handler: run the job again in `seconds` (1..86,400), no attempt spent; `payload` is the next run's. */
export function snooze(seconds: number, payload?: unknown): Snooze;

/** Thrown by a handler: the job is DEAD at once, with this message as its error. */
export class PermanentError extends Error {}

/** Thrown by a handler: retry the job in `seconds` (a remote's Retry-After). */
export class RetryAfter extends Error {
  readonly seconds: number;
  constructor(seconds: number, message?: string);
}

/** A job type's handler: its result (anything JSON), or a snooze. Anything thrown but the two errors above retries with backoff. */
export type Handler<P = any> = (job: Job<P>, ctx: RunContext) => unknown | Promise<unknown>;

/** The Workers runtime's context of an event, as far as orderly uses it. */
export interface WorkerContext {
  waitUntil(promise: Promise<unknown>): void;
}

/** A Worker's default export with orderly's three events. */
export interface OrderlyWorker<Env = unknown> {
  fetch(request: Request, env: Env, ctx: WorkerContext): Promise<Response>;
  queue(batch: unknown, env: Env, ctx: WorkerContext): Promise<void>;
  scheduled(event: unknown, env: Env, ctx: WorkerContext): Promise<void>;
}

export interface OrderlyOptions<Env = unknown> {
  /** Job type to handler, run in this isolate. */
  handlers?: Record<string, Handler>;
  /** Your own fetch handler: it serves every request outside `mount`. */
  fetch?: (request: Request, env: Env, ctx: WorkerContext) => Response | Promise<Response>;
  /** Where orderly's API and dashboard are, when `fetch` is given (default "/orderly"). */
  mount?: string;
}

/** The Worker's default export: orderly's queue consumer, cron and API, with your handlers. */
export function orderly<Env = unknown>(options?: OrderlyOptions<Env>): OrderlyWorker<Env> & {
  /** orderly's API as a service binding in this isolate, for `OrderlyClient({ service })`. */
  service(env: Env): { fetch(request: Request): Promise<Response> };
};

/** The ledger's Durable Object class (`LEDGER = "do"`): export it from your Worker. */
export const OrderlyLedger: any;

/** The name the handlers are given in `env` for orderly (`SERVICE_HANDLERS`). */
export const HANDLERS_BINDING: string;
