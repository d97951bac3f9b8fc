//! The batch algorithm (SPEC 3): decode, group by key, lock, claim, run, record, settle.
//!
//! Generic over its ports (KV, SQL, handlers, clock), so the whole algorithm runs natively against
//! the in-memory KV and real SQLite, and on the edge against KV and D1. It returns one [`Outcome`]
//! per message and never fails: the edge applies outcomes with `ack()` / `retry()`. Round trips
//! per batch: one D1 `batch()` for claims, one for completions; KV get+put per key group, get+delete
//! on release.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};

use futures::future::join_all;
use futures::stream::{self, StreamExt};
use serde_json::Value;

use crate::backoff::{backoff, jitter};
use crate::batch::{self, Item};
use crate::clock::Clock;
use crate::config::{Config, MAX_DELAY_SECONDS};
use crate::envelope::Envelope;
use crate::handlers::{JobContext, JobError, Runner};
use crate::ledger::{stmt, Job, JobSpec, Sql, Status, Stmt};
use crate::lock::{self, Acquired, Kv};

/// Delay before a message deferred for an outage (KV, D1, bad config) comes back.
pub const INFRA_RETRY_DELAY_SECONDS: u32 = 30;
/// A PENDING job may be claimed this long before its `next_run_at`: Queues' delays are not exact.
pub const EARLY_DELIVERY_ALLOWANCE_MS: i64 = 2_000;
/// Key groups (and unkeyed messages) run at once; Workers allow six open connections.
pub const GROUP_CONCURRENCY: usize = 6;
/// The error recorded for messages Queues gave up on.
pub const DELIVERY_EXHAUSTED: &str = "delivery attempts exhausted";

/// What to do with one message. `Retry` follows a failed attempt; `Defer` puts a message off
/// without it counting as an attempt (key busy, outage, not yet due).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done with: succeeded, dead, or a duplicate of a finished job.
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
    pub body: Result<Value, String>,
}

/// Which queue a batch came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `orderly-jobs`: run the jobs.
    Main,
    /// `orderly-dlq`: Queues gave up on these; record them DEAD.
    DeadLetter,
}

/// What a failed run leads to. Pure, so it is tested on its own; `fail.sql` only applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureDecision {
    /// PENDING again, delivered after `delay_seconds`.
    Retry {
        /// Seconds.
        delay_seconds: u32,
    },
    /// DEAD with this error.
    Dead(String),
}

/// Decides a failed run: permanent errors and the last allowed attempt are DEAD; otherwise retry
/// after the handler's requested delay, or jittered backoff of the attempt number.
pub fn decide_failure(attempts: i64, max_attempts: i64, err: &JobError, cfg: &Config, random: f64) -> FailureDecision {
    match err {
        JobError::Permanent { reason } => FailureDecision::Dead(reason.clone()),
        JobError::Retryable { reason, .. } if attempts >= max_attempts => {
            FailureDecision::Dead(format!("{reason} (attempt {attempts} of {max_attempts}, no attempts left)"))
        }
        JobError::Retryable { retry_after, .. } => {
            let attempt = u32::try_from(attempts).unwrap_or(u32::MAX);
            let delay = retry_after
                .unwrap_or_else(|| jitter(backoff(attempt, cfg.backoff_base_seconds, cfg.backoff_cap_seconds), random));
            FailureDecision::Retry { delay_seconds: delay.min(MAX_DELAY_SECONDS) }
        }
    }
}

/// The consumer's ports and settings for one invocation.
pub struct Consumer<'a, K, S, R, C> {
    /// Checked vars.
    pub cfg: &'a Config,
    /// Lock store.
    pub kv: &'a K,
    /// Ledger backend.
    pub sql: &'a S,
    /// Job handlers.
    pub runner: &'a R,
    /// Time.
    pub clock: &'a C,
    /// Lease owner name, unique per invocation.
    pub owner: String,
    /// Uniform random numbers in [0, 1) for jitter.
    pub random: &'a dyn Fn() -> f64,
    /// Where outages are reported (the worker's log). They never fail the batch, but an operator
    /// must be able to see why messages are being deferred.
    pub log: &'a dyn Fn(&str),
}

/// A decoded message.
struct Decoded {
    spec: JobSpec,
    payload: Value,
}

/// The claim's verdict on one message.
enum Claim {
    Won(Box<Job>),
    /// DONE or DEAD already: a duplicate delivery.
    Finished,
    /// Cannot run now (another live lease, or not yet due): defer this long.
    NotNow(u32),
    /// Its dedupe key is active in another job.
    Clash,
}

/// A key's lock, taken for a group.
#[derive(Clone)]
struct HeldLock {
    key: String,
    token: String,
}

/// A group's lock situation.
enum GroupLock {
    /// No ordering key: no lock needed.
    Unkeyed,
    Taken(HeldLock),
    /// Another job holds the key; the lock's value.
    Held {
        holder: String,
    },
    /// KV failed.
    Down,
}

/// How a taken lock ends: released, or re-written in a failed job's name for `ttl` seconds.
struct LockEnd {
    lock: HeldLock,
    hold_for: Option<(String, u32)>,
}

/// One message's settlement: its outcome, and the ledger statement that must be recorded before
/// the outcome may be applied.
struct Settle {
    index: usize,
    record: Option<Stmt>,
    outcome: Outcome,
}

impl Settle {
    fn plain(index: usize, outcome: Outcome) -> Self {
        Settle { index, record: None, outcome }
    }
    fn recorded(index: usize, record: Stmt, outcome: Outcome) -> Self {
        Settle { index, record: Some(record), outcome }
    }
}

/// What running one group produced.
struct GroupResult {
    settled: Vec<Settle>,
    lock_end: Option<LockEnd>,
}

impl<K: Kv, S: Sql, R: Runner, C: Clock> Consumer<'_, K, S, R, C> {
    /// Processes a batch; one outcome per message, in order. Never fails.
    pub async fn process(&self, role: Role, msgs: &[Incoming]) -> Vec<Outcome> {
        let decoded: Vec<Result<Decoded, String>> = msgs.iter().map(|m| self.decode(m)).collect();
        match role {
            Role::DeadLetter => self.dead_letters(msgs, &decoded).await,
            Role::Main => self.run_batch(msgs, &decoded).await,
        }
    }

    fn decode(&self, m: &Incoming) -> Result<Decoded, String> {
        let body = m.body.as_ref().map_err(|e| format!("body is not JSON: {e}"))?;
        let env = Envelope::decode(body.clone()).map_err(|e| e.to_string())?;
        let spec = JobSpec {
            id: env.meta.id.clone().unwrap_or_else(|| m.id.clone()),
            job_type: env.job_type().map(str::to_string),
            ordering_key: env.ordering_key.clone(),
            dedupe_key: env.meta.dedupe_key.clone(),
            payload: Some(env.payload.to_string()),
            max_attempts: env.meta.max_attempts.unwrap_or(self.cfg.max_attempts),
        };
        Ok(Decoded { spec, payload: env.payload })
    }

    /// The ledger row for a message that cannot be decoded: its id, its body as text.
    fn undecodable_spec(&self, m: &Incoming) -> JobSpec {
        JobSpec {
            id: m.id.clone(),
            job_type: None,
            ordering_key: None,
            dedupe_key: None,
            payload: m.body.as_ref().ok().map(Value::to_string),
            max_attempts: self.cfg.max_attempts,
        }
    }

    async fn dead_letters(&self, msgs: &[Incoming], decoded: &[Result<Decoded, String>]) -> Vec<Outcome> {
        let now = self.clock.now_ms();
        let mut stmts = Vec::new();
        for (m, d) in msgs.iter().zip(decoded) {
            let spec = d.as_ref().map(|d| d.spec.clone()).unwrap_or_else(|_| self.undecodable_spec(m));
            let error = match d {
                Ok(_) => DELIVERY_EXHAUSTED.to_string(),
                Err(e) => format!("{DELIVERY_EXHAUSTED}; {e}"),
            };
            stmts.push(stmt::record_dead(&spec, now, &error));
            stmts.push(stmt::get(&spec.id));
        }
        let out = match self.sql.batch(stmts).await {
            Ok(out) => out,
            Err(e) => {
                (self.log)(&format!("dead-letter batch deferred: {e}"));
                return vec![Outcome::Defer { delay_seconds: INFRA_RETRY_DELAY_SECONDS }; msgs.len()];
            }
        };
        out.chunks(2)
            .map(|pair| match (pair.first(), pair.get(1).and_then(|rows| Job::first(rows).ok().flatten())) {
                (Some(dead), _) if !dead.is_empty() => Outcome::Ack,
                // Someone is running it right now: let that run finish, then look again.
                (_, Some(j)) if j.status == Status::Running => {
                    Outcome::Defer { delay_seconds: until(now, j.lease_until) }
                }
                _ => Outcome::Ack,
            })
            .collect()
    }

    async fn run_batch(&self, msgs: &[Incoming], decoded: &[Result<Decoded, String>]) -> Vec<Outcome> {
        let now = self.clock.now_ms();
        let infra = Outcome::Defer { delay_seconds: INFRA_RETRY_DELAY_SECONDS };
        let mut settled: Vec<Settle> = Vec::with_capacity(msgs.len());

        // Unreadable bodies are recorded DEAD; a job delivered twice in one batch runs once (the
        // later copy comes back and finds it finished).
        let mut seen: HashSet<&str> = HashSet::new();
        let mut items = Vec::new();
        for (i, d) in decoded.iter().enumerate() {
            match d {
                Err(reason) => settled.push(Settle::recorded(
                    i,
                    stmt::record_dead(&self.undecodable_spec(&msgs[i]), now, reason),
                    Outcome::Ack,
                )),
                Ok(d) if !seen.insert(d.spec.id.as_str()) => {
                    settled.push(Settle::plain(i, Outcome::Defer { delay_seconds: self.cfg.lock_retry_delay_seconds }));
                }
                Ok(d) => items.push(Item {
                    position: i,
                    timestamp_ms: msgs[i].timestamp_ms,
                    key: d.spec.ordering_key.as_deref(),
                }),
            }
        }
        let groups = batch::plan(&items);
        // Only decoded messages are planned, so every planned position has a spec.
        let specs: Vec<Option<&JobSpec>> = decoded.iter().map(|d| d.as_ref().ok().map(|d| &d.spec)).collect();
        let spec =
            |i: usize| -> &JobSpec { specs[i].unwrap_or_else(|| unreachable!("only decoded messages are planned")) };

        // Locks, one per key group, taken concurrently.
        let locks: Vec<GroupLock> = join_all(groups.iter().map(|g| async {
            let Some(key) = g.key else { return GroupLock::Unkeyed };
            let ids: Vec<&str> = g.members.iter().map(|&i| spec(i).id.as_str()).collect();
            let key = lock::lock_key(&self.cfg.ordering_key_prefix, key);
            match lock::acquire(self.kv, &key, &ids, self.cfg.lock_ttl_seconds).await {
                Ok(Acquired::Taken { token }) => GroupLock::Taken(HeldLock { key, token }),
                Ok(Acquired::Held { holder }) => GroupLock::Held { holder },
                Err(e) => {
                    (self.log)(&format!("key {key:?} deferred: {e}"));
                    GroupLock::Down
                }
            }
        }))
        .await;

        // One D1 round trip: claim every runnable message (and read its row, to learn why when the
        // claim is refused); for a key held by one of our jobs, read that job to know how long it holds.
        let mut reads: Vec<Stmt> = Vec::new();
        let mut claim_at: HashMap<usize, usize> = HashMap::new();
        let mut holder_at: HashMap<usize, usize> = HashMap::new();
        let lease_until = now + i64::from(self.cfg.lease_seconds) * 1000;
        for (gi, (g, l)) in groups.iter().zip(&locks).enumerate() {
            match l {
                GroupLock::Unkeyed | GroupLock::Taken(_) => {
                    for &i in &g.members {
                        claim_at.insert(i, reads.len());
                        reads.push(stmt::claim(
                            spec(i),
                            &self.owner,
                            now,
                            lease_until,
                            now + EARLY_DELIVERY_ALLOWANCE_MS,
                        ));
                        reads.push(stmt::get(&spec(i).id));
                    }
                }
                GroupLock::Held { holder } => {
                    if let Some(job_id) = lock::token_job(holder) {
                        holder_at.insert(gi, reads.len());
                        reads.push(stmt::get(job_id));
                    }
                }
                GroupLock::Down => settled.extend(g.members.iter().map(|&i| Settle::plain(i, infra))),
            }
        }
        let taken = || locks.iter().filter_map(|l| if let GroupLock::Taken(h) = l { Some(h.clone()) } else { None });
        let rows = match if reads.is_empty() { Ok(Vec::new()) } else { self.sql.batch(reads).await } {
            Ok(rows) => rows,
            Err(e) => {
                (self.log)(&format!("batch deferred, claims not recorded: {e}"));
                self.release_all(taken().map(|lock| LockEnd { lock, hold_for: None }).collect()).await;
                return vec![infra; msgs.len()];
            }
        };
        let row = |at: usize| rows.get(at).and_then(|r| Job::first(r).ok().flatten());

        // Held keys: every message put off, without an attempt, until the holder should be done.
        for (gi, g) in groups.iter().enumerate() {
            if !matches!(locks[gi], GroupLock::Held { .. }) {
                continue;
            }
            let holder = holder_at.get(&gi).and_then(|&at| row(at));
            let delay = self.held_delay(now, holder.as_ref());
            for &i in &g.members {
                let note = stmt::note_deferral(spec(i), now, now + i64::from(delay) * 1000);
                settled.push(Settle::recorded(i, note, Outcome::Defer { delay_seconds: delay }));
            }
        }

        // Run the groups: a key's members in order, groups concurrently.
        let verdict = |i: usize| -> Claim {
            let at = claim_at[&i];
            if let Some(job) = row(at) {
                return Claim::Won(Box::new(job));
            }
            match rows.get(at + 1).map(|r| Job::first(r)) {
                Some(Ok(Some(j))) if j.status.is_finished() => Claim::Finished,
                Some(Ok(Some(j))) if j.status == Status::Running => Claim::NotNow(until(now, j.lease_until)),
                Some(Ok(Some(j))) => Claim::NotNow(until(now, Some(j.next_run_at))),
                Some(Ok(None)) => Claim::Clash,
                _ => Claim::NotNow(INFRA_RETRY_DELAY_SECONDS),
            }
        };
        let renewed_at = Cell::new(now);
        let runs: Vec<GroupResult> = stream::iter(groups.iter().zip(&locks))
            .filter_map(|(g, l)| async move {
                let lock = match l {
                    GroupLock::Unkeyed => None,
                    GroupLock::Taken(h) => Some(h.clone()),
                    GroupLock::Held { .. } | GroupLock::Down => return None,
                };
                Some((g, lock))
            })
            .map(|(g, lock)| {
                let members: Vec<(usize, Claim)> = g.members.iter().map(|&i| (i, verdict(i))).collect();
                self.run_group(members, decoded, lock, &renewed_at)
            })
            .buffer_unordered(GROUP_CONCURRENCY)
            .collect()
            .await;
        let mut lock_ends = Vec::new();
        for run in runs {
            settled.extend(run.settled);
            lock_ends.extend(run.lock_end);
        }

        // One D1 round trip records every result; only recorded results are acked. Unrecorded
        // ones come back later and the ledger's lease decides.
        let mut records: Vec<Stmt> = Vec::new();
        let mut decided = Vec::with_capacity(settled.len());
        for s in settled {
            decided.push((s.index, s.outcome, s.record.is_some()));
            records.extend(s.record);
        }
        let recorded = match if records.is_empty() { Ok(Vec::new()) } else { self.sql.batch(records).await } {
            Ok(_) => true,
            Err(e) => {
                (self.log)(&format!("results not recorded, their messages are deferred: {e}"));
                false
            }
        };
        let mut outcomes = vec![infra; msgs.len()];
        for (index, outcome, needs_record) in decided {
            outcomes[index] = if recorded || !needs_record { outcome } else { infra };
        }
        if !recorded {
            lock_ends.iter_mut().for_each(|e| e.hold_for = None);
        }
        self.release_all(lock_ends).await;
        outcomes
    }

    /// How long messages of a held key wait. A key held by one of our jobs waiting for its retry
    /// stays held until that retry is due, so wait that long instead of spending deliveries
    /// polling; a key held by a running group (or by anyone else) is polled at the configured delay.
    fn held_delay(&self, now: i64, holder: Option<&Job>) -> u32 {
        let base = self.cfg.lock_retry_delay_seconds;
        match holder {
            Some(j) if j.status == Status::Pending => until(now, Some(j.next_run_at)).max(base),
            _ => base,
        }
    }

    async fn run_group(
        &self,
        members: Vec<(usize, Claim)>,
        decoded: &[Result<Decoded, String>],
        lock: Option<HeldLock>,
        renewed_at: &Cell<i64>,
    ) -> GroupResult {
        let keyed = lock.is_some();
        let mut settled = Vec::with_capacity(members.len());
        let mut stopped: Option<u32> = None; // the key is held: the rest wait this long
        let mut hold_for: Option<(String, u32)> = None;
        let mut lock_refreshed_at = self.clock.now_ms();
        for (i, claim) in members {
            let Ok(d) = &decoded[i] else { continue };
            let now = self.clock.now_ms();
            match claim {
                Claim::Finished => settled.push(Settle::plain(i, Outcome::Ack)),
                Claim::Clash => {
                    let why = format!(
                        "duplicate: dedupe_key {:?} belongs to another active job",
                        d.spec.dedupe_key.as_deref().unwrap_or_default()
                    );
                    settled.push(Settle::recorded(i, stmt::record_dead(&d.spec, now, &why), Outcome::Ack));
                }
                Claim::NotNow(delay) => {
                    if keyed {
                        stopped = Some(stopped.unwrap_or(0).max(delay));
                    }
                    settled.push(Settle::plain(i, Outcome::Defer { delay_seconds: delay }));
                }
                Claim::Won(job) => {
                    if let Some(delay) = stopped {
                        let at = now + i64::from(delay) * 1000;
                        settled.push(Settle::recorded(
                            i,
                            stmt::defer(&job.id, &self.owner, now, at),
                            Outcome::Defer { delay_seconds: delay },
                        ));
                        continue;
                    }
                    self.keep_alive(lock.as_ref(), &mut lock_refreshed_at, renewed_at).await;
                    let attempt = u32::try_from(job.attempts).unwrap_or(u32::MAX);
                    let result = self.runner.run(&JobContext { id: &job.id, attempt, payload: &d.payload }).await;
                    let now = self.clock.now_ms();
                    settled.push(match result {
                        Ok(()) => Settle::recorded(i, stmt::complete(&job.id, &self.owner, now), Outcome::Ack),
                        Err(e) => match decide_failure(job.attempts, job.max_attempts, &e, self.cfg, (self.random)()) {
                            FailureDecision::Dead(why) => Settle::recorded(
                                i,
                                stmt::fail(&job.id, &self.owner, now, Status::Dead, now, &why),
                                Outcome::Ack,
                            ),
                            FailureDecision::Retry { delay_seconds } => {
                                if keyed {
                                    // Hold the key: nothing behind this job may overtake it.
                                    stopped = Some(delay_seconds);
                                    hold_for = Some((job.id.clone(), delay_seconds));
                                }
                                let at = now + i64::from(delay_seconds) * 1000;
                                let fail = stmt::fail(&job.id, &self.owner, now, Status::Pending, at, &e.to_string());
                                Settle::recorded(i, fail, Outcome::Retry { delay_seconds })
                            }
                        },
                    });
                }
            }
        }
        // A held key outlives the retry, so the failed job finds it still held when it returns.
        let ttl = |delay: u32| delay.saturating_add(self.cfg.lock_ttl_seconds);
        let lock_end = lock.map(|lock| LockEnd { lock, hold_for: hold_for.map(|(job, delay)| (job, ttl(delay))) });
        GroupResult { settled, lock_end }
    }

    /// Keeps a long group's lock and the invocation's leases from expiring under it.
    async fn keep_alive(&self, lock: Option<&HeldLock>, lock_refreshed_at: &mut i64, renewed_at: &Cell<i64>) {
        let now = self.clock.now_ms();
        if let Some(l) = lock {
            if now - *lock_refreshed_at > i64::from(self.cfg.lock_ttl_seconds) * 500 {
                // Best-effort like the lock itself: a failed refresh leaves the TTL running.
                let _ = self.kv.put(&l.key, &l.token, self.cfg.lock_ttl_seconds).await;
                *lock_refreshed_at = now;
            }
        }
        let lease_ms = i64::from(self.cfg.lease_seconds) * 1000;
        if now - renewed_at.get() > lease_ms / 2 {
            renewed_at.set(now);
            if let Err(e) = self.sql.query(stmt::renew(&self.owner, now, now + lease_ms)).await {
                (self.log)(&format!("lease renewal failed, leases may expire under running jobs: {e}"));
            }
        }
    }

    async fn release_all(&self, ends: Vec<LockEnd>) {
        join_all(ends.into_iter().map(|e| async move {
            // Best-effort: a lock we fail to release or re-write expires with its TTL.
            let _ = match e.hold_for {
                None => lock::release(self.kv, &e.lock.key, &e.lock.token).await.map(|_| ()),
                Some((job_id, ttl)) => self.kv.put(&e.lock.key, &lock::owner_token(&job_id), ttl).await,
            };
        }))
        .await;
    }
}

/// Whole seconds from `now` until `at` (at least 1, at most the Queues maximum).
fn until(now: i64, at: Option<i64>) -> u32 {
    let ms = at.unwrap_or(now).saturating_sub(now).max(0);
    ((ms.saturating_add(999) / 1000).max(1) as u64).min(u64::from(MAX_DELAY_SECONDS)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(after: Option<u32>) -> JobError {
        JobError::Retryable { reason: "HTTP 503".into(), retry_after: after }
    }

    #[test]
    fn a_retryable_failure_backs_off_by_attempt() {
        let cfg = Config::default();
        assert_eq!(decide_failure(1, 8, &retry(None), &cfg, 1.0), FailureDecision::Retry { delay_seconds: 5 });
        assert_eq!(decide_failure(3, 8, &retry(None), &cfg, 1.0), FailureDecision::Retry { delay_seconds: 20 });
        assert_eq!(decide_failure(3, 8, &retry(None), &cfg, 0.0), FailureDecision::Retry { delay_seconds: 10 });
    }

    #[test]
    fn retry_after_overrides_the_backoff() {
        let cfg = Config::default();
        assert_eq!(decide_failure(1, 8, &retry(Some(120)), &cfg, 0.5), FailureDecision::Retry { delay_seconds: 120 });
    }

    #[test]
    fn the_last_attempt_and_permanent_errors_are_dead() {
        let cfg = Config::default();
        assert!(
            matches!(decide_failure(8, 8, &retry(None), &cfg, 0.5), FailureDecision::Dead(w) if w.contains("attempt 8 of 8"))
        );
        assert_eq!(
            decide_failure(1, 8, &JobError::permanent("HTTP 404"), &cfg, 0.5),
            FailureDecision::Dead("HTTP 404".into())
        );
    }

    #[test]
    fn until_rounds_up_and_stays_in_range() {
        assert_eq!(until(1000, Some(1001)), 1);
        assert_eq!(until(1000, Some(3500)), 3);
        assert_eq!(until(1000, Some(0)), 1);
        assert_eq!(until(0, Some(i64::MAX)), MAX_DELAY_SECONDS);
    }
}
