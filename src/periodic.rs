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
use crate::enqueue::Producer;
use crate::ledger::{Ledger, Sql};
use crate::producer::QueueSender;
use crate::schedule::{due, Schedules};

/// What one run did about schedules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Ticked {
    /// The ids of the jobs it recorded (a duplicate, recorded by an earlier run, is not here).
    pub submitted: Vec<String>,
    /// Schedules that failed, and why (the others still ran).
    pub errors: Vec<String>,
}

/// Runs every schedule once at `now`. Without schedules it reads nothing.
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
    for s in &schedules.0 {
        let state = states.iter().find(|st| st.name == s.name);
        let last = state.and_then(|st| st.last_period);
        let paused = state.is_some_and(|st| st.paused_at.is_some());
        let Some(due) = due(s, last, paused, now) else { continue };
        let last_job = due.enqueue.last().map(|p| s.job_id(*p));
        if !due.enqueue.is_empty() {
            match producer.submit(due.enqueue.iter().map(|p| s.job_for(*p)).collect()).await {
                Ok(jobs) => out.submitted.extend(jobs.into_iter().filter(|j| !j.duplicate).map(|j| j.id)),
                Err(e) => {
                    out.errors.push(format!("schedule {}: {e}", s.name));
                    continue;
                }
            }
        }
        if let Err(e) = ledger.schedule_seen(&s.name, due.seen, last_job.as_deref(), now).await {
            out.errors.push(format!("schedule {}: {e}", s.name));
        }
    }
    out
}
