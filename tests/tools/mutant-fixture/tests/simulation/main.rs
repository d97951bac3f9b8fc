//! The fixture's "simulation": a slower, wider check the runner runs (optimized, in its own
//! profile) only when a mutant survives the native suite, as orderly's seeded simulation; and a
//! checker with its own test, as orderly's oracles have.

use mutant_fixture::jitter;

/// The fixture's checker: what the simulation reports of one jitter, as orderly's oracles report
/// a violation.
fn over_the_whole(delay: u64, jittered: u64) -> Option<String> {
    (jittered > delay).then(|| format!("{jittered} is over {delay}"))
}

#[test]
fn fixed_seeds_hold_every_invariant() {
    // Every delay, not only the unit tests' 1000: the fixed half is exactly half, rounded down.
    for d in 0..100 {
        assert_eq!(jitter(d, 0.0), d / 2, "delay {d}");
        assert_eq!(over_the_whole(d, jitter(d, 0.999)), None);
    }
}

#[test]
fn the_checker_reports_a_jitter_over_the_whole() {
    assert!(over_the_whole(10, 11).is_some());
    assert!(over_the_whole(10, 10).is_none());
}
