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
use crate::ledger::deps::{Released, Wait, Waiter};
use crate::ledger::{Cancel, CancelFilter, JobRow, Ledger, Redrive, Route, Sql, Status};
use crate::producer::{self, QueueSender};

/// How many levels of dependents one release ends DEAD in turn when a job they run after is DEAD
/// (design §24); deeper ones are maintenance's next run.
pub const CASCADE_ROUNDS: usize = 8;

/// Dependents one release (one round of it) reads and releases at most: a job with more
/// dependents has the rest released by maintenance, a page per run (design "The ledger's life":
/// one batch for 100,000 dependents would outlast D1's 30 s per query).
pub const RELEASE_PAGE: u32 = 1000;

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
    /// RUNNING, now asked to stop (design §22.1): its run learns of it within
    /// [`crate::consumer::CANCEL_REACH_MS`] and ends it DEAD "cancelled"; its key moves on then.
    Requested(Box<JobRow>),
    /// No such job.
    NotFound,
    /// Finished already, or RUNNING and asked to stop already (its row given).
    Refused(Box<JobRow>),
}

/// What cancelling the open jobs matching a filter did (design §22.2).
#[derive(Debug)]
pub struct CancelledMatching {
    /// The PENDING jobs cancelled, DEAD "cancelled".
    pub cancelled: Vec<JobRow>,
    /// The RUNNING jobs asked to stop: each ends DEAD "cancelled" within the cancel's bound.
    pub asked: Vec<JobRow>,
    /// Open jobs matching the filter still, neither cancelled nor asked (past this call's limit).
    pub remaining: i64,
    /// Why the wake-ups of the keys moved on were not sent (maintenance sends them).
    pub unsent: Option<InfraError>,
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
    /// Cancels a job (design §22.1): a PENDING one is DEAD "cancelled" at once, and its ordering
    /// key's next job and its limit key's line move on without waiting for a delivery; a RUNNING
    /// one is asked to stop, and its run's end moves them on. Audited in the job's history.
    pub async fn cancel(&self, id: &str) -> Result<Cancelled, InfraError> {
        let now = self.clock.now_ms();
        let job = match self.ledger.cancel(id, now).await? {
            Cancel::Cancelled(job) => job,
            Cancel::Requested(job) => return Ok(Cancelled::Requested(Box::new(job))),
            Cancel::NotFound => return Ok(Cancelled::NotFound),
            Cancel::Refused(job) => return Ok(Cancelled::Refused(Box::new(job))),
        };
        let (woken, unsent) = match self.moved_on(std::slice::from_ref(&job), now).await {
            Ok(woken) => (woken.into_iter().next(), None),
            Err(e) => (None, Some(e)),
        };
        Ok(Cancelled::Done { job: Box::new(job), woken, unsent })
    }

    /// Cancels the open jobs matching `filter`, at most `limit` per shard (design §22.2), as a
    /// cancel of each would: PENDING ones end now and their keys move on, RUNNING ones (a run
    /// going on, or a job a strict chain claimed ahead) are asked to stop.
    pub async fn cancel_matching(&self, filter: &CancelFilter, limit: u32) -> Result<CancelledMatching, InfraError> {
        let now = self.clock.now_ms();
        let (cancelled, asked) =
            self.ledger.cancel_matching(filter, now, limit).await?.into_iter().partition::<Vec<_>, _>(|j| j.status == Status::Dead);
        let unsent = self.moved_on(&cancelled, now).await.err();
        let remaining = self.ledger.cancellable_matching(filter).await?.matched;
        Ok(CancelledMatching { cancelled, asked, remaining, unsent })
    }

    /// After cancelling `jobs`: each ordering key's next job is woken (in strict mode the key's
    /// new head; in lock mode a job put off behind the cancelled holder), each limit key's line
    /// gives up their places and hands on the slots handed to them, and the jobs waiting on them
    /// are released (design §24). The ids of the ordering keys' jobs woken.
    pub async fn moved_on(&self, jobs: &[JobRow], now: i64) -> Result<Vec<String>, InfraError> {
        let woken = self.keys_moved_on(jobs, now).await?;
        self.release_dependents(jobs).await?;
        Ok(woken)
    }

    /// [`Self::moved_on`] for the keys only.
    async fn keys_moved_on(&self, jobs: &[JobRow], now: i64) -> Result<Vec<String>, InfraError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut keys: Vec<&str> = jobs.iter().filter_map(|j| j.ordering_key.as_deref()).collect();
        keys.sort_unstable();
        keys.dedup();
        let (mut msgs, mut woken) = (Vec::new(), Vec::new());
        // Every key in one batch per shard, however many keys (each job may be its own).
        for next in self.ledger.keys_to_wake(&keys, self.cfg.ordering_mode, self.cfg.on_dead, now).await? {
            let delay = next.as_ref().map_or(0, |n| crate::bounds::seconds_until(now, n.next_run_at));
            if let Some((n, msg)) = next.as_ref().and_then(|n| Some((n, producer::message_for(n, delay)?))) {
                woken.push(n.id.clone());
                msgs.push(msg);
            }
        }
        let mut limits: Vec<&str> = jobs.iter().filter_map(|j| j.limit_key.as_deref()).collect();
        limits.sort_unstable();
        limits.dedup();
        let forgotten: Vec<(&str, Vec<&str>, crate::flow::Policy)> = limits
            .into_iter()
            .map(|key| {
                let ids = jobs.iter().filter(|j| j.limit_key.as_deref() == Some(key)).map(|j| j.id.as_str()).collect();
                (key, ids, self.cfg.limits.for_key(key))
            })
            .collect();
        let handed = self.ledger.forget_all(&forgotten, now).await?;
        producer::send_all(self.queue, msgs).await?;
        producer::wake(self.ledger, self.queue, &handed, 1, None).await?;
        Ok(woken)
    }

    /// Before DEAD jobs are redriven: the jobs waiting on them are released as after their death
    /// (design §24.5), which a release not made yet would otherwise never see (the waiters of a
    /// job open again are not released), and in strict mode a job of the same key waiting on one
    /// moved to the key's end would wait behind itself.
    pub async fn before_redrive(&self, ids: &[&str]) -> Result<(), InfraError> {
        let dead: Vec<JobRow> = self.ledger.get_all(ids).await?.into_iter().flatten().filter(|j| j.status == Status::Dead).collect();
        self.release_dependents(&dead).await.map(drop)
    }

    /// Registers a submission's waits in their dependencies' shards (design §24), then releases
    /// the dependents from dependencies that had already finished. Returns how many dependents
    /// were released. Should this fail part way, the waits left unregistered are maintenance's.
    pub async fn register(&self, waits: Vec<Wait>) -> Result<usize, InfraError> {
        if waits.is_empty() {
            return Ok(0);
        }
        let stands = self.ledger.register(&waits).await?;
        let (mut open, mut finished) = (Vec::new(), Vec::new());
        for (wait, on) in waits.into_iter().zip(stands) {
            match on {
                // Not recorded yet: a job of the same request whose shard failed, recorded when
                // the request is retried. The wait stays unregistered; maintenance tries again.
                None => {}
                Some(on) if on.job.status.is_finished() => {
                    finished.push(Waiter { wait, on_status: on.job.status, on_result: on.job.result });
                }
                // Redriven since the wait was recorded (a registration left to maintenance): it
                // ended DEAD after its dependent was recorded, and waiting for its new life could
                // wait forever (in strict mode the redrive put it at its key's end, behind jobs
                // that may wait, through their keys, for this very dependent).
                Some(on) if on.redriven_at.is_some_and(|at| at >= wait.since) => {
                    finished.push(Waiter { wait, on_status: Status::Dead, on_result: None });
                }
                Some(_) => open.push(wait),
            }
        }
        self.ledger.registered(&open).await?;
        self.release_waiters(finished).await
    }

    /// Releases the jobs waiting on `finished` jobs (design §24): those DONE or DEAD. Returns how
    /// many dependents were released.
    pub async fn release_dependents(&self, finished: &[JobRow]) -> Result<usize, InfraError> {
        let finished: Vec<(String, Route)> =
            finished.iter().filter(|j| j.status.is_finished()).map(|j| (j.id.clone(), j.route())).collect();
        let waiters = self.ledger.waiters(&finished, RELEASE_PAGE).await?;
        self.release_waiters(waiters).await
    }

    /// Releases each waiter's dependent from its finished dependency, each in its shard: one that
    /// waits on nothing more is sent (due, it runs; a paused key or a full limit holds it as any
    /// job); one whose dependency is DEAD ends DEAD too unless it runs anyway, and its own
    /// dependents are released in turn (up to [`CASCADE_ROUNDS`] levels here; deeper ones by
    /// maintenance), and its keys move on as after a cancel. The waiter rows go last, so a
    /// release cut short is found again by maintenance (`waiters_finished.sql`); a release
    /// repeated changes nothing. Returns how many dependents were released.
    pub async fn release_waiters(&self, mut waiters: Vec<Waiter>) -> Result<usize, InfraError> {
        let now = self.clock.now_ms();
        let (mut msgs, mut died, mut released) = (Vec::new(), Vec::new(), 0);
        for _ in 0..CASCADE_ROUNDS {
            if waiters.is_empty() {
                break;
            }
            let answers = self.ledger.release_waits(&waiters, now).await?;
            self.ledger.waiters_done(&waiters).await?;
            released += waiters.len();
            let mut round = Vec::new();
            for r in answers {
                match r {
                    Released { job: Some(job), died: true, .. } => round.push(job),
                    Released { job: Some(job), waits: false, .. } if job.status == Status::Pending => {
                        let delay = crate::bounds::seconds_until(now, job.next_run_at);
                        msgs.extend(producer::message_for(&job, delay));
                    }
                    _ => {}
                }
            }
            let dead: Vec<(String, Route)> = round.iter().map(|j| (j.id.clone(), j.route())).collect();
            waiters = self.ledger.waiters(&dead, RELEASE_PAGE).await?;
            died.extend(round);
        }
        self.keys_moved_on(&died, now).await?;
        producer::send_all(self.queue, msgs).await?;
        Ok(released)
    }

    /// Makes a DEAD job PENDING again, a new run from its first attempt, and sends it.
    pub async fn redrive(&self, id: &str) -> Result<Redriven, InfraError> {
        self.before_redrive(&[id]).await?;
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
