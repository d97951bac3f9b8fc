//! Scheduled maintenance (SPEC 6), run by the cron trigger. Every step is idempotent.
//!
//! 1. Reap RUNNING jobs whose lease expired (their invocation died): PENDING and re-sent, or DEAD
//!    when out of attempts. 2. Re-send PENDING jobs overdue by more than a grace period (their
//!    message was lost). 3. Purge DONE rows older than the retention.

use serde::Serialize;

use crate::clock::Clock;
use crate::config::Config;
use crate::error::InfraError;
use crate::ledger::{stmt, Job, Ledger, Sql, Status};
use crate::producer::{self, QueueSender};

/// How long past its `next_run_at` a PENDING job may wait before its message counts as lost.
/// Generous: a backlog also delays delivery, and a needless re-send costs a duplicate delivery
/// (which the ledger absorbs), never a second run.
pub const RESEND_GRACE_MS: i64 = 15 * 60 * 1000;
/// Rows handled per step per run; the next minute's run continues.
pub const STEP_LIMIT: u32 = 100;
/// DONE rows deleted per run.
pub const PURGE_LIMIT: u32 = 1000;

/// What one run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Expired leases moved back to PENDING and re-sent.
    pub reaped: usize,
    /// Expired leases out of attempts, now DEAD.
    pub reaped_dead: usize,
    /// Overdue PENDING jobs re-sent.
    pub resent: usize,
    /// DONE rows purged.
    pub purged: usize,
}

/// Runs all steps once.
pub async fn run<S: Sql, Q: QueueSender, C: Clock>(
    ledger: &Ledger<S>,
    queue: &Q,
    clock: &C,
    cfg: &Config,
) -> Result<Report, InfraError> {
    let now = clock.now_ms();
    let mut report = Report::default();

    let reaped = Job::all(&ledger.sql.query(stmt::reap(now, STEP_LIMIT)).await?)?;
    let (pending, dead): (Vec<Job>, Vec<Job>) = reaped.into_iter().partition(|j| j.status == Status::Pending);
    report.reaped_dead = dead.len();
    report.reaped = pending.len();
    // Should the send fail, these stay PENDING and step 2 of a later run re-sends them.
    producer::send_all(queue, pending.iter().filter_map(|j| producer::message_for(j, 0)).collect()).await?;

    let overdue = Job::all(&ledger.sql.query(stmt::overdue(now - RESEND_GRACE_MS, STEP_LIMIT)).await?)?;
    if !overdue.is_empty() {
        // Take each one first, so two overlapping runs never both re-send it.
        let taken =
            ledger.sql.batch(overdue.iter().map(|j| stmt::mark_resent(&j.id, j.next_run_at, now)).collect()).await?;
        let won: Vec<Job> = taken.iter().filter_map(|rows| Job::first(rows).ok().flatten()).collect();
        report.resent = won.len();
        producer::send_all(queue, won.iter().filter_map(|j| producer::message_for(j, 0)).collect()).await?;
    }

    let cutoff = now - i64::from(cfg.retention_days) * 86_400_000;
    report.purged = ledger.sql.query(stmt::purge(cutoff, PURGE_LIMIT)).await?.len();
    Ok(report)
}
