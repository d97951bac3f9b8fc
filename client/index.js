// orderly's producer client: submit jobs and look them up over orderly's HTTP API, from a Worker
// (through a service binding) or anywhere `fetch` works. Types: index.d.ts. No dependencies.

/** An error answer from orderly; `status` is the HTTP status, `body` the parsed JSON body. */
export class OrderlyError extends Error {
  constructor(status, body) {
    super((body && typeof body.error === "string" ? body.error : `HTTP ${status}`) + ` (HTTP ${status})`);
    this.name = "OrderlyError";
    this.status = status;
    this.body = body;
  }
}
/** 400: the request or a job in it is invalid (`body.index` names the job). */
export class BadRequestError extends OrderlyError { name = "BadRequestError"; }
/** 401: missing or wrong token. */
export class UnauthorizedError extends OrderlyError { name = "UnauthorizedError"; }
/** 404: no such job. */
export class NotFoundError extends OrderlyError { name = "NotFoundError"; }
/** 409: the job is not in a state that allows this (e.g. redrive of a job that is not DEAD). */
export class ConflictError extends OrderlyError { name = "ConflictError"; }
/** 413: body, job or queue message over a limit. */
export class TooLargeError extends OrderlyError { name = "TooLargeError"; }
/** 503: D1 or Queues unavailable, or orderly's token not configured; worth retrying. */
export class UnavailableError extends OrderlyError { name = "UnavailableError"; }

const BY_STATUS = { 400: BadRequestError, 401: UnauthorizedError, 404: NotFoundError, 409: ConflictError, 413: TooLargeError, 503: UnavailableError };

/** The error for an answer's status. */
export function errorFor(status, body) {
  const E = BY_STATUS[status] ?? OrderlyError;
  return new E(status, body);
}

const OPTION_FIELDS = { orderingKey: "ordering_key", dedupeKey: "dedupe_key", limitKey: "limit_key", delaySeconds: "delay_seconds", deadlineSeconds: "deadline_seconds", timeoutSeconds: "timeout_seconds", maxAttempts: "max_attempts", priority: "priority", id: "id", sensitive: "sensitive", onDuplicate: "on_duplicate", debounceSeconds: "debounce_seconds", debounceMaxSeconds: "debounce_max_seconds", after: "after", afterDead: "after_dead", traceparent: "traceparent", tracestate: "tracestate" };

function jobBody(payload, options) {
  const job = { payload };
  for (const [opt, field] of Object.entries(OPTION_FIELDS)) {
    if (options[opt] !== undefined) job[field] = options[opt];
  }
  return job;
}

export class OrderlyClient {
  /** orderly's PRODUCER_TOKEN (submit and read) or ADMIN_TOKEN: private, so it never shows in
   * `JSON.stringify(client)` or a log. */
  #token;

  /**
   * @param {{ token: string, service?: { fetch: typeof fetch }, baseUrl?: string, fetch?: typeof fetch }} options
   *   `service`: a service binding to orderly (its URL's host is ignored); otherwise `baseUrl`
   *   with `fetch` (the global one by default).
   */
  constructor({ token, service, baseUrl = "https://orderly.internal", fetch: fetchFn } = {}) {
    if (!token) throw new TypeError("OrderlyClient needs orderly's PRODUCER_TOKEN or ADMIN_TOKEN");
    this.#token = token;
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.fetchFn = service ? service.fetch.bind(service) : (fetchFn ?? globalThis.fetch.bind(globalThis));
  }

  async request(method, path, body) {
    const headers = { authorization: `Bearer ${this.#token}` };
    if (body !== undefined) headers["content-type"] = "application/json";
    const res = await this.fetchFn(new Request(this.baseUrl + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) }));
    const text = await res.text();
    let json;
    try { json = text ? JSON.parse(text) : undefined; } catch { json = undefined; }
    if (!res.ok) throw errorFor(res.status, json ?? { error: text });
    // orderly answers every request with a JSON object: anything else (a proxy's page, an empty
    // body) is not an answer from orderly, and never a value to hand back.
    if (json === null || typeof json !== "object") {
      throw new OrderlyError(res.status, { error: `HTTP ${res.status} without a JSON object: ${text.slice(0, 200)}` });
    }
    return json;
  }

  /**
   * Submits one job (its payload) or many; `options` apply to each. One payload answers one
   * `EnqueuedJob`, an array answers an array in the same order.
   */
  async enqueue(payloads, options = {}) {
    const many = Array.isArray(payloads);
    if (many && payloads.length > 1 && options.dedupeKey !== undefined) {
      throw new TypeError("dedupeKey names one job; give it per enqueue() of a single payload");
    }
    const jobs = (many ? payloads : [payloads]).map((p) => jobBody(p, options));
    const out = await this.request("POST", "/jobs", many ? { jobs } : jobs[0]);
    if (!Array.isArray(out.jobs) || out.jobs.length !== jobs.length) {
      throw new OrderlyError(202, { error: "orderly's answer does not list the jobs submitted", ...out });
    }
    return many ? out.jobs : out.jobs[0];
  }

  /**
   * Submits jobs, each with its own options (`[{payload, options}]`, at most 500), in one request,
   * all or none; answers one `EnqueuedJob` per job, in order.
   */
  async enqueueJobs(jobs) {
    const out = await this.request("POST", "/jobs", { jobs: jobs.map((j) => jobBody(j.payload, j.options ?? {})) });
    if (!Array.isArray(out.jobs) || out.jobs.length !== jobs.length) {
      throw new OrderlyError(202, { error: "orderly's answer does not list the jobs submitted", ...out });
    }
    return out.jobs;
  }

  /**
   * Submits a batch (`[{payload, options}]`, at most 499) and its callback `then` (`{payload,
   * options}`), which runs once after every job of the batch finished, given each one's id,
   * status and result. All or none; answers `{jobs, then}`, `then.id` being the batch's id.
   */
  async enqueueBatch(jobs, then) {
    const body = { jobs: jobs.map((j) => jobBody(j.payload, j.options ?? {})), then: jobBody(then.payload, then.options ?? {}) };
    const out = await this.request("POST", "/jobs", body);
    if (!Array.isArray(out.jobs) || out.jobs.length !== jobs.length || typeof out.then?.id !== "string") {
      throw new OrderlyError(202, { error: "orderly's answer does not list the batch submitted", ...out });
    }
    return { jobs: out.jobs, then: out.then };
  }

  /** A batch's progress: its jobs' statuses (and results, for ADMIN_TOKEN) and its callback's. */
  async batch(id) {
    return (await this.request("GET", `/batches/${encodeURIComponent(id)}`)).batch;
  }

  /** One job with its history. */
  get(id) {
    return this.request("GET", `/jobs/${encodeURIComponent(id)}`);
  }

  /** Jobs per status. */
  counts() {
    return this.request("GET", "/jobs/counts");
  }

  /** DEAD -> PENDING, sent again. */
  async redrive(id) {
    return (await this.request("POST", `/jobs/${encodeURIComponent(id)}/redrive`)).job;
  }

  /** PENDING -> DEAD "cancelled"; a RUNNING job is asked to stop (`cancel_requested`) and ends
   * DEAD "cancelled" once its run does. Answers the job as the cancel left it. */
  async cancel(id) {
    return (await this.request("POST", `/jobs/${encodeURIComponent(id)}/cancel`)).job;
  }

  /** Cancels every PENDING job of an ordering key (ADMIN_TOKEN): `{cancelled, ids, remaining}`. */
  cancelKey(key) {
    return this.request("POST", `/keys/${encodeURIComponent(key)}/cancel`);
  }

  /** Cancels the PENDING jobs matching `filter` (ADMIN_TOKEN), or counts them (`{dryRun: true}`). */
  cancelMatching(filter, { dryRun = false } = {}) {
    return this.request("POST", "/jobs/cancel", { filter, dry_run: dryRun });
  }

  /** Pauses an ordering key: nothing of it starts until it is resumed, nothing of it is lost. */
  pauseKey(key) {
    return this.request("PUT", `/keys/${encodeURIComponent(key)}`, { paused: true });
  }

  /** Resumes an ordering key: its jobs are sent again. */
  resumeKey(key) {
    return this.request("PUT", `/keys/${encodeURIComponent(key)}`, { paused: false });
  }

  /** The periodic jobs of SCHEDULES, each with its last and next period (ADMIN_TOKEN). */
  async schedules() {
    return (await this.request("GET", "/schedules")).schedules;
  }

  /** Pauses (or, with `false`, resumes) a schedule: a paused one enqueues nothing (ADMIN_TOKEN). */
  pauseSchedule(name, paused = true) {
    return this.request("PUT", `/schedules/${encodeURIComponent(name)}`, { paused });
  }
}
