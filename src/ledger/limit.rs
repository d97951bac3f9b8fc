//! The ledger's side of flow control (design §20): a job's permit to start, the line of jobs
//! parked for a slot, the circuit breaker, and operators' changes. A limit key's rows live in one
//! shard, the one its name routes to ([`Route::key`]), so each decision is one batch there, atomic.
//!
//! A start costs one batch before the run (state row made once, permit, charge, line, booking,
//! verdict) and one after (free the permit, the breaker, hand the slot to the next in line and
//! wake it); a job without a limit key costs nothing more.

use serde::Serialize;
use serde_json::Value;

use super::store::{Param, Row, Sql, Stmt};
use super::job::int_of;
use super::placement::Route;
use super::shard::Shard;
use crate::error::InfraError;
use crate::flow::{Policy, Refusal, RunVerdict, MAX_COOLDOWN_MS, WAKE_AT_ONCE, WOKEN_HOLD_SECONDS};

/// A job asking to start under its limit key's policy (the configured one: an override stored
/// with the key wins).
#[derive(Debug, Clone, PartialEq)]
pub struct Ask<'a> {
    /// The limit key.
    pub limit_key: &'a str,
    /// The job.
    pub job_id: &'a str,
    /// Where the job's row lives (a parked job is woken through it).
    pub route: Route,
    /// When the permit lapses unless freed (the job's lease end), ms.
    pub until: i64,
    /// The configured policy.
    pub policy: Policy,
    /// How far ahead of the throttle's next start a start may be granted, ms: the asker waits
    /// for it (0 when it cannot wait; see `consumer/gate.rs`).
    pub pace_ms: i64,
}

/// What a job asking to start was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permit {
    /// It may start now; its slot is its until freed.
    Granted,
    /// Not now, and why.
    Refused(Refusal),
}

/// What a job asking to start was told, and the throttle's interval in force (µs), if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// The verdict.
    pub permit: Permit,
    /// When granted: when the job may start (ms), now or up to the ask's pace ahead.
    pub start_at: i64,
    /// The policy's throttle interval, the override's if there is one.
    pub interval_us: Option<i64>,
}

/// A job's run ended: its permit goes, and the breaker hears how it went.
#[derive(Debug, Clone, PartialEq)]
pub struct Release<'a> {
    /// The limit key.
    pub limit_key: &'a str,
    /// The job.
    pub job_id: &'a str,
    /// The permit's end as the run's ask set it ([`Ask::until`]): only that permit is freed.
    pub until: i64,
    /// How the run went.
    pub verdict: RunVerdict,
    /// The configured policy.
    pub policy: Policy,
}

/// A parked job taken out of its key's line: send it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Woken {
    /// The job.
    pub job_id: String,
    /// Where its row lives.
    pub route: Route,
}

/// A limit key whose cancelled jobs leave its line, with its policy.
pub type Forgotten<'a> = (&'a str, Vec<&'a str>, Policy);

/// A limit key, the jobs submitted parked that join its line (each with its route), and its policy.
pub type Lined<'a> = (&'a str, Vec<(&'a str, Route)>, Policy);

/// What an operator changes about a limit key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Change {
    /// Pause (`true`), resume (`false`), or leave as it is.
    pub paused: Option<bool>,
    /// The policy: leave it, give back the configured one (`Some(None)`), or set one.
    #[allow(clippy::option_option)] // three answers, each named above
    pub policy: Option<Option<Policy>>,
}

/// A limit key as operators see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitState {
    /// The limit key.
    pub limit_key: String,
    /// Paused by an operator.
    pub paused: bool,
    /// Its policy set at run time, in place of the configured one.
    pub overridden: Option<Policy>,
    /// Slots taken: jobs running under a live permit, and jobs handed a freed slot whose wake-up
    /// has not arrived yet.
    pub running: i64,
    /// Jobs parked in its line.
    pub waiting: i64,
    /// The breaker: consecutive failures counted.
    pub failures: i64,
    /// The breaker: open until then (ms), or `None` while closed.
    pub open_until: Option<i64>,
    /// The breaker: the job let through to probe, if one is.
    pub probe: Option<String>,
    /// ms.
    pub updated_at: i64,
}

fn opt_int(v: Option<i64>) -> Param {
    v.map_or(Param::Null, Param::Int)
}

/// The policy's parameters, as the statements bind them (`None` parts as NULL).
struct Bound {
    interval_us: Param,
    tolerance_us: Param,
    concurrency: Param,
    trip_after: Param,
    cooldown_ms: Param,
}

fn bound(p: &Policy) -> Bound {
    Bound {
        interval_us: opt_int(p.throttle.map(|t| t.interval_us())),
        tolerance_us: opt_int(p.throttle.map(|t| t.tolerance_us())),
        concurrency: opt_int(p.concurrency.map(i64::from)),
        trip_after: opt_int(p.breaker.map(|b| i64::from(b.trip_after))),
        cooldown_ms: opt_int(p.breaker.map(|b| i64::from(b.cooldown_seconds) * 1000)),
    }
}

macro_rules! sql {
    ($name:literal) => {
        include_str!(concat!("sql/", $name, ".sql"))
    };
}

/// The statements of one ask, in order; the last one's row is the verdict.
pub(crate) fn ask_stmts(ask: &Ask<'_>, now: i64) -> Vec<Stmt> {
    let b = bound(&ask.policy);
    let (key, job, until) = (ask.limit_key, ask.job_id, ask.until);
    // The statements that decide for this job at this time bind these four first.
    let for_job = |sql: &'static str, rest: Vec<(&'static str, Param)>| {
        let first = [("limit_key", key.into()), ("job_id", job.into()), ("now", now.into()), ("until", until.into())];
        Stmt::bind(sql, first.into_iter().chain(rest))
    };
    vec![
        Stmt::bind(sql!("limit_seen"), [("limit_key", key.into()), ("now", now.into())]),
        for_job(
            sql!("limit_acquire"),
            vec![
                ("interval_us", b.interval_us.clone()),
                ("tolerance_us", b.tolerance_us.clone()),
                ("concurrency", b.concurrency.clone()),
                ("pace_ms", ask.pace_ms.into()),
            ],
        ),
        for_job(sql!("limit_charge"), vec![("interval_us", b.interval_us.clone())]),
        for_job(sql!("limit_park"), vec![("route", ask.route.to_text().into()), ("concurrency", b.concurrency)]),
        Stmt::bind(sql!("limit_unhand"), [("limit_key", key.into()), ("job_id", job.into())]),
        for_job(
            sql!("limit_book"),
            vec![("interval_us", b.interval_us.clone()), ("tolerance_us", b.tolerance_us.clone())],
        ),
        Stmt::bind(sql!("limit_unpark"), [("limit_key", key.into()), ("job_id", job.into()), ("until", until.into())]),
        Stmt::bind(
            sql!("limit_verdict"),
            [
                ("limit_key", key.into()),
                ("job_id", job.into()),
                ("until", until.into()),
                ("tolerance_us", b.tolerance_us),
                ("interval_us", b.interval_us),
            ],
        ),
    ]
}

/// The statements of one release, in order; the last one's rows are the jobs woken.
pub(crate) fn release_stmts(r: &Release<'_>, now: i64) -> Vec<Stmt> {
    let b = bound(&r.policy);
    let (verdict, retry_after_ms) = match r.verdict {
        RunVerdict::Succeeded => ("succeeded", 0),
        RunVerdict::Failed { retry_after_ms } => ("failed", retry_after_ms),
        RunVerdict::Neither => ("neither", 0),
    };
    vec![
        Stmt::bind(
            sql!("limit_free"),
            [("limit_key", r.limit_key.into()), ("job_id", r.job_id.into()), ("until", r.until.into())],
        ),
        Stmt::bind(
            sql!("limit_release"),
            [
                ("limit_key", r.limit_key.into()),
                ("job_id", r.job_id.into()),
                ("now", now.into()),
                ("verdict", verdict.into()),
                ("retry_after_ms", retry_after_ms.into()),
                ("trip_after", b.trip_after),
                ("cooldown_ms", b.cooldown_ms),
                ("max_cooldown_ms", MAX_COOLDOWN_MS.into()),
            ],
        ),
    ]
    .into_iter()
    // Every slot free now, not only this run's: after a probe's success the jobs that waited for
    // it may all start (limit_hand.sql hands one while the breaker is not closed).
    .chain(wake_stmts(r.limit_key, WAKE_AT_ONCE, &r.policy, now))
    .collect()
}

/// The statements of a woken job's give-back of the slot handed to it, in order; the last one's
/// rows are the jobs woken to take it.
pub(crate) fn give_back_stmts(key: &str, job: &str, policy: &Policy, now: i64) -> Vec<Stmt> {
    std::iter::once(Stmt::bind(sql!("limit_give_back"), [("limit_key", key.into()), ("job_id", job.into())]))
        .chain(wake_stmts(key, WAKE_AT_ONCE, policy, now))
        .collect()
}

/// The statements of cancelled jobs' leaving `key`'s line (design §22.1): out of the line, the
/// slots handed to them given back and handed on; the last one's rows are the jobs woken.
pub(crate) fn forget_stmts(key: &str, jobs: &[&str], policy: &Policy, now: i64) -> Vec<Stmt> {
    let leave = |job: &str| {
        let at = [("limit_key", Param::from(key)), ("job_id", job.into())];
        [Stmt::bind(sql!("limit_forget"), at.clone()), Stmt::bind(sql!("limit_give_back"), at)]
    };
    jobs.iter().flat_map(|j| leave(j)).chain(wake_stmts(key, WAKE_AT_ONCE, policy, now)).collect()
}

/// Hands the oldest jobs in `key`'s line, at most `n`, the slots free now (none while it is
/// paused) and takes them out of it; the last statement's rows are the jobs woken.
pub(crate) fn wake_stmts(key: &str, n: u32, policy: &Policy, now: i64) -> [Stmt; 2] {
    let until = now + i64::from(WOKEN_HOLD_SECONDS) * 1000;
    let hand = [
        ("limit_key", key.into()),
        ("limit", n.into()),
        ("now", now.into()),
        ("until", until.into()),
        ("concurrency", bound(policy).concurrency),
    ];
    [
        Stmt::bind(sql!("limit_hand"), hand),
        Stmt::bind(sql!("limit_wake"), [("limit_key", key.into()), ("until", until.into())]),
    ]
}

/// Jobs submitted parked join `key`'s line; then as many of the line's oldest as there are slots
/// free are handed one and taken out of it: the last statement's rows are the jobs to send.
pub(crate) fn line_stmts(key: &str, jobs: &[(&str, Route)], policy: &Policy, now: i64) -> Vec<Stmt> {
    let seen = Stmt::bind(sql!("limit_seen"), [("limit_key", key.into()), ("now", now.into())]);
    let line = jobs.iter().map(|(id, route)| {
        Stmt::bind(
            sql!("limit_line"),
            [
                ("limit_key", key.into()),
                ("job_id", (*id).into()),
                ("now", now.into()),
                ("route", route.to_text().into()),
            ],
        )
    });
    let n = u32::try_from(jobs.len()).unwrap_or(u32::MAX);
    std::iter::once(seen).chain(line).chain(wake_stmts(key, n, policy, now)).collect()
}

/// An operator's change to `key`.
pub(crate) fn set_stmt(key: &str, change: &Change, now: i64) -> Stmt {
    let policy = change.policy.flatten().unwrap_or_default();
    let b = bound(&policy);
    let paused = change.paused.map_or(Param::Null, |p| Param::Int(i64::from(p)));
    let overridden = i64::from(matches!(change.policy, Some(Some(_))));
    let keep = i64::from(change.policy.is_none());
    Stmt::bind(
        sql!("limit_set"),
        [
            ("limit_key", key.into()),
            ("paused", paused),
            ("overridden", overridden.into()),
            ("interval_us", b.interval_us),
            ("tolerance_us", b.tolerance_us),
            ("concurrency", b.concurrency),
            ("trip_after", b.trip_after),
            ("cooldown_ms", b.cooldown_ms),
            ("now", now.into()),
            ("keep_policy", keep.into()),
        ],
    )
}

/// A page of limit keys by name, after `after`.
pub(crate) fn states_stmt(after: &str, now: i64, limit: u32) -> Stmt {
    Stmt::bind(sql!("limit_states"), [("after", after.into()), ("now", now.into()), ("limit", limit.into())])
}

/// One limit key.
pub(crate) fn state_stmt(key: &str, now: i64) -> Stmt {
    Stmt::bind(sql!("limit_state"), [("limit_key", key.into()), ("now", now.into())])
}

fn int(row: &Row, c: &str) -> Option<i64> {
    row.get(c).and_then(int_of)
}

/// The verdict row's answer (`limit_verdict.sql`).
fn permit_of(row: Option<&Row>, now: i64) -> Result<Permit, InfraError> {
    let row = row.ok_or_else(|| InfraError::new("ledger", "a limit key's state row is missing"))?;
    if int(row, "granted") == Some(1) {
        return Ok(Permit::Granted);
    }
    let paused = int(row, "paused") == Some(1);
    let open_until = int(row, "open_until");
    let refusal = if int(row, "parked") == Some(1) {
        match open_until {
            _ if paused => Refusal::Paused,
            Some(at) if at <= now => Refusal::Probing,
            _ => Refusal::Full,
        }
    } else if paused {
        // Parked before, woken while still paused: it waits in the line again next time.
        Refusal::Paused
    } else {
        match open_until {
            Some(until) if until > now => Refusal::Open { until },
            _ => {
                // The start the throttle booked for it, µs; rounded up to the next whole ms.
                let booked_us = row.get("booked_at_us").and_then(Value::as_f64).unwrap_or(0.0) as i64;
                Refusal::Throttled { at: ((booked_us + 999) / 1000).max(now + 1) }
            }
        }
    };
    Ok(Permit::Refused(refusal))
}

fn woken_of(rows: &[Row]) -> Vec<Woken> {
    rows.iter()
        .filter_map(|r| {
            let job_id = r.get("job_id").and_then(Value::as_str)?.to_string();
            Some(Woken { job_id, route: Route::parse(r.get("route").and_then(Value::as_str)?)? })
        })
        .collect()
}

pub(super) fn state_of(row: &Row) -> Option<LimitState> {
    let limit_key = row.get("limit_key").and_then(Value::as_str)?.to_string();
    let overridden = (int(row, "overridden") == Some(1)).then(|| {
        let interval_us = int(row, "interval_us");
        let tolerance_us = int(row, "tolerance_us").unwrap_or(0);
        Policy {
            throttle: interval_us.filter(|&i| i > 0).map(|i| crate::flow::Throttle {
                // Shown as starts a second (as `rate` per 1 s), the closest whole rate.
                rate: u32::try_from((1_000_000 + i / 2) / i).unwrap_or(u32::MAX).max(1),
                per_seconds: 1,
                burst: u32::try_from(tolerance_us / i + 1).unwrap_or(1),
            }),
            concurrency: int(row, "concurrency").and_then(|c| u32::try_from(c).ok()),
            breaker: int(row, "trip_after").and_then(|k| u32::try_from(k).ok()).map(|trip_after| {
                crate::flow::Breaker {
                    trip_after,
                    cooldown_seconds: u32::try_from(int(row, "cooldown_ms").unwrap_or(0) / 1000).unwrap_or(0),
                }
            }),
        }
    });
    Some(LimitState {
        limit_key,
        paused: int(row, "paused") == Some(1),
        overridden,
        running: int(row, "running").unwrap_or(0),
        waiting: int(row, "waiting").unwrap_or(0),
        failures: int(row, "failures").unwrap_or(0),
        open_until: int(row, "open_until"),
        probe: row.get("probe").and_then(Value::as_str).map(str::to_string),
        updated_at: int(row, "updated_at").unwrap_or(0),
    })
}

impl<S: Sql> Shard<S> {
    /// Asks for `ask`'s permit: one batch in the limit key's shard.
    pub async fn ask(&self, ask: &Ask<'_>, now: i64) -> Result<Answer, InfraError> {
        let out = self.sql.batch(ask_stmts(ask, now)).await?;
        let row = out.last().and_then(|rows| rows.first());
        let interval_us = row.and_then(|r| int(r, "interval_us"));
        let start_us = row.and_then(|r| r.get("start_at_us")).and_then(Value::as_f64).map_or(0, |us| us as i64);
        let start_at = ((start_us + 999) / 1000).max(now);
        Ok(Answer { permit: permit_of(row, now)?, start_at, interval_us })
    }

    /// Frees `r`'s permit, tells the breaker, and takes out of the line as many jobs as there are
    /// slots free now: one batch.
    pub async fn release(&self, r: &Release<'_>, now: i64) -> Result<Vec<Woken>, InfraError> {
        let out = self.sql.batch(release_stmts(r, now)).await?;
        Ok(out.last().map(|rows| woken_of(rows)).unwrap_or_default())
    }

    /// Gives back the slot handed to `job`, woken and unable to start, and hands it on: one
    /// batch. The jobs woken to take it come back.
    pub async fn give_back(&self, key: &str, job: &str, policy: &Policy, now: i64) -> Result<Vec<Woken>, InfraError> {
        let out = self.sql.batch(give_back_stmts(key, job, policy, now)).await?;
        Ok(out.last().map(|rows| woken_of(rows)).unwrap_or_default())
    }

    /// Cancelled jobs leave their limit keys' lines and give back the slots handed to them, for
    /// each key its jobs under its policy: one batch, whatever their number. The jobs woken to
    /// take the slots come back.
    pub async fn forget_all(&self, keys: &[Forgotten<'_>], now: i64) -> Result<Vec<Woken>, InfraError> {
        self.woken_by_keys(keys.iter().map(|(key, jobs, policy)| forget_stmts(key, jobs, policy, now))).await
    }

    #[cfg(any(test, feature = "testing"))]
    /// Hands the oldest jobs in `key`'s line, at most `n`, the slots free under `policy` (the
    /// configured one; an override stored with the key wins) and takes them out of it: one batch.
    pub async fn wake(&self, key: &str, n: u32, policy: &Policy, now: i64) -> Result<Vec<Woken>, InfraError> {
        let out = self.sql.batch(wake_stmts(key, n, policy, now).into()).await?;
        Ok(out.last().map(|rows| woken_of(rows)).unwrap_or_default())
    }

    /// Puts jobs submitted parked in their limit keys' lines and hands the slots free now to
    /// each line's oldest: one batch, whatever the number of keys. The jobs to send (their
    /// wake-ups) come back.
    pub async fn line_all(&self, keys: &[Lined<'_>], now: i64) -> Result<Vec<Woken>, InfraError> {
        self.woken_by_keys(keys.iter().map(|(key, jobs, policy)| line_stmts(key, jobs, policy, now))).await
    }

    /// Runs every key's statements in one batch (none: no batch); each key's last statement
    /// answers the jobs woken for it, gathered here.
    async fn woken_by_keys(&self, per_key: impl Iterator<Item = Vec<Stmt>>) -> Result<Vec<Woken>, InfraError> {
        let mut stmts = Vec::new();
        let mut last = Vec::new();
        for key_stmts in per_key {
            stmts.extend(key_stmts);
            last.push(stmts.len() - 1);
        }
        if stmts.is_empty() {
            return Ok(Vec::new());
        }
        let out = self.sql.batch(stmts).await?;
        Ok(last.iter().filter_map(|&i| out.get(i)).flat_map(|rows| woken_of(rows)).collect())
    }

    /// Applies an operator's change to `key` and, unless it pauses the key, hands its line the slots
    /// free under `policy` (the configured one; an override stored with the key wins), at most
    /// [`WAKE_AT_ONCE`]: one batch. The jobs woken come back, to be sent.
    pub async fn set_limit(&self, key: &str, change: &Change, policy: &Policy, now: i64) -> Result<Vec<Woken>, InfraError> {
        // A resume or a new policy hands the slots it frees in the same batch: made in two, the
        // line waited with a slot free between them, for maintenance should the second be lost
        // (the simulation's line check saw it).
        let mut stmts = vec![set_stmt(key, change, now)];
        if change.paused != Some(true) {
            stmts.extend(wake_stmts(key, WAKE_AT_ONCE, policy, now));
        }
        let out = self.sql.batch(stmts).await?;
        Ok(if change.paused == Some(true) { Vec::new() } else { out.last().map(|rows| woken_of(rows)).unwrap_or_default() })
    }

    /// A page of limit keys by name, after `after`.
    pub async fn limit_states(&self, after: &str, now: i64, limit: u32) -> Result<Vec<LimitState>, InfraError> {
        Ok(self.sql.query(states_stmt(after, now, limit)).await?.iter().filter_map(state_of).collect())
    }

    /// One limit key (`None`: none of its jobs has asked to start, and no operator changed it).
    pub async fn limit_state(&self, key: &str, now: i64) -> Result<Option<LimitState>, InfraError> {
        Ok(self.sql.query(state_stmt(key, now)).await?.iter().find_map(state_of))
    }
}
