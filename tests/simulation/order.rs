//! The per-key order oracle, apart from the run that feeds it so its exemptions can be shown to
//! fire: first successes, in the order they started, must follow each key's order (strict mode:
//! the job's `seq` as the ledger finally holds it, so a redriven job is held to the place the
//! redrive gave it; lock mode: the order the producer sent them in).
//!
//! Two exemptions. Lock mode's across an ordering key's pause (design §20.11): the jobs the pause
//! held run in the order first sent, but a job whose message was still in the queue at the resume
//! may run before them. Such a job may overtake; it is still checked against everything else, and
//! nothing may overtake it. And a job an operator redrove after a later job of its key had
//! succeeded ([`redriven_past`]): the redrive asked for a run after the key had moved past it, so
//! that run is out of the key's order by the operator's wish, and is not checked.

use std::collections::BTreeMap;

/// One job's first success.
#[derive(Debug, Clone)]
pub struct Success<'a> {
    pub job: &'a str,
    pub key: &'a str,
    /// Its place in its key's order.
    pub order: i64,
    /// Lock mode, the paused key: its message was in the queue when the key was resumed.
    pub queued_at_resume: bool,
    /// A run an operator's redrive asked for after its key had moved past the job.
    pub redriven_past: bool,
}

/// Whether a success of a job (its place `order`, its run started at `start`) redriven at
/// `redriven_at` ran because of a redrive asked after its key had moved past it: a job later in
/// the key's order had succeeded (`others`: each other success of the key, its place and start)
/// before the redrive was asked. In strict mode the ledger may still hold the job in its place (a
/// cancelled job redriven while the later job's success went unrecorded, its invocation dead),
/// but no order can be kept with a success that came before the redrive was even asked.
pub fn redriven_past(
    order: i64,
    start: i64,
    redriven_at: Option<i64>,
    others: impl IntoIterator<Item = (i64, i64)>,
) -> bool {
    let Some(at) = redriven_at.filter(|&at| start >= at) else { return false };
    others.into_iter().any(|(o, s)| o > order && s < at)
}

/// What the oracle found: broken promises, inversions the setup does not promise against, and
/// the overtakes the pause exemption allows (counted apart, so a setup that promises order shows
/// them as what they are, not as order violations).
#[derive(Debug, Default, PartialEq)]
pub struct Found {
    pub violations: Vec<String>,
    pub reported: Vec<String>,
    pub excused: Vec<String>,
}

impl Found {
    /// Inversions of the key's order: the promised ones and the reported ones, not the excused.
    pub fn inversions(&self) -> usize {
        self.violations.len() + self.reported.len()
    }
}

/// Checks `successes` (in start order) against each key's order; an inversion is a violation when
/// the setup promises order (`promised`), else only reported.
pub fn key_order<'a>(successes: impl IntoIterator<Item = Success<'a>>, promised: bool) -> Found {
    let mut found = Found::default();
    // Per key, the last success seen: of any job, and of jobs not queued at the resume.
    let mut last_any: BTreeMap<&str, (i64, &str)> = BTreeMap::new();
    let mut last_held: BTreeMap<&str, (i64, &str)> = BTreeMap::new();
    for s in successes.into_iter().filter(|s| !s.redriven_past) {
        // A job queued at the resume may be overtaken by nothing; any other only by such a job.
        let against = if s.queued_at_resume { last_any.get(s.key) } else { last_held.get(s.key) };
        if let Some(&(prev, prev_job)) = against.filter(|(prev, _)| s.order < *prev) {
            let v = format!("key {}: {} (order {}) succeeded after {prev_job} (order {prev})", s.key, s.job, s.order);
            if promised {
                found.violations.push(v);
            } else {
                found.reported.push(v);
            }
        } else if let Some(&(prev, prev_job)) = last_any.get(s.key).filter(|(prev, _)| s.order < *prev) {
            found.excused.push(format!(
                "key {}: {} (order {}) succeeded after {prev_job} (order {prev}), whose message was in the queue at the resume",
                s.key, s.job, s.order
            ));
        }
        last_any.insert(s.key, (s.order, s.job));
        if !s.queued_at_resume {
            last_held.insert(s.key, (s.order, s.job));
        }
    }
    found
}

#[test]
fn an_inversion_is_a_violation_where_order_is_promised_and_reported_elsewhere() {
    let s = |job, order| Success { job, key: "k", order, queued_at_resume: false, redriven_past: false };
    let run = || vec![s("a", 1), s("c", 3), s("b", 2)];
    let promised = key_order(run(), true);
    assert_eq!(promised.violations, vec!["key k: b (order 2) succeeded after c (order 3)"]);
    assert!(promised.reported.is_empty());
    let not = key_order(run(), false);
    assert_eq!((not.violations.len(), not.reported.len()), (0, 1));
    assert_eq!(key_order(vec![s("a", 1), s("b", 2), s("c", 3)], true), Found::default());
}

#[test]
fn only_a_job_queued_at_the_resume_may_overtake_the_held_ones() {
    let held = |job, order| Success { job, key: "k1", order, queued_at_resume: false, redriven_past: false };
    let queued = |job, order| Success { job, key: "k1", order, queued_at_resume: true, redriven_past: false };
    // The queued job runs first, then the held ones in order: promised.
    let allowed = key_order(vec![queued("q", 5), held("h1", 1), held("h2", 2)], true);
    assert!(allowed.violations.is_empty(), "{allowed:?}");
    assert_eq!((allowed.reported.len(), allowed.excused.len()), (0, 1), "the overtaking is counted apart");
    assert_eq!(allowed.inversions(), 0, "an allowed overtake is no inversion");
    // The held ones out of their order, a queued job between them: broken.
    let broken = key_order(vec![held("h2", 2), queued("q", 5), held("h1", 1)], true);
    assert_eq!(broken.violations, vec!["key k1: h1 (order 1) succeeded after h2 (order 2)"]);
    // Nothing overtakes a queued job: a later job that runs before it is a violation.
    let overtaken = key_order(vec![held("later", 9), queued("q", 5)], true);
    assert_eq!(overtaken.violations, vec!["key k1: q (order 5) succeeded after later (order 9)"]);
}

#[test]
fn a_job_redriven_after_a_later_job_of_its_key_succeeded_is_not_held_to_its_place() {
    // a (order 1) was cancelled; b (order 2) succeeded at 10; a was redriven at 20 and ran at 30.
    let b_succeeded = [(2, 10)];
    assert!(redriven_past(1, 30, Some(20), b_succeeded));
    let s = |job, order, redriven_past| Success { job, key: "k", order, queued_at_resume: false, redriven_past };
    assert_eq!(key_order(vec![s("b", 2, false), s("a", 1, true)], true), Found::default());
    // Redriven before b succeeded: the redrive put it back in its place, and it is held to it.
    assert!(!redriven_past(1, 30, Some(5), b_succeeded));
    assert!(!redriven_past(1, 30, None, b_succeeded), "never redriven");
    assert!(!redriven_past(1, 15, Some(20), b_succeeded), "a run before the redrive");
    assert!(!redriven_past(3, 30, Some(20), b_succeeded), "only a later job's success moves the key past it");
    assert_eq!(key_order(vec![s("b", 2, false), s("a", 1, false)], true).violations.len(), 1);
}
