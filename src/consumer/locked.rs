//! Lock mode (design §3): group by key, take Fedify's best-effort KV lock per key group, claim the
//! group's jobs in one D1 round trip, run them in order (groups concurrently), record every result
//! in one more round trip, settle. Round trips per batch: two to D1; KV get+put per key group to
//! take the lock, get+delete to release it (all lock operations are `lock.rs`'s).

use crate::flow::PARKED_RECHECK_SECONDS;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use futures::future::join_all;
use futures::stream::{self, StreamExt};

use super::executor::RunEnd;
use super::leases::Leases;
use super::leftovers::Leftovers;
use super::message::{resent, undecodable_spec, Decoded, Incoming, Outcome, Read, INFRA_RETRY_DELAY_SECONDS};
use super::ports::Consumer;
use crate::bounds::{delay_until as until, EARLY_DELIVERY_ALLOWANCE_MS, GROUP_CONCURRENCY, INVOCATION_WALL_MS};
use crate::batch::{self, Item};
use crate::clock::Clock;
use crate::error::InfraError;
use crate::handlers::Runner;
use crate::ledger::{Claimed, JobRow, Lease, Record, Route, Sent, Sql, Status, Transition};
use crate::lock::{self, Acquired, Kv};
use crate::producer::{self, OutMessage, QueueSender};

/// How far a job polling a held key lets its `next_run_at` fall behind before it is written
/// again: half the grace after which maintenance re-sends a PENDING job as lost.
const DUE_SLACK_MS: i64 = crate::bounds::RESEND_GRACE_MS / 2;

/// How old a waiting message must be (since it was sent) before its wait is a new message rather
/// than a `retry()`. A message is retried for at most this long, so with waits of a second or
/// more it spends at most about 60 of Queues' `max_retries` deliveries (wrangler.toml sets 100)
/// however long its job waits in all. Younger messages are retried: a re-send costs two more
/// Queues operations than a retry, and every copy of a message (a duplicate delivery, a lost
/// ack) that is re-sent lives on, so re-sending every short wait would multiply copies.
pub const RESEND_WAITING_AFTER_MS: i64 = 60_000;

/// The claim's verdict on one message.
enum Claim {
    Won(Box<JobRow>),
    /// DONE or DEAD already: a duplicate delivery.
    Finished,
    /// Cannot run now (another live lease, or not yet due): defer this long.
    NotNow(u32),
    /// Its dedupe key is active in another job.
    Clash,
    /// Its ordering key is paused: recorded PENDING, acked; the key's resume sends it again.
    Paused,
}

/// A key's lock, taken for a group.
#[derive(Clone)]
struct HeldLock {
    key: String,
    token: String,
    /// When it was written (its TTL runs from then, also while the group waits for a slot).
    taken_at: i64,
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

/// One message's settlement: its outcome, and what the ledger must record before the outcome
/// may be applied. A transition guarded by our lease (complete, fail, defer) that changes no row
/// means our lease was lost: the outcome is not applied.
struct Settle {
    index: usize,
    record: Option<Record>,
    outcome: Outcome,
    /// The message waits (a snooze, a held key), spending no attempt: once its wait is recorded
    /// it comes back as a new message, not by `retry()` (see `Consumer::resent`).
    waits: bool,
}

impl Settle {
    fn plain(index: usize, outcome: Outcome) -> Self {
        Settle { index, record: None, outcome, waits: false }
    }
    fn recorded(index: usize, record: impl Into<Record>, outcome: Outcome) -> Self {
        Settle { record: Some(record.into()), ..Settle::plain(index, outcome) }
    }
    /// This settlement, for a message that waits.
    fn waiting(self) -> Self {
        Settle { waits: true, ..self }
    }
}

/// A group's run so far.
struct GroupRun {
    /// It has an ordering key (and its lock).
    keyed: bool,
    settled: Vec<Settle>,
    /// What its runs leave for the batch's end.
    left: Leftovers,
    /// The key is held for a job that waits: the rest wait this long.
    stopped: Option<u32>,
    /// The job the key is held in the name of, and for how long.
    hold_for: Option<(String, u32)>,
}

/// What running one group produced.
struct GroupResult {
    settled: Vec<Settle>,
    lock_end: Option<LockEnd>,
    left: Leftovers,
}

/// A planned message: its batch position, and what was read from it (only messages that were
/// read are planned).
type Planned<'a> = (usize, &'a Decoded);

/// A batch's plan: what is settled already (unreadable bodies, repeats within the batch), and
/// the key groups to run.
struct Plan<'a> {
    settled: Vec<Settle>,
    groups: Vec<batch::Group<'a, Planned<'a>>>,
}

/// A group's job ids, in run order.
fn job_ids<'a>(g: &batch::Group<'a, Planned<'a>>) -> Vec<&'a str> {
    g.members.iter().map(|(_, d)| d.spec.id.as_str()).collect()
}

impl<K: Kv, S: Sql, R: Runner, C: Clock, Q: QueueSender> Consumer<'_, K, S, R, C, Q> {
    /// Lock mode's batch (design §3), in four phases: lock each key group, claim every runnable
    /// message (one D1 round trip), run the groups, settle (one D1 round trip records every
    /// result, then locks are released or held for a failed job). Returns an outcome per message,
    /// and what the runs left for the batch's end.
    pub(super) async fn run_locked(&self, msgs: &[Incoming], decoded: &[Read]) -> (Vec<Outcome>, Leftovers) {
        let now = self.clock.now_ms();
        let infra = Outcome::Defer { delay_seconds: INFRA_RETRY_DELAY_SECONDS };
        let mut plan = self.plan(msgs, decoded, now);
        let (locks, holders) = self.lock_groups(&mut plan).await;
        let claims = match self.claim_groups(&mut plan, &locks, &holders, now).await {
            Ok(claims) => claims,
            Err(e) => {
                self.outage(format!("batch deferred, claims not recorded: {e}"));
                let taken =
                    locks.iter().filter_map(|l| if let GroupLock::Taken(h) = l { Some(h.clone()) } else { None });
                self.release_all(taken.map(|lock| LockEnd { lock, hold_for: None }).collect()).await;
                return (vec![infra; msgs.len()], Leftovers::default());
            }
        };
        let (lock_ends, mut left) = self.run_groups(&mut plan, &locks, claims, now).await;
        let outcomes = self.settle(plan.settled, lock_ends, (msgs, decoded), &mut left).await;
        (outcomes, left)
    }

    /// Plans a batch: unreadable bodies are recorded DEAD; a job delivered twice in one batch runs
    /// once (the later copy comes back and finds it finished); the rest are grouped by key.
    fn plan<'a>(&self, msgs: &[Incoming], decoded: &'a [Read], now: i64) -> Plan<'a> {
        let mut settled = Vec::with_capacity(msgs.len());
        let mut seen: HashSet<&str> = HashSet::new();
        let mut items = Vec::new();
        for (i, d) in decoded.iter().enumerate() {
            match d {
                Err(reason) => {
                    let dead = Transition::RecordDead {
                        spec: undecodable_spec(&msgs[i], self.cfg),
                        at: now,
                        error: reason.to_string(),
                    };
                    settled.push(Settle::recorded(i, dead, Outcome::Ack));
                }
                Ok(d) if !seen.insert(d.spec.id.as_str()) => {
                    settled.push(Settle::plain(i, Outcome::Defer { delay_seconds: self.cfg.lock_retry_delay_seconds }));
                }
                Ok(d) => items.push(Item {
                    member: (i, d),
                    timestamp_ms: d.queued_at,
                    key: d.spec.ordering_key.as_deref(),
                    priority: d.spec.priority,
                }),
            }
        }
        Plan { settled, groups: batch::plan(&items) }
    }

    /// Phase 1: one lock per key group, taken concurrently; then held keys' holders are read (a
    /// lock whose holder is finished is taken over, so no job waits on it until Queues'
    /// delivery attempts run out). A group whose lock named one of its jobs runs that job first.
    /// Returns each group's lock and, per held group, its holder.
    async fn lock_groups(&self, plan: &mut Plan<'_>) -> (Vec<GroupLock>, HashMap<usize, JobRow>) {
        let locks: Vec<GroupLock> = join_all(plan.groups.iter().map(|g| async {
            let Some(key) = g.key else { return GroupLock::Unkeyed };
            let key = lock::lock_key(&self.cfg.ordering_key_prefix, key);
            let got = lock::acquire(self.kv, &key, &job_ids(g), self.cfg.lock_ttl_seconds).await;
            self.group_lock(key, got)
        }))
        .await;
        let (locks, holders) = self.take_over_stale(plan, locks).await;
        for (gi, l) in locks.iter().enumerate() {
            let GroupLock::Taken(h) = l else { continue };
            let Some(job) = lock::token_job(&h.token) else { continue };
            let g = &plan.groups[gi];
            if let Some(at) = g.members.iter().position(|(_, d)| d.spec.id == job) {
                plan.groups[gi].members[..=at].rotate_right(1);
            }
        }
        (locks, holders)
    }

    /// A group's lock from what taking it answered (a KV failure is logged: the group waits).
    fn group_lock(&self, key: String, got: Result<Acquired, InfraError>) -> GroupLock {
        match got {
            Ok(Acquired::Taken { token }) => GroupLock::Taken(HeldLock { key, token, taken_at: self.clock.now_ms() }),
            Ok(Acquired::Held { holder }) => GroupLock::Held { holder },
            Err(e) => {
                self.outage(format!("key {key:?} deferred: {e}"));
                GroupLock::Down
            }
        }
    }

    /// Phase 2: one D1 round trip claims every message of an unkeyed or locked group and says
    /// why each refused claim was refused. A held group's messages are put off, without an
    /// attempt, until their holder should be done; a group whose lock could not be read waits
    /// for the outage. Returns each claimed message's verdict by batch position.
    async fn claim_groups(
        &self,
        plan: &mut Plan<'_>,
        locks: &[GroupLock],
        holders: &HashMap<usize, JobRow>,
        now: i64,
    ) -> Result<HashMap<usize, Claim>, InfraError> {
        let mut positions = Vec::new();
        for (gi, (g, l)) in plan.groups.iter().zip(locks).enumerate() {
            match l {
                GroupLock::Unkeyed | GroupLock::Taken(_) => positions.extend(g.members.iter().copied()),
                GroupLock::Held { .. } => {
                    let delay = self.held_delay(now, holders.get(&gi));
                    for &(i, d) in &g.members {
                        let due = now + i64::from(delay) * 1000;
                        let spec = d.spec.clone();
                        let note = Transition::NoteDeferral { spec, at: now, next_run_at: due, slack_ms: DUE_SLACK_MS };
                        plan.settled.push(Settle::recorded(i, note, Outcome::Defer { delay_seconds: delay }).waiting());
                    }
                }
                GroupLock::Down => plan.settled.extend(
                    g.members
                        .iter()
                        .map(|&(i, _)| Settle::plain(i, Outcome::Defer { delay_seconds: INFRA_RETRY_DELAY_SECONDS })),
                ),
            }
        }
        let lease = Lease {
            now,
            until: now + i64::from(self.cfg.lease_seconds) * 1000,
            due_before: now + EARLY_DELIVERY_ALLOWANCE_MS,
        };
        let specs: Vec<Sent<'_>> = positions.iter().map(|&(_, d)| (&d.spec, d.queued_at)).collect();
        let verdicts = self.ledger.claim_all(&specs, &self.owner, lease).await?;
        let mut unavailable = None;
        let claims = positions
            .into_iter()
            .zip(verdicts)
            .map(|((i, _), v)| {
                let claim = match v {
                    Claimed::Won(job) => Claim::Won(job),
                    Claimed::Finished => Claim::Finished,
                    Claimed::Running(until_ms) => Claim::NotNow(until(now, until_ms)),
                    Claimed::NotDue(at) => Claim::NotNow(until(now, Some(at))),
                    Claimed::Clash => Claim::Clash,
                    Claimed::Paused => Claim::Paused,
                    // Its ledger shard is down: the message comes back; the other shards' run.
                    Claimed::Unavailable(e) => {
                        unavailable.get_or_insert(e);
                        Claim::NotNow(INFRA_RETRY_DELAY_SECONDS)
                    }
                };
                (i, claim)
            })
            .collect();
        if let Some(e) = unavailable {
            self.outage(format!("messages of an unavailable ledger shard deferred: {e}"));
        }
        Ok(claims)
    }

    /// Phase 3: runs the claimed groups, a key's members in order, groups concurrently; each
    /// message's settlement joins the plan. Returns how each taken lock ends, and what the runs
    /// left for the batch's end.
    async fn run_groups(
        &self,
        plan: &mut Plan<'_>,
        locks: &[GroupLock],
        mut claims: HashMap<usize, Claim>,
        now: i64,
    ) -> (Vec<LockEnd>, Leftovers) {
        let leases =
            Leases::new(now, claims.values().filter_map(|c| if let Claim::Won(job) = c { Some(&**job) } else { None }));
        // No job starts unless it can finish, and its result be recorded, within the invocation's
        // wall-clock limit: past it the runtime kills the invocation and every result unrecorded.
        let deadline = now + INVOCATION_WALL_MS - i64::from(self.cfg.webhook_timeout_seconds) * 1000 - 60_000;
        // Every lock this batch holds, with when it was last written: kept alive together, so a
        // group waiting for a slot does not lose its key before it starts.
        let held: RefCell<Vec<(HeldLock, i64)>> = RefCell::new(
            locks
                .iter()
                .filter_map(|l| if let GroupLock::Taken(h) = l { Some((h.clone(), h.taken_at)) } else { None })
                .collect(),
        );
        let mut work = Vec::new();
        // The woken jobs that do not start at once give back the slots handed to them, first:
        // held while a job before them runs (a handler may run for minutes) or their key's lock is
        // held, the hand-offs lapsed with the line waiting for them (the simulation's line check
        // found it).
        let mut waiting = Vec::new();
        for (g, l) in plan.groups.iter().zip(locks) {
            let lock = match l {
                GroupLock::Unkeyed => None,
                GroupLock::Taken(h) => Some(h.clone()),
                GroupLock::Held { .. } | GroupLock::Down => {
                    waiting.extend(g.members.iter().filter_map(|(_, d)| d.handed_slot()));
                    continue;
                }
            };
            let members: Vec<(Planned<'_>, Claim)> =
                g.members.iter().filter_map(|&(i, d)| claims.remove(&i).map(|c| ((i, d), c))).collect();
            // Only the first member of the groups that start at once starts now (the rest of the
            // groups start as those end), and only if it was claimed.
            for (place, ((_, d), claim)) in members.iter().enumerate() {
                let starts = work.len() < GROUP_CONCURRENCY && place == 0 && matches!(claim, Claim::Won(_));
                if !starts {
                    waiting.extend(d.handed_slot());
                }
            }
            work.push((members, lock));
        }
        let mut left = Leftovers::default();
        self.give_back(&waiting, &mut left).await;
        let runs: Vec<GroupResult> = stream::iter(work)
            .map(|(members, lock)| self.run_group(members, lock, &leases, &held, deadline))
            .buffer_unordered(GROUP_CONCURRENCY)
            .collect()
            .await;
        let mut lock_ends = Vec::new();
        for run in runs {
            plan.settled.extend(run.settled);
            lock_ends.extend(run.lock_end);
            left.gather(run.left);
        }
        (lock_ends, left)
    }

    /// Phase 4: one D1 round trip records every result; only recorded results are acked.
    /// Unrecorded ones come back later and the ledger's lease decides. A guarded transition that
    /// changes no row means our lease was lost (the reaper or another invocation has the job):
    /// its outcome is not applied; the message comes back shortly and the ledger decides (DONE:
    /// acked; PENDING: run again; RUNNING elsewhere: deferred). Then the locks end: released, or
    /// held in the name of a failure that was recorded.
    async fn settle(
        &self,
        settled: Vec<Settle>,
        mut lock_ends: Vec<LockEnd>,
        (msgs, decoded): (&[Incoming], &[Read]),
        left: &mut Leftovers,
    ) -> Vec<Outcome> {
        let n = msgs.len();
        let infra = Outcome::Defer { delay_seconds: INFRA_RETRY_DELAY_SECONDS };
        let mut records = Vec::new();
        let mut decided = Vec::with_capacity(settled.len());
        let mut waiting = Vec::new();
        for s in settled {
            let at = s.record.as_ref().map(|_| records.len());
            if s.waits {
                waiting.push(s.index);
            }
            let guarded = s.record.as_ref().and_then(|r| r.transition.guarded_job()).map(str::to_string);
            decided.push((s.index, s.outcome, at, guarded));
            records.extend(s.record);
        }
        let applied = match self.record_all(&records, left).await {
            Ok(applied) => Some(applied),
            Err(e) => {
                self.outage(format!("results not recorded, their messages are deferred: {e}"));
                None
            }
        };
        let lost = Outcome::Defer { delay_seconds: self.cfg.lock_retry_delay_seconds.max(1) };
        let mut outcomes = vec![infra; n];
        let mut lost_jobs = HashSet::new();
        for (index, outcome, record_at, guarded) in decided {
            outcomes[index] = match (&applied, record_at, guarded) {
                (_, None, _) => outcome,
                (None, Some(_), _) => infra,
                (Some(applied), Some(at), Some(job)) if !applied.get(at).copied().unwrap_or(false) => {
                    self.outage(format!("job {job:?}: lease lost before its result was recorded; not acked"));
                    lost_jobs.insert(job);
                    lost
                }
                (Some(_), Some(_), _) => outcome,
            };
        }
        for e in &mut lock_ends {
            // A hold is written only in the name of a failure that was recorded.
            if applied.is_none() || e.hold_for.as_ref().is_some_and(|(job, _)| lost_jobs.contains(job)) {
                e.hold_for = None;
            }
        }
        self.release_all(lock_ends).await;
        if applied.is_some() {
            self.resend_waiting(&mut outcomes, &waiting, msgs, decoded).await;
        }
        outcomes
    }

    /// Sends each waiting message older than [`RESEND_WAITING_AFTER_MS`] again with its delay and
    /// acks the old one (a batch that cannot be sent leaves its messages to `retry()`). Only waits
    /// already recorded come here.
    async fn resend_waiting(&self, outcomes: &mut [Outcome], waiting: &[usize], msgs: &[Incoming], decoded: &[Read]) {
        let now = self.clock.now_ms();
        let mut sends: Vec<(usize, OutMessage)> = Vec::new();
        for &i in waiting {
            if now - msgs[i].timestamp_ms < RESEND_WAITING_AFTER_MS {
                continue;
            }
            let (Outcome::Defer { delay_seconds }, Ok(d)) = (outcomes[i], &decoded[i]) else { continue };
            if let Some(msg) = resent(&msgs[i], d, delay_seconds) {
                sends.push((i, msg));
            }
        }
        let (at, out): (Vec<usize>, Vec<OutMessage>) = sends.into_iter().unzip();
        let mut next = 0;
        for batch in producer::split(out) {
            let sent = at[next..next + batch.len()].to_vec();
            next += batch.len();
            match self.queue.send_batch(&batch).await {
                Ok(()) => sent.into_iter().for_each(|i| outcomes[i] = Outcome::Ack),
                Err(e) => self.outage(format!("{} waiting messages not sent again, retried instead: {e}", batch.len())),
            }
        }
    }

    /// Reads the holders of held keys (one D1 round trip, only when a key is held) and takes over
    /// each lock whose holder the ledger says is finished. Returns the locks as they now stand
    /// and, per still-held group, its holder's row. A failed read leaves the keys held.
    async fn take_over_stale(
        &self,
        plan: &Plan<'_>,
        mut locks: Vec<GroupLock>,
    ) -> (Vec<GroupLock>, HashMap<usize, JobRow>) {
        let groups = &plan.groups;
        // A holder is a job of the held key: it lives in the key's shard.
        let held: Vec<(usize, (&str, Route))> = locks
            .iter()
            .enumerate()
            .filter_map(|(gi, l)| match (l, groups[gi].key) {
                (GroupLock::Held { holder }, Some(key)) => {
                    lock::token_job(holder).map(|job| (gi, (job, Route::key(key))))
                }
                _ => None,
            })
            .collect();
        let mut holders = HashMap::new();
        if held.is_empty() {
            return (locks, holders);
        }
        let ids: Vec<(&str, Route)> = held.iter().map(|(_, job)| *job).collect();
        let rows = match self.ledger.get_routed(&ids).await {
            Ok(rows) => rows,
            Err(e) => {
                self.outage(format!("holders of held keys not read, their messages wait: {e}"));
                return (locks, holders);
            }
        };
        let finished: Vec<(usize, JobRow)> =
            held.iter().zip(rows).filter_map(|((gi, _), j)| j.map(|j| (*gi, j))).collect();
        for (gi, holder) in finished {
            if !holder.status.is_finished() {
                holders.insert(gi, holder);
                continue;
            }
            let (Some(key), GroupLock::Held { holder: stale }) = (groups[gi].key, &locks[gi]) else { continue };
            let key = lock::lock_key(&self.cfg.ordering_key_prefix, key);
            let got = lock::take_over(self.kv, &key, stale, &job_ids(&groups[gi]), self.cfg.lock_ttl_seconds).await;
            locks[gi] = self.group_lock(key, got);
        }
        (locks, holders)
    }

    /// How long messages of a held key wait. A key held by one of our jobs waiting for its retry
    /// stays held until that retry is due, so wait that long instead of spending deliveries
    /// polling; a key held by a running group (or by anyone else) is polled at the configured delay.
    /// A holder parked in its limit key's line (design §20) is due, but runs only once a slot
    /// frees: the longer it has waited, the longer the jobs behind it wait between looks (its
    /// time parked so far, up to [`PARKED_POLL_MAX_SECONDS`]), so a long wait costs few deliveries.
    fn held_delay(&self, now: i64, holder: Option<&JobRow>) -> u32 {
        let base = self.cfg.lock_retry_delay_seconds;
        match holder {
            Some(j) if j.status == Status::Pending && j.limit_key.is_some() && j.next_run_at <= now => {
                let parked_for = u32::try_from((now - j.updated_at).max(0) / 1000).unwrap_or(u32::MAX);
                parked_for.clamp(base, PARKED_RECHECK_SECONDS.max(base))
            }
            Some(j) if j.status == Status::Pending => until(now, Some(j.next_run_at)).max(base),
            _ => base,
        }
    }

    /// Runs one key group's claimed messages in order (an unkeyed group has no lock): each one's
    /// settlement, and how the group's lock ends.
    async fn run_group(
        &self,
        members: Vec<(Planned<'_>, Claim)>,
        lock: Option<HeldLock>,
        leases: &Leases,
        held: &RefCell<Vec<(HeldLock, i64)>>,
        deadline: i64,
    ) -> GroupResult {
        let mut g = GroupRun {
            keyed: lock.is_some(),
            settled: Vec::with_capacity(members.len()),
            left: Leftovers::default(),
            stopped: None,
            hold_for: None,
        };
        for ((i, d), claim) in members {
            let now = self.clock.now_ms();
            match claim {
                Claim::Finished | Claim::Paused => g.settled.push(Settle::plain(i, Outcome::Ack)),
                Claim::Clash => {
                    let why = format!(
                        "duplicate: dedupe_key {:?} belongs to another active job",
                        d.spec.dedupe_key.as_deref().unwrap_or_default()
                    );
                    let dead = Transition::RecordDead { spec: d.spec.clone(), at: now, error: why };
                    g.settled.push(Settle::recorded(i, dead, Outcome::Ack));
                }
                Claim::NotNow(delay) => {
                    if g.keyed {
                        g.stopped = Some(g.stopped.unwrap_or(0).max(delay));
                        // The job waits for its retry (or runs elsewhere): the key stays held in
                        // its name, so nothing behind it overtakes it when this group releases.
                        g.hold_for.get_or_insert_with(|| (d.spec.id.clone(), delay));
                    }
                    g.settled.push(Settle::plain(i, Outcome::Defer { delay_seconds: delay }));
                }
                Claim::Won(job) => self.run_won(i, &job, &mut g, leases, held, deadline).await,
            }
        }
        // A held key outlives the retry, so the failed job finds it still held when it returns.
        let ttl = |delay: u32| delay.saturating_add(self.cfg.lock_ttl_seconds);
        let lock_end = lock.map(|lock| LockEnd { lock, hold_for: g.hold_for.map(|(job, delay)| (job, ttl(delay))) });
        GroupResult { settled: g.settled, lock_end, left: g.left }
    }

    /// A job of the group this invocation claimed: run, unless the key is held for a job before it
    /// that waits (or time is up), or its lease was lost while the group stalled.
    async fn run_won(
        &self,
        i: usize,
        job: &JobRow,
        g: &mut GroupRun,
        leases: &Leases,
        held: &RefCell<Vec<(HeldLock, i64)>>,
        deadline: i64,
    ) {
        let now = self.clock.now_ms();
        if g.stopped.is_none() && now >= deadline {
            // Out of time: this job and the rest come back shortly, still in order.
            g.stopped = Some(1);
            if g.keyed {
                g.hold_for.get_or_insert_with(|| (job.id.clone(), 1));
            }
        }
        if let Some(delay) = g.stopped {
            let at = now + i64::from(delay) * 1000;
            let defer = self.defer(job, now, at);
            let settle = Settle::recorded(i, defer, Outcome::Defer { delay_seconds: delay });
            // Behind a job of its key that waits: it waits as long.
            g.settled.push(if g.keyed { settle.waiting() } else { settle });
            return;
        }
        self.keep_alive(held, leases).await;
        let fresh_ms = self.cfg.refresh_after_ms(self.cfg.lease_seconds);
        if leases.lost(&job.id, self.clock.now_ms(), fresh_ms) {
            // Stalled past the lease: the job may be another invocation's now. Not run here; the
            // message comes back and the ledger decides.
            self.outage(format!("job {:?}: lease lost before it started; not run", job.id));
            let delay_seconds = self.cfg.lock_retry_delay_seconds.max(1);
            g.settled.push(Settle::plain(i, Outcome::Defer { delay_seconds }));
            return;
        }
        let ran = self.run_claimed(job, leases.start_by(fresh_ms), &mut g.left).await;
        if let RunEnd::LeaseLost = ran.end {
            // As above: the message comes back and the ledger decides (the hand-back applies only
            // while the lease is still ours).
            let delay_seconds = self.cfg.lock_retry_delay_seconds.max(1);
            g.settled.push(Settle::recorded(i, ran.record, Outcome::Defer { delay_seconds }));
            return;
        }
        if let (true, Some(delay_seconds)) = (g.keyed, ran.end.again_after()) {
            // Hold the key: nothing behind this job may overtake it.
            g.stopped = Some(delay_seconds);
            g.hold_for = Some((job.id.clone(), delay_seconds));
        }
        if let RunEnd::Cancelled { recorded: true } = ran.end {
            // Recorded already, its lease given up at once (design §22.1).
            g.settled.push(Settle::plain(i, Outcome::Ack));
            return;
        }
        let (outcome, waits) = match ran.end {
            RunEnd::Done | RunEnd::Dead | RunEnd::Cancelled { .. } | RunEnd::LeaseLost => (Outcome::Ack, false),
            RunEnd::Retry { delay_seconds } => (Outcome::Retry { delay_seconds }, false),
            // Not a failed attempt: the message is put off like a busy key's.
            RunEnd::Snooze { delay_seconds } => (Outcome::Defer { delay_seconds }, true),
            // Parked in its limit key's line: a freed slot sends it again.
            RunEnd::Limited(w) if w.parked => (Outcome::Ack, false),
            RunEnd::Limited(w) => (Outcome::Defer { delay_seconds: w.delay_seconds }, true),
        };
        let settle = Settle::recorded(i, ran.record, outcome);
        g.settled.push(if waits { settle.waiting() } else { settle });
    }

    /// Before each job: keeps every lock of the batch and the invocation's leases alive for at
    /// least one more handler run (the longest a webhook may take, plus a margin).
    async fn keep_alive(&self, held: &RefCell<Vec<(HeldLock, i64)>>, leases: &Leases) {
        let now = self.clock.now_ms();
        let due: Vec<HeldLock> = held
            .borrow_mut()
            .iter_mut()
            .filter(|(_, at)| now - *at > self.cfg.refresh_after_ms(self.cfg.lock_ttl_seconds))
            .map(|(l, at)| {
                *at = now;
                l.clone()
            })
            .collect();
        // Best-effort like the lock itself: a failed refresh leaves the TTL running.
        join_all(due.iter().map(|l| lock::refresh(self.kv, &l.key, &l.token, self.cfg.lock_ttl_seconds))).await;
        self.renew_leases(leases).await;
    }

    async fn release_all(&self, ends: Vec<LockEnd>) {
        join_all(ends.into_iter().map(|e| async move {
            // Best-effort: a lock we fail to release or re-write expires with its TTL.
            let _ = match e.hold_for {
                None => lock::release(self.kv, &e.lock.key, &e.lock.token).await.map(|_| ()),
                Some((job_id, ttl)) => lock::hold(self.kv, &e.lock.key, &job_id, ttl).await,
            };
        }))
        .await;
    }
}
