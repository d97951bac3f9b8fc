//! The limits and grace periods the other modules share, in one place at the bottom of the
//! import graph (each module re-exports what it owns the meaning of). Cloudflare's numbers come
//! from its documentation (design §8).

/// A job's priority when none is given: the middle of 0 (most urgent) .. 9.
pub const DEFAULT_PRIORITY: u8 = 5;
/// The least urgent priority.
pub const MAX_PRIORITY: u8 = 9;
/// Largest delay Cloudflare Queues accepts for `retry` and `send`: 24 hours since 2026-02 (it was
/// 12), as miniflare checks too (`QueueMessageDelaySchema`).
pub const MAX_DELAY_SECONDS: u32 = 86_400;
/// Longest run a job's own `timeout_seconds` may ask for: the most `WEBHOOK_TIMEOUT_SECONDS`
/// allows (a job's timeout only shortens the configured run bound the lease is sized for).
pub const MAX_TIMEOUT_SECONDS: u32 = 300;
/// Furthest a job's deadline may be from its submission (`deadline_seconds`): 30 days.
pub const MAX_DEADLINE_SECONDS: u32 = 30 * 24 * 3600;
/// How long past its `next_run_at` a PENDING job may wait before its message counts as lost.
/// Generous: a backlog also delays delivery, and a needless re-send costs a duplicate delivery
/// (which the ledger absorbs), never a second run.
pub const RESEND_GRACE_MS: i64 = 15 * 60 * 1000;

/// How long before its `next_run_at` a PENDING job may be claimed: none. A delay is what a remote
/// server (`Retry-After`), a handler (a snooze) or the backoff asked for, and any delivery for a key
/// (not only the job's own wake-up) can find its head, so an allowance would cut every such delay
/// short by that much. A delivery that comes early (clock skew between isolates) finds the job not
/// due and is put off until it is: a re-delivery, never a shortened delay.
pub const EARLY_DELIVERY_ALLOWANCE_MS: i64 = 0;
/// Key groups (and unkeyed messages) run at once; Workers allow six open connections.
pub const GROUP_CONCURRENCY: usize = 6;
/// A queue consumer invocation's wall-clock limit on Workers (15 minutes).
pub const INVOCATION_WALL_MS: i64 = 15 * 60 * 1000;

/// Most shards a ledger may have (`LEDGER_SHARDS`): an API list asks every shard, and the free plan
/// allows 50 subrequests per invocation.
pub const MAX_SHARDS: usize = 32;

/// Whole seconds from `now` until `at`: 0 when `at` has passed, at most the Queues maximum (a
/// send or retry delay).
pub fn seconds_until(now: i64, at: i64) -> u32 {
    if at <= now {
        0
    } else {
        delay_until(now, Some(at))
    }
}

/// Whole seconds from `now` until `at` (at least 1, at most the Queues maximum).
pub fn delay_until(now: i64, at: Option<i64>) -> u32 {
    let ms = at.unwrap_or(now).saturating_sub(now).max(0);
    ((ms.saturating_add(999) / 1000).max(1) as u64).min(u64::from(MAX_DELAY_SECONDS)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_rounds_up_and_stays_in_range() {
        assert_eq!(delay_until(1000, Some(1001)), 1);
        assert_eq!(delay_until(1000, Some(3500)), 3);
        assert_eq!(delay_until(1000, Some(0)), 1);
        assert_eq!(delay_until(0, Some(i64::MAX)), MAX_DELAY_SECONDS);
        assert_eq!(seconds_until(5000, 1000), 0);
    }
}
