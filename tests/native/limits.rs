//! Flow control's SQL (design §20) on real SQLite: permits, the line of parked jobs, the throttle,
//! the breaker, pauses and run-time policies, each decided by the ledger's own statements.

use crate::support::Sqlite;
use futures::executor::block_on;
use orderly::flow::{Breaker, Policy, Refusal, RunVerdict, Throttle};
use orderly::ledger::limit::{Answer, Ask, Change, Permit, Release, Woken};
use orderly::ledger::{Ledger, Route};

const T0: i64 = 1_700_000_000_000;
const LEASE_MS: i64 = 120_000;

struct Keyed<'a> {
    ledger: Ledger<&'a Sqlite>,
    policy: Policy,
    /// Each job's last ask's permit end, for its release.
    untils: std::cell::RefCell<std::collections::HashMap<String, i64>>,
}

impl Keyed<'_> {
    fn ask(&self, job: &str, now: i64) -> Permit {
        self.paced(job, now, 0).permit
    }
    /// An ask from an invocation that waits for a start up to `pace_ms` ahead.
    fn paced(&self, job: &str, now: i64, pace_ms: i64) -> Answer {
        let until = now + LEASE_MS;
        self.untils.borrow_mut().insert(job.to_string(), until);
        let ask = Ask { limit_key: "host", job_id: job, route: Route::key(job), until, policy: self.policy, pace_ms };
        block_on(self.ledger.ask(&ask, now)).unwrap()
    }
    fn release(&self, job: &str, now: i64, verdict: RunVerdict) -> Vec<String> {
        let until = self.untils.borrow().get(job).copied().unwrap_or_default();
        let r = Release { limit_key: "host", job_id: job, until, verdict, policy: self.policy };
        block_on(self.ledger.release(&r, now)).unwrap().into_iter().map(|w: Woken| w.job_id).collect()
    }
    fn done(&self, job: &str, now: i64) -> Vec<String> {
        self.release(job, now, RunVerdict::Succeeded)
    }
    fn failed(&self, job: &str, now: i64, retry_after_ms: i64) -> Vec<String> {
        self.release(job, now, RunVerdict::Failed { retry_after_ms })
    }
}

fn keyed(db: &Sqlite, policy: Policy) -> Keyed<'_> {
    Keyed { ledger: Ledger::new(db), policy, untils: Default::default() }
}

#[test]
fn a_concurrency_limit_parks_the_excess_and_a_freed_slot_wakes_the_oldest() {
    let db = Sqlite::memory();
    let k = keyed(&db, Policy { concurrency: Some(2), ..Policy::default() });
    assert_eq!(k.ask("a", T0), Permit::Granted);
    assert_eq!(k.ask("b", T0), Permit::Granted);
    assert_eq!(k.ask("c", T0 + 1), Permit::Refused(Refusal::Full));
    assert_eq!(k.ask("d", T0 + 2), Permit::Refused(Refusal::Full));
    // c asks again (its message came back): it keeps its place, ahead of d.
    assert_eq!(k.ask("c", T0 + 3), Permit::Refused(Refusal::Full));
    assert_eq!(k.done("a", T0 + 10), vec!["c"], "a's slot wakes the oldest in line");
    assert_eq!(k.ask("c", T0 + 11), Permit::Granted);
    assert_eq!(k.done("b", T0 + 12), vec!["d"]);
    assert_eq!(k.done("c", T0 + 13), Vec::<String>::new(), "nobody else waits");
    assert_eq!(k.ask("d", T0 + 14), Permit::Granted);
}

#[test]
fn a_freed_slot_is_handed_to_the_job_it_woke_not_to_the_next_asker() {
    let db = Sqlite::memory();
    let k = keyed(&db, Policy { concurrency: Some(1), ..Policy::default() });
    assert_eq!(k.ask("a", T0), Permit::Granted);
    assert_eq!(k.ask("b", T0 + 1), Permit::Refused(Refusal::Full));
    assert_eq!(k.done("a", T0 + 10), vec!["b"]);
    // a's chain asks for its next job before b's wake-up arrives: b has the slot, so it waits in
    // the line, behind b, instead of taking the slot and sending b to the back.
    assert_eq!(k.ask("a2", T0 + 11), Permit::Refused(Refusal::Full));
    assert_eq!(k.ask("b", T0 + 20), Permit::Granted);
    assert_eq!(k.done("b", T0 + 30), vec!["a2"], "the line stays in order");
    let state = block_on(k.ledger.limit_state("host", T0 + 31)).unwrap().unwrap();
    assert_eq!((state.running, state.waiting), (1, 0), "a2's slot is held for it");
}

#[test]
fn a_run_whose_permit_had_lapsed_frees_no_slot_and_hands_none() {
    let db = Sqlite::memory();
    let k = keyed(&db, Policy { concurrency: Some(1), ..Policy::default() });
    assert_eq!(k.ask("slow", T0), Permit::Granted);
    // slow's permit lapses with its lease; b takes the slot, c waits behind it.
    assert_eq!(k.ask("b", T0 + LEASE_MS), Permit::Granted);
    assert_eq!(k.ask("c", T0 + LEASE_MS + 1), Permit::Refused(Refusal::Full));
    // slow's run ends late: its slot was b's already, so c is handed nothing and stays in line.
    assert_eq!(k.done("slow", T0 + LEASE_MS + 2), Vec::<String>::new());
    assert_eq!(k.ask("c", T0 + LEASE_MS + 3), Permit::Refused(Refusal::Full), "one running, as the limit says");
    assert_eq!(k.done("b", T0 + LEASE_MS + 4), vec!["c"]);
    assert_eq!(k.ask("c", T0 + LEASE_MS + 5), Permit::Granted);
}

#[test]
fn a_run_that_ends_after_its_job_was_claimed_again_leaves_the_new_runs_permit() {
    let db = Sqlite::memory();
    let k = keyed(&db, Policy { concurrency: Some(1), ..Policy::default() });
    assert_eq!(k.ask("a", T0), Permit::Granted);
    // a's first run stalls past its lease; a is claimed again and its second run takes the slot.
    assert_eq!(k.ask("a", T0 + LEASE_MS), Permit::Granted);
    // The first run ends now: its permit (until T0 + LEASE_MS) is gone, the second run's is not.
    let stale = Release {
        limit_key: "host",
        job_id: "a",
        until: T0 + LEASE_MS,
        verdict: RunVerdict::Succeeded,
        policy: k.policy,
    };
    block_on(k.ledger.release(&stale, T0 + LEASE_MS + 1)).unwrap();
    assert_eq!(k.ask("b", T0 + LEASE_MS + 2), Permit::Refused(Refusal::Full), "a's second run still holds the slot");
    assert_eq!(k.done("a", T0 + LEASE_MS + 3), vec!["b"]);
}

#[test]
fn a_second_run_of_a_job_never_takes_over_a_permit_its_first_run_still_holds() {
    let db = Sqlite::memory();
    let k = keyed(&db, Policy { concurrency: Some(2), ..Policy::default() });
    assert_eq!(k.ask("a", T0), Permit::Granted);
    // Another run of a asks while the first one's permit is live (a stalled invocation's run of a
    // job claimed again): refused, so the first run's permit stays its own.
    assert_ne!(k.ask("a", T0 + 10), Permit::Granted);
    assert_eq!(k.ask("b", T0 + 11), Permit::Granted);
    assert_eq!(k.ask("c", T0 + 12), Permit::Refused(Refusal::Full), "a's first run and b hold both slots");
}

#[test]
fn a_job_whose_earlier_permit_lapsed_is_handed_a_slot_it_may_take() {
    let db = Sqlite::memory();
    let k = keyed(&db, Policy { concurrency: Some(1), ..Policy::default() });
    // a's first run took a permit and never freed it (its invocation died): it lapses.
    assert_eq!(k.ask("a", T0), Permit::Granted);
    let later = T0 + LEASE_MS + 1;
    assert_eq!(k.ask("b", later), Permit::Granted, "a's permit has lapsed");
    // a's message comes back while b runs: a parks, and b's end hands it the slot. The hand-off
    // takes the place of a's lapsed permit, and is a hand-off still: a's ask is granted, not
    // refused by its own slot (which held the key until the hand-off lapsed).
    assert_eq!(k.ask("a", later + 1), Permit::Refused(Refusal::Full));
    assert_eq!(k.done("b", later + 10), vec!["a"]);
    assert_eq!(k.ask("a", later + 20), Permit::Granted);
}

#[test]
fn a_slot_handed_to_a_woken_job_that_never_comes_is_free_again_after_the_hold() {
    let db = Sqlite::memory();
    let k = keyed(&db, Policy { concurrency: Some(1), ..Policy::default() });
    let hold_ms = i64::from(orderly::flow::WOKEN_HOLD_SECONDS) * 1000;
    assert_eq!(k.ask("a", T0), Permit::Granted);
    assert_eq!(k.ask("lost", T0 + 1), Permit::Refused(Refusal::Full));
    assert_eq!(k.done("a", T0 + 10), vec!["lost"]);
    assert_eq!(k.ask("c", T0 + 10 + hold_ms - 1), Permit::Refused(Refusal::Full));
    assert_eq!(k.ask("c", T0 + 10 + hold_ms), Permit::Granted, "the hand-off lapsed");
}

#[test]
fn a_permit_whose_job_never_ended_lapses_with_its_lease() {
    let db = Sqlite::memory();
    let k = keyed(&db, Policy { concurrency: Some(1), ..Policy::default() });
    assert_eq!(k.ask("crashed", T0), Permit::Granted);
    assert_eq!(k.ask("b", T0 + 1), Permit::Refused(Refusal::Full));
    assert_eq!(k.ask("b", T0 + LEASE_MS), Permit::Granted, "the slot is free once the lease has ended");
}

#[test]
fn a_throttle_spaces_starts_and_books_each_refused_job_its_own_turn() {
    let db = Sqlite::memory();
    let k = keyed(&db, Policy { throttle: Some(Throttle { rate: 2, per_seconds: 1, burst: 1 }), ..Policy::default() });
    assert_eq!(k.ask("a", T0), Permit::Granted);
    // Refused together, told to come back one interval apart, not all at the next start.
    assert_eq!(k.ask("b", T0 + 100), Permit::Refused(Refusal::Throttled { at: T0 + 500 }));
    assert_eq!(k.ask("c", T0 + 100), Permit::Refused(Refusal::Throttled { at: T0 + 1000 }));
    assert_eq!(k.ask("b", T0 + 500), Permit::Granted);
    assert_eq!(k.ask("c", T0 + 999), Permit::Refused(Refusal::Throttled { at: T0 + 1500 }), "early: booked again");
    assert_eq!(k.ask("c", T0 + 1000), Permit::Granted, "a booking is a hint: the throttle decides");
    // Idle for a while: no credit piles up beyond the burst, and bookings start from now.
    assert_eq!(k.ask("d", T0 + 10_000), Permit::Granted);
    assert_eq!(k.ask("e", T0 + 10_000), Permit::Refused(Refusal::Throttled { at: T0 + 10_500 }));
}

#[test]
fn a_start_due_within_the_pace_is_granted_ahead_and_the_rest_booked() {
    let db = Sqlite::memory();
    let k = keyed(&db, Policy { throttle: Some(Throttle { rate: 10, per_seconds: 1, burst: 1 }), ..Policy::default() });
    let answers: Vec<Answer> = (0..13).map(|i| k.paced(&format!("j{i}"), T0, 1_000)).collect();
    // Starts 100 ms apart up to the pace: each granted, its start named, for its invocation to wait.
    for (i, a) in answers.iter().take(11).enumerate() {
        assert_eq!((a.permit, a.start_at), (Permit::Granted, T0 + 100 * i as i64), "j{i}");
    }
    assert_eq!(answers[11].permit, Permit::Refused(Refusal::Throttled { at: T0 + 1_100 }));
    assert_eq!(answers[12].permit, Permit::Refused(Refusal::Throttled { at: T0 + 1_200 }));
    // Without a pace, only a start due now is granted.
    assert_eq!(k.paced("late", T0 + 1_050, 0).permit, Permit::Refused(Refusal::Throttled { at: T0 + 1_300 }));
}

#[test]
fn a_burst_runs_ahead_of_the_rate_then_the_rate_holds() {
    let db = Sqlite::memory();
    let k = keyed(&db, Policy { throttle: Some(Throttle { rate: 10, per_seconds: 1, burst: 3 }), ..Policy::default() });
    let granted = |at: i64| (0..20).filter(|i| k.ask(&format!("j{at}-{i}"), at) == Permit::Granted).count();
    assert_eq!(granted(T0), 3, "a burst of three at once");
    assert_eq!(granted(T0 + 100), 1, "then one per 100 ms");
    assert_eq!(granted(T0 + 150), 0);
}

#[test]
fn a_paused_key_starts_nothing_and_its_resume_wakes_the_line() {
    let db = Sqlite::memory();
    let k = keyed(&db, Policy::default());
    let pause = |paused, at| {
        let change = Change { paused: Some(paused), policy: None };
        let woken = block_on(k.ledger.set_limit("host", &change, &k.policy, at)).unwrap();
        woken.into_iter().map(|w| w.job_id).collect::<Vec<_>>()
    };
    assert!(pause(true, T0).is_empty());
    assert_eq!(k.ask("a", T0 + 1), Permit::Refused(Refusal::Paused));
    assert_eq!(k.ask("b", T0 + 2), Permit::Refused(Refusal::Paused));
    assert!(
        block_on(k.ledger.wake("host", 10, &k.policy, T0 + 2)).unwrap().is_empty(),
        "nothing is woken while paused"
    );
    assert_eq!(pause(false, T0 + 2), vec!["a", "b"], "the resume wakes the line, oldest first, in its own batch");
    let state = block_on(k.ledger.limit_state("host", T0 + 3)).unwrap().unwrap();
    assert_eq!((state.paused, state.waiting), (false, 0));
    assert_eq!(k.ask("a", T0 + 3), Permit::Granted);
}

#[test]
fn a_resume_hands_a_slot_to_each_job_in_line_counting_none_for_a_job_woken_then_paused() {
    // x was handed a's slot, then the key was paused before x arrived: x parked again, its handed
    // slot kept. Counted as taken, the resume handed x that slot and y nothing, though b's had
    // freed too (the simulation's line check found it).
    let db = Sqlite::memory();
    let k = keyed(&db, Policy { concurrency: Some(2), ..Policy::default() });
    assert_eq!(k.ask("a", T0), Permit::Granted);
    assert_eq!(k.ask("b", T0), Permit::Granted);
    assert_eq!(k.ask("x", T0 + 1), Permit::Refused(Refusal::Full));
    assert_eq!(k.ask("y", T0 + 2), Permit::Refused(Refusal::Full));
    assert_eq!(k.done("a", T0 + 10), vec!["x"]);
    let change = |paused| Change { paused: Some(paused), policy: None };
    block_on(k.ledger.set_limit("host", &change(true), &k.policy, T0 + 11)).unwrap();
    assert_eq!(k.ask("x", T0 + 12), Permit::Refused(Refusal::Paused));
    assert!(k.done("b", T0 + 13).is_empty(), "nothing is handed while paused");
    let woken = block_on(k.ledger.set_limit("host", &change(false), &k.policy, T0 + 14)).unwrap();
    assert_eq!(woken.into_iter().map(|w| w.job_id).collect::<Vec<_>>(), vec!["x", "y"]);
}

#[test]
fn a_policy_set_at_run_time_wins_over_the_configured_one_until_given_back() {
    let db = Sqlite::memory();
    let k = keyed(&db, Policy { concurrency: Some(5), ..Policy::default() });
    let set =
        |policy| block_on(k.ledger.set_limit("host", &Change { paused: None, policy: Some(policy) }, &k.policy, T0));
    set(Some(Policy { concurrency: Some(1), ..Policy::default() })).unwrap();
    assert_eq!(k.ask("a", T0), Permit::Granted);
    assert_eq!(k.ask("b", T0), Permit::Refused(Refusal::Full));
    let shown = block_on(k.ledger.limit_state("host", T0)).unwrap().unwrap();
    assert_eq!(shown.overridden.and_then(|p| p.concurrency), Some(1));
    assert_eq!((shown.running, shown.waiting), (1, 1));
    set(None).unwrap();
    assert_eq!(k.ask("b", T0 + 1), Permit::Granted, "the configured five again");
}

#[test]
fn a_breaker_opens_after_consecutive_failures_then_lets_one_probe_through() {
    let db = Sqlite::memory();
    let policy = Policy { breaker: Some(Breaker { trip_after: 2, cooldown_seconds: 10 }), ..Policy::default() };
    let k = keyed(&db, policy);
    for (i, job) in ["a", "b"].iter().enumerate() {
        assert_eq!(k.ask(job, T0), Permit::Granted);
        k.failed(job, T0 + i as i64, 0);
    }
    // The second failure opened it, for 10 s.
    assert_eq!(k.ask("c", T0 + 2), Permit::Refused(Refusal::Open { until: T0 + 1 + 10_000 }));
    // Its cool-down over, one probe runs; the others wait in line for it.
    assert_eq!(k.ask("c", T0 + 10_001), Permit::Granted);
    assert_eq!(k.ask("d", T0 + 10_002), Permit::Refused(Refusal::Probing));
    // The probe fails: open again, for twice as long.
    k.failed("c", T0 + 10_003, 0);
    assert_eq!(k.ask("d", T0 + 10_004), Permit::Refused(Refusal::Open { until: T0 + 10_003 + 20_000 }));
    // The next probe succeeds: closed, and everyone may start.
    assert_eq!(k.ask("d", T0 + 30_003), Permit::Granted);
    k.done("d", T0 + 30_004);
    assert_eq!(k.ask("e", T0 + 30_005), Permit::Granted);
    assert_eq!(k.ask("f", T0 + 30_005), Permit::Granted);
    let state = block_on(k.ledger.limit_state("host", T0 + 30_005)).unwrap().unwrap();
    assert_eq!((state.failures, state.open_until, state.probe), (0, None, None));
}

#[test]
fn a_breaker_beside_a_concurrency_resumes_at_its_cool_down_on_the_woken_jobs_own_wait() {
    // Issue 38: the failure that trips the breaker frees its slot and hands it to the oldest job
    // in line. That job, woken while the breaker is open, was parked again as "full", counted
    // against its own handed slot, so nothing asked at the cool-down's end and the key waited for
    // maintenance. It must instead wait for the cool-down and probe.
    let db = Sqlite::memory();
    let policy = Policy {
        concurrency: Some(1),
        breaker: Some(Breaker { trip_after: 1, cooldown_seconds: 4 }),
        ..Policy::default()
    };
    let k = keyed(&db, policy);
    assert_eq!(k.ask("a", T0), Permit::Granted);
    assert_eq!(k.ask("b", T0 + 1), Permit::Refused(Refusal::Full));
    assert_eq!(k.ask("c", T0 + 2), Permit::Refused(Refusal::Full));
    assert_eq!(k.failed("a", T0 + 10, 0), vec!["b"], "the freed slot goes to the oldest in line");
    // b's wake-up arrives while the breaker is open: it waits for the cool-down, not in the line.
    assert_eq!(k.ask("b", T0 + 20), Permit::Refused(Refusal::Open { until: T0 + 10 + 4_000 }));
    let state = block_on(k.ledger.limit_state("host", T0 + 20)).unwrap().unwrap();
    assert_eq!((state.running, state.waiting), (1, 1), "b's slot is held for it; c waits in line");
    // At the cool-down's end b's own retry probes and is granted; c still waits for a slot.
    assert_eq!(k.ask("b", T0 + 10 + 4_000), Permit::Granted);
    assert_eq!(k.ask("c", T0 + 10 + 4_001), Permit::Refused(Refusal::Probing));
    assert_eq!(k.done("b", T0 + 10 + 4_100), vec!["c"], "the probe's success closes it and wakes c");
    assert_eq!(k.ask("c", T0 + 10 + 4_200), Permit::Granted);
}

#[test]
fn while_a_probe_runs_no_slot_is_handed_and_its_success_hands_each_woken_job_a_slot_it_may_take() {
    // Issue 38, found by the simulation's line check: b, started before the trip, ended while the
    // probe ran and handed y the next slot. y, arriving, was refused for the probe and parked
    // again with its hand-off; the probe's success then handed z and v the two slots y's hand-off
    // was not counted in, and z and v, asking, counted it: refused as full, the line stood still
    // until the hand-offs lapsed, with nothing to wake it.
    let db = Sqlite::memory();
    let policy = Policy {
        concurrency: Some(2),
        breaker: Some(Breaker { trip_after: 1, cooldown_seconds: 4 }),
        ..Policy::default()
    };
    let k = keyed(&db, policy);
    assert_eq!(k.ask("a", T0), Permit::Granted);
    assert_eq!(k.ask("b", T0), Permit::Granted);
    assert_eq!(k.ask("x", T0 + 1), Permit::Refused(Refusal::Full));
    assert_eq!(k.failed("a", T0 + 2, 0), vec!["x"], "the trip hands one: the next probe");
    assert_eq!(k.ask("x", T0 + 4_002), Permit::Granted, "x probes at the cool-down's end");
    for (i, job) in ["y", "z", "v"].iter().enumerate() {
        assert_eq!(k.ask(job, T0 + 4_003 + i as i64), Permit::Refused(Refusal::Probing));
    }
    assert!(k.failed("b", T0 + 4_010, 0).is_empty(), "nothing is handed while the probe runs");
    let woken = k.done("x", T0 + 4_100);
    assert_eq!(woken, vec!["y", "z"], "the probe's success hands both slots, oldest first");
    for (i, job) in woken.iter().enumerate() {
        assert_eq!(k.ask(job, T0 + 4_200 + i as i64), Permit::Granted, "{job}, woken, may take its slot");
    }
}

#[test]
fn a_woken_job_back_in_line_holds_no_slot_so_a_probe_that_fails_hands_it_the_next_probe() {
    // A job handed a slot and then refused for a probe waits in line again: its hand-off goes, or
    // the breaker's next opening, handing one job only while none holds a hand-off, hands nobody
    // and the line waits for maintenance.
    let db = Sqlite::memory();
    let policy = Policy {
        concurrency: Some(3),
        breaker: Some(Breaker { trip_after: 1, cooldown_seconds: 4 }),
        ..Policy::default()
    };
    let k = keyed(&db, policy);
    for job in ["a", "b", "g"] {
        assert_eq!(k.ask(job, T0), Permit::Granted);
    }
    assert_eq!(k.ask("c", T0 + 1), Permit::Refused(Refusal::Full));
    assert_eq!(k.failed("a", T0 + 2, 0), vec!["c"]);
    assert!(k.failed("g", T0 + 3, 0).is_empty(), "c's hand-off is the next probe's");
    assert_eq!(k.ask("e", T0 + 4_002), Permit::Granted, "e probes");
    assert_eq!(k.ask("c", T0 + 4_003), Permit::Refused(Refusal::Probing));
    let state = block_on(k.ledger.limit_state("host", T0 + 4_003)).unwrap().unwrap();
    assert_eq!((state.running, state.waiting), (2, 1), "b and the probe run; c waits, holding no slot");
    assert_eq!(k.failed("e", T0 + 4_100, 0), vec!["c"], "the probe failed: c is the next probe");
}

/// A key of `concurrency` whose breaker (one failure, 4 s) tripped at T0 + 1: at the cool-down's
/// end `c` probes, and `d`, `e` and `f` come while it runs and wait in line for it.
fn probing_with_a_line(db: &Sqlite, concurrency: Option<u32>) -> Keyed<'_> {
    let policy =
        Policy { concurrency, breaker: Some(Breaker { trip_after: 1, cooldown_seconds: 4 }), ..Policy::default() };
    let k = keyed(db, policy);
    assert_eq!(k.ask("a", T0), Permit::Granted);
    k.failed("a", T0 + 1, 0);
    assert_eq!(k.ask("c", T0 + 4_001), Permit::Granted, "the probe");
    for (i, job) in ["d", "e", "f"].iter().enumerate() {
        assert_eq!(k.ask(job, T0 + 4_002 + i as i64), Permit::Refused(Refusal::Probing));
    }
    k
}

#[test]
fn a_probe_that_succeeds_wakes_as_many_of_the_line_as_there_are_free_slots() {
    // Issue 38: the jobs that came while the probe ran wait in line for it; its success closes the
    // breaker, and every free slot must go to the line at once. A release handed only its own slot,
    // so a key of concurrency 3 (or of none) ran its line one job at a time after a probe.
    for (concurrency, woken) in [(Some(3), vec!["d", "e", "f"]), (Some(2), vec!["d", "e"]), (None, vec!["d", "e", "f"])]
    {
        let db = Sqlite::memory();
        let k = probing_with_a_line(&db, concurrency);
        assert_eq!(k.done("c", T0 + 4_100), woken, "concurrency {concurrency:?}");
    }
}

#[test]
fn a_probe_that_fails_wakes_only_the_next_probe() {
    // The breaker opens again: of the jobs in line only the oldest goes, to wait for the cool-down
    // and probe; waking them all would only have them refused again.
    let db = Sqlite::memory();
    let k = probing_with_a_line(&db, Some(3));
    assert_eq!(k.failed("c", T0 + 4_100, 0), vec!["d"]);
    assert_eq!(k.ask("d", T0 + 4_200), Permit::Refused(Refusal::Open { until: T0 + 4_100 + 8_000 }));
}

#[test]
fn a_breaker_honours_the_largest_retry_after_and_a_success_resets_the_count() {
    let db = Sqlite::memory();
    let policy = Policy { breaker: Some(Breaker { trip_after: 2, cooldown_seconds: 10 }), ..Policy::default() };
    let k = keyed(&db, policy);
    k.ask("a", T0);
    k.failed("a", T0, 0);
    k.ask("b", T0);
    k.done("b", T0 + 1);
    k.ask("c", T0 + 2);
    k.failed("c", T0 + 2, 0);
    assert_eq!(k.ask("d", T0 + 3), Permit::Granted, "a success in between: one failure in a row, not two");
    k.failed("d", T0 + 4, 600_000);
    assert_eq!(
        k.ask("e", T0 + 5),
        Permit::Refused(Refusal::Open { until: T0 + 4 + 600_000 }),
        "the remote's Retry-After"
    );
}

#[test]
fn limit_keys_are_listed_by_name_with_what_runs_and_waits() {
    let db = Sqlite::memory();
    let ledger = Ledger::new(&db);
    let policy = Policy { concurrency: Some(1), ..Policy::default() };
    for (key, job) in [("b", "1"), ("a", "2"), ("a", "3")] {
        let ask = Ask { limit_key: key, job_id: job, route: Route::key(job), until: T0 + LEASE_MS, policy, pace_ms: 0 };
        block_on(ledger.acquire(&ask, T0)).unwrap();
    }
    let all = block_on(ledger.limit_states("", T0, 10)).unwrap();
    let shown: Vec<(&str, i64, i64)> = all.iter().map(|s| (s.limit_key.as_str(), s.running, s.waiting)).collect();
    assert_eq!(shown, vec![("a", 1, 1), ("b", 1, 0)]);
    assert_eq!(block_on(ledger.limit_states("a", T0, 10)).unwrap().len(), 1, "the page after a");
}
