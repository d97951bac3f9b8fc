//! Flow control per limit key (design §20): the policies, how they are configured, and why a
//! start was refused.
//!
//! Pure. A job may name a limit key (a tenant, a remote host) besides its ordering key; jobs of
//! many ordering keys share one. The key's policy bounds its starts:
//! - a **throttle**: at most `rate` starts per `per_seconds`, `burst` of them at once. Kept as a
//!   GCRA (the generic cell rate algorithm: one stored time, the theoretical arrival time, so a
//!   throttle costs one row whatever its rate): in any window of `per_seconds`, at most
//!   `rate + burst` starts;
//! - a **concurrency** limit: at most that many of its jobs running at once, across every
//!   consumer invocation (one permit per running job, until its lease ends);
//! - a **circuit breaker**: `trip_after` consecutive failures open it for a cool-down that doubles
//!   with each opening (never shorter than the largest `Retry-After` the failure carried); once
//!   it ends one job, the probe, runs; its success closes the breaker, its failure opens it again;
//! - an operator's **pause**.
//!
//! The ledger decides each start in the limit key's shard, atomically (`ledger/sql/limit_*.sql`);
//! this module parses the configuration (`LIMITS`) and the API's policies, and names the answers.

use serde::{Deserialize, Serialize};

/// Longest a breaker's cool-down grows to: Queues' longest delay (24 hours).
pub const MAX_COOLDOWN_MS: i64 = crate::bounds::MAX_DELAY_SECONDS as i64 * 1000;
/// A breaker's first cool-down when its policy names none.
pub const DEFAULT_COOLDOWN_SECONDS: u32 = 30;
/// Longest the jobs of an ordering key behind a job parked for its limit key's slot wait between
/// looks (lock mode: the key is held for the parked job this long at least; strict mode: the
/// parked job is not due before it; design §20). The parked job itself is woken when a slot
/// frees, not by a look.
pub const PARKED_RECHECK_SECONDS: u32 = 30;

/// How long a slot handed to a woken job stays its (design §20): the time its wake-up message may
/// take to arrive. Past it the slot is anyone's again, so a lost wake-up holds a slot no longer.
pub const WOKEN_HOLD_SECONDS: u32 = 30;
/// Most parked jobs one release or operator's change wakes at once (limit_hand.sql hands no more
/// than the slots free, and one while the key's breaker is not closed).
pub const WAKE_AT_ONCE: u32 = 100;
/// Most rules `LIMITS` may hold.
pub const MAX_RULES: usize = 1000;

/// What is wrong with a policy or a rule of `LIMITS`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadPolicy(pub String);

/// At most `rate` starts per `per_seconds`, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Throttle {
    /// Starts per period.
    pub rate: u32,
    /// The period, seconds.
    pub per_seconds: u32,
    /// Starts allowed at once (at least 1).
    pub burst: u32,
}

impl Throttle {
    /// Microseconds between starts at the steady rate, rounded up (never faster than the rate).
    pub fn interval_us(&self) -> i64 {
        let per_us = i64::from(self.per_seconds) * 1_000_000;
        let rate = i64::from(self.rate.max(1));
        (per_us + rate - 1) / rate
    }

    /// How far ahead of the steady rate a burst may run, microseconds.
    pub fn tolerance_us(&self) -> i64 {
        self.interval_us() * i64::from(self.burst.max(1) - 1)
    }
}

/// `trip_after` consecutive failures open the breaker for `cooldown_seconds`, doubling.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Breaker {
    /// Consecutive failures that open it.
    pub trip_after: u32,
    /// Its first cool-down, seconds.
    pub cooldown_seconds: u32,
}

/// A limit key's policy; each part optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Policy {
    /// Starts per period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttle: Option<Throttle>,
    /// Most running at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// The circuit breaker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker: Option<Breaker>,
}

/// A policy as written in `LIMITS` and in the API: flat fields, each checked when read, each
/// left out when shown if unset.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyText {
    #[serde(skip_serializing_if = "Option::is_none")]
    rate: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    per_seconds: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    burst: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    concurrency: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trip_after: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cooldown_seconds: Option<u32>,
}

impl From<&Policy> for PolicyText {
    /// How a policy is written: what [`PolicyText::policy`] reads back as the same policy.
    fn from(p: &Policy) -> Self {
        PolicyText {
            rate: p.throttle.map(|t| t.rate),
            per_seconds: p.throttle.map(|t| t.per_seconds),
            burst: p.throttle.map(|t| t.burst),
            concurrency: p.concurrency,
            trip_after: p.breaker.map(|b| b.trip_after),
            cooldown_seconds: p.breaker.map(|b| b.cooldown_seconds),
        }
    }
}

impl PolicyText {
    /// The policy, or what is wrong with it.
    pub fn policy(&self) -> Result<Policy, BadPolicy> {
        let within = |name: &str, v: Option<u32>, lo: u32, hi: u32| match v {
            Some(n) if !(lo..=hi).contains(&n) => Err(BadPolicy(format!("{name} must be from {lo} to {hi}, got {n}"))),
            _ => Ok(v),
        };
        let rate = within("rate", self.rate, 1, 100_000)?;
        let per_seconds = within("per_seconds", self.per_seconds, 1, 86_400)?;
        let burst = within("burst", self.burst, 1, 100_000)?;
        let concurrency = within("concurrency", self.concurrency, 1, 10_000)?;
        let trip_after = within("trip_after", self.trip_after, 1, 10_000)?;
        let cooldown_seconds = within("cooldown_seconds", self.cooldown_seconds, 1, crate::bounds::MAX_DELAY_SECONDS)?;
        let throttle = match (rate, per_seconds, burst) {
            (Some(rate), per, burst) => {
                Some(Throttle { rate, per_seconds: per.unwrap_or(1), burst: burst.unwrap_or(1) })
            }
            (None, None, None) => None,
            (None, _, _) => return Err(BadPolicy("per_seconds and burst need a rate".into())),
        };
        let breaker = match (trip_after, cooldown_seconds) {
            (Some(trip_after), c) => {
                Some(Breaker { trip_after, cooldown_seconds: c.unwrap_or(DEFAULT_COOLDOWN_SECONDS) })
            }
            (None, None) => None,
            (None, Some(_)) => return Err(BadPolicy("cooldown_seconds needs trip_after".into())),
        };
        Ok(Policy { throttle, concurrency, breaker })
    }
}

/// The configured policies (`LIMITS`): rules by exact limit key, or by prefix (a rule ending in
/// `*`). A key takes its exact rule, else its longest matching prefix's, else no limits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policies {
    exact: Vec<(String, Policy)>,
    /// Longest prefix first.
    prefixes: Vec<(String, Policy)>,
}

impl Policies {
    /// Reads `LIMITS`: a JSON object from rule to policy, e.g.
    /// `{"mastodon.social": {"rate": 10, "per_seconds": 1, "concurrency": 4}, "tenant-*": {"concurrency": 2}}`.
    pub fn parse(text: &str) -> Result<Policies, BadPolicy> {
        if text.trim().is_empty() {
            return Ok(Policies::default());
        }
        let rules: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(text).map_err(|e| BadPolicy(format!("not a JSON object of rules: {e}")))?;
        if rules.len() > MAX_RULES {
            return Err(BadPolicy(format!("more than {MAX_RULES} rules")));
        }
        let mut p = Policies::default();
        for (rule, v) in rules {
            let text: PolicyText = serde_json::from_value(v).map_err(|e| BadPolicy(format!("rule {rule:?}: {e}")))?;
            let policy = text.policy().map_err(|e| BadPolicy(format!("rule {rule:?}: {e}")))?;
            match rule.strip_suffix('*') {
                Some(prefix) => p.prefixes.push((prefix.to_string(), policy)),
                None => p.exact.push((rule, policy)),
            }
        }
        p.prefixes.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        Ok(p)
    }

    /// The policy configured for `key` (none: no limits).
    pub fn for_key(&self, key: &str) -> Policy {
        self.exact
            .iter()
            .find(|(k, _)| k == key)
            .or_else(|| self.prefixes.iter().find(|(prefix, _)| key.starts_with(prefix.as_str())))
            .map(|(_, p)| *p)
            .unwrap_or_default()
    }

    /// Whether any rule is configured.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.prefixes.is_empty()
    }
}

/// Why a job of a limit key may not start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// An operator paused the key: the job is parked until the key is resumed.
    Paused,
    /// As many of its jobs run as the key allows: parked until one finishes.
    Full,
    /// The breaker is open until then (ms): the job waits that long.
    Open {
        /// ms.
        until: i64,
    },
    /// The breaker's cool-down is over and its probe runs: parked until the probe ends.
    Probing,
    /// The throttle's next start is due then (ms).
    Throttled {
        /// ms.
        at: i64,
    },
}

impl Refusal {
    /// Parked: woken (sent again) when a slot frees or the key is resumed, not at a time.
    pub fn parks(self) -> bool {
        matches!(self, Refusal::Paused | Refusal::Full | Refusal::Probing)
    }

    /// When to look at the job again (ms): a parked job's safety net, else the time named.
    pub fn retry_at(self, now: i64) -> i64 {
        match self {
            Refusal::Open { until } => until,
            Refusal::Throttled { at } => at,
            _ => now + i64::from(PARKED_RECHECK_SECONDS) * 1000,
        }
    }
}

/// How a run ended, for the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunVerdict {
    /// Succeeded: the breaker closes.
    Succeeded,
    /// Failed (retryable or not); the largest `Retry-After` it carried, ms.
    Failed {
        /// ms, 0 when none.
        retry_after_ms: i64,
    },
    /// Did not run, or said nothing of the remote (a snooze, a sealed payload it could not open).
    Neither,
}

#[cfg(any(test, feature = "testing"))]
/// A breaker's cool-down after its `opens`-th opening (0 the first): `base` doubled each time,
/// capped at [`MAX_COOLDOWN_MS`], never shorter than what the remote asked (`Retry-After`). The
/// ledger's `limit_release.sql` computes the same; `a_cooldown_doubles_and_honours_retry_after`
/// pins both.
pub fn cooldown_ms(base_ms: i64, opens: u32, retry_after_ms: i64) -> i64 {
    let doubled = base_ms.saturating_mul(1_i64 << opens.min(20));
    doubled.min(MAX_COOLDOWN_MS).max(retry_after_ms.min(MAX_COOLDOWN_MS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_takes_its_exact_rule_else_its_longest_prefix() {
        let p = Policies::parse(
            r#"{"a.example": {"concurrency": 1}, "https://*": {"concurrency": 2}, "https://b.*": {"rate": 5}}"#,
        )
        .unwrap();
        assert_eq!(p.for_key("a.example").concurrency, Some(1));
        assert_eq!(p.for_key("https://c.example").concurrency, Some(2));
        let b = p.for_key("https://b.example");
        assert_eq!((b.concurrency, b.throttle.map(|t| (t.rate, t.per_seconds, t.burst))), (None, Some((5, 1, 1))));
        assert_eq!(p.for_key("other"), Policy::default());
        assert!(Policies::parse("").unwrap().is_empty());
    }

    #[test]
    fn a_bad_rule_is_refused_naming_it() {
        for (text, says) in [
            (r#"{"k": {"rate": 0}}"#, "rate must be from 1"),
            (r#"{"k": {"burst": 3}}"#, "need a rate"),
            (r#"{"k": {"cooldown_seconds": 3}}"#, "needs trip_after"),
            (r#"{"k": {"concurency": 3}}"#, "unknown field"),
            (r"[1]", "not a JSON object"),
        ] {
            let e = Policies::parse(text).unwrap_err().0;
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn a_throttle_spaces_starts_and_lets_a_burst_run_ahead() {
        let t = Throttle { rate: 10, per_seconds: 1, burst: 5 };
        assert_eq!(t.interval_us(), 100_000);
        assert_eq!(t.tolerance_us(), 400_000);
        assert_eq!(Throttle { burst: 1, ..t }.tolerance_us(), 0);
        assert_eq!(Throttle { rate: 3, per_seconds: 1, burst: 1 }.interval_us(), 333_334, "rounded up");
    }

    #[test]
    fn a_cooldown_doubles_and_honours_retry_after() {
        assert_eq!(cooldown_ms(30_000, 0, 0), 30_000);
        assert_eq!(cooldown_ms(30_000, 2, 0), 120_000);
        assert_eq!(cooldown_ms(30_000, 0, 600_000), 600_000);
        assert_eq!(cooldown_ms(30_000, 60, 0), MAX_COOLDOWN_MS);
    }

    #[test]
    fn parked_refusals_wait_for_a_wake_up_the_others_for_a_time() {
        assert!(Refusal::Full.parks() && Refusal::Paused.parks() && Refusal::Probing.parks());
        assert!(!Refusal::Throttled { at: 5 }.parks());
        assert_eq!(Refusal::Open { until: 9 }.retry_at(1), 9);
        assert_eq!(Refusal::Full.retry_at(1), 1 + i64::from(PARKED_RECHECK_SECONDS) * 1000);
    }
}
