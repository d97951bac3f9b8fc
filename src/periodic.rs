//! One cron run's periodic jobs (design §23.2): for each schedule, the rule ([`due`]) over
//! its ledger row, the due periods' jobs submitted through the API's own submission (so a
//! schedule's job is checked, limited and routed as any other), then the period recorded as seen.
//!
//! Submitting first and recording second is what makes a crash safe both ways: a run that dies
//! between the two leaves the period unrecorded, and the next run submits the same job ids again,
//! which are duplicates. A schedule whose job is refused (its template no longer fits the job types)
//! is reported and not recorded, so it is tried again on every run until it is fixed, never
//! silently passed over.

use serde::Serialize;

use crate::clock::Clock;
use crate::enqueue::{EnqueueError, Producer};
use crate::ledger::{Ledger, Sql};
use crate::producer::QueueSender;
use crate::schedule::{due, Due, Schedule, Schedules};

/// What one run did about schedules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Ticked {
    /// The ids of the jobs it recorded (a duplicate, recorded by an earlier run, is not here).
    pub submitted: Vec<String>,
    /// Schedules that failed, and why (the others still ran).
    pub errors: Vec<String>,
}

/// Schedules submitted in one request: each has at most two periods due, and a request takes
/// [`crate::api::MAX_JOBS_PER_REQUEST`] jobs.
const SCHEDULES_PER_REQUEST: usize = crate::api::MAX_JOBS_PER_REQUEST / 2;

/// Runs every schedule once at `now`. Without schedules it reads nothing. The due schedules'
/// jobs go in as few requests as fit, and their periods are recorded in one batch, whatever the
/// number of schedules and keys (design "The ledger's life": 100 schedules once made 257
/// queries).
pub async fn run<S: Sql, Q: QueueSender, C: Clock>(
    schedules: &Schedules,
    ledger: &Ledger<S>,
    producer: &Producer<'_, S, Q, C>,
    now: i64,
) -> Ticked {
    let mut out = Ticked::default();
    if schedules.0.is_empty() {
        return out;
    }
    let states = match ledger.schedule_states().await {
        Ok(s) => s,
        Err(e) => {
            out.errors.push(format!("schedules: {e}"));
            return out;
        }
    };
    let due: Vec<(&Schedule, Due)> = schedules
        .0
        .iter()
        .filter_map(|s| {
            let state = states.iter().find(|st| st.name == s.name);
            let paused = state.is_some_and(|st| st.paused_at.is_some());
            due(s, state.and_then(|st| st.last_period), paused, now).map(|d| (s, d))
        })
        .collect();
    let mut seen = Vec::new();
    for part in due.chunks(SCHEDULES_PER_REQUEST) {
        seen.extend(submit(part, producer, &mut out).await);
    }
    if let Err(e) = ledger.schedules_seen(&seen, now).await {
        out.errors.extend(seen.iter().map(|(name, ..)| format!("schedule {name}: {e}")));
    }
    out
}

/// Submits the due periods' jobs of `part` in one request: the schedules to record as seen (a
/// schedule whose job failed is not, so the next run tries again). A refused request is tried
/// again schedule by schedule, so one bad template never holds the others back.
async fn submit<'s, S: Sql, Q: QueueSender, C: Clock>(
    part: &[(&'s Schedule, Due)],
    producer: &Producer<'_, S, Q, C>,
    out: &mut Ticked,
) -> Vec<(&'s str, i64, Option<String>)> {
    let seen = |(s, d): &(&'s Schedule, Due)| (s.name.as_str(), d.seen, d.enqueue.last().map(|p| s.job_id(*p)));
    let jobs = |group: &[(&Schedule, Due)]| -> Vec<serde_json::Value> {
        group.iter().flat_map(|(s, d)| d.enqueue.iter().map(|p| s.job_for(*p))).collect()
    };
    let all = jobs(part);
    if all.is_empty() {
        return part.iter().map(seen).collect();
    }
    match producer.submit(all).await {
        Ok(done) => {
            out.submitted.extend(done.into_iter().filter(|j| !j.duplicate).map(|j| j.id));
            part.iter().map(seen).collect()
        }
        Err(EnqueueError::Refused(_)) if part.len() > 1 => {
            let mut ok = Vec::new();
            for one in part {
                ok.extend(Box::pin(submit(std::slice::from_ref(one), producer, out)).await);
            }
            ok
        }
        Err(e) => {
            out.errors.extend(part.iter().map(|(s, _)| format!("schedule {}: {e}", s.name)));
            Vec::new()
        }
    }
}
