//! The handler contract every job type shares: how a run ended ([`Done`], [`JobError`]), what a
//! handler is given ([`JobContext`], [`Services`]), the one job type ([`JobHandler`]) and every
//! handler together ([`Runner`]), and outbound HTTP ([`HttpClient`]), so the decisions are tested
//! natively and the edge supplies `fetch`. A leaf: the handlers build on it.

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
        /// The HTTP status that said so, if any.
        http_status: Option<u16>,
    },
    /// Will never succeed as sent: DEAD now, no more attempts.
    #[error("{reason}")]
    Permanent {
        /// What is wrong.
        reason: String,
        /// The HTTP status that said so, if any.
        http_status: Option<u16>,
    },
    /// Not a failure: run the job again after `seconds` (1..86,400) without spending an attempt,
    /// its ordering key held meanwhile (a rate limit to wait out, a resource not ready yet). A job
    /// snoozes at most `MAX_SNOOZES` times; the next snooze is DEAD.
    #[error("snoozed for {seconds} s: {reason}")]
    Snooze {
        /// How long to wait.
        seconds: u32,
        /// Why, for the job's history.
        reason: String,
        /// The HTTP status that said so, if any.
        http_status: Option<u16>,
        /// The payload the next run gets instead of this one's (the handler's own retry state,
        /// e.g. Fedify's attempt count), if any; it keeps the job's `type` and is sealed again
        /// when the job is sealed.
        payload: Option<Value>,
    },
}

impl JobError {
    /// A retryable error without a requested delay.
    pub fn retry(reason: impl Into<String>) -> Self {
        JobError::Retryable { reason: reason.into(), retry_after: None, http_status: None }
    }
    /// A permanent error.
    pub fn permanent(reason: impl Into<String>) -> Self {
        JobError::Permanent { reason: reason.into(), http_status: None }
    }
    /// Run again after `seconds` without spending an attempt.
    pub fn snooze(seconds: u32, reason: impl Into<String>) -> Self {
        JobError::Snooze { seconds, reason: reason.into(), http_status: None, payload: None }
    }
    /// Run again after `seconds` without spending an attempt, with `payload` instead of this
    /// run's (same `type`).
    pub fn snooze_with(seconds: u32, reason: impl Into<String>, payload: Value) -> Self {
        JobError::Snooze { seconds, reason: reason.into(), http_status: None, payload: Some(payload) }
    }
    /// The HTTP status behind the error, if any.
    pub fn http_status(&self) -> Option<u16> {
        match self {
            JobError::Retryable { http_status, .. }
            | JobError::Permanent { http_status, .. }
            | JobError::Snooze { http_status, .. } => *http_status,
        }
    }
}

/// A successful run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Done {
    /// What the run returned, kept on the DONE job (bounded by [`bounded_result`]).
    pub result: Option<Value>,
    /// The HTTP status the handler got, if it made a request.
    pub http_status: Option<u16>,
}

/// Largest result kept, as JSON text.
pub const MAX_RESULT_BYTES: usize = 4096;

/// A result as stored: its JSON text when it fits in [`MAX_RESULT_BYTES`]; otherwise a marker
/// object that says so and keeps as much of the start of the JSON text as fits:
/// `{"truncated": true, "bytes": <full size>, "start": "<JSON text ...>"}`.
pub fn bounded_result(result: &Value) -> String {
    let text = result.to_string();
    if text.len() <= MAX_RESULT_BYTES {
        return text;
    }
    // Escaping can grow the kept text (quotes, control characters): shrink until it fits.
    let mut keep = MAX_RESULT_BYTES - 64;
    loop {
        let mut end = keep.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let marker = serde_json::json!({"truncated": true, "bytes": text.len(), "start": &text[..end]}).to_string();
        if marker.len() <= MAX_RESULT_BYTES || end == 0 {
            return marker;
        }
        // Scale by how much escaping grew it, so a doubling costs one more pass, not many.
        keep = (end * (MAX_RESULT_BYTES - 64) / marker.len()).min(end - 1);
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
    /// The job's ordering key, if any.
    pub ordering_key: Option<&'a str>,
    /// 0 most urgent .. 9.
    pub priority: u8,
    /// The job's own time limit for this run, ms, if it has one: outbound HTTP waits no longer.
    pub timeout_ms: Option<u32>,
    /// Set when an operator cancels the running job (design §22.1).
    pub cancel: &'a Cancellation,
    /// This run's trace context, a span of the trace the job was submitted in (design §27).
    pub trace: Option<&'a crate::trace::TraceContext>,
}

impl JobContext<'_> {
    /// The W3C headers that carry this run's trace context on to what it calls (none without one).
    pub fn trace_headers(&self) -> Vec<(String, String)> {
        let Some(t) = self.trace else { return Vec::new() };
        let mut headers = vec![("traceparent".to_string(), t.traceparent.clone())];
        headers.extend(t.tracestate.clone().map(|s| ("tracestate".to_string(), s)));
        headers
    }
}

/// A run's cancellation (design §22.1): set once an operator's cancel of the running job reaches
/// its run. The built-in handlers stop at once (their request is aborted); a Rust handler awaits
/// [`Cancellation::cancelled`] or polls [`Cancellation::is_cancelled`] to stop on its own, within
/// [`crate::consumer::CANCEL_GRACE_MS`], after which it is dropped at its next await.
#[derive(Clone, Default)]
pub struct Cancellation(std::rc::Rc<CancelState>);

#[derive(Default)]
struct CancelState {
    set: std::cell::Cell<bool>,
    waiting: std::cell::RefCell<Vec<std::task::Waker>>,
}

impl std::fmt::Debug for Cancellation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Cancellation").field(&self.is_cancelled()).finish()
    }
}

impl Cancellation {
    /// Sets it, waking every run awaiting it.
    pub fn cancel(&self) {
        self.0.set.set(true);
        for w in self.0.waiting.borrow_mut().drain(..) {
            w.wake();
        }
    }

    /// Whether the run was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.0.set.get()
    }

    /// Completes once the run is cancelled (never, if it is not).
    pub fn cancelled(&self) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.is_cancelled() {
                return std::task::Poll::Ready(());
            }
            self.0.waiting.borrow_mut().push(cx.waker().clone());
            std::task::Poll::Pending
        })
    }

    /// `run`, or a permanent "cancelled" error as soon as the run is cancelled (`run` is then
    /// dropped: a request it made is aborted).
    pub async fn or_cancelled<T>(
        &self,
        run: impl std::future::Future<Output = Result<T, JobError>>,
    ) -> Result<T, JobError> {
        match futures::future::select(std::pin::pin!(run), std::pin::pin!(self.cancelled())).await {
            futures::future::Either::Left((result, _)) => result,
            futures::future::Either::Right(_) => Err(JobError::permanent(CANCELLED)),
        }
    }
}

/// The reason a cancelled job ends DEAD with (design §22.1).
pub const CANCELLED: &str = "cancelled";

/// Runs a job of any type: what the consumer calls.
#[allow(async_fn_in_trait)]
pub trait Runner {
    /// Runs `job` to success or a [`JobError`].
    async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError>;
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
    /// The service binding to send it through (design §13b); `None`: the internet.
    pub via: Option<String>,
    /// How much of the answer's body to read.
    pub read_limit: usize,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// The `Retry-After` header, if sent.
    pub retry_after: Option<String>,
    /// The `Content-Type` header, if sent.
    pub content_type: Option<String>,
    /// The start of the body (at most the request's `read_limit`), as text.
    pub body_start: String,
    /// The `orderly-snooze` header, if sent (service handlers).
    pub snooze: Option<String>,
    /// The `orderly-own-words` header was sent (a handler in the same isolate): its status says
    /// only how the run ended, and a failure's body is the handler's own error message.
    pub own_words: bool,
}

/// How much of a response body is read (for the job's result); the rest is never read.
pub const RESPONSE_START_BYTES: usize = 1024;

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// Network failure or timeout: worth another try.
    Network(String),
    /// The request cannot be built (bad URL or header): it never will be.
    Invalid(String),
}

/// Sends HTTP requests; `fetch` on the edge. Redirects are never followed: a 3xx is the answer.
/// Only the start of the response body is read; the client cancels the rest.
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
    /// The key from `WEBHOOK_SECRET` that signs webhooks, if set (see [`signing_key`](super::webhook::signing_key)).
    pub webhook_key: Option<Vec<u8>>,
    /// The key from `HANDLER_SECRET` that signs service-handler calls, if set. Never the webhooks'
    /// key: every receiver of a webhook knows that one, and could sign a call to a handler.
    pub handler_key: Option<Vec<u8>>,
    /// Whether webhooks may target loopback, private and link-local addresses.
    pub allow_private_targets: bool,
    /// Longest `Retry-After` honoured (`BACKOFF_CAP_SECONDS`).
    pub retry_after_cap_seconds: u32,
    /// Per-request timeout of outbound HTTP, milliseconds.
    pub http_timeout_ms: u32,
    /// Job types run by other Workers: (type, service binding), from `SERVICE_HANDLERS`.
    pub service_handlers: Vec<(String, String)>,
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
    async fn run<H: HttpClient, C: Clock>(job: &JobContext<'_>, services: &Services<H, C>) -> Result<Done, JobError>;
}
