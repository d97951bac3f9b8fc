//! Periodic jobs (design §23): schedules in configuration (`SCHEDULES`), each a cron expression in
//! UTC or an interval, with the job to enqueue each period. The cron trigger's run enqueues each
//! period's job once, whatever number of runs see the period: the job's id names its schedule and
//! period (`schedule:{name}:{period start, ms}`), and a job submitted again with its id is a
//! duplicate; the ledger's `schedule` row keeps the latest period seen, so a period is never
//! enqueued again after its job is purged.
//!
//! This module is the pure rule ([`due`]) and the configuration it reads; `periodic.rs` runs it
//! over the ledger and the API's submission. Must not: read the clock or the configuration's vars
//! itself, or do I/O.

pub mod cron;

use serde_json::{json, Map, Value};

use cron::Cron;

/// What is wrong with `SCHEDULES`, or with a change to a schedule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadSchedule(pub String);

impl From<String> for BadSchedule {
    fn from(s: String) -> Self {
        BadSchedule(s)
    }
}

impl From<&str> for BadSchedule {
    fn from(s: &str) -> Self {
        BadSchedule(s.to_string())
    }
}

/// The shortest interval: the cron trigger runs once a minute, so a shorter one could not be kept.
pub const MIN_INTERVAL_SECONDS: u32 = 60;
/// The longest interval: a year.
pub const MAX_INTERVAL_SECONDS: u32 = 366 * 86_400;
/// Schedules one worker may have: each is one ledger row, read by every cron run.
pub const MAX_SCHEDULES: usize = 100;
/// A schedule seen for the first time enqueues the period in progress only when that period
/// began within this (the cron's own period): an `every minute` schedule runs at once, a daily
/// 03:00 one deployed at 15:00 runs first at the next 03:00.
pub const FIRST_SIGHT_MS: i64 = 60_000;

/// When a schedule's periods start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    /// At each minute a cron expression matches (UTC).
    Cron(Cron),
    /// Every `seconds`, counted from 1970-01-01 00:00 UTC (every 3600: on the hour).
    Every(u32),
}

impl When {
    /// The start of the period `at` falls in: the latest start at or before it.
    pub fn period_at(&self, at: i64) -> i64 {
        match self {
            // A parsed expression matches some day in every 28 years; `at` itself stands in for
            // one that could not (it cannot happen).
            When::Cron(c) => c.latest_at(at).unwrap_or(at),
            When::Every(s) => at - at.rem_euclid(i64::from(*s) * 1000),
        }
    }

    /// The start of the first period after `at`.
    pub fn next_after(&self, at: i64) -> i64 {
        match self {
            When::Cron(c) => c.next_after(at).unwrap_or(i64::MAX),
            When::Every(s) => self.period_at(at) + i64::from(*s) * 1000,
        }
    }
}

/// What a run does about periods that ended without their job (the cron did not run, or the
/// ledger was down): enqueue the latest of them once, late, or skip them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    /// At most one: the latest missed period, enqueued on the next run.
    CatchUp,
    /// None.
    Skip,
}

/// One configured schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// Its name: 1 to 64 letters, digits, `.`, `_` or `-`; in its jobs' ids.
    pub name: String,
    pub when: When,
    /// The job of each period, as `POST /jobs` takes one, without an `id`.
    pub job: Map<String, Value>,
    pub missed: Missed,
}

impl Schedule {
    /// The id of the job of the period starting at `period`.
    pub fn job_id(&self, period: i64) -> String {
        format!("schedule:{}:{period}", self.name)
    }

    /// The job to submit for `period`: the template with its id.
    pub fn job_for(&self, period: i64) -> Value {
        let mut job = self.job.clone();
        job.insert("id".into(), json!(self.job_id(period)));
        Value::Object(job)
    }

    /// How it is written in `SCHEDULES`, for the API.
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("name".into(), json!(self.name));
        match &self.when {
            When::Cron(c) => o.insert("cron".into(), json!(c.text())),
            When::Every(s) => o.insert("every_seconds".into(), json!(s)),
        };
        o.insert("missed".into(), json!(if self.missed == Missed::CatchUp { "catch_up" } else { "skip" }));
        o.insert("job".into(), Value::Object(self.job.clone()));
        Value::Object(o)
    }
}

/// The schedules of `SCHEDULES`, in their configured order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Schedules(pub Vec<Schedule>);

impl Schedules {
    /// Reads `SCHEDULES`: a JSON array of `{"name", "cron" | "every_seconds", "job", "missed"?}`.
    /// Unset or empty: none.
    pub fn parse(text: &str) -> Result<Schedules, BadSchedule> {
        if text.trim().is_empty() {
            return Ok(Schedules::default());
        }
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let Value::Array(items) = v else { return Err("must be a JSON array of schedules".into()) };
        if items.len() > MAX_SCHEDULES {
            return Err(format!("{} schedules, over the limit of {MAX_SCHEDULES}", items.len()).into());
        }
        let mut out: Vec<Schedule> = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let s = one(item).map_err(|e| format!("schedule {i}: {e}"))?;
            if out.iter().any(|o| o.name == s.name) {
                return Err(format!("schedule {i}: the name {:?} is used twice", s.name).into());
            }
            out.push(s);
        }
        Ok(Schedules(out))
    }

    /// The schedule named `name`.
    pub fn get(&self, name: &str) -> Option<&Schedule> {
        self.0.iter().find(|s| s.name == name)
    }
}

/// Whether `name` can name a schedule (it goes into job ids and URL paths).
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

fn one(item: Value) -> Result<Schedule, BadSchedule> {
    let Value::Object(mut o) = item else { return Err("must be an object".into()) };
    let name = match o.remove("name") {
        Some(Value::String(n)) if valid_name(&n) => n,
        Some(Value::String(n)) => return Err(format!("name {n:?} must be 1 to 64 letters, digits, '.', '_' or '-'").into()),
        _ => return Err("\"name\" is required, a string".into()),
    };
    let when = match (o.remove("cron"), o.remove("every_seconds")) {
        (Some(Value::String(c)), None) => When::Cron(Cron::parse(&c).map_err(|e| format!("cron: {e}"))?),
        (None, Some(s)) => match s.as_u64() {
            Some(n) if (u64::from(MIN_INTERVAL_SECONDS)..=u64::from(MAX_INTERVAL_SECONDS)).contains(&n) => When::Every(n as u32),
            _ => {
                return Err(format!(
                    "every_seconds must be a whole number from {MIN_INTERVAL_SECONDS} (the cron runs once a minute) to {MAX_INTERVAL_SECONDS}"
                ).into())
            }
        },
        (Some(_), None) => return Err("cron must be a string".into()),
        (Some(_), Some(_)) => return Err("give \"cron\" or \"every_seconds\", not both".into()),
        (None, None) => return Err("\"cron\" or \"every_seconds\" is required".into()),
    };
    let missed = match o.remove("missed") {
        None => Missed::CatchUp,
        Some(Value::String(m)) if m == "catch_up" => Missed::CatchUp,
        Some(Value::String(m)) if m == "skip" => Missed::Skip,
        Some(_) => return Err("missed must be \"catch_up\" or \"skip\"".into()),
    };
    let Some(Value::Object(job)) = o.remove("job") else {
        return Err("\"job\" is required: the job to enqueue each period, as POST /jobs takes one".into());
    };
    if !job.contains_key("payload") {
        return Err("job has no \"payload\"".into());
    }
    if job.contains_key("id") {
        return Err("job must not set \"id\": each period's job id is the schedule's (schedule:<name>:<period>)".into());
    }
    if let Some(k) = o.keys().next() {
        return Err(format!("unknown field {k:?}").into());
    }
    Ok(Schedule { name, when, job, missed })
}

/// What one run does for one schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The periods whose jobs to submit, oldest first (at most two: a caught-up one and the
    /// period in progress).
    pub enqueue: Vec<i64>,
    /// The period to record as seen once they are submitted: the period in progress.
    pub seen: i64,
}

/// The rule (design §23.2): at `now`, with `last` the latest period already seen, what to submit.
/// `None`: nothing to do (the period in progress was seen). The period in progress is always
/// submitted, however late; the periods that ended since `last` without their job are missed,
/// and with [`Missed::CatchUp`] the latest of them is submitted too. A paused schedule submits
/// nothing and records the period as seen, so its resume catches up nothing of the pause. A
/// schedule seen for the first time submits the period in progress only if it began within
/// [`FIRST_SIGHT_MS`].
pub fn due(s: &Schedule, last: Option<i64>, paused: bool, now: i64) -> Option<Due> {
    let current = s.when.period_at(now);
    if last.is_some_and(|l| l >= current) {
        return None;
    }
    let enqueue = match last {
        _ if paused => vec![],
        None if now - current < FIRST_SIGHT_MS => vec![current],
        None => vec![],
        Some(l) => {
            let before = s.when.period_at(current - 1);
            if s.missed == Missed::CatchUp && before > l {
                vec![before, current]
            } else {
                vec![current]
            }
        }
    };
    Some(Due { enqueue, seen: current })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    fn every_minute(missed: Missed) -> Schedule {
        let job = json!({"payload": 1}).as_object().cloned().unwrap();
        Schedule { name: "m".into(), when: When::Cron(Cron::parse("* * * * *").unwrap()), job, missed }
    }

    #[test]
    fn the_period_in_progress_is_submitted_once() {
        let s = every_minute(Missed::CatchUp);
        let t = 1_000 * MIN + 10_000;
        assert_eq!(due(&s, Some(999 * MIN), false, t), Some(Due { enqueue: vec![1_000 * MIN], seen: 1_000 * MIN }));
        assert_eq!(due(&s, Some(1_000 * MIN), false, t + 40_000), None, "a second run in the same minute");
    }

    #[test]
    fn a_missed_period_is_caught_up_once_or_skipped() {
        let t = 1_003 * MIN + 5_000;
        let catch = due(&every_minute(Missed::CatchUp), Some(1_000 * MIN), false, t).unwrap();
        assert_eq!(catch.enqueue, vec![1_002 * MIN, 1_003 * MIN], "the latest missed one only");
        let skip = due(&every_minute(Missed::Skip), Some(1_000 * MIN), false, t).unwrap();
        assert_eq!(skip.enqueue, vec![1_003 * MIN]);
        let none_missed = due(&every_minute(Missed::CatchUp), Some(1_002 * MIN), false, t).unwrap();
        assert_eq!(none_missed.enqueue, vec![1_003 * MIN]);
    }

    #[test]
    fn a_new_schedule_runs_now_only_if_its_period_just_began() {
        let s = every_minute(Missed::CatchUp);
        assert_eq!(due(&s, None, false, 1_000 * MIN + 59_000).unwrap().enqueue, vec![1_000 * MIN]);
        let daily = Schedule { when: When::Cron(Cron::parse("0 3 * * *").unwrap()), ..s };
        let three = 20_000 * 1440 * MIN + 180 * MIN;
        assert_eq!(due(&daily, None, false, three + 30_000).unwrap().enqueue, vec![three]);
        let later = due(&daily, None, false, three + 12 * 60 * MIN).unwrap();
        assert_eq!(later, Due { enqueue: vec![], seen: three }, "deployed at 15:00: first run tomorrow at 03:00");
    }

    #[test]
    fn a_paused_schedule_submits_nothing_and_its_resume_catches_up_nothing() {
        let s = every_minute(Missed::CatchUp);
        assert_eq!(due(&s, Some(1_000 * MIN), true, 1_005 * MIN).unwrap(), Due { enqueue: vec![], seen: 1_005 * MIN });
        assert_eq!(due(&s, Some(1_005 * MIN), false, 1_006 * MIN).unwrap().enqueue, vec![1_006 * MIN]);
    }

    #[test]
    fn intervals_count_from_the_epoch() {
        let w = When::Every(3600);
        assert_eq!(w.period_at(7_250_000), 7_200_000);
        assert_eq!(w.next_after(7_250_000), 10_800_000);
        assert_eq!(w.period_at(7_200_000), 7_200_000);
    }

    #[test]
    fn schedules_are_read_and_bad_ones_refused_naming_what() {
        let ok = Schedules::parse(
            r#"[{"name": "nightly", "cron": "0 3 * * *", "job": {"payload": {"x": 1}, "ordering_key": "k"}},
                {"name": "beat", "every_seconds": 300, "missed": "skip", "job": {"payload": 2}}]"#,
        )
        .unwrap();
        assert_eq!(ok.0.len(), 2);
        assert_eq!(ok.get("beat").unwrap().missed, Missed::Skip);
        assert_eq!(ok.get("nightly").unwrap().job_for(5)["id"], "schedule:nightly:5");
        assert_eq!(Schedules::parse("").unwrap(), Schedules::default());
        for (text, says) in [
            ("{}", "JSON array"),
            (r#"[{"cron": "* * * * *", "job": {"payload": 1}}]"#, "\"name\" is required"),
            (r#"[{"name": "a b", "cron": "* * * * *", "job": {"payload": 1}}]"#, "must be 1 to 64"),
            (r#"[{"name": "a", "job": {"payload": 1}}]"#, "\"cron\" or \"every_seconds\" is required"),
            (r#"[{"name": "a", "cron": "* * * * *", "every_seconds": 60, "job": {"payload": 1}}]"#, "not both"),
            (r#"[{"name": "a", "every_seconds": 30, "job": {"payload": 1}}]"#, "every_seconds must be"),
            (r#"[{"name": "a", "cron": "61 * * * *", "job": {"payload": 1}}]"#, "cron: minute field"),
            (r#"[{"name": "a", "cron": "* * * * *"}]"#, "\"job\" is required"),
            (r#"[{"name": "a", "cron": "* * * * *", "job": {}}]"#, "no \"payload\""),
            (r#"[{"name": "a", "cron": "* * * * *", "job": {"payload": 1, "id": "x"}}]"#, "must not set \"id\""),
            (r#"[{"name": "a", "cron": "* * * * *", "job": {"payload": 1}, "missed": "all"}]"#, "missed must be"),
            (r#"[{"name": "a", "cron": "* * * * *", "job": {"payload": 1}, "tz": "UTC"}]"#, "unknown field \"tz\""),
            (
                r#"[{"name": "a", "cron": "* * * * *", "job": {"payload": 1}}, {"name": "a", "every_seconds": 60, "job": {"payload": 1}}]"#,
                "schedule 1: the name \"a\" is used twice",
            ),
        ] {
            let e = Schedules::parse(text).unwrap_err().0;
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
