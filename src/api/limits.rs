//! The API's flow-control routes (design §20): limit keys as they stand, and an operator's pause,
//! resume and run-time policy. Admin only.
//!
//! - `GET /limits?after=&limit=`: the limit keys seen (one of their jobs asked to start, or an
//!   operator changed them), by name.
//! - `GET /limits/{key}`: one, with its configured policy even before any job of it ran.
//! - `PUT /limits/{key}` `{"paused"?: bool, "policy"?: {...} | null}`: pause or resume; set a
//!   policy in place of the configured one, or give it back (`null`). A resume or a new policy
//!   wakes the key's parked jobs in the change's own batch (as many as may start, at most
//!   [`WAKE_AT_ONCE`](crate::flow::WAKE_AT_ONCE)); the rest follow as runs end.
//!
//! A policy is written flat, as in `LIMITS`: `rate`, `per_seconds`, `burst`, `concurrency`,
//! `trip_after`, `cooldown_seconds`.

use serde_json::{json, Value};

use super::http::{query_pairs, ApiResponse, MAX_PAGE};
use super::ports::Api;
use crate::clock::Clock;
use crate::config::Config;
use crate::error::InfraError;
use crate::flow::{BadPolicy, Policy, PolicyText};
use crate::ledger::limit::{Change, LimitState};
use crate::ledger::Sql;
use crate::producer::{self, QueueSender};

/// A policy as the API writes it: flat, as `LIMITS` reads it.
pub fn policy_json(p: &Policy) -> Value {
    serde_json::to_value(PolicyText::from(p)).unwrap_or_default()
}

/// A limit key as the API shows it: its state (if it has one), its configured policy, and the
/// policy in force.
fn view(key: &str, state: Option<&LimitState>, cfg: &Config) -> Value {
    let configured = cfg.limits.for_key(key);
    let overridden = state.and_then(|s| s.overridden);
    json!({
        "limit_key": key,
        "paused": state.is_some_and(|s| s.paused),
        "policy": policy_json(&overridden.unwrap_or(configured)),
        "configured": policy_json(&configured),
        "overridden": overridden.is_some(),
        "running": state.map_or(0, |s| s.running),
        "waiting": state.map_or(0, |s| s.waiting),
        "breaker": {
            "failures": state.map_or(0, |s| s.failures),
            "open_until": state.and_then(|s| s.open_until),
            "probe": state.and_then(|s| s.probe.clone()),
        },
        "updated_at": state.map(|s| s.updated_at),
    })
}

/// Reads a `PUT /limits/{key}` body.
fn parse_change(body: &[u8]) -> Result<Change, BadPolicy> {
    let bad = |e: String| BadPolicy(e);
    let v: Value = serde_json::from_slice(body).map_err(|e| bad(format!("body is not JSON: {e}")))?;
    let Value::Object(mut o) = v else { return Err(bad("body must be an object".into())) };
    let paused = match o.remove("paused") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(b),
        Some(_) => return Err(bad("\"paused\" must be true or false".into())),
    };
    let policy = match o.remove("policy") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(p @ Value::Object(_)) => {
            let text: PolicyText = serde_json::from_value(p).map_err(|e| bad(format!("policy: {e}")))?;
            Some(Some(text.policy().map_err(|e| bad(format!("policy: {e}")))?))
        }
        Some(_) => return Err(bad("\"policy\" must be an object or null".into())),
    };
    if let Some(k) = o.keys().next() {
        return Err(bad(format!("unknown field {k:?}")));
    }
    if paused.is_none() && policy.is_none() {
        return Err(bad("nothing to change: give \"paused\" or \"policy\"".into()));
    }
    Ok(Change { paused, policy })
}

impl<S: Sql, Q: QueueSender, C: Clock> Api<'_, S, Q, C> {
    /// `GET /limits`.
    pub(super) async fn limits(&self, cfg: &Config, query: &str) -> Result<ApiResponse, InfraError> {
        let (mut after, mut limit) = (String::new(), 50);
        for (k, v) in query_pairs(query) {
            match k.as_str() {
                "after" => after = v,
                "limit" => match v.parse::<u32>() {
                    Ok(n) if (1..=MAX_PAGE).contains(&n) => limit = n,
                    _ => return Ok(ApiResponse::error(400, format!("limit must be 1 to {MAX_PAGE}, got {v:?}"))),
                },
                _ => return Ok(ApiResponse::error(400, format!("unknown query parameter {k:?}"))),
            }
        }
        let states = self.ledger.limit_states(&after, self.clock.now_ms(), limit).await?;
        let next = (states.len() as u32 == limit).then(|| states.last().map(|s| s.limit_key.clone())).flatten();
        let limits: Vec<Value> = states.iter().map(|s| view(&s.limit_key, Some(s), cfg)).collect();
        Ok(ApiResponse::json(200, json!({ "limits": limits, "next": next })))
    }

    /// `GET /limits/{key}`.
    pub(super) async fn limit(&self, cfg: &Config, key: &str) -> Result<ApiResponse, InfraError> {
        if let Some(bad) = bad_key(key) {
            return Ok(bad);
        }
        let state = self.ledger.limit_state(key, self.clock.now_ms()).await?;
        Ok(ApiResponse::json(200, view(key, state.as_ref(), cfg)))
    }

    /// `PUT /limits/{key}`.
    pub(super) async fn change_limit(&self, cfg: &Config, key: &str, body: &[u8]) -> Result<ApiResponse, InfraError> {
        if let Some(bad) = bad_key(key) {
            return Ok(bad);
        }
        let change = match parse_change(body) {
            Ok(c) => c,
            Err(e) => return Ok(ApiResponse::error(400, e.0)),
        };
        let now = self.clock.now_ms();
        // Resumed, or a new policy: as many parked jobs as may start now go again, woken in the
        // change's own batch.
        let woken = self.ledger.set_limit(key, &change, &cfg.limits.for_key(key), now).await?;
        let state = self.ledger.limit_state(key, now).await?;
        let shown = view(key, state.as_ref(), cfg);
        if let Err(e) = producer::wake(self.ledger, self.queue, &woken, cfg.lock_retry_delay_seconds, None).await {
            let error = format!("{e}; the change is made, and maintenance sends the parked jobs again");
            return Ok(ApiResponse::json(503, json!({"error": error, "limit": shown})));
        }
        Ok(ApiResponse::json(200, shown))
    }
}

/// A limit key in a path must be one a job could carry.
fn bad_key(key: &str) -> Option<ApiResponse> {
    crate::envelope::checked_key("limit_key", key.to_string()).err().map(|e| ApiResponse::error(400, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_names_what_it_changes_and_nothing_else() {
        assert_eq!(parse_change(br#"{"paused": true}"#).unwrap(), Change { paused: Some(true), policy: None });
        assert_eq!(parse_change(br#"{"policy": null}"#).unwrap().policy, Some(None));
        let c = parse_change(br#"{"policy": {"concurrency": 3}}"#).unwrap();
        assert_eq!(c.policy.flatten().and_then(|p| p.concurrency), Some(3));
        for (body, says) in [
            (&br"{}"[..], "nothing to change"),
            (br#"{"paused": "yes"}"#, "true or false"),
            (br#"{"policy": {"concurrency": 0}}"#, "concurrency must be from 1"),
            (br#"{"pause": true}"#, "unknown field"),
        ] {
            let e = parse_change(body).unwrap_err().0;
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn a_policy_is_shown_as_it_is_written() {
        let p = crate::flow::Policies::parse(r#"{"k": {"rate": 5, "per_seconds": 2, "burst": 3, "trip_after": 4}}"#)
            .unwrap()
            .for_key("k");
        assert_eq!(
            policy_json(&p),
            json!({"rate": 5, "per_seconds": 2, "burst": 3, "trip_after": 4, "cooldown_seconds": 30})
        );
    }
}
