// Types of orderly's producer client (index.js). Fields follow orderly's HTTP API (openapi.json).

export type Status = "PENDING" | "RUNNING" | "DONE" | "DEAD";

export interface EnqueueOptions {
  /** Jobs with the same key run one at a time, in order. At most 256 bytes. */
  orderingKey?: string;
  /** At most one PENDING or RUNNING job per dedupe key (single payloads only). */
  dedupeKey?: string;
  /** Whose flow-control policy (orderly's LIMITS, or /limits) holds the job's start back: a
   * tenant, a remote host. At most 256 bytes. */
  limitKey?: string;
  /** 0..86400 (Queues' longest delay). */
  delaySeconds?: number;
  /** No attempt starts later than this many seconds after submission (1..2592000, later than
   * delaySeconds): one due later is DEAD, "expired", without running. */
  deadlineSeconds?: number;
  /** A run taking longer is stopped and retried (1..300; never past orderly's
   * WEBHOOK_TIMEOUT_SECONDS). */
  timeoutSeconds?: number;
  /** 1..1000; orderly's MAX_ATTEMPTS by default. */
  maxAttempts?: number;
  /** 0 (most urgent) .. 9; 5 by default. */
  priority?: number;
  /** The job's own id (single payloads only): submitting it again answers the job, a duplicate. */
  id?: string;
  /** Sealed at rest under orderly's PAYLOAD_KEY, shown "redacted". */
  sensitive?: boolean;
  /** With a dedupeKey, what the job does to the open job holding it: "keep" (a duplicate, the
   * default), "replace" (a PENDING holder takes this payload and options and keeps its place; a
   * RUNNING one is left to finish and this job is recorded beside it), "cancel" (the holder is
   * cancelled, a RUNNING one asked to stop, and this job recorded). */
  onDuplicate?: "keep" | "replace" | "cancel";
  /** With a dedupeKey: the job starts only after this many seconds without a newer submission of
   * its key, each newer one replacing its payload (1..86400; no delaySeconds). */
  debounceSeconds?: number;
  /** A debounce's cap: the longest newer submissions may hold the job from its first (default
   * 10 x debounceSeconds, at most 86400). */
  debounceMaxSeconds?: number;
  /** The ids of jobs this one runs after (at most 100): it starts once each is DONE. Each must
   * exist already, or come earlier in the same enqueueJobs(). */
  after?: string[];
  /** When a job it runs after ends DEAD: "dead" (this one ends DEAD too, saying which; the
   * default) or "run" (it runs anyway). */
  afterDead?: "dead" | "run";
  /** The W3C trace context the job belongs to (`00-<trace id>-<span id>-<flags>`): each of its
   * runs is a span of that trace, and a webhook's request carries it on. Without it, the
   * submitting request's `traceparent` header, if any. */
  traceparent?: string;
  /** Its `tracestate`, passed on as given. */
  tracestate?: string;
}

export interface EnqueuedJob {
  id: string;
  status: Status;
  /** True when the job already existed (same id, or its dedupe key active in another job). */
  duplicate: boolean;
  /** onDuplicate "replace" (or a debounce): the PENDING job holding the dedupe key (`id`) took
   * this payload and options. */
  replaced?: boolean;
  /** The job holding the dedupe key that this new job superseded (cancelled, or left running). */
  superseded?: string;
}

export interface Job {
  id: string;
  type: string | null;
  status: Status;
  ordering_key: string | null;
  dedupe_key: string | null;
  payload?: unknown;
  attempts: number;
  max_attempts: number;
  deferrals: number;
  lease_owner: string | null;
  lease_until: number | null;
  next_run_at: number;
  last_error: string | null;
  created_at: number;
  updated_at: number;
  finished_at: number | null;
  seq: number | null;
  skipped_at: number | null;
  priority: number;
  /** What the successful run returned; a webhook's is `{status, content_type, body}`. */
  result: unknown;
  limit_key: string | null;
  /** No attempt starts at or after this (ms); one due later is DEAD, "expired". */
  deadline_at: number | null;
  timeout_seconds: number | null;
  /** When an operator asked the job to stop while it ran: it ends DEAD "cancelled". */
  cancel_requested_at?: number;
  /** When a newer submission with its dedupe key took the key over while it ran. */
  superseded_at?: number;
  /** A debounced job: the latest newer submissions may put its start off to. */
  debounce_until?: number;
  /** The jobs it runs after that have not finished yet. */
  waiting_on?: string[];
  /** The jobs that run after it (a batch's callback among them) and wait on it still. */
  waited_by?: string[];
  /** A batch's job: the batch it is part of (its callback's id), for as long as it lives. */
  batch_id?: string;
  /** The W3C trace context it was submitted with, if any. */
  traceparent?: string;
  tracestate?: string;
}

/** A batch's progress (GET /batches/{id}). */
export interface Batch {
  id: string;
  total: number;
  finished: number;
  done: number;
  dead: number;
  then: { id: string; status: Status };
  /** In the batch's order; `result` once finished, for ADMIN_TOKEN only. */
  jobs: { id: string; status: Status; result?: unknown }[];
}

export interface JobEvent {
  n: number;
  at: number;
  kind: "attempt" | "cancel" | "redrive" | "skip" | "cancel_requested" | "superseded";
  actor: string;
  attempt?: number;
  started_at?: number;
  outcome?: "done" | "retry" | "dead";
  error?: string;
  http_status?: number;
}

/** PENDING jobs matching every given field (at least one). Times: ms since the epoch. */
export interface CancelFilter {
  type?: string;
  ordering_key?: string;
  limit_key?: string;
  /** Text the job's last error contains. */
  error?: string;
  /** Submitted at or after. */
  from?: number;
  /** Submitted before. */
  to?: number;
}

/** What a cancel of many did (`matched` and `running` alone for a dry run). */
export interface CancelledJobs {
  dry_run: boolean;
  /** Dry run: open jobs matching, not yet cancelled or asked to stop. */
  matched?: number;
  /** Dry run: of them RUNNING (a cancel asks these to stop). */
  running?: number;
  /** PENDING jobs ended DEAD "cancelled". */
  cancelled?: number;
  ids?: string[];
  /** RUNNING jobs asked to stop: each ends DEAD "cancelled" within `within_ms`. */
  cancel_requested?: number;
  requested_ids?: string[];
  within_ms?: number;
  /** Matching open jobs left for another call. */
  remaining?: number;
  as_of: number;
}

export interface Counts {
  PENDING: number;
  RUNNING: number;
  DONE: number;
  DEAD: number;
}

/** An ordering key paused or resumed by `pauseKey` / `resumeKey` (`PUT /keys/{key}`). */
export interface KeyPause {
  key: string;
  paused: boolean;
  /** A pause: when the key was first paused, ms. */
  paused_at?: number;
  /** A resume: whether the key was paused. */
  was_paused?: boolean;
  /** A resume: messages sent again. */
  woken?: number;
}

export interface ClientOptions {
  /** orderly's PRODUCER_TOKEN (submit, get and counts only) or ADMIN_TOKEN (everything). */
  token: string;
  /** A service binding to orderly. */
  service?: { fetch(request: Request): Promise<Response> };
  /** orderly's URL when not using a service binding. */
  baseUrl?: string;
  fetch?: (request: Request) => Promise<Response>;
}

export class OrderlyError extends Error {
  readonly status: number;
  readonly body: unknown;
}
export class BadRequestError extends OrderlyError {}
export class UnauthorizedError extends OrderlyError {}
export class NotFoundError extends OrderlyError {}
export class ConflictError extends OrderlyError {}
export class TooLargeError extends OrderlyError {}
export class UnavailableError extends OrderlyError {}

export function errorFor(status: number, body: unknown): OrderlyError;

export class OrderlyClient {
  constructor(options: ClientOptions);
  /** Many jobs, one per payload, in order (an array is always many jobs: wrap an array payload). */
  enqueue(payloads: unknown[], options?: EnqueueOptions): Promise<EnqueuedJob[]>;
  /** One job. */
  enqueue(payload: unknown, options?: EnqueueOptions): Promise<EnqueuedJob>;
  /** Jobs each with its own options (at most 500), in one request, all or none. */
  enqueueJobs(jobs: { payload: unknown; options?: EnqueueOptions }[]): Promise<EnqueuedJob[]>;
  /** A batch and its callback, which runs once after every job of it finished, its payload given
   * `batch: {id, jobs: [{id, status, result}]}` (a webhook's under `body.batch`). */
  enqueueBatch(
    jobs: { payload: unknown; options?: EnqueueOptions }[],
    then: { payload: unknown; options?: EnqueueOptions },
  ): Promise<{ jobs: EnqueuedJob[]; then: EnqueuedJob }>;
  batch(id: string): Promise<Batch>;
  get(id: string): Promise<{ job: Job; history: JobEvent[] }>;
  counts(): Promise<Counts>;
  redrive(id: string): Promise<Job>;
  /** PENDING: DEAD "cancelled"; RUNNING: asked to stop, DEAD "cancelled" once its run ends. */
  cancel(id: string): Promise<Job>;
  /** Every PENDING job of an ordering key DEAD "cancelled" (ADMIN_TOKEN). */
  cancelKey(key: string): Promise<CancelledJobs>;
  /** The open jobs matching `filter` cancelled (PENDING ones at once, RUNNING ones asked to stop), or counted with `{dryRun: true}` (ADMIN_TOKEN). */
  cancelMatching(filter: CancelFilter, options?: { dryRun?: boolean }): Promise<CancelledJobs>;
  /** Pauses an ordering key (ADMIN_TOKEN): nothing of it starts until it is resumed. */
  pauseKey(key: string): Promise<KeyPause>;
  /** Resumes an ordering key (ADMIN_TOKEN): its jobs are sent again. */
  resumeKey(key: string): Promise<KeyPause>;
  /** The periodic jobs of SCHEDULES, each with its last and next period (ADMIN_TOKEN). */
  schedules(): Promise<Schedule[]>;
  /** Pauses (or, with `false`, resumes) a schedule (ADMIN_TOKEN). */
  pauseSchedule(name: string, paused?: boolean): Promise<Schedule>;
}

/** A periodic job of SCHEDULES (design §23) and where it stands. */
export interface Schedule {
  name: string;
  /** Five fields, UTC. */
  cron?: string;
  every_seconds?: number;
  missed: "catch_up" | "skip";
  /** The job of each period, as POST /jobs takes one; its id is `schedule:<name>:<period start, ms>`. */
  job: Record<string, unknown>;
  paused: boolean;
  paused_at: number | null;
  /** Start (ms) of the latest period seen. */
  last_period: number | null;
  last_job_id: string | null;
  last_enqueued_at: number | null;
  /** Start (ms) of the next period. */
  next_period: number;
}
