//! The job ledger: one row per job, in D1 or in its Durable Object shard, every transition one guarded statement.
//!
//! This module owns the ledger's states, its row type, and the statements (SQL text in `sql/`,
//! parameters bound here). Each transition is a conditional UPDATE/UPSERT ... RETURNING: a
//! transition by a non-owner, or from the wrong state, changes nothing and returns no row, which
//! callers check. The clock is always a parameter. Must not: decide what to do with a message (the
//! consumer does), or know about D1's API (`d1.rs` does).
//!
//! The layout (`migrations/0007`) is shaped by what D1 bills, a row for every table row and index
//! entry written: no index holds `status` (a claim rewrites no entry), open jobs are found by
//! `finished_at IS NULL` and a key's unfinished jobs by `passed_at IS NULL`, a success is described
//! by its DONE row instead of a history row. A job's whole life is 6 to 8 rows written.
//!
//! ```text
//!   enqueue/defer-note        claim             complete
//!  ────────────────► PENDING ──────► RUNNING ──────────► DONE ──purge──► (gone)
//!                      ▲  ▲            │ │ fail: retry        ▲
//!                      │  └────────────┘ │ / lease reaped     │
//!                      │    redrive      ▼ fail: permanent or out of attempts
//!                      └──────────────  DEAD ◄── unreadable body / delivery attempts exhausted /
//!                                            operator cancel (a PENDING job at once; a
//!                                            RUNNING one once its run stops, design §22)
//! ```

#[cfg(feature = "testing")]
pub mod conformance;
#[cfg(target_arch = "wasm32")]
pub mod d1;
#[cfg(target_arch = "wasm32")]
pub mod durable;
pub mod deps;
pub mod history;
mod job;
pub mod limit;
mod maintain;
pub mod moving;
pub mod object;
#[cfg(test)]
mod params;
pub mod pause;
mod shard;
mod shards;
// The statement builders are the ledger's own; the project's SQL tests reach them through the
// `testing` feature.
pub mod placement;
pub mod schedule;
pub mod scrape;
pub mod schema;
#[cfg(feature = "testing")]
pub mod stmt;
#[cfg(not(feature = "testing"))]
mod stmt;
pub mod store;
pub mod strict;
pub mod transition;

pub use crate::bounds::{DEFAULT_PRIORITY, MAX_PRIORITY};
#[cfg(any(test, feature = "testing"))]
pub use job::DeadMatches;
pub use job::{Counts, TypeCount};
pub use job::{AfterDead, Cancel, CancelFilter, Claimed, DeadFilter, Enqueued, JobRow, JobSpec, Lease, ListFilter, OnDuplicate, Redrive, Sent, Status, Submit};
pub use maintain::PurgeBudget;
pub use placement::Route;
pub use shards::Ledger;
#[cfg(any(test, feature = "testing"))]
pub use shards::MAX_SHARDS;
pub use store::Sql;
#[cfg(any(test, feature = "testing"))]
pub use store::{Param, Row, Stmt};
#[cfg(any(test, feature = "testing"))]
pub use transition::RecordedDead;
pub use transition::{Record, Transition};
