//! The retry policy (River's `retry_policy.go`): what a failed run leads to ([`decide_failure`]:
//! DEAD, a retry after its backoff, or a snooze) and the delays it waits: capped exponential
//! backoff, with jitter applied separately.
//!
//! Pure. `backoff` is deterministic so it can be checked exactly; `jitter_ms` and `decide_failure`
//! take the random number as a parameter so the caller owns the randomness (Math.random on the
//! edge, fixed in tests).

use crate::config::{Config, MAX_DELAY_SECONDS};
use crate::handlers::JobError;

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

/// What a failed run leads to. Pure, so it is tested on its own; `fail.sql` only applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureDecision {
    /// PENDING again, due after `delay_ms` (the jittered backoff, exact to the millisecond).
    Retry {
        /// Milliseconds.
        delay_ms: i64,
    },
    /// DEAD with this error.
    Dead(String),
    /// Not a failure: PENDING again after `delay_seconds`, the attempt given back.
    Snooze {
        /// Seconds.
        delay_seconds: u32,
    },
}

/// Decides a failed run: permanent errors, the last allowed attempt and a snooze past
/// `MAX_SNOOZES` (`snoozes` is how many the job took before) are DEAD; otherwise retry after the
/// handler's requested delay, or jittered backoff of the attempt number.
pub fn decide_failure(
    attempts: i64,
    max_attempts: i64,
    snoozes: i64,
    err: &JobError,
    cfg: &Config,
    random: f64,
) -> FailureDecision {
    match err {
        JobError::Snooze { reason, .. } if snoozes >= i64::from(cfg.max_snoozes) => FailureDecision::Dead(format!(
            "{reason}: snoozed {snoozes} times already, MAX_SNOOZES ({}) allows no more",
            cfg.max_snoozes
        )),
        JobError::Snooze { seconds, .. } => {
            FailureDecision::Snooze { delay_seconds: (*seconds).clamp(1, MAX_DELAY_SECONDS) }
        }
        JobError::Permanent { reason, .. } => FailureDecision::Dead(reason.clone()),
        JobError::Retryable { reason, .. } if attempts >= max_attempts => {
            FailureDecision::Dead(format!("{reason} (attempt {attempts} of {max_attempts}, no attempts left)"))
        }
        JobError::Retryable { retry_after, .. } => {
            let attempt = u32::try_from(attempts).unwrap_or(u32::MAX);
            let delay_ms = match retry_after {
                Some(seconds) => i64::from(*seconds) * 1000,
                None => jitter_ms(backoff(attempt, cfg.backoff_base_seconds, cfg.backoff_cap_seconds), random),
            };
            FailureDecision::Retry { delay_ms: delay_ms.min(i64::from(MAX_DELAY_SECONDS) * 1000) }
        }
    }
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

    fn retry(after: Option<u32>) -> JobError {
        JobError::Retryable { reason: "HTTP 503".into(), retry_after: after, http_status: Some(503) }
    }

    #[test]
    fn a_retryable_failure_backs_off_by_attempt() {
        let cfg = Config::default();
        assert_eq!(decide_failure(1, 8, 0, &retry(None), &cfg, 1.0), FailureDecision::Retry { delay_ms: 5_000 });
        assert_eq!(decide_failure(3, 8, 0, &retry(None), &cfg, 1.0), FailureDecision::Retry { delay_ms: 20_000 });
        assert_eq!(decide_failure(3, 8, 0, &retry(None), &cfg, 0.0), FailureDecision::Retry { delay_ms: 10_000 });
        let one = Config { backoff_base_seconds: 1, ..Config::default() };
        assert_eq!(decide_failure(1, 8, 0, &retry(None), &one, 0.3), FailureDecision::Retry { delay_ms: 650 });
    }

    #[test]
    fn retry_after_overrides_the_backoff() {
        let cfg = Config::default();
        assert_eq!(decide_failure(1, 8, 0, &retry(Some(120)), &cfg, 0.5), FailureDecision::Retry { delay_ms: 120_000 });
    }

    #[test]
    fn the_last_attempt_and_permanent_errors_are_dead() {
        let cfg = Config::default();
        assert!(
            matches!(decide_failure(8, 8, 0, &retry(None), &cfg, 0.5), FailureDecision::Dead(w) if w.contains("attempt 8 of 8"))
        );
        assert_eq!(
            decide_failure(1, 8, 0, &JobError::permanent("HTTP 404"), &cfg, 0.5),
            FailureDecision::Dead("HTTP 404".into())
        );
    }

    #[test]
    fn a_snooze_is_never_dead_and_stays_in_range() {
        let cfg = Config::default();
        let snooze = |s| JobError::snooze(s, "rate limited");
        assert_eq!(decide_failure(8, 8, 0, &snooze(30), &cfg, 0.5), FailureDecision::Snooze { delay_seconds: 30 });
        assert_eq!(decide_failure(1, 8, 0, &snooze(0), &cfg, 0.5), FailureDecision::Snooze { delay_seconds: 1 });
        assert_eq!(
            decide_failure(1, 8, 0, &snooze(u32::MAX), &cfg, 0.5),
            FailureDecision::Snooze { delay_seconds: MAX_DELAY_SECONDS }
        );
    }

    #[test]
    fn snoozes_end_dead_past_max_snoozes() {
        let cfg = Config { max_snoozes: 3, ..Config::default() };
        let snooze = JobError::snooze(1, "HTTP 429");
        assert_eq!(decide_failure(1, 8, 2, &snooze, &cfg, 0.5), FailureDecision::Snooze { delay_seconds: 1 });
        assert_eq!(
            decide_failure(1, 8, 3, &snooze, &cfg, 0.5),
            FailureDecision::Dead("HTTP 429: snoozed 3 times already, MAX_SNOOZES (3) allows no more".into())
        );
    }
}
