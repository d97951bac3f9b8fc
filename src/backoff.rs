//! Retry delays: capped exponential backoff, with jitter applied separately.
//!
//! Pure. `backoff` is deterministic so it can be checked exactly; `jitter` takes the random number
//! as a parameter so the caller owns the randomness (Math.random on the edge, fixed in tests).

use crate::config::MAX_DELAY_SECONDS;

/// `base * 2^(attempt-1)` seconds, capped at `cap` (and at the Queues maximum). Attempt 0 counts as 1.
pub fn backoff(attempt: u32, base: u32, cap: u32) -> u32 {
    let exp = attempt.saturating_sub(1).min(31);
    let delay = u64::from(base).saturating_mul(1u64 << exp);
    delay.min(u64::from(cap)).min(u64::from(MAX_DELAY_SECONDS)) as u32
}

/// "Equal jitter", in milliseconds: a delay in `[delay/2, delay]` of `delay_seconds`, exactly (a
/// 1 s backoff waits 500 to 1,000 ms, never nothing), so retries of many jobs spread out but none
/// comes back sooner than half its backoff. `random` is in `[0, 1)`.
pub fn jitter_ms(delay_seconds: u32, random: f64) -> i64 {
    let full = i64::from(delay_seconds) * 1000;
    let half = full / 2;
    let r = if random.is_finite() { random.clamp(0.0, 1.0) } else { 0.0 };
    half + ((full - half) as f64 * r).round() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_base() {
        let got: Vec<u32> = (1..=6).map(|a| backoff(a, 5, 3600)).collect();
        assert_eq!(got, vec![5, 10, 20, 40, 80, 160]);
        assert_eq!(backoff(0, 5, 3600), 5);
    }

    #[test]
    fn backoff_is_capped() {
        assert_eq!(backoff(20, 5, 3600), 3600);
        assert_eq!(backoff(u32::MAX, 5, 3600), 3600);
        assert_eq!(backoff(40, 1000, u32::MAX), MAX_DELAY_SECONDS);
    }

    #[test]
    fn jitter_stays_between_half_and_whole_in_milliseconds() {
        assert_eq!(jitter_ms(100, 0.0), 50_000);
        assert_eq!(jitter_ms(100, 0.999_999), 100_000);
        assert_eq!(jitter_ms(101, 0.5), 75_750);
        assert_eq!(jitter_ms(0, 0.7), 0);
        assert_eq!(jitter_ms(10, f64::NAN), 5_000);
        for i in 0..100 {
            let d = jitter_ms(60, f64::from(i) / 100.0);
            assert!((30_000..=60_000).contains(&d));
        }
    }

    #[test]
    fn a_one_second_backoff_never_comes_back_at_once() {
        // Whole seconds halved by integer division made `jitter(1, r)` 0 for any r < 0.5 (issue
        // 38): half of all first retries at BACKOFF_BASE_SECONDS = 1 went back at once.
        assert_eq!(jitter_ms(1, 0.3), 650);
        assert_eq!(jitter_ms(1, 0.0), 500);
        assert_eq!(jitter_ms(5, 0.0), 2_500, "half of 5 s, not 2 s");
    }
}
