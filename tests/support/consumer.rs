//! The consumer, API and maintenance on the host together, as the flow-control tests drive them:
//! the real `Consumer`, `Api` and `maintenance::run` over one SQLite ledger, a memory KV and a
//! recording queue, on one manual clock. What the queue was sent is delivered by hand
//! (`sent_since`, `drain`), so a test sees every message the worker sends.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures::executor::block_on;
use orderly::api::{Api, ApiRequest, ApiResponse};
use orderly::clock::{Clock, ManualClock};
use orderly::config::{Config, OrderingMode};
use orderly::consumer::{Consumer, Incoming, Outcome, Role};
use orderly::enqueue::Producer;
use orderly::handlers::{Done, JobContext, JobError, Runner};
use orderly::ledger::{stmt, JobRow, Ledger, Sql};
use orderly::lock::MemoryKv;
use orderly::maintenance;
use orderly::observe::{Attribute, DataPoint, Observer, Span};
use orderly::periodic::{self, Ticked};
use serde_json::Value;

use super::api::{T0, TOKEN};
use super::{MemoryQueue, Sqlite};

/// Records each run's job id; a payload `{"fail": n}` fails the job's first n attempts.
#[derive(Default)]
pub struct Recorder {
    pub runs: RefCell<Vec<String>>,
}

impl Runner for Recorder {
    async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
        self.runs.borrow_mut().push(job.id.to_string());
        if u64::from(job.attempt) <= job.payload.get("fail").and_then(Value::as_u64).unwrap_or(0) {
            return Err(JobError::retry("HTTP 503"));
        }
        Ok(Done::default())
    }
}

/// A span as an observer saw it: its name, its start attributes and its end attributes once ended.
pub type SeenSpan = (String, Vec<Attribute>, Option<Vec<Attribute>>);

/// What an observer saw (design §27.5): each span opened (its name and start attributes), its end
/// attributes once ended, and each data point, in order; and which span is entered now (its
/// index), as a handler running inside it would see.
#[derive(Default)]
pub struct Observed {
    pub spans: RefCell<Vec<SeenSpan>>,
    pub points: RefCell<Vec<DataPoint>>,
    pub entered: Cell<Option<usize>>,
}

/// A span of [`Observed`]: its index there.
struct RecordedSpan<'a>(&'a Observed, usize);

impl Span for RecordedSpan<'_> {
    fn enter(&self, step: &mut dyn FnMut()) {
        let outer = self.0.entered.replace(Some(self.1));
        step();
        self.0.entered.set(outer);
    }

    fn end(self: Box<Self>, attrs: &[Attribute]) {
        let ended = &mut self.0.spans.borrow_mut()[self.1].2;
        assert!(ended.is_none(), "a span ended twice");
        *ended = Some(attrs.to_vec());
    }
}

impl Observer for Observed {
    fn open(&self, name: &str, attrs: &[Attribute]) -> Option<Box<dyn Span + '_>> {
        let mut spans = self.spans.borrow_mut();
        spans.push((name.to_string(), attrs.to_vec(), None));
        Some(Box::new(RecordedSpan(self, spans.len() - 1)))
    }

    fn point(&self, point: &DataPoint) {
        self.points.borrow_mut().push(point.clone());
    }
}

/// One worker's ports and configuration.
pub struct ConsumerWorld {
    pub clock: Rc<ManualClock>,
    pub kv: MemoryKv<Rc<ManualClock>>,
    pub db: Sqlite,
    pub runner: Recorder,
    pub queue: MemoryQueue,
    pub cfg: Config,
    /// How many of the queue's sent messages have been delivered (or looked at).
    pub delivered: Cell<usize>,
    /// What every invocation's observer saw.
    pub observed: Observed,
}

impl ConsumerWorld {
    /// A fresh world at `T0` with this configuration.
    pub fn new(cfg: Config) -> ConsumerWorld {
        let clock = Rc::new(ManualClock::new(T0));
        ConsumerWorld {
            kv: MemoryKv::new(clock.clone()),
            clock,
            db: Sqlite::temp().0,
            runner: Recorder::default(),
            queue: MemoryQueue::default(),
            cfg,
            delivered: Cell::new(0),
            observed: Observed::default(),
        }
    }

    /// A fresh world in this mode, otherwise the default configuration.
    pub fn in_mode(mode: OrderingMode) -> ConsumerWorld {
        ConsumerWorld::new(Config { ordering_mode: mode, ..Config::default() })
    }

    /// One consumer invocation over these messages.
    pub fn run(&self, msgs: &[Incoming]) -> Vec<Outcome> {
        self.run_with(&self.runner, msgs)
    }

    /// One consumer invocation over these messages, its jobs run by `runner`.
    pub fn run_with(&self, runner: &impl Runner, msgs: &[Incoming]) -> Vec<Outcome> {
        let consumer = Consumer::new(
            &self.cfg,
            &self.kv,
            &self.db,
            runner,
            &self.clock,
            &self.queue,
            format!("inv-{}", self.clock.now_ms()),
        )
        .with_observer(Some(&self.observed));
        block_on(consumer.process(Role::Main, msgs))
    }

    /// The messages sent since the last call, as deliveries.
    pub fn sent_since(&self) -> Vec<Incoming> {
        let all: Vec<Value> =
            self.queue.batches.borrow().iter().flatten().map(|m| serde_json::from_str(m.json()).unwrap()).collect();
        let new = all[self.delivered.get()..].to_vec();
        self.delivered.set(all.len());
        new.into_iter()
            .enumerate()
            .map(|(i, body)| Incoming { id: format!("sent-{i}"), timestamp_ms: self.clock.now_ms(), body: Ok(body) })
            .collect()
    }

    /// Delivers what was sent, one message per invocation 10 ms apart, until nothing more is;
    /// how many deliveries that took.
    pub fn drain(&self) -> usize {
        let mut deliveries = 0;
        loop {
            let batch = self.sent_since();
            if batch.is_empty() {
                return deliveries;
            }
            for msg in batch {
                deliveries += 1;
                self.clock.advance_ms(10);
                self.run(&[msg]);
            }
        }
    }

    /// Delivers what was sent, as Queues would, until nothing is left: each message at its delay
    /// (the clock moved to it), one per invocation, its jobs run by `runner`; a message the
    /// consumer retries or defers comes back after its delay. At most 1,000 deliveries.
    pub fn drain_with(&self, runner: &impl Runner) {
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
                self.run_with(runner, std::slice::from_ref(&msg))[..]
            {
                waiting.push((self.clock.now_ms() + i64::from(delay_seconds) * 1000, msg));
            }
        }
        panic!("still delivering after 1,000 deliveries");
    }

    /// An admin request; `path` may carry `?query`.
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> ApiResponse {
        block_on(self.call_async(method, path, body))
    }

    /// [`Self::call`], awaited (from inside a run or a sleep of the consumer's).
    pub async fn call_async(&self, method: &str, path: &str, body: Option<Value>) -> ApiResponse {
        let ledger = Ledger::new(&self.db);
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
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let req = ApiRequest {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            authorization: Some(format!("Bearer {TOKEN}")),
            body: body.map(|b| b.to_string().into_bytes()).unwrap_or_default(),
            trace: None,
        };
        api.handle(&req).await
    }

    /// The job ids run so far, in order.
    pub fn runs(&self) -> Vec<String> {
        self.runner.runs.borrow().clone()
    }

    /// The job's row.
    pub fn job(&self, id: &str) -> JobRow {
        JobRow::first(&block_on(self.db.query(stmt::get(id))).unwrap()).unwrap().expect("row")
    }

    /// One maintenance pass.
    pub fn maintain(&self) -> maintenance::Report {
        block_on(maintenance::run(&Ledger::new(&self.db), &self.queue, &self.clock, &self.cfg))
    }

    /// One cron run's periodic jobs (design §23), at the clock's time.
    pub fn tick(&self) -> Ticked {
        let ledger = Ledger::new(&self.db);
        let new_id = || "unused-id".to_string();
        let types = orderly::app::BuiltIn;
        let producer = Producer::new(&ledger, &self.queue, &self.clock, &self.cfg, &types, &new_id, None);
        block_on(periodic::run(&self.cfg.schedules, &ledger, &producer, self.clock.now_ms()))
    }
}
