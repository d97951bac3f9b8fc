//! Job handlers: the payload's `type` picks one. Each type is a file here implementing
//! [`JobHandler`], plus its name in the `job_types!` list.
//!
//! Handlers say how a run ended with [`JobError`]: retryable (try again after backoff or the
//! handler's own delay) or permanent (DEAD now). Outbound HTTP goes through [`HttpClient`], so the
//! decisions are tested natively and the edge supplies `fetch`.

pub mod webhook;

use serde_json::Value;
use thiserror::Error;

use crate::clock::Clock;
use crate::config::Config;

/// How a failed run should be treated.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum JobError {
    /// Transient: run again later. `retry_after` (seconds) overrides the backoff, e.g. from a
    /// `Retry-After` header.
    #[error("{reason}")]
    Retryable {
        /// What happened.
        reason: String,
        /// The delay asked for by the other side, if any.
        retry_after: Option<u32>,
    },
    /// Will never succeed as sent: DEAD now, no more attempts.
    #[error("{reason}")]
    Permanent {
        /// What is wrong.
        reason: String,
    },
}

impl JobError {
    /// A retryable error without a requested delay.
    pub fn retry(reason: impl Into<String>) -> Self {
        JobError::Retryable { reason: reason.into(), retry_after: None }
    }
    /// A permanent error.
    pub fn permanent(reason: impl Into<String>) -> Self {
        JobError::Permanent { reason: reason.into() }
    }
}

/// The job a handler runs.
#[derive(Debug, Clone, Copy)]
pub struct JobContext<'a> {
    /// Job id (also the webhook id, so receivers can dedupe).
    pub id: &'a str,
    /// This run's attempt number, from 1.
    pub attempt: u32,
    /// The payload, metadata removed.
    pub payload: &'a Value,
}

/// Runs a job of any type: what the consumer calls.
#[allow(async_fn_in_trait)]
pub trait Runner {
    /// Runs `job` to success or a [`JobError`].
    async fn run(&self, job: &JobContext<'_>) -> Result<(), JobError>;
}

/// An outbound HTTP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// "POST" or "PUT".
    pub method: String,
    /// http(s) URL.
    pub url: String,
    /// Header names and values, in order.
    pub headers: Vec<(String, String)>,
    /// Body text.
    pub body: String,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// The `Retry-After` header, if sent.
    pub retry_after: Option<String>,
}

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// Network failure or timeout: worth another try.
    Network(String),
    /// The request cannot be built (bad URL or header): it never will be.
    Invalid(String),
}

/// Sends HTTP requests; `fetch` on the edge. Redirects are never followed: a 3xx is the answer.
/// The response body is not read (and must be consumed or cancelled by the client).
#[allow(async_fn_in_trait)]
pub trait HttpClient {
    /// Sends `req`, giving up after `timeout_ms`.
    async fn send(&self, req: HttpRequest, timeout_ms: u32) -> Result<HttpResponse, SendError>;
}

/// What handlers may use.
pub struct Services<H, C> {
    /// Outbound HTTP.
    pub http: H,
    /// The clock (webhook timestamps).
    pub clock: C,
    /// The signing key from `WEBHOOK_SECRET`, if set (see [`webhook::signing_key`]).
    pub webhook_key: Option<Vec<u8>>,
    /// Whether webhooks may target loopback, private and link-local addresses.
    pub allow_private_targets: bool,
    /// Longest `Retry-After` honoured (`BACKOFF_CAP_SECONDS`).
    pub retry_after_cap_seconds: u32,
    /// Per-request timeout of outbound HTTP, milliseconds.
    pub http_timeout_ms: u32,
}

/// One job type.
#[allow(async_fn_in_trait)]
pub trait JobHandler {
    /// The payload `type` this handler takes.
    const TYPE: &'static str;
    /// Checks a payload before it is accepted (`POST /jobs`), so a job that can never run is
    /// refused with a 400 instead of dying later. Default: anything goes.
    fn check(_payload: &Value, _cfg: &Config) -> Result<(), JobError> {
        Ok(())
    }
    /// Runs one job.
    async fn run<H: HttpClient, C: Clock>(job: &JobContext<'_>, services: &Services<H, C>) -> Result<(), JobError>;
}

/// Declares the job types: each listed handler is routed to by its `TYPE`.
macro_rules! job_types {
    ($($handler:ty),+ $(,)?) => {
        /// Every job type with a handler.
        pub const TYPES: &[&str] = &[$(<$handler as JobHandler>::TYPE),+];

        async fn dispatch<H: HttpClient, C: Clock>(
            job_type: &str,
            job: &JobContext<'_>,
            services: &Services<H, C>,
        ) -> Option<Result<(), JobError>> {
            $(if job_type == <$handler as JobHandler>::TYPE {
                return Some(<$handler as JobHandler>::run(job, services).await);
            })+
            None
        }

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

fn job_type(payload: &Value) -> Result<&str, JobError> {
    payload
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| JobError::permanent("payload has no \"type\" string, so no handler can run it"))
}

fn unknown(job_type: &str) -> JobError {
    JobError::permanent(format!("unknown job type {job_type:?} (known: {})", TYPES.join(", ")))
}

/// Whether a payload names a known job type and that handler accepts it.
pub fn check(payload: &Value, cfg: &Config) -> Result<(), JobError> {
    let t = job_type(payload)?;
    check_type(t, payload, cfg).unwrap_or_else(|| Err(unknown(t)))
}

/// Routes jobs to handlers by payload `type`.
pub struct Registry<H, C>(pub Services<H, C>);

impl<H: HttpClient, C: Clock> Runner for Registry<H, C> {
    async fn run(&self, job: &JobContext<'_>) -> Result<(), JobError> {
        let t = job_type(job.payload)?;
        dispatch(t, job, &self.0).await.unwrap_or_else(|| Err(unknown(t)))
    }
}
