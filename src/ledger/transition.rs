//! What can happen to a job's row: every change the consumer and maintenance make, as values.
//! The consumer decides a [`Transition`] (River's executor builds its `JobSetStateIfRunning`
//! params the same way) and hands it, with the run's history line, to [`Ledger::record_all`](super::shards::Ledger::record_all),
//! which applies a batch of them in one round trip. A guarded transition (by the lease owner)
//! that changes nothing means the lease was lost: the caller must not act on it.
//!
//! ```text
//!   NoteDeferral ──► PENDING ◄── Defer / Snooze / Fail{Pending} ── RUNNING ── Complete ──► DONE
//!   RecordDead ────► DEAD    ◄── Fail{Dead} ─────────────────────── RUNNING
//! ```

use super::history::{Run, RunOutcome};
use super::stmt;
use super::job::{JobRow, JobSpec, Status};
use super::placement::Route;
use super::shard::Shard;
use super::store::{Sql, Stmt};
use crate::error::InfraError;

/// One change to one job's row.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    /// RUNNING -> DONE by its lease owner, keeping the run's result (JSON text, bounded and sealed
    /// as the job is) and the HTTP status it got.
    Complete {
        /// The job.
        id: String,
        /// Where it lives ([`JobRow::route`]).
        route: Route,
        /// Its lease owner.
        owner: String,
        /// ms.
        at: i64,
        /// What the run returned.
        result: Option<String>,
        /// The HTTP status the run got.
        http_status: Option<u16>,
        /// ms the handler was called (`None`: the row keeps its claim's).
        started_at: Option<i64>,
    },
    /// RUNNING -> PENDING (again at `next_run_at`) or DEAD, by its lease owner.
    Fail {
        /// The job.
        id: String,
        /// Where it lives ([`JobRow::route`]).
        route: Route,
        /// Its lease owner.
        owner: String,
        /// ms.
        at: i64,
        /// PENDING or DEAD.
        to: Status,
        /// ms; when it may run again.
        next_run_at: i64,
        /// Why.
        error: String,
        /// ms the handler was called (`None`: not called; the row keeps its claim's).
        started_at: Option<i64>,
    },
    /// RUNNING -> PENDING at `next_run_at` by its lease owner, the attempt given back and a
    /// snooze counted; the payload replaced when `payload` is given.
    Snooze {
        /// The job.
        id: String,
        /// Where it lives ([`JobRow::route`]).
        route: Route,
        /// Its lease owner.
        owner: String,
        /// ms.
        at: i64,
        /// ms.
        next_run_at: i64,
        /// The next run's payload (sealed when the job is).
        payload: Option<String>,
        /// ms the handler was called.
        started_at: Option<i64>,
    },
    /// RUNNING -> PENDING at `next_run_at` without a run (claimed, not run): the attempt given
    /// back, a deferral counted.
    Defer {
        /// The job.
        id: String,
        /// Where it lives ([`JobRow::route`]).
        route: Route,
        /// Its lease owner.
        owner: String,
        /// ms.
        at: i64,
        /// ms.
        next_run_at: i64,
        /// Parked in its limit key's line: its wake-up may make it due (design §20.10).
        parked: bool,
    },
    /// A job that can never run (unreadable, dead-lettered, a dedupe clash): DEAD with `error`,
    /// inserted if new. DONE rows and live leases are left alone.
    RecordDead {
        /// The job as its message describes it.
        spec: JobSpec,
        /// ms.
        at: i64,
        /// Why.
        error: String,
    },
    /// Lock mode: a message put off behind a held key, recorded PENDING (a deferral counted), its
    /// due time kept within `slack_ms` of `next_run_at`.
    NoteDeferral {
        /// The job as its message describes it.
        spec: JobSpec,
        /// ms.
        at: i64,
        /// ms.
        next_run_at: i64,
        /// ms.
        slack_ms: i64,
    },
}

impl Transition {
    /// The job a guarded transition needs the lease of; `None` for the unguarded ones.
    pub fn guarded_job(&self) -> Option<&str> {
        match self {
            Transition::Complete { id, .. }
            | Transition::Fail { id, .. }
            | Transition::Snooze { id, .. }
            | Transition::Defer { id, .. } => Some(id),
            Transition::RecordDead { .. } | Transition::NoteDeferral { .. } => None,
        }
    }

    /// Where the job lives.
    pub fn route(&self) -> Route {
        match self {
            Transition::Complete { route, .. }
            | Transition::Fail { route, .. }
            | Transition::Snooze { route, .. }
            | Transition::Defer { route, .. } => *route,
            Transition::RecordDead { spec, .. } | Transition::NoteDeferral { spec, .. } => spec.route(),
        }
    }

    /// The statement whose returned row says the transition applied, and one that rides with it.
    fn stmts(&self) -> (Stmt, Option<Stmt>) {
        let one = |s| (s, None);
        match self {
            // A run's end rides with the cancel rule: a job asked to stop while it ran ends DEAD
            // "cancelled" whatever the run did (design §22.1), as does one handed back unrun.
            Transition::Complete { id, owner, at, result, http_status, started_at, .. } => {
                (stmt::complete_run(id, owner, *at, result.as_deref(), *http_status, *started_at), Some(stmt::settle_cancelled(id, *at)))
            }
            Transition::Fail { id, owner, at, to, next_run_at, error, started_at, .. } => {
                (stmt::fail_run(id, owner, *at, *to, *next_run_at, error, *started_at), Some(stmt::settle_cancelled(id, *at)))
            }
            Transition::Snooze { id, owner, at, next_run_at, payload, started_at, .. } => {
                (stmt::snooze_run(id, owner, *at, *next_run_at, payload.as_deref(), *started_at), Some(stmt::settle_cancelled(id, *at)))
            }
            // A job claimed and handed back unrun (a chain's budget, a lost lease) ends DEAD too
            // when it was asked to stop meanwhile: PENDING, it would be claimed again.
            Transition::Defer { id, owner, at, next_run_at, parked, .. } => {
                (stmt::defer(id, owner, *at, *next_run_at, *parked), Some(stmt::settle_cancelled(id, *at)))
            }
            Transition::RecordDead { spec, at, error } => one(stmt::record_dead(spec, *at, error)),
            Transition::NoteDeferral { spec, at, next_run_at, slack_ms } => (
                stmt::note_deferral(spec, *at, *next_run_at),
                Some(stmt::keep_due(&spec.id, *next_run_at, *at, *slack_ms)),
            ),
        }
    }
}

/// A transition with the history line of the run it ends, if any (a success has none: its DONE
/// row describes the run).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The change.
    pub transition: Transition,
    /// The run's line in the job's history.
    pub run: Option<Run>,
}

impl From<Transition> for Record {
    fn from(transition: Transition) -> Self {
        Record { transition, run: None }
    }
}

impl Record {
    /// The statements, in order: the transition, what rides with it, the history line.
    pub(super) fn stmts(&self) -> (Stmt, Vec<Stmt>) {
        let (first, rides) = self.transition.stmts();
        (first, rides.into_iter().chain(self.run.as_ref().map(stmt::run)).collect())
    }
}

/// What a transition's returned row says of the jobs waiting on it (design §24): when it finished
/// a job they wait on (`complete.sql` and `fail.sql` read `waited`), that job's id. (How it
/// finished is read again at the release: a DONE record can be settled DEAD in the same batch.)
pub(super) fn finished_waited(rows: &[super::store::Row]) -> Option<String> {
    let row = rows.first().filter(|r| r.get("waited").and_then(super::job::int_of) == Some(1))?;
    row.get("status").and_then(|s| s.as_str()).and_then(Status::parse).filter(|s| s.is_finished())?;
    Some(row.get("id")?.as_str()?.to_string())
}

/// A job recorded DEAD, as [`Ledger::record_dead_all`](super::shards::Ledger::record_dead_all) found it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedDead {
    /// Whether this call made it DEAD.
    pub recorded: bool,
    /// Its row afterwards.
    pub job: Option<JobRow>,
}

impl<S: Sql> Shard<S> {
    /// Applies records in one round trip, in order: for each, whether its transition changed its
    /// row (a guarded one that did not: the lease was lost), and, when it finished a job other
    /// jobs wait on (design §24), that job's id and status.
    pub async fn record_all(&self, records: &[&Record]) -> Result<Vec<(bool, Option<String>)>, InfraError> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let mut stmts = Vec::with_capacity(records.len() * 2);
        let mut at = Vec::with_capacity(records.len());
        for r in records {
            let (first, rest) = r.stmts();
            at.push(stmts.len());
            stmts.push(first);
            stmts.extend(rest);
        }
        let out = self.sql.batch(stmts).await?;
        Ok(at
            .into_iter()
            .map(|i| {
                let rows = out.get(i).map(Vec::as_slice).unwrap_or_default();
                (!rows.is_empty(), finished_waited(rows))
            })
            .collect())
    }

    /// Records jobs that can never run DEAD with their errors, in one round trip, and reads each
    /// row back (a job running elsewhere is left to its run).
    pub async fn record_dead_all(
        &self,
        jobs: &[&(JobSpec, String)],
        now: i64,
    ) -> Result<Vec<RecordedDead>, InfraError> {
        let mut stmts = Vec::with_capacity(jobs.len() * 2);
        for (spec, error) in jobs.iter().copied() {
            stmts.push(stmt::record_dead(spec, now, error));
            stmts.push(stmt::get(&spec.id));
        }
        let out = self.sql.batch(stmts).await?;
        out.chunks(2)
            .map(|pair| {
                let recorded = pair.first().is_some_and(|rows| !rows.is_empty());
                Ok(RecordedDead { recorded, job: JobRow::first(pair.get(1).map(Vec::as_slice).unwrap_or_default())? })
            })
            .collect()
    }

    /// Ends the leases of `owners`, invocations known to have died, in one round trip: their
    /// RUNNING jobs back to PENDING (or DEAD when out of attempts), `why` their error, each run in
    /// its job's history. Returns the ended jobs' rows.
    pub async fn end_leases(&self, owners: &[&str], now: i64, why: &str) -> Result<Vec<JobRow>, InfraError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        let out = self.sql.batch(owners.iter().map(|o| stmt::end_leases(now, o, why)).collect()).await?;
        let mut ended = Vec::new();
        let mut runs = Vec::new();
        for (owner, rows) in owners.iter().zip(&out) {
            for j in JobRow::all(rows)? {
                runs.push(Run::ended(&j, j.started_at.unwrap_or(now), now, Some(why.to_string()), owner));
                ended.push(j);
            }
        }
        // Best effort, like the reaper's: the transitions stand without their history lines.
        let _ = self.record_runs(&runs).await;
        Ok(ended)
    }

    /// Writes history lines of runs that ended without their runner recording them (an expired
    /// or ended lease).
    pub async fn record_runs(&self, runs: &[Run]) -> Result<(), InfraError> {
        if runs.is_empty() {
            return Ok(());
        }
        self.sql.batch(runs.iter().map(stmt::run).collect()).await.map(|_| ())
    }
}

impl Run {
    /// The history line of `job`'s run, ended by someone else than its runner (its row as the
    /// ending left it: DEAD, or PENDING to retry).
    pub fn ended(job: &JobRow, started_at: i64, finished_at: i64, error: Option<String>, actor: &str) -> Run {
        Run {
            job_id: job.id.clone(),
            attempt: job.attempts,
            started_at,
            finished_at,
            outcome: if job.status == Status::Dead { RunOutcome::Dead } else { RunOutcome::Retry },
            error,
            http_status: None,
            actor: actor.to_string(),
        }
    }
}
