//! The fixture's "simulation": a slower, wider check the runner runs (optimized, in its own
//! profile) only when a mutant survives the native suite, as orderly's seeded simulation.

use mutant_fixture::jitter;

#[test]
fn fixed_seeds_hold_every_invariant() {
    // Every delay, not only the unit tests' 1000: the fixed half is exactly half, rounded down.
    for d in 0..100 {
        assert_eq!(jitter(d, 0.0), d / 2, "delay {d}");
    }
}
