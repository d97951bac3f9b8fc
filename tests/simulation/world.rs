//! The simulated Cloudflare around the real code: D1 (real SQLite) and KV (the stateful in-memory
//! KV) behind ports that pause and fail at random, a Queues broker, a producer, and a scripted job
//! handler that watches every run.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use orderly::clock::ManualClock;
use orderly::config::OnDead;
use orderly::error::InfraError;
use orderly::handlers::{Done, JobContext, JobError, Runner};
use orderly::ledger::object::{LedgerObject, ShardAnswer, ShardRequest, ShardSql, Transport};
use orderly::ledger::{JobRow, Route, Row, Sql, Status, Stmt};
use orderly::lock::{Kv, MemoryKv};
use orderly::producer::{OutMessage, QueueSender};
use serde_json::Value;

use crate::exec::Sched;
use crate::support::{ShardDb, Sqlite};

/// Fault probabilities (per operation unless said otherwise).
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// A D1 batch fails before it applies.
    pub d1_fail: f64,
    /// A D1 batch applies, then its answer is lost (the caller sees an error).
    pub d1_lost_answer: f64,
    /// A KV call fails.
    pub kv_fail: f64,
    /// A queue send fails.
    pub send_fail: f64,
    /// An invocation dies at an await point (per scheduler step of that invocation).
    pub crash: f64,
    /// An acked message is delivered again anyway.
    pub lost_ack: f64,
    /// A message is delivered twice.
    pub duplicate: f64,
    /// A handler run fails, retryably.
    pub transient: f64,
    /// A handler run hangs past the timeout (then fails, retryably).
    pub hang: f64,
    /// A D1 call stalls past the lease (an isolate frozen, a slow round trip): the invocation's
    /// leases expire under it and the reaper takes its jobs.
    pub stall: f64,
}

impl Faults {
    /// Each fault kind with its probability, by the name [`Observations::fire`] counts it under.
    pub fn kinds(&self) -> [(&'static str, f64); 10] {
        [
            ("d1_fail", self.d1_fail),
            ("d1_lost_answer", self.d1_lost_answer),
            ("kv_fail", self.kv_fail),
            ("send_fail", self.send_fail),
            ("crash", self.crash),
            ("lost_ack", self.lost_ack),
            ("duplicate", self.duplicate),
            ("transient", self.transient),
            ("hang", self.hang),
            ("stall", self.stall),
        ]
    }
}

/// A ledger call's stall past the lease (an isolate frozen, a slow round trip), by chance: the
/// invocation's leases expire under it and the reaper takes its jobs.
async fn stall_maybe(sched: &Rc<Sched>, faults: &Faults, obs: &Obs, inv: &str) {
    if sched.chance(faults.stall) {
        {
            let mut o = obs.borrow_mut();
            o.fire("stall");
            o.stalled.insert(inv.to_string());
            o.fault_times.push(sched.now());
        }
        sched.pause(150_000).await;
    }
}

/// Notes a failed or lost ledger call of `inv` (its results may not be recorded), of fault `kind`.
fn ledger_fault(sched: &Sched, obs: &Obs, inv: &str, kind: &'static str) {
    let mut o = obs.borrow_mut();
    o.fire(kind);
    o.d1_faulted.insert(inv.to_string());
    o.fault_times.push(sched.now());
}

/// Faults at a ledger shard's boundary (`LEDGER = "do"`), per request to a shard.
#[derive(Debug, Clone, Copy, Default)]
pub struct ShardFaults {
    /// The object refuses work for now ("overloaded"): nothing applies.
    pub overloaded: f64,
    /// The request applies, then its answer is lost.
    pub lost_answer: f64,
    /// The object is reset mid-request (a new instance: its cached place gone); the request
    /// applied or not, by a coin, and its answer is lost.
    pub reset: f64,
    /// A request from a worker on other code (a deploy in progress): the object must refuse it.
    pub skew: f64,
    /// One shard is down for a window of the run: every request to it fails, nothing applies.
    pub one_down: bool,
}

impl ShardFaults {
    /// Each fault kind with its probability (1 for the one shard down), as counted.
    pub fn kinds(&self) -> [(&'static str, f64); 5] {
        [
            ("shard_overloaded", self.overloaded),
            ("shard_lost_answer", self.lost_answer),
            ("shard_reset", self.reset),
            ("shard_skew", self.skew),
            ("shard_down", if self.one_down { 1.0 } else { 0.0 }),
        ]
    }
}

/// A ledger shard's object, shared by every invocation (a Durable Object is one instance): reset
/// replaces the instance over the same storage.
pub struct SimObject {
    pub db: Rc<Sqlite>,
    pub object: RefCell<Rc<LedgerObject<ShardDb>>>,
}

impl SimObject {
    pub fn new() -> SimObject {
        let db = Rc::new(Sqlite::bare());
        SimObject { object: RefCell::new(Rc::new(LedgerObject::new(ShardDb(db.clone())))), db }
    }

    fn reset(&self) {
        *self.object.borrow_mut() = Rc::new(LedgerObject::new(ShardDb(self.db.clone())));
    }

    /// Serves `req` through its JSON, as a Durable Object fetch carries it.
    fn serve(&self, req: &ShardRequest) -> ShardAnswer {
        let wire: ShardRequest =
            serde_json::from_str(&serde_json::to_string(req).unwrap_or_default()).unwrap_or_else(|_| req.clone());
        let object = self.object.borrow().clone();
        let answer = object.serve(&wire);
        serde_json::from_str(&serde_json::to_string(&answer).unwrap_or_default()).unwrap_or(answer)
    }
}

/// The way from one invocation to one shard's object: every request an await point, with the
/// shard faults.
pub struct SimShard {
    pub object: Rc<SimObject>,
    pub shard: usize,
    pub sched: Rc<Sched>,
    pub faults: Faults,
    pub shard_faults: ShardFaults,
    /// (shard, from, to): the shard down in that window (ms), if any.
    pub down: Option<(usize, i64, i64)>,
    pub obs: Obs,
    pub inv: String,
}

impl SimShard {
    fn fault(&self, kind: &'static str) {
        ledger_fault(&self.sched, &self.obs, &self.inv, kind);
    }
}

impl Transport for SimShard {
    async fn send(&self, req: &ShardRequest) -> Result<ShardAnswer, InfraError> {
        let err = |why: &str| {
            if std::env::var("SIM_TRACE").is_ok() {
                println!("+{:>6} {} shard {}: {why}", (self.sched.now() - crate::T0) / 1000, self.inv, self.shard);
            }
            Err(InfraError::new("ledger shard", format!("shard {}: simulated {why}", self.shard)))
        };
        self.sched.jitter(1, 8).await;
        stall_maybe(&self.sched, &self.faults, &self.obs, &self.inv).await;
        let now = self.sched.now();
        if self.down.is_some_and(|(shard, from, to)| shard == self.shard && (from..to).contains(&now)) {
            self.fault("shard_down");
            return err("outage of one shard");
        }
        let f = self.shard_faults;
        if self.sched.chance(f.overloaded) {
            self.fault("shard_overloaded");
            return err("overload");
        }
        if self.sched.chance(f.skew) {
            let mut other = req.clone();
            other.schema -= 1;
            if !matches!(self.object.serve(&other), ShardAnswer::Refused(_)) {
                self.obs.borrow_mut().violations.push(format!("shard {}: a request on other code applied", self.shard));
            }
            self.fault("shard_skew");
            return err("request from other code");
        }
        if self.sched.chance(f.reset) {
            self.object.reset();
            if self.sched.chance(0.5) {
                self.object.serve(req);
            }
            self.fault("shard_reset");
            return err("object reset");
        }
        let answer = self.object.serve(req);
        if let ShardAnswer::Failed(e) | ShardAnswer::Refused(e) = &answer {
            self.obs.borrow_mut().violations.push(format!("a shard request failed on its own: {e}"));
        }
        if self.sched.chance(f.lost_answer) {
            self.fault("shard_lost_answer");
            return err("lost answer (the batch applied)");
        }
        self.sched.jitter(0, 3).await;
        Ok(answer)
    }
}

/// The ledger's SQL port in the simulation: D1 itself, or one shard's object.
pub enum SimLedgerSql {
    Direct(SimSql),
    Shard(ShardSql<SimShard>),
}

impl Sql for SimLedgerSql {
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<Vec<Row>>, InfraError> {
        match self {
            SimLedgerSql::Direct(d1) => d1.batch(stmts).await,
            SimLedgerSql::Shard(shard) => shard.batch(stmts).await,
        }
    }
}

/// Who did what, for the invariants.
#[derive(Default)]
pub struct Observations {
    pub runs: Vec<RunRecord>,
    /// key -> runs in progress (job, invocation).
    pub active: BTreeMap<String, Vec<(String, String)>>,
    /// invocation -> jobs it finished (ran to success, or to DEAD) in this invocation.
    pub finished_by: BTreeMap<String, BTreeSet<String>>,
    pub crashed: BTreeSet<String>,
    /// Invocations that stalled past their lease (their results may not be recorded).
    pub stalled: BTreeSet<String>,
    /// Invocations that saw a D1 failure (their results may not be recorded).
    pub d1_faulted: BTreeSet<String>,
    /// When an invocation died, stalled or lost a D1 call: such an invocation may have claimed a
    /// job (spending an attempt) and never handed it back.
    pub fault_times: Vec<i64>,
    /// When a queue send failed (a wake-up among them may be lost: maintenance sends its job).
    pub lost_sends: Vec<i64>,
    pub violations: Vec<String>,
    pub faults_injected: u64,
    /// Faults injected, by kind ([`Faults::kinds`], [`ShardFaults::kinds`]): a kind the setup
    /// configures that never fires is a fault the run did not test.
    pub fired: BTreeMap<&'static str, u64>,
    /// Jobs an operator redrove, with their seq before the redrive: a redrive that moved a job
    /// to its key's end takes it out of the submitted order (its seq order still holds).
    pub redriven: BTreeMap<String, Option<i64>>,
    /// job -> the earliest a run of it may start (ms): its submission delay, or half the backoff
    /// after a failed run (equal jitter never waits less), less the early-delivery allowance.
    /// Worked out here from what the simulation asked for and saw, not read from the ledger.
    pub not_before: BTreeMap<String, i64>,
    /// Flow control (design §20): the handlers running now, per limit key (job, invocation).
    pub limit_active: BTreeMap<String, Vec<(String, String)>>,
    /// Every handler start, per limit key, ms.
    pub limit_starts: BTreeMap<String, Vec<i64>>,
    /// The operator's pause of `host-0`.
    pub paused: PauseWindow,
    /// The operator's pause of the ordering key [`PAUSED_KEY`] (design §20.11).
    pub key_paused: PauseWindow,
    /// Per limit key, its breaker's current opening as first seen after a step: (its
    /// `open_until`, when it opened). A run granted before the opening may start after it.
    pub breaker_opened: BTreeMap<String, (i64, i64)>,
    /// The operator's cancels and the producer's revisions (design §22), and their checks.
    pub cancels: crate::cancels::Cancels,
    /// The schedule's cron runs, in the order they ended (design §23).
    pub schedule_runs: Vec<crate::periodic::ScheduleRun>,
    /// Every job id a schedule run reported submitting (a new row each).
    pub schedule_submitted: Vec<String>,
    /// Dependencies (design §24): job -> the jobs it runs after, and whether it runs anyway when
    /// one ends DEAD.
    pub deps: BTreeMap<String, (Vec<String>, bool)>,
    /// Batches (design §25): each callback's id -> its members, in order.
    pub batches: BTreeMap<String, Vec<String>>,
    /// The most D1 queries (batches) one consumer invocation or cron run made (design §26).
    pub most_queries: u64,
}

impl Observations {
    /// Notes each breaker that opened in the step just taken (checked after every step, so the
    /// step's time is the opening's).
    pub fn note_breakers(&mut self, dbs: &[Rc<Sqlite>], now: i64) {
        for db in dbs {
            let Ok(mut st) =
                db.conn.prepare_cached("SELECT limit_key, open_until FROM limit_state WHERE open_until IS NOT NULL")
            else {
                continue;
            };
            let open: Vec<(String, i64)> =
                st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).map(|r| r.flatten().collect()).unwrap_or_default();
            for (key, until) in open {
                if self.breaker_opened.get(&key).is_none_or(|&(seen, _)| seen != until) {
                    self.breaker_opened.insert(key, (until, now));
                }
            }
        }
    }

    /// Notes one fault of `kind` injected.
    pub fn fire(&mut self, kind: &'static str) {
        self.faults_injected += 1;
        *self.fired.entry(kind).or_default() += 1;
    }
}

/// An operator's pause and resume, as they happened.
#[derive(Debug, Default, Clone)]
pub struct PauseWindow {
    /// When the pause took hold (its answer).
    pub from: Option<i64>,
    /// When the resume was asked.
    pub until: Option<i64>,
    /// The jobs with a message in the queue (waiting, or in an invocation's hands) when the
    /// resume had taken effect, the resume's own re-sends aside: lock mode lets these run before
    /// the jobs the pause held (design §20.11).
    pub queued_at_resume: BTreeSet<String>,
    /// The jobs whose message was acked unrun (held by the pause): never among those above.
    pub held: BTreeSet<String>,
}

#[derive(Debug, Clone)]
pub struct RunRecord {
    pub job: String,
    pub key: Option<String>,
    pub seq: Option<i64>,
    pub order: Option<i64>,
    pub inv: String,
    pub start: i64,
    pub ok: Option<bool>,
    /// The attempt number the run was given.
    pub attempt: u32,
    /// The handler snoozed (not a failure; no attempt may be spent on it).
    pub snoozed: bool,
    /// When the handler ended (returned, or was dropped), ms.
    pub end: Option<i64>,
    /// The version of the payload it ran (its body's `v`; 0 for a job's first payload).
    pub v: i64,
}

/// How long a scripted snooze asks to wait.
pub const SNOOZE_MS: i64 = 7_000;
/// The ordering key an operator pauses for a while in every setup (design §20.11).
pub const PAUSED_KEY: &str = "k1";

pub type Obs = Rc<RefCell<Observations>>;

/// D1: real SQLite; every batch is an await point and may fail.
pub struct SimSql {
    pub db: Rc<Sqlite>,
    pub sched: Rc<Sched>,
    pub faults: Faults,
    pub obs: Obs,
    pub inv: String,
    /// Queries this invocation made: a consumer invocation or a cron run must stay within
    /// D1's per-invocation budget (design §26). The producer and the operators are one port
    /// each for the whole run, so they are not counted.
    pub queries: std::cell::Cell<u64>,
}

impl Sql for SimSql {
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<Vec<Row>>, InfraError> {
        if self.inv.starts_with("inv-") || self.inv.starts_with("cron") {
            self.queries.set(self.queries.get() + 1);
            let mut o = self.obs.borrow_mut();
            o.most_queries = o.most_queries.max(self.queries.get());
            if self.queries.get() == crate::support::D1_PAID_QUERIES + 1 {
                o.violations.push(format!(
                    "{} made more than {} D1 queries",
                    self.inv,
                    crate::support::D1_PAID_QUERIES
                ));
            }
        }
        self.sched.jitter(1, 8).await;
        stall_maybe(&self.sched, &self.faults, &self.obs, &self.inv).await;
        if self.sched.chance(self.faults.d1_fail) {
            self.fault("d1_fail");
            return Err(InfraError::new("D1", "simulated failure"));
        }
        let out = self.db.batch(stmts).await;
        if out.is_ok() && self.sched.chance(self.faults.d1_lost_answer) {
            self.fault("d1_lost_answer");
            return Err(InfraError::new("D1", "simulated lost answer (the batch applied)"));
        }
        if let Err(e) = &out {
            self.obs.borrow_mut().violations.push(format!("a ledger statement failed on its own: {e}"));
        }
        self.sched.jitter(0, 3).await;
        out
    }
}

impl SimSql {
    fn fault(&self, kind: &'static str) {
        ledger_fault(&self.sched, &self.obs, &self.inv, kind);
    }
}

/// Workers KV: the stateful in-memory KV; every call is an await point and may fail.
pub struct SimKv {
    pub kv: Rc<MemoryKv<Rc<ManualClock>>>,
    pub sched: Rc<Sched>,
    pub faults: Faults,
    pub obs: Obs,
}

impl SimKv {
    async fn gate(&self) -> Result<(), InfraError> {
        self.sched.jitter(0, 5).await;
        if self.sched.chance(self.faults.kv_fail) {
            self.obs.borrow_mut().fire("kv_fail");
            return Err(InfraError::new("KV", "simulated failure"));
        }
        Ok(())
    }
}

impl Kv for SimKv {
    async fn get(&self, key: &str) -> Result<Option<String>, InfraError> {
        self.gate().await?;
        self.kv.get(key).await
    }
    async fn put(&self, key: &str, value: &str, ttl: u32) -> Result<(), InfraError> {
        self.gate().await?;
        self.kv.put(key, value, ttl).await
    }
    async fn delete(&self, key: &str) -> Result<(), InfraError> {
        self.gate().await?;
        self.kv.delete(key).await
    }
}

/// A queue message as the broker keeps it.
#[derive(Debug, Clone)]
pub struct Msg {
    pub id: String,
    pub body: Value,
    pub timestamp: i64,
    pub attempts: u32,
    pub visible_at: i64,
    /// Insertion order, for FIFO hand-out.
    pub order: u64,
}

/// Queues, modelled: hands out batches of visible messages, re-queues retries after their
/// delay, dead-letters after `max_retries`, re-delivers a crashed invocation's batch.
pub struct Broker {
    pub pending: Vec<Msg>,
    pub inflight: BTreeMap<String, Vec<Msg>>,
    pub dead_letters: Vec<Msg>,
    pub next: u64,
    pub max_retries: u32,
    pub deliveries: u64,
    /// Duplicate deliveries injected.
    pub duplicates: u64,
}

impl Broker {
    pub fn new(max_retries: u32) -> Broker {
        Broker {
            pending: Vec::new(),
            inflight: BTreeMap::new(),
            dead_letters: Vec::new(),
            next: 0,
            max_retries,
            deliveries: 0,
            duplicates: 0,
        }
    }
    /// Sends a message; its id.
    pub fn send(&mut self, body: Value, now: i64, delay_ms: i64) -> String {
        self.next += 1;
        let id = format!("msg-{}", self.next);
        let m = Msg { id: id.clone(), body, timestamp: now, attempts: 1, visible_at: now + delay_ms, order: self.next };
        self.pending.push(m);
        id
    }
    fn requeue(&mut self, mut m: Msg, visible_at: i64) {
        m.attempts += 1;
        if m.attempts > self.max_retries + 1 {
            self.dead_letters.push(m);
            return;
        }
        self.next += 1;
        m.order = self.next;
        m.visible_at = visible_at;
        self.pending.push(m);
    }
    /// Visible messages' count.
    pub fn visible(&self, now: i64) -> usize {
        self.pending.iter().filter(|m| m.visible_at <= now).count()
    }
    pub fn next_visible(&self) -> Option<i64> {
        self.pending.iter().map(|m| m.visible_at).min()
    }
    /// Takes a batch of up to `max` visible messages: in arrival order, or any order when `reorder`.
    pub fn take(&mut self, sched: &Sched, inv: &str, max: usize, reorder: bool, duplicate: f64) -> Vec<Msg> {
        let now = sched.now();
        let mut visible: Vec<usize> = (0..self.pending.len()).filter(|&i| self.pending[i].visible_at <= now).collect();
        if reorder {
            let mut rng = sched.rng.borrow_mut();
            for i in (1..visible.len()).rev() {
                let j = (rng.next_u64() % (i as u64 + 1)) as usize;
                visible.swap(i, j);
            }
        } else {
            visible.sort_by_key(|&i| self.pending[i].order);
        }
        visible.truncate(max);
        visible.sort_unstable_by(|a, b| b.cmp(a));
        let mut batch: Vec<Msg> = visible.into_iter().map(|i| self.pending.remove(i)).collect();
        if !reorder {
            batch.sort_by_key(|m| m.order);
        }
        // A duplicate: the same message is also left in the queue for another delivery.
        for m in &batch {
            if sched.chance(duplicate) {
                self.duplicates += 1;
                let mut copy = m.clone();
                copy.visible_at = now + sched.rng.borrow_mut().range(0, 3_000);
                self.pending.push(copy);
            }
        }
        self.deliveries += batch.len() as u64;
        self.inflight.insert(inv.to_string(), batch.clone());
        batch
    }
    /// Applies an invocation's outcomes.
    pub fn settle(&mut self, sched: &Sched, inv: &str, outcomes: &[orderly::consumer::Outcome], lost_ack: f64) -> u64 {
        use orderly::consumer::Outcome;
        let now = sched.now();
        let batch = self.inflight.remove(inv).unwrap_or_default();
        let mut faults = 0;
        for (m, o) in batch.into_iter().zip(outcomes) {
            match o {
                Outcome::Ack if sched.chance(lost_ack) => {
                    faults += 1;
                    let at = now + sched.rng.borrow_mut().range(0, 5_000);
                    self.requeue(m, at);
                }
                Outcome::Ack => {}
                Outcome::Retry { delay_seconds } | Outcome::Defer { delay_seconds } => {
                    // Queues' delays are not exact: up to a second late.
                    let late = sched.rng.borrow_mut().range(0, 1_000);
                    self.requeue(m, now + i64::from(*delay_seconds) * 1000 + late);
                }
            }
        }
        faults
    }
    /// A crashed invocation: every message of its batch comes back.
    pub fn crashed(&mut self, sched: &Sched, inv: &str) {
        let now = sched.now();
        for m in self.inflight.remove(inv).unwrap_or_default() {
            let at = now + sched.rng.borrow_mut().range(1_000, 10_000);
            self.requeue(m, at);
        }
    }
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.inflight.is_empty() && self.dead_letters.is_empty()
    }
    /// The jobs with a message in the queue (waiting for delivery, a retry or the dead-letter
    /// queue, or in an invocation's hands), but for the messages `except` names.
    pub fn queued_jobs(&self, except: &BTreeSet<String>) -> BTreeSet<String> {
        let inflight = self.inflight.values().flatten();
        let all = self.pending.iter().chain(inflight).chain(&self.dead_letters);
        all.filter(|m| !except.contains(&m.id)).filter_map(|m| job_of(&m.body)).collect()
    }

    /// The jobs with a wake-up on its way (`__orderly_job__.woken`): waiting, put off, or in an
    /// invocation's hands.
    pub fn queued_wake_ups(&self) -> BTreeSet<String> {
        let inflight = self.inflight.values().flatten();
        let woken = |body: &Value| {
            body.get(orderly::envelope::JOB_FIELD).and_then(|m| m.get("woken")) == Some(&Value::Bool(true))
        };
        self.pending.iter().chain(inflight).filter(|m| woken(&m.body)).filter_map(|m| job_of(&m.body)).collect()
    }
}

/// The job a message names (`__orderly_job__.id`).
fn job_of(body: &Value) -> Option<String> {
    body.get(orderly::envelope::JOB_FIELD)?.get("id")?.as_str().map(str::to_string)
}

/// The queue producer binding (the worker's wake-ups and re-sends, the API's sends).
pub struct SimQueue {
    pub broker: Rc<RefCell<Broker>>,
    pub sched: Rc<Sched>,
    pub faults: Faults,
    pub obs: Obs,
    /// When set, the messages this sender sent, by id (an operator's resume: its re-sends).
    pub sent: Option<Shared<BTreeSet<String>>>,
}

impl QueueSender for SimQueue {
    async fn send_batch(&self, msgs: &[OutMessage]) -> Result<(), InfraError> {
        self.sched.jitter(1, 5).await;
        if self.sched.chance(self.faults.send_fail) {
            let mut o = self.obs.borrow_mut();
            o.fire("send_fail");
            o.lost_sends.push(self.sched.now());
            drop(o);
            return Err(InfraError::new("Queue", "simulated failure"));
        }
        let now = self.sched.now();
        let mut b = self.broker.borrow_mut();
        for m in msgs {
            let body: Value = serde_json::from_str(m.json()).map_err(|e| InfraError::new("Queue", e.to_string()))?;
            let id = b.send(body, now, i64::from(m.delay_seconds) * 1000);
            if let Some(sent) = &self.sent {
                sent.borrow_mut().insert(id);
            }
        }
        Ok(())
    }
}

/// The job handler: scripted by the payload's body (`{"key", "n", "fail": k, "permanent": true}`),
/// with random transient failures and hangs on top. It checks, as each run starts, that the run
/// is allowed: the job is not DONE, no other run of its key is in progress, and (strict mode)
/// every lower seq of its key is finished or was finished earlier by this same invocation.
pub struct SimRunner {
    /// The ledger's databases (one, or one per shard).
    pub dbs: Vec<Rc<Sqlite>>,
    pub sched: Rc<Sched>,
    pub faults: Faults,
    pub obs: Obs,
    pub inv: String,
    pub strict: Option<OnDead>,
    pub timeout_ms: i64,
    /// `BACKOFF_BASE_SECONDS` and `BACKOFF_CAP_SECONDS`, for the not-before oracle.
    pub backoff: (u32, u32),
    /// `LIMITS`, for the flow-control oracle.
    pub limits: orderly::flow::Policies,
    /// `LEASE_SECONDS`, ms: a permit lapses one lease after its ask.
    pub lease_ms: i64,
}

/// How early a PENDING job may be claimed: never (the consumer's `EARLY_DELIVERY_ALLOWANCE_MS`); the
/// oracle checks every delay is kept in full.
pub const EARLY_ALLOWANCE_MS: i64 = 0;

/// The shortest wait after failed attempt `attempt`: half of `base * 2^(attempt-1)` capped, to
/// the millisecond (equal jitter never waits less).
fn min_backoff_ms(attempt: u32, (base, cap): (u32, u32)) -> i64 {
    let full = (i64::from(base) << attempt.saturating_sub(1).min(30)).min(i64::from(cap));
    full * 1000 / 2
}

/// Ends a run's "in progress" mark even when the invocation dies mid-run (or the run is dropped,
/// its job cancelled), and notes when it ended.
struct RunGuard {
    obs: Obs,
    key: Option<String>,
    limit: Option<String>,
    job: String,
    inv: String,
    sched: Rc<Sched>,
    /// Its place in `runs`.
    at: usize,
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        let mut o = self.obs.borrow_mut();
        let now = self.sched.now();
        if let Some(r) = o.runs.get_mut(self.at) {
            r.end.get_or_insert(now);
        }
        // Dropped without a result: the invocation died (it runs nothing more), or the run was
        // stopped by its cancel, its job DEAD and skipped: its chain may go on past it.
        if o.runs.get(self.at).is_some_and(|r| r.ok.is_none()) {
            o.finished_by.entry(self.inv.clone()).or_default().insert(self.job.clone());
        }
        if let Some(k) = &self.key {
            if let Some(v) = o.active.get_mut(k) {
                v.retain(|(j, i)| !(j == &self.job && i == &self.inv));
            }
        }
        if let Some(l) = &self.limit {
            if let Some(v) = o.limit_active.get_mut(l) {
                v.retain(|(j, i)| !(j == &self.job && i == &self.inv));
            }
        }
    }
}

pub fn row(db: &Sqlite, id: &str) -> Option<JobRow> {
    let rows = futures::executor::block_on(db.query(orderly::ledger::stmt::get(id))).ok()?;
    JobRow::first(&rows).ok().flatten()
}

fn key_jobs(db: &Sqlite, key: &str) -> Vec<JobRow> {
    let mut st =
        db.conn.prepare("SELECT id FROM job WHERE ordering_key = ?1 AND seq IS NOT NULL ORDER BY seq").unwrap();
    let ids: Vec<String> = st.query_map([key], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
    ids.iter().filter_map(|id| row(db, id)).collect()
}

impl Runner for SimRunner {
    async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
        let body = job.payload.get("body").cloned().unwrap_or(Value::Null);
        let key = body.get("key").and_then(Value::as_str).map(str::to_string);
        let order = body.get("n").and_then(Value::as_i64);
        let me = self.dbs.iter().find_map(|db| row(db, job.id));
        let seq = me.as_ref().and_then(|j| j.seq);
        {
            let mut o = self.obs.borrow_mut();
            match &me {
                Some(j) if j.status == Status::Done => o.violations.push(format!("{} ran after it was DONE", job.id)),
                Some(j) if j.status != Status::Running => {
                    o.violations.push(format!("{} ran while {} in the ledger", job.id, j.status.as_str()));
                }
                None => o.violations.push(format!("{} ran without a ledger row", job.id)),
                _ => {}
            }
            let now = self.sched.now();
            if std::env::var("SIM_TRACE_JOB").is_ok_and(|j| j == job.id) {
                let at = |t: i64| t - 1_700_000_000_000;
                let row = me.as_ref().map(|j| (at(j.next_run_at), j.started_at.map(at), j.parked, j.attempts));
                println!(
                    "+{} ms {} starts; its row (next_run_at, claimed, parked, attempts): {row:?}",
                    at(now),
                    job.id
                );
            }
            if let Some(&due) = o.not_before.get(job.id) {
                if now < due {
                    o.violations.push(format!(
                        "{} (attempt {}) started {} ms before it was due",
                        job.id,
                        job.attempt,
                        due - now
                    ));
                }
            }
            if let Some(k) = &key {
                let active = o.active.entry(k.clone()).or_default();
                if let Some((other, inv)) = active.first() {
                    let v = format!("runs of key {k} overlap: {} ({}) and {} ({})", other, inv, job.id, self.inv);
                    active.push((job.id.to_string(), self.inv.clone()));
                    o.violations.push(v);
                } else {
                    active.push((job.id.to_string(), self.inv.clone()));
                }
            }
            if let (Some(on_dead), Some(k), Some(s)) = (self.strict, &key, seq) {
                let mine = o.finished_by.get(&self.inv).cloned().unwrap_or_default();
                let db = &self.dbs[Route::key(k).shard(self.dbs.len())];
                for lower in key_jobs(db, k).into_iter().filter(|j| j.seq.is_some_and(|x| x < s)) {
                    let finished_here = mine.contains(&lower.id) && chained_past(&o, &self.inv, &lower, on_dead);
                    if !passable(&lower, on_dead) && !finished_here {
                        o.violations.push(format!(
                            "run rule broken: {} (seq {s}) started while {} (seq {:?}) is {}",
                            job.id,
                            lower.id,
                            lower.seq,
                            lower.status.as_str()
                        ));
                    }
                }
            }
            if let Some(l) = me.as_ref().and_then(|j| j.limit_key.clone()) {
                self.limit_oracle(&mut o, &l, job.id);
            }
            if let Some(v) = self.dependency_violation(&mut o, job.id) {
                o.violations.push(v);
            }
            if let Some(v) = self.batch_violation(&mut o, job.id, job.payload) {
                o.violations.push(v);
            }
            let v = body.get("v").and_then(Value::as_i64).unwrap_or(0);
            let claimed_at = me.as_ref().and_then(|j| j.started_at).unwrap_or(now);
            if let Some(broken) = o.cancels.start_violation(job.id, claimed_at, now, v) {
                o.violations.push(broken);
            }
            // Nothing of a paused ordering key starts, unless it was claimed before the pause took
            // hold (a claim sets started_at; a chunk claimed then runs on).
            if let (Some(from), until, Some(PAUSED_KEY)) = (o.key_paused.from, o.key_paused.until, key.as_deref()) {
                let during = |t: i64| t >= from && until.is_none_or(|u| t < u);
                let claimed = me.as_ref().and_then(|j| j.started_at);
                if during(now) && claimed.is_none_or(during) {
                    o.violations.push(format!("key {PAUSED_KEY}: {} started while the key was paused", job.id));
                }
            }
            o.runs.push(RunRecord {
                job: job.id.to_string(),
                key: key.clone(),
                seq,
                order,
                inv: self.inv.clone(),
                start: self.sched.now(),
                ok: None,
                attempt: job.attempt,
                snoozed: false,
                end: None,
                v: body.get("v").and_then(Value::as_i64).unwrap_or(0),
            });
        }
        let at = self.obs.borrow().runs.len() - 1;
        // `"snooze": n` in the body: the job's first n runs snooze.
        let earlier_runs = self.obs.borrow().runs.iter().filter(|r| r.job == job.id).count() as u64 - 1;
        let snooze = earlier_runs < body.get("snooze").and_then(Value::as_u64).unwrap_or(0);
        let limit = me.as_ref().and_then(|j| j.limit_key.clone());
        let _guard = RunGuard {
            obs: self.obs.clone(),
            key: key.clone(),
            limit,
            job: job.id.to_string(),
            inv: self.inv.clone(),
            sched: self.sched.clone(),
            at,
        };

        let hang = !snooze && self.sched.chance(self.faults.hang);
        let result = if snooze {
            self.sched.jitter(1, 400).await;
            Err(JobError::snooze((SNOOZE_MS / 1000) as u32, "not ready (scripted)"))
        } else if hang {
            self.obs.borrow_mut().fire("hang");
            self.sched.pause(self.timeout_ms).await;
            Err(JobError::retry(format!("timed out after {} ms", self.timeout_ms)))
        } else {
            self.sched.jitter(1, 400).await;
            let scripted = body.get("fail").and_then(Value::as_u64).unwrap_or(0);
            if body.get("permanent").and_then(Value::as_bool) == Some(true) {
                Err(JobError::permanent("HTTP 404 (scripted)"))
            } else if u64::from(job.attempt) <= scripted {
                Err(JobError::retry("HTTP 503 (scripted)"))
            } else if self.sched.chance(self.faults.transient) {
                self.obs.borrow_mut().fire("transient");
                Err(JobError::retry("HTTP 502 (injected)"))
            } else {
                Ok(Done::default())
            }
        };
        let mut o = self.obs.borrow_mut();
        o.runs[at].ok = Some(result.is_ok());
        o.runs[at].snoozed = snooze;
        let max_attempts = me.as_ref().map_or(1, |j| j.max_attempts);
        let dead = matches!(result, Err(JobError::Permanent { .. }))
            || (matches!(result, Err(JobError::Retryable { .. })) && i64::from(job.attempt) >= max_attempts);
        if snooze {
            o.not_before.insert(job.id.to_string(), self.sched.now() + SNOOZE_MS - EARLY_ALLOWANCE_MS);
        } else if result.is_ok() || dead {
            o.finished_by.entry(self.inv.clone()).or_default().insert(job.id.to_string());
        } else {
            let due = self.sched.now() + min_backoff_ms(job.attempt, self.backoff) - EARLY_ALLOWANCE_MS;
            o.not_before.insert(job.id.to_string(), due);
        }
        result
    }
}

impl SimRunner {
    /// Batches' oracle at a callback's start (design §25): its payload names every member, in
    /// order, each with the status its row has (DONE or DEAD), unless an operator redrove it
    /// since (or redrove the callback, which then runs with what it was given).
    pub fn batch_violation(&self, o: &mut Observations, job: &str, payload: &Value) -> Option<String> {
        let members = o.batches.get(job)?.clone();
        *o.fired.entry("called_back").or_default() += 1;
        let given = payload["body"]["batch"]["jobs"].as_array().cloned().unwrap_or_default();
        let ids: Vec<&str> = given.iter().filter_map(|m| m["id"].as_str()).collect();
        if ids != members.iter().map(String::as_str).collect::<Vec<_>>() {
            return Some(format!("{job} (a batch's callback) was given {ids:?}, not its members {members:?}"));
        }
        for (m, id) in given.iter().zip(&members) {
            if o.redriven.contains_key(id) || o.redriven.contains_key(job) {
                continue;
            }
            let row = self.dbs.iter().find_map(|db| row(db, id)).map(|j| j.status.as_str().to_string());
            if m["status"].as_str() != row.as_deref() || !matches!(row.as_deref(), Some("DONE" | "DEAD")) {
                return Some(format!(
                    "{job} (a batch's callback) was given {id} {}, its row says {row:?}",
                    m["status"]
                ));
            }
        }
        None
    }

    /// Dependencies' oracle at a handler's start (design §24): each job it runs after is DONE, or
    /// DEAD when it runs anyway. A job an operator redrove is the operator's to start (its waits
    /// were released when a dependency ended DEAD); so is one whose dependency was redriven since
    /// it ended DEAD.
    pub fn dependency_violation(&self, o: &mut Observations, job: &str) -> Option<String> {
        let (after, anyway) = o.deps.get(job)?.clone();
        *o.fired.entry("waited").or_default() += 1;
        if o.redriven.contains_key(job) {
            return None;
        }
        for dep in after.iter().filter(|d| !o.redriven.contains_key(*d)) {
            let status = self.dbs.iter().find_map(|db| row(db, dep)).map(|j| j.status);
            let allowed = status == Some(Status::Done) || (anyway && status == Some(Status::Dead));
            if !allowed {
                return Some(format!("{job} started while {dep}, a job it runs after, is {status:?}"));
            }
        }
        None
    }

    /// Flow control's oracle at a handler's start (design §20): no more running than the limit
    /// key's concurrency, nothing of a paused key, nothing while its breaker is open but the probe
    /// (the breaker's state read from the key's shard). The throttle is checked over every window
    /// once the run is over ([`throttle_violations`]).
    fn limit_oracle(&self, o: &mut Observations, limit: &str, job: &str) {
        let now = self.sched.now();
        let policy = self.limits.for_key(limit);
        let active = o.limit_active.entry(limit.to_string()).or_default();
        active.push((job.to_string(), self.inv.clone()));
        if let Some(n) = policy.concurrency.filter(|&n| active.len() > n as usize) {
            let v = format!("limit {limit}: {} running, its concurrency is {n}: {active:?}", active.len());
            o.violations.push(v);
        }
        o.limit_starts.entry(limit.to_string()).or_default().push(now);
        let db = &self.dbs[Route::key(limit).shard(self.dbs.len())];
        // When its start was asked for: its permit lapses one lease after the ask. A start asked
        // for before a pause took hold, or before the breaker opened, was granted before it (after,
        // it is refused); the run then starts, as a request already let through a breaker goes on.
        let asked: Option<i64> = db
            .conn
            .query_row("SELECT until FROM limit_permit WHERE limit_key = ?1 AND job_id = ?2", [limit, job], |r| {
                r.get::<_, i64>(0)
            })
            .ok()
            .map(|until| until - self.lease_ms);
        if limit == "host-0" {
            if let (Some(from), until) = (o.paused.from, o.paused.until) {
                let during = |t: i64| t >= from && until.is_none_or(|u| t < u);
                if during(now) && asked.is_none_or(during) {
                    o.violations.push(format!("limit {limit}: {job} started while the key was paused"));
                }
            }
        }
        if policy.breaker.is_some() {
            let state: Option<(Option<i64>, Option<String>)> = db
                .conn
                .query_row("SELECT open_until, probe FROM limit_state WHERE limit_key = ?1", [limit], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .ok();
            let opened = o.breaker_opened.get(limit).copied();
            if let Some(v) = breaker_violation(limit, job, now, state, opened, asked) {
                o.violations.push(v);
            }
        }
    }
}

/// The breaker's oracle at a start of `job` (design §20): nothing starts while the breaker is open
/// but a run granted before it opened, nor past its cool-down but the probe. `state`: the key's
/// (`open_until`, probe); `opened`: the opening as first seen (its `open_until`, when); `asked`:
/// when the run's permit was granted.
pub fn breaker_violation(
    limit: &str,
    job: &str,
    now: i64,
    state: Option<(Option<i64>, Option<String>)>,
    opened: Option<(i64, i64)>,
    asked: Option<i64>,
) -> Option<String> {
    // A run let through before the breaker opened goes on, as a request already let through a
    // breaker does: the grant was decided atomically, and only its start follows it.
    let granted_before_it_opened = match (&state, opened, asked) {
        (Some((Some(until), _)), Some((seen_until, opened_at)), Some(asked)) => {
            *until == seen_until && asked <= opened_at
        }
        _ => false,
    };
    match state {
        _ if granted_before_it_opened => None,
        Some((Some(until), _)) if until > now => {
            Some(format!("limit {limit}: {job} started while its breaker was open"))
        }
        Some((Some(_), probe)) if probe.as_deref() != Some(job) => {
            Some(format!("limit {limit}: {job} started while the breaker's probe is {probe:?}"))
        }
        _ => None,
    }
}

/// The throttle's oracle: in any window of a limit key's `per_seconds`, at most `rate + burst`
/// starts (design §20).
pub fn throttle_violations(o: &Observations, limits: &orderly::flow::Policies) -> Vec<String> {
    let mut out = Vec::new();
    for (limit, starts) in &o.limit_starts {
        let Some(t) = limits.for_key(limit).throttle else { continue };
        let (window, most) = (i64::from(t.per_seconds) * 1000, (t.rate + t.burst) as usize);
        let mut starts = starts.clone();
        starts.sort_unstable();
        for (i, &s) in starts.iter().enumerate() {
            let within = starts[i..].iter().take_while(|&&x| x < s + window).count();
            if within > most {
                out.push(format!(
                    "limit {limit}: {within} starts in the {window} ms from +{} ms, at most {most}",
                    s - 1_700_000_000_000
                ));
                break;
            }
        }
    }
    out
}

/// The run rule's oracle, written apart from the SQL it checks: whether `job`, below a run of
/// its key, lets the run start under `on_dead` (DONE; or DEAD under `skip` or skipped by an
/// operator).
fn passable(job: &JobRow, on_dead: OnDead) -> bool {
    job.status == Status::Done || (job.status == Status::Dead && (on_dead == OnDead::Skip || job.skipped_at.is_some()))
}

/// Whether invocation `inv` may have moved past `lower` within its own chain: a success, a
/// DEAD job under `skip` (not yet recorded when the next job of the chunk starts), or a run its
/// cancel stopped (dropped without a result, its job DEAD and skipped: design §22.1). A snooze
/// never lets its key move on.
fn chained_past(o: &Observations, inv: &str, lower: &JobRow, on_dead: OnDead) -> bool {
    let last = o.runs.iter().rev().find(|r| r.job == lower.id && r.inv == inv);
    match last.map(|r| (r.ok, r.snoozed)) {
        Some((Some(true), _)) => true,
        Some((None, _)) => last.is_some_and(|r| r.end.is_some()) && o.cancels.ever.contains(&lower.id),
        Some((Some(false), false)) => on_dead == OnDead::Skip,
        _ => false,
    }
}

/// Counts, for the soak table.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub seeds: u64,
    pub jobs: u64,
    pub faults: u64,
    pub lost: u64,
    pub stuck: u64,
    pub order_violations: u64,
    /// Lock mode's allowed overtakes across a key's resume (order.rs's exemption).
    pub resume_overtakes: u64,
    pub overlaps: u64,
    pub crash_repeats: u64,
    pub other_violations: u64,
    pub deliveries: u64,
    pub crashes: u64,
    /// Jobs Queues dead-lettered (DEAD "delivery attempts exhausted").
    pub dead_lettered: u64,
    /// The most D1 queries one invocation made.
    pub most_queries: u64,
}

pub type Shared<T> = Rc<RefCell<T>>;
pub fn shared<T>(t: T) -> Shared<T> {
    Rc::new(RefCell::new(t))
}
