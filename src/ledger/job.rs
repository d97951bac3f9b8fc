//! The ledger's own types, a leaf every other ledger file builds on: a job's [`Status`], its row
//! ([`JobRow`]), what a submission asks for ([`JobSpec`], [`Submit`]), leases, counts, list filters,
//! and what each operation found ([`Claimed`], [`Cancel`], [`Redrive`], ...).

use serde::Serialize;
use serde_json::Value;

use super::placement::Route;
use super::store::Row;
use crate::error::InfraError;
use crate::bounds::DEFAULT_PRIORITY;

/// A job's state, held in the table by a CHECK constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Status {
    /// Waiting for a (re)delivery.
    #[serde(rename = "PENDING")]
    Pending,
    /// Claimed under a lease.
    #[serde(rename = "RUNNING")]
    Running,
    /// Succeeded.
    #[serde(rename = "DONE")]
    Done,
    /// Will not run again unless redriven.
    #[serde(rename = "DEAD")]
    Dead,
}

impl Status {
    /// Every status, in display order.
    pub const ALL: [Status; 4] = [Status::Pending, Status::Running, Status::Done, Status::Dead];

    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "PENDING",
            Status::Running => "RUNNING",
            Status::Done => "DONE",
            Status::Dead => "DEAD",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// DONE or DEAD.
    pub fn is_finished(self) -> bool {
        matches!(self, Status::Done | Status::Dead)
    }
}

/// A ledger row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobRow {
    /// Job id.
    pub id: String,
    /// Payload `type`.
    #[serde(rename = "type")]
    pub job_type: Option<String>,
    /// State.
    pub status: Status,
    /// Ordering key.
    pub ordering_key: Option<String>,
    /// Dedupe key.
    pub dedupe_key: Option<String>,
    /// Limit key: whose flow-control policy holds its starts back (design §20).
    pub limit_key: Option<String>,
    /// No attempt starts at or after this (ms); one due later ends DEAD, "expired" (design §20).
    pub deadline_at: Option<i64>,
    /// A run taking longer is stopped and fails, retryable (design §20).
    pub timeout_seconds: Option<u32>,
    /// Payload as JSON text (parsed when shown).
    #[serde(serialize_with = "payload_as_json")]
    pub payload: Option<String>,
    /// Handler runs started.
    pub attempts: i64,
    /// Runs allowed before DEAD.
    pub max_attempts: i64,
    /// Deliveries put off without running (key busy).
    pub deferrals: i64,
    /// Runs that snoozed (no attempt spent); past `MAX_SNOOZES` the job is DEAD.
    pub snoozes: i64,
    /// Invocation holding the lease.
    pub lease_owner: Option<String>,
    /// Lease expiry, ms.
    pub lease_until: Option<i64>,
    /// Earliest next run, ms.
    pub next_run_at: i64,
    /// Last failure, and for redriven jobs the history.
    pub last_error: Option<String>,
    /// ms.
    pub created_at: i64,
    /// ms.
    pub updated_at: i64,
    /// ms, when DONE or DEAD.
    pub finished_at: Option<i64>,
    /// Place in its key's order (strict mode); `None` when unkeyed or not yet sequenced.
    pub seq: Option<i64>,
    /// ms, when an operator let its key move past this DEAD job.
    pub skipped_at: Option<i64>,
    /// 0 most urgent .. 9 (design §12).
    pub priority: u8,
    /// What the successful run returned (JSON text, bounded; parsed when shown).
    #[serde(serialize_with = "payload_as_json")]
    pub result: Option<String>,
    /// ms, when its last run started (shown in its history).
    #[serde(skip)]
    pub started_at: Option<i64>,
    /// DONE: the invocation whose run finished it (its history's last run, from the row).
    #[serde(skip)]
    pub ran_by: Option<String>,
    /// DONE: the HTTP status that run got, if any.
    #[serde(skip)]
    pub http_status: Option<i64>,
    /// Strict mode: parked for its limit key's line, due only at its wake-up or its recheck
    /// (design §20.3, §20.12).
    #[serde(skip)]
    pub parked: bool,
    /// ms, when an operator asked the job to stop while it ran (design §22.1): it ends DEAD
    /// "cancelled" whatever its run returns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_requested_at: Option<i64>,
    /// ms, when a newer submission with its dedupe key took the key over while it ran (§22.3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub superseded_at: Option<i64>,
    /// Debounced: the latest newer submissions may put its start off to, ms (§22.4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debounce_until: Option<i64>,
    /// The dependencies it still waits on (design §24), as a read of one job (`get.sql`) gives
    /// them; empty elsewhere.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waiting_on: Vec<String>,
    /// The jobs still waiting on it (design §24: its `job_waiter` rows, deleted as each is
    /// released), as a read of one job (`get.sql`) gives them; empty elsewhere.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waited_by: Vec<String>,
    /// Read back by the transition that finished it (`complete.sql`, `fail.sql`): jobs wait on it
    /// (design §24). `false` wherever not read.
    #[serde(skip)]
    pub waited: bool,
    /// The batch it is a member of (design §25): its callback's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
    /// The W3C trace context it was submitted with (design §27), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Its `tracestate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

// serde's `serialize_with` hands over the field as it is: `&Option<String>`.
#[allow(clippy::ref_option)]
fn payload_as_json<S: serde::Serializer>(p: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    // A sealed payload or result is never shown, not even sealed.
    if p.as_deref().is_some_and(crate::seal::is_sealed) {
        return s.serialize_str(crate::seal::REDACTED);
    }
    match p.as_deref().map(serde_json::from_str::<Value>) {
        Some(Ok(v)) => v.serialize(s),
        Some(Err(_)) => p.serialize(s),
        None => s.serialize_none(),
    }
}

/// An integer column: D1 hands numbers over as JS numbers, so a whole f64 counts too.
pub(crate) fn int_of(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
}

impl JobRow {
    /// Reads a row. A row that does not fit is an infrastructure error (schema drift), not a panic.
    pub fn from_row(row: &Row) -> Result<JobRow, InfraError> {
        let text = |c: &str| row.get(c).and_then(Value::as_str).map(str::to_string);
        let int = |c: &str| row.get(c).and_then(int_of);
        let need_int = |c: &str| int(c).ok_or_else(|| InfraError::new("D1", format!("job row lacks integer {c}")));
        let status = text("status")
            .and_then(|s| Status::parse(&s))
            .ok_or_else(|| InfraError::new("D1", "job row has no valid status"))?;
        Ok(JobRow {
            id: text("id").ok_or_else(|| InfraError::new("D1", "job row lacks id"))?,
            job_type: text("type"),
            status,
            ordering_key: text("ordering_key"),
            dedupe_key: text("dedupe_key"),
            // Before migration 0009 there is no such column: no limit.
            limit_key: text("limit_key"),
            // Before migration 0011 there are no such columns: neither.
            deadline_at: int("deadline_at"),
            timeout_seconds: int("timeout_seconds").and_then(|t| u32::try_from(t).ok()),
            payload: text("payload"),
            attempts: need_int("attempts")?,
            max_attempts: need_int("max_attempts")?,
            deferrals: need_int("deferrals")?,
            // Before migration 0008 there is no such column: no snoozes counted.
            snoozes: int("snoozes").unwrap_or(0),
            lease_owner: text("lease_owner"),
            lease_until: int("lease_until"),
            next_run_at: need_int("next_run_at")?,
            last_error: text("last_error"),
            created_at: need_int("created_at")?,
            updated_at: need_int("updated_at")?,
            finished_at: int("finished_at"),
            seq: int("seq"),
            skipped_at: int("skipped_at"),
            priority: int("priority").and_then(|p| u8::try_from(p).ok()).unwrap_or(DEFAULT_PRIORITY),
            result: text("result"),
            started_at: int("started_at"),
            ran_by: text("ran_by"),
            http_status: int("http_status"),
            // Before migration 0014 there is no such column: nothing parked.
            parked: int("parked") == Some(1),
            // Before migration 0015 there are no such columns: none of them.
            cancel_requested_at: int("cancel_requested_at"),
            superseded_at: int("superseded_at"),
            debounce_until: int("debounce_until"),
            waiting_on: text("waiting_on")
                .and_then(|t| serde_json::from_str::<Vec<String>>(&t).ok())
                .unwrap_or_default(),
            waited_by: text("waited_by")
                .and_then(|t| serde_json::from_str::<Vec<String>>(&t).ok())
                .unwrap_or_default(),
            waited: int("waited") == Some(1),
            // Before migration 0019 there is no such column: no batch.
            batch_id: text("batch_id"),
            // Before migration 0018 there are no such columns: no trace context.
            traceparent: text("traceparent"),
            tracestate: text("tracestate"),
        })
    }

    /// The trace context it was submitted with, when its row holds a valid one (design §27).
    pub fn trace(&self) -> Option<crate::trace::TraceContext> {
        crate::trace::TraceContext::parse(self.traceparent.as_deref()?, self.tracestate.as_deref()).ok()
    }

    /// The first row as a job, if any.
    pub fn first(rows: &[Row]) -> Result<Option<JobRow>, InfraError> {
        rows.first().map(JobRow::from_row).transpose()
    }

    /// Every row as a job.
    pub fn all(rows: &[Row]) -> Result<Vec<JobRow>, InfraError> {
        rows.iter().map(JobRow::from_row).collect()
    }

    /// Where the job lives (which shard of a sharded ledger).
    pub fn route(&self) -> Route {
        Route::of(self.ordering_key.as_deref(), self.dedupe_key.as_deref(), &self.id)
    }

    /// What the row says the job is (for statements that take a spec).
    pub fn spec(&self) -> JobSpec {
        JobSpec {
            id: self.id.clone(),
            job_type: self.job_type.clone(),
            ordering_key: self.ordering_key.clone(),
            dedupe_key: self.dedupe_key.clone(),
            limit_key: self.limit_key.clone(),
            deadline_at: self.deadline_at,
            timeout_seconds: self.timeout_seconds,
            payload: self.payload.clone(),
            max_attempts: u32::try_from(self.max_attempts).unwrap_or(1),
            priority: self.priority,
        }
    }
}


/// A job submitted through the API, as it is to be recorded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Submit<'a> {
    /// The job.
    pub spec: &'a JobSpec,
    /// When it is due, ms.
    pub due_at: i64,
    /// Strict mode, a limit key with a concurrency, due now (design §20.12): recorded parked,
    /// due at this recheck time, if no open job of its ordering key comes before it (the
    /// recorded row's `parked` says whether it was); it then waits in its limit key's line.
    pub parks_until: Option<i64>,
    /// What it does to an open job holding its dedupe key (design §22.3).
    pub on_duplicate: OnDuplicate,
    /// Debounced (design §22.4): the latest it may be put off to by newer submissions (its first
    /// submission plus its cap). A replacement then puts the holder's start off to `due_at`.
    pub debounce_until: Option<i64>,
    /// The jobs it runs after (design §24), each with its route: recorded with it, in its batch.
    pub after: &'a [(String, Route)],
    /// What it does when one of them ends DEAD.
    pub after_dead: AfterDead,
    /// It is a batch's callback and `after` its members (design §25).
    pub batch: bool,
    /// It is a member of the batch with this id (its callback's).
    pub in_batch: Option<&'a str>,
    /// The trace context it was submitted with (design §27).
    pub trace: Option<&'a crate::trace::TraceContext>,
}

#[cfg(any(test, feature = "testing"))]
impl<'a> Submit<'a> {
    /// A job due at `due_at`, sent as ever.
    pub fn due(spec: &'a JobSpec, due_at: i64) -> Self {
        Submit {
            spec,
            due_at,
            parks_until: None,
            on_duplicate: OnDuplicate::Keep,
            debounce_until: None,
            after: &[],
            after_dead: AfterDead::Dead,
            batch: false,
            in_batch: None,
            trace: None,
        }
    }
}

/// What a job does when a job it runs after ends DEAD (design §24).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AfterDead {
    /// It ends DEAD too, saying which (the default).
    #[default]
    Dead,
    /// It runs anyway, as if that one had succeeded.
    Run,
}

impl AfterDead {
    /// As `POST /jobs` names it.
    pub fn parse(s: &str) -> Option<AfterDead> {
        [AfterDead::Dead, AfterDead::Run].into_iter().find(|o| o.as_str() == s)
    }
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            AfterDead::Dead => "dead",
            AfterDead::Run => "run",
        }
    }
}

/// What a submission does when an open job holds its dedupe key (design §22.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnDuplicate {
    /// It is a duplicate of that job: nothing is recorded (the default).
    #[default]
    Keep,
    /// A PENDING holder takes its payload and options, keeping its place; a RUNNING one is left
    /// to finish and the submission is recorded as a new job beside it.
    Replace,
    /// The holder is cancelled (a RUNNING one asked to stop) and the submission recorded.
    Cancel,
}

impl OnDuplicate {
    /// As `POST /jobs` names it.
    pub fn parse(s: &str) -> Option<OnDuplicate> {
        [OnDuplicate::Keep, OnDuplicate::Replace, OnDuplicate::Cancel].into_iter().find(|o| o.as_str() == s)
    }
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            OnDuplicate::Keep => "keep",
            OnDuplicate::Replace => "replace",
            OnDuplicate::Cancel => "cancel",
        }
    }
}

/// A submission as recorded (design §22.3).
#[derive(Debug, Clone, PartialEq)]
pub struct Enqueued {
    /// The job recorded, or the open job it duplicates (a PENDING holder replaced: its row now).
    pub job: JobRow,
    /// Whether a new job was recorded.
    pub inserted: bool,
    /// The holder of its dedupe key it superseded: replaced in place, cancelled, or left running
    /// beside the new job.
    pub superseded: Option<JobRow>,
}

/// What a job is, as known from its message or API request.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// Job id.
    pub id: String,
    /// Payload `type`, if any.
    pub job_type: Option<String>,
    /// Ordering key.
    pub ordering_key: Option<String>,
    /// Dedupe key.
    pub dedupe_key: Option<String>,
    /// Limit key (design §20).
    pub limit_key: Option<String>,
    /// No attempt starts at or after this (ms).
    pub deadline_at: Option<i64>,
    /// A run's time limit.
    pub timeout_seconds: Option<u32>,
    /// Payload as JSON text; `None` when the body was not JSON.
    pub payload: Option<String>,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// 0 most urgent .. 9.
    pub priority: u8,
}

impl JobSpec {
    /// Where the job lives (which shard of a sharded ledger).
    pub fn route(&self) -> Route {
        Route::of(self.ordering_key.as_deref(), self.dedupe_key.as_deref(), &self.id)
    }
}

/// The times a claim binds: now, the lease's end, and how early a PENDING job may be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// ms.
    pub now: i64,
    /// ms; the lease's end.
    pub until: i64,
    /// ms; PENDING jobs due before this qualify (Queues' delays are not exact).
    pub due_before: i64,
}

/// One shard's part of `GET /metrics`' jobs (design §27): its counts by status and type (their
/// oldest due jobs leaving out limit keys' jobs), each (type, limit key)'s oldest due job, and the
/// limit keys whose state in this shard holds their jobs back.
#[derive(Debug, Clone, Default)]
pub struct ShardTypeCounts {
    /// By status and type.
    pub counts: Vec<TypeCount>,
    /// (type, limit key, oldest due `next_run_at`).
    pub limited: Vec<(Option<String>, String, i64)>,
    /// Limit keys paused, with their breaker open, or with a line.
    pub held: Vec<String>,
}

/// Jobs of one status and type (`GET /metrics`, design §27).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeCount {
    /// PENDING, RUNNING or DEAD.
    pub status: Status,
    /// The jobs' type (`None`: a body that had none).
    pub job_type: Option<String>,
    /// How many.
    pub n: i64,
    /// The earliest `next_run_at` of its PENDING jobs already due, ms.
    pub oldest_due: Option<i64>,
}

impl TypeCount {
    /// A row of `metrics_jobs.sql`.
    pub fn of(row: &Row) -> Option<TypeCount> {
        Some(TypeCount {
            status: Status::parse(row.get("status")?.as_str()?)?,
            job_type: row.get("type").and_then(Value::as_str).map(str::to_string),
            n: row.get("n").and_then(int_of)?,
            oldest_due: row.get("oldest_due").and_then(int_of),
        })
    }

    /// `counts` of every shard as one list: a status and type's counts summed, its oldest due job
    /// the oldest of all.
    pub fn merged(counts: impl IntoIterator<Item = TypeCount>) -> Vec<TypeCount> {
        let mut out: Vec<TypeCount> = Vec::new();
        for c in counts {
            match out.iter_mut().find(|o| o.status == c.status && o.job_type == c.job_type) {
                Some(o) => {
                    o.n += c.n;
                    o.oldest_due = o.oldest_due.into_iter().chain(c.oldest_due).min();
                }
                None => out.push(c),
            }
        }
        out.sort_by(|a, b| (a.status.as_str(), &a.job_type).cmp(&(b.status.as_str(), &b.job_type)));
        out
    }
}

/// Counts by status, always all four.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// PENDING jobs.
    #[serde(rename = "PENDING")]
    pub pending: i64,
    /// RUNNING jobs.
    #[serde(rename = "RUNNING")]
    pub running: i64,
    /// DONE jobs.
    #[serde(rename = "DONE")]
    pub done: i64,
    /// DEAD jobs.
    #[serde(rename = "DEAD")]
    pub dead: i64,
}

impl Counts {
    /// Both counts together (of two shards).
    pub fn plus(self, other: Counts) -> Counts {
        Counts {
            pending: self.pending + other.pending,
            running: self.running + other.running,
            done: self.done + other.done,
            dead: self.dead + other.dead,
        }
    }

    /// Reads `counts.sql`'s rows; a status without a row is zero.
    pub fn from_rows(rows: &[Row]) -> Counts {
        let mut c = Counts::default();
        for row in rows {
            let n = row.get("n").and_then(int_of).unwrap_or(0);
            match row.get("status").and_then(Value::as_str).and_then(Status::parse) {
                Some(Status::Pending) => c.pending = n,
                Some(Status::Running) => c.running = n,
                Some(Status::Done) => c.done = n,
                Some(Status::Dead) => c.dead = n,
                None => {}
            }
        }
        c
    }
}

/// Which jobs a list shows; `None` is any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListFilter<'a> {
    /// Status.
    pub status: Option<Status>,
    /// Payload type.
    pub job_type: Option<&'a str>,
    /// Ordering key.
    pub ordering_key: Option<&'a str>,
    /// Priority.
    pub priority: Option<u8>,
}

/// Which DEAD jobs an operator's bulk redrive takes; `None` is any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadFilter {
    /// Payload type.
    pub job_type: Option<String>,
    /// Ordering key.
    pub ordering_key: Option<String>,
    /// Text the job's error contains.
    pub error: Option<String>,
    /// Died at or after, ms.
    pub from: Option<i64>,
    /// Died before, ms.
    pub to: Option<i64>,
}

/// How many open jobs a cancel filter matches that are not yet cancelled or asked to stop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cancellable {
    /// PENDING and RUNNING together.
    pub matched: i64,
    /// Of them RUNNING: a cancel asks these to stop.
    pub running: i64,
}

/// Which open jobs an operator cancels at once (design §22.2); each `None` matches any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CancelFilter {
    /// Payload type.
    pub job_type: Option<String>,
    /// Ordering key.
    pub ordering_key: Option<String>,
    /// Limit key.
    pub limit_key: Option<String>,
    /// Text the job's last error contains (a job waiting for its retry).
    pub error: Option<String>,
    /// Submitted at or after, ms.
    pub from: Option<i64>,
    /// Submitted before, ms.
    pub to: Option<i64>,
}

/// A claim's verdict on one delivered job.
#[derive(Debug, Clone, PartialEq)]
pub enum Claimed {
    /// Ours: RUNNING under our lease (its row).
    Won(Box<JobRow>),
    /// DONE or DEAD already: a duplicate delivery.
    Finished,
    /// RUNNING under another live lease, until then (ms).
    Running(Option<i64>),
    /// PENDING, not due until then (ms).
    NotDue(i64),
    /// Not recorded: its dedupe key is active in another job.
    Clash,
    /// Its ordering key is paused (design §20.11): recorded PENDING and due, not claimed; the
    /// key's resume sends it again.
    Paused,
    /// Not reached: its shard failed (the other shards' jobs were claimed). Try again later.
    Unavailable(InfraError),
}

/// A delivered job and when its message was sent (ms): a new job's `created_at`.
pub type Sent<'a> = (&'a JobSpec, i64);

/// The DEAD jobs a filter matches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadMatches {
    /// How many match.
    pub matched: i64,
    /// How many of them can be redriven now (a readable payload, no clash of dedupe keys).
    pub redrivable: i64,
    /// The first redrivable ones, oldest death first.
    pub ids: Vec<String>,
}

/// One shard's [`DeadMatches`], each id with when it died.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeadFound {
    pub matched: i64,
    pub redrivable: i64,
    /// (finished_at, id), oldest death first.
    pub ids: Vec<(i64, String)>,
}

/// What a cancel did.
#[derive(Debug, Clone, PartialEq)]
pub enum Cancel {
    /// Now DEAD "cancelled".
    Cancelled(JobRow),
    /// RUNNING, now asked to stop: its run ends it DEAD "cancelled" (design §22.1).
    Requested(JobRow),
    /// No such job.
    NotFound,
    /// Finished (its row given), or RUNNING and asked to stop already.
    Refused(JobRow),
}

/// What a redrive did.
#[derive(Debug, Clone, PartialEq)]
pub enum Redrive {
    /// Now PENDING; re-send it.
    Redriven(JobRow),
    /// No such job.
    NotFound,
    /// Not DEAD (its status given), or its dedupe key is active in another job.
    Refused(JobRow),
}
