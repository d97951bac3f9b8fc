//! Job handlers: the payload's `type` picks one. Each type is a file here implementing
//! [`JobHandler`], plus one line in [`Registry::run`].
//!
//! Handlers say how a run ended with [`JobError`]: retryable (try again after backoff or the
//! handler's own delay) or permanent (DEAD now). Outbound HTTP goes through [`HttpClient`], so the
//! decisions are tested natively and the edge supplies `fetch`.

pub mod webhook;

use serde_json::Value;
use thiserror::Error;

use crate::clock::Clock;

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

/// Sends HTTP requests; `fetch` on the edge. An `Err` is a network failure or timeout.
#[allow(async_fn_in_trait)]
pub trait HttpClient {
    /// Sends `req`, giving up after `timeout_ms`.
    async fn send(&self, req: HttpRequest, timeout_ms: u32) -> Result<HttpResponse, String>;
}

/// What handlers may use.
pub struct Services<H, C> {
    /// Outbound HTTP.
    pub http: H,
    /// The clock (webhook timestamps).
    pub clock: C,
    /// `WEBHOOK_SECRET`, if set.
    pub webhook_secret: Option<String>,
    /// Per-request timeout of outbound HTTP, milliseconds.
    pub http_timeout_ms: u32,
}

/// One job type.
#[allow(async_fn_in_trait)]
pub trait JobHandler {
    /// The payload `type` this handler takes.
    const TYPE: &'static str;
    /// Runs one job.
    async fn run<H: HttpClient, C: Clock>(job: &JobContext<'_>, services: &Services<H, C>) -> Result<(), JobError>;
}

/// Routes jobs to handlers by payload `type`.
pub struct Registry<H, C>(pub Services<H, C>);

impl<H: HttpClient, C: Clock> Runner for Registry<H, C> {
    async fn run(&self, job: &JobContext<'_>) -> Result<(), JobError> {
        let services = &self.0;
        match job.payload.get("type").and_then(Value::as_str) {
            Some(webhook::Webhook::TYPE) => webhook::Webhook::run(job, services).await,
            // A new job type: its file in this folder, and one line like the one above.
            Some(other) => Err(JobError::permanent(format!("unknown job type {other:?}"))),
            None => Err(JobError::permanent("payload has no \"type\" string, so no handler can run it")),
        }
    }
}
