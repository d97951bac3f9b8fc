//! One `GET /metrics` scrape's reads (design §27): every figure a scrape shows, read in one batch
//! per shard, so a scrape costs one request per shard whatever it shows (design "The ledger's
//! life": it once sent five per shard, past the free plan's 50 subrequests at 16 shards). The
//! reads and their merging are the ones the API's own lists use.

use std::collections::HashSet;

use serde_json::Value;

use super::job::{int_of, Counts, ShardTypeCounts, Status, TypeCount};
use super::store::{Row, Stmt};
use super::limit::{self, LimitState};
use super::pause::{self, KeyPause};
use super::schedule::{self, ScheduleState};
use super::shard::Shard;
use super::shards::{merged_blocked, merged_limits, merged_paused, Ledger};
use super::stmt;
use super::store::Sql;
use super::strict::{self, BlockedKey};
use crate::config::OnDead;
use crate::error::InfraError;

/// What a scrape reads beyond the counts.
#[derive(Debug, Clone, Copy)]
pub struct ScrapeOf {
    /// Keys blocked by a DEAD head (strict mode with `ON_DEAD = "block"` only).
    pub blocked: bool,
    /// Schedules' rows (only when there are schedules).
    pub schedules: bool,
    /// The most keys of each kind listed by name.
    pub listed: u32,
    /// What a DEAD keyed job does to its key: under `skip` it is in no one's way, so the job after
    /// it is its key's head (and may be the oldest due).
    pub on_dead: OnDead,
}

/// Everything one scrape shows, merged over the shards.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    pub counts: Counts,
    pub by_type: Vec<TypeCount>,
    pub blocked: Vec<BlockedKey>,
    pub paused: Vec<KeyPause>,
    pub limits: Vec<LimitState>,
    pub schedules: Vec<ScheduleState>,
}

/// One shard's part of a scrape.
struct ShardScrape {
    counts: Counts,
    by_type: ShardTypeCounts,
    blocked: Vec<BlockedKey>,
    paused: Vec<KeyPause>,
    limits: Vec<LimitState>,
    schedules: Vec<ScheduleState>,
}

impl<S: Sql> Shard<S> {
    /// This shard's part of a scrape: one batch. `first`: the shard holding the schedules.
    async fn scrape(&self, now: i64, of: ScrapeOf, first: bool) -> Result<ShardScrape, InfraError> {
        let mut reads = vec![stmt::counts()];
        reads.extend(type_count_reads(now, of.on_dead));
        reads.push(stmt::paused_keys("", of.listed));
        reads.push(limit::states_stmt("", now, of.listed));
        if of.blocked {
            reads.push(stmt::blocked_keys(of.listed));
        }
        if of.schedules && first {
            reads.push(stmt::schedule_states());
        }
        let mut out = self.sql.batch(reads).await?.into_iter();
        let counts = Counts::from_rows(&out.next().unwrap_or_default());
        let by_type = type_counts_of(&mut out);
        let paused = out.next().unwrap_or_default().iter().filter_map(pause::pause_of).collect();
        let limits = out.next().unwrap_or_default().iter().filter_map(limit::state_of).collect();
        let blocked = if of.blocked { strict::blocked_of(&out.next().unwrap_or_default())? } else { Vec::new() };
        let schedules = out.next().unwrap_or_default().iter().filter_map(schedule::state_of).collect();
        Ok(ShardScrape { counts, by_type, blocked, paused, limits, schedules })
    }
}

impl<S: Sql> Ledger<S> {
    /// Everything one scrape shows: one request per shard.
    pub async fn scrape(&self, now: i64, of: ScrapeOf) -> Result<Scrape, InfraError> {
        let parts = self.every_indexed(async |i, s| s.scrape(now, of, i == 0).await).await?;
        let by_type = merged_type_counts(&parts.iter().map(|p| p.by_type.clone()).collect::<Vec<_>>());
        let mut out = Scrape { by_type, ..Scrape::default() };
        let (mut blocked, mut paused, mut limits) = (Vec::new(), Vec::new(), Vec::new());
        for p in parts {
            out.counts = out.counts.plus(p.counts);
            blocked.push(p.blocked);
            paused.push(p.paused);
            limits.push(p.limits);
            out.schedules.extend(p.schedules);
        }
        out.blocked = merged_blocked(blocked, of.listed);
        out.paused = merged_paused(paused, of.listed);
        out.limits = merged_limits(limits, of.listed);
        Ok(out)
    }
}

/// A shard's reads for the scrape's jobs by status and type (`GET /metrics`), with the due jobs a
/// limit key may hold back and this shard's limit keys that hold theirs, in the order
/// [`type_counts_of`] takes their answers.
fn type_count_reads(now: i64, on_dead: OnDead) -> Vec<Stmt> {
    vec![stmt::metrics_jobs(now, on_dead), stmt::metrics_limited_due(now, on_dead), stmt::held_limit_keys(now)]
}

/// A shard's type counts from the answers to [`type_count_reads`], taken off `out`.
fn type_counts_of(out: &mut impl Iterator<Item = Vec<Row>>) -> ShardTypeCounts {
    let mut next = || out.next().unwrap_or_default();
    let counts = next().iter().filter_map(TypeCount::of).collect();
    let limited = next()
        .iter()
        .filter_map(|r| {
            let key = r.get("limit_key")?.as_str()?.to_string();
            let due = r.get("oldest_due").and_then(int_of)?;
            Some((r.get("type").and_then(Value::as_str).map(str::to_string), key, due))
        })
        .collect();
    let held = next().iter().filter_map(|r| r.get("limit_key")?.as_str().map(str::to_string)).collect();
    ShardTypeCounts { counts, limited, held }
}

/// Open jobs per status and type over the shards. A limit key's due jobs count as due only when
/// no shard says the key holds them back: its state lives in its own shard.
fn merged_type_counts(per_shard: &[ShardTypeCounts]) -> Vec<TypeCount> {
    let held: HashSet<&str> = per_shard.iter().flat_map(|s| s.held.iter().map(String::as_str)).collect();
    let mut counts: Vec<TypeCount> = per_shard.iter().flat_map(|s| s.counts.iter().cloned()).collect();
    for s in per_shard {
        for (job_type, _, due) in s.limited.iter().filter(|(_, key, _)| !held.contains(key.as_str())) {
            counts.push(TypeCount { status: Status::Pending, job_type: job_type.clone(), n: 0, oldest_due: Some(*due) });
        }
    }
    TypeCount::merged(counts)
}
