//! # orderly
//!
//! An ordered, reliable Cloudflare Queues consumer, as a library: per-key ordering (sequenced by
//! the D1 ledger in strict mode, by a best-effort KV lock in lock mode), retries with capped
//! exponential backoff, snoozes, dead letters, and a D1 job ledger that owns every job's state,
//! with an HTTP API and a dashboard. Your worker lists its job types and delegates its events:
//!
//! ```ignore
//! use orderly::{App, Cx, Done, Job, JobError};
//! use serde::Deserialize;
//! use worker::{event, Context, Env, MessageBatch, Request, Response, ScheduleContext, ScheduledEvent};
//!
//! #[derive(Deserialize)]
//! struct Resize { key: String, width: u32 }
//!
//! async fn resize(job: Job<Resize>, cx: Cx<Env>) -> Result<Done, JobError> {
//!     let images = cx.env().bucket("IMAGES").map_err(|e| JobError::permanent(e.to_string()))?;
//!     // ... read job.key, write the thumbnail of job.width ...
//!     Ok(Done::default())
//! }
//!
//! fn app() -> App {
//!     App::builder().handler("resize", resize).webhook().build()
//! }
//!
//! #[event(queue)]
//! async fn queue(batch: MessageBatch<serde_json::Value>, env: Env, ctx: Context) -> worker::Result<()> {
//!     app().queue(batch, env, ctx).await
//! }
//! #[event(fetch)]
//! async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
//!     app().fetch(req, env, ctx).await
//! }
//! #[event(scheduled)]
//! async fn scheduled(event: ScheduledEvent, env: Env, ctx: ScheduleContext) {
//!     app().scheduled(event, env, ctx).await
//! }
//! ```
//!
//! A handler answers [`Done`] (with a result kept on the job), or a [`JobError`]: retryable,
//! permanent, or a snooze (run again later without spending an attempt, the key held).
//! `App::enqueue` submits jobs from your own code with `POST /jobs`' options ([`Enqueue`]).
//! The library holds no `#[event]` function: every worker depending on it would export it.
//!
//! # Layout
//! Imports go one way (checked by `tests/native/house.rs`): the entry points over the API, the consumer
//! and maintenance, over the ledger, the lock and the handlers, over the envelope, the
//! configuration and `bounds.rs`. Inside a folder too, files call down only: a `mod.rs` over the
//! files it declares, which never name their parent; what several of them share is a leaf file.
//! - `app.rs`: your job types, typed handlers by name ([`Handlers`], [`Job`], [`Cx`]);
//!   `entry.rs`: `App`, the Workers entry points, one start-up for all (wasm only).
//!   `enqueue.rs`: enqueueing from Rust. `testkit.rs`: running a handler in a unit test.
//! - `envelope.rs`: what a message body means (Fedify's envelope, raw bodies, `__orderly_job__`).
//! - `batch.rs`: grouping a batch by ordering key, in send order.
//! - `consumer/`, a message's path, top down: `mod.rs` decodes, seals, records dead letters and
//!   dispatches by mode; `locked.rs` (lock mode, design §3) and `strict.rs` (strict mode, design
//!   §3b) plan, claim, record and settle; `executor.rs` runs one claimed job; `gate.rs` asks its
//!   limit key (design §20); `leases.rs`, `message.rs` and `ports.rs` are the leaves.
//! - `retry.rs`: the retry policy, what a failed run leads to and its backoff. `flow.rs`: limit
//!   key policies, pure.
//! - `lock.rs`: the KV ordering lock, and an in-memory KV with real expiry.
//! - `ledger/`: the one owner of SQL (design §18). `job.rs`, its types (a leaf); `shard.rs`, one
//!   database's reads; `transition.rs`, what can happen to a row ([`ledger::Transition`], applied
//!   by `Ledger::record_all`); strict mode's operations (`strict.rs`; its run rule is
//!   `ledger/sql/claim_next.sql`); limit keys (`limit.rs`), paused keys (`pause.rs`);
//!   `maintain.rs`, lease renewal and the cron's scans; `history.rs`, each job's events;
//!   `stmt.rs`, the statements, each bound by the names its SQL file declares; the D1 backend;
//!   the conformance suite every backend passes. Past one database (design §19): `shards.rs`,
//!   the `Ledger` over its shards (each job's work routed by `placement.rs`, lists and counts
//!   merged); `object.rs`, a SQLite Durable Object shard's logic; `durable.rs`, its Workers edge
//!   and `ledger_object!`; `moving.rs`, a D1 ledger moved to shards.
//! - `handlers/`: the handler contract (`contract.rs`), the built-in `webhook` job type and
//!   service handlers (design §13b).
//! - `api/` (+ `dashboard.html`), a request's path, top down: `mod.rs` authorizes and answers
//!   each [`api::Endpoint`] (`endpoint.rs`, one table), `input.rs` reads what a request asks for,
//!   `submission.rs` records and sends a submission, `jobs.rs` serves the other job routes,
//!   `keys.rs` and `limits.rs` serve paused keys and limit keys; `http.rs` and `ports.rs`
//!   are the leaves. Below it, `operations.rs`: cancel, redrive and skip as typed outcomes.
//!   `producer.rs`: sending to the queue.
//! - `maintenance.rs`: the cron's reaper, re-sender, stalled-key wake-ups and purge.
//!   `config.rs`, `clock.rs`, `bounds.rs` (shared limits and grace periods). `log.rs`: the
//!   structured log lines; `observe.rs`: each run as a span and a data point. `seal.rs`:
//!   secrets at rest. `panics.rs`: a Rust handler's panic.
//! - `edge.rs`: `worker` adapters for the ports above (wasm only).
//!
//! Everything but `edge.rs`, `entry.rs`, `ledger/d1.rs` and `ledger/durable.rs` builds and is
//! tested natively.

// The library's API is what the crate root re-exports below, and `testkit`. The other modules
// are the crate's own; the project's integration tests and simulation (which drive the consumer,
// the ledger and the API through their ports) reach them through the `testing` feature, hidden
// from the docs. Without it they are `pub(crate)`, so the compiler flags what nothing uses.
// Natively, without `testing`, nothing calls the library: its entry points are wasm only
// (`entry.rs`). Dead code is found where the worker runs: `cargo clippy --target
// wasm32-unknown-unknown` (`npm test`, scripts/test.sh).
#![cfg_attr(not(any(target_arch = "wasm32", feature = "testing")), allow(dead_code, unused_imports))]

macro_rules! internal {
    ($($name:ident),* $(,)?) => {$(
        #[cfg(feature = "testing")]
        #[doc(hidden)]
        pub mod $name;
        #[cfg(not(feature = "testing"))]
        pub(crate) mod $name;
    )*};
}

internal!(
    api,
    app,
    batch,
    bounds,
    clock,
    config,
    consumer,
    enqueue,
    envelope,
    error,
    flow,
    handlers,
    ledger,
    lock,
    log,
    maintenance,
    observe,
    operations,
    panics,
    periodic,
    producer,
    prometheus,
    retry,
    schedule,
    seal,
    trace
);

/// What `ledger_object!` expands to in your worker; not an API.
#[doc(hidden)]
#[cfg(target_arch = "wasm32")]
pub mod __private {
    pub use crate::ledger::durable::ShardObject;
}

pub mod testkit;

#[doc(hidden)]
#[cfg(target_arch = "wasm32")]
pub mod edge;
#[cfg(target_arch = "wasm32")]
mod entry;

pub use api::{Refusal, Submitted};
pub use app::{Cx, Handler, Handlers, Job};
pub use enqueue::{Enqueue, EnqueueError};
#[cfg(target_arch = "wasm32")]
pub use entry::{App, AppBuilder};
pub use error::InfraError;
pub use handlers::{Done, JobError};
pub use ledger::Status;
