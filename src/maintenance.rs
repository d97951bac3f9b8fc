//! Scheduled maintenance (design §6), run by the cron trigger. Every step is idempotent.
//!
//! 1. Reap RUNNING jobs whose lease expired (their invocation died): PENDING and re-sent, or DEAD
//!    when out of attempts. 2. Re-send PENDING jobs overdue by more than a grace period (their
//!    message was lost). 3. Strict mode: wake keys whose head is due while nothing runs them (a
//!    wake-up was lost, or a runner died). 4. Release the jobs waiting on finished jobs that
//!    nothing released, and register waits a submission left unregistered (design §24).
//!    5. Purge DONE rows older than the retention, then DEAD rows older than theirs, each within a
//!    time and batch budget, resuming where the last run stopped.

use serde::Serialize;

use crate::clock::Clock;
use crate::config::{Config, OnDead, OrderingMode};
use crate::error::InfraError;
use crate::ledger::{JobRow, Ledger, PurgeBudget, Record, Sql, Status, Transition};
use crate::operations::{Operations, RELEASE_PAGE};
use crate::producer::{self, QueueSender};

pub use crate::bounds::RESEND_GRACE_MS;
/// Strict mode: how long a key's head may be due with nothing running it before the cron wakes it.
/// Well under the cron's one-minute period, so a stalled key is woken by the next run.
pub const WAKE_GRACE_MS: i64 = 30 * 1000;
/// How long a submission has to register its waits before maintenance does it (design §24).
pub const REGISTER_GRACE_MS: i64 = 60 * 1000;
/// Rows handled per step per run; the next minute's run continues.
pub const STEP_LIMIT: u32 = 100;
/// Pages of [`RELEASE_PAGE`] dependents of finished jobs maintenance releases per run at most: a
/// page of 1,000 dependents each with its own keys is some 23 queries (their keys move on 100 a
/// batch), so one fits the free plan's 50 with the rest of a run and two do not
/// (tests/native/budget.rs).
pub const RELEASE_PAGES_PER_RUN: usize = 1;
/// Jobs the purge deletes per batch (one transaction each: 1,000 jobs is some 8,000 rows written,
/// well inside D1's 30 s per query).
pub const PURGE_LIMIT: u32 = 1000;
/// Batches the purge runs at most per status, per shard and per run: with the rest of a run, well
/// inside the free plan's 50 queries per invocation, and 20,000 jobs a minute per ledger, more
/// than one D1 takes in (about 7,500 a minute: docs/performance.md).
pub const PURGE_BATCHES: u32 = 20;
/// Batches the DEAD purge runs at most per shard and per run: DEAD jobs are few, and with the DONE
/// purge's 20 and the rest of a run the cron stays within the free plan's 50 queries.
pub const PURGE_DEAD_BATCHES: u32 = 5;
/// Wall time after which the purge begins no new batch (a cron run may take 15 minutes; the
/// next minute's run goes on from where this one stopped).
pub const PURGE_BUDGET_MS: i64 = 20_000;

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Expired leases moved back to PENDING and re-sent.
    pub reaped: usize,
    /// Expired leases out of attempts, now DEAD.
    pub reaped_dead: usize,
    /// Overdue PENDING jobs re-sent.
    pub resent: usize,
    /// Strict mode: stalled keys woken.
    pub woken: usize,
    /// Jobs released from finished jobs they waited on, whose release nothing else made (design §24).
    pub released: usize,
    /// DONE rows purged.
    pub purged: usize,
    /// DEAD rows purged (past `DEAD_RETENTION_DAYS`).
    pub purged_dead: usize,
    /// Steps that failed, and why (the others still ran).
    pub errors: Vec<String>,
}

/// Runs all steps once. A step that fails (D1 or Queues unavailable) is reported and the next
/// step still runs: one stuck send never stops the reaper or the purge.
pub async fn run<S: Sql, Q: QueueSender, C: Clock>(ledger: &Ledger<S>, queue: &Q, clock: &C, cfg: &Config) -> Report {
    let now = clock.now_ms();
    let mut report = Report::default();
    let mut note = |step: &str, e: InfraError| report_error(&mut report.errors, step, e);

    match reap(ledger, queue, now).await {
        Ok((reaped, dead)) => (report.reaped, report.reaped_dead) = (reaped, dead),
        // Jobs reaped but not re-sent stay PENDING: the overdue step of a later run sends them.
        Err(e) => note("reap", e),
    }
    let overdue = ledger.overdue(now - RESEND_GRACE_MS, STEP_LIMIT, cfg.ordering_mode).await;
    match resend(ledger, queue, now, overdue).await {
        Ok(n) => report.resent = n,
        Err(e) => note("re-send", e),
    }
    if cfg.ordering_mode == OrderingMode::Strict {
        let stalled = ledger.stalled_heads(now - WAKE_GRACE_MS, cfg.on_dead, STEP_LIMIT).await;
        match resend(ledger, queue, now, stalled).await {
            Ok(n) => report.woken = n,
            Err(e) => note("wake", e),
        }
    }
    match dependents(ledger, queue, clock, cfg, now).await {
        Ok(n) => report.released = n,
        Err(e) => note("release dependents", e),
    }
    // Time from this run's start: the steps before took some of it.
    let spent = || clock.now_ms() - now >= PURGE_BUDGET_MS;
    let budget = PurgeBudget { limit: PURGE_LIMIT, batches: PURGE_BATCHES, spent: &spent };
    let keep_keyed = cfg.ordering_mode == OrderingMode::Strict && cfg.on_dead == OnDead::Block;
    let done_before = now - i64::from(cfg.retention_days) * 86_400_000;
    match ledger.purge(Status::Done, done_before, keep_keyed, &budget).await {
        Ok(n) => report.purged = n,
        Err(e) => note("purge", e),
    }
    let dead_before = now - i64::from(cfg.dead_retention_days) * 86_400_000;
    let budget = PurgeBudget { batches: PURGE_DEAD_BATCHES, ..budget };
    match ledger.purge(Status::Dead, dead_before, keep_keyed, &budget).await {
        Ok(n) => report.purged_dead = n,
        Err(e) => note("purge DEAD", e),
    }
    report
}

/// Dependencies (design §24): registers the waits a submission recorded and never registered
/// (it died between its steps), then releases the dependents of finished jobs that nothing
/// released (the finishing invocation died first; the reaper, a deadline or an unsendable
/// message finished the job). How many dependents were released.
async fn dependents<S: Sql, Q: QueueSender, C: Clock>(
    ledger: &Ledger<S>,
    queue: &Q,
    clock: &C,
    cfg: &Config,
    now: i64,
) -> Result<usize, InfraError> {
    let ops = Operations { ledger, queue, clock, cfg };
    let unregistered = ledger.waits_unregistered(now - REGISTER_GRACE_MS, STEP_LIMIT).await?;
    let mut released = ops.register(unregistered).await?;
    // A page a run: a job with 100,000 dependents is released in some 100 runs, each within the
    // query budget.
    for _ in 0..RELEASE_PAGES_PER_RUN {
        let waiters = ledger.waiters_finished(RELEASE_PAGE).await?;
        if waiters.is_empty() {
            break;
        }
        released += ops.release_waiters(waiters).await?;
    }
    Ok(released)
}

fn report_error(errors: &mut Vec<String>, step: &str, e: InfraError) {
    errors.push(format!("{step}: {e}"));
}

async fn reap<S: Sql, Q: QueueSender>(ledger: &Ledger<S>, queue: &Q, now: i64) -> Result<(usize, usize), InfraError> {
    let reaped = ledger.reap(now, STEP_LIMIT).await?;
    let pending: Vec<JobRow> = reaped.iter().filter(|j| j.status == Status::Pending).cloned().collect();
    send_jobs(ledger, queue, &pending, now).await?;
    // Each reaped lease was a run that never reported: it goes in the job's history (after the
    // re-send, so a failure here delays nothing).
    ledger.record_reaped(&reaped, now).await?;
    Ok((pending.len(), reaped.len() - pending.len()))
}

/// Re-sends the PENDING jobs a scan `found`, each taken first so two overlapping runs never both
/// send it. How many were taken.
async fn resend<S: Sql, Q: QueueSender>(
    ledger: &Ledger<S>,
    queue: &Q,
    now: i64,
    found: Result<Vec<JobRow>, InfraError>,
) -> Result<usize, InfraError> {
    let won = ledger.take_for_resend(&found?, now).await?;
    send_jobs(ledger, queue, &won, now).await?;
    Ok(won.len())
}

/// Sends PENDING jobs' messages. A job whose message can never be sent (over Queues' size limit,
/// or no readable payload) is recorded DEAD with the reason instead of failing every later run.
async fn send_jobs<S: Sql, Q: QueueSender>(
    ledger: &Ledger<S>,
    queue: &Q,
    jobs: &[JobRow],
    now: i64,
) -> Result<(), InfraError> {
    let mut sendable = Vec::with_capacity(jobs.len());
    let mut unsendable = Vec::new();
    for j in jobs {
        let dead = |error: String| Record::from(Transition::RecordDead { spec: j.spec(), at: now, error });
        match producer::message_for(j, 0) {
            Some(m) if m.fits() => sendable.push(m),
            Some(m) => unsendable.push(dead(format!(
                "its queue message is {} bytes, over Cloudflare Queues' limit of {} (128,000 with metadata)",
                m.size(),
                producer::MAX_MESSAGE_BYTES
            ))),
            None => unsendable.push(dead("no readable payload to send".to_string())),
        }
    }
    ledger.record_all(&unsendable).await?;
    producer::send_all(queue, sendable).await
}
