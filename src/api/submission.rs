//! `POST /jobs` (and `App::enqueue`, the same path): a submission checked whole, then recorded and
//! sent: its jobs' dependencies found (design §24), a batch's callback made (design §25), jobs
//! bound for a busy limit key lined up in the ledger rather than the queue (design §20.12). What
//! the request asks for is read by `input.rs`; what a submission did is [`Submission`].

use serde_json::{json, Value};

use super::input::{parse_job, Parsed};
use super::http::ApiResponse;
use super::ports::Api;
use crate::clock::Clock;
use crate::config::Config;
use crate::ledger::deps::Wait;
use crate::ledger::{Enqueued, JobRow, Sql, Status, Submit};
// A job's place among the ledger's shards (`api::Endpoint` is what a request asks for).
use crate::ledger::Route as Place;
use crate::producer::{self, QueueSender};

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Most jobs in one `POST /jobs`: one D1 statement each (plus one more for each duplicate), within
/// Workers' 1,000 D1 queries per invocation on paid plans. (The free plan allows 50: submit at
/// most 20 jobs per request there.)
pub const MAX_JOBS_PER_REQUEST: usize = 500;

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

impl<S: Sql, Q: QueueSender, C: Clock> Api<'_, S, Q, C> {
    pub(super) async fn submit(
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
}
