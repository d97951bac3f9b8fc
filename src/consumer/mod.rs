//! The consumer: one batch of queue messages in, one [`Outcome`] per message out. Never fails.
//!
//! Generic over its ports (KV, SQL, handlers, clock, queue), so the whole algorithm runs natively
//! against the in-memory KV and real SQLite (and in the deterministic simulation), and on the edge
//! against KV, D1 and Queues. The edge applies outcomes with `ack()` / `retry()`.
//!
//! A message goes down one stack; no file calls up into one above it (`tests/native/house.rs`
//! checks it):
//! - `mod.rs` (here): decode every message on its own, seal Fedify's plain payloads, send
//!   dead letters to the ledger, record panics, dispatch the rest by ordering mode.
//! - the modes: `locked.rs`, design §3, Fedify's best-effort KV lock (`ORDERING_MODE = "lock"`,
//!   the default); `strict.rs`, design §3b, the ledger sequences every key
//!   (`ORDERING_MODE = "strict"`). Unkeyed messages in a strict batch take the lock-mode path,
//!   which needs no lock for them. A mode plans, claims, records and settles.
//! - `executor.rs`: run one claimed job and say what to record (the decision is `crate::retry`'s).
//! - `gate.rs`: a job's limit key, asked before its run and freed after (design §20).
//! - `leases.rs`: the invocation's leases; `message.rs`: messages in and outcomes out;
//!   `leftovers.rs`: what a batch's runs leave for its end (woken jobs, dealt slots, finished
//!   jobs others wait on), returned by each run and acted on here once the batch is recorded;
//!   `ports.rs`: the [`Consumer`] value every layer works with.

mod executor;
mod gate;
mod leases;
mod leftovers;
mod locked;
mod message;
mod ports;
mod strict;

pub use executor::CANCEL_REACH_MS;
#[cfg(any(test, feature = "testing"))]
pub use executor::{CANCEL_CHECK_MS, CANCEL_GRACE_MS, SEAL_WAIT_SECONDS};
#[cfg(any(test, feature = "testing"))]
pub use locked::RESEND_WAITING_AFTER_MS;
pub use message::{role_of, Incoming, Outcome, Role, INFRA_RETRY_DELAY_SECONDS};
pub use ports::Consumer;
#[cfg(any(test, feature = "testing"))]
pub use strict::{CHAIN_CHUNK, FIRST_CHUNK};

use leftovers::Leftovers;
use message::{decode, placed, undecodable_spec, Read};

use crate::clock::Clock;
use crate::config::OrderingMode;
use crate::handlers::{JobError, Runner};
use crate::ledger::{Sql, Status};
use crate::bounds::delay_until;
use crate::lock::Kv;
use crate::log::Event;
use crate::panics::Panicked;
use crate::producer::QueueSender;
use crate::seal::{is_sealed, FEDIFY_TYPE};

/// The error of a job whose invocation died because another job's handler panicked.
pub const DIED_WITH_A_PANIC: &str = "its invocation died: a Rust handler running beside it panicked";
/// The error recorded for messages Queues gave up on.
pub const DELIVERY_EXHAUSTED: &str = "delivery attempts exhausted";

impl<K: Kv, S: Sql, R: Runner, C: Clock, Q: QueueSender> Consumer<'_, K, S, R, C, Q> {
    /// Processes a batch; one outcome per message, in order. Never fails.
    pub async fn process(&self, role: Role, msgs: &[Incoming]) -> Vec<Outcome> {
        let mut decoded: Vec<Read> = msgs.iter().map(|m| decode(m, self.cfg)).collect();
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
        // Wake-ups whose job did not start give back the slot handed to it when the batch ends.
        let woken: Vec<(String, String)> =
            decoded.iter().flatten().filter(|_| role == Role::Main).filter_map(message::Decoded::handed_slot).collect();
        let (out, mut left) = match (role, self.cfg.ordering_mode) {
            (Role::DeadLetter, _) => (self.dead_letters(msgs, &decoded).await, Leftovers::default()),
            (Role::Main, OrderingMode::Lock) => self.run_locked(msgs, &decoded).await,
            (Role::Main, OrderingMode::Strict) => self.run_strict_batch(msgs, decoded).await,
        };
        // The batch is recorded: what its runs left is acted on.
        self.give_back(&woken, &mut left).await;
        self.send_woken(left.woken).await;
        self.release_dependents(left.finished).await;
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
    async fn run_strict_batch(&self, msgs: &[Incoming], decoded: Vec<Read>) -> (Vec<Outcome>, Leftovers) {
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
        let ((rest, mut left), (strict, strict_left)) = futures::join!(
            async {
                if rest_msgs.is_empty() {
                    (Vec::new(), Leftovers::default())
                } else {
                    self.run_locked(&rest_msgs, &rest_decoded).await
                }
            },
            self.run_strict(keyed),
        );
        left.gather(strict_left);
        (placed(msgs.len(), rest_at.into_iter().zip(rest).chain(strict)), left)
    }

    async fn dead_letters(&self, msgs: &[Incoming], decoded: &[Read]) -> Vec<Outcome> {
        let now = self.clock.now_ms();
        let mut jobs = Vec::new();
        for (m, d) in msgs.iter().zip(decoded) {
            let spec = d.as_ref().map_or_else(|_| undecodable_spec(m, self.cfg), |d| d.spec.clone());
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
                        trace: j.trace().as_ref(),
                    });
                    Outcome::Ack
                }
                (true, None) => Outcome::Ack,
                // Someone is running it right now: let that run finish, then look again.
                (false, Some(j)) if j.status == Status::Running => {
                    Outcome::Defer { delay_seconds: delay_until(now, j.lease_until) }
                }
                _ => Outcome::Ack,
            })
            .collect()
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
            let ran = self.ran(&job, &owner, (started_at, self.clock.now_ms()), Err(e), sealed).await;
            if let Some(delay) = ran.end.again_after() {
                wakes.extend(crate::producer::message_for(&job, delay));
            }
            records.push(ran.record);
            owners.push(owner);
        }
        owners.sort();
        owners.dedup();
        let ledger = &self.ledger;
        let mut left = Leftovers::default();
        if let Err(e) = self.record_all(&records, &mut left).await {
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
        // A panicked job that ended DEAD may be waited on (design §24).
        self.release_dependents(left.finished).await;
    }
}
