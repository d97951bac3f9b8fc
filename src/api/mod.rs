//! The operator HTTP API (design §5): submit, count, list, inspect, cancel and redrive jobs (one or
//! in bulk by filter), per-minute activity, ordering keys (`keys.rs`: strict mode's blocked keys
//! and skip, an operator's pause), flow control's limit keys (`limits.rs`); the dashboard and
//! the API's OpenAPI document, and the ledger's administration (migrate, move; answered by the
//! worker's edge). [`Route`] (`route.rs`) is the one list of routes, parsed from method and path
//! (by the gate before the body is read, by the router after): the router matches only these,
//! and a test checks `openapi.json` against it. What a route does to
//! a job or key is an operation (`crate::operations`); this layer reads, authorizes and answers.
//!
//! Plain requests in, plain responses out, over the ledger and queue ports, so every route is
//! tested natively. Every route but the dashboard shell needs `Authorization: Bearer <ADMIN_TOKEN>`
//! (compared in constant time), or, for a producer, `PRODUCER_TOKEN`, which may only submit jobs
//! and read a job's state and the counts ([`Route::producer_may`]); the shell carries no data and
//! asks for the token itself, because a browser cannot attach a bearer token to a page load.
//! Errors are `{"error": ...}` JSON.

mod http;
mod keys;
mod limits;
mod metrics;
mod ports;
mod route;
mod schedules;
mod submission;

pub use http::{ApiRequest, ApiResponse, MAX_PAGE};
use http::query_pairs;
pub use ports::Api;
#[cfg(any(test, feature = "testing"))]
pub use route::routes;
pub use route::{NotRouted, Route};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::clock::Clock;
use crate::config::Config;
use crate::ledger::deps::Wait;
use crate::ledger::{CancelFilter, Enqueued, JobRow, ListFilter, Redrive, Sql, Status, Submit, MAX_PRIORITY};
// A job's place among the ledger's shards (`api::Route` is a request's route).
use crate::ledger::Route as Place;
use crate::operations::{Cancelled, Redriven};
use crate::producer::{self, QueueSender};
#[cfg(any(test, feature = "testing"))]
pub use submission::BadInput;
use submission::{parse_cancel_filter, parse_dead_filter, parse_job, Parsed};

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Most jobs in one `POST /jobs`: one D1 statement each (plus one more for each duplicate), within
/// Workers' 1,000 D1 queries per invocation on paid plans. (The free plan allows 50: submit at
/// most 20 jobs per request there.)
pub const MAX_JOBS_PER_REQUEST: usize = 500;

/// The answer to a write while the ledger is being moved (`LEDGER_MOVING`).
pub const MOVING: &str = "the ledger is being moved to shards (LEDGER_MOVING = \"true\"): nothing is written until the move ends; try again in a few minutes";
/// Shortest `ADMIN_TOKEN` accepted: a guessable token is a configuration error, not a lock.
pub const MIN_TOKEN_BYTES: usize = 16;
/// The dashboard's Content-Security-Policy: nothing but its own inline script and style (by hash)
/// and calls to its own origin; never framed.
fn dashboard_csp() -> String {
    let hash = |tag: &str| {
        let open = format!("<{tag}>");
        let close = format!("</{tag}>");
        let body = DASHBOARD.split_once(&open).and_then(|(_, rest)| rest.split_once(&close)).map_or("", |(b, _)| b);
        base64::engine::general_purpose::STANDARD.encode(Sha256::digest(body.as_bytes()))
    };
    format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; connect-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        hash("script"),
        hash("style")
    )
}

const DASHBOARD: &str = include_str!("../dashboard.html");
/// The API described in OpenAPI 3.1, served at `GET /openapi.json`.
pub const OPENAPI: &str = include_str!("../openapi.json");

/// Who a request's bearer token says it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// `ADMIN_TOKEN`: every route.
    Admin,
    /// `PRODUCER_TOKEN`: the routes [`Route::producer_may`] names.
    Producer,
    /// `METRICS_TOKEN`: `GET /metrics` only, so a scraper holds no power to act.
    Metrics,
}

/// One submitted job as recorded: its id, its status, and whether it duplicates a job the
/// ledger already had (same id, or the active holder of its dedupe key: then that job's).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Submitted {
    /// The job's id.
    pub id: String,
    /// Its status now.
    pub status: Status,
    /// Whether it was already there.
    pub duplicate: bool,
    /// `on_duplicate: "replace"` (or a debounce): the PENDING job holding the dedupe key took this
    /// submission's payload and options (it is `id`, and `duplicate`; design §22.3).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replaced: bool,
    /// The job holding the dedupe key that this new job superseded: cancelled, or left to finish
    /// its run (design §22.3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub superseded: Option<String>,
}

/// Why a submission was refused, nothing recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error} (HTTP {status}{})", index.map(|i| format!(", job {i}")).unwrap_or_default())]
pub struct Refusal {
    /// 400 (invalid) or 413 (over a limit).
    pub status: u16,
    /// Which job, when one job is at fault.
    pub index: Option<usize>,
    /// What is wrong.
    pub error: String,
}

/// What a submission did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submission {
    /// Recorded PENDING and sent to the queue; one per job, in order.
    Accepted(Vec<Submitted>),
    /// Recorded PENDING, but the queue refused them: maintenance sends them.
    Unsent {
        /// The jobs.
        jobs: Vec<Submitted>,
        /// The queue's error.
        error: String,
    },
    /// Nothing recorded.
    Refused(Refusal),
}

impl Submission {
    fn refused(status: u16, index: Option<usize>, error: impl Into<String>) -> Self {
        Submission::Refused(Refusal { status, index, error: error.into() })
    }
}

/// The refusal of a request of no jobs, or of more than [`MAX_JOBS_PER_REQUEST`] jobs, a batch's
/// callback counting as one of them (499 jobs with a `then`), before anything is recorded.
fn over_the_most(jobs: usize, then: bool) -> Option<Submission> {
    if jobs == 0 {
        return Some(Submission::refused(400, None, "no jobs given"));
    }
    if jobs + usize::from(then) <= MAX_JOBS_PER_REQUEST {
        return None;
    }
    let most = MAX_JOBS_PER_REQUEST - usize::from(then);
    let with = if then { " with a callback (\"then\" counts as one)" } else { "" };
    Some(Submission::refused(413, None, format!("more than {most} jobs in one request{with}")))
}


/// How a parsed job is recorded: due after its delay; in strict mode, a job due now under a
/// limit key with a concurrency is recorded parked when it is its ordering key's next, to wait in
/// the limit key's line rather than in the queue (design §20.12).
/// A job that runs after others (design §24) is never recorded parked: it waits for them first,
/// and asks for its start when their finish sends it.
fn submit_of<'a>(cfg: &Config, job: &'a Parsed, after: &'a [(String, Place)], now: i64) -> Submit<'a> {
    let limited = job.spec.limit_key.as_deref().is_some_and(|k| cfg.limits.for_key(k).concurrency.is_some());
    let parks =
        cfg.ordering_mode == crate::config::OrderingMode::Strict && job.delay == 0 && limited && after.is_empty();
    Submit {
        spec: &job.spec,
        due_at: now + i64::from(job.delay) * 1000,
        parks_until: parks.then(|| now + i64::from(crate::flow::PARKED_RECHECK_SECONDS) * 1000),
        on_duplicate: job.on_duplicate,
        debounce_until: job.debounce_until,
        after,
        after_dead: job.after_dead,
        batch: job.batch,
        in_batch: job.in_batch.as_deref(),
        trace: job.trace.as_ref(),
    }
}

/// Compares two secrets without revealing where (or whether, by length) they differ.
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    let (x, y) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    x.iter().zip(y.iter()).fold(0u8, |acc, (p, q)| acc | (p ^ q)) == 0
}

/// The answer to a route anyone may ask for: the dashboard page, or the OpenAPI document.
fn public_answer(route: &Route) -> ApiResponse {
    if *route == Route::OpenApi {
        return ApiResponse {
            status: 200,
            content_type: "application/json",
            body: OPENAPI.to_string(),
            headers: vec![("access-control-allow-origin", "*".into())],
        };
    }
    ApiResponse {
        status: 200,
        content_type: "text/html; charset=utf-8",
        body: DASHBOARD.to_string(),
        headers: vec![("content-security-policy", dashboard_csp()), ("x-frame-options", "DENY".into())],
    }
}

impl<S: Sql, Q: QueueSender, C: Clock> Api<'_, S, Q, C> {
    /// What to answer before the body is read: the dashboard page, or a refusal (no token
    /// configured, a token too short, a missing or wrong bearer token). `None`: read the body and
    /// call [`Api::handle`].
    pub fn gate(&self, method: &str, path: &str, authorization: Option<&str>) -> Option<ApiResponse> {
        let parsed = Route::parse(method, path);
        let public = match &parsed {
            Ok((route @ (Route::Dashboard | Route::OpenApi), _)) => Some(route.clone()),
            _ if (method, path) == ("GET", "/index.html") => Some(Route::Dashboard),
            _ => None,
        };
        if let Some(route) = public {
            return Some(public_answer(&route));
        }
        let Some(token) = self.admin_token.map(str::trim).filter(|t| !t.is_empty()) else {
            return Some(ApiResponse::error(
                503,
                "ADMIN_TOKEN is not configured; set it with `wrangler secret put ADMIN_TOKEN`",
            ));
        };
        if token.len() < MIN_TOKEN_BYTES {
            return Some(ApiResponse::error(
                500,
                format!("ADMIN_TOKEN is shorter than {MIN_TOKEN_BYTES} characters; set a longer one"),
            ));
        }
        let producer = self.producer_token.map(str::trim).filter(|t| !t.is_empty());
        if let Some(p) = producer {
            if p.len() < MIN_TOKEN_BYTES || constant_time_eq(p, token) {
                return Some(ApiResponse::error(
                    500,
                    format!("PRODUCER_TOKEN must be at least {MIN_TOKEN_BYTES} characters and not ADMIN_TOKEN"),
                ));
            }
        }
        if let Some(m) = self.metrics_token.map(str::trim).filter(|t| !t.is_empty()) {
            if m.len() < MIN_TOKEN_BYTES || constant_time_eq(m, token) || producer.is_some_and(|p| constant_time_eq(m, p)) {
                return Some(ApiResponse::error(
                    500,
                    format!(
                        "METRICS_TOKEN must be at least {MIN_TOKEN_BYTES} characters and neither ADMIN_TOKEN nor PRODUCER_TOKEN"
                    ),
                ));
            }
        }
        match self.caller(authorization) {
            None => Some(ApiResponse::error(401, "missing or wrong bearer token")),
            Some(Caller::Admin) => None,
            Some(Caller::Producer) => match parsed {
                Ok((route, _)) if route.producer_may() => None,
                Ok(_) => Some(ApiResponse::error(
                    403,
                    "PRODUCER_TOKEN may only submit jobs (POST /jobs) and read their state (GET /jobs/{id}, \
                     GET /batches/{id}, GET /jobs/counts); this needs ADMIN_TOKEN",
                )),
                // Unknown paths and methods are answered by the router, as for the admin.
                _ => None,
            },
            Some(Caller::Metrics) => match parsed {
                Ok((Route::Metrics, _)) => None,
                _ => Some(ApiResponse::error(403, "METRICS_TOKEN may only read GET /metrics; this needs ADMIN_TOKEN")),
            },
        }
    }

    /// Whose token the `Authorization` header presents, if either.
    pub fn caller(&self, authorization: Option<&str>) -> Option<Caller> {
        // RFC 9110: the scheme is case-insensitive.
        let presented = authorization.and_then(|h| {
            let (scheme, credentials) = h.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| credentials.trim())
        })?;
        let is = |t: Option<&str>| {
            t.map(str::trim).filter(|t| !t.is_empty()).is_some_and(|t| constant_time_eq(presented, t))
        };
        if is(self.admin_token) {
            Some(Caller::Admin)
        } else if is(self.producer_token) {
            Some(Caller::Producer)
        } else if is(self.metrics_token) {
            Some(Caller::Metrics)
        } else {
            None
        }
    }

    #[cfg(any(test, feature = "testing"))]
    /// Answers one request. Never fails: errors are responses.
    pub async fn handle(&self, req: &ApiRequest) -> ApiResponse {
        match self.gate(&req.method, &req.path, req.authorization.as_deref()) {
            Some(answer) => answer,
            None => self.route(req).await,
        }
    }

    /// Answers a request that [`Api::gate`] let through (the edge gates before reading the body).
    pub async fn route(&self, req: &ApiRequest) -> ApiResponse {
        let cfg = match self.cfg {
            Ok(c) => c,
            Err(e) => return ApiResponse::error(500, format!("configuration error: {e}")),
        };
        let route = match Route::parse(&req.method, &req.path) {
            Ok((route, _)) => route,
            Err(NotRouted::WrongMethod) => return ApiResponse::error(405, "method not allowed"),
            Err(NotRouted::NotFound) => return ApiResponse::error(404, format!("no route {} {}", req.method, req.path)),
        };
        if cfg.ledger_moving && req.method != "GET" {
            // A write recorded in D1 after its page was copied would be lost at the switch.
            return ApiResponse { headers: vec![("retry-after", "60".into())], ..ApiResponse::error(503, MOVING) };
        }
        let result = match route {
            Route::Dashboard | Route::OpenApi => Ok(public_answer(&route)),
            Route::Submit => self.submit(cfg, &req.body, req.trace.as_ref()).await,
            Route::List => self.list(&req.query).await,
            Route::Counts => self.ledger.counts().await.map(|c| ApiResponse::json(200, json!(c))),
            Route::Activity => self
                .ledger
                .activity(self.clock.now_ms())
                .await
                .map(|(minutes, times)| ApiResponse::json(200, json!({ "minutes": minutes, "times": times }))),
            Route::RedriveMatching => self.redrive_matching(cfg, &req.body).await,
            Route::Job(id) if self.caller(req.authorization.as_deref()) == Some(Caller::Producer) => {
                self.state(&id).await
            }
            Route::Job(id) => self.get(&id).await,
            Route::Batch(id) => {
                let admin = self.caller(req.authorization.as_deref()) == Some(Caller::Admin);
                self.batch(&id, admin).await
            }
            Route::Redrive(id) => self.redrive(cfg, &id).await,
            Route::Cancel(id) => self.cancel(cfg, &id).await,
            Route::CancelMatching => match parse_cancel_filter(&req.body) {
                Ok((filter, dry_run)) => self.cancel_matching(cfg, filter, dry_run).await,
                Err(e) => Ok(ApiResponse::error(e.status(), e.to_string())),
            },
            Route::CancelKey(key) => {
                let filter = CancelFilter { ordering_key: Some(key), ..CancelFilter::default() };
                self.cancel_matching(cfg, filter, false).await
            }
            Route::Keys => self.keys(cfg, &req.query).await,
            Route::ChangeKey(key) => self.change_key(cfg, &key, &req.body).await,
            Route::SkipKey(key) => self.skip(cfg, &key).await,
            Route::Limits => self.limits(cfg, &req.query).await,
            Route::Limit(key) => self.limit(cfg, &key).await,
            Route::ChangeLimit(key) => self.change_limit(cfg, &key, &req.body).await,
            Route::Schedules => self.schedules(cfg).await,
            Route::Metrics => self.metrics(cfg).await,
            Route::ChangeSchedule(name) => self.change_schedule(cfg, &name, &req.body).await,
            // The worker's edge answers these before it calls the API: they need its bindings.
            Route::Migrate { .. } | Route::MoveLedger { .. } => {
                Ok(ApiResponse::error(501, "the ledger's administration is answered by the worker, not the API"))
            }
        };
        result.unwrap_or_else(|e| ApiResponse::error(503, format!("{e}; try again")))
    }

    async fn submit(
        &self,
        cfg: &Config,
        body: &[u8],
        trace: Option<&crate::trace::TraceContext>,
    ) -> Result<ApiResponse, crate::error::InfraError> {
        if body.len() > MAX_BODY_BYTES {
            return Ok(ApiResponse::error(413, format!("body is larger than {MAX_BODY_BYTES} bytes")));
        }
        let parsed: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return Ok(ApiResponse::error(400, format!("body is not JSON: {e}"))),
        };
        let (items, then): (Vec<Value>, Option<Value>) = match parsed {
            Value::Object(mut o) if o.contains_key("jobs") => {
                let then = o.remove("then");
                match o.remove("jobs") {
                    Some(Value::Array(a)) if o.is_empty() => (a, then),
                    Some(Value::Array(_)) => {
                        return Ok(ApiResponse::error(400, "a {\"jobs\": [...]} body takes no other fields but \"then\""))
                    }
                    _ => return Ok(ApiResponse::error(400, "\"jobs\" must be an array")),
                }
            }
            one @ Value::Object(_) => (vec![one], None),
            _ => return Ok(ApiResponse::error(400, "body must be a job object or {\"jobs\": [...]}")),
        };
        let batch = then.is_some();
        Ok(match self.submit_traced(cfg, items, then, trace).await? {
            // A batch's callback is answered apart from its jobs, as "then".
            Submission::Accepted(mut jobs) if batch => {
                let then = jobs.pop();
                ApiResponse::json(202, json!({ "jobs": jobs, "then": then }))
            }
            Submission::Accepted(jobs) => ApiResponse::json(202, json!({ "jobs": jobs })),
            Submission::Unsent { jobs, error } => ApiResponse::json(
                503,
                json!({"error": format!("{error}; the jobs are recorded PENDING and maintenance will send them"), "jobs": jobs}),
            ),
            Submission::Refused(r) => {
                let mut body = json!({ "error": r.error });
                if let Some(i) = r.index {
                    body["index"] = json!(i);
                }
                ApiResponse::json(r.status, body)
            }
        })
    }

    /// Submits jobs, each a `POST /jobs` job object (`{"payload", "ordering_key"?, ...}`), with
    /// every check and limit of `POST /jobs`: all are recorded PENDING in one D1 round trip and
    /// sent, or none is recorded and the first bad one says why. What the API and
    /// [`crate::enqueue::Producer`] both do.
    pub async fn submit_items(&self, cfg: &Config, items: Vec<Value>) -> Result<Submission, crate::error::InfraError> {
        self.submit_with(cfg, items, None).await
    }

    /// [`Self::submit_items`], and with `then` a batch (design §25): `then` is a job that runs
    /// once every job of `items` has finished, given their ids, statuses and results; it is
    /// answered last.
    pub async fn submit_with(
        &self,
        cfg: &Config,
        items: Vec<Value>,
        then: Option<Value>,
    ) -> Result<Submission, crate::error::InfraError> {
        self.submit_traced(cfg, items, then, None).await
    }

    /// [`Self::submit_with`], each job without a trace context of its own given `trace` (the
    /// submitting request's, design §27).
    async fn submit_traced(
        &self,
        cfg: &Config,
        items: Vec<Value>,
        then: Option<Value>,
        trace: Option<&crate::trace::TraceContext>,
    ) -> Result<Submission, crate::error::InfraError> {
        if let Some(refused) = over_the_most(items.len(), then.is_some()) {
            return Ok(refused);
        }
        let now = self.clock.now_ms();
        let jobs = match self.parse_all(cfg, items, then, trace, now).await? {
            Ok(jobs) => jobs,
            Err(refused) => return Ok(refused),
        };
        let after = match self.dependencies(&jobs).await? {
            Ok(after) => after,
            Err(refused) => return Ok(Submission::Refused(refused)),
        };
        let due: Vec<Submit<'_>> = jobs.iter().zip(&after).map(|(j, a)| submit_of(cfg, j, a, now)).collect();
        let recorded = self.ledger.submit_all(&due, now).await?;
        let parks: Vec<bool> = due.iter().map(|d| d.parks_until.is_some()).collect();
        let mut answer = Vec::with_capacity(jobs.len());
        let (mut to_send, mut lined, mut cancelled, mut waits) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        // Where this request's jobs were recorded: a job named again by its id is the job the
        // ledger had, wherever its keys put it.
        let mut routes: std::collections::HashMap<String, Place> = std::collections::HashMap::new();
        for (((recorded, Parsed { msg, .. }), parks), after) in recorded.into_iter().zip(jobs).zip(parks).zip(&after) {
            let Enqueued { job, inserted, superseded } = recorded;
            routes.insert(job.id.clone(), job.route());
            let replaced = !inserted && superseded.as_ref().is_some_and(|held| held.id == job.id);
            answer.push(Submitted {
                id: job.id.clone(),
                status: job.status,
                duplicate: !inserted,
                replaced,
                superseded: superseded.as_ref().filter(|_| inserted).map(|held| held.id.clone()),
            });
            // A PENDING holder cancelled: its keys move on as after an operator's cancel.
            cancelled.extend(superseded.filter(|held| held.status == Status::Dead));
            match (inserted, job.parked, parks) {
                (false, ..) => {}
                // It waits for the jobs it runs after; the last of them to finish sends it.
                (true, ..) if !after.is_empty() => waits.extend(after.iter().map(|(on_id, on_route)| Wait {
                    job_id: job.id.clone(),
                    job_route: job.route(),
                    on_id: on_id.clone(),
                    on_route: routes.get(on_id).copied().unwrap_or(*on_route),
                    since: now,
                })),
                // The head of its key's jobs: it waits in its limit key's line (design §20.12).
                (true, true, _) => lined.push(job),
                // Behind an open job of its key under a limited policy: the key's chain reaches it,
                // and asks for its start then; a message would only queue ahead of other keys.
                (true, false, true) => {}
                (true, false, false) => to_send.push(msg),
            }
        }
        let sent = producer::send_all(self.queue, to_send).await;
        let woken = self.line_up(cfg, &lined, now).await;
        let moved_on = self.operations(cfg).moved_on(&cancelled, now).await.map(drop);
        // Should registering fail, the waits stay unregistered and maintenance registers them.
        let registered = self.operations(cfg).register(waits).await.map(drop);
        if let Err(e) = sent.and(woken).and(moved_on).and(registered) {
            return Ok(Submission::Unsent { jobs: answer, error: e.to_string() });
        }
        Ok(Submission::Accepted(answer))
    }

    /// Reads and checks each job, and a batch's callback last, each payload sealed if sensitive:
    /// all of them, or the refusal of the first bad one.
    async fn parse_all(
        &self,
        cfg: &Config,
        items: Vec<Value>,
        then: Option<Value>,
        trace: Option<&crate::trace::TraceContext>,
        now: i64,
    ) -> Result<Result<Vec<Parsed>, Submission>, crate::error::InfraError> {
        let mut jobs = Vec::with_capacity(items.len() + 1);
        for (i, item) in items.into_iter().enumerate() {
            match parse_job(item, cfg, self.types, self.sealer.is_some(), (self.new_id)(), now) {
                // A job without a trace context of its own carries the request's.
                Ok(j) => jobs.push(Parsed { trace: j.trace.clone().or_else(|| trace.cloned()), ..j }),
                Err(e) => return Ok(Err(Submission::refused(e.status(), Some(i), e.to_string()))),
            }
        }
        if let Some(then) = then {
            match self.callback(cfg, then, &jobs, now) {
                Ok(callback) => {
                    for member in &mut jobs {
                        member.in_batch = Some(callback.spec.id.clone());
                    }
                    jobs.push(callback);
                }
                Err(refused) => return Ok(Err(Submission::Refused(refused))),
            }
        }
        // Sensitive payloads reach D1 sealed, never as plain text.
        for job in jobs.iter_mut().filter(|j| j.sensitive) {
            if let (Some(sealer), Some(plain)) = (self.sealer, job.spec.payload.as_deref()) {
                job.spec.payload = Some(sealer.seal(&job.spec.id, plain).await?);
            }
        }
        Ok(Ok(jobs))
    }

    /// A batch's callback (design §25): `then`, read as any job, to run after every job of the
    /// batch whatever became of it (`"after_dead": "run"`), its payload given theirs. Refused: a
    /// `then` that names its own `after`, has a dedupe key (it could be recorded as a duplicate,
    /// and the batch would have no callback), is sensitive (its payload is sealed, and the batch
    /// could not be added to it), takes the id of one of the batch's jobs; a batch job with a
    /// dedupe key (it could be recorded as a duplicate of another job).
    fn callback(&self, cfg: &Config, then: Value, jobs: &[Parsed], now: i64) -> Result<Parsed, Refusal> {
        // It joins the trace of the batch's first job unless it names its own (design §27).
        let trace = jobs.first().and_then(|j| j.trace.clone());
        let refused = |index: Option<usize>, e: String| Refusal { status: 400, index, error: e };
        let mut cb = parse_job(then, cfg, self.types, self.sealer.is_some(), (self.new_id)(), now)
            .map_err(|e| Refusal { status: e.status(), index: None, error: format!("then: {e}") })?;
        cb.trace = cb.trace.or(trace);
        if !cb.after.is_empty() {
            return Err(refused(None, "then: a batch's callback runs after its jobs; it takes no \"after\"".into()));
        }
        if cb.spec.dedupe_key.is_some() || cb.sensitive || cb.debounce_until.is_some() {
            return Err(refused(None, "then: a batch's callback takes no dedupe_key, debounce or sensitive payload".into()));
        }
        if let Some(i) = jobs.iter().position(|j| j.spec.dedupe_key.is_some()) {
            return Err(refused(Some(i), "a batch's jobs take no dedupe_key: one recorded as a duplicate would leave its callback nothing to wait on".into()));
        }
        if jobs.iter().any(|j| j.spec.id == cb.spec.id) {
            return Err(refused(None, format!("then: its id {:?} is a job of the batch", cb.spec.id)));
        }
        cb.after = jobs.iter().map(|j| j.spec.id.clone()).collect();
        cb.after_dead = crate::ledger::AfterDead::Run;
        cb.batch = true;
        Ok(cb)
    }

    /// `GET /batches/{id}` (design §25): the batch's callback and each job with how it stands, its
    /// result once finished (an operator's view; a producer's shows none).
    async fn batch(&self, id: &str, results: bool) -> Result<ApiResponse, crate::error::InfraError> {
        let no_batch = || ApiResponse::error(404, format!("no batch {id:?}"));
        let Some(then) = self.ledger.get(id).await? else { return Ok(no_batch()) };
        let members = self.ledger.batch_members(id, then.route()).await?;
        if members.is_empty() {
            return Ok(no_batch());
        }
        let open: Vec<&str> = members.iter().filter(|m| m.status.is_none()).map(|m| m.id.as_str()).collect();
        let live = if open.is_empty() { Vec::new() } else { self.ledger.get_all(&open).await? };
        let mut live = live.into_iter();
        let (mut done, mut dead) = (0, 0);
        let jobs: Vec<Value> = members
            .iter()
            .map(|m| {
                let status = match m.status {
                    Some(s) => s,
                    None => live.next().flatten().map_or(Status::Pending, |j| j.status),
                };
                done += usize::from(status == Status::Done);
                dead += usize::from(status == Status::Dead);
                let mut j = json!({ "id": m.id, "status": status });
                if let (true, Some(r)) = (results, m.result.as_deref()) {
                    j["result"] = serde_json::from_str(r).unwrap_or_else(|_| json!("redacted"));
                }
                j
            })
            .collect();
        Ok(ApiResponse::json(
            200,
            json!({ "batch": {
                "id": id, "total": members.len(), "finished": done + dead, "done": done, "dead": dead,
                "then": { "id": then.id, "status": then.status }, "jobs": jobs,
            }}),
        ))
    }

    /// The jobs each job runs after (design §24), with where each lives; or why the submission is
    /// refused: a job named that is not in the ledger nor earlier in this request (so no cycle
    /// can be built), or one earlier in this request with a dedupe key (it may be recorded as a
    /// duplicate of another job, and then there would be nothing to wait on).
    async fn dependencies(&self, jobs: &[Parsed]) -> Result<Result<Vec<Vec<(String, Place)>>, Refusal>, crate::error::InfraError> {
        let refused = |i: usize, e: String| Ok(Err(Refusal { status: 400, index: Some(i), error: e }));
        let mut outside: Vec<&str> = Vec::new();
        for (i, job) in jobs.iter().enumerate() {
            for dep in &job.after {
                match jobs.iter().position(|j| &j.spec.id == dep) {
                    Some(j) if j > i => {
                        return refused(i, format!("\"after\" names {dep:?}, which this request submits later: a job must come after the jobs it runs after"))
                    }
                    Some(j) if jobs[j].spec.dedupe_key.is_some() => {
                        return refused(i, format!("\"after\" names {dep:?}, submitted in this request with a dedupe key: it may be recorded as a duplicate of another job; submit it first"))
                    }
                    Some(_) => {}
                    None => outside.push(dep),
                }
            }
        }
        outside.sort_unstable();
        outside.dedup();
        let found = if outside.is_empty() { Vec::new() } else { self.ledger.get_all(&outside).await? };
        let mut after = Vec::with_capacity(jobs.len());
        for (i, job) in jobs.iter().enumerate() {
            let mut deps = Vec::with_capacity(job.after.len());
            for dep in &job.after {
                let route = match jobs.iter().find(|j| &j.spec.id == dep) {
                    Some(j) => j.spec.route(),
                    None => match outside.iter().position(|o| *o == dep).and_then(|p| found.get(p)).cloned().flatten() {
                        Some(row) => row.route(),
                        None => return refused(i, format!("\"after\" names {dep:?}: no such job")),
                    },
                };
                deps.push((dep.clone(), route));
            }
            after.push(deps);
        }
        Ok(Ok(after))
    }

    /// Puts jobs recorded parked in their limit keys' lines, every key's in one batch per shard
    /// (design "The ledger's life": each job may be its own key), and sends the jobs handed a
    /// slot (design §20.12). Should a batch not answer, its jobs are sent as wake-ups, to ask for
    /// their start on delivery as any job does: nothing waits unsent.
    async fn line_up(&self, cfg: &Config, lined: &[JobRow], now: i64) -> Result<(), crate::error::InfraError> {
        let mut keys: Vec<&str> = lined.iter().filter_map(|j| j.limit_key.as_deref()).collect();
        keys.sort_unstable();
        keys.dedup();
        let lines: Vec<crate::ledger::limit::Lined<'_>> = keys
            .into_iter()
            .map(|key| {
                let ids = lined.iter().filter(|j| j.limit_key.as_deref() == Some(key)).map(|j| (j.id.as_str(), j.route()));
                (key, ids.collect(), cfg.limits.for_key(key))
            })
            .collect();
        let (mut msgs, mut older) = (Vec::new(), Vec::new());
        for (keys, answer) in self.ledger.line_all(&lines, now).await {
            let jobs: Vec<&JobRow> = lined.iter().filter(|j| j.limit_key.as_deref().is_some_and(|k| keys.contains(&k))).collect();
            match answer {
                Ok(woken) => {
                    // The jobs this request just lined are at hand; only older ones handed a slot
                    // are read again (by `producer::wake`).
                    for w in woken {
                        match jobs.iter().find(|j| j.id == w.job_id) {
                            Some(j) => msgs.extend(producer::woken_message(j, 0)),
                            None => older.push(w),
                        }
                    }
                }
                Err(_) => msgs.extend(jobs.iter().filter_map(|j| producer::woken_message(j, 0))),
            }
        }
        producer::send_all(self.queue, msgs).await?;
        // Older jobs handed a slot are not this request's to answer for: should reading or
        // sending them fail, theirs are lost wake-ups, which maintenance sends once their recheck
        // is due (and their hand-offs lapse, §20.3), so this request is not refused for them.
        let _ = producer::wake(self.ledger, self.queue, &older, 1, None).await;
        Ok(())
    }

    async fn list(&self, query: &str) -> Result<ApiResponse, crate::error::InfraError> {
        let mut status = None;
        let mut limit = 50;
        let mut cursor = None;
        let (mut job_type, mut ordering_key, mut priority) = (None, None, None);
        for (k, v) in query_pairs(query) {
            match k.as_str() {
                "status" => match Status::parse(&v.to_ascii_uppercase()) {
                    Some(s) => status = Some(s),
                    None => {
                        return Ok(ApiResponse::error(
                            400,
                            format!("status must be PENDING, RUNNING, DONE or DEAD, got {v:?}"),
                        ))
                    }
                },
                "limit" => match v.parse::<u32>() {
                    Ok(n) if (1..=MAX_PAGE).contains(&n) => limit = n,
                    _ => return Ok(ApiResponse::error(400, format!("limit must be 1 to {MAX_PAGE}, got {v:?}"))),
                },
                "cursor" => match decode_cursor(&v) {
                    Some(c) => cursor = Some(c),
                    None => return Ok(ApiResponse::error(400, "cursor is not one this API gave out")),
                },
                "type" if !v.is_empty() => job_type = Some(v),
                "ordering_key" if !v.is_empty() => ordering_key = Some(v),
                "priority" if !v.is_empty() => match v.parse::<u8>().ok().filter(|p| *p <= MAX_PRIORITY) {
                    Some(p) => priority = Some(p),
                    None => {
                        return Ok(ApiResponse::error(
                            400,
                            format!(
                                "priority must be a whole number from 0 (most urgent) to {MAX_PRIORITY}, got {v:?}"
                            ),
                        ))
                    }
                },
                "type" | "ordering_key" | "priority" => {}
                _ => return Ok(ApiResponse::error(400, format!("unknown query parameter {k:?}"))),
            }
        }
        let filter =
            ListFilter { status, job_type: job_type.as_deref(), ordering_key: ordering_key.as_deref(), priority };
        let (jobs, next) = self.ledger.list(&filter, cursor.as_ref().map(|(at, id)| (*at, id.as_str())), limit).await?;
        let next_cursor = next.map(|(at, id)| B64URL.encode(format!("{at}:{id}")));
        // Payloads and results stay out of lists (up to 128 KB and 4 KB each); `GET /jobs/{id}`
        // has them.
        let jobs: Vec<Value> = jobs
            .iter()
            .map(|j| {
                let mut v = json!(j);
                if let Some(o) = v.as_object_mut() {
                    o.shift_remove("payload");
                    o.shift_remove("result");
                }
                v
            })
            .collect();
        Ok(ApiResponse::json(200, json!({ "jobs": jobs, "next_cursor": next_cursor })))
    }

    async fn get(&self, id: &str) -> Result<ApiResponse, crate::error::InfraError> {
        let Some((job, history)) = self.ledger.get_with_history(id).await? else {
            return Ok(ApiResponse::error(404, format!("no job {id:?}")));
        };
        Ok(ApiResponse::json(200, json!({ "job": job, "history": history })))
    }

    /// `GET /jobs/{id}` for a producer: the job's state alone, never its payload, result, errors
    /// or history (a producer's token travels in more places than an operator's).
    async fn state(&self, id: &str) -> Result<ApiResponse, crate::error::InfraError> {
        let Some(j) = self.ledger.get(id).await? else {
            return Ok(ApiResponse::error(404, format!("no job {id:?}")));
        };
        let job = json!({
            "id": j.id, "type": j.job_type, "status": j.status, "ordering_key": j.ordering_key,
            "attempts": j.attempts, "max_attempts": j.max_attempts, "snoozes": j.snoozes, "priority": j.priority,
            "next_run_at": j.next_run_at, "created_at": j.created_at, "updated_at": j.updated_at,
            "finished_at": j.finished_at, "waiting_on": j.waiting_on,
            "waited_by": j.waited_by,
        });
        Ok(ApiResponse::json(200, json!({ "job": job })))
    }

    /// `POST /jobs/{id}/cancel` (design §22.1): a PENDING job becomes DEAD "cancelled" (200); a
    /// RUNNING one is asked to stop (202): its run learns of it within
    /// [`crate::consumer::CANCEL_REACH_MS`] and ends it DEAD "cancelled". A finished job, or one
    /// asked already, is refused (409). The cancelled job may have been what its key waited for
    /// (strict mode: a head waiting for its delay or retry; lock mode: a failed job holding the
    /// key's lock): the key's next job is woken at once (in lock mode it then takes over the
    /// finished holder's lock).
    async fn cancel(&self, cfg: &Config, id: &str) -> Result<ApiResponse, crate::error::InfraError> {
        Ok(match self.operations(cfg).cancel(id).await? {
            Cancelled::Done { job, woken, unsent } => {
                let mut answer = json!({ "job": job });
                if job.ordering_key.is_some() {
                    answer["woken"] = json!(woken);
                }
                if let Some(e) = unsent {
                    answer["warning"] = json!(format!("{e}; the key's next job runs when maintenance sends it"));
                }
                ApiResponse::json(200, answer)
            }
            Cancelled::Requested(job) => ApiResponse::json(
                202,
                json!({"job": job, "cancel_requested": true,
                       "within_ms": crate::consumer::CANCEL_REACH_MS}),
            ),
            Cancelled::NotFound => ApiResponse::error(404, format!("no job {id:?}")),
            Cancelled::Refused(j) if j.status == Status::Running => ApiResponse::json(
                409,
                json!({"error": "job is RUNNING and was asked to stop already", "status": j.status}),
            ),
            Cancelled::Refused(j) => ApiResponse::json(
                409,
                json!({"error": format!("job is {}: a finished job cannot be cancelled", j.status.as_str()), "status": j.status}),
            ),
        })
    }

    /// `POST /jobs/cancel` and `POST /keys/{key}/cancel` (design §22.2): open jobs matching a
    /// filter counted (`"dry_run": true`) or cancelled, at most `BULK_REDRIVE_LIMIT` per call and
    /// shard (oldest submission first), each as `POST /jobs/{id}/cancel` would: PENDING ones end
    /// now, RUNNING ones are asked to stop; `remaining` says how many match still.
    async fn cancel_matching(
        &self,
        cfg: &Config,
        filter: CancelFilter,
        dry_run: bool,
    ) -> Result<ApiResponse, crate::error::InfraError> {
        let now = self.clock.now_ms();
        if dry_run {
            let found = self.ledger.cancellable_matching(&filter).await?;
            let answer = json!({ "dry_run": true, "matched": found.matched, "running": found.running, "as_of": now });
            return Ok(ApiResponse::json(200, answer));
        }
        let done = self.operations(cfg).cancel_matching(&filter, cfg.bulk_redrive_limit).await?;
        let ids: Vec<&str> = done.cancelled.iter().map(|j| j.id.as_str()).collect();
        let asked: Vec<&str> = done.asked.iter().map(|j| j.id.as_str()).collect();
        let mut answer = json!({
            "dry_run": false, "cancelled": ids.len(), "ids": ids,
            "cancel_requested": asked.len(), "requested_ids": asked, "within_ms": crate::consumer::CANCEL_REACH_MS,
            "remaining": done.remaining, "as_of": now,
        });
        if let Some(e) = done.unsent {
            answer["warning"] = json!(format!("{e}; the keys' next jobs run when maintenance sends them"));
        }
        Ok(ApiResponse::json(200, answer))
    }

    /// `POST /jobs/redrive`: DEAD jobs matching a filter, counted (`"dry_run": true`) or redriven,
    /// at most `BULK_REDRIVE_LIMIT` per call (oldest death first). Jobs that cannot be redriven
    /// (no readable payload, a dedupe key active elsewhere) are counted, never taken, so every
    /// call reaches the redrivable ones. `as_of` is the server's time of the answer: a caller
    /// looping over calls pins `filter.to` to the count's `as_of + 1`, so a job redriven and dead
    /// again in between is not taken twice.
    async fn redrive_matching(&self, cfg: &Config, body: &[u8]) -> Result<ApiResponse, crate::error::InfraError> {
        let (filter, dry_run) = match parse_dead_filter(body) {
            Ok(f) => f,
            Err(e) => return Ok(ApiResponse::error(e.status(), e.to_string())),
        };
        let now = self.clock.now_ms();
        let found = self.ledger.dead_matching(&filter, cfg.bulk_redrive_limit).await?;
        if dry_run {
            return Ok(ApiResponse::json(
                200,
                json!({ "dry_run": true, "matched": found.matched, "redrivable": found.redrivable, "as_of": now }),
            ));
        }
        let ids: Vec<&str> = found.ids.iter().map(String::as_str).collect();
        self.operations(cfg).before_redrive(&ids).await?;
        let mut redriven = Vec::new();
        let mut refused = Vec::new();
        for (id, r) in ids.iter().zip(self.ledger.redrive_all(&ids, now).await?) {
            match r {
                Redrive::Redriven(j) => redriven.push(j),
                Redrive::Refused(_) | Redrive::NotFound => refused.push(*id),
            }
        }
        let msgs = redriven.iter().filter_map(|j| producer::message_for(j, 0)).collect();
        let sent = producer::send_all(self.queue, msgs).await;
        let mut answer = json!({
            "dry_run": false,
            "matched": found.matched,
            "redrivable": found.redrivable,
            "redriven": redriven.len(),
            "refused": refused,
            "remaining": (found.redrivable - (redriven.len() + refused.len()) as i64).max(0),
            "as_of": now,
        });
        if let Err(e) = sent {
            answer["error"] = json!(format!("{e}; the jobs are PENDING and maintenance will send them"));
            return Ok(ApiResponse::json(503, answer));
        }
        Ok(ApiResponse::json(200, answer))
    }

    /// `POST /jobs/{id}/redrive`: a DEAD job PENDING again and sent.
    async fn redrive(&self, cfg: &Config, id: &str) -> Result<ApiResponse, crate::error::InfraError> {
        let refused = |why: String, j: &JobRow| ApiResponse::json(409, json!({"error": why, "status": j.status}));
        Ok(match self.operations(cfg).redrive(id).await? {
            Redriven::NotFound => ApiResponse::error(404, format!("no job {id:?}")),
            Redriven::NotDead(j) => refused(format!("job is {}, only DEAD jobs can be redriven", j.status.as_str()), &j),
            Redriven::Unreadable(j) => {
                refused("job has no readable payload to send again (its body could not be read)".into(), &j)
            }
            Redriven::DedupeTaken(j) => {
                let key = j.dedupe_key.clone().unwrap_or_default();
                refused(format!("dedupe_key {key:?} is active in another job"), &j)
            }
            Redriven::Done { job, unsent: Some(e) } => ApiResponse::json(
                503,
                json!({"error": format!("{e}; the job is PENDING and maintenance will send it"), "job": job}),
            ),
            Redriven::Done { job, unsent: None } => ApiResponse::json(200, json!({ "job": job })),
        })
    }
}

fn decode_cursor(c: &str) -> Option<(i64, String)> {
    let raw = String::from_utf8(B64URL.decode(c).ok()?).ok()?;
    let (at, id) = raw.split_once(':')?;
    Some((at.parse().ok()?, id.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_equal_only_when_equal() {
        assert!(constant_time_eq("s3cret", "s3cret"));
        assert!(!constant_time_eq("s3cret", "s3cre"));
        assert!(!constant_time_eq("s3cret", "S3cret"));
        assert!(!constant_time_eq("", "x"));
    }

    #[test]
    fn cursors_round_trip_and_junk_is_refused() {
        let c = B64URL.encode("1700000000000:job:1");
        assert_eq!(decode_cursor(&c), Some((1_700_000_000_000, "job:1".into())));
        assert_eq!(decode_cursor("!!"), None);
        assert_eq!(decode_cursor(&B64URL.encode("x:y")), None);
    }
}
