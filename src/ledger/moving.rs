//! Moving a D1 ledger to shards (design §19.7), while delivery is paused: every job's row and
//! history copied to the shard of its route, a page at a time and idempotently (a row copied
//! again replaces its copy), then the counts checked. The worker serves it as `POST /ledger/move`
//! and `GET /ledger/move` (`scripts/move-ledger.mjs` drives both), between a D1 ledger and the
//! shard objects it will switch to.

use serde::Serialize;
use serde_json::Value;

use super::stmt;
use super::job::{Counts, JobRow};
use super::shards::Ledger;
use super::route::Route;
use super::store::{Row, Sql};
use crate::error::InfraError;

/// One page of a move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Copied {
    /// Jobs copied by this page.
    pub jobs: usize,
    /// History rows copied with them.
    pub events: usize,
    /// The id to continue after; `None` when every job has been copied.
    pub next: Option<String>,
}

/// The check after a move: the source's counts, the shards' summed, and each shard's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verified {
    /// D1's jobs by status.
    pub source: Counts,
    /// The shards' jobs by status, summed.
    pub shards: Counts,
    /// Each shard's jobs by status, in shard order.
    pub per_shard: Vec<Counts>,
    /// Whether the shards hold exactly what D1 holds.
    pub matches: bool,
}

fn text(row: &Row, column: &str) -> Option<String> {
    row.get(column).and_then(Value::as_str).map(str::to_string)
}

impl<S: Sql> Ledger<S> {
    /// Copies up to `limit` of this (one-database) ledger's jobs after `after`, with their
    /// history, into `to`'s shards: one request per shard touched.
    pub async fn copy_to<T: Sql>(&self, to: &Ledger<T>, after: &str, limit: u32) -> Result<Copied, InfraError> {
        let from = self.shards.first().ok_or_else(|| InfraError::new("ledger", "no source database"))?;
        let jobs = from.sql.query(stmt::export_jobs(after, limit)).await?;
        let Some(last) = jobs.last().and_then(|r| text(r, "id")) else {
            return Ok(Copied { jobs: 0, events: 0, next: None });
        };
        let events = from.sql.query(stmt::export_events(after, &last)).await?;
        // Each row read as a job first: a row that does not fit the schema stops the move.
        let routes: std::collections::HashMap<String, Route> =
            JobRow::all(&jobs)?.into_iter().map(|j| (j.id.clone(), j.route())).collect();
        // A job's rows and its history go to its shard in one batch: both or neither.
        let mut per_shard: std::collections::BTreeMap<usize, Vec<super::store::Stmt>> = Default::default();
        for row in &jobs {
            let Some(r) = text(row, "id").and_then(|id| routes.get(&id).copied()) else { continue };
            per_shard.entry(r.shard(to.shards.len())).or_default().push(stmt::import_job(row));
        }
        for row in &events {
            let Some(r) = text(row, "job_id").and_then(|id| routes.get(&id).copied()) else { continue };
            per_shard.entry(r.shard(to.shards.len())).or_default().push(stmt::import_event(row));
        }
        let writes = per_shard.into_iter().map(|(shard, stmts)| to.shards[shard].sql.batch(stmts));
        for written in futures::future::join_all(writes).await {
            written?;
        }
        let next = (jobs.len() as u32 == limit).then_some(last);
        Ok(Copied { jobs: jobs.len(), events: events.len(), next })
    }

    /// Compares this ledger's counts with `to`'s, shard by shard.
    pub async fn verify_copy<T: Sql>(&self, to: &Ledger<T>) -> Result<Verified, InfraError> {
        let source = self.counts().await?;
        let per_shard = to.every(async |s| s.counts().await).await?;
        let shards = per_shard.iter().copied().fold(Counts::default(), Counts::plus);
        Ok(Verified { source, shards, per_shard, matches: source == shards })
    }
}
