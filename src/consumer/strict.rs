//! Strict mode (design §3b): the ledger, not a lock, decides each key's order, at any number of
//! concurrent invocations.
//!
//! 1. Park: every keyed message's job is recorded (new jobs take their key's next `seq`, in send
//!    order) and, in the same D1 transaction, the next due jobs of as many keys as run at once are
//!    claimed under the run rule (`ledger/sql/claim_next.sql`, `Ledger::park_and_claim`);
//!    the batch's other keys are claimed as chains finish, unless another invocation has them.
//! 2. Settle: a recorded message is acked, whether or not its job runs now: whoever runs the key
//!    chains to it. The one exception is a message whose own job is its key's head and not yet
//!    due (an early wake-up): it is deferred until due, so the key keeps its wake-up.
//! 3. Chain: for each key we claimed, run the claimed jobs in order (payloads from the ledger),
//!    then record them and claim the next ones in one round trip (16 at first, doubling to 50;
//!    one at a time for jobs with a limit key, whose limit key decides each start; each claim set
//!    aside from the invocation's run budget before its round trip), until the key has
//!    nothing due or the run budget is spent. A failure keeps the head: the chain stops and one wake-up
//!    message is sent for the retry time. A DEAD head lets the key move on under `ON_DEAD = skip`
//!    and stops it under `block`. A key left with due jobs gets one wake-up message. An invocation
//!    that stalled past its lease runs nothing more: the reaper has given its jobs back.

use std::cell::Cell;

use futures::stream::{self, StreamExt};

use super::executor::RunEnd;
use super::leases::Leases;
use super::leftovers::Leftovers;
use super::message::{Decoded, Outcome, INFRA_RETRY_DELAY_SECONDS};
use super::ports::Consumer;
use crate::bounds::{delay_until as until, EARLY_DELIVERY_ALLOWANCE_MS, GROUP_CONCURRENCY, INVOCATION_WALL_MS};
use crate::batch::{self, Item};
use crate::clock::Clock;
use crate::config::OnDead;
use crate::handlers::Runner;
use crate::ledger::strict::{ClaimSpec, Intake, KeyIntake, KeyState, Parked};
use crate::ledger::{JobRow, JobSpec, Lease, Record, Route, Sql, Status, Transition};
use crate::lock::Kv;
use crate::producer::{self, OutMessage, QueueSender};

/// Most jobs of one key claimed in one round trip: more means fewer D1 round trips per job (50:
/// 0.03 per job on a hot key, against 0.05 at 25, `npm run bench`), and
/// more jobs to hand back (or for the reaper to free) when a chain stops early.
pub const CHAIN_CHUNK: u32 = 50;
/// A chain's first claim; each next one doubles, up to [`CHAIN_CHUNK`]. A failure stops the chain
/// and hands back the rest of its chunk (each a row written twice: put back, claimed again), so
/// a key that fails often hands back little, and one that does not reaches whole chunks within a
/// few round trips.
pub const FIRST_CHUNK: u32 = 16;

/// A chain's next claim after `chunk`: doubling, up to [`CHAIN_CHUNK`]; one at a time for jobs that
/// name a limit key (design §20): their limit key, not the chain, decides when each starts, and
/// jobs claimed ahead of a refusal are only handed back.
fn next_chunk(chunk: u32, limited: bool) -> u32 {
    if limited {
        1
    } else {
        chunk.saturating_mul(2).min(CHAIN_CHUNK)
    }
}

/// A keyed message of the batch.
pub(super) struct Member {
    /// Position in the batch.
    pub index: usize,
    /// Send time, ms.
    pub timestamp_ms: i64,
    /// What it asks for.
    pub decoded: Decoded,
}

/// Why a chain stopped with work left for later.
enum Stop {
    /// A retryable failure (or a snooze) holds the key until this job runs again.
    Retry(Box<JobRow>, u32),
    /// Its limit key put it off for a time (the throttle's next start, a breaker's cool-down):
    /// the key waits for it, and its message is a wake-up (see `Consumer::give_back`).
    PutOff(Box<JobRow>, u32),
    /// A DEAD head under `ON_DEAD = block`: an operator decides.
    Blocked,
    /// The invocation's run or time budget is spent.
    Budget,
    /// The invocation stalled past its lease: the reaper has the key's jobs.
    LeaseLost,
    /// The key's next job waits in its limit key's line (design §20): a freed slot wakes it.
    Parked,
}

/// How a key's chain starts.
#[derive(Clone)]
enum Start {
    /// With these jobs, claimed while parking.
    Claimed(Vec<JobRow>),
    /// By claiming when a slot frees; the key's head as parking saw it.
    Later(Box<JobRow>),
}

/// What parking a batch's keyed messages said (see `Consumer::intook`).
struct Intook<'k> {
    /// Each parked message's outcome, by batch position.
    outcomes: Vec<(usize, Outcome)>,
    /// Messages whose dedupe key is active in another job: recorded DEAD.
    clashes: Vec<(usize, Record)>,
    /// Per key group, how its chain starts, if it runs here.
    chains: Vec<Option<(&'k str, Start)>>,
    /// Jobs claimed while parking.
    claimed_first: usize,
    /// Messages whose key's shard did not answer (deferred).
    unavailable: usize,
}

/// What one invocation may still spend on chains.
struct Budget {
    runs: Cell<u32>,
    /// Runs not yet claimed. Claims never take more, so no claimed job is handed back for want of
    /// budget (each hand-back is a row written twice: put back, claimed again).
    unclaimed: Cell<u32>,
    deadline_ms: i64,
}

impl Budget {
    /// Sets aside up to `most` unclaimed runs for one claim, before its round trip (chains claim
    /// concurrently: each must see what the others have set aside); 0 when none are left.
    fn take(&self, most: u32) -> u32 {
        let n = most.min(self.unclaimed.get());
        self.unclaimed.set(self.unclaimed.get() - n);
        n
    }

    /// A claim that set aside `took` runs got `got` jobs: the rest are unclaimed again.
    fn settle(&self, took: u32, got: usize) {
        let got = u32::try_from(got).unwrap_or(u32::MAX);
        let left = self.unclaimed.get().saturating_add(took).saturating_sub(got);
        self.unclaimed.set(left);
    }
}

impl<K: Kv, S: Sql, R: Runner, C: Clock, Q: QueueSender> Consumer<'_, K, S, R, C, Q> {
    /// Strict mode for a batch's keyed messages: an outcome per member's batch position, and what
    /// the runs left for the batch's end.
    pub(super) async fn run_strict(&self, members: Vec<Member>) -> (Vec<(usize, Outcome)>, Leftovers) {
        if members.is_empty() {
            return (Vec::new(), Leftovers::default());
        }
        let now = self.clock.now_ms();
        let infra = Outcome::Defer { delay_seconds: INFRA_RETRY_DELAY_SECONDS };
        let items: Vec<Item> = members
            .iter()
            .enumerate()
            .map(|(pos, m)| Item {
                member: pos,
                timestamp_ms: m.timestamp_ms,
                key: m.decoded.spec.ordering_key.as_deref(),
                priority: m.decoded.spec.priority,
            })
            .collect();
        let groups = batch::plan(&items);
        let (order, first_wave) = self.key_order(&groups);
        let budget = Budget {
            runs: Cell::new(self.cfg.strict_run_budget),
            unclaimed: Cell::new(self.cfg.strict_run_budget),
            // Leave room for one more handler run and the final round trips.
            deadline_ms: now + INVOCATION_WALL_MS - i64::from(self.cfg.webhook_timeout_seconds) * 1000 - 60_000,
        };
        // The first wave's keys share the budget: each claims at most its share.
        let first = u32::try_from(first_wave.iter().filter(|&&c| c).count()).unwrap_or(u32::MAX).max(1);
        let share = (budget.unclaimed.get() / first).clamp(1, FIRST_CHUNK);
        let intake: Vec<Intake> = groups
            .iter()
            .zip(&first_wave)
            .map(|(g, &first)| {
                let jobs: Vec<&JobSpec> = g.members.iter().map(|&p| &members[p].decoded.spec).collect();
                let claim = match first {
                    false => 0,
                    true if jobs.iter().any(|j| j.limit_key.is_some()) => 1,
                    true => share,
                };
                let woken = g
                    .members
                    .iter()
                    .filter(|&&p| members[p].decoded.woken)
                    .map(|&p| members[p].decoded.spec.id.as_str())
                    .collect();
                Intake { key: g.key.unwrap_or_default(), jobs, claim, woken }
            })
            .collect();
        let took = budget.take(share.saturating_mul(first));
        let claim = self.claim_spec(now, share);
        let parked = match self.ledger.park_and_claim(&intake, claim).await {
            Ok(p) => p,
            Err(e) => {
                self.outage(format!("keyed messages deferred, not parked: {e}"));
                return (members.iter().map(|m| (m.index, infra)).collect(), Leftovers::default());
            }
        };
        let mut intook = self.intook(&groups, &intake, parked, &members, now);
        if intook.unavailable > 0 {
            self.outage(format!("{} keyed messages of an unavailable ledger shard deferred", intook.unavailable));
        }
        budget.settle(took, intook.claimed_first);
        let mut left = self.run_chains(intook.chains, order, &budget, now).await;
        if !intook.clashes.is_empty() {
            let (at, records): (Vec<usize>, Vec<Record>) = intook.clashes.into_iter().unzip();
            let recorded = self.record_all(&records, &mut left).await.is_ok();
            intook.outcomes.extend(at.into_iter().map(|i| (i, if recorded { Outcome::Ack } else { infra })));
        }
        (intook.outcomes, left)
    }

    /// The order a batch's keys are started in, and which start at once (claimed while parking).
    /// Keys in a random order, and only as many claimed at once as run at once: concurrent
    /// invocations with the same keys in their batches then start different keys, and each claims
    /// the rest of its keys as its chains finish (unless another invocation has by then).
    fn key_order(&self, groups: &[batch::Group<'_>]) -> (Vec<usize>, Vec<bool>) {
        let mut order: Vec<usize> = (0..groups.len()).collect();
        for i in (1..order.len()).rev() {
            let j = (((self.random)() * (i + 1) as f64) as usize).min(i);
            order.swap(i, j);
        }
        // The most urgent keys first (design §12); random among equals.
        order.sort_by_key(|&g| groups[g].priority);
        let mut first_wave = vec![false; groups.len()];
        for &g in order.iter().take(GROUP_CONCURRENCY) {
            first_wave[g] = true;
        }
        (order, first_wave)
    }

    /// What parking said, per key: each parked message's outcome, the dedupe clashes to record
    /// DEAD, and how each key's chain starts (claimed already, or to claim when a slot frees).
    fn intook<'k>(
        &self,
        groups: &[batch::Group<'_>],
        intake: &[Intake<'k>],
        parked: Vec<KeyIntake>,
        members: &[Member],
        now: i64,
    ) -> Intook<'k> {
        let mut out = Intook {
            outcomes: Vec::with_capacity(members.len()),
            clashes: Vec::new(),
            chains: vec![None; groups.len()],
            claimed_first: 0,
            unavailable: 0,
        };
        for (gi, ((g, key), verdict)) in groups.iter().zip(intake).zip(parked).enumerate() {
            out.claimed_first += verdict.state.claimed.len();
            for (&p, parked) in g.members.iter().zip(&verdict.parked) {
                let m = &members[p];
                match parked {
                    Parked::Clash => {
                        let why = format!(
                            "duplicate: dedupe_key {:?} belongs to another active job",
                            m.decoded.spec.dedupe_key.as_deref().unwrap_or_default()
                        );
                        let dead = Transition::RecordDead { spec: m.decoded.spec.clone(), at: now, error: why };
                        out.clashes.push((m.index, Record::from(dead)));
                    }
                    Parked::Recorded(job) => out.outcomes.push((m.index, self.settle_parked(job, &verdict.state, now))),
                    // Its key's ledger shard is down: the message comes back; other keys run.
                    Parked::Unavailable => {
                        out.unavailable += 1;
                        out.outcomes.push((m.index, Outcome::Defer { delay_seconds: INFRA_RETRY_DELAY_SECONDS }));
                    }
                }
            }
            let due = |h: &JobRow| h.status == Status::Pending && h.next_run_at <= now + EARLY_DELIVERY_ALLOWANCE_MS;
            out.chains[gi] = match (key.claim, verdict.state.claimed, verdict.state.head) {
                (1.., claimed, _) if !claimed.is_empty() => Some((key.key, Start::Claimed(claimed))),
                // Not claimed yet, and nothing runs it: claim it when a slot frees.
                (0, _, Some(head)) if due(&head) => Some((key.key, Start::Later(Box::new(head)))),
                _ => None,
            };
        }
        out
    }

    /// Runs the keys' chains, `order` first, as many at once as groups run; sends the wake-ups
    /// of the keys left with work. Returns what the chains left for the batch's end.
    async fn run_chains(
        &self,
        mut chains: Vec<Option<(&str, Start)>>,
        order: Vec<usize>,
        budget: &Budget,
        now: i64,
    ) -> Leftovers {
        let leases = Leases::new(
            now,
            chains.iter().flatten().flat_map(|(_, start)| match start {
                Start::Claimed(jobs) => jobs.iter().collect::<Vec<_>>(),
                Start::Later(_) => Vec::new(),
            }),
        );
        let ends: Vec<(Option<OutMessage>, Leftovers)> = stream::iter(order.into_iter().filter_map(|g| chains[g].take()))
            .map(|(key, start)| async {
                let mut left = Leftovers::default();
                let wake = self.chain(key, start, (budget, &leases), &mut left).await;
                (wake, left)
            })
            .buffer_unordered(GROUP_CONCURRENCY)
            .collect()
            .await;
        let (mut wakes, mut left) = (Vec::new(), Leftovers::default());
        for (wake, chain_left) in ends {
            wakes.extend(wake);
            left.gather(chain_left);
        }
        if let Err(e) = producer::send_all(self.queue, wakes).await {
            self.outage(format!("wake-up messages not sent, the cron wakes their keys: {e}"));
        }
        left
    }

    /// A parked message is done with, unless its job is the key's head and not yet due: then it
    /// is the key's wake-up, and comes back when the job is due.
    fn settle_parked(&self, job: &JobRow, key: &KeyState, now: i64) -> Outcome {
        match &key.head {
            Some(h)
                if h.id == job.id
                    && h.status == Status::Pending
                    && h.next_run_at > now + EARLY_DELIVERY_ALLOWANCE_MS =>
            {
                Outcome::Defer { delay_seconds: until(now, Some(h.next_run_at)) }
            }
            _ => Outcome::Ack,
        }
    }

    fn claim_spec(&self, now: i64, limit: u32) -> ClaimSpec<'_> {
        ClaimSpec {
            owner: &self.owner,
            lease: Lease {
                now,
                until: now + i64::from(self.cfg.lease_seconds) * 1000,
                due_before: now + EARLY_DELIVERY_ALLOWANCE_MS,
            },
            on_dead: self.cfg.on_dead,
            limit,
        }
    }

    /// Runs a key's claimed jobs in order, recording each chunk and claiming the next in one round
    /// trip. Returns the key's wake-up message when work is left for later; what its runs leave
    /// for the batch's end goes to `left`.
    async fn chain(&self, key: &str, start: Start, (budget, leases): (&Budget, &Leases), left: &mut Leftovers) -> Option<OutMessage> {
        // This chain's next claim size: doubling from FIRST_CHUNK.
        let mut chunk = FIRST_CHUNK;
        let mut claimed = match start {
            Start::Claimed(jobs) => jobs,
            Start::Later(head) => match self.claim_later(key, &head, budget, leases).await {
                Ok(jobs) => jobs,
                Err(wake) => return wake,
            },
        };
        loop {
            let limited = claimed.iter().any(|j| j.limit_key.is_some());
            let (records, prev, mut stop) = self.run_chunk(key, claimed, (budget, leases), left).await;
            chunk = next_chunk(chunk, limited);
            let took = if stop.is_none() { budget.take(chunk) } else { 0 };
            if stop.is_none() && took == 0 {
                stop = Some(Stop::Budget);
            }
            let now = self.clock.now_ms();
            let claim = self.claim_spec(now, took);
            let next = if stop.is_none() { Some((claim, prev.as_deref())) } else { None };
            let step = self.ledger.step(key, &records, next, self.cfg.on_dead).await;
            budget.settle(took, step.as_ref().map_or(0, |s| s.state.claimed.len()));
            let step = match step {
                Ok(s) => s,
                Err(e) => {
                    // Unrecorded: the leases expire and the reaper frees and re-sends the jobs.
                    self.outage(format!("key {key:?}: results not recorded, the reaper frees its jobs: {e}"));
                    return None;
                }
            };
            left.finished.extend(step.waited.into_iter().map(|id| (id, Route::key(key))));
            if step.recorded.iter().any(|ok| !ok) {
                self.outage(format!("key {key:?}: a lease was lost before its result was recorded"));
            }
            match stop {
                Some(Stop::Retry(job, delay)) => return producer::message_for(&job, delay),
                // A job put off by its limit key may hold a slot handed to it (woken while the
                // breaker was open, it waits for the cool-down): should its key's order change
                // meanwhile (an operator's redrive puts an earlier job back ahead), its message,
                // claiming nothing, must give that slot back, as a wake-up does. As a plain
                // message it gave nothing, and the job ahead, parked behind the slot, waited for
                // maintenance (the soak's line check found it).
                Some(Stop::PutOff(job, delay)) => return producer::woken_message(&job, delay),
                Some(Stop::Blocked | Stop::LeaseLost | Stop::Parked) => return None,
                Some(Stop::Budget) => {
                    let head = step.state.head.filter(|h| h.status == Status::Pending)?;
                    let delay = if head.next_run_at > now { until(now, Some(head.next_run_at)) } else { 0 };
                    return producer::message_for(&head, delay);
                }
                None if step.state.claimed.is_empty() => return None,
                None => {
                    leases.claimed(&step.state.claimed);
                    claimed = step.state.claimed;
                }
            }
        }
    }

    /// Claims the first jobs of a key parking did not claim (`head`, as parking saw it). `Err`:
    /// the chain ends here, with the key's wake-up if it needs one.
    async fn claim_later(
        &self,
        key: &str,
        head: &JobRow,
        budget: &Budget,
        leases: &Leases,
    ) -> Result<Vec<JobRow>, Option<OutMessage>> {
        let now = self.clock.now_ms();
        let first = if head.limit_key.is_some() { 1 } else { FIRST_CHUNK };
        let took = if now < budget.deadline_ms { budget.take(first) } else { 0 };
        if took == 0 {
            // Parked and acked here, and nothing runs the key: it needs its wake-up.
            return Err(producer::message_for(head, 0));
        }
        let claim = self.claim_spec(now, took);
        let step = self.ledger.step(key, &[], Some((claim, None)), self.cfg.on_dead).await;
        budget.settle(took, step.as_ref().map_or(0, |s| s.state.claimed.len()));
        match step {
            Ok(step) if step.state.claimed.is_empty() => Err(None),
            Ok(step) => {
                leases.claimed(&step.state.claimed);
                Ok(step.state.claimed)
            }
            Err(e) => {
                self.outage(format!("key {key:?}: not claimed, waking it for later: {e}"));
                Err(producer::message_for(head, INFRA_RETRY_DELAY_SECONDS))
            }
        }
    }

    /// Runs a chunk of a key's claimed jobs in order: what to record for each, the last job that
    /// let the chain go on, and why it stopped, if it did (the jobs after a stop are handed back).
    async fn run_chunk(
        &self,
        key: &str,
        claimed: Vec<JobRow>,
        (budget, leases): (&Budget, &Leases),
        left: &mut Leftovers,
    ) -> (Vec<Record>, Option<String>, Option<Stop>) {
        let mut records: Vec<Record> = Vec::with_capacity(claimed.len());
        let mut prev: Option<String> = None;
        let mut stop: Option<Stop> = None;
        for job in claimed {
            let now = self.clock.now_ms();
            if stop.is_none() && (budget.runs.get() == 0 || now >= budget.deadline_ms) {
                stop = Some(Stop::Budget);
            }
            if stop.is_some() {
                // Not run: handed back, its attempt returned, due now (the wake-up runs it).
                records.push(self.defer(&job, now, now).into());
                continue;
            }
            self.renew_leases(leases).await;
            if leases.lost(&job.id, self.clock.now_ms(), self.cfg.refresh_after_ms(self.cfg.lease_seconds)) {
                // Stalled past the lease: the reaper may have given the key's jobs to another
                // invocation. Record what ran, run nothing more here.
                self.outage(format!("key {key:?}: lease lost while the chain stalled; stopping"));
                stop = Some(Stop::LeaseLost);
                records.push(self.defer(&job, now, now).into());
                continue;
            }
            budget.runs.set(budget.runs.get() - 1);
            let ran = self.run_claimed(&job, leases.start_by(self.cfg.refresh_after_ms(self.cfg.lease_seconds)), left).await;
            let end = ran.end;
            // A cancelled run recorded at once (design §22.1) is not recorded again.
            if !matches!(end, RunEnd::Cancelled { recorded: true }) {
                records.push(ran.record);
            }
            match end {
                // A cancelled job is skipped: its key moves on, as after a success.
                RunEnd::Done | RunEnd::Cancelled { .. } => {}
                RunEnd::Dead => {
                    if self.cfg.on_dead == OnDead::Block {
                        stop = Some(Stop::Blocked);
                    }
                }
                RunEnd::Retry { delay_seconds } | RunEnd::Snooze { delay_seconds } => {
                    stop = Some(Stop::Retry(Box::new(job.clone()), delay_seconds));
                }
                // Parked in its limit key's line: a freed slot wakes it, no message needed.
                RunEnd::Limited(w) if w.parked => stop = Some(Stop::Parked),
                RunEnd::Limited(w) => stop = Some(Stop::PutOff(Box::new(job.clone()), w.delay_seconds)),
                // Stalled past the lease in its checks: as when the lease is found lost above.
                RunEnd::LeaseLost => stop = Some(Stop::LeaseLost),
            }
            if stop.is_none() {
                prev = Some(job.id.clone());
            }
        }
        (records, prev, stop)
    }
}
