//! A batch's messages in and out: what the edge read ([`Incoming`]), what a message asks for
//! ([`Decoded`], or why it asks for nothing it could run), and what to do with it ([`Outcome`]).
//! Pure; every layer of the consumer reads messages through here.

use serde_json::Value;

use crate::config::Config;
use crate::envelope::{BodyError, Envelope, EnvelopeError, MAX_BODY_JSON_BYTES};
use crate::ledger::{JobSpec, DEFAULT_PRIORITY};
use crate::producer::OutMessage;

/// Delay before a message deferred for an outage (KV, D1, bad config) comes back.
pub const INFRA_RETRY_DELAY_SECONDS: u32 = 30;

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

/// Why a message asks for no job it could run: it is recorded DEAD with this as its error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(super) enum Undecodable {
    #[error("body is not JSON: {0}")]
    NotJson(BodyError),
    #[error("{0}")]
    Envelope(EnvelopeError),
    #[error("payload is {0} bytes as JSON, over the {MAX_BODY_JSON_BYTES}-byte limit")]
    TooLarge(usize),
}

/// A message read: the job it asks for, or why it asks for none.
pub(super) type Read = Result<Decoded, Undecodable>;

/// A decoded message: the job it asks for. Its payload is in `spec` for recording; what runs is
/// always the ledger row's payload.
#[derive(Debug, Clone)]
pub(super) struct Decoded {
    pub(super) spec: JobSpec,
    /// When the job's first message was sent (ms): what a batch plans a key's messages by.
    pub(super) queued_at: i64,
    /// The message wakes its job from its limit key's line (design §20.10).
    pub(super) woken: bool,
}

impl Decoded {
    /// A wake-up's (job, limit key): the job was handed a slot of its limit key (design §20),
    /// which it takes over when it asks, or gives back when it cannot start now.
    pub(super) fn handed_slot(&self) -> Option<(String, String)> {
        self.woken.then(|| Some((self.spec.id.clone(), self.spec.limit_key.clone()?))).flatten()
    }
}

/// What message `m` asks for, with the configuration's defaults, or why it asks for nothing.
pub(super) fn decode(m: &Incoming, cfg: &Config) -> Read {
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
        max_attempts: env.meta.max_attempts.unwrap_or(cfg.max_attempts),
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
pub(super) fn resent(m: &Incoming, d: &Decoded, delay_seconds: u32) -> Option<OutMessage> {
    let body = m.body.as_ref().ok()?;
    let mut env = Envelope::decode(body.clone()).ok()?;
    env.meta.id = Some(d.spec.id.clone());
    env.meta.queued_at = Some(d.queued_at);
    let msg = OutMessage::of(&env, delay_seconds);
    msg.fits().then_some(msg)
}

/// The ledger row for a message that cannot be decoded: its id, its body as text (unless the
/// body is over the size limit: then the reason says so and the row has no payload).
pub(super) fn undecodable_spec(m: &Incoming, cfg: &Config) -> JobSpec {
    JobSpec {
        id: m.id.clone(),
        job_type: None,
        ordering_key: None,
        dedupe_key: None,
        limit_key: None,
        deadline_at: None,
        timeout_seconds: None,
        payload: m.body.as_ref().ok().map(Value::to_string).filter(|p| p.len() <= MAX_BODY_JSON_BYTES),
        max_attempts: cfg.max_attempts,
        priority: DEFAULT_PRIORITY,
    }
}

/// The outcomes of a batch of `n` messages from the outcomes of parts of it, each at its batch
/// position; a position no part settled is deferred as for an outage (never acked unseen).
pub(super) fn placed(n: usize, parts: impl IntoIterator<Item = (usize, Outcome)>) -> Vec<Outcome> {
    let mut out = vec![Outcome::Defer { delay_seconds: INFRA_RETRY_DELAY_SECONDS }; n];
    for (i, o) in parts {
        out[i] = o;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queues_role_comes_from_the_configuration() {
        let cfg = Config { dead_letter_queue: "jobs-dead".into(), ..Config::default() };
        assert_eq!(role_of(&cfg, "orderly-jobs"), Some(Role::Main));
        assert_eq!(role_of(&cfg, "jobs-dead"), Some(Role::DeadLetter));
        assert_eq!(role_of(&cfg, "orderly-dlq"), None, "the old name is just another queue now");
        assert_eq!(role_of(&cfg, "orderly-jobs-urgent"), Some(Role::Main), "the urgent lane runs jobs");
    }
}
