//! The API's ordering-key routes. Admin only.
//!
//! - `GET /keys?state=blocked&limit=`: strict mode's keys waiting for an operator (a DEAD head
//!   under `ON_DEAD = block`), with the head and how many jobs wait behind it.
//! - `GET /keys?state=paused&after=&limit=`: the keys an operator paused (design §20.11), by name,
//!   each with how many of its jobs wait; `next` is the `after` of the next page.
//! - `PUT /keys/{key}` `{"paused": bool}`: pause or resume a key, in either ordering mode. Nothing
//!   of a paused key starts (a run that began before stays), and nothing is lost: its messages are
//!   acked, its jobs kept PENDING. A resume sends them again (strict mode: the key's first one,
//!   whose runner chains to the rest; lock mode: each, at most [`WAKE_ON_RESUME`], maintenance
//!   the rest).
//! - `POST /keys/{key}/skip`: the key moves past its DEAD head; its next job is woken.

use serde_json::{json, Value};

use super::http::{query_pairs, ApiResponse, MAX_PAGE};
use super::ports::Api;
use crate::clock::Clock;
use crate::config::{Config, OnDead, OrderingMode};
use crate::error::InfraError;
use crate::ledger::Sql;
use crate::bounds::seconds_until;
use crate::operations::Skipped;
use crate::producer::{self, QueueSender};

/// Most jobs of a resumed lock-mode key sent again at once; the rest are maintenance's (they
/// have been due since before the grace period, so its next run sends them).
pub const WAKE_ON_RESUME: u32 = 100;

/// Why a `PUT /keys/{key}` body was refused (a 400's message).
#[derive(Debug, Clone, PartialEq, Eq)]
struct BadPause(String);

/// Reads a `PUT /keys/{key}` body: whether to pause.
fn parse_pause(body: &[u8]) -> Result<bool, BadPause> {
    let bad = |e: String| BadPause(e);
    let v: Value = serde_json::from_slice(body).map_err(|e| bad(format!("body is not JSON: {e}")))?;
    let Value::Object(mut o) = v else { return Err(bad("body must be an object".into())) };
    let paused = match o.remove("paused") {
        Some(Value::Bool(b)) => b,
        None => return Err(bad("nothing to change: give \"paused\"".into())),
        Some(_) => return Err(bad("\"paused\" must be true or false".into())),
    };
    if let Some(k) = o.keys().next() {
        return Err(bad(format!("unknown field {k:?}")));
    }
    Ok(paused)
}

impl<S: Sql, Q: QueueSender, C: Clock> Api<'_, S, Q, C> {
    /// `GET /keys`.
    pub(super) async fn keys(&self, cfg: &Config, query: &str) -> Result<ApiResponse, InfraError> {
        let (mut limit, mut state, mut after) = (50, None, String::new());
        for (k, v) in query_pairs(query) {
            match k.as_str() {
                "state" => state = Some(v),
                "after" => after = v,
                "limit" => match v.parse::<u32>() {
                    Ok(n) if (1..=MAX_PAGE).contains(&n) => limit = n,
                    _ => return Ok(ApiResponse::error(400, format!("limit must be 1 to {MAX_PAGE}, got {v:?}"))),
                },
                _ => return Ok(ApiResponse::error(400, format!("unknown query parameter {k:?}"))),
            }
        }
        match state.as_deref() {
            Some("blocked") => self.blocked(cfg, limit).await,
            Some("paused") => {
                let keys = self.ledger.paused_keys(&after, limit).await?;
                let next = (keys.len() as u32 == limit).then(|| keys.last().map(|k| k.key.clone())).flatten();
                let keys: Vec<Value> = keys
                    .into_iter()
                    .map(|k| json!({"key": k.key, "paused": true, "paused_at": k.paused_at, "waiting": k.waiting}))
                    .collect();
                Ok(ApiResponse::json(200, json!({ "keys": keys, "next": next })))
            }
            _ => Ok(ApiResponse::error(400, "state must be \"blocked\" or \"paused\"")),
        }
    }

    async fn blocked(&self, cfg: &Config, limit: u32) -> Result<ApiResponse, InfraError> {
        // Only strict mode under ON_DEAD = block ever blocks a key.
        if cfg.ordering_mode != OrderingMode::Strict || cfg.on_dead != OnDead::Block {
            return Ok(ApiResponse::json(200, json!({ "keys": [] })));
        }
        let keys: Vec<Value> = self
            .ledger
            .blocked_keys(limit)
            .await?
            .into_iter()
            .map(|b| json!({"key": b.key, "head": b.head, "waiting": b.waiting}))
            .collect();
        Ok(ApiResponse::json(200, json!({ "keys": keys })))
    }

    /// `PUT /keys/{key}`: pause or resume.
    pub(super) async fn change_key(&self, cfg: &Config, key: &str, body: &[u8]) -> Result<ApiResponse, InfraError> {
        if let Err(e) = crate::envelope::checked_key("ordering_key", key.to_string()) {
            return Ok(ApiResponse::error(400, e.to_string()));
        }
        let paused = match parse_pause(body) {
            Ok(p) => p,
            Err(e) => return Ok(ApiResponse::error(400, e.0)),
        };
        let now = self.clock.now_ms();
        if paused {
            let pause = self.ledger.pause_key(key, now).await?;
            return Ok(ApiResponse::json(200, json!({"key": key, "paused": true, "paused_at": pause.paused_at})));
        }
        let resumed = self.ledger.resume_key(key, cfg.ordering_mode, WAKE_ON_RESUME).await?;
        // Each job's message, put off until the job is due (a retry's wait was acked with it).
        let wake: Vec<_> =
            resumed.wake.iter().filter_map(|j| producer::message_for(j, seconds_until(now, j.next_run_at))).collect();
        let shown = json!({"key": key, "paused": false, "was_paused": resumed.ended.is_some(), "woken": wake.len()});
        if let Err(e) = producer::send_all(self.queue, wake).await {
            let error = format!("{e}; the key is resumed, and maintenance sends its jobs again");
            return Ok(ApiResponse::json(503, json!({"error": error, "key": shown})));
        }
        Ok(ApiResponse::json(200, shown))
    }

    /// `POST /keys/{key}/skip`: the key moves past its DEAD head; its next job is woken.
    pub(super) async fn skip(&self, cfg: &Config, key: &str) -> Result<ApiResponse, InfraError> {
        Ok(match self.operations(cfg).skip(key).await? {
            Skipped::NeverBlocks => {
                ApiResponse::error(409, "keys are never blocked unless ORDERING_MODE is strict and ON_DEAD is block")
            }
            Skipped::NotBlocked => ApiResponse::error(409, format!("key {key:?} is not blocked by a DEAD job")),
            Skipped::Done { skipped, unsent: Some(e) } => ApiResponse::json(
                503,
                json!({"error": format!("{e}; the key is skipped and the cron wakes it"), "skipped": skipped}),
            ),
            Skipped::Done { skipped, unsent: None } => ApiResponse::json(200, json!({ "skipped": skipped })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_body_says_paused_and_nothing_else() {
        assert_eq!(parse_pause(br#"{"paused": true}"#), Ok(true));
        assert_eq!(parse_pause(br#"{"paused": false}"#), Ok(false));
        for (body, says) in [
            (&br"{}"[..], "nothing to change"),
            (br#"{"paused": "yes"}"#, "true or false"),
            (br#"{"paused": null}"#, "true or false"),
            (br#"{"paused": true, "policy": {}}"#, "unknown field"),
            (br"[true]", "must be an object"),
            (b"paused", "not JSON"),
        ] {
            let e = parse_pause(body).unwrap_err().0;
            assert!(e.contains(says), "{body:?}: {e}");
        }
    }
}
