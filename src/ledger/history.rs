//! What happened to jobs: each job's recent events (its runs, and an operator's cancel, redrive
//! and skip), and the per-minute activity the dashboard charts are drawn from.
//!
//! History lives in `job_event`, a ring of the last [`HISTORY_KEEP`] events per job
//! (`migrations/0004`), written in the same D1 batch as the transition it describes and purged
//! with its job; a successful run is described by the DONE row itself (migration 0007: most jobs
//! never write a history row) and read back as the last event. Activity is read from what the
//! ledger already holds (failed runs from `job_event`, successes and created and finished times
//! from `job`): charts cost no write of their own.

use serde::Serialize;
use serde_json::Value;

use super::job::{int_of, Status};
use super::store::Row;
use crate::error::InfraError;

/// Events kept per job (the ring's size; the schema's CHECK allows up to 20).
pub const HISTORY_KEEP: u32 = 20;
/// Who an operator's actions are recorded as.
pub const API_ACTOR: &str = "api";
/// How far back the charts go, in minutes.
pub const ACTIVITY_MINUTES: i64 = 60;

/// What kind of event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A handler run (or a run whose lease expired).
    Attempt,
    /// An operator cancelled the job.
    Cancel,
    /// An operator redrove the job.
    Redrive,
    /// An operator let the job's key move past it.
    Skip,
    /// An operator asked the running job to stop (design §22.1).
    CancelRequested,
    /// A newer submission with its dedupe key replaced its payload, or took the key over while it
    /// ran (design §22.3).
    Superseded,
}

impl Kind {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Kind::Attempt => "attempt",
            Kind::Cancel => "cancel",
            Kind::Redrive => "redrive",
            Kind::Skip => "skip",
            Kind::CancelRequested => "cancel_requested",
            Kind::Superseded => "superseded",
        }
    }
    fn parse(s: &str) -> Option<Kind> {
        [Kind::Attempt, Kind::Cancel, Kind::Redrive, Kind::Skip, Kind::CancelRequested, Kind::Superseded]
            .into_iter().find(|k| k.as_str() == s)
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunOutcome {
    /// Succeeded: DONE.
    Done,
    /// Failed; PENDING for another attempt.
    Retry,
    /// Failed for good: DEAD.
    Dead,
    /// The handler asked to run again later; PENDING, no attempt spent.
    Snooze,
}

impl RunOutcome {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Done => "done",
            RunOutcome::Retry => "retry",
            RunOutcome::Dead => "dead",
            RunOutcome::Snooze => "snooze",
        }
    }
    fn parse(s: &str) -> Option<RunOutcome> {
        [RunOutcome::Done, RunOutcome::Retry, RunOutcome::Dead, RunOutcome::Snooze]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// One handler run, as its runner saw it: its line in the job's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The job.
    pub job_id: String,
    /// Attempt number, from 1.
    pub attempt: i64,
    /// ms the handler started.
    pub started_at: i64,
    /// ms it returned.
    pub finished_at: i64,
    /// How it ended.
    pub outcome: RunOutcome,
    /// Why it failed.
    pub error: Option<String>,
    /// The HTTP status the handler got, if it made a request that was answered.
    pub http_status: Option<u16>,
    /// The invocation that ran it.
    pub actor: String,
}

/// An event as stored and shown (`GET /jobs/{id}` → `history`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// The job's event number, from 1; the newest is the highest.
    pub n: i64,
    /// ms.
    pub at: i64,
    /// What happened.
    pub kind: Kind,
    /// The invocation that ran it, or "api".
    pub actor: String,
    /// Runs: attempt number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i64>,
    /// Runs: ms the handler started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    /// Runs: how it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<RunOutcome>,
    /// Runs that failed: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Runs that got an HTTP answer: its status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_status: Option<i64>,
}

impl Event {
    /// Every row of `events.sql` as an event.
    pub fn all(rows: &[Row]) -> Result<Vec<Event>, InfraError> {
        rows.iter().map(Event::from_row).collect()
    }

    fn from_row(row: &Row) -> Result<Event, InfraError> {
        let text = |c: &str| row.get(c).and_then(Value::as_str).map(str::to_string);
        let int = |c: &str| row.get(c).and_then(int_of);
        let bad = |what: &str| InfraError::new("D1", format!("job_event row lacks {what}"));
        Ok(Event {
            n: int("n").ok_or_else(|| bad("n"))?,
            at: int("at").ok_or_else(|| bad("at"))?,
            kind: text("kind").and_then(|k| Kind::parse(&k)).ok_or_else(|| bad("a valid kind"))?,
            actor: text("actor").unwrap_or_default(),
            attempt: int("attempt"),
            started_at: int("started_at"),
            outcome: text("outcome").and_then(|o| RunOutcome::parse(&o)),
            error: text("error"),
            http_status: int("http_status"),
        })
    }
}

/// The successful run a DONE job's row describes (complete.sql writes no history row for it), as
/// the event after `events`. `None` when the job is not DONE, or finished before migration 0007
/// (no `ran_by`: its success is a history row of its own), or `events` already ends with it.
pub fn success_of(job: &super::job::JobRow, events: &[Event]) -> Option<Event> {
    let (Status::Done, Some(actor), Some(at)) = (job.status, job.ran_by.as_ref(), job.finished_at) else {
        return None;
    };
    let last = events.last();
    if last.is_some_and(|e| e.kind == Kind::Attempt && e.outcome == Some(RunOutcome::Done) && e.at == at) {
        return None;
    }
    Some(Event {
        n: last.map_or(1, |e| e.n + 1),
        at,
        kind: Kind::Attempt,
        actor: actor.clone(),
        attempt: Some(job.attempts),
        started_at: job.started_at,
        outcome: Some(RunOutcome::Done),
        error: None,
        http_status: job.http_status,
    })
}

/// Adds the successful run `job`'s row describes to its `events` (see [`success_of`]), keeping
/// the last [`HISTORY_KEEP`] as the ring does.
pub fn with_success(job: &super::job::JobRow, events: &mut Vec<Event>) {
    if let Some(done) = success_of(job, events) {
        if events.len() >= HISTORY_KEEP as usize {
            events.remove(0);
        }
        events.push(done);
    }
}

/// How many runs of each kind (successful, failed) a shard's time charts are drawn from, the
/// newest first: a busy hour is charted from its latest runs, and a dashboard refresh reads at
/// most this many rows more per shard.
pub const TIMES_SAMPLE: u32 = 500;

/// One run's time (design §27.6): its job type, how long it ran, and the queue wait before it
/// when known (a successful run's, from its DONE row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The job type ("" when it has none).
    pub job_type: String,
    /// ms it ran.
    pub run_ms: i64,
    /// ms it waited past its due time before it started.
    pub wait_ms: Option<i64>,
}

/// The samples `run_times.sql` answered.
pub fn samples(rows: &[Row]) -> Vec<Sample> {
    rows.iter()
        .filter_map(|row| {
            let run_ms = row.get("run_ms").and_then(int_of)?.max(0);
            let job_type = row.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
            Some(Sample { job_type, run_ms, wait_ms: row.get("wait_ms").and_then(int_of).map(|w| w.max(0)) })
        })
        .collect()
}

/// One job type's run times and queue waits over the last hour: the 50th and 95th percentiles
/// (nearest rank) and how many runs each is of. `GET /jobs/activity`'s `times`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Times {
    /// The job type.
    #[serde(rename = "type")]
    pub job_type: String,
    /// Runs timed.
    pub runs: usize,
    /// ms.
    pub run_p50_ms: i64,
    /// ms.
    pub run_p95_ms: i64,
    /// Runs whose queue wait is known (successful ones).
    pub waits: usize,
    /// ms; `None` with no wait known.
    pub wait_p50_ms: Option<i64>,
    /// ms.
    pub wait_p95_ms: Option<i64>,
}

/// The value at percentile `p` of sorted `values` (nearest rank: the smallest value at least `p`%
/// of them are at or below).
fn percentile(sorted: &[i64], p: usize) -> Option<i64> {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

/// Each job type's [`Times`], by type.
pub fn times(samples: Vec<Sample>) -> Vec<Times> {
    let mut by_type: std::collections::BTreeMap<String, (Vec<i64>, Vec<i64>)> = Default::default();
    for s in samples {
        let (runs, waits) = by_type.entry(s.job_type).or_default();
        runs.push(s.run_ms);
        waits.extend(s.wait_ms);
    }
    by_type
        .into_iter()
        .map(|(job_type, (mut runs, mut waits))| {
            runs.sort_unstable();
            waits.sort_unstable();
            Times {
                job_type,
                runs: runs.len(),
                run_p50_ms: percentile(&runs, 50).unwrap_or(0),
                run_p95_ms: percentile(&runs, 95).unwrap_or(0),
                waits: waits.len(),
                wait_p50_ms: percentile(&waits, 50),
                wait_p95_ms: percentile(&waits, 95),
            }
        })
        .collect()
}

/// One minute of activity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Minute {
    /// ms, the minute's start.
    pub at: i64,
    /// Runs that succeeded.
    pub done: i64,
    /// Runs that failed and will be tried again.
    pub failed: i64,
    /// Jobs that became DEAD (failed for good, dead-lettered, cancelled).
    pub dead: i64,
    /// Jobs not finished (PENDING or RUNNING) at the minute's end.
    pub backlog: i64,
}

/// The last [`ACTIVITY_MINUTES`] minutes, oldest first, the current (partial) minute last.
///
/// `backlog` walks back from `now_open` (jobs unfinished now): a minute's end had the unfinished
/// jobs of the next minute's end, minus those created or redriven in the next minute, plus those
/// finished in it. (A job that died and was redriven within the hour lost its first death's time
/// to the redrive: before its redrive it counts as finished.) Runs come from history, jobs made DEAD from `job.finished_at` (so a job dead-lettered or
/// cancelled without a run counts too).
pub fn activity(now: i64, now_open: i64, runs: &[Row], jobs: &[Row]) -> Vec<Minute> {
    let last = now.div_euclid(60_000);
    let first = last - (ACTIVITY_MINUTES - 1);
    let mut minutes: Vec<Minute> = (first..=last).map(|m| Minute { at: m * 60_000, ..Minute::default() }).collect();
    let (mut created, mut finished) = (vec![0i64; minutes.len()], vec![0i64; minutes.len()]);
    let slot = |row: &Row| {
        let m = row.get("minute").and_then(int_of)?;
        (first..=last).contains(&m).then(|| (m - first) as usize)
    };
    let n = |row: &Row| row.get("n").and_then(int_of).unwrap_or(0);
    let text = |row: &Row, c: &str| row.get(c).and_then(Value::as_str).map(str::to_string);
    for row in runs {
        let Some(i) = slot(row) else { continue };
        if text(row, "kind").as_deref() == Some(Kind::Redrive.as_str()) {
            // Open again from here on: walking back, it was not open before (unless created in
            // the hour, which `created` counts).
            created[i] += n(row);
            continue;
        }
        match text(row, "outcome").and_then(|o| RunOutcome::parse(&o)) {
            Some(RunOutcome::Done) => minutes[i].done += n(row),
            Some(RunOutcome::Retry) => minutes[i].failed += n(row),
            // Deaths are counted from the job table below, which also sees deaths without a run;
            // a snooze is neither a success nor a failure.
            Some(RunOutcome::Dead | RunOutcome::Snooze) | None => {}
        }
    }
    for row in jobs {
        let Some(i) = slot(row) else { continue };
        match text(row, "what").as_deref() {
            Some("created") => created[i] += n(row),
            // Successful runs described by their job rows (no history row).
            Some("ran") => minutes[i].done += n(row),
            Some("finished") => {
                finished[i] += n(row);
                if text(row, "status").as_deref() == Some(Status::Dead.as_str()) {
                    minutes[i].dead += n(row);
                }
            }
            _ => {}
        }
    }
    let mut open = now_open;
    for i in (0..minutes.len()).rev() {
        minutes[i].backlog = open.max(0);
        open = open - created[i] + finished[i];
    }
    minutes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(v: Value) -> Row {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn times_are_nearest_rank_percentiles_per_type() {
        let sample = |t: &str, run_ms, wait_ms| Sample { job_type: t.into(), run_ms, wait_ms };
        let mut all: Vec<Sample> = (1..=100).map(|i| sample("email", i * 10, Some(i))).collect();
        all.push(sample("resize", 7, None));
        all.push(sample("email", 5_000, None));
        let t = times(all);
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].job_type.as_str(), t[0].runs, t[0].waits), ("email", 101, 100));
        assert_eq!((t[0].run_p50_ms, t[0].run_p95_ms), (510, 960));
        assert_eq!((t[0].wait_p50_ms, t[0].wait_p95_ms), (Some(50), Some(95)));
        assert_eq!((t[1].run_p50_ms, t[1].run_p95_ms, t[1].wait_p50_ms), (7, 7, None));
        assert_eq!(percentile(&[4], 50), Some(4));
        assert_eq!(percentile(&[], 95), None);
    }

    #[test]
    fn the_backlog_walks_back_from_now_by_created_and_finished() {
        let now = 100 * 60_000 + 30_000; // minute 100, half way
        let jobs = [
            row(json!({"what": "created", "minute": 100, "n": 5})),
            row(json!({"what": "finished", "minute": 100, "status": "DONE", "n": 2})),
            row(json!({"what": "created", "minute": 99, "n": 3})),
            row(json!({"what": "finished", "minute": 98, "status": "DEAD", "n": 1})),
        ];
        let runs = [
            row(json!({"minute": 100, "outcome": "done", "n": 2})),
            row(json!({"minute": 99, "outcome": "retry", "n": 4})),
        ];
        let m = activity(now, 7, &runs, &jobs);
        assert_eq!(m.len(), 60);
        let last = m[59];
        assert_eq!((last.at, last.done, last.backlog), (100 * 60_000, 2, 7));
        // End of minute 99: 7 - 5 created + 2 finished in minute 100.
        assert_eq!((m[58].failed, m[58].backlog), (4, 4));
        // End of minute 98: 4 - 3 created in 99.
        assert_eq!((m[57].dead, m[57].backlog), (1, 1));
        // End of 97: 1 + 1 finished in 98.
        assert_eq!(m[56].backlog, 2);
    }

    #[test]
    fn rows_outside_the_window_are_ignored() {
        let now = 100 * 60_000;
        let runs = [row(json!({"minute": 10, "outcome": "done", "n": 9}))];
        let m = activity(now, 0, &runs, &[]);
        assert!(m.iter().all(|x| x.done == 0 && x.backlog == 0));
    }
}
