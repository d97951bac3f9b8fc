//! Dependencies' rows (design §24): a job submitted with `"after"` waits, unclaimable, until each
//! job it names has finished. An edge has two halves, each in the shard that needs it: the wait
//! (`job_wait`) beside the dependent, which claims read, and the waiter (`job_waiter`) beside the
//! dependency, which the transition finishing it reads. Must not: decide what a release does
//! with the dependent or send anything (`operations.rs` does).

use super::job::{int_of, JobRow, Status};
use super::placement::Route;
use super::shard::Shard;
use super::shards::Ledger;
use super::stmt;
use super::store::{Row, Sql};
use crate::error::InfraError;

/// One dependency of a recorded job: `job_id` (at `job_route`) waits on `on_id` (at `on_route`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    /// The dependent.
    pub job_id: String,
    /// Where it lives.
    pub job_route: Route,
    /// The job it waits on.
    pub on_id: String,
    /// Where that lives.
    pub on_route: Route,
    /// When the wait was recorded (ms): a dependency redriven since died after it.
    pub since: i64,
}

/// A dependency as a registration found it: its row, and when it was last redriven.
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    /// Its row.
    pub job: JobRow,
    /// Its last redrive (ms), if any.
    pub redriven_at: Option<i64>,
}

/// A wait to release: `on_id` finished with `on_status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// The edge.
    pub wait: Wait,
    /// How the dependency finished: DONE, or DEAD.
    pub on_status: Status,
    /// What it returned (a batch's callback is given it, design §25).
    pub on_result: Option<String>,
}

/// A dependent after a release.
#[derive(Debug, Clone, PartialEq)]
pub struct Released {
    /// Its row (`None`: it is gone, purged).
    pub job: Option<JobRow>,
    /// It still waits on another job.
    pub waits: bool,
    /// This release ended it DEAD (its dependency is DEAD and it does not run anyway).
    pub died: bool,
}

/// How many bytes of its members' results a batch's callback is given in its payload (design
/// §25); past them it is given `GET /batches/{id}` to read them, so its message stays well under
/// Queues' 128 KB.
pub const BATCH_RESULTS_BYTES: u32 = 64_000;

/// A batch's member, as its callback's shard last heard of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its id.
    pub id: String,
    /// DONE or DEAD once it finished; `None` before.
    pub status: Option<Status>,
    /// What it returned (JSON text; sealed for a sensitive job).
    pub result: Option<String>,
}

/// The error a dependent ends DEAD with when `on_id` ended DEAD.
pub fn dead_dependency(on_id: &str) -> String {
    format!("a job it runs after ended DEAD: {on_id}")
}

fn text(row: &Row, c: &str) -> Option<String> {
    row.get(c).and_then(|v| v.as_str()).map(str::to_string)
}

fn route_at(row: &Row, c: &str) -> Result<Route, InfraError> {
    text(row, c).and_then(|t| Route::parse(&t)).ok_or_else(|| InfraError::new("ledger", format!("a dependency row lacks {c}")))
}

fn need(row: &Row, c: &str) -> Result<String, InfraError> {
    text(row, c).ok_or_else(|| InfraError::new("ledger", format!("a dependency row lacks {c}")))
}

/// How a dependency finished, as a scan read it (only finished jobs are read): DEAD, or DONE.
fn on_status(row: &Row) -> Status {
    match text(row, "on_status").and_then(|s| Status::parse(&s)) {
        Some(Status::Dead) => Status::Dead,
        _ => Status::Done,
    }
}

/// The route of the job whose keys a scan's row carries (as [`JobRow::route`]).
fn keys_route(row: &Row, id: &str) -> Route {
    Route::of(text(row, "ordering_key").as_deref(), text(row, "dedupe_key").as_deref(), id)
}

impl<S: Sql> Shard<S> {
    /// In the dependencies' shard: registers each wait while its dependency is unfinished, and
    /// reads how each dependency stands (`None`: no row yet: a job of the same request whose
    /// shard failed, recorded when the request is retried).
    pub async fn register(&self, waits: &[&Wait]) -> Result<Vec<Option<Standing>>, InfraError> {
        let stmts =
            waits.iter().flat_map(|w| [stmt::wait_register(&w.on_id, &w.job_id, w.job_route), stmt::wait_on(&w.on_id)]).collect();
        let out = self.sql.batch(stmts).await?;
        out.chunks(2)
            .map(|pair| {
                let rows = pair.get(1).map(Vec::as_slice).unwrap_or_default();
                let redriven_at = rows.first().and_then(|r| r.get("redriven_at")).and_then(int_of);
                Ok(JobRow::first(rows)?.map(|job| Standing { job, redriven_at }))
            })
            .collect()
    }

    /// In the dependents' shard: these waits are registered.
    pub async fn registered(&self, waits: &[&Wait]) -> Result<Vec<()>, InfraError> {
        self.sql.batch(waits.iter().map(|w| stmt::wait_registered(&w.job_id, &w.on_id)).collect()).await?;
        Ok(waits.iter().map(|_| ()).collect())
    }

    /// In the finished jobs' shard: the waits on each `(id, route)`, at most `limit` each, with how
    /// it finished as its row says now (none while it is open again).
    pub async fn waiters(&self, finished: &[&(String, Route)], limit: u32) -> Result<Vec<Vec<Waiter>>, InfraError> {
        let out = self.sql.batch(finished.iter().map(|f| stmt::waiters(&f.0, limit)).collect()).await?;
        finished
            .iter()
            .zip(out)
            .map(|((on_id, on_route), rows)| {
                rows.iter()
                    .map(|r| {
                        let wait = Wait {
                            job_id: need(r, "job_id")?,
                            job_route: route_at(r, "job_route")?,
                            on_id: on_id.clone(),
                            on_route: *on_route,
                            since: 0,
                        };
                        Ok(Waiter { wait, on_status: on_status(r), on_result: text(r, "on_result") })
                    })
                    .collect()
            })
            .collect()
    }

    /// In the dependents' shard: releases each from its dependency, in one round trip; a
    /// dependency DEAD ends the dependent DEAD unless it runs anyway.
    pub async fn release_waits(&self, waiters: &[&Waiter], now: i64) -> Result<Vec<Released>, InfraError> {
        let mut stmts = Vec::with_capacity(waiters.len() * 3);
        let mut at = Vec::with_capacity(waiters.len());
        for w in waiters {
            let (job, on) = (w.wait.job_id.as_str(), w.wait.on_id.as_str());
            let died = (w.on_status == Status::Dead).then(|| {
                stmts.push(stmt::wait_dead(job, on, now, &dead_dependency(on)));
                stmts.len() - 1
            });
            stmts.push(stmt::batch_done(job, on, w.on_status, w.on_result.as_deref(), now));
            stmts.push(stmt::wait_release(job, on));
            stmts.push(stmt::batch_ready(job, BATCH_RESULTS_BYTES));
            stmts.push(stmt::waiting(job));
            at.push((died, stmts.len() - 1));
        }
        let out = self.sql.batch(stmts).await?;
        let rows = |i: usize| out.get(i).map(Vec::as_slice).unwrap_or_default();
        at.into_iter()
            .map(|(died, read)| {
                let waits = rows(read).first().and_then(|r| r.get("waits")).and_then(int_of) == Some(1);
                Ok(Released { job: JobRow::first(rows(read))?, waits, died: died.is_some_and(|i| !rows(i).is_empty()) })
            })
            .collect()
    }

    /// In the dependencies' shard: these dependents are released.
    pub async fn waiters_done(&self, waiters: &[&Waiter]) -> Result<Vec<()>, InfraError> {
        self.sql.batch(waiters.iter().map(|w| stmt::waiter_done(&w.wait.on_id, &w.wait.job_id)).collect()).await?;
        Ok(waiters.iter().map(|_| ()).collect())
    }

    /// A batch's members, in order (none: no such batch).
    pub async fn batch_members(&self, batch_id: &str) -> Result<Vec<Member>, InfraError> {
        let rows = self.sql.query(stmt::batch_members(batch_id)).await?;
        rows.iter()
            .map(|r| {
                let status = text(r, "status").and_then(|s| Status::parse(&s));
                Ok(Member { id: need(r, "member_id")?, status, result: text(r, "result") })
            })
            .collect()
    }

    /// Maintenance: at most `limit` waiters of finished jobs, not yet released.
    pub async fn waiters_finished(&self, limit: u32) -> Result<Vec<Waiter>, InfraError> {
        let rows = self.sql.query(stmt::waiters_finished(limit)).await?;
        rows.iter()
            .map(|r| {
                let on_id = need(r, "on_id")?;
                let wait = Wait {
                    job_id: need(r, "job_id")?,
                    job_route: route_at(r, "job_route")?,
                    on_route: keys_route(r, &on_id),
                    on_id,
                    since: 0,
                };
                Ok(Waiter { wait, on_status: on_status(r), on_result: text(r, "on_result") })
            })
            .collect()
    }

    /// Maintenance: at most `limit` waits recorded before `before` and never registered.
    pub async fn waits_unregistered(&self, before: i64, limit: u32) -> Result<Vec<Wait>, InfraError> {
        let rows = self.sql.query(stmt::waits_unregistered(before, limit)).await?;
        rows.iter()
            .map(|r| {
                let job_id = need(r, "job_id")?;
                let since = r.get("created_at").and_then(int_of).unwrap_or(0);
                Ok(Wait { job_route: keys_route(r, &job_id), job_id, on_id: need(r, "on_id")?, on_route: route_at(r, "on_route")?, since })
            })
            .collect()
    }
}

impl<S: Sql> Ledger<S> {
    /// Registers each wait in its dependency's shard, one round trip per shard: each dependency as
    /// it stands (`None`: not recorded yet).
    pub async fn register(&self, waits: &[Wait]) -> Result<Vec<Option<Standing>>, InfraError> {
        self.routed(waits, |w| w.on_route, async |s, part| s.register(&part).await).await
    }

    /// Marks waits registered, in their dependents' shards.
    pub async fn registered(&self, waits: &[Wait]) -> Result<(), InfraError> {
        self.routed(waits, |w| w.job_route, async |s, part| s.registered(&part).await).await.map(drop)
    }

    /// The waits on finished jobs `(id, route)`, read from their shards with how each finished:
    /// at most `limit` (the rest stay, for the next page).
    pub async fn waiters(&self, finished: &[(String, Route)], limit: u32) -> Result<Vec<Waiter>, InfraError> {
        if finished.is_empty() {
            return Ok(Vec::new());
        }
        let found = self.routed(finished, |f| f.1, async |s, part| s.waiters(&part, limit).await).await?;
        Ok(found.into_iter().flatten().take(limit as usize).collect())
    }

    /// Releases dependents, each in its shard: in order, each dependent as it stands after.
    pub async fn release_waits(&self, waiters: &[Waiter], now: i64) -> Result<Vec<Released>, InfraError> {
        self.routed(waiters, |w| w.wait.job_route, async |s, part| s.release_waits(&part, now).await).await
    }

    /// Deletes released waiters from their dependencies' shards.
    pub async fn waiters_done(&self, waiters: &[Waiter]) -> Result<(), InfraError> {
        self.routed(waiters, |w| w.wait.on_route, async |s, part| s.waiters_done(&part).await).await.map(drop)
    }

    /// Batch `id`'s members (its callback lives at `route`), in order.
    pub async fn batch_members(&self, id: &str, route: Route) -> Result<Vec<Member>, InfraError> {
        self.at(route).batch_members(id).await
    }

    /// Maintenance: waiters of finished jobs left unreleased, at most `limit` per shard.
    pub async fn waiters_finished(&self, limit: u32) -> Result<Vec<Waiter>, InfraError> {
        Ok(self.every(async |s| s.waiters_finished(limit).await).await?.into_iter().flatten().collect())
    }

    /// Maintenance: waits never registered, recorded before `before`, at most `limit` per shard.
    pub async fn waits_unregistered(&self, before: i64, limit: u32) -> Result<Vec<Wait>, InfraError> {
        Ok(self.every(async |s| s.waits_unregistered(before, limit).await).await?.into_iter().flatten().collect())
    }
}
