//! # orderly
//!
//! An ordered, reliable Cloudflare Queues consumer: per-key ordering (sequenced by the D1 ledger in
//! strict mode, by a best-effort KV lock in lock mode), retries with capped exponential backoff,
//! dead letters, and a D1 job ledger that owns every job's state. This file is wiring only: the
//! event entry points.
//!
//! # Layout
//! - `envelope.rs`: what a message body means (Fedify's envelope, raw bodies, `__orderly_job__`).
//! - `batch.rs`: grouping a batch by ordering key, in send order.
//! - `consumer/`: the batch algorithm; an ack/retry/defer outcome per message. `locked.rs` is
//!   lock mode (SPEC 3), `strict.rs` strict mode (SPEC 3b), `mod.rs` what both share.
//! - `lock.rs`: the KV ordering lock, and an in-memory KV with real expiry.
//! - `ledger/`: job states, the guarded SQL (`ledger/sql/*.sql`), strict mode's operations
//!   (`ledger/strict.rs`; its run rule is `ledger/sql/claim_next.sql`), the D1 backend.
//! - `handlers/`: job types (`webhook.rs`), one file each.
//! - `api.rs` (+ `dashboard.html`): the operator HTTP API. `producer.rs`: sending to the queue.
//! - `maintenance.rs`: the cron's reaper, re-sender, stalled-key wake-ups and purge. `backoff.rs`,
//!   `config.rs`, `clock.rs`. `log.rs`: the structured log lines.
//! - `edge.rs`: `worker` adapters for the ports above (wasm only).
//!
//! Everything but `edge.rs`, `ledger/d1.rs` and the entry points below builds and is tested natively.

pub mod api;
pub mod app;
pub mod backoff;
pub mod batch;
pub mod clock;
pub mod config;
pub mod consumer;
pub mod enqueue;
pub mod envelope;
pub mod error;
pub mod handlers;
pub mod ledger;
pub mod lock;
pub mod log;
pub mod maintenance;
pub mod producer;

#[cfg(target_arch = "wasm32")]
pub mod edge;
#[cfg(target_arch = "wasm32")]
mod entry;

pub use app::{Cx, Handlers, Job};
pub use enqueue::{Enqueue, EnqueueError};
#[cfg(target_arch = "wasm32")]
pub use entry::{App, AppBuilder};
pub use handlers::{Done, JobError};

