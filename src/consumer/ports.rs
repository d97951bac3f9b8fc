//! What the consumer works with: its ports (KV, ledger, handlers, clock, queue, randomness, log,
//! sealer, timer) and settings for one invocation, as [`Consumer`]; and the two things every layer
//! of the consumer does with them: report an outage, and build the transitions of a run that
//! ended without completing (a failure, a snooze, a job handed back).

use super::leftovers::Leftovers;
use crate::config::Config;
use crate::ledger::{JobRow, Ledger, Record, Route, Sql, Status, Transition};
use crate::error::InfraError;
use crate::log::Event;
use crate::seal::Sealer;

/// The consumer's ports and settings for one invocation.
pub struct Consumer<'a, K, S, R, C, Q> {
    /// Checked vars.
    pub cfg: &'a Config,
    /// Lock store (lock mode).
    pub kv: &'a K,
    /// The job ledger.
    pub ledger: Ledger<&'a S>,
    /// Job handlers.
    pub runner: &'a R,
    /// Time.
    pub clock: &'a C,
    /// The job queue: strict mode's wake-up messages go here.
    pub queue: &'a Q,
    /// Lease owner name, unique per invocation.
    pub owner: String,
    /// Uniform random numbers in [0, 1) for jitter.
    pub random: &'a dyn Fn() -> f64,
    /// Where outages and dead jobs are reported (the worker's structured log). Outages never fail
    /// the batch, but an operator must be able to see why messages are being deferred.
    pub log: &'a dyn Fn(&Event<'_>),
    /// Opens sealed payloads and seals their results (`PAYLOAD_KEY`), if set.
    pub sealer: Option<&'a dyn Sealer>,
    /// Sees each attempt: its span and its data point (design §27.5); none: nothing is observed.
    pub observer: Option<&'a dyn crate::observe::Observer>,
    /// Waits that many ms (the worker's timer), so a throttled start due within
    /// [`PACE_MS`](super::gate::PACE_MS) is waited for here instead of sent back; none: never waited for.
    pub(super) sleep: Option<&'a Sleep<'a>>,
}

/// A timer: a future ready after that many ms.
pub type Sleep<'a> = dyn Fn(i64) -> futures::future::LocalBoxFuture<'a, ()> + 'a;

/// The middle of jitter's range: what a consumer uses until `with_random` gives it randomness.
fn middle() -> f64 {
    0.5
}

/// A consumer that reports to no log until `with_log` gives it one.
fn no_log(_: &Event<'_>) {}

impl<'a, K, S, R, C, Q> Consumer<'a, K, S, R, C, Q> {
    /// The consumer of one invocation named `owner`, over its ports; jitter at the middle of its
    /// range, no log and no `PAYLOAD_KEY` until set with the `with_*` methods. The worker and every
    /// test build consumers this one way.
    pub fn new(
        cfg: &'a Config,
        kv: &'a K,
        sql: &'a S,
        runner: &'a R,
        clock: &'a C,
        queue: &'a Q,
        owner: impl Into<String>,
    ) -> Self {
        Consumer {
            cfg,
            kv,
            ledger: Ledger::new(sql),
            runner,
            clock,
            queue,
            owner: owner.into(),
            random: &middle,
            log: &no_log,
            sealer: None,
            observer: None,
            sleep: None,
        }
    }

    /// The ledger over these shards instead of the one database `new` was given (`LEDGER = "do"`).
    pub fn with_ledger(self, ledger: Ledger<&'a S>) -> Self {
        Consumer { ledger, ..self }
    }

    /// Uniform random numbers in [0, 1) for jitter.
    pub fn with_random(self, random: &'a dyn Fn() -> f64) -> Self {
        Consumer { random, ..self }
    }

    /// Where outages and dead jobs are reported.
    pub fn with_log(self, log: &'a dyn Fn(&Event<'_>)) -> Self {
        Consumer { log, ..self }
    }

    /// Opens sealed payloads and seals their results (`PAYLOAD_KEY`).
    pub fn with_sealer(self, sealer: Option<&'a dyn Sealer>) -> Self {
        Consumer { sealer, ..self }
    }

    /// Where each attempt is observed: a span and a data point (design §27.5).
    pub fn with_observer(self, observer: Option<&'a dyn crate::observe::Observer>) -> Self {
        Consumer { observer, ..self }
    }

    /// A timer, so a throttled job waits for a start due within [`PACE_MS`](super::gate::PACE_MS) in this
    /// invocation (without one, every throttled job is sent back until its start).
    pub fn with_sleep(self, sleep: &'a Sleep<'a>) -> Self {
        Consumer { sleep: Some(sleep), ..self }
    }

    pub(super) fn outage(&self, message: String) {
        (self.log)(&Event::Outage { message });
    }

    /// `job`'s failed run by `owner`: PENDING again at `next_run_at`, or DEAD.
    pub(super) fn fail(&self, job: &JobRow, owner: &str, (started_at, at): (i64, i64), to: Status, next_run_at: i64, error: &str) -> Transition {
        let (id, owner, error) = (job.id.clone(), owner.to_string(), error.to_string());
        Transition::Fail { id, route: job.route(), owner, at, to, next_run_at, error, started_at: Some(started_at) }
    }

    /// `job`'s snoozed run by `owner`: PENDING again at `next_run_at`, no attempt spent, the next
    /// run's payload in place of its own when given.
    pub(super) fn snooze(&self, job: &JobRow, owner: &str, (started_at, at): (i64, i64), next_run_at: i64, payload: Option<String>) -> Transition {
        let (id, owner) = (job.id.clone(), owner.to_string());
        Transition::Snooze { id, route: job.route(), owner, at, next_run_at, payload, started_at: Some(started_at) }
    }

    /// A job this invocation claimed and does not run: handed back, due at `next_run_at`.
    pub(super) fn defer(&self, job: &JobRow, at: i64, next_run_at: i64) -> Transition {
        let owner = self.owner.clone();
        Transition::Defer { id: job.id.clone(), route: job.route(), owner, at, next_run_at, parked: false }
    }
}

impl<K, S: Sql, R, C, Q> Consumer<'_, K, S, R, C, Q> {
    /// Applies records ([`Ledger::record_all`]), leaving in `left` the jobs they finished that
    /// other jobs wait on, whose release the batch's end sends (design §24).
    pub(super) async fn record_all(&self, records: &[Record], left: &mut Leftovers) -> Result<Vec<bool>, InfraError> {
        let (applied, waited) = self.ledger.record_all_waking(records).await?;
        left.finished.extend(waited);
        Ok(applied)
    }
}

impl<K, S: Sql, R, C: crate::clock::Clock, Q: crate::producer::QueueSender> Consumer<'_, K, S, R, C, Q> {
    /// Releases the jobs waiting on `finished`, jobs this batch finished (design §24), once the
    /// batch is recorded. Best effort: a release not made is maintenance's (`waiters_finished.sql`).
    pub(super) async fn release_dependents(&self, finished: Vec<(String, Route)>) {
        if finished.is_empty() {
            return;
        }
        let ops = crate::operations::Operations { ledger: &self.ledger, queue: self.queue, clock: self.clock, cfg: self.cfg };
        let waiters = match self.ledger.waiters(&finished, crate::operations::RELEASE_PAGE).await {
            Ok(w) => w,
            Err(e) => return self.outage(format!("jobs waiting on finished jobs not released (maintenance will): {e}")),
        };
        if let Err(e) = ops.release_waiters(waiters).await {
            self.outage(format!("jobs waiting on finished jobs not released (maintenance will): {e}"));
        }
    }
}
