//! Dependencies (design §24) and batches (§25) on the host: the real API, consumer and maintenance over
//! every ledger users deploy (the D1 stand-in, which refuses what D1 refuses; one shard object;
//! three, so the jobs of an edge live in different shards), a recording queue delivered by hand, one manual clock. A job that
//! runs after others starts only once each is DONE, is woken by the last to finish (never
//! polled), ends DEAD with a DEAD dependency unless it runs anyway; what a crash leaves undone,
//! maintenance finishes.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;

use futures::executor::block_on;
use orderly::api::{Api, ApiRequest, ApiResponse};
use orderly::clock::{Clock, ManualClock};
use orderly::config::{Config, OrderingMode};
use orderly::consumer::{Consumer, Incoming, Outcome, Role};
use orderly::handlers::{Done, JobContext, JobError, Runner};
use orderly::ledger::{Ledger, Route};
use orderly::lock::MemoryKv;
use orderly::maintenance::{self, REGISTER_GRACE_MS, RESEND_GRACE_MS};
use serde_json::{json, Value};

use crate::support::api::{T0, TOKEN};
use crate::support::{ledger_dbs, Db, MemoryQueue, EVERY_LEDGER};

/// Records each run's start (job id, time); a payload body `{"fail": n}` fails the first n
/// attempts (retryable), `{"dead": true}` fails for good.
struct Starts {
    runs: RefCell<Vec<(String, i64)>>,
    /// Each run's payload, by job id (the last run's).
    payloads: RefCell<std::collections::BTreeMap<String, Value>>,
    clock: Rc<ManualClock>,
}

impl Runner for Starts {
    async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
        let now = self.clock.now_ms();
        self.runs.borrow_mut().push((job.id.to_string(), now));
        self.payloads.borrow_mut().insert(job.id.to_string(), job.payload.clone());
        let body = &job.payload["body"];
        if body["dead"] == json!(true) {
            return Err(JobError::permanent("HTTP 410"));
        }
        if u64::from(job.attempt) <= body["fail"].as_u64().unwrap_or(0) {
            return Err(JobError::retry("HTTP 503"));
        }
        let pad = "x".repeat(body["pad"].as_u64().unwrap_or(0) as usize);
        Ok(Done { result: Some(json!({"ran": job.id, "pad": pad})), http_status: Some(200) })
    }
}

struct World {
    shards: Vec<Db>,
    queue: MemoryQueue,
    clock: Rc<ManualClock>,
    kv: MemoryKv<Rc<ManualClock>>,
    cfg: Config,
    runner: Starts,
    delivered: Cell<usize>,
}

impl World {
    fn new(mode: OrderingMode, shards: u32) -> World {
        let clock = Rc::new(ManualClock::new(T0));
        World {
            shards: ledger_dbs(shards),
            queue: MemoryQueue::default(),
            kv: MemoryKv::new(clock.clone()),
            runner: Starts { runs: RefCell::default(), payloads: RefCell::default(), clock: clock.clone() },
            clock,
            cfg: Config { ordering_mode: mode, ..Config::default() },
            delivered: Cell::new(0),
        }
    }

    fn ledger(&self) -> Ledger<&Db> {
        Ledger::sharded(self.shards.iter().collect())
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> ApiResponse {
        self.call_traced(method, path, body, None)
    }

    /// A call whose request carried this W3C trace context (design §27).
    fn call_traced(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        trace: Option<orderly::trace::TraceContext>,
    ) -> ApiResponse {
        let ledger = self.ledger();
        let new_id = || "api-job".to_string();
        let api = Api {
            ledger: &ledger,
            queue: &self.queue,
            clock: &self.clock,
            cfg: Ok(&self.cfg),
            admin_token: Some(TOKEN),
            producer_token: None,
            metrics_token: None,
            new_id: &new_id,
            types: &orderly::app::BuiltIn,
            sealer: None,
        };
        let req = ApiRequest {
            method: method.into(),
            path: path.into(),
            query: String::new(),
            authorization: Some(format!("Bearer {TOKEN}")),
            body: body.map(|b| b.to_string().into_bytes()).unwrap_or_default(),
            trace,
        };
        block_on(api.handle(&req))
    }

    /// `POST /jobs` with these jobs: accepted.
    fn submit(&self, jobs: Vec<Value>) -> Value {
        let r = self.call("POST", "/jobs", Some(json!({ "jobs": jobs })));
        assert_eq!(r.status, 202, "{}", r.body);
        r.json_body()
    }

    fn job(&self, id: &str) -> Value {
        let r = self.call("GET", &format!("/jobs/{id}"), None);
        assert_eq!(r.status, 200, "{}", r.body);
        r.json_body()["job"].clone()
    }

    fn status(&self, id: &str) -> String {
        self.job(id)["status"].as_str().unwrap_or_default().to_string()
    }

    /// The ids of the jobs whose messages were sent since the last look.
    fn sent_since(&self) -> Vec<Incoming> {
        let all: Vec<Value> =
            self.queue.batches.borrow().iter().flatten().map(|m| serde_json::from_str(m.json()).unwrap()).collect();
        let new = all[self.delivered.get()..].to_vec();
        self.delivered.set(all.len());
        new.into_iter()
            .enumerate()
            .map(|(i, body)| Incoming { id: format!("sent-{i}"), timestamp_ms: self.clock.now_ms(), body: Ok(body) })
            .collect()
    }

    fn run(&self, msgs: &[Incoming]) -> Vec<Outcome> {
        let ledger = self.ledger();
        let consumer = Consumer::new(
            &self.cfg,
            &self.kv,
            &self.shards[0],
            &self.runner,
            &self.clock,
            &self.queue,
            format!("inv-{}", self.clock.now_ms()),
        )
        .with_ledger(ledger);
        block_on(consumer.process(Role::Main, msgs))
    }

    /// Delivers what was sent, as Queues would, until nothing is left: each message at its delay,
    /// one per invocation; a message retried comes back after its delay.
    fn drain(&self) {
        let mut waiting: Vec<(i64, Incoming)> = Vec::new();
        for _ in 0..1_000 {
            let now = self.clock.now_ms();
            let delays: Vec<u32> = self.queue.batches.borrow().iter().flatten().map(|m| m.delay_seconds).collect();
            let fresh = self.sent_since();
            let start = delays.len() - fresh.len();
            for (i, msg) in fresh.into_iter().enumerate() {
                waiting.push((now + i64::from(delays[start + i]) * 1000, msg));
            }
            waiting.sort_by_key(|(at, _)| *at);
            if waiting.is_empty() {
                return;
            }
            let (at, msg) = waiting.remove(0);
            self.clock.advance_ms((at - self.clock.now_ms()).max(10));
            if let [Outcome::Retry { delay_seconds } | Outcome::Defer { delay_seconds }] =
                self.run(std::slice::from_ref(&msg))[..]
            {
                waiting.push((self.clock.now_ms() + i64::from(delay_seconds) * 1000, msg));
            }
        }
        panic!("still delivering after 1,000 deliveries");
    }

    /// This world with its D1 ledger moved to `shards` new shard objects as an operator moves one
    /// (design §19.7, docs/shards.md): in pages of `page` jobs, twice (a move run again is the same
    /// move), then checked; the queue, clock, lock and configuration go on as they were.
    fn moved(self, shards: u32, page: u32) -> World {
        let to = ledger_dbs(shards);
        {
            let (from, target) = (self.ledger(), Ledger::sharded(to.iter().collect()));
            for _ in 0..2 {
                let mut after = String::new();
                while let Some(next) = block_on(from.copy_to(&target, &after, page)).unwrap().next {
                    after = next;
                }
            }
            let check = block_on(from.verify_copy(&target)).unwrap();
            assert!(check.matches, "{check:?}");
        }
        World { shards: to, ..self }
    }

    fn maintain(&self) -> maintenance::Report {
        block_on(maintenance::run(&self.ledger(), &self.queue, &self.clock, &self.cfg))
    }

    /// The jobs run, in order of their starts.
    fn runs(&self) -> Vec<String> {
        self.runner.runs.borrow().iter().map(|r| r.0.clone()).collect()
    }

    /// When `id`'s last run started.
    fn started(&self, id: &str) -> i64 {
        self.runner.runs.borrow().iter().rev().find(|r| r.0 == id).map(|r| r.1).expect("it ran")
    }

    /// When `id` finished, from its row.
    fn finished(&self, id: &str) -> i64 {
        self.job(id)["finished_at"].as_i64().expect("finished")
    }
}

fn job(id: &str, key: Option<&str>, after: &[&str]) -> Value {
    with_body(id, key, after, json!({}))
}

fn with_body(id: &str, key: Option<&str>, after: &[&str], body: Value) -> Value {
    let mut j = json!({"id": id, "payload": {"type": "webhook", "url": "https://h.test/", "body": body}});
    if let Some(k) = key {
        j["ordering_key"] = json!(k);
    }
    if !after.is_empty() {
        j["after"] = json!(after);
    }
    j
}

/// Job "b" (key k2) recorded with its wait on `on` (key k1), as a submission that died before
/// registering the wait leaves it.
fn record_unregistered(w: &World, on: &str) {
    let spec = orderly::ledger::JobSpec {
        id: "b".into(),
        job_type: Some("webhook".into()),
        ordering_key: Some("k2".into()),
        dedupe_key: None,
        limit_key: None,
        deadline_at: None,
        timeout_seconds: None,
        payload: Some(json!({"type": "webhook", "url": "https://h.test/"}).to_string()),
        max_attempts: 3,
        priority: 5,
    };
    let after = [(on.to_string(), Route::key("k1"))];
    let submit = orderly::ledger::Submit { after: &after, ..orderly::ledger::Submit::due(&spec, T0) };
    block_on(w.ledger().submit_all(&[submit], T0)).unwrap();
}

fn every_world() -> Vec<World> {
    let mut worlds = Vec::new();
    for mode in [OrderingMode::Lock, OrderingMode::Strict] {
        for shards in EVERY_LEDGER {
            worlds.push(World::new(mode, shards));
        }
    }
    worlds
}

/// Ids whose routes fall in different shards of three (so an edge crosses shards).
#[test]
fn the_diamond_s_keys_live_in_different_shards() {
    let shards: Vec<usize> = ["k1", "k2", "k3"].iter().map(|k| Route::key(k).shard(3)).collect();
    assert!(shards[0] != shards[1] || shards[1] != shards[2], "{shards:?}");
}

#[test]
fn a_diamond_over_three_keys_runs_each_job_after_the_jobs_it_names() {
    for w in every_world() {
        // d runs after b and c, which both run after a; four jobs, three ordering keys.
        let answer = w.submit(vec![
            job("a", Some("k1"), &[]),
            job("b", Some("k2"), &["a"]),
            job("c", Some("k3"), &["a"]),
            job("d", Some("k1"), &["b", "c"]),
        ]);
        assert_eq!(answer["jobs"].as_array().map(Vec::len), Some(4));
        assert_eq!(w.job("d")["waiting_on"], json!(["b", "c"]), "GET /jobs/{{id}} shows what it waits on");
        assert_eq!(w.job("a")["waited_by"], json!(["b", "c"]), "and what waits on it, in its own shard");
        assert_eq!(w.job("b")["waited_by"], json!(["d"]));
        assert!(w.job("d").get("waited_by").is_none(), "nothing waits on d");
        let first = w.sent_since();
        assert_eq!(first.len(), 1, "only a is sent: the others wait in the ledger, not in the queue");
        w.delivered.set(0);
        w.drain();
        assert_eq!(w.runs().len(), 4, "{:?}", w.runs());
        for (later, earlier) in [("b", "a"), ("c", "a"), ("d", "b"), ("d", "c")] {
            assert!(
                w.started(later) >= w.finished(earlier),
                "{later} started before {earlier} finished: {:?}",
                w.runs()
            );
        }
        for id in ["a", "b", "c", "d"] {
            assert_eq!(w.status(id), "DONE");
        }
        assert!(w.job("d").get("waiting_on").is_none(), "nothing left to wait on");
        assert!(w.job("a").get("waited_by").is_none(), "its dependents released: none wait on it");
        // Nothing polled: every delivery ran a job.
        assert_eq!(w.queue.batches.borrow().iter().flatten().count(), 4, "one message per job");
    }
}

#[test]
fn a_dependent_waits_parked_and_maintenance_never_sends_it_before_its_dependency_finishes() {
    for w in every_world() {
        w.submit(vec![with_body("a", Some("k1"), &[], json!({"fail": 1})), job("b", Some("k2"), &["a"])]);
        let a = w.sent_since();
        assert!(matches!(w.run(&a)[..], [Outcome::Retry { .. } | Outcome::Ack]), "a failed once");
        assert_eq!(w.status("a"), "PENDING");
        // A long wait: maintenance re-sends a (its retry's message is the queue's), never b.
        w.clock.advance_ms(30 * 60_000);
        let report = w.maintain();
        let sent: Vec<String> =
            w.sent_since().iter().map(|m| m.body.as_ref().unwrap()["__orderly_job__"]["id"].to_string()).collect();
        assert!(!sent.iter().any(|s| s.contains('b')), "b is not polled: {sent:?} {report:?}");
        assert_eq!(w.status("b"), "PENDING");
        w.delivered.set(0);
        w.drain();
        assert_eq!(w.status("b"), "DONE");
        assert!(w.started("b") >= w.finished("a"));
    }
}

#[test]
fn a_dead_dependency_ends_its_dependents_dead_in_turn_unless_they_run_anyway() {
    for w in every_world() {
        let mut anyway = job("r", Some("k3"), &["a"]);
        anyway["after_dead"] = json!("run");
        w.submit(vec![
            with_body("a", Some("k1"), &[], json!({"dead": true})),
            job("b", Some("k2"), &["a"]),
            job("c", Some("k1"), &["b"]),
            anyway,
        ]);
        w.drain();
        assert_eq!(w.status("a"), "DEAD");
        let b = w.job("b");
        assert_eq!(
            (b["status"].as_str(), b["last_error"].as_str()),
            (Some("DEAD"), Some("a job it runs after ended DEAD: a"))
        );
        assert_eq!(w.job("c")["last_error"], json!("a job it runs after ended DEAD: b"), "the cascade goes on");
        assert_eq!(w.status("r"), "DONE", "after_dead: run runs anyway");
        assert_eq!(w.runs(), vec!["a", "r"], "b and c never ran");
    }
}

#[test]
fn a_dependency_finished_before_the_submission_releases_it_at_once() {
    for w in every_world() {
        w.submit(vec![job("a", Some("k1"), &[]), with_body("x", Some("k2"), &[], json!({"dead": true}))]);
        w.drain();
        w.submit(vec![job("b", Some("k2"), &["a"]), job("c", None, &["x"])]);
        assert_eq!(w.status("c"), "DEAD", "its dependency was DEAD already");
        w.drain();
        assert_eq!(w.status("b"), "DONE");
        assert_eq!(w.runs(), vec!["a", "x", "b"]);
    }
}

#[test]
fn a_submission_naming_an_unknown_or_later_job_or_itself_is_refused_and_records_nothing() {
    let w = World::new(OrderingMode::Strict, 3);
    w.submit(vec![job("a", None, &[])]);
    let cases = [
        (vec![job("b", None, &["nope"])], "no such job", 0),
        (vec![job("b", None, &["c"]), job("c", None, &[])], "submits later", 0),
        (vec![job("b", None, &["b"])], "the job itself", 0),
        (vec![job("b", None, &["a", "a"])], "twice", 0),
        (
            vec![
                job("b", None, &[]),
                json!({"id": "c", "payload": {"type": "webhook", "url": "https://h.test/"}, "after": "a"}),
            ],
            "array",
            1,
        ),
        (
            vec![json!({"id": "c", "payload": {"type": "webhook", "url": "https://h.test/"}, "after_dead": "run"})],
            "needs \"after\"",
            0,
        ),
        (
            vec![json!({"id": "c", "dedupe_key": "x", "on_duplicate": "replace", "after": ["a"],
                        "payload": {"type": "webhook", "url": "https://h.test/"}})],
            "replacement",
            0,
        ),
        (
            vec![
                json!({"id": "c", "payload": {"type": "webhook", "url": "https://h.test/"}, "after": ["a"], "after_dead": "maybe"}),
            ],
            "\"dead\" or \"run\"",
            0,
        ),
        (
            vec![
                json!({"id": "d", "dedupe_key": "x", "payload": {"type": "webhook", "url": "https://h.test/"}}),
                job("e", None, &["d"]),
            ],
            "dedupe key",
            1,
        ),
    ];
    for (jobs, says, index) in cases {
        let r = w.call("POST", "/jobs", Some(json!({ "jobs": jobs })));
        assert_eq!(r.status, 400, "{}", r.body);
        let body = r.json_body();
        assert!(body["error"].as_str().unwrap_or_default().contains(says), "{says}: {body}");
        assert_eq!(body["index"], json!(index), "{body}");
    }
    for id in ["b", "c", "d", "e"] {
        assert_eq!(w.call("GET", &format!("/jobs/{id}"), None).status, 404, "{id} was not recorded");
    }
    let many: Vec<String> = (0..101).map(|i| format!("m{i}")).collect();
    let r = w.call(
        "POST",
        "/jobs",
        Some(json!({"id": "f", "payload": {"type": "webhook", "url": "https://h.test/"}, "after": many})),
    );
    assert_eq!(r.status, 413, "{}", r.body);
}

#[test]
fn strict_mode_a_waiting_job_holds_its_key_s_later_jobs_behind_it() {
    for shards in EVERY_LEDGER {
        let w = World::new(OrderingMode::Strict, shards);
        w.submit(vec![
            with_body("x", Some("other"), &[], json!({"fail": 2})),
            job("e", Some("k"), &["x"]),
            job("f", Some("k"), &[]),
        ]);
        w.drain();
        assert_eq!(w.runs(), vec!["x", "x", "x", "e", "f"], "f waits behind e, which waits for x");
    }
}

#[test]
fn cancelling_a_dependency_ends_its_dependents_and_cancelling_a_dependent_leaves_the_rest() {
    for w in every_world() {
        w.submit(vec![job("a", Some("k1"), &[]), job("b", Some("k2"), &["a"]), job("c", Some("k3"), &["a"])]);
        w.sent_since();
        assert_eq!(w.call("POST", "/jobs/c/cancel", None).status, 200);
        assert_eq!(w.call("POST", "/jobs/a/cancel", None).status, 200);
        assert_eq!(w.job("b")["last_error"], json!("a job it runs after ended DEAD: a"));
        assert_eq!(w.job("c")["last_error"], json!("cancelled"));
        w.delivered.set(0);
        w.drain();
        assert!(w.runs().is_empty(), "{:?}", w.runs());
    }
}

#[test]
fn a_release_lost_with_its_invocation_is_made_by_maintenance() {
    for w in every_world() {
        w.submit(vec![job("a", Some("k1"), &[]), job("b", Some("k2"), &["a"])]);
        // a finishes, but the queue is down when its invocation sends b.
        w.queue.down.set(true);
        let a = w.sent_since();
        w.run(&a);
        w.queue.down.set(false);
        assert_eq!((w.status("a"), w.status("b")), ("DONE".into(), "PENDING".into()));
        // Released, not sent: a lost message, which maintenance sends once overdue.
        assert!(w.job("b").get("waiting_on").is_none());
        w.clock.advance_ms(RESEND_GRACE_MS + 1_000);
        let report = w.maintain();
        assert!(report.errors.is_empty(), "{report:?}");
        assert_eq!(report.resent + report.woken, 1, "{report:?}");
        w.drain();
        assert_eq!(w.status("b"), "DONE", "{report:?}");
    }
}

#[test]
fn a_dependency_finished_by_the_reaper_releases_its_dependents_through_maintenance() {
    for w in every_world() {
        w.submit(vec![
            json!({"id": "a", "max_attempts": 1, "payload": {"type": "webhook", "url": "https://h.test/"}}),
            job("b", None, &["a"]),
        ]);
        // a is claimed by an invocation that dies: its lease expires with no attempt left.
        let a = w.sent_since();
        let hung = HangOnce;
        let consumer =
            Consumer::new(&w.cfg, &w.kv, &w.shards[0], &hung, &w.clock, &w.queue, "inv-dies").with_ledger(w.ledger());
        let run = consumer.process(Role::Main, &a);
        let mut run = Box::pin(run);
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(run.as_mut().poll(&mut cx).is_pending(), "the run hangs");
        drop(run);
        w.clock.advance_ms(20 * 60_000);
        let report = w.maintain();
        assert_eq!((report.reaped_dead, w.status("a")), (1, "DEAD".into()), "{report:?}");
        assert_eq!(report.released, 1, "{report:?}");
        assert_eq!(w.job("b")["last_error"], json!("a job it runs after ended DEAD: a"));
    }
}

/// A runner whose run never ends.
struct HangOnce;

impl Runner for HangOnce {
    async fn run(&self, _: &JobContext<'_>) -> Result<Done, JobError> {
        std::future::pending().await
    }
}

#[test]
fn a_wait_a_submission_left_unregistered_is_registered_by_maintenance() {
    for w in every_world() {
        w.submit(vec![job("a", Some("k1"), &[])]);
        // b's row and wait are recorded, but its submission dies before registering it.
        record_unregistered(&w, "a");
        w.drain();
        assert_eq!((w.status("a"), w.status("b")), ("DONE".into(), "PENDING".into()), "a's finish found no waiter");
        w.clock.advance_ms(REGISTER_GRACE_MS);
        let report = w.maintain();
        assert_eq!(report.released, 1, "{report:?}");
        w.drain();
        assert_eq!(w.status("b"), "DONE");
    }
}

#[test]
fn a_dependent_under_a_paused_key_and_a_full_limit_waits_for_all_three() {
    let mut w = World::new(OrderingMode::Strict, 3);
    w.cfg.limits = orderly::flow::Policies::parse(r#"{"tenant": {"concurrency": 1}}"#).unwrap();
    let mut b = job("b", Some("k2"), &["a"]);
    b["limit_key"] = json!("tenant");
    w.submit(vec![job("a", Some("k1"), &[]), b]);
    assert_eq!(w.call("PUT", "/keys/k2", Some(json!({"paused": true}))).status, 200);
    w.drain();
    assert_eq!((w.status("a"), w.status("b")), ("DONE".into(), "PENDING".into()), "b's key is paused");
    assert_eq!(w.call("PUT", "/keys/k2", Some(json!({"paused": false}))).status, 200);
    w.drain();
    assert_eq!(w.status("b"), "DONE");
}

/// A message of `id`'s (as the API sends it), delivered out of turn: a duplicate delivery.
fn stray(w: &World, id: &str, key: &str) -> Incoming {
    let payload = json!({"type": "webhook", "url": "https://h.test/", "body": {}});
    Incoming {
        id: format!("stray-{id}"),
        timestamp_ms: w.clock.now_ms(),
        body: Ok(json!({"__fedify_ordering_key__": key, "__fedify_payload__": payload, "__orderly_job__": {"id": id}})),
    }
}

#[test]
fn a_waiting_job_s_message_delivered_out_of_turn_runs_nothing_and_is_acked() {
    for w in every_world() {
        w.submit(vec![job("a", Some("k1"), &[]), job("b", Some("k2"), &["a"])]);
        let a = w.sent_since();
        assert_eq!(w.run(&[stray(&w, "b", "k2")]), vec![Outcome::Ack], "acked: its release sends it");
        assert!(w.runs().is_empty(), "b does not run before a: {:?}", w.runs());
        assert_eq!(w.status("b"), "PENDING");
        w.run(&a);
        w.drain();
        assert_eq!(w.runs(), vec!["a", "b"]);
    }
}

#[test]
fn a_duplicate_submission_never_makes_the_job_it_duplicates_wait() {
    for w in every_world() {
        w.submit(vec![job("x", Some("k1"), &[]), job("a", Some("k2"), &[])]);
        let again = w.submit(vec![job("a", Some("k2"), &["x"])]);
        assert_eq!(again["jobs"][0]["duplicate"], json!(true));
        assert!(w.job("a").get("waiting_on").is_none(), "{}", w.job("a"));
        // a runs on its own message, x or no x.
        let sent = w.sent_since();
        let a: Vec<Incoming> =
            sent.into_iter().filter(|m| m.body.as_ref().unwrap()["__orderly_job__"]["id"] == "a").collect();
        w.run(&a);
        assert_eq!(w.runs(), vec!["a"]);
    }
}

#[test]
fn a_dead_dependency_redriven_before_its_release_releases_its_dependents_first() {
    for shards in EVERY_LEDGER {
        let w = World::new(OrderingMode::Strict, shards);
        let mut anyway = job("d", Some("k"), &["a"]);
        anyway["after_dead"] = json!("run");
        w.submit(vec![
            json!({"id": "a", "ordering_key": "k", "max_attempts": 1, "payload": {"type": "webhook", "url": "https://h.test/"}}),
            job("c", Some("k"), &[]),
            anyway,
        ]);
        // a's only run dies with its invocation (c, claimed with it, too); the reaper ends a
        // DEAD, and no release follows.
        let a = w.sent_since();
        let consumer = Consumer::new(&w.cfg, &w.kv, &w.shards[0], &HangOnce, &w.clock, &w.queue, "inv-dies")
            .with_ledger(w.ledger());
        let mut run = Box::pin(consumer.process(Role::Main, &a));
        let waker = futures::task::noop_waker();
        assert!(run.as_mut().poll(&mut std::task::Context::from_waker(&waker)).is_pending());
        drop(run);
        w.clock.advance_ms(20 * 60_000);
        block_on(w.ledger().reap(w.clock.now_ms(), 10)).unwrap();
        assert_eq!(w.status("a"), "DEAD");
        // c runs: the key moves past a (ON_DEAD skip), and stops at d, which waits.
        assert_eq!(w.run(&[stray(&w, "c", "k")]), vec![Outcome::Ack]);
        assert_eq!((w.runs(), w.status("d")), (vec!["c".to_string()], "PENDING".into()));
        // The operator redrives a before maintenance releases d: to its key's end, behind d.
        assert_eq!(w.call("POST", "/jobs/a/redrive", None).status, 200);
        w.drain();
        assert_eq!((w.status("d"), w.status("a")), ("DONE".into(), "DONE".into()), "d ran anyway, then a again");
        assert_eq!(w.runs(), vec!["c", "d", "a"]);
    }
}

/// `POST /jobs` with a batch: `jobs` and their callback `then`.
fn batch(w: &World, jobs: Vec<Value>, then: Value) -> ApiResponse {
    w.call("POST", "/jobs", Some(json!({ "jobs": jobs, "then": then })))
}

#[test]
fn a_batch_over_four_keys_calls_back_once_after_every_job_with_each_status_and_result() {
    for w in every_world() {
        let mut jobs: Vec<Value> = (0..12).map(|i| job(&format!("m{i}"), Some(&format!("k{}", i % 4)), &[])).collect();
        jobs[5] = with_body("m5", Some("k1"), &[], json!({"dead": true}));
        jobs[7] = with_body("m7", Some("k3"), &[], json!({"fail": 2}));
        let r = batch(
            &w,
            jobs,
            json!({"id": "cb", "payload": {"type": "webhook", "url": "https://h.test/done", "body": {"x": 1}}}),
        );
        assert_eq!(r.status, 202, "{}", r.body);
        let answer = r.json_body();
        assert_eq!((answer["jobs"].as_array().map(Vec::len), answer["then"]["id"].clone()), (Some(12), json!("cb")));
        let progress = w.call("GET", "/batches/cb", None).json_body()["batch"].clone();
        assert_eq!((progress["total"].clone(), progress["finished"].clone()), (json!(12), json!(0)));
        w.drain();
        let runs = w.runs();
        assert_eq!(runs.iter().filter(|r| *r == "cb").count(), 1, "called back once: {runs:?}");
        for i in 0..12 {
            let id = format!("m{i}");
            assert!(w.started("cb") >= w.finished(&id), "cb started before {id} finished");
        }
        let given = w.runner.payloads.borrow()["cb"].clone();
        assert_eq!(given["body"]["x"], json!(1), "its own body kept");
        let members = given["body"]["batch"]["jobs"].as_array().cloned().unwrap_or_default();
        let ids: Vec<&str> = members.iter().filter_map(|m| m["id"].as_str()).collect();
        assert_eq!(ids, (0..12).map(|i| format!("m{i}")).collect::<Vec<_>>(), "every job, in the batch's order");
        assert_eq!(members[5]["status"], json!("DEAD"));
        assert_eq!((members[7]["status"].clone(), members[7]["result"]["ran"].clone()), (json!("DONE"), json!("m7")));
        let progress = w.call("GET", "/batches/cb", None).json_body()["batch"].clone();
        assert_eq!(
            (
                progress["finished"].clone(),
                progress["done"].clone(),
                progress["dead"].clone(),
                progress["then"]["status"].clone()
            ),
            (json!(12), json!(11), json!(1), json!("DONE"))
        );
        assert_eq!(progress["jobs"][0]["result"]["ran"], json!("m0"));
        // Finished, each job still names its batch; the callback names none.
        assert_eq!((w.job("m5")["batch_id"].clone(), w.job("m11")["batch_id"].clone()), (json!("cb"), json!("cb")));
        assert!(w.job("cb").get("batch_id").is_none());
    }
}

/// A batch is kept as long as its callback: purging the callback purges the batch's rows.
#[test]
fn a_batch_s_rows_are_purged_with_its_callback() {
    use orderly::ledger::{Sql, Stmt};
    for w in every_world() {
        let jobs: Vec<Value> = (0..3).map(|i| job(&format!("m{i}"), Some(&format!("k{i}")), &[])).collect();
        assert_eq!(
            batch(&w, jobs, json!({"id": "cb", "payload": {"type": "webhook", "url": "https://h.test/"}})).status,
            202
        );
        w.drain();
        let members = || -> i64 {
            w.shards
                .iter()
                .map(|db| {
                    let rows = block_on(db.query(Stmt::bind("SELECT count(*) AS n FROM batch_member", []))).unwrap();
                    rows[0]["n"].as_i64().unwrap_or(-1)
                })
                .sum()
        };
        assert_eq!(members(), 3);
        w.clock.advance_ms(i64::from(w.cfg.retention_days) * 86_400_000 + 60_000);
        w.maintain();
        assert_eq!(w.call("GET", "/jobs/cb", None).status, 404, "the callback purged");
        assert_eq!(members(), 0, "and its batch's rows with it");
    }
}

#[test]
fn a_batch_whose_results_do_not_fit_gives_its_callback_where_to_read_them() {
    let w = World::new(OrderingMode::Strict, 3);
    let jobs: Vec<Value> = (0..20).map(|i| with_body(&format!("m{i}"), None, &[], json!({"pad": 4000}))).collect();
    assert_eq!(
        batch(&w, jobs, json!({"id": "cb", "payload": {"type": "webhook", "url": "https://h.test/done"}})).status,
        202
    );
    w.drain();
    let given = w.runner.payloads.borrow()["cb"].clone();
    let b = &given["body"]["batch"];
    assert_eq!(b["results"], json!("/batches/cb"), "{given}");
    assert_eq!(b["jobs"].as_array().map(Vec::len), Some(20));
    assert!(b["jobs"][0].get("result").is_none());
    let read = w.call("GET", "/batches/cb", None).json_body();
    assert_eq!(read["batch"]["jobs"][19]["result"]["ran"], json!("m19"));
}

#[test]
fn a_batch_is_refused_whole_when_its_callback_or_a_job_cannot_be_one() {
    let w = World::new(OrderingMode::Lock, 3);
    let cb = |extra: Value| {
        let mut then = json!({"id": "cb", "payload": {"type": "webhook", "url": "https://h.test/done"}});
        then.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
        then
    };
    let cases = [
        (vec![job("m0", None, &[])], cb(json!({"after": ["m0"]})), "takes no \"after\""),
        (vec![job("m0", None, &[])], cb(json!({"dedupe_key": "d"})), "no dedupe_key"),
        (vec![job("cb", None, &[])], cb(json!({})), "is a job of the batch"),
        (
            vec![json!({"id": "m0", "dedupe_key": "d", "payload": {"type": "webhook", "url": "https://h.test/"}})],
            cb(json!({})),
            "take no dedupe_key",
        ),
        (vec![job("m0", None, &[])], json!({"payload": 1}), "then:"),
    ];
    for (jobs, then, says) in cases {
        let r = batch(&w, jobs, then);
        assert_eq!(r.status, 400, "{}", r.body);
        assert!(r.json_body()["error"].as_str().unwrap_or_default().contains(says), "{says}: {}", r.body);
    }
    for id in ["m0", "cb"] {
        assert_eq!(w.call("GET", &format!("/jobs/{id}"), None).status, 404);
    }
    w.submit(vec![job("plain", None, &[])]);
    assert_eq!(w.call("GET", "/batches/plain", None).status, 404, "a job that is no batch's callback");
    assert_eq!(w.call("GET", "/batches/nope", None).status, 404);
}

#[test]
fn rust_enqueues_a_chain_and_a_batch_with_the_api_s_rules() {
    use orderly::enqueue::{Enqueue, Producer};
    let w = World::new(OrderingMode::Strict, 3);
    let ledger = w.ledger();
    let new_id = || "unused".to_string();
    let producer = Producer::new(&ledger, &w.queue, &w.clock, &w.cfg, &orderly::app::BuiltIn, &new_id, None);
    let hook = |n: u32| json!({"type": "webhook", "url": "https://h.test/", "body": {"n": n}});
    let first = Enqueue { id: Some("r1".into()), ..Enqueue::key("k1") };
    let second = Enqueue { id: Some("r2".into()), ..Enqueue::key("k2").after(["r1"]) };
    block_on(producer.enqueue_all(vec![(hook(1), first), (hook(2), second)])).unwrap();
    let unknown = block_on(producer.enqueue_all(vec![(hook(3), Enqueue::key("k3").after(["nope"]))]));
    assert!(matches!(unknown, Err(orderly::enqueue::EnqueueError::Refused(_))), "{unknown:?}");
    let members = (0..3).map(|n| (hook(n), Enqueue { id: Some(format!("b{n}")), ..Enqueue::key("k4") })).collect();
    let then = (hook(9), Enqueue { id: Some("rb".into()), ..Enqueue::default() });
    let (jobs, cb) = block_on(producer.enqueue_batch(members, then)).unwrap();
    assert_eq!((jobs.len(), cb.id.as_str()), (3, "rb"));
    w.drain();
    assert!(w.started("r2") >= w.finished("r1"));
    assert_eq!(w.runner.payloads.borrow()["rb"]["body"]["batch"]["jobs"].as_array().map(Vec::len), Some(3));
}

#[test]
fn a_wait_registered_after_its_dependency_died_and_was_redriven_answers_for_that_death() {
    for w in every_world() {
        w.submit(vec![with_body("x", Some("k1"), &[], json!({"dead": true}))]);
        // b's wait on x is recorded, but its submission dies before registering it.
        record_unregistered(&w, "x");
        w.drain();
        assert_eq!(w.status("x"), "DEAD");
        // x is redriven before maintenance registers b's wait: x's death came after b was recorded.
        assert_eq!(w.call("POST", "/jobs/x/redrive", None).status, 200);
        w.clock.advance_ms(REGISTER_GRACE_MS);
        let report = w.maintain();
        assert_eq!(report.released, 1, "{report:?}");
        assert_eq!(w.job("b")["last_error"], json!("a job it runs after ended DEAD: x"));
    }
}

/// What a D1 ledger holds besides its jobs and their history goes with them to the shards: a
/// dependent's wait and its dependency's waiter, a batch's members (one finished), a limit key an
/// operator paused, a paused ordering key, a job's trace context.
#[test]
fn a_d1_ledger_moved_to_shards_keeps_its_waits_batches_pauses_and_trace_context() {
    let mut w = World::new(OrderingMode::Strict, 0);
    w.cfg.limits = orderly::flow::Policies::parse(r#"{"tenant": {"concurrency": 1}}"#).unwrap();
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let trace = orderly::trace::TraceContext::parse(tp, Some("vendor=1")).unwrap();
    let chain = json!({"jobs": [job("a", Some("k1"), &[]), job("b", Some("k2"), &["a"])]});
    assert_eq!(w.call_traced("POST", "/jobs", Some(chain), Some(trace)).status, 202);
    let then = json!({"id": "cb", "ordering_key": "k5", "payload": {"type": "webhook", "url": "https://h.test/done"}});
    assert_eq!(batch(&w, vec![job("m0", Some("k3"), &[]), job("m1", Some("k4"), &[])], then).status, 202);
    let mut f = job("f", Some("k7"), &[]);
    f["limit_key"] = json!("tenant");
    w.submit(vec![job("e", Some("k6"), &[]), f]);
    assert_eq!(w.call("PUT", "/keys/k6", Some(json!({"paused": true}))).status, 200);
    assert_eq!(w.call("PUT", "/limits/tenant", Some(json!({"paused": true}))).status, 200);
    // m0 runs on D1: its batch's row records it DONE with its result.
    let (m0, rest): (Vec<Incoming>, Vec<Incoming>) =
        w.sent_since().into_iter().partition(|m| m.body.as_ref().unwrap()["__orderly_job__"]["id"] == "m0");
    w.run(&m0);
    assert_eq!(w.runs(), vec!["m0"]);

    let w = w.moved(3, 2);
    assert_eq!(w.job("b")["waiting_on"], json!(["a"]), "b's wait moved");
    assert_eq!(w.job("a")["waited_by"], json!(["b"]), "a's waiter moved");
    assert_eq!((w.job("a")["traceparent"].clone(), w.job("a")["tracestate"].clone()), (json!(tp), json!("vendor=1")));
    w.run(&rest);
    w.drain();
    let runs = w.runs();
    let at = |id: &str| runs.iter().position(|r| r == id).unwrap_or_else(|| panic!("{id} ran: {runs:?}"));
    assert!(at("a") < at("b") && at("m1") < at("cb"), "{runs:?}");
    assert!(!runs.contains(&"e".to_string()) && !runs.contains(&"f".to_string()), "paused: {runs:?}");
    let given = w.runner.payloads.borrow()["cb"].clone();
    let members = &given["body"]["batch"]["jobs"];
    assert_eq!((members[0]["status"].clone(), members[0]["result"]["ran"].clone()), (json!("DONE"), json!("m0")));
    assert_eq!(members[1]["status"], json!("DONE"));
    // Each pause is lifted on the shards, and its job runs.
    assert_eq!(w.call("PUT", "/keys/k6", Some(json!({"paused": false}))).json_body()["was_paused"], json!(true));
    assert_eq!(w.call("PUT", "/limits/tenant", Some(json!({"paused": false}))).status, 200);
    w.drain();
    assert_eq!((w.status("e"), w.status("f")), ("DONE".into(), "DONE".into()));
}
