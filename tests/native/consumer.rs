//! The batch algorithm end to end on the host: the real consumer over an in-memory KV that stores
//! and expires, the ledger on real SQLite, and a scripted handler that records what ran.

use std::cell::RefCell;
use std::rc::Rc;

use crate::support::{MemoryQueue, Sqlite};
use futures::executor::block_on;
use orderly::clock::{Clock, ManualClock};
use orderly::config::Config;
use orderly::consumer::{
    Consumer, Incoming, Outcome, Role, DELIVERY_EXHAUSTED, INFRA_RETRY_DELAY_SECONDS, RESEND_WAITING_AFTER_MS,
};
use orderly::handlers::{Done, JobContext, JobError, Runner};
use orderly::ledger::{stmt, JobRow, JobSpec, Lease, Sql, Status};
use orderly::lock::{owner_token, Kv, MemoryKv};
use serde_json::{json, Value};

const T0: i64 = 1_700_000_000_000;

/// Runs jobs as their payload scripts: `{"fail": n}` fails the first n attempts (retryable),
/// `{"permanent": true}` fails for good, `{"takes_ms": n}` advances the clock, `{"hangs": true}`
/// never ends. Records every run.
struct Script {
    clock: Rc<ManualClock>,
    kv: Rc<MemoryKv<Rc<ManualClock>>>,
    runs: RefCell<Vec<(String, u32)>>,
    /// The payload each run was given.
    payloads: RefCell<Vec<Value>>,
    /// When set, a run of this job id loses its lease mid-run (as if the reaper took it).
    steal: RefCell<Option<(String, std::path::PathBuf)>>,
    /// The lock value seen at each run of a keyed job (lock key, value).
    seen_locks: RefCell<Vec<Option<String>>>,
    watch_lock: Option<String>,
}

impl Runner for Script {
    async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
        self.runs.borrow_mut().push((job.id.to_string(), job.attempt));
        self.payloads.borrow_mut().push(job.payload.clone());
        if let Some((id, path)) = self.steal.borrow().as_ref().filter(|(id, _)| id == job.id) {
            let other = Sqlite::open(path);
            other
                .conn
                .execute(
                    "UPDATE job SET status = 'PENDING', lease_owner = NULL, lease_until = NULL WHERE id = ?1",
                    [id],
                )
                .unwrap();
        }
        if let (Some(victim), Some((_, path))) =
            (job.payload.get("reap").and_then(Value::as_str), self.steal.borrow().as_ref())
        {
            // The reaper takes another job of this invocation while this one runs.
            Sqlite::open(path)
                .conn
                .execute(
                    "UPDATE job SET status = 'PENDING', lease_owner = NULL, lease_until = NULL WHERE id = ?1",
                    [victim],
                )
                .unwrap();
        }
        if let Some(k) = &self.watch_lock {
            self.seen_locks.borrow_mut().push(self.kv.peek(k));
        }
        if let Some(ms) = job.payload.get("takes_ms").and_then(Value::as_i64) {
            self.clock.advance_ms(ms);
        }
        if job.payload.get("hangs").is_some() {
            futures::future::pending::<()>().await;
        }
        if job.payload.get("permanent").is_some() {
            return Err(JobError::permanent("HTTP 404"));
        }
        // `{"snooze": n}`: the first n runs of the job snooze for 30 s.
        let runs_so_far = self.runs.borrow().iter().filter(|(id, _)| id == job.id).count() as u64;
        if runs_so_far <= job.payload.get("snooze").and_then(Value::as_u64).unwrap_or(0) {
            return Err(JobError::snooze(30, "not ready"));
        }
        let fails = job.payload.get("fail").and_then(Value::as_u64).unwrap_or(0);
        if u64::from(job.attempt) <= fails {
            return Err(JobError::Retryable { reason: "HTTP 503".into(), retry_after: None, http_status: Some(503) });
        }
        match job.payload.get("result") {
            Some(r) => Ok(Done { result: Some(r.clone()), http_status: Some(200) }),
            None => Ok(Done::default()),
        }
    }
}

struct World {
    clock: Rc<ManualClock>,
    kv: Rc<MemoryKv<Rc<ManualClock>>>,
    db: Sqlite,
    script: Script,
    cfg: Config,
    /// What the consumer reported.
    log: RefCell<Vec<String>>,
    queue: MemoryQueue,
    /// Outcomes as the consumer gave them, a re-sent message's `Ack` included.
    raw: std::cell::Cell<bool>,
    /// The database file (for a second connection that acts behind the consumer's back).
    path: std::path::PathBuf,
    /// Give the consumer a timer (one that moves the clock on by what it waits).
    timer: std::cell::Cell<bool>,
}

impl World {
    fn new() -> World {
        Self::with(Config::default(), None)
    }
    fn with(cfg: Config, watch_lock: Option<&str>) -> World {
        let clock = Rc::new(ManualClock::new(T0));
        let kv = Rc::new(MemoryKv::new(clock.clone()));
        let script = Script {
            clock: clock.clone(),
            kv: kv.clone(),
            runs: RefCell::default(),
            payloads: RefCell::default(),
            steal: RefCell::default(),
            seen_locks: RefCell::default(),
            watch_lock: watch_lock.map(str::to_string),
        };
        let (db, path) = Sqlite::temp();
        World {
            clock,
            kv,
            db,
            path,
            script,
            cfg,
            log: RefCell::default(),
            queue: MemoryQueue::default(),
            raw: Default::default(),
            timer: Default::default(),
        }
    }
    fn process(&self, role: Role, msgs: &[Incoming]) -> Vec<Outcome> {
        let log = |event: &orderly::log::Event<'_>| self.log.borrow_mut().push(event.to_string());
        let consumer = Consumer::new(
            &self.cfg,
            &self.kv,
            &self.db,
            &self.script,
            &self.clock,
            &self.queue,
            format!("inv-{}", self.clock.now_ms()),
        )
        .with_random(&|| 1.0)
        .with_log(&log);
        let sleep = |ms: i64| -> futures::future::LocalBoxFuture<'_, ()> {
            self.clock.advance_ms(ms);
            Box::pin(async {})
        };
        let consumer = if self.timer.get() { consumer.with_sleep(&sleep) } else { consumer };
        let before = self.queue.sent_with_delay().len();
        let mut out = block_on(consumer.process(role, msgs));
        if self.raw.get() {
            return out;
        }
        // A message that waits is acked and sent again with its delay: seen here as deferred by
        // that delay (how the wait is carried is `a_waiting_message_is_sent_again_not_retried`'s).
        for (env, delay) in self.queue.sent_with_delay().split_off(before) {
            let id = env.meta.id.unwrap_or_default();
            let i = msgs.iter().position(|m| m.id == id).expect("a re-sent message is one of the batch");
            assert_eq!(out[i], Outcome::Ack, "a re-sent message is acked");
            out[i] = Outcome::Defer { delay_seconds: delay };
        }
        out
    }
    fn run(&self, msgs: &[Incoming]) -> Vec<Outcome> {
        self.process(Role::Main, msgs)
    }
    fn job(&self, id: &str) -> JobRow {
        JobRow::first(&block_on(self.db.query(stmt::get(id))).unwrap()).unwrap().expect("job row")
    }
    fn runs(&self) -> Vec<String> {
        self.script.runs.borrow().iter().map(|(id, _)| id.clone()).collect()
    }
    fn lock(&self, key: &str) -> Option<String> {
        self.kv.peek(&format!("__fedify_ordering_{key}"))
    }
}

fn msg(id: &str, ts: i64, body: Value) -> Incoming {
    Incoming { id: id.into(), timestamp_ms: ts, body: Ok(body) }
}

fn keyed(id: &str, ts: i64, key: &str, payload: Value) -> Incoming {
    msg(id, ts, json!({"__fedify_ordering_key__": key, "__fedify_payload__": payload}))
}

fn ok() -> Value {
    json!({"type": "t"})
}

/// A ledger spec for a job of the test type, as a message would produce it.
fn spec(id: &str, key: Option<&str>) -> JobSpec {
    JobSpec {
        id: id.into(),
        job_type: Some("t".into()),
        ordering_key: key.map(str::to_string),
        dedupe_key: None,
        limit_key: None,
        deadline_at: None,
        timeout_seconds: None,
        payload: Some(ok().to_string()),
        max_attempts: 8,
        priority: 5,
    }
}

#[test]
fn a_keys_messages_run_in_send_order_under_one_lock_hold() {
    let w = World::new();
    let batch = [
        keyed("m3", T0 + 3, "k", ok()),
        keyed("m1", T0 + 1, "k", ok()),
        keyed("m4", T0 + 4, "k", ok()),
        keyed("m2", T0 + 2, "k", ok()),
    ];
    assert_eq!(w.run(&batch), vec![Outcome::Ack; 4]);
    assert_eq!(w.runs(), vec!["m1", "m2", "m3", "m4"]);
    // One hold for the group: get + put to take, get + delete to release.
    assert_eq!(w.kv.ops.get(), 4);
    // One D1 round trip for the claims, one for the completions.
    assert_eq!(w.db.round_trips.get(), 2);
    assert_eq!(w.lock("k"), None, "the lock is gone after processing");
    assert!(["m1", "m2", "m3", "m4"].iter().all(|id| w.job(id).status == Status::Done));
}

#[test]
fn a_held_lock_defers_the_whole_group_without_spending_attempts() {
    let w = World::new();
    // A lock as Fedify writes it: its prefix, a value that is not one of ours.
    block_on(w.kv.put("__fedify_ordering_k", "fedify-holder", 60)).unwrap();
    let batch = [keyed("a", T0, "k", ok()), keyed("b", T0 + 1, "k", ok()), msg("free", T0, ok())];
    let out = w.run(&batch);
    assert_eq!(out[..2], [Outcome::Defer { delay_seconds: 2 }; 2]);
    assert_eq!(out[2], Outcome::Ack, "other keys are not blocked");
    assert_eq!(w.runs(), vec!["free"]);
    for id in ["a", "b"] {
        let j = w.job(id);
        assert_eq!((j.status, j.attempts, j.deferrals), (Status::Pending, 0, 1));
    }
    assert_eq!(w.kv.peek("__fedify_ordering_k").as_deref(), Some("fedify-holder"), "a foreign lock is never released");

    // Once the holder's lock expires, the key's messages run, in order, on their first attempt.
    w.clock.advance_ms(60_000);
    assert_eq!(w.run(&batch[..2]), vec![Outcome::Ack; 2]);
    assert_eq!(w.runs(), vec!["free", "a", "b"]);
    assert_eq!(w.job("b").attempts, 1);
}

#[test]
fn a_failed_job_holds_its_key_so_nothing_overtakes_it() {
    let w = World::new();
    let a = keyed("a", T0, "k", json!({"type": "t", "fail": 1}));
    let b = keyed("b", T0 + 1, "k", ok());
    let c = keyed("c", T0 + 2, "k", ok());
    let out = w.run(&[a.clone(), b.clone(), c.clone()]);
    assert_eq!(out[0], Outcome::Retry { delay_seconds: 5 });
    assert_eq!(out[1..], [Outcome::Defer { delay_seconds: 5 }; 2]);
    assert_eq!(w.lock("k"), Some(owner_token("a")), "the key is held in the failed job's name");
    assert_eq!((w.job("b").attempts, w.job("b").deferrals), (0, 1), "a held-back job spends no attempt");

    // b and c come back before a: the key is still held for a.
    w.clock.advance_ms(5_000);
    assert_eq!(w.run(&[b.clone(), c.clone()]), vec![Outcome::Defer { delay_seconds: 2 }; 2]);
    // a comes back (with the others): it recognises its own lock, and all three run in order.
    w.clock.advance_ms(2_000);
    assert_eq!(w.run(&[c, a, b]), vec![Outcome::Ack; 3]);
    assert_eq!(w.runs(), vec!["a", "a", "b", "c"]);
    assert_eq!(w.lock("k"), None);
    assert_eq!(w.job("a").attempts, 2);
}

#[test]
fn the_job_a_key_is_held_for_runs_first_though_its_message_is_younger() {
    let w = World::new();
    let a = keyed("a", T0, "k", json!({"type": "t", "fail": 1}));
    let b = keyed("b", T0 + 1, "k", ok());
    w.run(&[a, b.clone()]);
    assert_eq!(w.lock("k"), Some(owner_token("a")));
    // a's message was sent again after its failure (as after a panic): it is younger than b's,
    // and the batch's send order would put b first. The key is held for a: a runs first.
    w.clock.advance_ms(5_000);
    let a_again = keyed("a", T0 + 4_000, "k", json!({"type": "t", "fail": 1}));
    assert_eq!(w.run(&[b, a_again]), vec![Outcome::Ack; 2]);
    assert_eq!(w.runs(), vec!["a", "a", "b"]);
    assert_eq!(w.lock("k"), None);
}

#[test]
fn messages_of_a_key_held_by_a_failed_job_wait_for_its_retry_not_a_poll() {
    let w = World::new();
    let a = keyed("a", T0, "k", json!({"type": "t", "fail": 1}));
    let b = keyed("b", T0 + 1, "k", ok());
    w.run(&[a, b.clone()]);
    // b comes back 1 s later, alone: a's retry is 4 s away, so b waits that long, not 2 s.
    w.clock.advance_ms(1_000);
    assert_eq!(w.run(&[b]), vec![Outcome::Defer { delay_seconds: 4 }]);
    assert_eq!(w.job("b").next_run_at, T0 + 5_000);
}

#[test]
fn a_lock_whose_holder_is_finished_is_taken_over_not_polled_until_delivery_runs_out() {
    let w = World::new();
    let a = keyed("a", T0, "k", json!({"type": "t", "fail": 1}));
    w.run(&[a]);
    assert_eq!(w.lock("k"), Some(owner_token("a")), "a holds its key for its retry");
    // An operator cancels a while it waits: it is DEAD, but its hold is still in KV.
    let cancelled = block_on(orderly::ledger::Ledger::new(&w.db).cancel("a", T0 + 500)).unwrap();
    assert!(matches!(cancelled, orderly::ledger::Cancel::Cancelled(_)));
    w.clock.advance_ms(1_000);
    // A job of the key arriving now runs at once, and lets the key go.
    assert_eq!(w.run(&[keyed("b", T0 + 1_000, "k", ok())]), vec![Outcome::Ack]);
    assert_eq!(w.job("b").status, Status::Done);
    assert_eq!(w.lock("k"), None);
    // A lock naming a job still waiting for its retry is not taken over.
    w.run(&[keyed("c", T0 + 2_000, "k2", json!({"type": "t", "fail": 1}))]);
    assert_eq!(w.run(&[keyed("d", T0 + 2_001, "k2", ok())]), vec![Outcome::Defer { delay_seconds: 5 }]);
    assert_eq!(w.lock("k2"), Some(owner_token("c")));
}

#[test]
fn a_snooze_holds_the_key_spends_no_attempt_and_runs_when_it_ends() {
    let w = World::new();
    let a = keyed("a", T0, "k", json!({"type": "t", "snooze": 1}));
    let b = keyed("b", T0 + 1, "k", ok());
    let out = w.run(&[a.clone(), b.clone()]);
    assert_eq!(out, vec![Outcome::Defer { delay_seconds: 30 }, Outcome::Defer { delay_seconds: 30 }]);
    let row = w.job("a");
    assert_eq!((row.status, row.attempts, row.next_run_at), (Status::Pending, 0, T0 + 30_000));
    assert_eq!(w.lock("k"), Some(owner_token("a")), "the key is held in a's name meanwhile");
    // b alone, before the snooze ends, waits for it.
    w.clock.advance_ms(5_000);
    assert_eq!(w.run(std::slice::from_ref(&b)), vec![Outcome::Defer { delay_seconds: 25 }]);
    w.clock.advance_ms(25_000);
    assert_eq!(w.run(&[a, b]), vec![Outcome::Ack, Outcome::Ack]);
    assert_eq!(w.script.runs.borrow().clone(), vec![("a".into(), 1), ("a".into(), 1), ("b".into(), 1)]);
    assert_eq!((w.job("a").attempts, w.job("b").status), (1, Status::Done));
}

#[test]
fn a_waiting_message_is_sent_again_not_retried() {
    let w = World::new();
    w.raw.set(true);
    let sent_at = T0 - RESEND_WAITING_AFTER_MS - 1;
    let a = keyed("a", sent_at - 2, "k", json!({"type": "t", "snooze": 1}));
    let b = keyed("b", sent_at - 1, "k", ok());
    let b2 = keyed("b2", sent_at, "k", ok());
    // Every retry() spends one of Queues' max_retries deliveries: a snooze and the jobs waiting
    // behind it, once their messages are a minute old, are acked and come back as new messages.
    assert_eq!(w.run(&[a.clone(), b.clone(), b2.clone()]), vec![Outcome::Ack; 3]);
    let sent = w.queue.sent_with_delay();
    let seen: Vec<_> =
        sent.iter().map(|(e, d)| (e.meta.id.clone(), e.meta.queued_at, e.ordering_key.clone(), *d)).collect();
    let k = Some("k".to_string());
    assert_eq!(
        seen,
        vec![
            (Some("a".into()), Some(sent_at - 2), k.clone(), 30),
            (Some("b".into()), Some(sent_at - 1), k.clone(), 30),
            (Some("b2".into()), Some(sent_at), k, 30)
        ]
    );
    assert_eq!((w.job("a").attempts, w.job("b").attempts), (0, 0));
    // Delivered again (new messages, new ids, one send time, any order): the key's order holds,
    // the key's holder first and the jobs behind it by when they were first sent (the new
    // messages' own send time is the same for all).
    w.clock.advance_ms(30_000);
    let again: Vec<Incoming> = w.queue.batches.borrow()[0]
        .iter()
        .rev()
        .enumerate()
        .map(|(n, m)| msg(&format!("new-{n}"), T0 + 30_000, serde_json::from_str(m.json()).unwrap()))
        .collect();
    assert_eq!(w.run(&again), vec![Outcome::Ack; 3], "{:?} {:?}", w.runs(), w.log.borrow());
    assert_eq!(w.runs(), vec!["a", "a", "b", "b2"]);
    assert_eq!((w.job("a").status, w.job("b").status), (Status::Done, Status::Done));
    // A younger message is retried (a re-send costs more), and so is one the queue cannot take.
    let young = keyed("y", T0 + 30_000 - RESEND_WAITING_AFTER_MS + 1_000, "k3", json!({"type": "t", "snooze": 1}));
    assert_eq!(w.run(&[young]), vec![Outcome::Defer { delay_seconds: 30 }]);
    let c = keyed("c", sent_at, "k2", json!({"type": "t", "snooze": 1}));
    w.queue.down.set(true);
    assert_eq!(w.run(&[c]), vec![Outcome::Defer { delay_seconds: 30 }]);
    assert!(w.log.borrow().iter().any(|l| l.contains("not sent again")), "{:?}", w.log.borrow());
}

#[test]
fn a_job_that_snoozes_for_hours_never_runs_out_of_queue_deliveries() {
    // Queues dead-letters a message after `max_retries` (100) retries; a job snoozing every 30 s
    // for 150 runs, with the job behind it waiting, must not be dead-lettered though it never failed.
    let w = World::new();
    w.raw.set(true);
    let mut waiting =
        vec![(keyed("a", T0, "k", json!({"type": "t", "snooze": 150})), 1), (keyed("b", T0 + 1, "k", ok()), 1)];
    let mut most = 0;
    for round in 0..200 {
        let batch: Vec<Incoming> = waiting.iter().map(|(m, _)| m.clone()).collect();
        let out = w.run(&batch);
        let sent = w.queue.batches.borrow_mut().drain(..).flatten().collect::<Vec<_>>();
        let mut next = Vec::new();
        for ((m, deliveries), o) in waiting.into_iter().zip(out) {
            match o {
                Outcome::Defer { .. } | Outcome::Retry { .. } => next.push((m, deliveries + 1)),
                Outcome::Ack => {}
            }
        }
        for (n, s) in sent.iter().enumerate() {
            let body = serde_json::from_str(s.json()).unwrap();
            next.push((msg(&format!("m{round}-{n}"), w.clock.now_ms(), body), 1));
        }
        next.sort_by_key(|(m, _)| m.timestamp_ms);
        most = next.iter().map(|(_, d)| *d).max().unwrap_or(0).max(most);
        waiting = next;
        if waiting.is_empty() {
            break;
        }
        w.clock.advance_ms(30_000);
    }
    assert!(waiting.is_empty(), "both jobs finished");
    assert_eq!((w.job("a").status, w.job("a").snoozes, w.job("b").status), (Status::Done, 150, Status::Done));
    assert!(most <= 4, "a message was delivered {most} times");
    assert_eq!(w.runs().last().map(String::as_str), Some("b"));
}

#[test]
fn a_key_held_by_a_running_group_is_polled_at_the_configured_delay() {
    let w = World::new();
    block_on(w.db.query(stmt::claim(
        &spec("runner", Some("k")),
        "another-invocation",
        Lease { now: T0, until: T0 + 120_000, due_before: T0 },
    )))
    .unwrap();
    block_on(w.kv.put("__fedify_ordering_k", &owner_token("runner"), 60)).unwrap();
    // Its lease runs for two minutes, but the group holding it finishes in moments: poll.
    assert_eq!(w.run(&[keyed("b", T0, "k", ok())]), vec![Outcome::Defer { delay_seconds: 2 }]);
}

#[test]
fn a_batch_of_only_unreadable_bodies_costs_one_round_trip() {
    let w = World::new();
    let bad = Incoming { id: "x".into(), timestamp_ms: T0, body: Err("bytes".into()) };
    assert_eq!(w.run(&[bad]), vec![Outcome::Ack]);
    assert_eq!(w.db.round_trips.get(), 1);
}

#[test]
fn results_that_cannot_be_recorded_are_not_acked_and_the_key_is_let_go() {
    let w = World::new();
    w.db.down_after.set(Some(1)); // claims succeed, the completion batch fails
    let out = w.run(&[
        keyed("a", T0, "k", json!({"type": "t", "fail": 1})),
        keyed("b", T0 + 1, "k", ok()),
        msg("c", T0, ok()),
    ]);
    assert_eq!(out, vec![Outcome::Defer { delay_seconds: INFRA_RETRY_DELAY_SECONDS }; 3]);
    assert_eq!(w.lock("k"), None, "no hold is left behind for a failure that was never recorded");
    w.db.down_after.set(None);
    assert_eq!(w.job("c").status, Status::Running, "the lease decides when c may run again");
}

#[test]
fn a_dead_job_releases_its_key_for_the_rest() {
    let w = World::new();
    let out = w.run(&[keyed("a", T0, "k", json!({"type": "t", "permanent": true})), keyed("b", T0 + 1, "k", ok())]);
    assert_eq!(out, vec![Outcome::Ack, Outcome::Ack]);
    let a = w.job("a");
    assert_eq!((a.status, a.last_error.as_deref()), (Status::Dead, Some("HTTP 404")));
    assert_eq!(w.job("b").status, Status::Done);
    assert_eq!(w.lock("k"), None);
}

#[test]
fn retries_back_off_then_the_job_is_dead_at_max_attempts() {
    let w = World::new();
    let m = msg("m", T0, json!({"type": "t", "fail": 99, "__orderly_job__": {"max_attempts": 3}}));
    assert_eq!(w.run(std::slice::from_ref(&m)), vec![Outcome::Retry { delay_seconds: 5 }]);
    w.clock.advance_ms(5_000);
    assert_eq!(w.run(std::slice::from_ref(&m)), vec![Outcome::Retry { delay_seconds: 10 }]);
    w.clock.advance_ms(10_000);
    assert_eq!(w.run(std::slice::from_ref(&m)), vec![Outcome::Ack]);
    let j = w.job("m");
    assert_eq!((j.status, j.attempts), (Status::Dead, 3));
    assert!(j.last_error.unwrap().contains("attempt 3 of 3"));
    assert_eq!(w.run(&[m]), vec![Outcome::Ack], "a late duplicate of a dead job is acked");
    assert_eq!(w.runs().len(), 3);
}

#[test]
fn a_duplicate_delivery_of_a_done_job_is_acked_without_running() {
    let w = World::new();
    let m = msg("m", T0, json!({"type": "t", "__orderly_job__": {"id": "job-1"}}));
    assert_eq!(w.run(std::slice::from_ref(&m)), vec![Outcome::Ack]);
    let again = Incoming { id: "other-message-id".into(), ..m };
    assert_eq!(w.run(&[again]), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["job-1"]);
}

#[test]
fn a_job_running_under_another_live_lease_is_deferred_until_it_expires() {
    let w = World::new();
    let m = msg("m", T0, ok());
    block_on(w.db.query(stmt::claim(
        &spec("m", None),
        "someone-else",
        Lease { now: T0, until: T0 + 30_000, due_before: T0 },
    )))
    .unwrap();
    assert_eq!(w.run(&[m]), vec![Outcome::Defer { delay_seconds: 30 }]);
    assert!(w.runs().is_empty());
}

#[test]
fn a_job_delivered_twice_in_one_batch_runs_once() {
    let w = World::new();
    let body = json!({"type": "t", "__orderly_job__": {"id": "same"}});
    let out = w.run(&[msg("x", T0, body.clone()), msg("y", T0, body)]);
    assert_eq!(out[0], Outcome::Ack);
    assert!(matches!(out[1], Outcome::Defer { .. }));
    assert_eq!(w.runs(), vec!["same"]);
}

#[test]
fn a_duplicate_inside_a_key_group_does_not_hold_back_the_messages_after_it() {
    let w = World::new();
    let a = json!({"__fedify_ordering_key__": "k", "__fedify_payload__": ok(), "__orderly_job__": {"id": "a"}});
    let out = w.run(&[msg("m1", T0, a.clone()), msg("m2", T0 + 1, a), keyed("b", T0 + 2, "k", ok())]);
    assert_eq!((out[0], out[2]), (Outcome::Ack, Outcome::Ack));
    assert!(matches!(out[1], Outcome::Defer { .. }));
    assert_eq!(w.runs(), vec!["a", "b"]);
}

#[test]
fn a_queue_message_whose_dedupe_key_is_active_elsewhere_is_recorded_dead() {
    let w = World::new();
    let with_key =
        |id: &str| msg(id, T0, json!({"type": "t", "fail": 1, "__orderly_job__": {"id": id, "dedupe_key": "d"}}));
    w.run(&[with_key("first")]); // fails once: PENDING, its dedupe key active
    assert_eq!(w.run(&[with_key("second")]), vec![Outcome::Ack]);
    let j = w.job("second");
    assert_eq!(j.status, Status::Dead);
    assert!(j.last_error.unwrap().contains("duplicate: dedupe_key \"d\""));
    assert_eq!(w.runs(), vec!["first"]);
}

#[test]
fn a_dead_letter_for_a_job_running_under_a_live_lease_waits_for_the_lease() {
    let w = World::new();
    block_on(w.db.query(stmt::claim(
        &spec("m", None),
        "someone-else",
        Lease { now: T0, until: T0 + 30_000, due_before: T0 },
    )))
    .unwrap();
    assert_eq!(w.process(Role::DeadLetter, &[msg("m", T0, ok())]), vec![Outcome::Defer { delay_seconds: 30 }]);
    assert_eq!(w.job("m").status, Status::Running);
}

#[test]
fn malformed_bodies_are_dead_and_do_not_disturb_the_batch() {
    let w = World::new();
    let batch = [
        keyed("good1", T0, "k", ok()),
        Incoming { id: "bytes".into(), timestamp_ms: T0, body: Err("the body is bytes".into()) },
        msg("badkey", T0, json!({"__fedify_ordering_key__": 42, "__fedify_payload__": {}})),
        msg("badmeta", T0, json!({"type": "t", "__orderly_job__": "nope"})),
        keyed("good2", T0 + 1, "k", ok()),
    ];
    assert_eq!(w.run(&batch), vec![Outcome::Ack; 5]);
    assert_eq!(w.runs(), vec!["good1", "good2"]);
    for (id, why) in [("bytes", "body is not JSON"), ("badkey", "must be a string"), ("badmeta", "must be an object")] {
        let j = w.job(id);
        assert_eq!(j.status, Status::Dead, "{id}");
        assert!(j.last_error.as_deref().unwrap_or_default().contains(why), "{id}: {:?}", j.last_error);
    }
}

#[test]
fn an_unknown_or_missing_type_is_dead_with_the_reason() {
    let w = World::new();
    let types = orderly::Handlers::<()>::new().webhook();
    let cfg = Config { service_handlers: vec![("email".into(), "APP".into())], ..w.cfg.clone() };
    let registry = types.runner((), &cfg, services_with_email(NoHttp));
    let consumer = Consumer::new(&cfg, &w.kv, &w.db, &registry, &w.clock, &w.queue, "inv").with_random(&|| 0.5);
    let out =
        block_on(consumer.process(Role::Main, &[msg("m", T0, json!({"type": "fax"})), msg("raw", T0, json!([1, 2]))]));
    assert_eq!(out, vec![Outcome::Ack; 2]);
    let j = w.job("m");
    assert_eq!(j.status, Status::Dead);
    assert!(j.last_error.unwrap().starts_with("unknown job type \"fax\" (known: webhook, email)"));
    let raw = w.job("raw");
    assert_eq!((raw.status, raw.payload.as_deref()), (Status::Dead, Some("[1,2]")));
    assert!(raw.last_error.unwrap().contains("no \"type\""));
}

/// A Worker behind a service binding: answers each request to `/orderly/run` as its script says
/// (status, body, snooze header), in turn, and keeps every request.
struct FakeService {
    answers: RefCell<Vec<(u16, &'static str, Option<&'static str>)>>,
    seen: RefCell<Vec<orderly::handlers::HttpRequest>>,
}
impl orderly::handlers::HttpClient for FakeService {
    async fn send(
        &self,
        req: orderly::handlers::HttpRequest,
        _: u32,
    ) -> Result<orderly::handlers::HttpResponse, orderly::handlers::SendError> {
        self.seen.borrow_mut().push(req);
        let (status, body, snooze) = self.answers.borrow_mut().remove(0);
        Ok(orderly::handlers::HttpResponse {
            status,
            retry_after: None,
            content_type: Some("application/json".into()),
            body_start: body.into(),
            snooze: snooze.map(str::to_string),
            own_words: false,
        })
    }
}

#[test]
fn a_service_handler_runs_its_type_snoozes_and_keeps_the_answer() {
    let w = World::new();
    let service = FakeService {
        answers: RefCell::new(vec![
            (200, "", Some("30")),
            (200, r#"{"sent": 1}"#, None),
            (422, "no such address", None),
        ]),
        seen: RefCell::default(),
    };
    let types = orderly::Handlers::<()>::new().webhook();
    let cfg = Config { service_handlers: vec![("email".into(), "APP".into())], ..w.cfg.clone() };
    let registry = types.runner((), &cfg, services_with_email(service));
    let run = |msgs: &[Incoming]| {
        let consumer =
            Consumer::new(&cfg, &w.kv, &w.db, &registry, &w.clock, &w.queue, format!("inv-{}", w.clock.now_ms()))
                .with_random(&|| 0.5);
        block_on(consumer.process(Role::Main, msgs))
    };
    let email = keyed("e1", T0, "acct/1", json!({"type": "email", "to": "a@b.test"}));
    assert_eq!(run(std::slice::from_ref(&email)), vec![Outcome::Defer { delay_seconds: 30 }], "snoozed");
    assert_eq!((w.job("e1").status, w.job("e1").attempts), (Status::Pending, 0));
    w.clock.advance_ms(30_000);
    assert_eq!(run(&[email]), vec![Outcome::Ack]);
    let done = w.job("e1");
    assert_eq!((done.status, done.attempts, done.result.as_deref()), (Status::Done, 1, Some(r#"{"sent":1}"#)));
    assert_eq!(run(&[msg("e2", T0, json!({"type": "email", "to": "nobody"}))]), vec![Outcome::Ack]);
    let dead = w.job("e2");
    assert_eq!((dead.status, dead.last_error.as_deref()), (Status::Dead, Some("HTTP 422: no such address")));
    let seen = registry.services().http.seen.borrow();
    assert_eq!(seen.len(), 3);
    assert_eq!((seen[1].via.as_deref(), seen[1].url.as_str()), (Some("APP"), "https://orderly.internal/orderly/run"));
    let body: Value = serde_json::from_str(&seen[1].body).unwrap();
    assert_eq!(
        body,
        json!({"id": "e1", "type": "email", "attempt": 1, "ordering_key": "acct/1", "priority": 5,
               "payload": {"type": "email", "to": "a@b.test"}})
    );
    let history = history(&w, "e1");
    let statuses: Vec<_> = history.iter().map(|e| (e.outcome.map(|o| format!("{o:?}")), e.http_status)).collect();
    assert_eq!(statuses, vec![(Some("Snooze".into()), Some(200)), (Some("Done".into()), Some(200))]);
}

#[test]
fn service_handler_calls_are_signed_with_their_own_key_never_the_webhooks() {
    let w = World::new();
    let cfg = Config { service_handlers: vec![("email".into(), "APP".into())], ..w.cfg.clone() };
    let types = orderly::Handlers::<()>::new().webhook();
    let call = |webhook_key: Option<&[u8]>, handler_key: Option<&[u8]>, id: &str| {
        let service = FakeService { answers: RefCell::new(vec![(200, "", None)]), seen: RefCell::default() };
        let services = orderly::handlers::Services {
            webhook_key: webhook_key.map(<[u8]>::to_vec),
            handler_key: handler_key.map(<[u8]>::to_vec),
            ..services_with_email(service)
        };
        let registry = types.runner((), &cfg, services);
        let consumer = Consumer::new(&cfg, &w.kv, &w.db, &registry, &w.clock, &w.queue, "inv");
        block_on(consumer.process(Role::Main, &[msg(id, T0, json!({"type": "email"}))]));
        let seen = registry.services().http.seen.borrow().last().cloned();
        seen.expect("the service was called")
    };
    let header = |req: &orderly::handlers::HttpRequest, name: &str| {
        req.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    };
    // A webhook receiver holds WEBHOOK_SECRET's key: it must not be able to sign a handler call.
    let req = call(Some(b"webhooks"), Some(b"handlers"), "s1");
    let expected = orderly::handlers::webhook::sign(b"handlers", "s1", T0 / 1000, &req.body);
    assert_eq!(header(&req, "webhook-signature"), Some(expected));
    let unsigned = call(Some(b"webhooks"), None, "s2");
    assert_eq!(header(&unsigned, "webhook-signature"), None, "WEBHOOK_SECRET alone signs no handler call");
}

/// What the built-in handlers use, with `email` run by the service bound as `APP`.
fn services_with_email<H>(http: H) -> orderly::handlers::Services<H, ManualClock> {
    orderly::handlers::Services {
        http,
        clock: ManualClock::new(T0),
        webhook_key: None,
        handler_key: None,
        allow_private_targets: false,
        retry_after_cap_seconds: 3600,
        http_timeout_ms: 1_000,
        service_handlers: vec![("email".into(), "APP".into())],
    }
}

struct NoHttp;
impl orderly::handlers::HttpClient for NoHttp {
    async fn send(
        &self,
        _: orderly::handlers::HttpRequest,
        _: u32,
    ) -> Result<orderly::handlers::HttpResponse, orderly::handlers::SendError> {
        Err(orderly::handlers::SendError::Network("no network in this test".into()))
    }
}

#[test]
fn dead_letter_queue_messages_are_recorded_dead() {
    let w = World::new();
    // A job that was deferred but never ran, then exhausted its deliveries.
    block_on(w.kv.put("__fedify_ordering_k", "other", 60)).unwrap();
    let m = keyed("m", T0, "k", ok());
    w.run(std::slice::from_ref(&m));
    assert_eq!(
        w.process(Role::DeadLetter, &[m, msg("junk", T0, json!({"__orderly_job__": 1}))]),
        vec![Outcome::Ack; 2]
    );
    let j = w.job("m");
    assert_eq!((j.status, j.last_error.as_deref()), (Status::Dead, Some(DELIVERY_EXHAUSTED)));
    assert!(w.job("junk").last_error.unwrap().starts_with(DELIVERY_EXHAUSTED));
    assert!(w.runs().is_empty());
}

#[test]
fn a_d1_outage_defers_everything_and_kills_nothing() {
    let w = World::new();
    w.db.down.set(true);
    let batch = [keyed("a", T0, "k", ok()), msg("b", T0, ok()), msg("bad", T0, json!({"__orderly_job__": 1}))];
    assert_eq!(w.run(&batch), vec![Outcome::Defer { delay_seconds: INFRA_RETRY_DELAY_SECONDS }; 3]);
    assert!(w.runs().is_empty());
    assert_eq!(w.lock("k"), None, "locks taken before the outage are released");
    assert!(w.log.borrow()[0].contains("D1 unavailable"), "the outage is reported: {:?}", w.log.borrow());
    w.db.down.set(false);
    assert_eq!(w.run(&batch), vec![Outcome::Ack; 3]);
}

#[test]
fn a_kv_outage_defers_keyed_messages_and_lets_unkeyed_ones_run() {
    let w = World::new();
    w.kv.down.set(true);
    let out = w.run(&[keyed("a", T0, "k", ok()), msg("b", T0, ok())]);
    assert_eq!(out, vec![Outcome::Defer { delay_seconds: INFRA_RETRY_DELAY_SECONDS }, Outcome::Ack]);
    assert_eq!(w.runs(), vec!["b"]);
}

#[test]
fn a_long_group_refreshes_its_lock_so_it_never_lapses() {
    let w = World::with(Config::default(), Some("__fedify_ordering_k"));
    let slow = json!({"type": "t", "takes_ms": 25_000});
    let batch: Vec<Incoming> = (0..6).map(|i| keyed(&format!("m{i}"), T0 + i, "k", slow.clone())).collect();
    assert_eq!(w.run(&batch), vec![Outcome::Ack; 6]);
    // 6 x 25 s = 150 s under a 60 s TTL: without refreshes the lock would lapse mid-group.
    let seen = w.script.seen_locks.borrow();
    assert!(seen.iter().all(|v| v.as_deref() == Some("orderly:m0")), "{seen:?}");
    assert_eq!(w.lock("k"), None);
}

#[test]
fn a_custom_prefix_names_the_lock_key() {
    let cfg = Config { ordering_key_prefix: "app:lock:".into(), ..Config::default() };
    let w = World::with(cfg, Some("app:lock:k"));
    w.run(&[keyed("a", T0, "k", ok())]);
    assert_eq!(w.script.seen_locks.borrow().as_slice(), &[Some("orderly:a".to_string())]);
}

#[test]
fn an_early_delivery_of_a_failed_job_keeps_its_key_held_in_its_name() {
    let w = World::new();
    let a = keyed("a", T0, "k", json!({"type": "t", "fail": 1}));
    let b = keyed("b", T0 + 1, "k", ok());
    w.run(&[a.clone(), b.clone()]);
    assert_eq!(w.lock("k"), Some(owner_token("a")));
    // A duplicate of `a` arrives before its retry is due: it takes its own lock, finds `a` not
    // due, and must leave the key held in `a`'s name, not release it.
    w.clock.advance_ms(1_000);
    assert!(matches!(w.run(std::slice::from_ref(&a))[0], Outcome::Defer { .. }));
    assert_eq!(w.lock("k"), Some(owner_token("a")), "the hold survives the early delivery");
    assert!(matches!(w.run(std::slice::from_ref(&b))[0], Outcome::Defer { .. }), "b does not overtake a");
    assert_eq!(w.runs(), vec!["a"]);
}

#[test]
fn a_result_whose_lease_was_lost_is_not_acked() {
    let w = World::new();
    *w.script.steal.borrow_mut() = Some(("a".into(), w.path.clone()));
    let out = w.run(&[keyed("a", T0, "k", ok())]);
    assert!(matches!(out[0], Outcome::Defer { .. }), "{out:?}");
    assert_eq!(w.job("a").status, Status::Pending, "the completion changed nothing");
    assert!(w.log.borrow().iter().any(|l| l.contains("lease lost")), "{:?}", w.log.borrow());
    // The message comes back and the ledger decides: the job runs again (nothing is lost).
    *w.script.steal.borrow_mut() = None;
    w.clock.advance_ms(2_000);
    assert_eq!(w.run(&[keyed("a", T0, "k", ok())]), vec![Outcome::Ack]);
    assert_eq!(w.job("a").status, Status::Done);
}

#[test]
fn a_failure_whose_lease_was_lost_writes_no_hold() {
    let w = World::new();
    *w.script.steal.borrow_mut() = Some(("a".into(), w.path.clone()));
    w.run(&[keyed("a", T0, "k", json!({"type": "t", "fail": 1}))]);
    assert_eq!(w.lock("k"), None, "the key is not held in the name of an unrecorded failure");
}

#[test]
fn a_message_naming_a_recorded_job_runs_the_recorded_payload() {
    let w = World::new();
    let mut recorded = spec("a", Some("k"));
    recorded.payload = Some(json!({"type": "t", "v": "recorded"}).to_string());
    block_on(orderly::ledger::Ledger::new(&w.db).enqueue_all(&[orderly::ledger::Submit::due(&recorded, T0)], T0))
        .unwrap();
    w.run(&[keyed("a", T0, "k", json!({"type": "t", "v": "forged"}))]);
    assert_eq!(w.script.payloads.borrow()[0]["v"], json!("recorded"));
}

#[test]
fn a_group_waiting_for_a_slot_refreshes_a_lock_taken_before_it_started() {
    let w = World::with(Config::default(), Some("__fedify_ordering_k9"));
    // Seven keys: six groups run first (each takes 20 s of the shared clock); the seventh's lock,
    // taken with the others, is older than its TTL by the time that group starts.
    let slow = json!({"type": "t", "takes_ms": 20_000});
    let mut batch: Vec<Incoming> =
        (0..6).map(|i| keyed(&format!("s{i}"), T0, &format!("k{i}"), slow.clone())).collect();
    batch.push(keyed("last", T0, "k9", ok()));
    assert_eq!(w.run(&batch), vec![Outcome::Ack; 7]);
    let seen = w.script.seen_locks.borrow();
    assert!(seen.iter().all(|v| v.as_deref() == Some("orderly:last")), "k9 stays locked while it waits: {seen:?}");
}

#[test]
fn an_oversized_body_is_dead_without_its_payload_and_its_batch_mates_run() {
    let w = World::new();
    let huge = msg("huge", T0, json!({"type": "t", "pad": "x".repeat(300_000)}));
    let out = w.run(&[huge, keyed("fine", T0, "k", ok())]);
    assert_eq!(out, vec![Outcome::Ack; 2]);
    let dead = w.job("huge");
    assert_eq!((dead.status, dead.payload.as_deref()), (Status::Dead, None));
    assert!(dead.last_error.as_deref().unwrap().contains("over the 256000-byte limit"), "{:?}", dead.last_error);
    assert_eq!(w.job("fine").status, Status::Done);
}

#[test]
fn no_job_starts_that_could_outlast_the_invocations_wall_clock_limit() {
    let w = World::new();
    // Four 5-minute jobs of one key: the fourth would start at 15 minutes, past the limit less
    // one webhook timeout and a minute for recording.
    let slow = json!({"type": "t", "takes_ms": 300_000});
    let batch: Vec<Incoming> = (0..4).map(|i| keyed(&format!("j{i}"), T0 + i, "k", slow.clone())).collect();
    let out = w.run(&batch);
    assert_eq!(out[..3], [Outcome::Ack; 3]);
    assert_eq!(out[3], Outcome::Defer { delay_seconds: 1 });
    assert_eq!(w.runs(), vec!["j0", "j1", "j2"]);
    let j3 = w.job("j3");
    assert_eq!((j3.status, j3.attempts), (Status::Pending, 0), "handed back without spending an attempt");
    assert_eq!(w.lock("k"), Some(owner_token("j3")), "the key waits for it");
}

#[test]
fn a_job_whose_lease_was_lost_while_the_group_stalled_is_not_run() {
    let w = World::new();
    *w.script.steal.borrow_mut() = Some(("nobody".into(), w.path.clone()));
    // `a` takes 100 s (past the point where leases are renewed) and, meanwhile, the reaper takes `b`.
    let out = w.run(&[
        keyed("a", T0, "k", json!({"type": "t", "takes_ms": 100_000, "reap": "b"})),
        keyed("b", T0 + 1, "k", ok()),
    ]);
    assert_eq!(out[0], Outcome::Ack);
    assert!(matches!(out[1], Outcome::Defer { .. }), "{out:?}");
    assert_eq!(w.runs(), vec!["a"], "b may be another invocation's now");
    assert!(w.log.borrow().iter().any(|l| l.contains("lease lost before it started")));
}

fn history(w: &World, id: &str) -> Vec<orderly::ledger::history::Event> {
    block_on(orderly::ledger::Ledger::new(&w.db).events(id)).unwrap()
}

#[test]
fn every_attempt_is_in_the_jobs_history_and_the_result_is_kept_on_done() {
    let w = World::new();
    let job = json!({"type": "t", "fail": 2, "result": {"status": 200, "body": "thanks"}});
    let m = msg("h1", T0, job);
    for _ in 0..3 {
        w.run(std::slice::from_ref(&m));
        w.clock.advance_ms(3_600_000);
    }
    let j = w.job("h1");
    assert_eq!(j.status.as_str(), "DONE");
    assert_eq!(j.result.as_deref(), Some(r#"{"status":200,"body":"thanks"}"#));
    let h = history(&w, "h1");
    use orderly::ledger::history::RunOutcome::{Done as Ok_, Retry};
    let seen: Vec<_> = h.iter().map(|e| (e.n, e.attempt, e.outcome, e.http_status)).collect();
    assert_eq!(
        seen,
        vec![
            (1, Some(1), Some(Retry), Some(503)),
            (2, Some(2), Some(Retry), Some(503)),
            (3, Some(3), Some(Ok_), Some(200))
        ]
    );
    assert_eq!(h[0].error.as_deref(), Some("HTTP 503"));
    assert!(h.iter().all(|e| e.actor.starts_with("inv") && e.started_at.is_some_and(|s| s <= e.at)), "{h:?}");
}

#[test]
fn a_large_result_is_kept_truncated_with_a_marker() {
    let w = World::new();
    w.run(&[msg("big", T0, json!({"type": "t", "result": "x".repeat(10_000)}))]);
    let kept: Value = serde_json::from_str(w.job("big").result.as_deref().unwrap()).unwrap();
    assert_eq!(kept["truncated"], true);
    assert!(w.job("big").result.unwrap().len() <= orderly::handlers::MAX_RESULT_BYTES);
}

#[test]
fn history_keeps_the_last_twenty_events_of_a_long_retrying_job() {
    let w = World::new();
    let m = msg("long", T0, json!({"type": "t", "fail": 24, "__orderly_job__": {"max_attempts": 30}}));
    for _ in 0..25 {
        w.run(std::slice::from_ref(&m));
        w.clock.advance_ms(3_600_000);
    }
    assert_eq!(w.job("long").status.as_str(), "DONE");
    let h = history(&w, "long");
    assert_eq!(h.len(), 20);
    assert_eq!(h.iter().map(|e| e.n).collect::<Vec<_>>(), (6..=25).collect::<Vec<_>>(), "oldest first, newest kept");
    assert_eq!(h.last().unwrap().attempt, Some(25));
}

#[test]
fn the_most_urgent_groups_of_a_batch_start_first_and_a_key_keeps_its_order() {
    let w = World::new();
    // Eight unkeyed jobs and a key; six groups run at once, so who starts first is chosen.
    let mut batch: Vec<Incoming> = (0..8).map(|i| msg(&format!("u{i}"), T0 + i, ok())).collect();
    batch.push(msg("urgent", T0 + 9, json!({"type": "t", "__orderly_job__": {"priority": 0}})));
    batch.push(keyed("k1", T0 + 10, "k", ok()));
    batch.push(keyed("k2", T0 + 11, "k", json!({"type": "t", "__orderly_job__": {"priority": 1}})));
    assert_eq!(w.run(&batch), vec![Outcome::Ack; 11]);
    let runs = w.runs();
    assert_eq!(runs[0], "urgent", "{runs:?}");
    // The key's urgent job lifts its key ahead of the default-priority jobs, behind its own earlier job.
    assert_eq!(&runs[1..3], &["k1", "k2"], "{runs:?}");
}

#[test]
fn a_handler_panic_noted_before_the_invocation_died_is_recorded_as_its_failure() {
    use orderly::panics::Panicked;
    let w = World::new();
    // Two jobs were running in an invocation that panicked (its instance gone, its leases live).
    let last = JobSpec { max_attempts: 1, ..spec("last", None) };
    for s in [spec("p", Some("k")), last] {
        block_on(w.db.query(stmt::claim(&s, "inv-dead", Lease { now: T0, until: T0 + 120_000, due_before: T0 })))
            .unwrap();
    }
    block_on(w.db.query(stmt::claim(
        &spec("done", None),
        "inv-dead",
        Lease { now: T0, until: T0 + 120_000, due_before: T0 },
    )))
    .unwrap();
    // Jobs running beside them, in that invocation and in another live in the same instance,
    // died with them; a job of an invocation elsewhere did not.
    for (id, owner) in [("beside", "inv-dead"), ("other", "inv-beside"), ("elsewhere", "inv-elsewhere")] {
        block_on(w.db.query(stmt::claim(
            &spec(id, None),
            owner,
            Lease { now: T0, until: T0 + 120_000, due_before: T0 },
        )))
        .unwrap();
    }
    block_on(w.db.query(stmt::complete("done", "inv-dead", T0, None, None))).unwrap();
    w.clock.advance_ms(1_000);
    let noted = |id: &str, attempt: u32| Panicked {
        job_id: id.into(),
        attempt,
        message: "index out of bounds".into(),
        owners: vec!["inv-dead".into(), "inv-beside".into()],
    };
    let consumer = Consumer::new(&w.cfg, &w.kv, &w.db, &w.script, &w.clock, &w.queue, "inv-next").with_random(&|| 1.0);
    // A panic noted for an attempt that is over (DONE, or a later attempt) changes nothing.
    block_on(consumer.record_panics(&[noted("p", 1), noted("last", 1), noted("done", 1), noted("p", 7)]));

    let p = w.job("p");
    assert_eq!((p.status, p.attempts, p.lease_owner.as_deref()), (Status::Pending, 1, None));
    assert_eq!(p.last_error.as_deref(), Some("the handler panicked: index out of bounds"));
    assert_eq!(p.next_run_at, T0 + 1_000 + 5_000, "retried with backoff, not after its lease");
    let h = history(&w, "p");
    assert_eq!(h.len(), 1);
    assert_eq!((h[0].attempt, h[0].actor.as_str()), (Some(1), "inv-dead"));
    let dead = w.job("last");
    assert_eq!(dead.status, Status::Dead, "its last attempt panicked");
    assert!(dead.last_error.unwrap().contains("the handler panicked: index out of bounds"));
    assert_eq!(w.job("done").status, Status::Done);
    for id in ["beside", "other"] {
        let j = w.job(id);
        assert_eq!((j.status, j.attempts, j.next_run_at), (Status::Pending, 1, T0 + 1_000), "{id}");
        assert_eq!(j.last_error.as_deref(), Some(orderly::consumer::DIED_WITH_A_PANIC));
        assert_eq!(history(&w, id).len(), 1, "{id}'s ended run is in its history");
    }
    assert_eq!(w.job("elsewhere").status, Status::Running, "an invocation elsewhere is left alone");
    // All are sent again (their messages may have been acked by a chain, or wait on their leases).
    let mut sent: Vec<_> = w.queue.sent_with_delay().into_iter().map(|(e, d)| (e.meta.id.unwrap(), d)).collect();
    sent.sort();
    assert_eq!(sent, vec![("beside".into(), 0), ("other".into(), 0), ("p".into(), 5)]);
}

/// A job of limit key `limit` (and of ordering key `key`, if given).
fn limited(id: &str, ts: i64, key: Option<&str>, limit: &str, payload: Value) -> Incoming {
    let meta = json!({"id": id, "limit_key": limit});
    let body = if let Some(k) = key {
        json!({"__fedify_ordering_key__": k, "__fedify_payload__": payload, "__orderly_job__": meta})
    } else {
        let mut p = payload;
        p["__orderly_job__"] = meta;
        p
    };
    msg(id, ts, body)
}

fn with_limits(limits: &str) -> World {
    let cfg = Config { limits: orderly::flow::Policies::parse(limits).unwrap(), ..Config::default() };
    World::with(cfg, None)
}

#[test]
fn a_full_limit_key_parks_its_job_and_the_next_run_to_end_wakes_it() {
    let w = with_limits(r#"{"host": {"concurrency": 1}}"#);
    // Another invocation runs a job of the host (its permit taken, its lease 120 s).
    let other = orderly::ledger::limit::Ask {
        limit_key: "host",
        job_id: "elsewhere",
        route: orderly::ledger::Route::key("elsewhere"),
        until: T0 + 120_000,
        policy: w.cfg.limits.for_key("host"),
        pace_ms: 0,
    };
    let got = block_on(orderly::ledger::Ledger::new(&w.db).acquire(&other, T0)).unwrap();
    assert_eq!(got, orderly::ledger::limit::Permit::Granted);
    // b asks while the host is full: parked, its message acked, no attempt spent, nothing run.
    assert_eq!(w.run(&[limited("b", T0, Some("k1"), "host", ok())]), vec![Outcome::Ack]);
    let b = w.job("b");
    assert_eq!((b.status, b.attempts, b.deferrals), (Status::Pending, 0, 1));
    assert!(w.runs().is_empty());
    assert!(w.queue.sent().is_empty(), "a parked job is not polled");
    // The other job's lease ends without a word (its invocation died): its slot frees with it.
    w.clock.advance_ms(120_000);
    w.raw.set(true);
    assert_eq!(w.run(&[limited("c", T0 + 120_000, Some("k2"), "host", ok())]), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["c"]);
    // c's run ended: b, first in the host's line, is sent again, and runs.
    let sent = w.queue.sent();
    assert_eq!(sent.iter().map(|e| e.meta.id.as_deref().unwrap_or_default()).collect::<Vec<_>>(), vec!["b"]);
    let wake = msg("b-wake", T0 + 120_001, sent[0].encode());
    assert_eq!(w.run(&[wake]), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["c", "b"]);
    assert_eq!(w.job("b").attempts, 1);
}

#[test]
fn a_throttled_job_waits_for_its_start_without_spending_an_attempt() {
    let w = with_limits(r#"{"host": {"rate": 1, "per_seconds": 10}}"#);
    let out = w.run(&[limited("a", T0, None, "host", ok()), limited("b", T0 + 1, None, "host", ok())]);
    assert_eq!(out, vec![Outcome::Ack, Outcome::Defer { delay_seconds: 10 }]);
    let b = w.job("b");
    assert_eq!((b.status, b.attempts, b.next_run_at), (Status::Pending, 0, T0 + 10_000));
    w.clock.advance_ms(10_000);
    assert_eq!(w.run(&[limited("b", T0 + 1, None, "host", ok())]), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["a", "b"]);
}

/// The ledger over SQLite, its answers to a limit key's ask arriving `late_ms` after the ask
/// applied (a slow round trip): the clock moves on meanwhile.
struct SlowAsks<'a> {
    db: &'a Sqlite,
    clock: &'a ManualClock,
    late_ms: i64,
}

impl Sql for SlowAsks<'_> {
    async fn batch(
        &self,
        stmts: Vec<orderly::ledger::Stmt>,
    ) -> Result<Vec<Vec<orderly::ledger::Row>>, orderly::error::InfraError> {
        let ask = stmts.iter().any(|s| s.sql.contains("INSERT INTO limit_permit (limit_key, job_id, until)\nSELECT"));
        let out = self.db.batch(stmts).await;
        if ask {
            self.clock.advance_ms(self.late_ms);
        }
        out
    }
}

#[test]
fn a_start_granted_too_long_ago_is_not_used_and_its_permit_goes_back() {
    // The answer to a throttled key's ask arrives 5 s late, past the one interval (1 s) a grant is
    // good for: starting now would bunch starts up past the rate. The job goes back unrun, its
    // attempt kept, and the permit it was granted is freed.
    let w = with_limits(r#"{"host": {"rate": 1, "per_seconds": 1}}"#);
    let slow = SlowAsks { db: &w.db, clock: &w.clock, late_ms: 5_000 };
    let consumer = Consumer::new(&w.cfg, &w.kv, &slow, &w.script, &*w.clock, &w.queue, "inv".to_string());
    let out = block_on(consumer.process(Role::Main, &[limited("a", T0, None, "host", ok())]));
    assert_eq!(out, vec![Outcome::Defer { delay_seconds: 1 }], "handed back, to ask again");
    assert!(w.runs().is_empty(), "a stale grant started nothing: {:?}", w.runs());
    let a = w.job("a");
    assert_eq!((a.status, a.attempts), (Status::Pending, 0));
    let ledger = orderly::ledger::Ledger::new(&w.db);
    let state = block_on(ledger.limit_state("host", w.clock.now_ms())).unwrap().unwrap();
    assert_eq!(state.running, 0, "the stale grant's permit is freed");
}

#[test]
fn a_throttled_job_holds_its_ordering_key_so_nothing_behind_it_overtakes() {
    let w = with_limits(r#"{"host": {"rate": 1, "per_seconds": 10}}"#);
    let a = limited("a", T0, Some("k"), "host", ok());
    let b = limited("b", T0 + 1, Some("k"), "host", ok());
    // c has no limit: it would run at once, but it comes after b in k's order.
    let c = keyed("c", T0 + 2, "k", ok());
    let out = w.run(&[a, b.clone(), c.clone()]);
    assert_eq!(out[0], Outcome::Ack);
    assert_eq!(out[1..], [Outcome::Defer { delay_seconds: 10 }; 2]);
    assert_eq!(w.lock("k"), Some(owner_token("b")), "k is held for b");
    w.clock.advance_ms(10_000);
    assert_eq!(w.run(&[c, b]), vec![Outcome::Ack; 2]);
    assert_eq!(w.runs(), vec!["a", "b", "c"]);
}

#[test]
fn an_open_breaker_holds_its_limit_keys_jobs_without_spending_attempts() {
    let w = with_limits(r#"{"host": {"trip_after": 1, "cooldown_seconds": 60}}"#);
    let a = limited("a", T0, None, "host", json!({"type": "t", "fail": 1}));
    assert_eq!(w.run(std::slice::from_ref(&a)), vec![Outcome::Retry { delay_seconds: 5 }]);
    // The failure opened the host's breaker: b waits out the cool-down, not an attempt spent.
    assert_eq!(w.run(&[limited("b", T0 + 1, None, "host", ok())]), vec![Outcome::Defer { delay_seconds: 60 }]);
    assert_eq!((w.job("b").attempts, w.job("b").next_run_at), (0, T0 + 60_000));
    // a comes back for its retry while the breaker is open: held too, its attempt given back.
    w.clock.advance_ms(5_000);
    assert_eq!(w.run(std::slice::from_ref(&a)), vec![Outcome::Defer { delay_seconds: 55 }]);
    assert_eq!(w.job("a").attempts, 1);
    // Past the cool-down, a is the probe; it succeeds and the breaker closes for b.
    w.clock.advance_ms(55_000);
    assert_eq!(w.run(&[a]), vec![Outcome::Ack]);
    assert_eq!(w.run(&[limited("b", T0 + 1, None, "host", ok())]), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["a", "a", "b"]);
}

#[test]
fn a_job_held_by_an_open_breaker_comes_back_a_batch_wait_early_and_probes_when_the_cool_down_ends() {
    // Issue 38: a breaker resumes within its cool-down plus a second, not plus the rounding of a
    // whole-second delay and the queue's batch wait after it. As for a throttle's start, the job
    // comes back a batch wait (1 s) early, rounded down, and its invocation waits for the end.
    let w = with_limits(r#"{"host": {"trip_after": 1, "cooldown_seconds": 4}}"#);
    w.timer.set(true);
    let a = limited("a", T0, None, "host", json!({"type": "t", "fail": 1}));
    assert_eq!(w.run(&[a]), vec![Outcome::Retry { delay_seconds: 5 }]);
    let opened = w.clock.now_ms();
    w.clock.advance_ms(1);
    let b = limited("b", T0, None, "host", ok());
    assert_eq!(w.run(std::slice::from_ref(&b)), vec![Outcome::Defer { delay_seconds: 2 }]);
    assert_eq!((w.job("b").attempts, w.job("b").next_run_at), (0, opened + 1 + 2_000));
    w.clock.advance_ms(2_000);
    assert_eq!(w.run(&[b]), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["a", "b"]);
    assert_eq!(w.clock.now_ms(), opened + 4_000, "b probed when the cool-down ended");
}

#[test]
fn a_tripped_breaker_beside_a_concurrency_resumes_after_its_cool_down_without_maintenance() {
    // Issue 38, as a user met it: concurrency 1 and a breaker (the README's example policy for a
    // Fedify app's hosts), jobs on six ordering keys waiting in the host's line while the run
    // that trips the breaker (the host's third failure in a row) ends in another invocation.
    // Deliveries come from a model of the queue (each message at its delay); maintenance never
    // runs. The tripping run's slot went to the oldest in line, whose wake-up, arriving while the
    // breaker was open, parked it behind that very slot: nothing ran again until the cron.
    let limits = r#"{"host": {"concurrency": 1, "trip_after": 3, "cooldown_seconds": 4}}"#;
    let cfg = Config {
        limits: orderly::flow::Policies::parse(limits).unwrap(),
        ordering_mode: orderly::config::OrderingMode::Strict,
        ..Config::default()
    };
    let w = World::with(cfg, None);
    w.raw.set(true);
    let job = |i: usize, payload: Value| limited(&format!("j{i}"), T0, Some(&format!("k{i}")), "host", payload);
    let fail = || json!({"type": "t", "fail": 1});
    let mut queue: Vec<(i64, Vec<Incoming>)> = Vec::new();
    // What was sent since the last look goes into the queue model at its delay.
    let sent_before = std::cell::Cell::new(0);
    let sent = |queue: &mut Vec<(i64, Vec<Incoming>)>| {
        let now = w.clock.now_ms();
        let all: Vec<(String, u32)> =
            w.queue.batches.borrow().iter().flatten().map(|o| (o.json().to_string(), o.delay_seconds)).collect();
        for (i, (json, delay)) in all[sent_before.get()..].iter().enumerate() {
            let body: Value = serde_json::from_str(json).unwrap();
            let m = msg(&format!("sent-{}-{i}", sent_before.get()), now, body);
            queue.push((now + i64::from(*delay) * 1000, vec![m]));
        }
        sent_before.set(all.len());
    };
    // Runs a delivery; what it hands back goes into the queue model at its delay too.
    let deliver = |queue: &mut Vec<(i64, Vec<Incoming>)>, msgs: Vec<Incoming>| {
        let out = w.run(&msgs);
        let now = w.clock.now_ms();
        for (m, o) in msgs.into_iter().zip(out) {
            if let Outcome::Retry { delay_seconds } | Outcome::Defer { delay_seconds } = o {
                queue.push((now + i64::from(delay_seconds) * 1000, vec![m]));
            }
        }
        sent(queue);
    };
    // Two failures in a row; then another invocation's run holds the host's one slot.
    deliver(&mut queue, vec![job(0, fail()), job(1, fail())]);
    let ledger = orderly::ledger::Ledger::new(&w.db);
    let policy = w.cfg.limits.for_key("host");
    let until = w.clock.now_ms() + 120_000;
    let ask = orderly::ledger::limit::Ask {
        limit_key: "host",
        job_id: "elsewhere",
        route: orderly::ledger::Route::key("elsewhere"),
        until,
        policy,
        pace_ms: 0,
    };
    block_on(ledger.acquire(&ask, w.clock.now_ms())).unwrap();
    deliver(&mut queue, (2..6).map(|i| job(i, ok())).collect());
    let state = block_on(ledger.limit_state("host", w.clock.now_ms())).unwrap().unwrap();
    assert_eq!((state.running, state.waiting), (1, 4), "j2..j5 wait in the host's line");
    // That run fails: the third failure opens the breaker, and its slot goes to j2, woken.
    w.clock.advance_ms(100);
    let tripped = w.clock.now_ms();
    let release = orderly::ledger::limit::Release {
        limit_key: "host",
        job_id: "elsewhere",
        until,
        verdict: orderly::flow::RunVerdict::Failed { retry_after_ms: 0 },
        policy,
    };
    let woken = block_on(ledger.release(&release, tripped)).unwrap();
    assert_eq!(woken.iter().map(|w| w.job_id.as_str()).collect::<Vec<_>>(), vec!["j2"]);
    block_on(orderly::producer::wake(&ledger, &w.queue, &woken, 1, None)).unwrap();
    sent(&mut queue);
    let mut resumed = None;
    while let Some(next) = (0..queue.len()).min_by_key(|&i| queue[i].0) {
        let (at, msgs) = queue.remove(next);
        assert!(at < T0 + 120_000, "still waiting two minutes in: {:?}", w.runs());
        w.clock.advance_ms((at - w.clock.now_ms()).max(1));
        let runs_before = w.runs().len();
        deliver(&mut queue, msgs);
        if resumed.is_none() && w.runs().len() > runs_before {
            resumed = Some(w.clock.now_ms());
        }
    }
    for i in 0..6 {
        assert_eq!(w.job(&format!("j{i}")).status, Status::Done, "j{i}: {:?}", w.runs());
    }
    let resumed = resumed.unwrap();
    assert!(resumed <= tripped + 4_000 + 1_000, "the key ran again {} ms after the trip", resumed - tripped);
}

#[test]
fn a_woken_job_behind_another_of_its_key_gives_its_slot_back_before_that_one_runs() {
    // Issue 38, found by the simulation's line check: p and q, of one key, were both woken, and
    // their wake-ups came in one batch. q waits for p, whose run may take minutes; the slot
    // handed to q stood empty meanwhile and lapsed (30 s) with r waiting in line for it. q gives
    // it back before p runs, and r is handed it then; q asks for a slot when its turn comes.
    let w = with_limits(r#"{"host": {"concurrency": 2}}"#);
    let ledger = orderly::ledger::Ledger::new(&w.db);
    let other = |job: &'static str| orderly::ledger::limit::Ask {
        limit_key: "host",
        job_id: job,
        route: orderly::ledger::Route::key(job),
        until: T0 + 120_000,
        policy: w.cfg.limits.for_key("host"),
        pace_ms: 0,
    };
    for x in ["x1", "x2"] {
        block_on(ledger.acquire(&other(x), T0)).unwrap();
    }
    let slow = json!({"type": "t", "takes_ms": 20_000});
    assert_eq!(w.run(&[limited("p", T0, Some("k"), "host", slow)]), vec![Outcome::Ack], "parked: the host is full");
    // q, behind p, joins the line too (lock mode's lock is best effort: the simulation saw two
    // invocations park a key's jobs at once).
    let q = JobSpec { limit_key: Some("host".into()), ..spec("q", Some("k")) };
    block_on(ledger.enqueue_all(&[orderly::ledger::Submit::due(&q, T0)], T0)).unwrap();
    let q = orderly::ledger::limit::Ask { route: orderly::ledger::Route::key("k"), ..other("q") };
    let parked = block_on(ledger.acquire(&q, T0)).unwrap();
    assert_eq!(parked, orderly::ledger::limit::Permit::Refused(orderly::flow::Refusal::Full));
    assert_eq!(w.run(&[limited("r", T0 + 2, Some("k2"), "host", ok())]), vec![Outcome::Ack]);
    // x1 and x2 end: their slots go to p and q, the line's oldest.
    w.clock.advance_ms(1_000);
    for x in ["x1", "x2"] {
        let r = orderly::ledger::limit::Release {
            limit_key: "host",
            job_id: x,
            until: T0 + 120_000,
            verdict: orderly::flow::RunVerdict::Succeeded,
            policy: w.cfg.limits.for_key("host"),
        };
        let woken = block_on(ledger.release(&r, w.clock.now_ms())).unwrap();
        block_on(orderly::producer::wake(&ledger, &w.queue, &woken, 1, None)).unwrap();
    }
    let woken: Vec<Incoming> = w
        .queue
        .batches
        .borrow()
        .iter()
        .flatten()
        .map(|m| serde_json::from_str::<Value>(m.json()).unwrap())
        .filter(|body| body["__orderly_job__"]["woken"] == json!(true))
        .map(|body| {
            let id = body["__orderly_job__"]["id"].as_str().unwrap().to_string();
            msg(&id, w.clock.now_ms(), body)
        })
        .collect();
    assert_eq!(woken.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), vec!["p", "q"]);
    let started = w.clock.now_ms();
    w.raw.set(true);
    w.run(&woken);
    assert_eq!(w.runs(), vec!["p", "q"], "p, then q, in k's order");
    let handed: i64 =
        w.db.conn
            .query_row("SELECT until FROM limit_permit WHERE job_id = 'r' AND handed = 1", [], |row| row.get(0))
            .expect("r was handed a slot");
    let hold = i64::from(orderly::flow::WOKEN_HOLD_SECONDS) * 1000;
    assert_eq!(handed, started + hold, "r was handed q's slot before p ran, not when p's 20 s run ended");
}

#[test]
fn a_job_woken_before_its_parking_is_recorded_still_gets_its_message() {
    let w = with_limits(r#"{"host": {"concurrency": 1}}"#);
    let ledger = orderly::ledger::Ledger::new(&w.db);
    let ask = |job: &str, at: i64| orderly::ledger::limit::Ask {
        limit_key: "host",
        job_id: "",
        route: orderly::ledger::Route::key(job),
        until: at + 120_000,
        policy: w.cfg.limits.for_key("host"),
        pace_ms: 0,
    };
    // x holds the host's slot; another invocation has claimed b and parked it, but has not yet
    // recorded handing it back: b is still RUNNING under that invocation's lease.
    block_on(ledger.acquire(&orderly::ledger::limit::Ask { job_id: "x", ..ask("x", T0) }, T0)).unwrap();
    let b = orderly::ledger::JobSpec { limit_key: Some("host".into()), ..spec("b", None) };
    let lease = Lease { now: T0, until: T0 + 120_000, due_before: T0 };
    block_on(ledger.claim_all(&[(&b, lease.now)], "other", lease)).unwrap();
    let parked = block_on(ledger.acquire(&orderly::ledger::limit::Ask { job_id: "b", ..ask("b", T0) }, T0)).unwrap();
    assert_eq!(parked, orderly::ledger::limit::Permit::Refused(orderly::flow::Refusal::Full));
    // x's lease ends; c runs, and its end wakes b: b's message is sent, after a short delay, so that
    // it finds b handed back rather than being lost until maintenance.
    w.clock.advance_ms(120_000);
    w.raw.set(true);
    assert_eq!(w.run(&[limited("c", T0 + 120_000, None, "host", ok())]), vec![Outcome::Ack]);
    let sent: Vec<(String, u32)> =
        w.queue.sent_with_delay().into_iter().map(|(e, d)| (e.meta.id.unwrap_or_default(), d)).collect();
    assert_eq!(sent, vec![("b".to_string(), 2)]);
}

#[test]
fn a_job_past_its_deadline_is_dead_expired_and_never_runs() {
    let w = World::new();
    let late = msg("late", T0, json!({"type": "t", "__orderly_job__": {"deadline_at": T0}}));
    let fresh = msg("fresh", T0, json!({"type": "t", "__orderly_job__": {"deadline_at": T0 + 60_000}}));
    assert_eq!(w.run(&[late, fresh]), vec![Outcome::Ack, Outcome::Ack]);
    assert_eq!(w.runs(), vec!["fresh"]);
    let dead = w.job("late");
    assert_eq!(dead.status, Status::Dead);
    assert_eq!(dead.last_error.as_deref(), Some("expired: not started by its deadline (0 s late)"));
    assert_eq!(w.job("fresh").status, Status::Done);
}

#[test]
fn a_retry_due_after_the_deadline_expires_instead_of_running() {
    let w = World::new();
    let body = json!({"type": "t", "fail": 1, "__orderly_job__": {"deadline_at": T0 + 5_000}});
    w.run(&[msg("m", T0, body.clone())]);
    assert_eq!(w.job("m").status, Status::Pending, "the first attempt failed, a retry is due");
    w.clock.advance_ms(10_000);
    w.run(&[msg("m", T0, body)]);
    assert_eq!(w.runs(), vec!["m"], "the retry never ran");
    let dead = w.job("m");
    assert_eq!((dead.status, dead.attempts), (Status::Dead, 2));
    assert!(dead.last_error.unwrap().starts_with("expired: not started by its deadline"));
}

#[test]
fn a_run_that_outlasts_its_timeout_is_stopped_and_retried() {
    let w = World::new();
    w.timer.set(true);
    let short = msg("short", T0, json!({"type": "t", "hangs": true, "__orderly_job__": {"timeout_seconds": 2}}));
    // A job's timeout only shortens the configured run bound (WEBHOOK_TIMEOUT_SECONDS, 30 s here).
    let long = msg("long", T0, json!({"type": "t", "hangs": true, "__orderly_job__": {"timeout_seconds": 300}}));
    w.run(&[short, long]);
    for (id, secs) in [("short", 2), ("long", 30)] {
        let j = w.job(id);
        assert_eq!((j.status, j.attempts), (Status::Pending, 1), "{id}: retried, its attempt spent");
        assert_eq!(j.last_error, Some(format!("timed out after {secs} s (the job's timeout_seconds)")), "{id}");
    }
}

#[test]
fn a_throttled_job_comes_back_a_batch_wait_before_its_booked_start_and_waits_for_it_in_the_invocation() {
    // One start per 3 s.
    let w = with_limits(r#"{"host": {"rate": 1, "per_seconds": 3}}"#);
    w.timer.set(true);
    let [a, b, c] = ["a", "b", "c"].map(|id| limited(id, T0, None, "host", ok()));
    // a starts now; b and c are booked the next two starts (T0 + 3 s, T0 + 6 s). Their messages
    // come back a batch wait (1 s) before them, in whole seconds rounded down: so at one
    // invocation at a time, their batch is out while the one before still waits for its start.
    let out = w.run(&[a, b.clone(), c]);
    assert_eq!(out, vec![Outcome::Ack, Outcome::Defer { delay_seconds: 2 }, Outcome::Defer { delay_seconds: 5 }]);
    assert_eq!((w.job("b").attempts, w.job("b").next_run_at), (0, T0 + 2_000));
    w.clock.advance_ms(2_000);
    // Back 1 s early: granted, and this invocation waits until its start.
    assert_eq!(w.run(&[b]), vec![Outcome::Ack]);
    assert_eq!(w.runs(), vec!["a", "b"]);
    assert_eq!(w.clock.now_ms(), T0 + 3_000, "b waited for its start");
}
