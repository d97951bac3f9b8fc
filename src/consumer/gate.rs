//! Flow control at a job's start (design §20), for both ordering modes: a claimed job with a limit
//! key asks it for a permit right before its handler would run, and frees it right after.
//!
//! A refused job is handed back like a job never run (PENDING, its attempt returned, no history
//! line): the key's order is untouched, a limit only delays a start. How it comes back depends on
//! why it waits: for a time (the throttle's next start, an open breaker's cool-down) its message is
//! put off until then; for a slot (a full or paused key, a breaker's probe) it is parked in the
//! key's line and sent again when a run of the key ends or an operator resumes it, not polled. In
//! strict mode a parked job is not due until its wake-up's delivery makes it due (the message
//! says it is one), or for `PARKED_RECHECK_SECONDS`: the deliveries of its key's other jobs only
//! park. In lock mode it is due at once, so any delivery may try it again. Should its wake-up be
//! lost, the ledger's maintenance sends it again as it does any overdue job or stalled head.

use super::leftovers::Leftovers;
use super::message::INFRA_RETRY_DELAY_SECONDS;
use super::ports::Consumer;
use crate::clock::Clock;
use crate::error::InfraError;
use crate::flow::{Refusal, RunVerdict};
use crate::handlers::{Done, JobError, Runner};
use crate::ledger::limit::{Ask, Permit, Release};
use crate::ledger::{JobRow, Sql, Transition};
use crate::bounds::delay_until;
use crate::lock::Kv;
use crate::producer::{self, QueueSender};

/// Seconds a job refused for a limit key's outage waits.
const DOWN_DELAY_SECONDS: u32 = INFRA_RETRY_DELAY_SECONDS;

/// How long a throttle's grant stays good at least, whatever the interval: a start may follow its
/// grant by this much, so a throttle faster than one start per this holds its rate over a window
/// only up to the starts this much allows (design §20).
pub const GRANT_FRESH_MS: i64 = 250;

/// The queue's batch wait a throttled job's message is sent back ahead of (wrangler.toml's
/// `max_batch_timeout = 1`): a message visible again waits up to this long for its batch, so it
/// is put off until this much before its booked start, and its batch still arrives in time.
pub const BATCH_WAIT_MS: i64 = 1_000;

/// How far ahead a throttle may grant a start that the invocation then waits for: the batch wait
/// and the second Queues' whole-second delays round off. So a throttle runs at its rate though
/// delays are whole seconds, and at one invocation at a time as at many: a job refused comes back
/// within this much before the start booked for it (never after it) and waits the rest, and its
/// invocation is delivered while the one before it still waits for its own last start.
pub const PACE_MS: i64 = BATCH_WAIT_MS + 1_000;

/// What a job's limit key said before its run, when the run may start.
pub(super) enum Gate {
    /// No limit key: nothing asked, nothing to free.
    Free,
    /// Granted: free the permit (the one ending at `until`) when the run ends.
    Held {
        /// The permit's end, as the ask set it.
        until: i64,
    },
}

/// What a job's limit key said before its run, when the run may not start: the job is handed back.
pub(super) enum Refused {
    /// Not now.
    Shut(Refusal),
    /// The limit key's shard failed: handed back for the outage.
    Down(InfraError),
}

/// How a refused job waits: for `delay_seconds` (its message put off), or parked (its message
/// acked, a wake-up brings it back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Waits {
    pub delay_seconds: u32,
    pub parked: bool,
}

impl<K: Kv, S: Sql, R: Runner, C: Clock, Q: QueueSender> Consumer<'_, K, S, R, C, Q> {
    /// Asks `job`'s limit key, if it has one, for a permit to start now. The ask deals with a
    /// slot handed to the job, if one was; jobs it wakes are left in `left`.
    pub(super) async fn gate(&self, job: &JobRow, left: &mut Leftovers) -> Result<Gate, Refused> {
        let Some(limit_key) = job.limit_key.as_deref() else { return Ok(Gate::Free) };
        left.dealt.insert(job.id.clone());
        let mut now = self.clock.now_ms();
        let mut ask = Ask {
            limit_key,
            job_id: &job.id,
            route: job.route(),
            until: now + i64::from(self.cfg.lease_seconds) * 1000,
            policy: self.cfg.limits.for_key(limit_key),
            pace_ms: if self.sleep.is_some() { PACE_MS } else { 0 },
        };
        let mut answer = match self.ledger.ask(&ask, now).await {
            Ok(a) => a,
            Err(e) => return Err(Refused::Down(e)),
        };
        // A breaker's cool-down ending within the pace is waited for here and asked again, as a
        // throttle's start is: the job came back that early (see `refused`), so the probe starts
        // when the cool-down ends, not a whole-second delay and a batch wait after it.
        if let (Permit::Refused(Refusal::Open { until }), Some(sleep)) = (answer.permit, self.sleep) {
            if until - now <= PACE_MS {
                sleep((until - self.clock.now_ms()).max(0)).await;
                now = self.clock.now_ms();
                ask.until = now + i64::from(self.cfg.lease_seconds) * 1000;
                answer = match self.ledger.ask(&ask, now).await {
                    Ok(a) => a,
                    Err(e) => return Err(Refused::Down(e)),
                };
            }
        }
        if let Permit::Refused(why) = answer.permit {
            return Err(Refused::Shut(why));
        }
        // A start granted ahead is waited for here.
        if let Some(sleep) = self.sleep.filter(|_| answer.start_at > self.clock.now_ms()) {
            sleep(answer.start_at - self.clock.now_ms()).await;
        }
        // A grant is good only while it is fresh: the run must start within one throttle interval
        // of its start (at least GRANT_FRESH_MS, a round trip's worth), else starts delayed by a
        // slow answer could bunch up past the rate; and while its permit, which lapses with the
        // lease, still outlasts a run (counted from the ask).
        let late_ms = self.clock.now_ms() - answer.start_at.max(now);
        let fresh_ms = answer
            .interval_us
            .map_or(i64::MAX, |us| (us / 1000).max(GRANT_FRESH_MS))
            .min(self.cfg.refresh_after_ms(self.cfg.lease_seconds) - (answer.start_at - now).max(0));
        if late_ms > fresh_ms {
            self.outage(format!("job {:?}: its start was granted {late_ms} ms ago, too late to use", job.id));
            let release = Release {
                limit_key,
                job_id: &job.id,
                until: ask.until,
                verdict: RunVerdict::Neither,
                policy: ask.policy,
            };
            let woken = self.ledger.release(&release, self.clock.now_ms()).await.unwrap_or_default();
            self.wake(woken, left).await;
            return Err(Refused::Shut(Refusal::Throttled { at: self.clock.now_ms() }));
        }
        Ok(Gate::Held { until: ask.until })
    }

    /// A claimed job its limit key refused: handed back (its attempt returned, counted as a
    /// deferral), due when it should be tried again; a parked one is due now (see the module).
    /// The transition to record, and how the job waits.
    pub(super) fn refused(&self, job: &JobRow, refused: Refused) -> (Transition, Waits) {
        let now = self.clock.now_ms();
        let (waits, next_run_at) = match refused {
            Refused::Shut(why) if why.parks() => {
                let waits = Waits { delay_seconds: crate::flow::PARKED_RECHECK_SECONDS, parked: true };
                // Strict mode: a key's head is not due until its wake-up makes it due (or the
                // recheck), so the deliveries of its key's other jobs claim nothing and ask nothing
                // meanwhile. An unkeyed job has no such deliveries, and takes the lock-mode path,
                // whose claim reads no wake-up's mark: it stays due, or its wake-up would find it
                // not due and its handed slot would stand empty until the recheck.
                let strict = self.cfg.ordering_mode == crate::config::OrderingMode::Strict;
                let not_due = strict && job.ordering_key.is_some();
                (waits, if not_due { now + i64::from(waits.delay_seconds) * 1000 } else { now })
            }
            Refused::Shut(why) => {
                let at = why.retry_at(now);
                // A throttled job comes back a batch wait and up to one second more before its
                // booked start (PACE_MS) and waits the rest here, and so does one held by an open
                // breaker before its cool-down's end (`gate`); without a timer, at its time or
                // after.
                let paced = matches!(why, Refusal::Throttled { .. } | Refusal::Open { .. }) && self.sleep.is_some();
                let delay_seconds = if paced {
                    u32::try_from(((at - now - BATCH_WAIT_MS) / 1000).max(1))
                        .unwrap_or(u32::MAX)
                        .min(crate::config::MAX_DELAY_SECONDS)
                } else {
                    delay_until(now, Some(at))
                };
                let next_run_at = if paced { now + i64::from(delay_seconds) * 1000 } else { at };
                (Waits { delay_seconds, parked: false }, next_run_at)
            }
            Refused::Down(e) => {
                self.outage(format!("job {:?}: its limit key could not be asked, deferred: {e}", job.id));
                let at = now + i64::from(DOWN_DELAY_SECONDS) * 1000;
                (Waits { delay_seconds: DOWN_DELAY_SECONDS, parked: false }, at)
            }
        };
        let mut defer = self.defer(job, now, next_run_at);
        if let Transition::Defer { parked, .. } = &mut defer {
            *parked = waits.parked;
        }
        (defer, waits)
    }

    /// After a permitted run: frees the permit, tells the breaker how the run went (nothing, for a
    /// run stopped by a cancel), and sends again
    /// the job woken to take the slot. Best effort: a permit not freed lapses with the job's lease,
    /// a wake-up not sent leaves its job to maintenance.
    pub(super) async fn release(
        &self,
        job: &JobRow,
        (until, cancelled): (i64, bool),
        result: &Result<Done, JobError>,
        left: &mut Leftovers,
    ) {
        let Some(limit_key) = job.limit_key.as_deref() else { return };
        let verdict = match result {
            // A run stopped by an operator's cancel says nothing of what it called (design §22.1).
            _ if cancelled => RunVerdict::Neither,
            Ok(_) => RunVerdict::Succeeded,
            Err(JobError::Snooze { .. }) => RunVerdict::Neither,
            Err(JobError::Retryable { retry_after, .. }) => {
                RunVerdict::Failed { retry_after_ms: i64::from(retry_after.unwrap_or(0)) * 1000 }
            }
            Err(_) => RunVerdict::Failed { retry_after_ms: 0 },
        };
        let policy = self.cfg.limits.for_key(limit_key);
        let release = Release { limit_key, job_id: &job.id, until, verdict, policy };
        let woken = match self.ledger.release(&release, self.clock.now_ms()).await {
            Ok(woken) => woken,
            Err(e) => return self.outage(format!("limit key {limit_key:?}: permit not freed, it lapses: {e}")),
        };
        self.wake(woken, left).await;
    }

    /// Gives back the slot handed to each woken job of `woken` (job, limit key) not dealt with
    /// yet, and wakes the jobs it goes to. Such a job cannot start now: it waits behind a job of
    /// its ordering key (run before it in this batch, or in the line itself: lock mode, the key's
    /// lock is held for it; strict mode, an operator's redrive put the key's head back ahead), or
    /// its run was put off (its ordering key paused, an outage). Kept, its slot stood empty until
    /// the hand-off lapsed (30 s) while the line waited, for maintenance when the job ahead was
    /// the one waiting for it (the simulation's line check found both). Asking when its turn
    /// comes, it starts or joins the line as any job. Best effort: a slot not given back lapses.
    /// `left`: the slots dealt with so far, and where the jobs woken are left.
    pub(super) async fn give_back(&self, woken: &[(String, String)], left: &mut Leftovers) {
        for (job_id, limit_key) in woken {
            if !left.dealt.insert(job_id.clone()) {
                continue;
            }
            let policy = self.cfg.limits.for_key(limit_key);
            match self.ledger.give_back(limit_key, job_id, &policy, self.clock.now_ms()).await {
                Ok(next) => self.wake(next, left).await,
                Err(e) => self.outage(format!(
                    "limit key {limit_key:?}: the slot handed to {job_id:?} not given back, it lapses: {e}"
                )),
            }
        }
    }

    /// Sends again the jobs taken out of a limit key's line, at once (a wake-up held back until the
    /// batch ends would be lost with the invocation, the job out of the line); those this very
    /// invocation parked and has not yet recorded handing back are left in `left`, for
    /// [`Self::send_woken`] at the batch's end.
    pub(super) async fn wake(&self, woken: Vec<crate::ledger::limit::Woken>, left: &mut Leftovers) {
        let delay = self.cfg.lock_retry_delay_seconds;
        match producer::wake(&self.ledger, self.queue, &woken, delay, Some(&self.owner)).await {
            Ok(mine) => left.woken.extend(mine),
            Err(e) => self.outage(format!("parked jobs not woken (maintenance will): {e}")),
        }
    }

    /// Sends again `woken`, the jobs of this invocation woken during its batch, now that the batch
    /// is recorded (see [`Self::wake`]).
    pub(super) async fn send_woken(&self, woken: Vec<crate::ledger::limit::Woken>) {
        if let Err(e) = producer::wake(&self.ledger, self.queue, &woken, self.cfg.lock_retry_delay_seconds, None).await
        {
            self.outage(format!("parked jobs not woken (maintenance will): {e}"));
        }
    }
}
