//! Cancelling running jobs, cancelling many, superseding and debouncing (design §22): the real
//! consumer, API and maintenance over one SQLite ledger, a run's cancel watch driven by a sleep
//! port that moves the manual clock, and an operator's cancel landing while a run goes on.

use std::cell::{Cell, RefCell};

use futures::executor::block_on;
use orderly::clock::Clock;
use orderly::config::{Config, OnDead, OrderingMode};
use orderly::consumer::{Consumer, Incoming, Role, CANCEL_CHECK_MS, CANCEL_REACH_MS};
use orderly::handlers::{Done, JobContext, JobError, Runner};
use orderly::ledger::{Ledger, Status};
use serde_json::{json, Value};

use crate::support::api::T0;
use crate::support::consumer::ConsumerWorld;

/// How a test handler meets a cancel: `cooperate` stops when its run is cancelled and returns a
/// result; `ignore` never ends by itself; anything else succeeds at once.
#[derive(Default)]
struct Holding {
    runs: RefCell<Vec<String>>,
}

impl Runner for Holding {
    async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
        self.runs.borrow_mut().push(job.id.to_string());
        match job.payload["body"]["mode"].as_str() {
            Some("cooperate") => {
                job.cancel.cancelled().await;
                Ok(Done { result: Some(json!({"stopped": "early"})), http_status: Some(200) })
            }
            Some("ignore") => std::future::pending().await,
            _ => Ok(Done::default()),
        }
    }
}

fn job(id: &str, key: Option<&str>, mode: &str) -> Value {
    json!({"id": id, "ordering_key": key,
           "payload": {"type": "webhook", "url": "https://h.test/", "body": {"mode": mode}}})
}

/// One invocation over `msgs` with `runner`, whose cancel watch's sleep moves the clock; on its
/// `cancel_at`-th sleep an operator (another invocation) cancels job `cancel`.
fn run_cancelling(w: &ConsumerWorld, runner: &Holding, msgs: &[Incoming], cancel: &str, cancel_at: u32) {
    let sleeps = Cell::new(0u32);
    let sleep = |ms: i64| -> futures::future::LocalBoxFuture<'_, ()> {
        w.clock.advance_ms(ms);
        sleeps.set(sleeps.get() + 1);
        let now = sleeps.get() == cancel_at;
        Box::pin(async move {
            if now {
                let r = w.call_async("POST", &format!("/jobs/{cancel}/cancel"), None).await;
                assert_eq!(r.status, 202, "a RUNNING job is asked to stop: {}", r.body);
            }
        })
    };
    let consumer = Consumer::new(&w.cfg, &w.kv, &w.db, runner, &w.clock, &w.queue, "inv-a").with_sleep(&sleep);
    block_on(consumer.process(Role::Main, msgs));
}

fn strict(on_dead: OnDead) -> ConsumerWorld {
    ConsumerWorld::new(Config { ordering_mode: OrderingMode::Strict, on_dead, ..Config::default() })
}

#[test]
fn a_running_job_cancelled_stops_ends_dead_cancelled_with_its_result_and_its_key_moves_on() {
    for mode in [OrderingMode::Strict, OrderingMode::Lock] {
        let w = ConsumerWorld::new(Config { ordering_mode: mode, on_dead: OnDead::Block, ..Config::default() });
        assert_eq!(w.call("POST", "/jobs", Some(job("a", Some("k"), "cooperate"))).status, 202);
        assert_eq!(w.call("POST", "/jobs", Some(job("b", Some("k"), "quick"))).status, 202);
        let runner = Holding::default();
        let started = w.clock.now_ms();
        run_cancelling(&w, &runner, &w.sent_since(), "a", 1);
        let a = w.job("a");
        assert_eq!((a.status, a.last_error.as_deref()), (Status::Dead, Some("cancelled")), "{mode:?}: {a:?}");
        assert!(a.result.as_deref().is_some_and(|r| r.contains("early")), "the result it returned is kept: {a:?}");
        assert!(a.lease_owner.is_none() && a.skipped_at.is_some(), "lease given up, key moved past it: {a:?}");
        assert!(a.finished_at.unwrap_or(i64::MAX) - started <= CANCEL_REACH_MS, "{mode:?}: within the bound");
        // Its key's next job runs (strict mode: even under ON_DEAD = block).
        w.drain_with(&runner);
        assert_eq!(w.job("b").status, Status::Done, "{mode:?}");
        let history = w.call("GET", "/jobs/a", None).json_body()["history"].clone();
        let kinds: Vec<&str> = history.as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
        assert_eq!(kinds, ["cancel_requested", "attempt"], "{mode:?}: {history}");
        assert_eq!(history[1]["error"], "cancelled");
    }
}

#[test]
fn a_handler_that_ignores_its_cancel_is_dropped_after_the_grace_and_never_runs_again() {
    let w = strict(OnDead::Skip);
    w.call("POST", "/jobs", Some(job("a", Some("k"), "ignore")));
    let runner = Holding::default();
    let started = w.clock.now_ms();
    run_cancelling(&w, &runner, &w.sent_since(), "a", 2);
    let a = w.job("a");
    assert_eq!((a.status, a.last_error.as_deref(), a.result.as_deref()), (Status::Dead, Some("cancelled"), None));
    assert_eq!(a.finished_at.map(|f| f - started), Some(2 * CANCEL_CHECK_MS + orderly::consumer::CANCEL_GRACE_MS));
    // Delivered again (a duplicate), it is never claimed.
    w.call("POST", "/jobs/a/redrive", None);
    let r = w.call("POST", "/jobs/a/cancel", None);
    assert_eq!(r.status, 200, "redriven, it is PENDING and cancelled at once: {}", r.body);
    w.drain_with(&runner);
    assert_eq!(runner.runs.borrow().len(), 1);
}

#[test]
fn a_cancel_that_lands_after_the_runs_last_check_still_ends_the_job_dead_cancelled() {
    // The cancel rule rides with every run's transition: the watch is not what enforces it.
    let w = strict(OnDead::Block);
    w.call("POST", "/jobs", Some(job("a", Some("k"), "quick")));
    let runner = Holding::default();
    // No sleep port: nothing watches; the operator's cancel lands while the handler runs.
    struct CancelWhileRunning<'a>(&'a ConsumerWorld);
    impl Runner for CancelWhileRunning<'_> {
        async fn run(&self, _job: &JobContext<'_>) -> Result<Done, JobError> {
            assert_eq!(self.0.call_async("POST", "/jobs/a/cancel", None).await.status, 202);
            Ok(Done { result: Some(json!(1)), http_status: None })
        }
    }
    let racing = CancelWhileRunning(&w);
    let consumer = Consumer::new(&w.cfg, &w.kv, &w.db, &racing, &w.clock, &w.queue, "inv-a");
    block_on(consumer.process(Role::Main, &w.sent_since()));
    let a = w.job("a");
    assert_eq!((a.status, a.last_error.as_deref(), a.result.as_deref()), (Status::Dead, Some("cancelled"), Some("1")));
    assert!(a.skipped_at.is_some(), "so its key is never blocked by it");
    w.call("POST", "/jobs", Some(job("b", Some("k"), "quick")));
    w.drain_with(&runner);
    assert_eq!(w.job("b").status, Status::Done);
}

#[test]
fn a_cancelled_run_whose_invocation_died_ends_dead_at_its_leases_expiry_and_is_never_claimed_again() {
    let w = ConsumerWorld::in_mode(OrderingMode::Lock);
    w.call("POST", "/jobs", Some(job("a", None, "quick")));
    let msgs = w.sent_since();
    // Claimed by an invocation that then dies: its lease stands.
    let spec = w.job("a").spec();
    let now = w.clock.now_ms();
    let lease = orderly::ledger::Lease { now, until: now + 120_000, due_before: now };
    block_on(orderly::ledger::Sql::query(&w.db, orderly::ledger::stmt::claim(&spec, "dead-inv", lease))).unwrap();
    assert_eq!(w.call("POST", "/jobs/a/cancel", None).status, 202);
    // Past the lease, a delivery does not claim it, and maintenance ends it DEAD "cancelled".
    w.clock.advance_ms(121_000);
    let runner = Holding::default();
    run_cancelling(&w, &runner, &msgs, "none", 0);
    assert!(runner.runs.borrow().is_empty(), "never claimed again");
    w.maintain();
    let a = w.job("a");
    assert_eq!((a.status, a.last_error.as_deref()), (Status::Dead, Some("cancelled")), "{a:?}");
}

#[test]
fn cancelling_a_key_cancels_its_pending_jobs_and_a_filter_counts_first() {
    let w = strict(OnDead::Block);
    for (id, key) in [("a", "k"), ("b", "k"), ("c", "k"), ("x", "other")] {
        w.call("POST", "/jobs", Some(job(id, Some(key), "quick")));
    }
    let dry = w.call("POST", "/jobs/cancel", Some(json!({"filter": {"ordering_key": "k"}, "dry_run": true})));
    assert_eq!((dry.status, dry.json_body()["matched"].as_i64()), (200, Some(3)), "{}", dry.body);
    assert_eq!(w.job("a").status, Status::Pending, "a dry run changes nothing");
    let r = w.call("POST", "/keys/k/cancel", None);
    assert_eq!(
        (r.status, r.json_body()["cancelled"].as_i64(), r.json_body()["remaining"].as_i64()),
        (200, Some(3), Some(0))
    );
    for id in ["a", "b", "c"] {
        let j = w.job(id);
        assert_eq!(
            (j.status, j.last_error.as_deref(), j.skipped_at.is_some()),
            (Status::Dead, Some("cancelled"), true)
        );
    }
    assert_eq!(w.job("x").status, Status::Pending, "another key's job is untouched");
    // The key moves on as after a skip: a new job of it runs.
    w.call("POST", "/jobs", Some(job("d", Some("k"), "quick")));
    let runner = Holding::default();
    w.drain_with(&runner);
    assert_eq!((w.job("d").status, w.job("x").status), (Status::Done, Status::Done));
    let empty = w.call("POST", "/jobs/cancel", Some(json!({"filter": {}})));
    assert_eq!(empty.status, 400, "an empty filter never cancels everything: {}", empty.body);
}

#[test]
fn replace_keeps_a_pending_jobs_place_and_a_running_holder_is_left_to_finish_beside_the_new_job() {
    let w = strict(OnDead::Skip);
    let deduped = |id: &str, n: i64| {
        json!({"id": id, "ordering_key": "k", "dedupe_key": "doc-1", "on_duplicate": "replace",
               "payload": {"type": "webhook", "url": "https://h.test/", "body": {"n": n}}})
    };
    assert_eq!(w.call("POST", "/jobs", Some(deduped("v1", 1))).status, 202);
    w.call("POST", "/jobs", Some(job("after", Some("k"), "quick")));
    let r = w.call("POST", "/jobs", Some(deduped("v2", 2))).json_body();
    assert_eq!(r["jobs"][0], json!({"id": "v1", "status": "PENDING", "duplicate": true, "replaced": true}));
    let v1 = w.job("v1");
    assert_eq!((v1.seq, v1.payload.as_deref().is_some_and(|p| p.contains("\"n\":2"))), (Some(1), true), "{v1:?}");
    let history = w.call("GET", "/jobs/v1", None).json_body()["history"].clone();
    assert_eq!(history[0]["kind"], "superseded", "{history}");
    // RUNNING: the holder is not touched; the submission is recorded beside it, after it in its key.
    let spec = w.job("v1").spec();
    let now = w.clock.now_ms();
    let lease = orderly::ledger::Lease { now, until: now + 120_000, due_before: now };
    block_on(orderly::ledger::Sql::query(&w.db, orderly::ledger::stmt::claim(&spec, "inv", lease))).unwrap();
    let r = w.call("POST", "/jobs", Some(deduped("v3", 3))).json_body();
    assert_eq!(r["jobs"][0], json!({"id": "v3", "status": "PENDING", "duplicate": false, "superseded": "v1"}));
    let (v1, v3) = (w.job("v1"), w.job("v3"));
    assert_eq!(
        (v1.status, v1.superseded_at.is_some(), v1.payload.as_deref().is_some_and(|p| p.contains("\"n\":2"))),
        (Status::Running, true, true)
    );
    assert!(v3.seq > w.job("after").seq, "behind the key's jobs: {v3:?}");
    // The new holder is the one a later replace finds.
    let r = w.call("POST", "/jobs", Some(deduped("v4", 4))).json_body();
    assert_eq!((r["jobs"][0]["id"].as_str(), r["jobs"][0]["replaced"].as_bool()), (Some("v3"), Some(true)));
}

#[test]
fn on_duplicate_cancel_cancels_the_holder_and_records_the_new_job() {
    let w = ConsumerWorld::in_mode(OrderingMode::Lock);
    let deduped = |id: &str| {
        json!({"id": id, "dedupe_key": "d", "on_duplicate": "cancel",
               "payload": {"type": "webhook", "url": "https://h.test/", "body": {"mode": "quick"}}})
    };
    w.call("POST", "/jobs", Some(deduped("p1")));
    let r = w.call("POST", "/jobs", Some(deduped("p2"))).json_body();
    assert_eq!(r["jobs"][0], json!({"id": "p2", "status": "PENDING", "duplicate": false, "superseded": "p1"}));
    assert_eq!((w.job("p1").status, w.job("p1").last_error.as_deref()), (Status::Dead, Some("cancelled")));
    // A RUNNING holder is asked to stop.
    let spec = w.job("p2").spec();
    let now = w.clock.now_ms();
    let lease = orderly::ledger::Lease { now, until: now + 120_000, due_before: now };
    block_on(orderly::ledger::Sql::query(&w.db, orderly::ledger::stmt::claim(&spec, "inv", lease))).unwrap();
    w.call("POST", "/jobs", Some(deduped("p3")));
    let p2 = w.job("p2");
    assert_eq!(
        (p2.status, p2.cancel_requested_at.is_some(), p2.superseded_at.is_some()),
        (Status::Running, true, true)
    );
    assert_eq!(w.job("p3").status, Status::Pending);
    let refused = w.call(
        "POST",
        "/jobs",
        Some(json!({"payload": {"type": "webhook", "url": "https://h.test/"}, "on_duplicate": "cancel"})),
    );
    assert_eq!(refused.status, 400, "{}", refused.body);
}

#[test]
fn a_debounce_runs_once_after_the_quiet_period_with_the_last_payload_and_never_past_its_cap() {
    let w = ConsumerWorld::in_mode(OrderingMode::Strict);
    let submit = |n: i64| {
        let body = json!({"id": format!("d{n}"), "ordering_key": "k", "dedupe_key": "search-index", "debounce_seconds": 2,
                          "debounce_max_seconds": 3,
                          "payload": {"type": "webhook", "url": "https://h.test/", "body": {"n": n}}});
        w.call("POST", "/jobs", Some(body)).json_body()["jobs"][0].clone()
    };
    for n in 1..=5 {
        let answer = submit(n);
        assert_eq!(answer["id"], "d1", "every submission lands on the first job: {answer}");
        w.clock.advance_ms(500);
    }
    let d1 = w.job("d1");
    assert!(d1.payload.as_deref().is_some_and(|p| p.contains("\"n\":5")), "{d1:?}");
    // Submitted at T0..T0+2000: due 2 s after the fifth (T0+4000), but capped at 3 s after the first.
    assert_eq!(d1.next_run_at, T0 + 3_000);
    let runner = Holding::default();
    w.drain_with(&runner);
    assert_eq!(runner.runs.borrow().as_slice(), ["d1"], "one run");
    assert!(w.clock.now_ms() >= T0 + 3_000);
    for bad in [
        json!({"debounce_seconds": 2}),
        json!({"debounce_seconds": 2, "dedupe_key": "x", "delay_seconds": 1}),
        json!({"debounce_seconds": 5, "dedupe_key": "x", "debounce_max_seconds": 2}),
        json!({"debounce_seconds": 2, "dedupe_key": "x", "on_duplicate": "cancel"}),
    ] {
        let mut body = bad.clone();
        body["payload"] = json!({"type": "webhook", "url": "https://h.test/"});
        assert_eq!(w.call("POST", "/jobs", Some(body)).status, 400, "{bad}");
    }
}

#[test]
fn a_cancelled_job_waiting_in_its_limit_keys_line_leaves_it_and_the_next_one_is_woken() {
    let cfg = Config {
        ordering_mode: OrderingMode::Strict,
        limits: orderly::flow::Policies::parse(r#"{"host": {"concurrency": 1}}"#).unwrap(),
        ..Config::default()
    };
    let w = ConsumerWorld::new(cfg);
    let limited = |id: &str, key: &str| {
        json!({"id": id, "ordering_key": key, "limit_key": "host",
               "payload": {"type": "webhook", "url": "https://h.test/", "body": {"mode": "quick"}}})
    };
    for (id, key) in [("a", "k1"), ("b", "k2"), ("c", "k3")] {
        w.call("POST", "/jobs", Some(limited(id, key)));
    }
    // `a` holds the slot (handed), `b` and `c` wait in the line. Cancelling `a` hands `b` the slot.
    let r = w.call("POST", "/jobs/a/cancel", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let runner = Holding::default();
    w.drain_with(&runner);
    assert_eq!(runner.runs.borrow().as_slice(), ["b", "c"]);
    let line = block_on(Ledger::new(&w.db).limit_state("host", w.clock.now_ms())).unwrap();
    assert_eq!(line.map(|l| l.waiting), Some(0), "nobody left waiting for a job that will not come");
}

/// A handler that, while job `a` runs, lets time pass (a long run) and then does what an operator
/// or a producer does meanwhile (`during`); every job's payload body is noted as it starts.
struct Meanwhile<'a, F: Fn(&'a ConsumerWorld) -> futures::future::LocalBoxFuture<'a, ()>> {
    w: &'a ConsumerWorld,
    during: F,
    runs: RefCell<Vec<(String, Value)>>,
}

impl<'a, F: Fn(&'a ConsumerWorld) -> futures::future::LocalBoxFuture<'a, ()>> Runner for Meanwhile<'a, F> {
    async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
        self.runs.borrow_mut().push((job.id.to_string(), job.payload["body"].clone()));
        if job.id == "a" {
            self.w.clock.advance_ms(CANCEL_CHECK_MS);
            (self.during)(self.w).await;
        }
        Ok(Done::default())
    }
}

#[test]
fn a_strict_chain_never_claims_a_replaceable_job_ahead_so_a_replacement_keeps_its_place_while_the_key_runs() {
    let w = strict(OnDead::Skip);
    let doc = |n: i64| {
        json!({"id": format!("d{n}"), "ordering_key": "k", "dedupe_key": "doc", "on_duplicate": "replace",
               "payload": {"type": "webhook", "url": "https://h.test/", "body": {"n": n}}})
    };
    w.call("POST", "/jobs", Some(job("a", Some("k"), "quick")));
    w.call("POST", "/jobs", Some(doc(1)));
    w.call("POST", "/jobs", Some(job("z", Some("k"), "quick")));
    let runner = Meanwhile {
        w: &w,
        during: |w: &ConsumerWorld| -> futures::future::LocalBoxFuture<'_, ()> {
            Box::pin(async move {
                let r = w.call_async("POST", "/jobs", Some(doc(2))).await.json_body();
                assert_eq!(r["jobs"][0]["replaced"], true, "still PENDING while the key's head runs: {r}");
            })
        },
        runs: RefCell::default(),
    };
    block_on(
        Consumer::new(&w.cfg, &w.kv, &w.db, &runner, &w.clock, &w.queue, "inv-a").process(Role::Main, &w.sent_since()),
    );
    w.drain_with(&runner);
    let runs = runner.runs.borrow();
    let order: Vec<&str> = runs.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(order, ["a", "d1", "z"], "the replacement ran in its place, once");
    assert_eq!(runs[1].1, json!({"n": 2}), "with the newer payload");
}

#[test]
fn cancelling_a_key_asks_the_jobs_its_chain_claimed_ahead_to_stop_and_those_never_start() {
    let w = strict(OnDead::Block);
    for (id, key) in [("a", "k"), ("b", "k"), ("c", "k"), ("x", "other")] {
        w.call("POST", "/jobs", Some(job(id, Some(key), "quick")));
    }
    let runner = Meanwhile {
        w: &w,
        during: |w: &ConsumerWorld| -> futures::future::LocalBoxFuture<'_, ()> {
            Box::pin(async move {
                // The chain claimed a, b and c together: all three RUNNING to the ledger.
                let dry = w
                    .call_async("POST", "/jobs/cancel", Some(json!({"filter": {"ordering_key": "k"}, "dry_run": true})))
                    .await;
                let dry = dry.json_body();
                assert_eq!((dry["matched"].as_i64(), dry["running"].as_i64()), (Some(3), Some(3)), "{dry}");
                let r = w.call_async("POST", "/keys/k/cancel", None).await.json_body();
                assert_eq!(
                    (r["cancelled"].as_i64(), r["cancel_requested"].as_i64(), r["remaining"].as_i64()),
                    (Some(0), Some(3), Some(0)),
                    "{r}"
                );
            })
        },
        runs: RefCell::default(),
    };
    block_on(
        Consumer::new(&w.cfg, &w.kv, &w.db, &runner, &w.clock, &w.queue, "inv-a").process(Role::Main, &w.sent_since()),
    );
    w.drain_with(&runner);
    let order: Vec<String> = runner.runs.borrow().iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(order, ["a", "x"], "b and c, claimed ahead and waiting a check period, never started");
    for id in ["a", "b", "c"] {
        let j = w.job(id);
        assert_eq!(
            (j.status, j.last_error.as_deref(), j.skipped_at.is_some()),
            (Status::Dead, Some("cancelled"), true),
            "{id}"
        );
    }
    let history = w.call("GET", "/jobs/b", None).json_body()["history"].clone();
    let kinds: Vec<&str> = history.as_array().into_iter().flatten().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(kinds, ["cancel_requested", "attempt"], "{history}");
}

#[test]
fn a_strict_chain_claims_ahead_in_chunks_but_never_a_job_submitted_to_be_replaced() {
    // The cost of keeping a replaceable job claimable in its place (design §22.3): its own claim.
    // A dedupe key alone (an idempotency key) keeps the chunks.
    let trips = |options: Value| {
        let w = strict(OnDead::Skip);
        let jobs: Vec<Value> = (0..40)
            .map(|i| {
                let mut j = job(&format!("j{i}"), Some("k"), "quick");
                for (k, v) in options.as_object().into_iter().flatten() {
                    j[k] = if k == "dedupe_key" { json!(format!("{v}-{i}")) } else { v.clone() };
                }
                j
            })
            .collect();
        assert_eq!(w.call("POST", "/jobs", Some(json!({"jobs": jobs}))).status, 202);
        let msgs = w.sent_since();
        let before = w.db.round_trips.get();
        block_on(
            Consumer::new(&w.cfg, &w.kv, &w.db, &Holding::default(), &w.clock, &w.queue, "inv-a")
                .process(Role::Main, &msgs),
        );
        let trips = w.db.round_trips.get() - before;
        assert!((0..40).all(|i| w.job(&format!("j{i}")).status == Status::Done));
        trips
    };
    let plain = trips(json!({}));
    let deduped = trips(json!({"dedupe_key": "d"}));
    let replaceable = trips(json!({"dedupe_key": "d", "on_duplicate": "replace"}));
    println!("40 jobs of one key, one invocation: {plain} ledger round trips plain, {deduped} with dedupe keys, {replaceable} replaceable");
    assert!(plain <= 6 && deduped <= 6, "claimed in chunks: {plain}, {deduped}");
    assert!(replaceable >= 40, "each claimed just before its start: {replaceable}");
}

#[test]
fn a_cancelled_run_is_recorded_at_once_not_after_the_next_jobs_of_its_chain() {
    // Its lease is given up within the cancel's bound, whatever its chain runs next (design §22.1).
    let w = strict(OnDead::Skip);
    w.call("POST", "/jobs", Some(job("a", Some("k"), "cooperate")));
    w.call("POST", "/jobs", Some(job("b", Some("k"), "quick")));
    // The row read directly: the test's ledger calls block, and this runs inside the consumer.
    let status = |w: &ConsumerWorld, col: &str| format!("{:?}", w.db.column("a", col));
    struct SeesA<'a>(&'a ConsumerWorld, RefCell<Option<String>>);
    impl Runner for SeesA<'_> {
        async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
            if job.id == "a" {
                job.cancel.cancelled().await;
            } else {
                *self.1.borrow_mut() = Some(format!("{:?}", self.0.db.column("a", "status")));
            }
            Ok(Done::default())
        }
    }
    let runner = SeesA(&w, RefCell::new(None));
    let sleep = |ms: i64| -> futures::future::LocalBoxFuture<'_, ()> {
        w.clock.advance_ms(ms);
        Box::pin(async {
            if status(&w, "cancel_requested_at") == "Null" {
                assert_eq!(w.call_async("POST", "/jobs/a/cancel", None).await.status, 202);
            }
        })
    };
    let consumer = Consumer::new(&w.cfg, &w.kv, &w.db, &runner, &w.clock, &w.queue, "inv-a").with_sleep(&sleep);
    block_on(consumer.process(Role::Main, &w.sent_since()));
    assert_eq!(runner.1.borrow().as_deref(), Some("Text(\"DEAD\")"), "a was DEAD before b started");
    assert_eq!(w.job("b").status, Status::Done);
}
