//! A test kit for your handlers: run one job through your [`Handlers`] natively, as orderly runs
//! it, without Workers, a queue or a ledger.
//!
//! [`TestJob`] is a job as the consumer hands it over: its payload is checked and read into your
//! type as `POST /jobs` and the consumer do it (a payload that does not fit is the same permanent
//! error, naming the field), and its [`Cx`] carries the id, attempt, ordering key, priority and
//! the environment you give it. A handler that uses no Workers binding can be generic over the
//! environment and tested with `()`; one that uses bindings is tested under miniflare.
//!
//! ```
//! use orderly::testkit::TestJob;
//! use orderly::{Cx, Done, Handlers, Job, JobError};
//! use serde_json::json;
//!
//! #[derive(serde::Deserialize)]
//! struct Greet {
//!     name: String,
//! }
//!
//! async fn greet<E>(job: Job<Greet>, cx: Cx<E>) -> Result<Done, JobError> {
//!     Ok(Done { result: Some(json!({ "hello": job.name, "attempt": cx.attempt })), http_status: None })
//! }
//!
//! let handlers = Handlers::new().handler("greet", greet);
//! let done = TestJob::new(json!({ "type": "greet", "name": "Ada" }), ()).attempt(2).run_now(&handlers);
//! assert_eq!(done.unwrap().result, Some(json!({ "hello": "Ada", "attempt": 2 })));
//! ```

use serde_json::Value;

use crate::app::{Cx, Handlers, JobTypes};
use crate::config::Config;
use crate::handlers::{job_type, Done, JobError};
use crate::ledger::DEFAULT_PRIORITY;

/// One job as a handler gets it: a payload and what its [`Cx`] says, set with the builder methods.
#[derive(Debug, Clone)]
pub struct TestJob<E> {
    payload: Value,
    cx: Cx<E>,
}

impl<E: Clone + 'static> TestJob<E> {
    /// A job with this payload (its `"type"` picks the handler), id `test-job`, attempt 1, no
    /// ordering key, the default priority, and `env` as the handler's environment.
    pub fn new(payload: Value, env: E) -> Self {
        TestJob { payload, cx: Cx::new("test-job".into(), 1, None, DEFAULT_PRIORITY, env) }
    }

    /// The job's id (stable across attempts).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.cx.id = id.into();
        self
    }

    /// The run's attempt (from 1).
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.cx.attempt = attempt;
        self
    }

    /// The job's ordering key.
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.cx.ordering_key = Some(key.into());
        self
    }

    /// The job's priority, 0 most urgent .. 9.
    pub fn priority(mut self, priority: u8) -> Self {
        self.cx.priority = priority;
        self
    }

    /// The context the handler gets, to call a handler function yourself.
    pub fn cx(&self) -> Cx<E> {
        self.cx.clone()
    }

    /// Runs the job through `handlers`: checked as `POST /jobs` checks it (an unknown type or a
    /// payload that does not fit is the error the API would give), then run by its type's
    /// handler. Only your own handlers run here: `webhook` and service handlers make requests, and
    /// are tested under miniflare.
    pub async fn run(&self, handlers: &Handlers<E>) -> Result<Done, JobError> {
        handlers.check(&self.payload, &Config::default())?;
        let t = job_type(&self.payload)?;
        match handlers.own(t) {
            Some(handler) => handler.run(self.payload.clone(), self.cx()).await,
            None => Err(JobError::permanent(format!(
                "the test kit runs your own handlers; {t:?} is a built-in or service handler's type"
            ))),
        }
    }

    /// [`Self::run`], waited for here: for a handler that awaits nothing outside the test.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn run_now(&self, handlers: &Handlers<E>) -> Result<Done, JobError> {
        futures::executor::block_on(self.run(handlers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::Job;
    use serde_json::json;

    #[derive(serde::Deserialize)]
    struct Count {
        n: u32,
    }

    async fn count(job: Job<Count>, cx: Cx<&'static str>) -> Result<Done, JobError> {
        if job.n == 0 {
            return Err(JobError::retry("nothing to count yet"));
        }
        let seen = json!({ "n": job.n, "id": cx.id, "key": cx.ordering_key, "priority": cx.priority, "env": cx.env() });
        Ok(Done { result: Some(seen), http_status: None })
    }

    fn handlers() -> Handlers<&'static str> {
        Handlers::new().handler("count", count).webhook()
    }

    #[test]
    fn a_job_runs_with_what_its_context_was_given() {
        let job = TestJob::new(json!({"type": "count", "n": 3}), "env").id("j1").ordering_key("k").priority(0);
        let done = job.run_now(&handlers()).unwrap();
        assert_eq!(done.result, Some(json!({"n": 3, "id": "j1", "key": "k", "priority": 0, "env": "env"})));
        let failed = TestJob::new(json!({"type": "count", "n": 0}), "env").run_now(&handlers()).unwrap_err();
        assert!(matches!(failed, JobError::Retryable { .. }), "{failed:?}");
    }

    #[test]
    fn a_payload_is_refused_as_the_api_refuses_it() {
        let bad = TestJob::new(json!({"type": "count", "n": "three"}), "env").run_now(&handlers()).unwrap_err();
        assert!(matches!(&bad, JobError::Permanent { reason, .. } if reason.contains("at n")), "{bad:?}");
        let unknown = TestJob::new(json!({"type": "other"}), "env").run_now(&handlers()).unwrap_err();
        assert!(format!("{unknown:?}").contains("unknown job type \\\"other\\\""), "{unknown:?}");
        let built_in = json!({"type": "webhook", "url": "https://example.com/hook"});
        let refused = TestJob::new(built_in, "env").run_now(&handlers()).unwrap_err();
        assert!(format!("{refused:?}").contains("runs your own handlers"), "{refused:?}");
    }
}
