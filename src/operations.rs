//! What an operator does to one job or one key, as typed operations (River's `Client.JobCancel`,
//! which River UI only wraps): each makes its ledger calls and queue sends and answers a typed
//! outcome, and `api/` only maps outcomes to statuses and JSON. A request goes down one stack:
//! entry -> api (route, authorize, read) -> operations -> ledger and producer.
//!
//! A queue send that fails after the ledger changed never undoes the change: the outcome says the
//! send failed, and maintenance sends what is due (design §3).

use crate::clock::Clock;
use crate::config::{Config, OnDead, OrderingMode};
use crate::error::InfraError;
use crate::ledger::strict::Skip;
use crate::ledger::{Cancel, JobRow, Ledger, Redrive, Sql, Status};
use crate::producer::{self, QueueSender};

/// The ports an operation works with, for one request.
pub struct Operations<'a, S: Sql, Q, C> {
    /// The ledger.
    pub ledger: &'a Ledger<S>,
    /// Where woken and redriven jobs are sent.
    pub queue: &'a Q,
    /// Time.
    pub clock: &'a C,
    /// Checked vars.
    pub cfg: &'a Config,
}

/// What cancelling a job did.
#[derive(Debug)]
pub enum Cancelled {
    /// DEAD "cancelled". `woken`: the id of its key's next job, sent so the key moves on at once;
    /// `unsent`: why that send failed (maintenance sends it).
    Done {
        /// The job, now DEAD.
        job: Box<JobRow>,
        /// Its ordering key's next job, woken.
        woken: Option<String>,
        /// Why the wake-up was not sent.
        unsent: Option<InfraError>,
    },
    /// No such job.
    NotFound,
    /// Not PENDING (its row given): only a PENDING job is cancelled; a handler is never stopped.
    NotPending(Box<JobRow>),
}

/// What redriving a DEAD job did.
#[derive(Debug)]
pub enum Redriven {
    /// PENDING again, and sent; `unsent`: why the send failed (maintenance sends it).
    Done {
        /// The job, now PENDING.
        job: Box<JobRow>,
        /// Why its message was not sent.
        unsent: Option<InfraError>,
    },
    /// No such job.
    NotFound,
    /// Not DEAD (its row given).
    NotDead(Box<JobRow>),
    /// It has no readable payload to send again (its body could not be read).
    Unreadable(Box<JobRow>),
    /// Its dedupe key is active in another job.
    DedupeTaken(Box<JobRow>),
}

/// What skipping a blocked key's DEAD head did.
#[derive(Debug)]
pub enum Skipped {
    /// The key moved past `skipped`; its next job was sent, unless `unsent` says why not (the cron
    /// wakes it).
    Done {
        /// The DEAD job passed over.
        skipped: Box<JobRow>,
        /// Why the wake-up was not sent.
        unsent: Option<InfraError>,
    },
    /// Keys never block unless `ORDERING_MODE` is strict and `ON_DEAD` is block.
    NeverBlocks,
    /// The key's head is not an unskipped DEAD job.
    NotBlocked,
}

impl<S: Sql, Q: QueueSender, C: Clock> Operations<'_, S, Q, C> {
    /// Cancels a PENDING job (DEAD "cancelled", audited in its history) and wakes its key's next
    /// job, so a key whose head was cancelled moves on without waiting for a delivery.
    pub async fn cancel(&self, id: &str) -> Result<Cancelled, InfraError> {
        let now = self.clock.now_ms();
        let job = match self.ledger.cancel(id, now).await? {
            Cancel::Cancelled(job) => job,
            Cancel::NotFound => return Ok(Cancelled::NotFound),
            Cancel::Refused(job) => return Ok(Cancelled::NotPending(Box::new(job))),
        };
        let Some(key) = job.ordering_key.as_deref() else {
            return Ok(Cancelled::Done { job: Box::new(job), woken: None, unsent: None });
        };
        let next = self.ledger.key_to_wake(key, self.cfg.ordering_mode, self.cfg.on_dead, now).await?;
        let delay = next.as_ref().map_or(0, |n| crate::limits::seconds_until(now, n.next_run_at));
        let wake = next.as_ref().and_then(|n| producer::message_for(n, delay));
        let woken = wake.as_ref().and(next.as_ref().map(|n| n.id.clone()));
        let unsent = producer::send_all(self.queue, wake.into_iter().collect()).await.err();
        Ok(Cancelled::Done { job: Box::new(job), woken, unsent })
    }

    /// Makes a DEAD job PENDING again, a new run from its first attempt, and sends it.
    pub async fn redrive(&self, id: &str) -> Result<Redriven, InfraError> {
        let now = self.clock.now_ms();
        let job = match self.ledger.redrive(id, now).await? {
            Redrive::Redriven(job) => job,
            Redrive::NotFound => return Ok(Redriven::NotFound),
            Redrive::Refused(job) if job.status != Status::Dead => return Ok(Redriven::NotDead(Box::new(job))),
            Redrive::Refused(job) if job.payload.is_none() => return Ok(Redriven::Unreadable(Box::new(job))),
            Redrive::Refused(job) => return Ok(Redriven::DedupeTaken(Box::new(job))),
        };
        let Some(msg) = producer::message_for(&job, 0) else { return Ok(Redriven::Unreadable(Box::new(job))) };
        let unsent = producer::send_all(self.queue, vec![msg]).await.err();
        Ok(Redriven::Done { job: Box::new(job), unsent })
    }

    /// Moves a blocked key (strict mode, `ON_DEAD = block`) past its DEAD head, audits the skip in
    /// that job's history, and wakes the key's next job.
    pub async fn skip(&self, key: &str) -> Result<Skipped, InfraError> {
        if self.cfg.ordering_mode != OrderingMode::Strict || self.cfg.on_dead != OnDead::Block {
            return Ok(Skipped::NeverBlocks);
        }
        let (skipped, next) = match self.ledger.skip(key, self.clock.now_ms()).await? {
            Skip::Skipped { skipped, next } => (skipped, next),
            Skip::NotBlocked => return Ok(Skipped::NotBlocked),
        };
        // Audited after the fact (the skip names a key, not a job): a failure here is only a
        // missing history line.
        self.ledger.audit_skip(&skipped).await;
        let wake = next.filter(|j| j.status == Status::Pending).and_then(|j| producer::message_for(&j, 0));
        let unsent = producer::send_all(self.queue, wake.into_iter().collect()).await.err();
        Ok(Skipped::Done { skipped, unsent })
    }
}
