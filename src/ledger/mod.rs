//! The job ledger: one row per job in D1, every transition one guarded statement.
//!
//! This module owns the ledger's states, its row type, and the statements (SQL text in `sql/`,
//! parameters bound here). Each transition is a conditional UPDATE/UPSERT ... RETURNING: a
//! transition by a non-owner, or from the wrong state, changes nothing and returns no row, which
//! callers check. The clock is always a parameter. Must not: decide what to do with a message (the
//! consumer does), or know about D1's API (`d1.rs` does).
//!
//! The layout (`migrations/0007`) is shaped by what D1 bills, a row for every table row and index
//! entry written: no index holds `status` (a claim rewrites no entry), open jobs are found by
//! `finished_at IS NULL` and a key's unfinished jobs by `passed_at IS NULL`, a success is described
//! by its DONE row instead of a history row. A job's whole life is 6 to 8 rows written.
//!
//! ```text
//!   enqueue/defer-note        claim             complete
//!  ────────────────► PENDING ──────► RUNNING ──────────► DONE ──purge──► (gone)
//!                      ▲  ▲            │ │ fail: retry        ▲
//!                      │  └────────────┘ │ / lease reaped     │
//!                      │    redrive      ▼ fail: permanent or out of attempts
//!                      └──────────────  DEAD ◄── unreadable body / delivery attempts exhausted /
//!                                            operator cancel (PENDING only)
//! ```

#[cfg(feature = "testing")]
pub mod conformance;
#[cfg(target_arch = "wasm32")]
pub mod d1;
#[cfg(target_arch = "wasm32")]
pub mod durable;
pub mod history;
pub mod limit;
mod maintain;
pub mod moving;
pub mod object;
#[cfg(test)]
mod params;
pub mod pause;
mod shards;
// The statement builders are the ledger's own; the project's SQL tests reach them through the
// `testing` feature.
pub mod route;
pub mod schema;
#[cfg(feature = "testing")]
pub mod stmt;
#[cfg(not(feature = "testing"))]
mod stmt;
pub mod store;
pub mod strict;
pub mod transition;

use serde::Serialize;
use serde_json::Value;

use crate::config::{OnDead, OrderingMode};
use crate::error::InfraError;
pub use route::Route;
pub use shards::Ledger;
#[cfg(any(test, feature = "testing"))]
pub use shards::MAX_SHARDS;
pub use store::{Param, Row, Sql, Stmt};
pub use transition::{Record, RecordedDead, Transition};

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
pub struct Job {
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

impl Job {
    /// Reads a row. A row that does not fit is an infrastructure error (schema drift), not a panic.
    pub fn from_row(row: &Row) -> Result<Job, InfraError> {
        let text = |c: &str| row.get(c).and_then(Value::as_str).map(str::to_string);
        let int = |c: &str| row.get(c).and_then(int_of);
        let need_int = |c: &str| int(c).ok_or_else(|| InfraError::new("D1", format!("job row lacks integer {c}")));
        let status = text("status")
            .and_then(|s| Status::parse(&s))
            .ok_or_else(|| InfraError::new("D1", "job row has no valid status"))?;
        Ok(Job {
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
        })
    }

    /// The first row as a job, if any.
    pub fn first(rows: &[Row]) -> Result<Option<Job>, InfraError> {
        rows.first().map(Job::from_row).transpose()
    }

    /// Every row as a job.
    pub fn all(rows: &[Row]) -> Result<Vec<Job>, InfraError> {
        rows.iter().map(Job::from_row).collect()
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

pub use crate::limits::{DEFAULT_PRIORITY, MAX_PRIORITY};

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
}

#[cfg(any(test, feature = "testing"))]
impl<'a> Submit<'a> {
    /// A job due at `due_at`, sent as ever.
    pub fn due(spec: &'a JobSpec, due_at: i64) -> Self {
        Submit { spec, due_at, parks_until: None }
    }
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

/// A claim's verdict on one delivered job.
#[derive(Debug, Clone, PartialEq)]
pub enum Claimed {
    /// Ours: RUNNING under our lease (its row).
    Won(Box<Job>),
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
    Cancelled(Job),
    /// No such job.
    NotFound,
    /// Not PENDING (its row given): it runs, or has finished.
    Refused(Job),
}

/// What a redrive did.
#[derive(Debug, Clone, PartialEq)]
pub enum Redrive {
    /// Now PENDING; re-send it.
    Redriven(Job),
    /// No such job.
    NotFound,
    /// Not DEAD (its status given), or its dedupe key is active in another job.
    Refused(Job),
}

/// One database of the ledger (D1, one SQLite Durable Object, or SQLite in tests): every read and
/// write of a job's row is a method here (or in `strict.rs`, `transition.rs`, `history.rs`,
/// `maintain.rs`), taking typed values and answering verdicts or rows. [`Ledger`] routes to these.
pub(crate) struct Shard<S> {
    sql: S,
}

impl<S: Sql> Shard<S> {
    /// One job.
    pub async fn get(&self, id: &str) -> Result<Option<Job>, InfraError> {
        Job::first(&self.sql.query(stmt::get(id)).await?)
    }

    /// One job with its history (oldest event first), in one round trip.
    pub async fn get_with_history(&self, id: &str) -> Result<Option<(Job, Vec<history::Event>)>, InfraError> {
        let out = self.sql.batch(vec![stmt::get(id), stmt::events(id)]).await?;
        let Some(job) = Job::first(out.first().map(Vec::as_slice).unwrap_or_default())? else {
            return Ok(None);
        };
        let mut events = history::Event::all(out.get(1).map(Vec::as_slice).unwrap_or_default())?;
        history::with_success(&job, &mut events);
        Ok(Some((job, events)))
    }

    /// Jobs by id, in one round trip: `None` for each id without a row.
    pub async fn get_all(&self, ids: &[&str]) -> Result<Vec<Option<Job>>, InfraError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let out = self.sql.batch(ids.iter().map(|id| stmt::get(id)).collect()).await?;
        out.iter().map(|rows| Job::first(rows)).collect()
    }

    /// Claims each delivered job for `owner` (lock mode, and strict mode's unkeyed jobs), in one
    /// round trip: a new job is inserted RUNNING, a due PENDING one (or one whose lease expired
    /// with attempts left) becomes RUNNING; each refusal says why, from the row read after it.
    pub async fn claim_all(&self, jobs: &[Sent<'_>], owner: &str, lease: Lease) -> Result<Vec<Claimed>, InfraError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut stmts = Vec::with_capacity(jobs.len() * 2);
        for &(job, sent_at) in jobs {
            stmts.push(stmt::claim_sent(job, sent_at, owner, lease));
            stmts.push(stmt::get(&job.id));
        }
        let out = self.sql.batch(stmts).await?;
        out.chunks(2)
            .map(|pair| {
                let first = |i: usize| Job::first(pair.get(i).map(Vec::as_slice).unwrap_or_default());
                Ok(match (first(0)?, first(1)?) {
                    // claim.sql inserts a paused key's new job PENDING.
                    (Some(j), _) if j.status == Status::Pending => Claimed::Paused,
                    (Some(won), _) => Claimed::Won(Box::new(won)),
                    (None, Some(j)) if j.status.is_finished() => Claimed::Finished,
                    (None, Some(j)) if j.status == Status::Running => Claimed::Running(j.lease_until),
                    // Due, yet not claimed in the same transaction: only a pause holds it.
                    (None, Some(j)) if j.next_run_at <= lease.due_before => Claimed::Paused,
                    (None, Some(j)) => Claimed::NotDue(j.next_run_at),
                    (None, None) => Claimed::Clash,
                })
            })
            .collect()
    }

    /// Counts by status, zeros included.
    pub async fn counts(&self) -> Result<Counts, InfraError> {
        Ok(Counts::from_rows(&self.sql.query(stmt::counts()).await?))
    }

    /// A page of jobs, newest first; the cursor for the next page when there may be more.
    pub async fn list(
        &self,
        filter: &ListFilter<'_>,
        cursor: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<(Vec<Job>, Option<(i64, String)>), InfraError> {
        let query = if filter.job_type.is_none() && filter.ordering_key.is_none() && filter.priority.is_none() {
            stmt::list(filter.status, cursor, limit)
        } else {
            stmt::list_filtered(filter, cursor, limit)
        };
        let rows = self.sql.query(query).await?;
        let jobs = Job::all(&rows)?;
        let next = if jobs.len() as u32 == limit { jobs.last().map(|j| (j.created_at, j.id.clone())) } else { None };
        Ok((jobs, next))
    }

    #[cfg(any(test, feature = "testing"))]
    /// Records an API job PENDING: `(job, inserted)`; when not inserted, the job it duplicates.
    pub async fn enqueue(&self, job: &JobSpec, now: i64, next_run_at: i64) -> Result<(Job, bool), InfraError> {
        let mut out = self.enqueue_all(&[&Submit::due(job, next_run_at)], now).await?;
        out.pop().ok_or_else(|| InfraError::new("D1", "enqueue returned no result"))
    }

    /// Records many API jobs PENDING in one round trip, in order (one statement each): for each,
    /// `(job, inserted)`; when not inserted, the job it duplicates (same id, or the active holder of
    /// its dedupe key), read in a second round trip only when there are duplicates.
    pub async fn enqueue_all(&self, jobs: &[&Submit<'_>], now: i64) -> Result<Vec<(Job, bool)>, InfraError> {
        let out = self.sql.batch(jobs.iter().map(|s| stmt::enqueue(s, now)).collect()).await?;
        let inserted: Vec<Option<Job>> = out.iter().map(|rows| Job::first(rows)).collect::<Result<_, _>>()?;
        let missing: Vec<usize> = (0..jobs.len()).filter(|&i| inserted.get(i).is_none_or(Option::is_none)).collect();
        let existing = if missing.is_empty() {
            Vec::new()
        } else {
            let reads =
                missing.iter().map(|&i| stmt::existing(&jobs[i].spec.id, jobs[i].spec.dedupe_key.as_deref())).collect();
            self.sql.batch(reads).await?
        };
        let mut existing = missing.iter().zip(existing).collect::<std::collections::HashMap<_, _>>();
        inserted
            .into_iter()
            .enumerate()
            .map(|(i, job)| match job {
                Some(j) => Ok((j, true)),
                None => Job::first(existing.remove(&i).as_deref().unwrap_or_default())?
                    .map(|j| (j, false))
                    .ok_or_else(|| InfraError::new("D1", "enqueue wrote nothing and found no conflicting job")),
            })
            .collect()
    }

    /// DEAD -> PENDING, or why not; audited in the job's history.
    pub async fn redrive(&self, id: &str, now: i64) -> Result<Redrive, InfraError> {
        Ok(self.redrive_all(&[id], now).await?.pop().unwrap_or(Redrive::NotFound))
    }

    /// Redrives many jobs in one round trip, in order; each audited.
    pub async fn redrive_all(&self, ids: &[&str], now: i64) -> Result<Vec<Redrive>, InfraError> {
        let mut stmts = Vec::with_capacity(ids.len() * 3);
        for id in ids {
            stmts.push(stmt::redrive(id, now));
            stmts.push(stmt::action(id, now, history::Kind::Redrive, Status::Pending));
            stmts.push(stmt::get(id));
        }
        let out = self.sql.batch(stmts).await?;
        out.chunks(3)
            .map(|c| {
                let first = |i: usize| Job::first(c.get(i).map(Vec::as_slice).unwrap_or_default());
                Ok(match (first(0)?, first(2)?) {
                    (Some(j), _) => Redrive::Redriven(j),
                    (None, Some(j)) => Redrive::Refused(j),
                    (None, None) => Redrive::NotFound,
                })
            })
            .collect()
    }

    /// DEAD jobs matching `filter`: how many, how many can be redriven, and the first `limit` of
    /// those (oldest death first), each with when it died (to merge shards by).
    pub async fn dead_matching(&self, filter: &DeadFilter, limit: u32) -> Result<DeadFound, InfraError> {
        let rows = self.sql.query(stmt::dead_matching(filter, limit)).await?;
        let count = |c: &str| rows.first().and_then(|r| r.get(c)).and_then(int_of).unwrap_or(0);
        let ids = rows
            .iter()
            .filter(|r| r.get("redrivable_row").and_then(int_of) == Some(1))
            .filter_map(|r| {
                let id = r.get("id").and_then(Value::as_str)?;
                Some((r.get("finished_at").and_then(int_of).unwrap_or(0), id.to_string()))
            })
            .collect();
        Ok(DeadFound { matched: count("matched"), redrivable: count("redrivable"), ids })
    }

    /// The job to wake once `key`'s holder is gone (cancelled): in strict mode the key's head; in
    /// lock mode its oldest PENDING job if it was put off behind the holder (made due now).
    /// `None` when there is no PENDING job to wake.
    pub async fn key_to_wake(
        &self,
        key: &str,
        mode: OrderingMode,
        on_dead: OnDead,
        now: i64,
    ) -> Result<Option<Job>, InfraError> {
        let read = match mode {
            OrderingMode::Strict => stmt::head(key, on_dead),
            OrderingMode::Lock => stmt::wake_waiting(key, now),
        };
        Ok(Job::first(&self.sql.query(read).await?)?.filter(|j| j.status == Status::Pending))
    }

    /// PENDING -> DEAD "cancelled", or why not; audited in the job's history.
    pub async fn cancel(&self, id: &str, now: i64) -> Result<Cancel, InfraError> {
        let out = self
            .sql
            .batch(vec![
                stmt::cancel(id, now),
                stmt::action(id, now, history::Kind::Cancel, Status::Dead),
                stmt::get(id),
            ])
            .await?;
        let first = |i: usize| Job::first(out.get(i).map(Vec::as_slice).unwrap_or_default());
        Ok(match (first(0)?, first(2)?) {
            (Some(j), _) => Cancel::Cancelled(j),
            (None, Some(j)) => Cancel::Refused(j),
            (None, None) => Cancel::NotFound,
        })
    }
}
