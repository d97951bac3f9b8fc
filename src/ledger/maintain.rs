//! The ledger's side of keeping jobs alive: lease renewal (by the consumer while it runs) and the
//! cron's scans and sweeps (`crate::maintenance` decides what to send; these read and write).

use std::collections::HashSet;

use serde_json::Value;

use super::history::Run;
use super::stmt;
use super::job::{JobRow, Status};
use super::shard::Shard;
use super::store::Sql;
use crate::config::{OnDead, OrderingMode};
use crate::error::InfraError;

/// What one purge may do on each shard: at most `batches` batches of `limit` jobs, and none begun
/// once `spent()` says its time is up (a cron run's wall time and D1's 30 s per query bound it).
pub struct PurgeBudget<'a> {
    /// Jobs per batch (one transaction).
    pub limit: u32,
    /// Batches at most.
    pub batches: u32,
    /// Whether the time for purging is spent.
    pub spent: &'a dyn Fn() -> bool,
}

/// Who the cron's reaper records expired runs as.
const MAINTENANCE_ACTOR: &str = "maintenance";

impl<S: Sql> Shard<S> {
    /// Extends `owner`'s leases on `ids` (the jobs it claimed) until `until`: the ids still ours.
    pub async fn renew(
        &self,
        owner: &str,
        now: i64,
        until: i64,
        ids: &[String],
    ) -> Result<HashSet<String>, InfraError> {
        let rows = self.sql.query(stmt::renew(owner, now, until, ids)).await?;
        Ok(rows.iter().filter_map(|r| r.get("id").and_then(Value::as_str).map(str::to_string)).collect())
    }

    /// Expired leases back to PENDING (or DEAD when out of attempts), at most `limit`: their rows.
    /// Each expired lease was a run that never reported; [`Self::record_reaped`] writes its line.
    pub async fn reap(&self, now: i64, limit: u32) -> Result<Vec<JobRow>, InfraError> {
        JobRow::all(&self.sql.query(stmt::reap(now, limit)).await?)
    }

    /// The history lines of reaped runs.
    pub async fn record_reaped(&self, reaped: &[&JobRow], now: i64) -> Result<(), InfraError> {
        let runs: Vec<Run> =
            reaped.iter().map(|j| Run::ended(j, now, now, j.last_error.clone(), MAINTENANCE_ACTOR)).collect();
        self.record_runs(&runs).await
    }

    /// PENDING jobs due before `due_before` (their message was probably lost); in strict mode only
    /// those outside a key's sequence.
    pub async fn overdue(&self, due_before: i64, limit: u32, mode: OrderingMode) -> Result<Vec<JobRow>, InfraError> {
        JobRow::all(&self.sql.query(stmt::overdue(due_before, limit, mode)).await?)
    }

    /// Strict mode: the due heads of keys nothing runs.
    pub async fn stalled_heads(&self, due_before: i64, on_dead: OnDead, limit: u32) -> Result<Vec<JobRow>, InfraError> {
        JobRow::all(&self.sql.query(stmt::stalled_heads(due_before, on_dead, limit)).await?)
    }

    /// Takes each found PENDING job for re-sending, if unchanged since it was read (so two
    /// overlapping runs never both send it): the jobs taken.
    pub async fn take_for_resend(&self, found: &[&JobRow], now: i64) -> Result<Vec<JobRow>, InfraError> {
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let taken =
            self.sql.batch(found.iter().map(|j| stmt::mark_resent(&j.id, j.next_run_at, now)).collect()).await?;
        Ok(taken.iter().filter_map(|rows| JobRow::first(rows).ok().flatten()).collect())
    }

    /// Deletes the jobs of `status` finished before `before`, oldest first, in batches of
    /// `budget.limit` (each one transaction, its jobs' tally, history, waits and batch rows with
    /// them) until none is left or the budget is spent: how many. DEAD jobs a key or a waiter
    /// still needs are kept (`keep_keyed`: ON_DEAD = "block"). The DONE purge starts where the
    /// last one stopped (its cursor), so it never re-reads the DEAD jobs it keeps; the DEAD purge
    /// reads from the oldest, past the few it keeps (design "The ledger's life").
    pub async fn purge(
        &self,
        status: Status,
        before: i64,
        keep_keyed: bool,
        budget: &PurgeBudget<'_>,
    ) -> Result<usize, InfraError> {
        let cursor = status == Status::Done;
        let mut since = if cursor {
            let rows = self.sql.query(stmt::purge_cursor(status)).await?;
            rows.first().and_then(|r| r.get("until")).and_then(Value::as_f64).map_or(0, |v| v as i64)
        } else {
            0
        };
        let start = since;
        let mut purged = 0;
        for _ in 0..budget.batches {
            if since >= before || (budget.spent)() {
                break;
            }
            let out = self.sql.batch(stmt::purge(status, since, before, budget.limit, keep_keyed).into()).await?;
            let deleted = out.last().map_or(&[][..], Vec::as_slice);
            purged += deleted.len();
            if deleted.len() < budget.limit as usize {
                // None left before `before`: the next run starts there.
                since = before;
                break;
            }
            // More may be due at the last one's millisecond: the next batch starts at it.
            since = deleted.iter().filter_map(|r| r.get("finished_at").and_then(Value::as_f64)).fold(since as f64, f64::max)
                as i64;
        }
        if cursor && since > start {
            self.sql.query(stmt::purge_advance(status, since)).await?;
        }
        Ok(purged)
    }
}
