//! Cancels, supersession and debounce under the simulation (design §22): what the operator's
//! cancels and the producer's revisions of its jobs were answered, and the invariants over them as
//! pure checks (each with a test that shows it reporting):
//!
//! - a job whose cancel was acknowledged is never claimed afterwards, and one a strict chain had
//!   claimed ahead never starts later than a check period (and round trips) after it;
//! - a run asked to stop ends within [`CANCEL_REACH_MS`] of the later of the cancel and its
//!   handler's start (ledger round trips aside), and one the cancel stopped gives up its lease by
//!   then; unless its invocation died, stalled or lost a ledger call (its lease then lapses, as
//!   any such run's does). A handler that ended by itself before the cancel could reach it is
//!   recorded with its batch, as any run;
//! - a run never uses a payload older than a replacement acknowledged before its claim, nor one
//!   acknowledged well before its start (a job submitted to be replaced is never claimed ahead);
//! - a debounced payload never runs within its quiet period after it was submitted (until the
//!   debounce's cap from the job's first submission), and a debounced job that ends DONE ran with
//!   the last payload submitted to it.

use std::collections::{BTreeMap, BTreeSet};

use orderly::consumer::{CANCEL_CHECK_MS, CANCEL_REACH_MS};
use orderly::ledger::{JobRow, Status};

/// What ledger round trips may add to a cancel's bound in the simulation (each call's latency,
/// the transition's record).
pub const ROUND_TRIPS_MS: i64 = 1_000;
/// A debounce's cap in quiet periods, as the simulation's submissions leave it (the default).
pub const CAP_PERIODS: i64 = 10;

/// One payload a job took: its own first (`v` 0) or a replacement's.
#[derive(Debug, Clone, PartialEq)]
pub struct Revision {
    /// The payload's version (its body's `v`).
    pub v: i64,
    /// When its submission was first asked (the change lands after it).
    pub asked_at: i64,
    /// When its submission was answered.
    pub acked_at: i64,
    /// Its debounce's quiet period, ms (0: not debounced).
    pub quiet_ms: i64,
}

/// What the simulation's cancels and revisions were answered.
#[derive(Debug, Default)]
pub struct Cancels {
    /// job -> when a cancel of it was acknowledged (200: DEAD, 202: asked to stop).
    pub acked: BTreeMap<String, i64>,
    /// job -> when it was asked to stop while it ran (202).
    pub requested: BTreeMap<String, i64>,
    /// job -> the payloads it took, in the order they were answered.
    pub revisions: BTreeMap<String, Vec<Revision>>,
    /// Jobs a revision recorded anew (its holder was running): they must finish as planned ones.
    pub extra: BTreeSet<String>,
    /// Every job a cancel was asked for (it may have landed, whatever its answer), redriven or
    /// not: a run that succeeded before its cancel landed ends DEAD "cancelled", and once
    /// redriven it may succeed again.
    pub ever: BTreeSet<String>,
    /// job -> when an operator last asked for its redrive.
    pub redriven_at: BTreeMap<String, i64>,
}

impl Cancels {
    /// An operator asked at `at` for `job`'s redrive: it may run again.
    pub fn redriven(&mut self, job: &str, at: i64) {
        self.acked.remove(job);
        self.requested.remove(job);
        self.redriven_at.insert(job.to_string(), at);
    }

    /// A cancel of `job` asked at `asked` was answered at `now` (`202`: the job was running). A
    /// redrive asked between the two raced it: the two requests may have applied in either order,
    /// so the job may run again, and the cancel binds nothing (a redrive asked before the cancel
    /// does not race it: the cancel holds).
    pub fn acknowledged(&mut self, job: &str, asked: i64, now: i64, running: bool) {
        self.ever.insert(job.to_string());
        if self.redriven_at.get(job).is_some_and(|&r| r >= asked) {
            return;
        }
        self.acked.insert(job.to_string(), now);
        if running {
            self.requested.insert(job.to_string(), now);
        }
    }

    /// At a handler's start (`started`) for `job`, claimed at `claimed_at`, running payload `v`:
    /// what it breaks, if anything.
    pub fn start_violation(&self, job: &str, claimed_at: i64, started: i64, v: i64) -> Option<String> {
        if let Some(&at) = self.acked.get(job).filter(|&&at| claimed_at > at) {
            return Some(format!("{job} was claimed {} ms after its cancel was acknowledged", claimed_at - at));
        }
        // Claimed ahead in a strict chain before the cancel: it is checked before it starts once it
        // has waited a check period (design §22.1).
        if let Some(&at) = self.acked.get(job).filter(|&&at| started > at + CANCEL_CHECK_MS + ROUND_TRIPS_MS) {
            return Some(format!("{job} started {} ms after its cancel was acknowledged", started - at));
        }
        // A job revised in place was submitted to be replaced, so it is claimed just before it
        // starts, never ahead (design §22.3): a replacement answered well before its start
        // reaches it, whenever its claim was.
        let revisions = self.revisions.get(job)?;
        let reached = claimed_at.max(started - ROUND_TRIPS_MS);
        let newest = revisions.iter().filter(|r| r.acked_at < reached).map(|r| r.v).max();
        if let Some(n) = newest.filter(|&n| v < n) {
            return Some(format!(
                "{job} ran payload v{v}, though v{n} replaced it {} ms before its start",
                started - n_at(revisions, n)
            ));
        }
        let mine = revisions.iter().find(|r| r.v == v && r.quiet_ms > 0)?;
        // Past its cap (from the job's first submission) a debounced job runs at once.
        let cap = revisions.first().map_or(i64::MAX, |first| first.asked_at + CAP_PERIODS * first.quiet_ms);
        (started < (mine.asked_at + mine.quiet_ms).min(cap))
            .then(|| format!("{job} ran debounced payload v{v} {} ms into its quiet period", started - mine.asked_at))
    }

    /// After a step at `now`: whether `job`, asked to stop, still runs, or holds its lease after
    /// the cancel stopped it, past the bound. `row`: its row; `run`: its current run's handler
    /// start and end (none yet: the bound starts with it); `excused`: its invocation died, stalled
    /// or lost a ledger call.
    pub fn lease_violation(
        &self,
        job: &str,
        row: &JobRow,
        run: Option<(i64, Option<i64>)>,
        now: i64,
        excused: bool,
    ) -> Option<String> {
        let asked = *self.requested.get(job)?;
        let (started, ended) = run?;
        let bound = asked.max(started) + CANCEL_REACH_MS + ROUND_TRIPS_MS;
        if excused || now <= bound || row.status != Status::Running {
            return None;
        }
        match ended {
            None => {
                Some(format!("{job}: its run, asked to stop at +{asked}, still runs {} ms past the bound", now - bound))
            }
            // Ended once a check could have seen the cancel: the cancel stopped it, and its record
            // gives the lease up at once.
            Some(end)
                if end >= asked + CANCEL_CHECK_MS + ROUND_TRIPS_MS && row.lease_until.is_some_and(|u| u > now) =>
            {
                Some(format!(
                    "{job}: stopped by its cancel at +{end}, it still holds its lease {} ms past the bound",
                    now - bound
                ))
            }
            Some(_) => None,
        }
    }

    /// At the end: a debounced job that ended DONE must have run with its last payload
    /// (`ran`: the payload versions of its successful runs, in order).
    pub fn last_payload_violation(&self, job: &str, row: &JobRow, ran: &[i64]) -> Option<String> {
        let revisions = self.revisions.get(job).filter(|r| r.iter().any(|r| r.quiet_ms > 0))?;
        let last = revisions.iter().map(|r| r.v).max()?;
        (row.status == Status::Done && ran.last().is_some_and(|&v| v < last))
            .then(|| format!("{job} ended DONE with payload v{:?}, its last submitted was v{last}", ran.last()))
    }
}

/// When revision `v` of a job was answered.
fn n_at(revisions: &[Revision], v: i64) -> i64 {
    revisions.iter().find(|r| r.v == v).map_or(0, |r| r.acked_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(status: Status, lease_until: Option<i64>) -> JobRow {
        let mut r = orderly::ledger::Row::new();
        for (k, v) in [("id", "j".into()), ("status", status.as_str().into())] {
            r.insert(k.into(), v);
        }
        for k in ["attempts", "max_attempts", "deferrals", "next_run_at", "created_at", "updated_at"] {
            r.insert(k.into(), 0.into());
        }
        if let Some(u) = lease_until {
            r.insert("lease_until".into(), u.into());
        }
        JobRow::from_row(&r).expect("a row")
    }

    #[test]
    fn a_claim_after_the_cancel_and_an_older_payload_than_a_replacement_are_reported() {
        let mut c = Cancels::default();
        c.acked.insert("j".into(), 100);
        assert!(c.start_violation("j", 100, 150, 0).is_none(), "claimed by the time of the answer");
        assert!(c.start_violation("j", 101, 150, 0).is_some_and(|v| v.contains("after its cancel")));
        c.redriven("j", 120);
        assert!(c.start_violation("j", 101, 150, 0).is_none(), "redriven, it runs again");
        // A cancel whose answer came after a redrive asked since the cancel: the two raced, and
        // the job may run again. One asked before a redrive that came earlier still binds.
        c.acknowledged("j", 110, 200, false);
        assert!(c.start_violation("j", 201, 250, 0).is_none(), "the redrive raced the cancel");
        c.acknowledged("j", 130, 200, false);
        assert!(c.start_violation("j", 201, 250, 0).is_some_and(|v| v.contains("after its cancel")));
        let r = |v, asked_at, acked_at, quiet_ms| Revision { v, asked_at, acked_at, quiet_ms };
        c.revisions.insert("j".into(), vec![r(0, 0, 10, 0), r(1, 20, 30, 0)]);
        assert!(c.start_violation("j", 31, 40, 0).is_some_and(|v| v.contains("v1 replaced it")));
        assert!(c.start_violation("j", 30, 40, 0).is_none(), "claimed as the replacement was answered");
        assert!(c.start_violation("j", 31, 40, 1).is_none());
    }

    #[test]
    fn a_job_claimed_ahead_that_starts_long_after_its_cancel_or_a_replacement_is_reported() {
        let mut c = Cancels::default();
        c.acked.insert("j".into(), 100);
        let late = 100 + CANCEL_CHECK_MS + ROUND_TRIPS_MS;
        assert!(c.start_violation("j", 50, late, 0).is_none(), "within a check period of the cancel");
        assert!(c.start_violation("j", 50, late + 1, 0).is_some_and(|v| v.contains("started")));
        let mut c = Cancels::default();
        c.revisions.insert("j".into(), vec![Revision { v: 1, asked_at: 90, acked_at: 100, quiet_ms: 0 }]);
        assert!(c.start_violation("j", 50, 100 + ROUND_TRIPS_MS, 0).is_none(), "answered as its claim started it");
        assert!(c.start_violation("j", 50, 101 + ROUND_TRIPS_MS, 0).is_some_and(|v| v.contains("before its start")));
    }

    #[test]
    fn a_debounced_payload_run_inside_its_quiet_period_is_reported() {
        let mut c = Cancels::default();
        let r = |v, asked_at| Revision { v, asked_at, acked_at: asked_at + 5, quiet_ms: 2_000 };
        c.revisions.insert("j".into(), vec![r(0, 0), r(1, 500)]);
        assert!(c.start_violation("j", 2_400, 2_499, 1).is_some_and(|v| v.contains("quiet period")));
        assert!(c.start_violation("j", 2_500, 2_500, 1).is_none());
        // Past the cap (ten quiet periods from the first submission) it runs at once.
        c.revisions.insert("j".into(), vec![r(0, 0), r(1, 19_000)]);
        assert!(c.start_violation("j", 19_999, 19_999, 1).is_some());
        assert!(c.start_violation("j", 20_000, 20_000, 1).is_none());
        let done = row(Status::Done, None);
        assert!(c.last_payload_violation("j", &done, &[0]).is_some_and(|v| v.contains("last submitted was v1")));
        assert!(c.last_payload_violation("j", &done, &[0, 1]).is_none());
    }

    #[test]
    fn a_lease_held_past_the_cancels_bound_is_reported_unless_its_invocation_faulted() {
        let mut c = Cancels::default();
        c.requested.insert("j".into(), 1_000);
        let bound = 1_000 + CANCEL_REACH_MS + ROUND_TRIPS_MS;
        let held = row(Status::Running, Some(bound + 100_000));
        let running = Some((500, None));
        assert!(c.lease_violation("j", &held, running, bound, false).is_none(), "at the bound");
        assert!(c.lease_violation("j", &held, running, bound + 1, false).is_some_and(|v| v.contains("still runs")));
        assert!(c.lease_violation("j", &held, running, bound + 1, true).is_none(), "its invocation faulted");
        assert!(c.lease_violation("j", &held, None, bound + 1, false).is_none(), "its handler has not started");
        assert!(c.lease_violation("j", &held, Some((2_000, None)), bound + 1, false).is_none(), "from its start");
        let stopped = Some((500, Some(1_000 + CANCEL_CHECK_MS + ROUND_TRIPS_MS)));
        assert!(c
            .lease_violation("j", &held, stopped, bound + 1, false)
            .is_some_and(|v| v.contains("holds its lease")));
        let ended_by_itself = Some((500, Some(1_500)));
        assert!(c.lease_violation("j", &held, ended_by_itself, bound + 1, false).is_none(), "recorded with its batch");
        let given_up = row(Status::Dead, None);
        assert!(c.lease_violation("j", &given_up, running, bound + 1, false).is_none());
    }
}
