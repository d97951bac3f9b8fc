//! Strict mode's consumer (design §3b) on the host: the real algorithm over real SQLite and a
//! recording queue. Parking acks, chaining in seq order across invocations, failures holding the
//! head with one delayed wake-up, the run budget's wake-up, `ON_DEAD`, and the ledger's payload
//! being the one that runs.

use std::cell::RefCell;
use std::rc::Rc;

use crate::support::{MemoryQueue, Sqlite};
use futures::executor::block_on;
use orderly::clock::{Clock, ManualClock};
use orderly::config::{Config, OnDead, OrderingMode};
use orderly::consumer::{Consumer, Incoming, Outcome, Role};
use orderly::handlers::{Done, JobContext, JobError, Runner};
use orderly::ledger::{stmt, JobRow, JobSpec, Ledger, Sql, Status};
use orderly::lock::MemoryKv;
use serde_json::{json, Value};

const T0: i64 = 1_700_000_000_000;

/// Runs jobs as their payload says: `{"fail": n}` fails the first n attempts, `{"permanent":
/// true}` fails for good. Records (id, attempt, payload "v").
#[derive(Default)]
struct Script {
    runs: RefCell<Vec<(String, u32, Value)>>,
}

impl Runner for Script {
    async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
        self.runs.borrow_mut().push((
            job.id.to_string(),
            job.attempt,
            job.payload.get("v").cloned().unwrap_or(Value::Null),
        ));
        if job.payload.get("permanent").is_some() {
            return Err(JobError::permanent("HTTP 404"));
        }
        // `{"snooze": n}`: the first n runs of the job snooze for 30 s.
        let runs_so_far = self.runs.borrow().iter().filter(|(id, _, _)| id == job.id).count() as u64;
        if runs_so_far <= job.payload.get("snooze").and_then(Value::as_u64).unwrap_or(0) {
            return Err(JobError::snooze(30, "rate limited"));
        }
        // `{"again": n, "step": k}`: snoozes for 2 s while k < n, the next run getting k + 1 (the
        // handler's own retry state, carried by the snooze); `{"again": "forever"}` never stops.
        if let Some(again) = job.payload.get("again") {
            let step = job.payload.get("step").and_then(Value::as_u64).unwrap_or(0);
            if again.as_u64().is_none_or(|n| step < n) {
                let mut next = job.payload.clone();
                next["step"] = json!(step + 1);
                return Err(JobError::snooze_with(2, "HTTP 429", next));
            }
        }
        if u64::from(job.attempt) <= job.payload.get("fail").and_then(Value::as_u64).unwrap_or(0) {
            return Err(JobError::retry("HTTP 503"));
        }
        Ok(Done::default())
    }
}

struct World {
    clock: Rc<ManualClock>,
    kv: MemoryKv<Rc<ManualClock>>,
    db: Sqlite,
    script: Script,
    queue: MemoryQueue,
    cfg: Config,
    /// What the consumer's random source returns (1.0 leaves a batch's keys in plan order).
    random: std::cell::Cell<f64>,
}

impl World {
    fn new(on_dead: OnDead) -> World {
        let clock = Rc::new(ManualClock::new(T0));
        let cfg = Config { ordering_mode: OrderingMode::Strict, on_dead, ..Config::default() };
        World {
            kv: MemoryKv::new(clock.clone()),
            clock,
            db: Sqlite::temp().0,
            script: Script::default(),
            queue: MemoryQueue::default(),
            cfg,
            random: std::cell::Cell::new(1.0),
        }
    }
    fn run_as(&self, owner: &str, msgs: &[Incoming]) -> Vec<Outcome> {
        let random = || self.random.get();
        let consumer = Consumer::new(&self.cfg, &self.kv, &self.db, &self.script, &self.clock, &self.queue, owner)
            .with_random(&random);
        block_on(consumer.process(Role::Main, msgs))
    }
    fn run(&self, msgs: &[Incoming]) -> Vec<Outcome> {
        self.run_as(&format!("inv-{}", self.clock.now_ms()), msgs)
    }
    fn runs(&self) -> Vec<String> {
        self.script.runs.borrow().iter().map(|(id, _, _)| id.clone()).collect()
    }
    fn job(&self, id: &str) -> JobRow {
        JobRow::first(&block_on(self.db.query(stmt::get(id))).unwrap()).unwrap().expect("row")
    }
    /// Wake-ups sent: (job id, delay).
    fn wakes(&self) -> Vec<(String, u32)> {
        self.queue.sent_with_delay().into_iter().map(|(e, d)| (e.meta.id.unwrap_or_default(), d)).collect()
    }
    /// Records jobs of key `k` through the API's path, in order.
    fn submit(&self, jobs: &[(&str, Value)]) {
        let specs: Vec<JobSpec> = jobs
            .iter()
            .map(|(id, p)| JobSpec {
                id: id.to_string(),
                job_type: Some("t".into()),
                ordering_key: Some("k".into()),
                dedupe_key: None,
                limit_key: None,
                deadline_at: None,
                timeout_seconds: None,
                payload: Some(p.to_string()),
                max_attempts: 8,
                priority: 5,
            })
            .collect();
        block_on(
            Ledger::new(&self.db)
                .enqueue_all(&specs.iter().map(|s| orderly::ledger::Submit::due(s, T0)).collect::<Vec<_>>(), T0),
        )
        .unwrap();
    }
}

fn keyed(id: &str, ts: i64, payload: Value) -> Incoming {
    Incoming {
        id: format!("m-{id}"),
        timestamp_ms: ts,
        body: Ok(json!({"__fedify_ordering_key__": "k", "__fedify_payload__": payload, "__orderly_job__": {"id": id}})),
    }
}

fn ok() -> Value {
    json!({"type": "t"})
}

#[test]
fn out_of_turn_deliveries_are_parked_and_acked_and_the_finisher_chains_to_them() {
    let w = World::new(OnDead::Skip);
    w.submit(&[("a", ok()), ("b", ok()), ("c", ok())]);
    // c and b arrive first, in another invocation than a's: a is the head, so they only park...
    // ...but nothing runs a yet, so the claim for the key takes a, b, c in order at once.
    assert_eq!(w.run(&[keyed("c", T0 + 3, ok()), keyed("b", T0 + 2, ok())]), vec![Outcome::Ack; 2]);
    assert_eq!(w.runs(), vec!["a", "b", "c"], "the claim chains from the head, payloads from the ledger");
    // a's own message comes later: a duplicate of a DONE job, acked without running.
    assert_eq!(w.run(&[keyed("a", T0 + 1, ok())]), vec![Outcome::Ack]);
    assert_eq!(w.runs().len(), 3);
    assert!(["a", "b", "c"].iter().all(|id| w.job(id).status == Status::Done));
    assert!(w.wakes().is_empty(), "no wake-up when nothing is left");
}

#[test]
fn a_delivery_while_the_key_runs_elsewhere_is_parked_for_that_runner() {
    let w = World::new(OnDead::Skip);
    w.submit(&[("a", ok()), ("b", ok())]);
    // Another invocation holds a RUNNING.
    block_on(w.db.query(stmt::claim_next(
        "k",
        "other",
        orderly::ledger::Lease { now: T0, until: T0 + 120_000, due_before: T0 },
        OnDead::Skip,
        1,
        None,
    )))
    .unwrap();
    let trips = w.db.round_trips.get();
    assert_eq!(w.run(&[keyed("b", T0 + 2, ok())]), vec![Outcome::Ack]);
    assert_eq!(w.db.round_trips.get() - trips, 1, "park and claim: one D1 round trip");
    assert!(w.runs().is_empty(), "b must wait for a");
    assert_eq!(w.job("b").status, Status::Pending);
}

#[test]
fn a_failed_head_holds_its_key_and_schedules_one_wake_up_for_its_retry() {
    let w = World::new(OnDead::Skip);
    w.submit(&[("a", json!({"type": "t", "fail": 1})), ("b", ok())]);
    assert_eq!(
        w.run(&[keyed("b", T0 + 2, ok()), keyed("a", T0 + 1, json!({"type": "t", "fail": 1}))]),
        vec![Outcome::Ack; 2]
    );
    assert_eq!(w.runs(), vec!["a"], "b does not overtake the failed a");
    assert_eq!(w.wakes(), vec![("a".to_string(), 5)]);
    let (a, b) = (w.job("a"), w.job("b"));
    assert_eq!((a.status, a.attempts, a.next_run_at), (Status::Pending, 1, T0 + 5_000));
    assert_eq!((b.status, b.attempts), (Status::Pending, 0), "b was handed back, its attempt returned");

    // b's duplicate arrives early: parked again, nothing runs.
    assert_eq!(w.run(&[keyed("b", T0 + 2, ok())]), vec![Outcome::Ack]);
    // The wake-up, delivered 3 s early: deferred until a is due, so the key keeps its wake-up.
    w.clock.advance_ms(2_000);
    assert_eq!(w.run(&[keyed("a", T0 + 1, ok())]), vec![Outcome::Defer { delay_seconds: 3 }]);
    // On time: a runs again, then b, in one chain.
    w.clock.advance_ms(3_000);
    assert_eq!(w.run(&[keyed("a", T0 + 1, ok())]), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["a", "a", "b"]);
    assert_eq!(w.job("b").status, Status::Done);
}

#[test]
fn a_snoozing_head_keeps_its_key_spends_no_attempt_and_wakes_when_its_snooze_ends() {
    let w = World::new(OnDead::Skip);
    let snoozy = json!({"type": "t", "snooze": 2});
    w.submit(&[("a", snoozy.clone()), ("b", ok())]);
    assert_eq!(w.run(&[keyed("a", T0 + 1, snoozy.clone()), keyed("b", T0 + 2, ok())]), vec![Outcome::Ack; 2]);
    assert_eq!(w.runs(), vec!["a"], "b waits behind the snoozing a");
    assert_eq!(w.wakes(), vec![("a".to_string(), 30)], "one wake-up, when the snooze ends");
    let a = w.job("a");
    assert_eq!((a.status, a.attempts, a.next_run_at), (Status::Pending, 0, T0 + 30_000), "no attempt spent");
    // Early: not run.
    w.clock.advance_ms(10_000);
    assert_eq!(w.run(&[keyed("a", T0 + 1, snoozy.clone())]), vec![Outcome::Defer { delay_seconds: 20 }]);
    assert_eq!(w.runs().len(), 1);
    // When the snooze ends a snoozes again, then runs (attempt 1), then b.
    w.clock.advance_ms(20_000);
    w.run(&[keyed("a", T0 + 1, snoozy.clone())]);
    w.clock.advance_ms(30_000);
    w.run(&[keyed("a", T0 + 1, snoozy)]);
    let attempts: Vec<(String, u32)> = w.script.runs.borrow().iter().map(|(id, at, _)| (id.clone(), *at)).collect();
    let want: Vec<(String, u32)> =
        [("a", 1), ("a", 1), ("a", 1), ("b", 1)].iter().map(|(i, n)| (i.to_string(), *n)).collect();
    assert_eq!(attempts, want, "every run of a is its first attempt");
    assert_eq!((w.job("a").status, w.job("a").attempts), (Status::Done, 1));
    let h = block_on(orderly::ledger::Ledger::new(&w.db).events("a")).unwrap();
    let outcomes: Vec<String> = h.iter().filter_map(|e| e.outcome.map(|o| format!("{o:?}"))).collect();
    assert_eq!(outcomes, vec!["Snooze", "Snooze", "Done"]);
}

#[test]
fn a_snooze_carries_the_next_runs_payload_and_the_job_keeps_its_place() {
    let w = World::new(OnDead::Skip);
    let retrying = json!({"type": "t", "again": 2, "v": "a"});
    w.submit(&[("a", retrying.clone()), ("b", json!({"type": "t", "v": "b"}))]);
    w.run(&[keyed("a", T0 + 1, retrying.clone()), keyed("b", T0 + 2, ok())]);
    for _ in 0..2 {
        w.clock.advance_ms(2_000);
        w.run(&[keyed("a", T0 + 1, retrying.clone())]);
    }
    let runs: Vec<(String, u32, Value)> = w.script.runs.borrow().clone();
    let steps: Vec<Value> = runs.iter().filter(|(id, _, _)| id == "a").map(|(_, _, v)| v.clone()).collect();
    assert_eq!(steps, vec![json!("a"); 3]);
    assert_eq!(w.runs(), vec!["a", "a", "a", "b"], "b waits for a's snoozes");
    let a = w.job("a");
    assert_eq!((a.status, a.attempts, a.snoozes), (Status::Done, 1, 2));
    let stored: Value = serde_json::from_str(a.payload.as_deref().unwrap()).unwrap();
    assert_eq!(stored["step"], 2, "each run got the payload the snooze before it gave");
}

#[test]
fn snoozing_for_ever_ends_dead_at_max_snoozes_and_the_key_moves_on() {
    let mut w = World::new(OnDead::Skip);
    w.cfg.max_snoozes = 3;
    let forever = json!({"type": "t", "again": "forever"});
    w.submit(&[("a", forever.clone()), ("b", ok())]);
    w.run(&[keyed("a", T0 + 1, forever.clone()), keyed("b", T0 + 2, ok())]);
    for _ in 0..3 {
        w.clock.advance_ms(2_000);
        w.run(&[keyed("a", T0 + 1, forever.clone())]);
    }
    let a = w.job("a");
    assert_eq!((a.status, a.attempts, a.snoozes), (Status::Dead, 1, 3));
    assert_eq!(
        a.last_error.as_deref(),
        Some("HTTP 429: snoozed 3 times already, MAX_SNOOZES (3) allows no more"),
        "the reason says which limit ended it"
    );
    assert_eq!(w.runs(), vec!["a", "a", "a", "a", "b"], "ON_DEAD = skip: the key moves on");
}

#[test]
fn a_delay_is_kept_in_full_whatever_delivery_finds_the_head() {
    // Any delivery for a key can find its head; one a second before the head's snooze ends must
    // not run it (Retry-After: 2 means two seconds).
    let w = World::new(OnDead::Skip);
    let twice = json!({"type": "t", "again": 1});
    w.submit(&[("a", twice.clone()), ("b", ok()), ("c", ok())]);
    w.run(&[keyed("a", T0 + 1, twice.clone())]);
    assert_eq!(w.runs(), vec!["a"]);
    w.clock.advance_ms(1_000);
    w.run(&[keyed("b", T0 + 2, ok())]);
    assert_eq!(w.runs(), vec!["a"], "a's 2 s snooze is not cut short by b's delivery");
    w.clock.advance_ms(1_000);
    w.run(&[keyed("c", T0 + 3, ok())]);
    assert_eq!(w.runs(), vec!["a", "a", "b", "c"]);
}

#[test]
fn the_run_budget_leaves_the_rest_to_one_wake_up() {
    let mut w = World::new(OnDead::Skip);
    w.cfg.strict_run_budget = 2;
    w.submit(&[("a", ok()), ("b", ok()), ("c", ok()), ("d", ok())]);
    assert_eq!(w.run(&[keyed("a", T0, ok())]), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["a", "b"]);
    assert_eq!(w.wakes(), vec![("c".to_string(), 0)], "one wake-up, for the key's head");
    assert_eq!((w.job("c").status, w.job("c").attempts), (Status::Pending, 0));
    assert_eq!(w.run(&[keyed("c", T0, ok())]), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["a", "b", "c", "d"]);
}

#[test]
fn keys_claim_within_the_run_budget_so_no_claimed_job_is_handed_back() {
    let mut w = World::new(OnDead::Skip);
    w.cfg.strict_run_budget = 4;
    let batch: Vec<Incoming> = ["x", "y", "z"]
        .iter()
        .flat_map(|k| (1..=4).map(move |i| (*k, i)))
        .map(|(k, i)| Incoming {
            id: format!("m-{k}{i}"),
            timestamp_ms: T0 + i,
            body: Ok(json!({"__fedify_ordering_key__": k, "__fedify_payload__": ok(), "__orderly_job__": {"id": format!("{k}{i}")}})),
        })
        .collect();
    assert_eq!(w.run(&batch), vec![Outcome::Ack; 12]);
    assert_eq!(w.runs().len(), 4, "the budget: {:?}", w.runs());
    // A job claimed and then handed back would be PENDING with a deferral: each costs two writes.
    let ids: Vec<String> = ["x", "y", "z"].iter().flat_map(|k| (1..=4).map(move |i| format!("{k}{i}"))).collect();
    let handed_back: Vec<&String> = ids.iter().filter(|id| w.job(id).deferrals > 0).collect();
    assert!(handed_back.is_empty(), "claimed, not run, handed back: {handed_back:?}");
    assert_eq!(w.wakes().len(), 3, "each key left for its wake-up: {:?}", w.wakes());
}

#[test]
fn a_chain_starts_with_a_small_claim_so_a_failure_hands_back_little() {
    let w = World::new(OnDead::Skip);
    let ids: Vec<String> = (0..40).map(|i| format!("j{i:02}")).collect();
    let jobs: Vec<(&str, Value)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), if i == 2 { json!({"type": "t", "fail": 1}) } else { ok() }))
        .collect();
    w.submit(&jobs);
    w.run(&[keyed("j00", T0, ok())]);
    assert_eq!(w.runs(), vec!["j00", "j01", "j02"], "the chain stops at the failure");
    // The rest of the first claim is handed back (a row written twice each); a whole chunk
    // claimed at once would hand back 37.
    let handed_back = ids.iter().filter(|id| w.job(id).deferrals > 0).count();
    assert_eq!(handed_back, orderly::consumer::FIRST_CHUNK as usize - 3);
}

#[test]
fn a_dead_head_is_skipped_under_skip_and_blocks_under_block() {
    for (on_dead, expect) in [(OnDead::Skip, vec!["a", "b"]), (OnDead::Block, vec!["a"])] {
        let w = World::new(on_dead);
        w.submit(&[("a", json!({"type": "t", "permanent": true})), ("b", ok())]);
        assert_eq!(w.run(&[keyed("a", T0, ok())]), vec![Outcome::Ack]);
        assert_eq!(w.runs(), expect, "{on_dead:?}");
        assert_eq!(w.job("a").status, Status::Dead);
        assert!(w.wakes().is_empty());
    }
}

#[test]
fn direct_producers_get_first_recorded_order_by_send_time_within_a_batch() {
    let w = World::new(OnDead::Skip);
    let out = w.run(&[keyed("y", T0 + 2, ok()), keyed("x", T0 + 1, ok()), keyed("z", T0 + 3, ok())]);
    assert_eq!(out, vec![Outcome::Ack; 3]);
    assert_eq!(w.runs(), vec!["x", "y", "z"]);
    assert_eq!((w.job("x").seq, w.job("y").seq, w.job("z").seq), (Some(1), Some(2), Some(3)));
}

#[test]
fn the_ledgers_payload_runs_not_the_messages() {
    let w = World::new(OnDead::Skip);
    w.submit(&[("a", json!({"type": "t", "v": "recorded"}))]);
    w.run(&[keyed("a", T0, json!({"type": "t", "v": "forged"}))]);
    assert_eq!(w.script.runs.borrow()[0].2, json!("recorded"));
}

#[test]
fn an_outage_while_parking_defers_every_keyed_message() {
    let w = World::new(OnDead::Skip);
    w.db.down.set(true);
    let out = w.run(&[keyed("a", T0, ok()), keyed("b", T0, ok())]);
    assert_eq!(out, vec![Outcome::Defer { delay_seconds: 30 }; 2]);
    assert!(w.runs().is_empty());
}

#[test]
fn unkeyed_messages_in_strict_mode_run_as_in_lock_mode_without_touching_kv() {
    let w = World::new(OnDead::Skip);
    let unkeyed = Incoming { id: "u".into(), timestamp_ms: T0, body: Ok(ok()) };
    assert_eq!(w.run(&[unkeyed, keyed("a", T0, ok())]), vec![Outcome::Ack; 2]);
    assert_eq!(w.job("u").status, Status::Done);
    assert_eq!(w.job("a").status, Status::Done);
    assert_eq!(w.kv.ops.get(), 0, "strict mode takes no KV lock");
}

#[test]
fn a_batch_with_more_keys_than_run_at_once_claims_the_rest_as_chains_finish() {
    let w = World::new(OnDead::Skip);
    // Nine keys, two jobs each, in one batch: six are claimed while parking, three later.
    let msgs: Vec<Incoming> = (0..9)
        .flat_map(|k| {
            (0..2).map(move |n| Incoming {
                id: format!("m{k}-{n}"),
                timestamp_ms: T0 + n,
                body: Ok(json!({"__fedify_ordering_key__": format!("key{k}"), "__fedify_payload__": {"type": "t"}, "__orderly_job__": {"id": format!("j{k}-{n}")}})),
            })
        })
        .collect();
    assert_eq!(w.run(&msgs), vec![Outcome::Ack; 18]);
    let runs = w.runs();
    assert_eq!(runs.len(), 18, "every key ran: {runs:?}");
    for k in 0..9 {
        let first = runs.iter().position(|r| r == &format!("j{k}-0")).unwrap();
        let second = runs.iter().position(|r| r == &format!("j{k}-1")).unwrap();
        assert!(first < second, "key{k} in order");
    }
    assert!(w.wakes().is_empty());
}

#[test]
fn a_key_another_invocation_claimed_first_is_left_to_it() {
    let w = World::new(OnDead::Skip);
    let msgs: Vec<Incoming> = (0..8)
        .map(|k| Incoming {
            id: format!("m{k}"),
            timestamp_ms: T0,
            body: Ok(json!({"__fedify_ordering_key__": format!("key{k}"), "__fedify_payload__": {"type": "t"}, "__orderly_job__": {"id": format!("j{k}")}})),
        })
        .collect();
    // Every key gets a second job that another invocation is already running.
    for k in 0..8 {
        let spec = JobSpec {
            id: format!("other{k}"),
            job_type: Some("t".into()),
            ordering_key: Some(format!("key{k}")),
            dedupe_key: None,
            limit_key: None,
            deadline_at: None,
            timeout_seconds: None,
            payload: Some(ok().to_string()),
            max_attempts: 8,
            priority: 5,
        };
        block_on(w.db.query(stmt::park(&spec, T0))).unwrap();
        let lease = orderly::ledger::Lease { now: T0, until: T0 + 120_000, due_before: T0 };
        block_on(w.db.query(stmt::claim_next(&format!("key{k}"), "other", lease, OnDead::Skip, 1, None))).unwrap();
    }
    assert_eq!(w.run(&msgs), vec![Outcome::Ack; 8]);
    assert!(w.runs().is_empty(), "every key runs elsewhere: parked only");
    assert!(w.wakes().is_empty(), "their runner chains to them");
}

#[test]
fn a_chain_stops_before_the_invocations_wall_clock_limit_and_wakes_the_key() {
    let w = World::new(OnDead::Skip);
    // A runner that takes five minutes per job, on the shared clock.
    struct Slow<'a>(&'a ManualClock, RefCell<Vec<String>>);
    impl Runner for Slow<'_> {
        async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
            self.1.borrow_mut().push(job.id.to_string());
            self.0.advance_ms(300_000);
            Ok(Done::default())
        }
    }
    w.submit(&[("a", ok()), ("b", ok()), ("c", ok()), ("d", ok())]);
    let slow = Slow(&w.clock, RefCell::default());
    let consumer = Consumer::new(&w.cfg, &w.kv, &w.db, &slow, &w.clock, &w.queue, "inv").with_random(&|| 0.5);
    assert_eq!(block_on(consumer.process(Role::Main, &[keyed("a", T0, ok())])), vec![Outcome::Ack]);
    assert_eq!(*slow.1.borrow(), vec!["a", "b", "c"], "the fourth would end past 15 minutes");
    assert_eq!((w.job("d").status, w.job("d").attempts), (Status::Pending, 0));
    assert_eq!(w.wakes(), vec![("d".to_string(), 0)]);
}

#[test]
fn a_chain_that_stalled_past_its_lease_runs_nothing_more() {
    let (db, path) = Sqlite::temp();
    let mut w = World::new(OnDead::Skip);
    w.db = db;
    w.submit(&[("a", ok()), ("b", ok()), ("c", ok())]);
    // `a` takes 100 s (past the point where leases are renewed); meanwhile the reaper takes `b`.
    struct Stall<'a>(&'a ManualClock, std::path::PathBuf, RefCell<Vec<String>>);
    impl Runner for Stall<'_> {
        async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
            self.2.borrow_mut().push(job.id.to_string());
            if job.id == "a" {
                Sqlite::open(&self.1)
                    .conn
                    .execute(
                        "UPDATE job SET status = 'PENDING', lease_owner = NULL, lease_until = NULL WHERE id = 'b'",
                        [],
                    )
                    .unwrap();
                self.0.advance_ms(100_000);
            }
            Ok(Done::default())
        }
    }
    let runner = Stall(&w.clock, path, RefCell::default());
    let consumer = Consumer::new(&w.cfg, &w.kv, &w.db, &runner, &w.clock, &w.queue, "inv").with_random(&|| 0.5);
    block_on(consumer.process(Role::Main, &[keyed("a", T0, ok())]));
    assert_eq!(*runner.2.borrow(), vec!["a"], "b may be another invocation's now, and c waits behind it");
    assert_eq!(w.job("a").status, Status::Done, "what ran is recorded");
    assert_eq!((w.job("c").status, w.job("c").attempts), (Status::Pending, 0), "c handed back");
}

fn on_key(id: &str, key: &str, ts: i64, priority: u8) -> Incoming {
    Incoming {
        id: format!("m-{id}"),
        timestamp_ms: ts,
        body: Ok(json!({"__fedify_ordering_key__": key, "__fedify_payload__": ok(),
                        "__orderly_job__": {"id": id, "priority": priority}})),
    }
}

#[test]
fn the_most_urgent_keys_start_first_and_a_key_runs_in_order_whatever_its_priorities() {
    let w = World::new(OnDead::Skip);
    // Keys are shuffled (so concurrent invocations spread over them); priority must still win.
    w.random.set(0.0);
    // Eight keys, six chains at once: the urgent key must be in the first wave, and start first.
    let mut batch: Vec<Incoming> = (0..8).map(|i| on_key(&format!("j{i}"), &format!("k{i}"), T0 + i, 5)).collect();
    batch.push(on_key("late-urgent", "k9", T0 + 20, 0));
    // One key with mixed priorities: its order is its record order, not its priorities.
    batch.push(on_key("first", "mixed", T0 + 30, 9));
    batch.push(on_key("second", "mixed", T0 + 31, 0));
    assert_eq!(w.run(&batch), vec![Outcome::Ack; 11]);
    let runs = w.runs();
    assert_eq!(runs.len(), 11);
    let at = |id: &str| runs.iter().position(|r| r == id).unwrap();
    let first_normal = (0..8).map(|i| at(&format!("j{i}"))).min().unwrap();
    assert!(
        at("late-urgent") < first_normal && at("first") < first_normal,
        "the two urgent keys start first: {runs:?}"
    );
    assert_eq!(at("second"), at("first") + 1, "the key runs in its order: {runs:?}");
    assert_eq!(w.job("second").priority, 0);
}

#[test]
fn a_chains_runs_are_in_each_jobs_history() {
    let w = World::new(OnDead::Skip);
    w.submit(&[("a", json!({"type": "t", "fail": 1})), ("b", ok())]);
    w.run(&[keyed("a", T0, ok())]);
    w.clock.advance_ms(3_600_000);
    w.run(&[keyed("a", T0, ok())]);
    let outcomes = |id: &str| {
        block_on(orderly::ledger::Ledger::new(&w.db).events(id))
            .unwrap()
            .iter()
            .map(|e| (e.attempt, e.outcome))
            .collect::<Vec<_>>()
    };
    use orderly::ledger::history::RunOutcome::{Done as Ok_, Retry};
    assert_eq!(outcomes("a"), vec![(Some(1), Some(Retry)), (Some(2), Some(Ok_))]);
    assert_eq!(outcomes("b"), vec![(Some(1), Some(Ok_))]);
}

/// A job of key `k` under the limit key `host`, as the API records it.
fn limited(id: &str) -> JobSpec {
    JobSpec {
        id: id.to_string(),
        job_type: Some("t".into()),
        ordering_key: Some("k".into()),
        dedupe_key: None,
        limit_key: Some("host".into()),
        deadline_at: None,
        timeout_seconds: None,
        payload: Some(ok().to_string()),
        max_attempts: 8,
        priority: 5,
    }
}

#[test]
fn a_throttled_head_holds_its_key_and_wakes_once_for_its_start() {
    let mut w = World::new(OnDead::Skip);
    w.cfg.limits = orderly::flow::Policies::parse(r#"{"host": {"rate": 1, "per_seconds": 30}}"#).unwrap();
    let specs = [limited("a"), limited("b"), limited("c")];
    block_on(
        Ledger::new(&w.db)
            .enqueue_all(&specs.iter().map(|s| orderly::ledger::Submit::due(s, T0)).collect::<Vec<_>>(), T0),
    )
    .unwrap();
    assert_eq!(w.run(&[keyed("a", T0, ok())]), vec![Outcome::Ack]);
    // a ran; b is the head now, and the host's next start is 30 s away: b waits for it, c behind.
    assert_eq!(w.runs(), vec!["a"]);
    assert_eq!(w.wakes(), vec![("b".to_string(), 30)], "one wake-up, at b's start");
    let b = w.job("b");
    assert_eq!((b.status, b.attempts, b.next_run_at), (Status::Pending, 0, T0 + 30_000));
    assert_eq!(w.job("c").status, Status::Pending);
    w.clock.advance_ms(30_000);
    assert_eq!(w.run(&[keyed("b", T0 + 30_000, ok())]), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["a", "b"], "c waits its own turn of the throttle");
    assert_eq!(w.wakes().last(), Some(&("c".to_string(), 30)));
}

#[test]
fn a_chain_of_limited_jobs_claims_one_at_a_time_so_a_refusal_hands_back_one() {
    let mut w = World::new(OnDead::Skip);
    w.cfg.limits = orderly::flow::Policies::parse(r#"{"host": {"rate": 1, "per_seconds": 30}}"#).unwrap();
    let ids: Vec<String> = (0..20).map(|i| format!("j{i:02}")).collect();
    let specs: Vec<JobSpec> = ids.iter().map(|id| limited(id)).collect();
    block_on(
        Ledger::new(&w.db)
            .enqueue_all(&specs.iter().map(|s| orderly::ledger::Submit::due(s, T0)).collect::<Vec<_>>(), T0),
    )
    .unwrap();
    let message = Incoming {
        id: "m-j00".into(),
        timestamp_ms: T0,
        body: Ok(json!({"__fedify_ordering_key__": "k", "__fedify_payload__": ok(),
                        "__orderly_job__": {"id": "j00", "limit_key": "host"}})),
    };
    assert_eq!(w.run(&[message]), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["j00"], "the host's next start is 30 s away");
    // Only j01 was claimed after j00 and handed back when refused; a chunk claimed ahead (16, 32)
    // would have handed back every job behind it too.
    let handed_back: Vec<&String> = ids.iter().filter(|id| w.job(id).deferrals > 0).collect();
    assert_eq!(handed_back, vec!["j01"]);
}

/// A message for a job as the producer sends it: key `key`, limit key `host`.
fn limited_message(id: &str, key: &str, ts: i64) -> Incoming {
    Incoming {
        id: format!("m-{id}"),
        timestamp_ms: ts,
        body: Ok(json!({"__fedify_ordering_key__": key, "__fedify_payload__": ok(),
                        "__orderly_job__": {"id": id, "limit_key": "host"}})),
    }
}

/// A world whose limit key `host` (concurrency 1) has its only slot held by `x`, of another key.
fn host_held_by_x() -> World {
    let mut w = World::new(OnDead::Skip);
    w.cfg.limits = orderly::flow::Policies::parse(r#"{"host": {"concurrency": 1}}"#).unwrap();
    block_on(Ledger::new(&w.db).acquire(&x_ask(&w), T0)).unwrap();
    w
}

/// `x`'s ask of `host`'s slot (see [`host_held_by_x`]).
fn x_ask(w: &World) -> orderly::ledger::limit::Ask<'static> {
    orderly::ledger::limit::Ask {
        limit_key: "host",
        job_id: "x",
        route: orderly::ledger::Route::key("k2"),
        until: T0 + 120_000,
        policy: w.cfg.limits.for_key("host"),
        pace_ms: 0,
    }
}

/// `x` ends a second later: its slot goes to the oldest job in `host`'s line, whose wake-up (the
/// message the release sends) comes back to be delivered.
fn x_ends_and_wakes(w: &World) -> Incoming {
    w.clock.advance_ms(1_000);
    let ledger = Ledger::new(&w.db);
    let x = x_ask(w);
    let release = orderly::ledger::limit::Release {
        limit_key: "host",
        job_id: "x",
        until: x.until,
        verdict: orderly::flow::RunVerdict::Succeeded,
        policy: x.policy,
    };
    let woken = block_on(ledger.release(&release, w.clock.now_ms())).unwrap();
    block_on(orderly::producer::wake(&ledger, &w.queue, &woken, 2, None)).unwrap();
    let body = serde_json::from_str(w.queue.batches.borrow().last().unwrap()[0].json()).unwrap();
    Incoming { id: "m-wake".into(), timestamp_ms: w.clock.now_ms(), body: Ok(body) }
}

#[test]
fn a_parked_head_is_not_due_so_its_keys_deliveries_only_park_and_its_wake_up_makes_it_due() {
    let w = host_held_by_x();
    // a is refused and parked: handed back, not due until the recheck.
    assert_eq!(w.run(&[limited_message("a", "k", T0)]), vec![Outcome::Ack]);
    let a = w.job("a");
    assert_eq!((a.status, a.attempts, a.deferrals), (Status::Pending, 0, 1));
    assert_eq!(a.next_run_at, T0 + i64::from(orderly::flow::PARKED_RECHECK_SECONDS) * 1000);
    // b, behind a: its delivery parks it and claims nothing (no claim, no ask, no hand-back).
    let trips = w.db.round_trips.get();
    assert_eq!(w.run(&[limited_message("b", "k", T0 + 1)]), vec![Outcome::Ack]);
    assert_eq!(w.db.round_trips.get() - trips, 1, "one round trip: the park");
    assert_eq!((w.job("a").deferrals, w.job("b").deferrals), (1, 0));
    assert!(w.runs().is_empty());
    // x ends: its slot is handed to a, whose wake-up says so; delivered, it makes a due and runs,
    // and the chain goes on to b.
    let wake_up = x_ends_and_wakes(&w);
    let sent = w.queue.sent();
    let wake = sent.last().expect("a's wake-up");
    assert!(wake.meta.woken, "the message says it is a wake-up");
    assert_eq!(w.run(std::slice::from_ref(&wake_up)), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["a", "b"]);
    // A copy of the wake-up delivered later changes nothing.
    assert_eq!(w.run(&[wake_up]), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["a", "b"]);
}

#[test]
fn a_job_woken_behind_its_keys_head_gives_its_slot_back_to_the_line_at_once() {
    // Issue 38, found by the simulation's line check: a died and the key moved on to b, which
    // parked for host's one slot; an operator redrove a, which came back as k's head and parked
    // behind b. x's end handed the slot to b, the line's oldest; b's wake-up, delivered, claims
    // nothing while a is k's head, and the slot stood empty until its hand-off lapsed (30 s), the
    // line left to maintenance. b must give it back at once: it goes to a, which runs, then b.
    let mut w = World::new(OnDead::Skip);
    w.cfg.limits = orderly::flow::Policies::parse(r#"{"host": {"concurrency": 1}}"#).unwrap();
    let dies = Incoming {
        id: "m-a".into(),
        timestamp_ms: T0,
        body: Ok(json!({"__fedify_ordering_key__": "k", "__fedify_payload__": {"permanent": true},
                        "__orderly_job__": {"id": "a", "limit_key": "host"}})),
    };
    assert_eq!(w.run(&[dies]), vec![Outcome::Ack]);
    assert_eq!(w.job("a").status, Status::Dead);
    block_on(Ledger::new(&w.db).acquire(&x_ask(&w), T0)).unwrap();
    assert_eq!(w.run(&[limited_message("b", "k", T0 + 1)]), vec![Outcome::Ack], "b parks: x holds the slot");
    block_on(w.db.query(stmt::redrive("a", T0 + 2))).unwrap();
    w.clock.advance_ms(2);
    assert_eq!(w.run(&[limited_message("a", "k", T0 + 2)]), vec![Outcome::Ack], "a, k's head again, parks behind b");
    assert_eq!(w.job("a").deferrals, 1);
    let b_woken = x_ends_and_wakes(&w);
    assert_eq!(w.wakes().last().map(|(id, _)| id.as_str()), Some("b"), "the slot goes to b, the line's oldest");
    assert_eq!(w.run(&[b_woken]), vec![Outcome::Ack]);
    let (id, delay) = w.wakes().last().cloned().unwrap();
    assert_eq!((id.as_str(), delay), ("a", 0), "b gave its slot back at once, and a was woken to take it");
    let a_woken = Incoming {
        id: "m-wake-a".into(),
        timestamp_ms: w.clock.now_ms(),
        body: Ok(serde_json::from_str(w.queue.batches.borrow().last().unwrap()[0].json()).unwrap()),
    };
    assert_eq!(w.run(&[a_woken]), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["a", "a", "b"], "a, redriven, then b, in k's order");
}

#[test]
fn a_head_put_off_for_its_breaker_s_cool_down_comes_back_as_a_wake_up() {
    // Issue 38, found by the soak's line check: a head put off for the cool-down may hold a slot
    // handed to it; should an operator's redrive put an earlier job of its key back ahead of it,
    // its message, claiming nothing, must give that slot back as a wake-up does. Sent as a plain
    // message, it gave nothing, and the job ahead waited for maintenance.
    let mut w = World::new(OnDead::Skip);
    w.cfg.limits = orderly::flow::Policies::parse(r#"{"host": {"trip_after": 1, "cooldown_seconds": 30}}"#).unwrap();
    let ledger = Ledger::new(&w.db);
    let x = x_ask(&w);
    block_on(ledger.acquire(&x, T0)).unwrap();
    let failed = orderly::ledger::limit::Release {
        limit_key: "host",
        job_id: "x",
        until: x.until,
        verdict: orderly::flow::RunVerdict::Failed { retry_after_ms: 0 },
        policy: x.policy,
    };
    block_on(ledger.release(&failed, T0)).unwrap();
    assert_eq!(w.run(&[limited_message("a", "k", T0 + 1)]), vec![Outcome::Ack]);
    assert!(w.runs().is_empty(), "the breaker is open");
    let sent = w.queue.sent();
    let back = sent.last().expect("a's message, put off for the cool-down");
    assert_eq!(back.meta.id.as_deref(), Some("a"));
    assert!(back.meta.woken, "put off by its limit key, it comes back as a wake-up");
}

#[test]
fn an_unkeyed_job_parked_for_its_limit_key_stays_due_so_its_wake_up_runs_it() {
    // Issue 38: an unkeyed job takes the lock-mode path, whose claim does not read a wake-up's
    // mark; parked not due, as a keyed head is, its wake-up found it not due and was put off to
    // the recheck (30 s) while the slot handed to it stood empty. It has no key whose other
    // deliveries it must stop, so it parks due, as in lock mode.
    let w = host_held_by_x();
    let unkeyed = Incoming {
        id: "m-u".into(),
        timestamp_ms: T0,
        body: Ok(json!({"__fedify_payload__": ok(), "__orderly_job__": {"id": "u", "limit_key": "host"}})),
    };
    assert_eq!(w.run(&[unkeyed]), vec![Outcome::Ack]);
    let u = w.job("u");
    assert_eq!((u.status, u.deferrals, u.next_run_at), (Status::Pending, 1, T0), "parked, and due");
    assert_eq!(w.run(&[x_ends_and_wakes(&w)]), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["u"], "its wake-up runs it");
}

#[test]
fn a_wake_up_makes_a_job_due_only_while_it_is_parked() {
    let w = World::new(OnDead::Skip);
    let spec = limited("a");
    // Waiting for its submission delay (as for a backoff or a snooze): not parked, left alone.
    block_on(Ledger::new(&w.db).enqueue_all(&[orderly::ledger::Submit::due(&spec, T0 + 30_000)], T0)).unwrap();
    assert!(block_on(w.db.query(stmt::wake_parked("a", T0))).unwrap().is_empty());
    assert_eq!(w.job("a").next_run_at, T0 + 30_000, "a wait that is not a parking is never cut short");
    // Claimed, refused, parked: its wake-up makes it due.
    let at = T0 + 30_000;
    let lease = orderly::ledger::Lease { now: at, until: at + 120_000, due_before: at };
    block_on(w.db.query(stmt::claim_next("k", "inv", lease, OnDead::Skip, 1, None))).unwrap();
    block_on(w.db.query(stmt::defer("a", "inv", at, at + 30_000, true))).unwrap();
    assert_eq!(block_on(w.db.query(stmt::wake_parked("a", at + 1))).unwrap().len(), 1);
    assert_eq!(w.job("a").next_run_at, at + 1);
    // A claim ends the parking: a later copy of the wake-up finds nothing parked.
    block_on(w.db.query(stmt::claim_next(
        "k",
        "inv",
        orderly::ledger::Lease { now: at + 2, until: at + 120_002, due_before: at + 2 },
        OnDead::Skip,
        1,
        None,
    )))
    .unwrap();
    block_on(w.db.query(stmt::defer("a", "inv", at + 2, at + 60_000, false))).unwrap();
    assert!(block_on(w.db.query(stmt::wake_parked("a", at + 3))).unwrap().is_empty());
    assert_eq!(w.job("a").next_run_at, at + 60_000);
}
