//! One database of the ledger (D1, or one Durable Object's SQLite) as [`Shard`]: its reads and
//! the transitions that need no more than a statement or two. The other operations on a shard
//! live with what they own (`transition.rs`, `strict.rs`, `limit.rs`, `pause.rs`, `maintain.rs`);
//! `shards.rs`'s `Ledger` routes each call to its shard and merges what many answer.

use serde_json::Value;

use super::history::{self, Kind, Minute, ACTIVITY_MINUTES};
use super::job::{int_of, Cancel, CancelFilter, Cancellable, Claimed, Counts, DeadFilter, DeadFound, Enqueued, JobRow, Lease, ListFilter, Redrive, Sent, Status, Submit};
use super::stmt;
use super::store::{Port, Sql, Stmt};
use crate::config::{OnDead, OrderingMode};
use crate::error::InfraError;

/// One database of the ledger (D1, one SQLite Durable Object, or SQLite in tests): every read and
/// write of a job's row is a method here (or in `strict.rs`, `transition.rs`, `limit.rs`,
/// `pause.rs`, `maintain.rs`), taking typed values and answering verdicts or rows. `Ledger`
/// (`shards.rs`) routes to these.
pub(crate) struct Shard<S> {
    pub(super) sql: Port<S>,
}

impl<S: Sql> Shard<S> {
    /// One job.
    pub async fn get(&self, id: &str) -> Result<Option<JobRow>, InfraError> {
        JobRow::first(&self.sql.query(stmt::get(id)).await?)
    }

    /// One job with its history (oldest event first), in one round trip.
    pub async fn get_with_history(&self, id: &str) -> Result<Option<(JobRow, Vec<history::Event>)>, InfraError> {
        let out = self.sql.batch(vec![stmt::get(id), stmt::events(id)]).await?;
        let Some(job) = JobRow::first(out.first().map(Vec::as_slice).unwrap_or_default())? else {
            return Ok(None);
        };
        let mut events = history::Event::all(out.get(1).map(Vec::as_slice).unwrap_or_default())?;
        history::with_success(&job, &mut events);
        Ok(Some((job, events)))
    }

    /// Jobs by id, in one round trip: `None` for each id without a row.
    pub async fn get_all(&self, ids: &[&str]) -> Result<Vec<Option<JobRow>>, InfraError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let out = self.sql.batch(ids.iter().map(|id| stmt::get(id)).collect()).await?;
        out.iter().map(|rows| JobRow::first(rows)).collect()
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
                let first = |i: usize| JobRow::first(pair.get(i).map(Vec::as_slice).unwrap_or_default());
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
    ) -> Result<(Vec<JobRow>, Option<(i64, String)>), InfraError> {
        let query = if filter.job_type.is_none() && filter.ordering_key.is_none() && filter.priority.is_none() {
            stmt::list(filter.status, cursor, limit)
        } else {
            stmt::list_filtered(filter, cursor, limit)
        };
        let rows = self.sql.query(query).await?;
        let jobs = JobRow::all(&rows)?;
        let next = if jobs.len() as u32 == limit { jobs.last().map(|j| (j.created_at, j.id.clone())) } else { None };
        Ok((jobs, next))
    }

    #[cfg(any(test, feature = "testing"))]
    /// Records an API job PENDING: `(job, inserted)`; when not inserted, the job it duplicates.
    pub async fn enqueue(&self, job: &super::job::JobSpec, now: i64, next_run_at: i64) -> Result<(JobRow, bool), InfraError> {
        let mut out = self.enqueue_all(&[&Submit::due(job, next_run_at)], now).await?;
        out.pop().ok_or_else(|| InfraError::new("D1", "enqueue returned no result"))
    }

    #[cfg(any(test, feature = "testing"))]
    /// Records many API jobs PENDING in one round trip, in order (one statement each): for each,
    /// `(job, inserted)`; when not inserted, the job it duplicates (same id, or the active holder of
    /// its dedupe key), read in a second round trip only when there are duplicates.
    pub async fn enqueue_all(&self, jobs: &[&Submit<'_>], now: i64) -> Result<Vec<(JobRow, bool)>, InfraError> {
        Ok(self.submit_all(jobs, now).await?.into_iter().map(|e| (e.job, e.inserted)).collect())
    }

    /// Records submissions in one round trip, in order, each after what its `on_duplicate` does
    /// to the open job holding its dedupe key (design §22.3); a job not recorded is answered with
    /// the job it duplicates (read in a second round trip). What was superseded is audited in its
    /// history, best effort.
    pub async fn submit_all(&self, jobs: &[&Submit<'_>], now: i64) -> Result<Vec<Enqueued>, InfraError> {
        let mut stmts = Vec::with_capacity(jobs.len());
        // Per job: where its supersede statements start, and where its insert is.
        let mut at = Vec::with_capacity(jobs.len());
        for s in jobs {
            let before = stmts.len();
            stmts.extend(stmt::supersede(s, now));
            at.push((before, stmts.len()));
            stmts.push(stmt::enqueue(s, now));
            if !s.after.is_empty() {
                stmts.push(stmt::wait_add(&s.spec.id, s.after_dead, now, s.after));
                if s.batch {
                    stmts.push(stmt::batch_add(&s.spec.id, s.after));
                }
            }
        }
        let out = self.sql.batch(stmts).await?;
        let rows = |i: usize| out.get(i).map(Vec::as_slice).unwrap_or_default();
        let mut recorded = Vec::with_capacity(jobs.len());
        for &(from, insert) in &at {
            let superseded = (from..insert).map(|i| JobRow::first(rows(i))).find_map(Result::transpose).transpose()?;
            recorded.push((JobRow::first(rows(insert))?, superseded));
        }
        let missing: Vec<usize> = (0..jobs.len()).filter(|&i| recorded[i].0.is_none()).collect();
        let existing = if missing.is_empty() {
            Vec::new()
        } else {
            let reads =
                missing.iter().map(|&i| stmt::existing(&jobs[i].spec.id, jobs[i].spec.dedupe_key.as_deref())).collect();
            self.sql.batch(reads).await?
        };
        let mut existing = missing.iter().zip(existing).collect::<std::collections::HashMap<_, _>>();
        let answer = recorded
            .into_iter()
            .enumerate()
            .map(|(i, (job, superseded))| match job {
                Some(job) => Ok(Enqueued { job, inserted: true, superseded }),
                None => JobRow::first(existing.remove(&i).as_deref().unwrap_or_default())?
                    .map(|job| Enqueued { job, inserted: false, superseded })
                    .ok_or_else(|| InfraError::new("D1", "enqueue wrote nothing and found no conflicting job")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.audit_superseded(&answer, now).await;
        Ok(answer)
    }

    /// The history lines of holders a submission superseded: "superseded" (replaced, or left
    /// running beside the new job), "cancel" (a PENDING one cancelled) and "cancel_requested" (a
    /// RUNNING one asked to stop). Best effort: the submission stands without them.
    async fn audit_superseded(&self, answer: &[Enqueued], now: i64) {
        let lines: Vec<Stmt> = answer
            .iter()
            .filter_map(|e| e.superseded.as_ref())
            .flat_map(|held| {
                let mut lines = vec![];
                if held.status == Status::Dead {
                    lines.push(stmt::action_applied(&held.id, now, history::Kind::Cancel, Status::Dead));
                } else {
                    lines.push(stmt::action_applied(&held.id, now, history::Kind::Superseded, held.status));
                }
                if held.status == Status::Running && held.cancel_requested_at == Some(now) {
                    lines.push(stmt::action_applied(&held.id, now, history::Kind::CancelRequested, Status::Running));
                }
                lines
            })
            .collect();
        if !lines.is_empty() {
            let _ = self.sql.batch(lines).await;
        }
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
                let first = |i: usize| JobRow::first(c.get(i).map(Vec::as_slice).unwrap_or_default());
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

    /// The job to wake once each of `keys`' holder is gone (cancelled), one batch whatever their
    /// number: in strict mode the key's head; in lock mode its oldest PENDING job if it was put off
    /// behind the holder (made due now). `None` for a key with no PENDING job to wake.
    pub async fn keys_to_wake(
        &self,
        keys: &[&str],
        mode: OrderingMode,
        on_dead: OnDead,
        now: i64,
    ) -> Result<Vec<Option<JobRow>>, InfraError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let reads = keys.iter().map(|key| match mode {
            OrderingMode::Strict => stmt::head(key, on_dead),
            OrderingMode::Lock => stmt::wake_waiting(key, now),
        });
        let out = self.sql.batch(reads.collect()).await?;
        out.iter().map(|rows| Ok(JobRow::first(rows)?.filter(|j| j.status == Status::Pending))).collect()
    }

    /// How many open jobs match `filter` and are not yet cancelled or asked to stop (design §22.2).
    pub async fn cancellable_matching(&self, filter: &CancelFilter) -> Result<Cancellable, InfraError> {
        let rows = self.sql.query(stmt::cancellable_matching(filter)).await?;
        let count = |name: &str| rows.first().and_then(|r| r.get(name)).and_then(int_of).unwrap_or(0);
        Ok(Cancellable { matched: count("matched"), running: count("running") })
    }

    /// Cancels at most `limit` open jobs matching `filter`, oldest submission first (PENDING ones
    /// DEAD "cancelled", RUNNING ones asked to stop), each audited in its history ("cancel", or
    /// "cancel_requested"; best effort): the jobs' rows after the cancel.
    pub async fn cancel_matching(&self, filter: &CancelFilter, now: i64, limit: u32) -> Result<Vec<JobRow>, InfraError> {
        let rows = self.sql.query(stmt::cancel_matching(filter, now, limit)).await?;
        let cancelled = JobRow::all(&rows)?;
        if !cancelled.is_empty() {
            let line = |j: &JobRow| match j.status {
                Status::Dead => stmt::action_applied(&j.id, now, Kind::Cancel, Status::Dead),
                _ => stmt::action_applied(&j.id, now, Kind::CancelRequested, Status::Running),
            };
            let _ = self.sql.batch(cancelled.iter().map(line).collect()).await;
        }
        Ok(cancelled)
    }

    /// PENDING -> DEAD "cancelled", RUNNING -> asked to stop (design §22.1), or why not; audited
    /// in the job's history ("cancel", or "cancel_requested"). A cancelled job's place in its
    /// limit key's line is the caller's to give up ([`Ledger::forget`](super::Ledger::forget)).
    pub async fn cancel(&self, id: &str, now: i64) -> Result<Cancel, InfraError> {
        let out = self
            .sql
            .batch(vec![
                stmt::cancel(id, now),
                stmt::action(id, now, history::Kind::Cancel, Status::Dead),
                stmt::action_applied(id, now, history::Kind::CancelRequested, Status::Running),
                stmt::get(id),
            ])
            .await?;
        let first = |i: usize| JobRow::first(out.get(i).map(Vec::as_slice).unwrap_or_default());
        Ok(match (first(0)?, first(3)?) {
            (Some(j), _) if j.status == Status::Running => Cancel::Requested(j),
            (Some(j), _) => Cancel::Cancelled(j),
            (None, Some(j)) => Cancel::Refused(j),
            (None, None) => Cancel::NotFound,
        })
    }
}

impl<S: Sql> Shard<S> {
    /// The activity of the last hour, and its runs' times (design §27.6), in one round trip.
    pub async fn activity(&self, now: i64) -> Result<(Vec<Minute>, Vec<history::Sample>), InfraError> {
        let since = (now.div_euclid(60_000) - (ACTIVITY_MINUTES - 1)) * 60_000;
        let stmts = vec![
            stmt::activity_runs(since),
            stmt::activity_jobs(since),
            stmt::counts(),
            stmt::run_times(since, history::TIMES_SAMPLE),
        ];
        let out = self.sql.batch(stmts).await?;
        let at = |i: usize| out.get(i).map(Vec::as_slice).unwrap_or_default();
        let counts = Counts::from_rows(at(2));
        let minutes = history::activity(now, counts.pending + counts.running, at(0), at(1));
        Ok((minutes, history::samples(at(3))))
    }

    /// Audits an operator's skip of `job_id`, DEAD as of `at` (the skip applied in an earlier round
    /// trip). Best effort: the skip stands without its line.
    pub async fn audit_skip(&self, job_id: &str, at: i64) {
        let _ = self.sql.query(stmt::action_applied(job_id, at, Kind::Skip, Status::Dead)).await;
    }
}
