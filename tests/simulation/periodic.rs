//! The periodic-job oracle (design §23), apart from the run that feeds it so it can be shown to
//! fire. The simulation's schedule runs every minute; its cron runs come late in their minute,
//! twice in some minutes and not at all in others, against a ledger with faults that stall a
//! run past later ones. What must hold:
//! - a period's job is submitted at most once;
//! - a job exists only for a period a run saw in progress, or for the period just before one
//!   (its catch-up);
//! - a run that reported no error left its period's job, unless a run for a later period ended
//!   before it did (it may have found that later period recorded: its own is then passed over);
//! - such a run, when an earlier run had succeeded before it started and no run came for the
//!   minute before its own, left that minute's job too (the catch-up, at most one).

use std::collections::{BTreeMap, BTreeSet};

/// The simulation's period: every minute.
pub const PERIOD_MS: i64 = 60_000;

/// One cron run of the schedules.
#[derive(Debug, Clone)]
pub struct ScheduleRun {
    /// The minute it was scheduled for (its period in progress).
    pub minute: i64,
    /// When it started, and when it ended (`None`: still running).
    pub started: i64,
    pub ended: Option<i64>,
    /// It ended and reported no error.
    pub ok: bool,
}

/// Checks the runs (ended or not) against the periods that have a job in the ledger and every id
/// the runs reported submitting (a new row each).
pub fn check(runs: &[ScheduleRun], jobs: &BTreeSet<i64>, submitted: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for id in submitted {
        *counts.entry(id.as_str()).or_default() += 1;
    }
    for (id, n) in counts.into_iter().filter(|(_, n)| *n > 1) {
        found.push(format!("schedule: {id} was submitted {n} times"));
    }
    let seen: BTreeSet<i64> = runs.iter().map(|r| r.minute).collect();
    for &p in jobs {
        if !seen.contains(&p) && !seen.contains(&(p + PERIOD_MS)) {
            found.push(format!("schedule: a job for period {p}, which no run saw in progress or just before"));
        }
    }
    for r in runs.iter().filter(|r| r.ok) {
        let Some(end) = r.ended else { continue };
        let overtaken = runs.iter().any(|o| o.minute > r.minute && o.ended.is_some_and(|e| e < end));
        if overtaken {
            continue;
        }
        if !jobs.contains(&r.minute) {
            found.push(format!("schedule: the run for {} succeeded, but its period has no job", r.minute));
        }
        let missed = r.minute - PERIOD_MS;
        let earlier_ok = runs.iter().any(|e| e.ok && e.minute < missed && e.ended.is_some_and(|x| x < r.started));
        if earlier_ok && !seen.contains(&missed) && !jobs.contains(&missed) {
            found
                .push(format!("schedule: period {missed} was missed and the run for {} did not catch it up", r.minute));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs one after another, each (minute, ok), a second apart.
    fn runs(minutes: &[(i64, bool)]) -> Vec<ScheduleRun> {
        let at = |i: usize| i as i64 * 1_000;
        minutes
            .iter()
            .enumerate()
            .map(|(i, &(m, ok))| ScheduleRun {
                minute: m * PERIOD_MS,
                started: at(2 * i),
                ended: Some(at(2 * i + 1)),
                ok,
            })
            .collect()
    }

    fn jobs(minutes: &[i64]) -> BTreeSet<i64> {
        minutes.iter().map(|m| m * PERIOD_MS).collect()
    }

    #[test]
    fn a_clean_schedule_passes_and_each_broken_promise_is_reported() {
        // Minute 2 has no run; the run for 3 catches it up. Minute 1 ran twice.
        let r = runs(&[(0, true), (1, true), (1, true), (3, true)]);
        assert!(check(&r, &jobs(&[0, 1, 2, 3]), &["a".into(), "b".into()]).is_empty());
        let not_caught_up = check(&r, &jobs(&[0, 1, 3]), &[]);
        assert_eq!(
            not_caught_up,
            vec![format!(
                "schedule: period {} was missed and the run for {} did not catch it up",
                2 * PERIOD_MS,
                3 * PERIOD_MS
            )]
        );
        let unseen = check(&r, &jobs(&[0, 1, 2, 3, 7]), &[]);
        assert!(unseen[0].contains("which no run saw"), "{unseen:?}");
        let lost = check(&r, &jobs(&[0, 2, 3]), &[]);
        assert!(lost[0].contains("succeeded, but its period has no job"), "{lost:?}");
        let twice = check(&r, &jobs(&[0, 1, 2, 3]), &["a".into(), "a".into()]);
        assert_eq!(twice, vec!["schedule: a was submitted 2 times"]);
    }

    #[test]
    fn a_failed_run_promises_nothing_and_a_first_run_catches_nothing_up() {
        // The run for 1 failed: no job for 1 is owed; nor a catch-up of 1 by the run for 2
        // (a run was seen at 1: the period may have been recorded without its job's answer).
        let r = runs(&[(0, true), (1, false), (2, true)]);
        assert!(check(&r, &jobs(&[0, 2]), &[]).is_empty());
        // A first run owes no catch-up of the minute before it.
        assert!(check(&runs(&[(5, true)]), &jobs(&[5]), &[]).is_empty());
    }

    #[test]
    fn a_run_overtaken_by_a_later_one_owes_nothing_but_a_run_in_flight_counts_as_seen() {
        // The run for 0 stalled: the run for 4 started and ended while it ran.
        let stalled = ScheduleRun { minute: 0, started: 0, ended: Some(10_000), ok: true };
        let later = ScheduleRun { minute: 4 * PERIOD_MS, started: 1_000, ended: Some(2_000), ok: true };
        assert!(check(&[stalled.clone(), later.clone()], &jobs(&[4]), &[]).is_empty());
        // Not overtaken (the later run ended after it): its job is owed.
        let late_end = ScheduleRun { ended: Some(20_000), ..later };
        assert_eq!(check(&[stalled, late_end], &jobs(&[4]), &[]).len(), 1);
        // A job a run still in flight submitted (its catch-up) is one a run saw.
        let in_flight = ScheduleRun { minute: 6 * PERIOD_MS, started: 0, ended: None, ok: false };
        assert!(check(&[in_flight], &jobs(&[5, 6]), &[]).is_empty());
    }
}
