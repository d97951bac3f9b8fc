//! The consumer: one batch of queue messages in, one [`Outcome`] per message out. Never fails.
//!
//! Generic over its ports (KV, SQL, handlers, clock, queue), so the whole algorithm runs natively
//! against the in-memory KV and real SQLite (and in the deterministic simulation), and on the edge
//! against KV, D1 and Queues. The edge applies outcomes with `ack()` / `retry()`.
//!
//! Phases shared by both modes live here: decoding every message on its own, the failure decision,
//! the dead-letter queue, lease renewal. Each ordering mode owns its own module:
//! - `locked.rs`: design §3, Fedify's best-effort KV lock (`ORDERING_MODE = "lock"`, the default).
//! - `strict.rs`: design §3b, the ledger sequences every key (`ORDERING_MODE = "strict"`); unkeyed
//!   messages in a strict batch take the lock-mode path, which needs no lock for them.

mod gate;
mod locked;
mod strict;

#[cfg(any(test, feature = "testing"))]
pub use locked::RESEND_WAITING_AFTER_MS;
#[cfg(any(test, feature = "testing"))]
pub use strict::{CHAIN_CHUNK, FIRST_CHUNK};

use std::cell::{Cell, RefCell};
use std::collections::HashSet;

use serde_json::Value;

use crate::backoff::{backoff, jitter_ms};
use crate::clock::Clock;
use crate::config::{Config, OrderingMode, MAX_DELAY_SECONDS};
use crate::envelope::{BodyError, Envelope, EnvelopeError, MAX_BODY_JSON_BYTES};
use crate::error::InfraError;
use crate::handlers::{bounded_result, Done, JobContext, JobError, Runner};
use crate::ledger::history::{Run, RunOutcome};
use crate::ledger::{Job, JobSpec, Ledger, Record, Route, Sql, Status, Transition, DEFAULT_PRIORITY};
use crate::lock::Kv;
use crate::log::Event;
use crate::panics::Panicked;
use crate::producer::{OutMessage, QueueSender, MAX_PAYLOAD_BYTES};
use crate::seal::{is_sealed, Sealer, FEDIFY_TYPE};

/// Delay before a message deferred for an outage (KV, D1, bad config) comes back.
pub const INFRA_RETRY_DELAY_SECONDS: u32 = 30;
/// How long before its `next_run_at` a PENDING job may be claimed: none. A delay is what a remote
/// server (`Retry-After`), a handler (a snooze) or the backoff asked for, and any delivery for a key
/// (not only the job's own wake-up) can find its head, so an allowance would cut every such delay
/// short by that much. A delivery that comes early (clock skew between isolates) finds the job not
/// due and is put off until it is: a re-delivery, never a shortened delay.
pub const EARLY_DELIVERY_ALLOWANCE_MS: i64 = 0;
/// The error of a job whose invocation died because another job's handler panicked.
pub const DIED_WITH_A_PANIC: &str = "its invocation died: a Rust handler running beside it panicked";
/// How long a sealed job whose payload cannot be opened waits before it is tried again.
pub const SEAL_WAIT_SECONDS: u32 = 300;
/// Key groups (and unkeyed messages) run at once; Workers allow six open connections.
pub const GROUP_CONCURRENCY: usize = 6;
/// The error recorded for messages Queues gave up on.
pub const DELIVERY_EXHAUSTED: &str = "delivery attempts exhausted";
/// A queue consumer invocation's wall-clock limit on Workers (15 minutes).
pub const INVOCATION_WALL_MS: i64 = 15 * 60 * 1000;

/// What to do with one message. `Retry` follows a failed attempt; `Defer` puts a message off
/// without it counting as an attempt (key busy, outage, not yet due).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done with: succeeded, dead, parked in the ledger, or a duplicate of a finished job.
    Ack,
    /// Failed; deliver again after the backoff.
    Retry {
        /// Seconds.
        delay_seconds: u32,
    },
    /// Not run; deliver again later.
    Defer {
        /// Seconds.
        delay_seconds: u32,
    },
}

/// A delivered message, as the edge read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    /// Queue message id.
    pub id: String,
    /// Send time, ms.
    pub timestamp_ms: i64,
    /// The body as JSON, or why it is not JSON.
    pub body: Result<Value, BodyError>,
}

/// Which queue a batch came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `orderly-jobs`: run the jobs.
    Main,
    /// `orderly-dlq`: Queues gave up on these; record them DEAD.
    DeadLetter,
}

/// The role of the queue a batch came from, by its name in the configuration; `None` for a
/// queue this worker was not configured to consume (its batch is deferred, never run or killed).
pub fn role_of(cfg: &Config, queue: &str) -> Option<Role> {
    if queue == cfg.jobs_queue || queue == cfg.urgent_queue {
        Some(Role::Main)
    } else if queue == cfg.dead_letter_queue {
        Some(Role::DeadLetter)
    } else {
        None
    }
}

/// What a failed run leads to. Pure, so it is tested on its own; `fail.sql` only applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureDecision {
    /// PENDING again, due after `delay_ms` (the jittered backoff, exact to the millisecond).
    Retry {
        /// Milliseconds.
        delay_ms: i64,
    },
    /// DEAD with this error.
    Dead(String),
    /// Not a failure: PENDING again after `delay_seconds`, the attempt given back.
    Snooze {
        /// Seconds.
        delay_seconds: u32,
    },
}

/// Decides a failed run: permanent errors, the last allowed attempt and a snooze past
/// `MAX_SNOOZES` (`snoozes` is how many the job took before) are DEAD; otherwise retry after the
/// handler's requested delay, or jittered backoff of the attempt number.
pub fn decide_failure(
    attempts: i64,
    max_attempts: i64,
    snoozes: i64,
    err: &JobError,
    cfg: &Config,
    random: f64,
) -> FailureDecision {
    match err {
        JobError::Snooze { reason, .. } if snoozes >= i64::from(cfg.max_snoozes) => FailureDecision::Dead(format!(
            "{reason}: snoozed {snoozes} times already, MAX_SNOOZES ({}) allows no more",
            cfg.max_snoozes
        )),
        JobError::Snooze { seconds, .. } => {
            FailureDecision::Snooze { delay_seconds: (*seconds).clamp(1, MAX_DELAY_SECONDS) }
        }
        JobError::Permanent { reason, .. } => FailureDecision::Dead(reason.clone()),
        JobError::Retryable { reason, .. } if attempts >= max_attempts => {
            FailureDecision::Dead(format!("{reason} (attempt {attempts} of {max_attempts}, no attempts left)"))
        }
        JobError::Retryable { retry_after, .. } => {
            let attempt = u32::try_from(attempts).unwrap_or(u32::MAX);
            let delay_ms = match retry_after {
                Some(seconds) => i64::from(*seconds) * 1000,
                None => jitter_ms(backoff(attempt, cfg.backoff_base_seconds, cfg.backoff_cap_seconds), random),
            };
            FailureDecision::Retry { delay_ms: delay_ms.min(i64::from(MAX_DELAY_SECONDS) * 1000) }
        }
    }
}

/// What is kept of a sealed job's error: its kind and HTTP status, never its text (a webhook's
/// error names its URL, path and query included; a service handler's quotes its answer; either
/// may carry what the job sealed). A snooze keeps its delay and its next payload.
pub fn withheld(e: JobError) -> JobError {
    let reason = match e.http_status() {
        Some(s) => format!("HTTP {s} (details withheld: the job is sealed)"),
        None => "the handler failed (details withheld: the job is sealed)".to_string(),
    };
    match e {
        JobError::Retryable { retry_after, http_status, .. } => {
            JobError::Retryable { reason, retry_after, http_status }
        }
        JobError::Permanent { http_status, .. } => JobError::Permanent { reason, http_status },
        JobError::Snooze { seconds, http_status, payload, .. } => {
            let reason = reason.replace("the handler failed", "the handler asked");
            JobError::Snooze { seconds, reason, http_status, payload }
        }
    }
}

/// A claimed job's handler run, as both modes record it.
struct Ran {
    /// The transition, guarded by our lease (complete, or fail to PENDING or DEAD), with the
    /// run's entry in the job's history (none for a success: the DONE row describes it).
    record: Record,
    /// How it ended.
    end: RunEnd,
}

/// How a run ended, for the mode to decide what comes next.
enum RunEnd {
    Done,
    Dead,
    Retry {
        delay_seconds: u32,
    },
    /// The handler snoozed: like a retry for the key (held until then), but no attempt spent.
    Snooze {
        delay_seconds: u32,
    },
    /// Not run: its limit key refused it a start (design §20). Its key waits; no attempt spent.
    Limited(gate::Waits),
}

impl RunEnd {
    /// Seconds until the job runs again, when it does (a retry or a snooze): its key waits.
    fn again_after(&self) -> Option<u32> {
        match self {
            RunEnd::Retry { delay_seconds } | RunEnd::Snooze { delay_seconds } => Some(*delay_seconds),
            RunEnd::Limited(waits) => Some(waits.delay_seconds),
            RunEnd::Done | RunEnd::Dead => None,
        }
    }
}

/// The outcomes of a batch of `n` messages from the outcomes of parts of it, each at its batch
/// position; a position no part settled is deferred as for an outage (never acked unseen).
fn placed(n: usize, parts: impl IntoIterator<Item = (usize, Outcome)>) -> Vec<Outcome> {
    let mut out = vec![Outcome::Defer { delay_seconds: INFRA_RETRY_DELAY_SECONDS }; n];
    for (i, o) in parts {
        out[i] = o;
    }
    out
}

/// A run's transition, how it ends, its error and its HTTP status.
type Finished = (Transition, RunEnd, Option<String>, Option<u16>);

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
    /// Jobs taken out of a limit key's line during this batch, sent again once it is recorded.
    woken: RefCell<Vec<crate::ledger::limit::Woken>>,
    /// Waits that many ms (the worker's timer), so a throttled start due within
    /// [`gate::PACE_MS`] is waited for here instead of sent back; none: never waited for.
    sleep: Option<&'a Sleep<'a>>,
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
            woken: RefCell::default(),
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

    /// A timer, so a throttled job waits for a start due within [`gate::PACE_MS`] in this
    /// invocation (without one, every throttled job is sent back until its start).
    pub fn with_sleep(self, sleep: &'a Sleep<'a>) -> Self {
        Consumer { sleep: Some(sleep), ..self }
    }
}

/// Why a message asks for no job it could run: it is recorded DEAD with this as its error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum Undecodable {
    #[error("body is not JSON: {0}")]
    NotJson(BodyError),
    #[error("{0}")]
    Envelope(EnvelopeError),
    #[error("payload is {0} bytes as JSON, over the {MAX_BODY_JSON_BYTES}-byte limit")]
    TooLarge(usize),
}

/// Why a sealed payload cannot be opened now: its job waits for the key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum Unopened {
    #[error("the payload is sealed and PAYLOAD_KEY is not set")]
    NoKey,
    #[error("the sealed payload: {0}")]
    Open(InfraError),
}

/// A message read: the job it asks for, or why it asks for none.
type Read = Result<Decoded, Undecodable>;

/// A decoded message: the job it asks for. Its payload is in `spec` for recording; what runs is
/// always the ledger row's payload.
#[derive(Debug, Clone)]
struct Decoded {
    spec: JobSpec,
    /// When the job's first message was sent (ms): what a batch plans a key's messages by.
    queued_at: i64,
    /// The message wakes its job from its limit key's line (design §20.10).
    woken: bool,
}

impl<K: Kv, S: Sql, R: Runner, C: Clock, Q: QueueSender> Consumer<'_, K, S, R, C, Q> {
    /// Processes a batch; one outcome per message, in order. Never fails.
    pub async fn process(&self, role: Role, msgs: &[Incoming]) -> Vec<Outcome> {
        let mut decoded: Vec<Read> = msgs.iter().map(|m| self.decode(m)).collect();
        let unsealable = self.seal_plain(&mut decoded).await;
        if unsealable.iter().any(|&u| u) {
            // Fedify jobs (they carry private keys) sent straight to the queue while PAYLOAD_KEY is
            // not set: not recorded (the ledger would keep their keys in plain), put off until it is.
            self.outage(
                "fedify jobs sent to the queue wait: they are sealed at rest, and PAYLOAD_KEY is not set".into(),
            );
            let (mut at, mut kept, mut kept_decoded) = (Vec::new(), Vec::new(), Vec::new());
            for (i, (m, d)) in msgs.iter().zip(decoded).enumerate().filter(|(i, _)| !unsealable[*i]) {
                at.push(i);
                kept.push(m.clone());
                kept_decoded.push(d);
            }
            let out = self.run(role, &kept, kept_decoded).await;
            return placed(msgs.len(), at.into_iter().zip(out));
        }
        self.run(role, msgs, decoded).await
    }

    async fn run(&self, role: Role, msgs: &[Incoming], decoded: Vec<Read>) -> Vec<Outcome> {
        if msgs.is_empty() {
            return Vec::new();
        }
        let out = match (role, self.cfg.ordering_mode) {
            (Role::DeadLetter, _) => self.dead_letters(msgs, &decoded).await,
            (Role::Main, OrderingMode::Lock) => self.run_locked(msgs, &decoded).await,
            (Role::Main, OrderingMode::Strict) => self.run_strict_batch(msgs, decoded).await,
        };
        self.send_woken().await;
        out
    }

    /// Seals the payload of every `fedify` job that arrived in plain (sent straight to the queue,
    /// not through `POST /jobs`, which seals it): Fedify's tasks carry the actor's private keys,
    /// which must never reach the ledger in plain. Returns, per message, whether it could not be
    /// sealed (no `PAYLOAD_KEY`, or sealing failed).
    async fn seal_plain(&self, decoded: &mut [Read]) -> Vec<bool> {
        let mut unsealable = vec![false; decoded.len()];
        for (i, d) in decoded.iter_mut().enumerate() {
            let Ok(d) = d else { continue };
            let Some(plain) = d.spec.payload.as_deref().filter(|p| !is_sealed(p)) else { continue };
            if d.spec.job_type.as_deref() != Some(FEDIFY_TYPE) {
                continue;
            }
            match self.sealer {
                Some(sealer) => match sealer.seal(&d.spec.id, plain).await {
                    Ok(sealed) => d.spec.payload = Some(sealed),
                    Err(_) => unsealable[i] = true,
                },
                None => unsealable[i] = true,
            }
        }
        unsealable
    }

    /// Strict mode: keyed jobs are sequenced by the ledger; everything else (unkeyed jobs,
    /// unreadable bodies) takes the lock-mode path, which needs no lock for them. Both at once.
    async fn run_strict_batch(&self, msgs: &[Incoming], decoded: Vec<Read>) -> Vec<Outcome> {
        let mut keyed = Vec::new();
        let (mut rest_at, mut rest_msgs, mut rest_decoded) = (Vec::new(), Vec::new(), Vec::new());
        for (i, (m, d)) in msgs.iter().zip(decoded).enumerate() {
            match d {
                Ok(d) if d.spec.ordering_key.is_some() => {
                    keyed.push(strict::Member { index: i, timestamp_ms: d.queued_at, decoded: d });
                }
                other => {
                    rest_at.push(i);
                    rest_msgs.push(m.clone());
                    rest_decoded.push(other);
                }
            }
        }
        let (rest, strict) = futures::join!(
            async {
                if rest_msgs.is_empty() {
                    Vec::new()
                } else {
                    self.run_locked(&rest_msgs, &rest_decoded).await
                }
            },
            self.run_strict(keyed),
        );
        placed(msgs.len(), rest_at.into_iter().zip(rest).chain(strict))
    }

    fn decode(&self, m: &Incoming) -> Read {
        let body = m.body.as_ref().map_err(|e| Undecodable::NotJson(e.clone()))?;
        let env = Envelope::decode(body.clone()).map_err(Undecodable::Envelope)?;
        let payload = env.payload.to_string();
        if payload.len() > MAX_BODY_JSON_BYTES {
            return Err(Undecodable::TooLarge(payload.len()));
        }
        let spec = JobSpec {
            id: env.meta.id.clone().unwrap_or_else(|| m.id.clone()),
            job_type: env.job_type().map(str::to_string),
            ordering_key: env.ordering_key.clone(),
            dedupe_key: env.meta.dedupe_key.clone(),
            limit_key: env.meta.limit_key.clone(),
            deadline_at: env.meta.deadline_at,
            timeout_seconds: env.meta.timeout_seconds,
            payload: Some(payload),
            max_attempts: env.meta.max_attempts.unwrap_or(self.cfg.max_attempts),
            priority: env.meta.priority.unwrap_or(DEFAULT_PRIORITY),
        };
        let queued_at = env.meta.queued_at.map_or(m.timestamp_ms, |at| at.min(m.timestamp_ms));
        Ok(Decoded { spec, queued_at, woken: env.meta.woken })
    }

    /// The message that brings back a job that waits (a snooze, a held key) in place of
    /// `retry()`: every `retry()` spends one of Queues' `max_retries` deliveries, and a wait
    /// spends no attempt, so a job that waits long enough would be dead-lettered though it never
    /// failed (design §3). The new message names the job (its id, which may have been the old
    /// message's) and when it was first sent, so it keeps its place in its key's order. `None`
    /// when it cannot be rebuilt within Queues' limits: then it is retried.
    fn resent(&self, m: &Incoming, d: &Decoded, delay_seconds: u32) -> Option<OutMessage> {
        let body = m.body.as_ref().ok()?;
        let mut env = Envelope::decode(body.clone()).ok()?;
        env.meta.id = Some(d.spec.id.clone());
        env.meta.queued_at = Some(d.queued_at);
        let msg = OutMessage::of(&env, delay_seconds);
        msg.fits().then_some(msg)
    }

    /// The ledger row for a message that cannot be decoded: its id, its body as text (unless the
    /// body is over the size limit: then the reason says so and the row has no payload).
    fn undecodable_spec(&self, m: &Incoming) -> JobSpec {
        JobSpec {
            id: m.id.clone(),
            job_type: None,
            ordering_key: None,
            dedupe_key: None,
            limit_key: None,
            deadline_at: None,
            timeout_seconds: None,
            payload: m.body.as_ref().ok().map(Value::to_string).filter(|p| p.len() <= MAX_BODY_JSON_BYTES),
            max_attempts: self.cfg.max_attempts,
            priority: DEFAULT_PRIORITY,
        }
    }

    async fn dead_letters(&self, msgs: &[Incoming], decoded: &[Read]) -> Vec<Outcome> {
        let now = self.clock.now_ms();
        let mut jobs = Vec::new();
        for (m, d) in msgs.iter().zip(decoded) {
            let spec = d.as_ref().map_or_else(|_| self.undecodable_spec(m), |d| d.spec.clone());
            let error = match d {
                Ok(_) => DELIVERY_EXHAUSTED.to_string(),
                Err(e) => format!("{DELIVERY_EXHAUSTED}; {e}"),
            };
            jobs.push((spec, error));
        }
        let out = match self.ledger.record_dead_all(&jobs, now).await {
            Ok(out) => out,
            Err(e) => {
                self.outage(format!("dead-letter batch deferred: {e}"));
                return vec![Outcome::Defer { delay_seconds: INFRA_RETRY_DELAY_SECONDS }; msgs.len()];
            }
        };
        out.into_iter()
            .map(|dead| match (dead.recorded, dead.job) {
                (true, Some(j)) => {
                    (self.log)(&Event::JobDead {
                        job_id: &j.id,
                        job_type: j.job_type.as_deref(),
                        ordering_key: j.ordering_key.as_deref(),
                        attempts: j.attempts,
                        error: j.last_error.as_deref().unwrap_or_default(),
                    });
                    Outcome::Ack
                }
                (true, None) => Outcome::Ack,
                // Someone is running it right now: let that run finish, then look again.
                (false, Some(j)) if j.status == Status::Running => {
                    Outcome::Defer { delay_seconds: until(now, j.lease_until) }
                }
                _ => Outcome::Ack,
            })
            .collect()
    }

    fn outage(&self, message: String) {
        (self.log)(&Event::Outage { message });
    }

    /// `job`'s failed run by `owner`: PENDING again at `next_run_at`, or DEAD.
    fn fail(&self, job: &Job, owner: &str, at: i64, to: Status, next_run_at: i64, error: &str) -> Transition {
        let (id, owner, error) = (job.id.clone(), owner.to_string(), error.to_string());
        Transition::Fail { id, route: job.route(), owner, at, to, next_run_at, error }
    }

    /// `job`'s snoozed run by `owner`: PENDING again at `next_run_at`, no attempt spent, the next
    /// run's payload in place of its own when given.
    fn snooze(&self, job: &Job, owner: &str, at: i64, next_run_at: i64, payload: Option<String>) -> Transition {
        let (id, owner) = (job.id.clone(), owner.to_string());
        Transition::Snooze { id, route: job.route(), owner, at, next_run_at, payload }
    }

    /// A job this invocation claimed and does not run: handed back, due at `next_run_at`.
    fn defer(&self, job: &Job, at: i64, next_run_at: i64) -> Transition {
        let owner = self.owner.clone();
        Transition::Defer { id: job.id.clone(), route: job.route(), owner, at, next_run_at, parked: false }
    }

    /// Runs a job this invocation claimed and says what to record. The ledger row is the truth:
    /// what runs is the row's payload, never the message's.
    async fn run_claimed(&self, job: &Job) -> Ran {
        let started_at = self.clock.now_ms();
        let attempt = u32::try_from(job.attempts).unwrap_or(u32::MAX);
        let sealed = job.payload.as_deref().is_some_and(is_sealed);
        if let Some(deadline) = job.deadline_at.filter(|&d| started_at >= d) {
            // Not run at all: what it was for is past (design §20). DEAD like a permanent failure.
            let why = format!("expired: not started by its deadline ({} s late)", (started_at - deadline) / 1000);
            return self.ran(job, &self.owner, started_at, Err(JobError::permanent(why)), false).await;
        }
        let payload = match self.payload_of(job).await {
            Ok(p) => p,
            Err(why) => return self.wait_for_key(job, started_at, why),
        };
        let gate = self.gate(job).await;
        if matches!(gate, gate::Gate::Shut(_) | gate::Gate::Down(_)) {
            return self.refused(job, gate);
        }
        let result = match payload.map(|v| serde_json::from_str::<Value>(&v).ok()) {
            Some(Some(payload)) => {
                let cx = JobContext {
                    id: &job.id,
                    attempt,
                    payload: &payload,
                    ordering_key: job.ordering_key.as_deref(),
                    priority: job.priority,
                    timeout_ms: self.timeout_ms(job),
                };
                self.timed(job, self.runner.run(&cx)).await
            }
            Some(None) | None => Err(JobError::permanent("the ledger row has no readable payload")),
        };
        if let gate::Gate::Held { until } = gate {
            self.release(job, until, &result).await;
        }
        self.ran(job, &self.owner, started_at, result, sealed).await
    }

    /// The job's own time limit for a run, ms, never past the configured run bound (design §20).
    fn timeout_ms(&self, job: &Job) -> Option<u32> {
        job.timeout_seconds.map(|t| t.min(self.cfg.webhook_timeout_seconds).saturating_mul(1000))
    }

    /// `run`, stopped when it outlasts the job's timeout: a retryable failure. The handler's
    /// future is dropped at its next await (a Rust handler that never awaits cannot be stopped).
    async fn timed(
        &self,
        job: &Job,
        run: impl std::future::Future<Output = Result<Done, JobError>>,
    ) -> Result<Done, JobError> {
        let (Some(ms), Some(sleep)) = (self.timeout_ms(job), self.sleep) else { return run.await };
        match futures::future::select(std::pin::pin!(run), sleep(i64::from(ms))).await {
            futures::future::Either::Left((result, _)) => result,
            futures::future::Either::Right(_) => {
                Err(JobError::retry(format!("timed out after {} s (the job's timeout_seconds)", ms / 1000)))
            }
        }
    }

    /// What a run of `job` by `owner` (its lease owner) records: the guarded transition its
    /// result leads to, and its history line.
    async fn ran(&self, job: &Job, owner: &str, started_at: i64, result: Result<Done, JobError>, sealed: bool) -> Ran {
        let now = self.clock.now_ms();
        let (transition, end, error, http_status) = match result {
            Ok(done) => self.done(job, owner, now, done, sealed).await,
            Err(e) => {
                // A sealed job's error never reaches D1, the API or the logs in plain: a webhook's
                // names its URL, a service handler's quotes its answer.
                let e = if sealed { withheld(e) } else { e };
                let (e, next_payload) = self.next_payload(job, sealed, e).await;
                self.failed(job, owner, now, &e, next_payload)
            }
        };
        let outcome = match end {
            RunEnd::Done => RunOutcome::Done,
            RunEnd::Dead => RunOutcome::Dead,
            RunEnd::Retry { .. } => RunOutcome::Retry,
            RunEnd::Snooze { .. } => RunOutcome::Snooze,
            RunEnd::Limited(_) => unreachable!("a refused start is never a run"),
        };
        // A success is described by the job's DONE row (complete.sql), not by a history row:
        // one row written less per job. (A success whose completion is refused, our lease lost,
        // is still counted in the job's attempts; the reaper records the expired lease.)
        let run = (outcome != RunOutcome::Done).then(|| Run {
            job_id: job.id.clone(),
            attempt: job.attempts,
            started_at,
            finished_at: now,
            outcome,
            error,
            http_status,
            actor: owner.to_string(),
        });
        Ran { record: Record { transition, run }, end }
    }

    /// A successful run's completion; a sealed job's result is sealed too (one that cannot be is
    /// not kept).
    async fn done(&self, job: &Job, owner: &str, now: i64, done: Done, sealed: bool) -> Finished {
        let mut kept = done.result.as_ref().map(bounded_result);
        if sealed {
            if let (Some(text), Some(sealer)) = (kept.take(), self.sealer) {
                kept = sealer.seal(&job.id, &text).await.ok();
            }
        }
        let complete = Transition::Complete {
            id: job.id.clone(),
            route: job.route(),
            owner: owner.to_string(),
            at: now,
            result: kept,
            http_status: done.http_status,
        };
        (complete, RunEnd::Done, None, done.http_status)
    }

    /// A failed run's transition: DEAD, a retry after the backoff, or a snooze (with the next
    /// run's payload, if the handler gave one).
    fn failed(&self, job: &Job, owner: &str, now: i64, e: &JobError, next_payload: Option<String>) -> Finished {
        match decide_failure(job.attempts, job.max_attempts, job.snoozes, e, self.cfg, (self.random)()) {
            FailureDecision::Dead(why) => {
                (self.log)(&Event::JobDead {
                    job_id: &job.id,
                    job_type: job.job_type.as_deref(),
                    ordering_key: job.ordering_key.as_deref(),
                    attempts: job.attempts,
                    error: &why,
                });
                let dead = self.fail(job, owner, now, Status::Dead, now, &why);
                (dead, RunEnd::Dead, Some(why), e.http_status())
            }
            FailureDecision::Retry { delay_ms } => {
                let at = now + delay_ms;
                // Queues' delays are whole seconds: rounded up, so the message never comes
                // before its job is due.
                let delay_seconds = crate::limits::delay_until(now, Some(at));
                let why = e.to_string();
                let fail = self.fail(job, owner, now, Status::Pending, at, &why);
                (fail, RunEnd::Retry { delay_seconds }, Some(why), e.http_status())
            }
            FailureDecision::Snooze { delay_seconds } => {
                // Handed back like a job never run: PENDING, its attempt returned.
                let at = now + i64::from(delay_seconds) * 1000;
                let snooze = self.snooze(job, owner, now, at, next_payload);
                (snooze, RunEnd::Snooze { delay_seconds }, Some(e.to_string()), e.http_status())
            }
        }
    }

    /// Records panics of Rust handlers noted before this invocation (see [`crate::panics`]): each
    /// job still RUNNING in the attempt that panicked, under the lease of the invocation that
    /// died, fails that attempt ("the handler panicked: ..."): retried with backoff, or DEAD at
    /// its last attempt, and sent again so that it runs without waiting for its lease to expire.
    /// Best effort: what cannot be recorded now is left to the lease's expiry.
    pub async fn record_panics(&self, panicked: &[Panicked]) {
        let ids: Vec<&str> = panicked.iter().map(|p| p.job_id.as_str()).collect();
        let rows = match self.ledger.get_all(&ids).await {
            Ok(rows) => rows,
            Err(e) => return self.outage(format!("panics of {} jobs not recorded: {e}", ids.len())),
        };
        let mut records = Vec::new();
        // Every invocation the panics ended: the panicked jobs' lease owners, and what was live.
        let mut owners: Vec<String> = panicked.iter().flat_map(|p| p.owners.iter().cloned()).collect();
        let mut wakes = Vec::new();
        for (p, row) in panicked.iter().zip(rows) {
            let Some(job) = row.filter(|j| j.status == Status::Running && j.attempts == i64::from(p.attempt)) else {
                continue;
            };
            let Some(owner) = job.lease_owner.clone() else { continue };
            let sealed = job.payload.as_deref().is_some_and(is_sealed);
            let e = JobError::retry(format!("the handler panicked: {}", p.message));
            let started_at = job.started_at.unwrap_or(job.updated_at);
            let ran = self.ran(&job, &owner, started_at, Err(e), sealed).await;
            if let Some(delay) = ran.end.again_after() {
                wakes.extend(crate::producer::message_for(&job, delay));
            }
            records.push(ran.record);
            owners.push(owner);
        }
        owners.sort();
        owners.dedup();
        let ledger = &self.ledger;
        if let Err(e) = ledger.record_all(&records).await {
            return self.outage(format!("panics not recorded, left to their leases: {e}"));
        }
        // The other jobs those invocations were running died with them: their runs end now.
        let owners: Vec<&str> = owners.iter().map(String::as_str).collect();
        match ledger.end_leases(&owners, self.clock.now_ms(), DIED_WITH_A_PANIC).await {
            Ok(ended) => wakes.extend(
                ended.iter().filter(|j| j.status == Status::Pending).filter_map(|j| crate::producer::message_for(j, 0)),
            ),
            Err(e) => self.outage(format!("jobs of an invocation that panicked left to their leases: {e}")),
        }
        if let Err(e) = crate::producer::send_all(self.queue, wakes).await {
            self.outage(format!("a job whose handler panicked was not sent again (maintenance will): {e}"));
        }
    }

    /// A sealed job whose payload cannot be opened (no `PAYLOAD_KEY`, its key rotated away): not
    /// run and not failed. It waits [`SEAL_WAIT_SECONDS`] without spending an attempt or a snooze,
    /// its key held (a job of its key must not overtake it), and says why in its history and the
    /// log: fixing `PAYLOAD_KEY` lets it run. Spending attempts on it would end it DEAD, and under
    /// `ON_DEAD = "skip"` its key would move past a job that was never run.
    fn wait_for_key(&self, job: &Job, started_at: i64, why: Unopened) -> Ran {
        let now = self.clock.now_ms();
        let error = format!("{why}; waiting for PAYLOAD_KEY to open it, its key held, no attempt spent");
        self.outage(format!("job {} not run: {error}", job.id));
        let run = Run {
            job_id: job.id.clone(),
            attempt: job.attempts,
            started_at,
            finished_at: now,
            outcome: RunOutcome::Snooze,
            error: Some(error),
            http_status: None,
            actor: self.owner.clone(),
        };
        let delay_seconds = SEAL_WAIT_SECONDS;
        let defer = self.defer(job, now, now + i64::from(delay_seconds) * 1000);
        Ran { record: Record { transition: defer, run: Some(run) }, end: RunEnd::Snooze { delay_seconds } }
    }

    /// A snooze's replacement payload as it is stored (sealed when the job is), or the error that
    /// makes the run a retryable failure instead: a replacement must keep the job's `type` and
    /// fit [`MAX_PAYLOAD_BYTES`], and a sealed job's must be sealed.
    async fn next_payload(&self, job: &Job, sealed: bool, e: JobError) -> (JobError, Option<String>) {
        let JobError::Snooze { payload: Some(next), http_status, .. } = &e else { return (e, None) };
        let refuse = |why: String| JobError::Retryable {
            reason: format!("the snooze's replacement payload is refused: {why}"),
            retry_after: None,
            http_status: *http_status,
        };
        let next_type = next.get("type").and_then(Value::as_str);
        if next_type != job.job_type.as_deref() {
            return (refuse(format!("its type {next_type:?} is not the job's {:?}", job.job_type)), None);
        }
        let text = next.to_string();
        if text.len() > MAX_PAYLOAD_BYTES {
            return (refuse(format!("{} bytes as JSON, over {MAX_PAYLOAD_BYTES}", text.len())), None);
        }
        if !sealed {
            return (e, Some(text));
        }
        let Some(sealer) = self.sealer else {
            return (refuse("it cannot be sealed: PAYLOAD_KEY is not set".into()), None);
        };
        match sealer.seal(&job.id, &text).await {
            Ok(kept) => (e, Some(kept)),
            Err(err) => (refuse(format!("it cannot be sealed: {err}")), None),
        }
    }

    /// The job's payload as JSON text: a sealed one opened with `PAYLOAD_KEY`. `None`: the row has
    /// none. Why a sealed payload cannot be opened (no `PAYLOAD_KEY`, a key rotated away) is the
    /// error: the job waits for the key ([`Self::wait_for_key`]).
    async fn payload_of(&self, job: &Job) -> Result<Option<String>, Unopened> {
        let Some(text) = job.payload.as_deref() else { return Ok(None) };
        if !is_sealed(text) {
            return Ok(Some(text.to_string()));
        }
        let Some(sealer) = self.sealer else { return Err(Unopened::NoKey) };
        sealer.open(&job.id, text).await.map(Some).map_err(Unopened::Open)
    }

    /// Before a handler run: extends this invocation's leases when what is left of them might not
    /// outlast the run (see [`Config::refresh_after_ms`]), and learns which jobs are still ours.
    async fn renew_leases(&self, leases: &Leases) {
        let now = self.clock.now_ms();
        let lease_ms = i64::from(self.cfg.lease_seconds) * 1000;
        if now - leases.renewed_at.get() > self.cfg.refresh_after_ms(self.cfg.lease_seconds) {
            let last = leases.renewed_at.replace(now);
            let ids = leases.ids.borrow().clone();
            match self.ledger.renew(&self.owner, now, now + lease_ms, &ids).await {
                Ok(held) => {
                    *leases.held.borrow_mut() = Some(held);
                    leases.confirmed_at.set(leases.confirmed_at.get().max(now));
                }
                Err(e) => {
                    leases.renewed_at.set(last);
                    self.outage(format!("lease renewal failed, leases may expire under running jobs: {e}"));
                }
            }
        }
    }
}

/// This invocation's leases: when they were last renewed, and which jobs that renewal found still
/// ours. A lease is also taken for lost once what is left of it since the last claim or renewal
/// that confirmed it may not cover a run: a renewal that failed, or that a concurrent group
/// started and has not finished, confirms nothing (the simulation over shards found a group run a job while another
/// group's renewal, which would have found it lost, was still in flight). A job missing from it lost its lease while the invocation stalled (the reaper may have
/// given it to another invocation): it must not run here.
struct Leases {
    /// When a renewal was last tried (they are spaced by `refresh_after_ms`).
    renewed_at: Cell<i64>,
    /// When the leases were last known ours: the claim, or the last renewal that answered.
    confirmed_at: Cell<i64>,
    /// Every job this invocation claimed: a renewal extends these (by id in each job's shard,
    /// never a table scan).
    ids: RefCell<Vec<(String, Route)>>,
    held: RefCell<Option<HashSet<String>>>,
}

impl Leases {
    /// The leases of the jobs claimed so far, taken at `now`.
    fn new<'a>(now: i64, jobs: impl IntoIterator<Item = &'a Job>) -> Leases {
        let ids = jobs.into_iter().map(|j| (j.id.clone(), j.route())).collect();
        let at = Cell::new(now);
        Leases { renewed_at: at.clone(), confirmed_at: at, ids: RefCell::new(ids), held: RefCell::new(None) }
    }

    /// Whether `job`'s lease may not outlast a run starting at `now`: the last renewal did not find
    /// it, or more than `fresh_ms` ([`Config::refresh_after_ms`]) has passed since the leases were
    /// last confirmed (what is left of them may not cover a run).
    fn lost(&self, job: &str, now: i64, fresh_ms: i64) -> bool {
        now - self.confirmed_at.get() > fresh_ms || self.held.borrow().as_ref().is_some_and(|held| !held.contains(job))
    }

    /// Jobs claimed since the last renewal are ours too.
    fn claimed<'a>(&self, jobs: impl IntoIterator<Item = &'a Job>) {
        let jobs: Vec<(String, Route)> = jobs.into_iter().map(|j| (j.id.clone(), j.route())).collect();
        if let Some(held) = self.held.borrow_mut().as_mut() {
            held.extend(jobs.iter().map(|j| j.0.clone()));
        }
        self.ids.borrow_mut().extend(jobs);
    }
}

use crate::limits::delay_until as until;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_no_renewal_confirmed_for_longer_than_a_run_may_take_is_taken_for_lost() {
        // The simulation over shards once found a group run a job while another group's renewal,
        // which would have found its lease lost, was still in flight.
        let leases = Leases::new(1_000, std::iter::empty::<&Job>());
        assert!(!leases.lost("a", 6_000, 5_000), "confirmed by the claim, within a run's time");
        assert!(leases.lost("a", 6_001, 5_000), "no renewal answered since: it may not cover a run");
        // A renewal answers: the leases it found are confirmed from then on, the others lost.
        *leases.held.borrow_mut() = Some(HashSet::from(["a".to_string()]));
        leases.confirmed_at.set(6_001);
        assert!(!leases.lost("a", 6_002, 5_000));
        assert!(leases.lost("b", 6_002, 5_000), "a job the renewal did not find");
        leases.claimed(std::iter::empty::<&Job>());
        assert!(leases.lost("a", 11_002, 5_000), "unconfirmed again past a run's time");
    }

    fn retry(after: Option<u32>) -> JobError {
        JobError::Retryable { reason: "HTTP 503".into(), retry_after: after, http_status: Some(503) }
    }

    #[test]
    fn a_retryable_failure_backs_off_by_attempt() {
        let cfg = Config::default();
        assert_eq!(decide_failure(1, 8, 0, &retry(None), &cfg, 1.0), FailureDecision::Retry { delay_ms: 5_000 });
        assert_eq!(decide_failure(3, 8, 0, &retry(None), &cfg, 1.0), FailureDecision::Retry { delay_ms: 20_000 });
        assert_eq!(decide_failure(3, 8, 0, &retry(None), &cfg, 0.0), FailureDecision::Retry { delay_ms: 10_000 });
        let one = Config { backoff_base_seconds: 1, ..Config::default() };
        assert_eq!(decide_failure(1, 8, 0, &retry(None), &one, 0.3), FailureDecision::Retry { delay_ms: 650 });
    }

    #[test]
    fn retry_after_overrides_the_backoff() {
        let cfg = Config::default();
        assert_eq!(decide_failure(1, 8, 0, &retry(Some(120)), &cfg, 0.5), FailureDecision::Retry { delay_ms: 120_000 });
    }

    #[test]
    fn the_last_attempt_and_permanent_errors_are_dead() {
        let cfg = Config::default();
        assert!(
            matches!(decide_failure(8, 8, 0, &retry(None), &cfg, 0.5), FailureDecision::Dead(w) if w.contains("attempt 8 of 8"))
        );
        assert_eq!(
            decide_failure(1, 8, 0, &JobError::permanent("HTTP 404"), &cfg, 0.5),
            FailureDecision::Dead("HTTP 404".into())
        );
    }

    #[test]
    fn a_snooze_is_never_dead_and_stays_in_range() {
        let cfg = Config::default();
        let snooze = |s| JobError::snooze(s, "rate limited");
        assert_eq!(decide_failure(8, 8, 0, &snooze(30), &cfg, 0.5), FailureDecision::Snooze { delay_seconds: 30 });
        assert_eq!(decide_failure(1, 8, 0, &snooze(0), &cfg, 0.5), FailureDecision::Snooze { delay_seconds: 1 });
        assert_eq!(
            decide_failure(1, 8, 0, &snooze(u32::MAX), &cfg, 0.5),
            FailureDecision::Snooze { delay_seconds: MAX_DELAY_SECONDS }
        );
    }

    #[test]
    fn a_sealed_jobs_error_keeps_its_kind_and_status_not_its_text() {
        let e = JobError::Retryable {
            reason: "https://h.test/hook/s3cret?token=t: HTTP 503".into(),
            retry_after: Some(9),
            http_status: Some(503),
        };
        assert_eq!(
            withheld(e),
            JobError::Retryable {
                reason: "HTTP 503 (details withheld: the job is sealed)".into(),
                retry_after: Some(9),
                http_status: Some(503)
            }
        );
        let e = withheld(JobError::permanent("service APP: private key -----BEGIN"));
        assert_eq!(e.to_string(), "the handler failed (details withheld: the job is sealed)");
        let e = withheld(JobError::snooze_with(5, "said the key", serde_json::json!({"type": "t"})));
        assert!(matches!(&e, JobError::Snooze { seconds: 5, payload: Some(_), .. }), "{e:?}");
        assert!(!e.to_string().contains("key"), "{e}");
    }

    #[test]
    fn snoozes_end_dead_past_max_snoozes() {
        let cfg = Config { max_snoozes: 3, ..Config::default() };
        let snooze = JobError::snooze(1, "HTTP 429");
        assert_eq!(decide_failure(1, 8, 2, &snooze, &cfg, 0.5), FailureDecision::Snooze { delay_seconds: 1 });
        assert_eq!(
            decide_failure(1, 8, 3, &snooze, &cfg, 0.5),
            FailureDecision::Dead("HTTP 429: snoozed 3 times already, MAX_SNOOZES (3) allows no more".into())
        );
    }

    #[test]
    fn a_queues_role_comes_from_the_configuration() {
        let cfg = Config { dead_letter_queue: "jobs-dead".into(), ..Config::default() };
        assert_eq!(role_of(&cfg, "orderly-jobs"), Some(Role::Main));
        assert_eq!(role_of(&cfg, "jobs-dead"), Some(Role::DeadLetter));
        assert_eq!(role_of(&cfg, "orderly-dlq"), None, "the old name is just another queue now");
        assert_eq!(role_of(&cfg, "orderly-jobs-urgent"), Some(Role::Main), "the urgent lane runs jobs");
    }
}
