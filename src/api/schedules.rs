//! The API's periodic-job routes (design §23.3). Admin only.
//!
//! - `GET /schedules`: every configured schedule (`SCHEDULES`), with its latest period seen, its
//!   latest job, its next period and whether it is paused.
//! - `PUT /schedules/{name}` `{"paused": bool}`: pause or resume one. A paused schedule enqueues
//!   nothing; its periods pass as seen, so resuming catches none of them up.

use serde_json::{json, Value};

use super::ports::Api;
use super::http::ApiResponse;
use crate::clock::Clock;
use crate::config::Config;
use crate::error::InfraError;
use crate::ledger::schedule::ScheduleState;
use crate::ledger::Sql;
use crate::producer::QueueSender;
use crate::schedule::{BadSchedule, Schedule};

/// A schedule as the API shows it: its configuration and its row.
fn view(s: &Schedule, state: Option<&ScheduleState>, now: i64) -> Value {
    let mut v = s.to_json();
    // A sensitive job's payload is never shown, as its jobs' are not (design §17).
    if v["job"]["sensitive"] == json!(true) {
        v["job"]["payload"] = json!(crate::seal::REDACTED);
    }
    v["paused"] = json!(state.is_some_and(|st| st.paused_at.is_some()));
    v["paused_at"] = json!(state.and_then(|st| st.paused_at));
    v["last_period"] = json!(state.and_then(|st| st.last_period));
    v["last_job_id"] = json!(state.and_then(|st| st.last_job_id.clone()));
    v["last_enqueued_at"] = json!(state.and_then(|st| st.last_enqueued_at));
    v["next_period"] = json!(s.when.next_after(now));
    v
}

/// Reads a `PUT /schedules/{name}` body: whether to pause.
fn parse_paused(body: &[u8]) -> Result<bool, BadSchedule> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let Value::Object(mut o) = v else { return Err("body must be an object".into()) };
    let paused = match o.remove("paused") {
        Some(Value::Bool(b)) => b,
        Some(_) => return Err("\"paused\" must be true or false".into()),
        None => return Err("nothing to change: give \"paused\"".into()),
    };
    if let Some(k) = o.keys().next() {
        return Err(format!("unknown field {k:?}").into());
    }
    Ok(paused)
}

impl<S: Sql, Q: QueueSender, C: Clock> Api<'_, S, Q, C> {
    /// `GET /schedules`.
    pub(super) async fn schedules(&self, cfg: &Config) -> Result<ApiResponse, InfraError> {
        let states = if cfg.schedules.0.is_empty() { vec![] } else { self.ledger.schedule_states().await? };
        let now = self.clock.now_ms();
        let list: Vec<Value> =
            cfg.schedules.0.iter().map(|s| view(s, states.iter().find(|st| st.name == s.name), now)).collect();
        Ok(ApiResponse::json(200, json!({ "schedules": list })))
    }

    /// `PUT /schedules/{name}`.
    pub(super) async fn change_schedule(&self, cfg: &Config, name: &str, body: &[u8]) -> Result<ApiResponse, InfraError> {
        let Some(s) = cfg.schedules.get(name) else {
            return Ok(ApiResponse::error(404, format!("no schedule {name:?} in SCHEDULES")));
        };
        let paused = match parse_paused(body) {
            Ok(p) => p,
            Err(e) => return Ok(ApiResponse::error(400, e.0)),
        };
        let now = self.clock.now_ms();
        let state = self.ledger.schedule_pause(name, paused.then_some(now)).await?;
        Ok(ApiResponse::json(200, view(s, Some(&state), now)))
    }
}
