//! The native tests, one binary (one link of the crate): a module per area. Each module's own
//! docs say what it covers; `support` holds the backends they share (SQLite, memory KV, a
//! recording queue, worlds that wire them). The simulation is its own binary
//! (`tests/simulation/`), run optimized.

#[path = "../support/mod.rs"]
mod support;

mod api;
mod budget;
mod cancel;
mod capacity;
mod conformance;
mod consumer;
mod dependencies;
mod enqueue;
mod house;
mod key_pause;
mod ledger;
mod limited_submission;
mod limits;
mod metrics;
mod migration;
mod observe;
mod operator;
mod readme;
mod schedules;
mod schema;
mod secrets;
mod shards;
mod stand_in;
mod strict_consumer;
mod strict_ledger;
mod trace;
