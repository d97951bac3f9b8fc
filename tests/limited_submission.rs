//! A burst submitted through the API under a limit key with a concurrency (design §20.12), on the
//! host: the real API, strict consumer and ledger over real SQLite and a recording queue. In
//! strict mode the burst waits in the limit key's line, not in the queue: only the jobs handed a
//! slot are sent, so another key's message is never behind the burst; every job still runs, in
//! its ordering key's order, without maintenance. Lock mode sends every job, as before.

mod support;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures::executor::block_on;
use orderly::api::{Api, ApiRequest, ApiResponse};
use orderly::clock::{Clock, ManualClock};
use orderly::config::{Config, OrderingMode};
use orderly::consumer::{Consumer, Incoming, Role};
use orderly::handlers::{Done, JobContext, JobError, Runner};
use orderly::ledger::{stmt, Job, Ledger, Sql, Status};
use orderly::lock::MemoryKv;
use serde_json::{json, Value};
use support::api::TOKEN;
use support::{MemoryQueue, Sqlite};

const T0: i64 = 1_700_000_000_000;

/// Records each run's job id.
#[derive(Default)]
struct Recorder {
    runs: RefCell<Vec<String>>,
}

impl Runner for Recorder {
    async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
        self.runs.borrow_mut().push(job.id.to_string());
        Ok(Done::default())
    }
}

struct World {
    clock: Rc<ManualClock>,
    kv: MemoryKv<Rc<ManualClock>>,
    db: Sqlite,
    runner: Recorder,
    queue: MemoryQueue,
    cfg: Config,
    /// How many of the queue's sent messages have been delivered.
    delivered: Cell<usize>,
}

impl World {
    fn new(mode: OrderingMode) -> World {
        let clock = Rc::new(ManualClock::new(T0));
        let limits = orderly::flow::Policies::parse(r#"{"host": {"concurrency": 2}}"#).unwrap();
        World {
            kv: MemoryKv::new(clock.clone()),
            clock,
            db: Sqlite::temp().0,
            runner: Recorder::default(),
            queue: MemoryQueue::default(),
            cfg: Config { ordering_mode: mode, limits, ..Config::default() },
            delivered: Cell::new(0),
        }
    }

    /// The messages sent since the last call, as deliveries.
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

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> ApiResponse {
        let ledger = Ledger::new(&self.db);
        let new_id = || "unnamed".to_string();
        let api = Api {
            ledger: &ledger,
            queue: &self.queue,
            clock: &self.clock,
            cfg: Ok(&self.cfg),
            admin_token: Some(TOKEN),
            producer_token: None,
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
        };
        block_on(api.handle(&req))
    }

    /// Delivers what was sent, one message per invocation, until nothing more is; how many
    /// deliveries that took.
    fn drain(&self) -> usize {
        let mut deliveries = 0;
        loop {
            let batch = self.sent_since();
            if batch.is_empty() {
                return deliveries;
            }
            for msg in batch {
                deliveries += 1;
                self.clock.advance_ms(10);
                let consumer = Consumer::new(
                    &self.cfg,
                    &self.kv,
                    &self.db,
                    &self.runner,
                    &self.clock,
                    &self.queue,
                    format!("inv-{deliveries}"),
                );
                block_on(consumer.process(Role::Main, &[msg]));
            }
        }
    }

    fn job(&self, id: &str) -> Job {
        Job::first(&block_on(self.db.query(stmt::get(id))).unwrap()).unwrap().expect("row")
    }
}

fn job(id: &str, key: &str, limit_key: Option<&str>) -> Value {
    json!({"id": id, "ordering_key": key, "limit_key": limit_key, "payload": {"type": "webhook", "url": "https://h.test/"}})
}

/// Five ordering keys of two jobs each under `host` (concurrency 2), then one job of another key.
fn burst(w: &World) {
    let mut jobs: Vec<Value> = ["a", "b", "c", "d", "e"]
        .iter()
        .flat_map(|k| [job(&format!("{k}1"), k, Some("host")), job(&format!("{k}2"), k, Some("host"))])
        .collect();
    jobs.push(job("q1", "q", None));
    let r = w.call("POST", "/jobs", Some(json!({ "jobs": jobs })));
    assert_eq!(r.status, 202, "{}", r.body);
}

#[test]
fn strict_mode_a_burst_under_a_full_limit_key_waits_in_its_line_not_in_the_queue() {
    let w = World::new(OrderingMode::Strict);
    burst(&w);
    let sent = w.sent_since();
    let ids: Vec<String> =
        sent.iter().map(|m| m.body.as_ref().unwrap()["__orderly_job__"]["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(sent.len(), 3, "two jobs handed the key's two slots, and the other key's job: {ids:?}");
    assert!(ids.contains(&"q1".to_string()), "{ids:?}");
    let host = w.call("GET", "/limits/host", None).json_body();
    assert_eq!((host["running"].clone(), host["waiting"].clone()), (json!(2), json!(3)), "{host}");
    // The heads wait parked (due only at their wake-up); the jobs behind them wait for their key.
    let (head, behind) = (w.job("c1"), w.job("c2"));
    assert!(head.parked && head.next_run_at > T0, "{head:?}");
    assert!(!behind.parked && behind.next_run_at == T0, "{behind:?}");

    // Delivered in turn, each run hands its slot to the next in line: every job runs, each
    // key's in order, with no maintenance and at most one delivery per job.
    w.delivered.set(0);
    let deliveries = w.drain();
    let runs = w.runner.runs.borrow().clone();
    assert_eq!(runs.len(), 11, "{runs:?}");
    for k in ["a", "b", "c", "d", "e"] {
        let at = |id: String| runs.iter().position(|r| *r == id).unwrap_or_else(|| panic!("{id} never ran: {runs:?}"));
        assert!(at(format!("{k}1")) < at(format!("{k}2")), "{runs:?}");
        assert_eq!(w.job(&format!("{k}2")).status, Status::Done);
    }
    assert!(deliveries <= 11, "{deliveries} deliveries for 11 jobs");
    let host = w.call("GET", "/limits/host", None).json_body();
    assert_eq!((host["running"].clone(), host["waiting"].clone()), (json!(0), json!(0)), "{host}");
}

#[test]
fn lock_mode_sends_every_submitted_job() {
    let w = World::new(OrderingMode::Lock);
    burst(&w);
    assert_eq!(w.sent_since().len(), 11);
    assert!(!w.job("c1").parked);
}
