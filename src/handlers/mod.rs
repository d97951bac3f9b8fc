//! The built-in job types and what every handler shares: the built-in `webhook` (a file here
//! implementing [`JobHandler`], plus its name in the `job_types!` list) and the service handler
//! contract (`service.rs`). Your own job types are `app.rs`'s.
//!
//! Handlers say how a run ended: [`Done`] with an optional result (kept on the DONE job, bounded
//! by [`bounded_result`]), or [`JobError`]: retryable (try again after backoff or the handler's
//! own delay), permanent (DEAD now), or a snooze (run again after a delay, no attempt spent). Each
//! may carry the HTTP status the handler got, for the job's history. The contract they share is
//! `contract.rs`'s (a leaf the handlers build on); this file lists the job types.

mod contract;
pub mod service;
pub mod webhook;

use serde_json::Value;

#[cfg(any(test, feature = "testing"))]
use crate::config::Config;

#[cfg(any(test, feature = "testing"))]
pub use contract::MAX_RESULT_BYTES;
pub use contract::{
    bounded_result, Cancellation, Done, HttpClient, HttpRequest, HttpResponse, JobContext, JobError, JobHandler, Runner, SendError,
    Services, CANCELLED,
};

/// Declares the job types: each listed handler is routed to by its `TYPE`.
macro_rules! job_types {
    ($($handler:ty),+ $(,)?) => {
        /// Every job type with a handler.
        #[cfg(any(test, feature = "testing"))]
        pub const TYPES: &[&str] = &[$(<$handler as JobHandler>::TYPE),+];

        #[cfg(any(test, feature = "testing"))]
        fn check_type(job_type: &str, payload: &Value, cfg: &Config) -> Option<Result<(), JobError>> {
            $(if job_type == <$handler as JobHandler>::TYPE {
                return Some(<$handler as JobHandler>::check(payload, cfg));
            })+
            None
        }
    };
}

// A new job type: its file in this folder (a `JobHandler`), and its name in this list.
job_types!(webhook::Webhook);

/// The payload's `type`, which picks its handler.
pub fn job_type(payload: &Value) -> Result<&str, JobError> {
    payload
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| JobError::permanent("payload has no \"type\" string, so no handler can run it"))
}

#[cfg(any(test, feature = "testing"))]
fn unknown<'a>(job_type: &str, services: impl Iterator<Item = &'a str>) -> JobError {
    let known: Vec<&str> = TYPES.iter().copied().chain(services).collect();
    JobError::permanent(format!("unknown job type {job_type:?} (known: {})", known.join(", ")))
}

/// Whether a payload names a known job type (built in, or a service handler's) and, for a
/// built-in type, whether its handler accepts it.
#[cfg(any(test, feature = "testing"))]
pub fn check(payload: &Value, cfg: &Config) -> Result<(), JobError> {
    let t = job_type(payload)?;
    if cfg.service_handlers.iter().any(|(ty, _)| ty == t) {
        return Ok(());
    }
    let services = cfg.service_handlers.iter().map(|(ty, _)| ty.as_str());
    check_type(t, payload, cfg).unwrap_or_else(|| Err(unknown(t, services)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_knows_every_built_in_type() {
        assert_eq!(TYPES, crate::config::BUILT_IN_TYPES);
    }
    use serde_json::json;

    #[test]
    fn a_small_result_is_kept_as_is() {
        let r = json!({"status": 200, "body": "ok"});
        assert_eq!(bounded_result(&r), r.to_string());
    }

    #[test]
    fn a_large_result_is_truncated_with_a_marker_that_fits() {
        for filler in ["x", "\"", "\u{1}", "é", "😀"] {
            let r = json!({"body": filler.repeat(10_000)});
            let full = r.to_string();
            let kept = bounded_result(&r);
            assert!(kept.len() <= MAX_RESULT_BYTES, "{filler:?}: {} bytes", kept.len());
            let v: Value = serde_json::from_str(&kept).expect("the marker is JSON");
            assert_eq!(v["truncated"], true);
            assert_eq!(v["bytes"], full.len());
            let start = v["start"].as_str().expect("start is text");
            assert!(full.starts_with(start) && start.len() > 1000, "{filler:?}: kept {} bytes", start.len());
        }
    }
}
