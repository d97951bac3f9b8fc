//! Service handlers (design §13b): job types run by another Worker, in any language, reached through a
//! service binding (`SERVICE_HANDLERS = "email=APP,..."`), best bound to a `WorkerEntrypoint` with
//! `entrypoint = "..."`, which the internet cannot reach.
//!
//! The request: `POST /orderly/run`, JSON `{"id", "type", "attempt", "ordering_key", "priority",
//! "payload"}`, headers `orderly-job-id` and `orderly-attempt`, and, with `HANDLER_SECRET`, the
//! Standard Webhooks signature headers (a handler on a public fetch handler verifies them; the
//! key is its own, never `WEBHOOK_SECRET`'s, which every webhook receiver holds). The
//! answer: a header `orderly-snooze: SECONDS` (1..86,400) on any answer is a snooze, and its JSON
//! body `{"payload": ...}`, if given, is the payload of the job's next run (a handler's own retry
//! state, such as Fedify's attempt count: same `type`, at most `MAX_PAYLOAD_BYTES`); 2xx is done
//! (a JSON body is the result, else its text); 429 and 503 with `Retry-After` retry then (capped);
//! 408, 425, 429, 5xx, a thrown error or the timeout retry with backoff; any other status is
//! permanent. With `orderly-own-words: 1` (a handler in the same isolate, design §13c, whose
//! answer only stands for a function's return or throw) no HTTP words are recorded: a failure's
//! error is its body as the handler wrote it, a snooze says so, and no HTTP status is kept.
//! Pure but for the transport ([`HttpClient`]), so the contract is tested natively.

use serde_json::{json, Value};

use super::webhook::{retry_after_seconds, sign};
use super::contract::{Done, HttpClient, HttpRequest, HttpResponse, JobContext, JobError, SendError, Services, MAX_RESULT_BYTES};
use crate::clock::Clock;
use crate::config::MAX_DELAY_SECONDS;
use crate::producer::MAX_PAYLOAD_BYTES;

#[cfg(any(test, feature = "testing"))]
/// The path a service handler is called at.
pub const RUN_PATH: &str = "/orderly/run";
/// The URL the request is made to; a service binding ignores its host.
pub const RUN_URL: &str = "https://orderly.internal/orderly/run";
/// The answer header that snoozes the job.
pub const SNOOZE_HEADER: &str = "orderly-snooze";
/// The answer header of a handler in the same isolate: record its words, not HTTP's.
pub const OWN_WORDS_HEADER: &str = "orderly-own-words";

/// The request for one run of `job` (of type `job_type`) on `binding`.
pub fn request(job: &JobContext<'_>, job_type: &str, binding: &str, key: Option<&[u8]>, now_s: i64) -> HttpRequest {
    let body = json!({
        "id": job.id,
        "type": job_type,
        "attempt": job.attempt,
        "ordering_key": job.ordering_key,
        "priority": job.priority,
        "payload": job.payload,
    })
    .to_string();
    let mut headers = vec![
        ("content-type".to_string(), "application/json".to_string()),
        ("orderly-job-id".to_string(), job.id.to_string()),
        ("orderly-attempt".to_string(), job.attempt.to_string()),
    ];
    headers.extend(job.trace_headers());
    if let Some(key) = key {
        headers.push(("webhook-id".into(), job.id.to_string()));
        headers.push(("webhook-timestamp".into(), now_s.to_string()));
        headers.push(("webhook-signature".into(), sign(key, job.id, now_s, &body)));
    }
    HttpRequest {
        method: "POST".into(),
        url: RUN_URL.into(),
        headers,
        body,
        via: Some(binding.to_string()),
        // Enough for a snooze's replacement payload (one byte more shows it was over the limit).
        read_limit: MAX_PAYLOAD_BYTES.max(2 * MAX_RESULT_BYTES) + 64,
    }
}

/// What an answer means (design §13b), `Retry-After` capped at `retry_after_cap` seconds.
pub fn outcome(resp: &HttpResponse, retry_after_cap: u32) -> Result<Done, JobError> {
    let s = resp.status;
    // What is recorded of the answer: HTTP's words, or, from a handler in the same isolate, its own.
    let (status, reason) = if resp.own_words {
        (None, own_words(resp))
    } else {
        (Some(s), format!("HTTP {s}{}", said(resp)))
    };
    if let Some(v) = resp.snooze.as_deref() {
        // Digits only: `+30` or ` 30 s` is a broken contract, not a guess.
        let seconds = Some(v.trim()).filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()));
        return match seconds.map_or(Ok(0), str::parse::<u32>) {
            Ok(n) if (1..=MAX_DELAY_SECONDS).contains(&n) => match replacement(resp) {
                Ok(payload) => {
                    let asked = if resp.own_words { String::new() } else { format!(" (HTTP {s})") };
                    let reason = format!("the handler asked{asked}");
                    Err(JobError::Snooze { seconds: n, reason, http_status: status, payload })
                }
                Err(why) => Err(JobError::Retryable { reason: why.to_string(), retry_after: None, http_status: status }),
            },
            // A broken contract is the handler's bug: retried (with backoff) until it is fixed.
            _ => Err(JobError::Retryable {
                reason: format!("HTTP {s} with {SNOOZE_HEADER}: {v:?}, not 1 to {MAX_DELAY_SECONDS} seconds"),
                retry_after: None,
                http_status: status,
            }),
        };
    }
    match s {
        200..=299 => Ok(Done { result: result_of(resp), http_status: status }),
        408 | 425 | 429 | 500..=599 => {
            let retry_after = if matches!(s, 429 | 503) {
                resp.retry_after.as_deref().and_then(retry_after_seconds).map(|r| r.min(retry_after_cap))
            } else {
                None
            };
            Err(JobError::Retryable { reason, retry_after, http_status: status })
        }
        _ => Err(JobError::Permanent { reason, http_status: status }),
    }
}

/// A snooze answer's body says `payload` but is cut off: over the limit.
#[derive(Debug, thiserror::Error)]
#[error("the snooze's payload is over {MAX_PAYLOAD_BYTES} bytes")]
struct PayloadTooLarge;

/// A snooze answer's replacement payload: `payload` of its JSON object body, if any. A body that
/// says `payload` but is cut off (over the limit) is the handler's bug, never a silent keep.
fn replacement(resp: &HttpResponse) -> Result<Option<Value>, PayloadTooLarge> {
    let Ok(Value::Object(mut body)) = serde_json::from_str::<Value>(&resp.body_start) else {
        if resp.body_start.len() > MAX_PAYLOAD_BYTES && resp.body_start.trim_start().starts_with('{') {
            return Err(PayloadTooLarge);
        }
        return Ok(None);
    };
    Ok(body.remove("payload"))
}

/// A done answer's result: its JSON body, or its text; nothing for an empty body.
fn result_of(resp: &HttpResponse) -> Option<Value> {
    if resp.body_start.is_empty() {
        return None;
    }
    Some(serde_json::from_str(&resp.body_start).unwrap_or_else(|_| Value::String(resp.body_start.clone())))
}

/// The start of a failed answer's body, for its error: what the handler said went wrong.
fn said(resp: &HttpResponse) -> String {
    let text = resp.body_start.trim();
    if text.is_empty() {
        return String::new();
    }
    let mut end = text.len().min(200);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(": {}", &text[..end])
}

/// A failed answer's error in the handler's own words: its body, whole up to 1,000 bytes.
fn own_words(resp: &HttpResponse) -> String {
    let text = resp.body_start.trim();
    if text.is_empty() {
        return "the handler failed and said nothing".into();
    }
    let mut end = text.len().min(1000);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Runs `job` on the Worker bound as `binding`.
pub async fn run<H: HttpClient, C: Clock>(
    job: &JobContext<'_>,
    job_type: &str,
    binding: &str,
    services: &Services<H, C>,
) -> Result<Done, JobError> {
    let now_s = services.clock.now_ms() / 1000;
    let req = request(job, job_type, binding, services.handler_key.as_deref(), now_s);
    match services
        .http
        .send(req, job.timeout_ms.map_or(services.http_timeout_ms, |t| t.min(services.http_timeout_ms)))
        .await
    {
        Ok(resp) => outcome(&resp, services.retry_after_cap_seconds),
        Err(SendError::Network(e)) => Err(JobError::retry(format!("service {binding}: {e}"))),
        Err(SendError::Invalid(e)) => Err(JobError::permanent(format!("service {binding}: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::Cancellation;

    fn resp(status: u16, body: &str, retry_after: Option<&str>, snooze: Option<&str>) -> HttpResponse {
        HttpResponse {
            status,
            retry_after: retry_after.map(str::to_string),
            content_type: Some("application/json".into()),
            body_start: body.into(),
            snooze: snooze.map(str::to_string),
            own_words: false,
        }
    }

    fn own(status: u16, body: &str, retry_after: Option<&str>, snooze: Option<&str>) -> HttpResponse {
        HttpResponse { own_words: true, ..resp(status, body, retry_after, snooze) }
    }

    #[test]
    fn a_handler_in_the_same_isolate_is_recorded_in_its_own_words() {
        let done = outcome(&own(200, r#"{"sent": true}"#, None, None), 3600).unwrap();
        assert_eq!((done.result, done.http_status), (Some(json!({"sent": true})), None));
        assert!(matches!(
            outcome(&own(422, "no name to greet", None, None), 60),
            Err(JobError::Permanent { reason, http_status: None }) if reason == "no name to greet"
        ));
        assert!(matches!(
            outcome(&own(500, "TypeError: x is not a function", None, None), 60),
            Err(JobError::Retryable { reason, http_status: None, .. }) if reason == "TypeError: x is not a function"
        ));
        assert!(matches!(
            outcome(&own(503, "the remote said later", Some("7"), None), 60),
            Err(JobError::Retryable { reason, retry_after: Some(7), http_status: None }) if reason == "the remote said later"
        ));
        assert!(matches!(
            outcome(&own(202, "", None, Some("30")), 60),
            Err(JobError::Snooze { seconds: 30, reason, http_status: None, .. }) if reason == "the handler asked"
        ));
        assert!(matches!(
            outcome(&own(500, "  ", None, None), 60),
            Err(JobError::Retryable { reason, .. }) if reason == "the handler failed and said nothing"
        ));
    }

    #[test]
    fn the_request_carries_the_job_and_its_signature() {
        let payload = json!({"to": "a@b.test", "n": 9_007_199_254_740_993_u64});
        let run = crate::trace::TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Some("k=v"))
            .unwrap()
            .run("j1", 3, "inv");
        let job = JobContext {
            id: "j1",
            attempt: 3,
            payload: &payload,
            ordering_key: Some("acct/1"),
            priority: 2,
            timeout_ms: None,
            cancel: &Cancellation::default(),
            trace: Some(&run),
        };
        let req = request(&job, "email", "APP", Some(b"key"), 1_700_000_000);
        assert_eq!((req.method.as_str(), req.url.as_str(), req.via.as_deref()), ("POST", RUN_URL, Some("APP")));
        assert!(req.url.ends_with(RUN_PATH));
        let body: Value = serde_json::from_str(&req.body).unwrap();
        assert_eq!(
            body,
            json!({"id": "j1", "type": "email", "attempt": 3, "ordering_key": "acct/1", "priority": 2, "payload": payload})
        );
        let header = |n: &str| req.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        assert_eq!(header("orderly-job-id").as_deref(), Some("j1"));
        assert_eq!(header("orderly-attempt").as_deref(), Some("3"));
        // The run's trace context goes on with its call (design §27).
        assert_eq!(header("traceparent").as_deref(), Some(run.traceparent.as_str()));
        assert_eq!(header("tracestate").as_deref(), Some("k=v"));
        assert_eq!(header("content-type").as_deref(), Some("application/json"));
        assert_eq!(header("webhook-signature"), Some(sign(b"key", "j1", 1_700_000_000, &req.body)));
        let unsigned = request(&job, "email", "APP", None, 0);
        assert!(!unsigned.headers.iter().any(|(k, _)| k.starts_with("webhook-")));
    }

    #[test]
    fn answers_map_to_outcomes() {
        let done = outcome(&resp(200, r#"{"sent": true}"#, None, None), 3600).unwrap();
        assert_eq!((done.result, done.http_status), (Some(json!({"sent": true})), Some(200)));
        assert_eq!(outcome(&resp(202, "queued", None, None), 3600).unwrap().result, Some(json!("queued")));
        assert_eq!(outcome(&resp(204, "", None, None), 3600).unwrap().result, None);
        for s in [408, 425, 429, 500, 502, 503] {
            assert!(matches!(outcome(&resp(s, "", None, None), 3600), Err(JobError::Retryable { .. })), "{s}");
        }
        for s in [301, 400, 404, 410, 422] {
            assert!(matches!(outcome(&resp(s, "", None, None), 3600), Err(JobError::Permanent { .. })), "{s}");
        }
        assert!(matches!(
            outcome(&resp(429, "", Some("120"), None), 60),
            Err(JobError::Retryable { retry_after: Some(60), http_status: Some(429), .. })
        ));
        assert!(matches!(
            outcome(&resp(422, "bad address", None, None), 60),
            Err(JobError::Permanent { reason, .. }) if reason == "HTTP 422: bad address"
        ));
    }

    #[test]
    fn a_snooze_header_on_any_answer_snoozes_and_a_bad_one_retries() {
        for s in [200, 429, 503] {
            assert!(matches!(outcome(&resp(s, "", None, Some("30")), 3600), Err(JobError::Snooze { seconds: 30, .. })));
        }
        for bad in ["0", "86401", "soon", "-5", "+30", "", "99999999999"] {
            assert!(matches!(outcome(&resp(200, "", None, Some(bad)), 3600), Err(JobError::Retryable { .. })), "{bad}");
        }
        assert!(matches!(outcome(&resp(202, "", None, Some("30")), 3600), Err(JobError::Snooze { payload: None, .. })));
    }

    #[test]
    fn a_snooze_answer_may_carry_the_next_runs_payload() {
        let body = json!({"payload": {"type": "fedify", "message": {"attempt": 1}}}).to_string();
        assert!(matches!(
            outcome(&resp(202, &body, None, Some("5")), 3600),
            Err(JobError::Snooze { seconds: 5, payload: Some(p), .. }) if p == json!({"type": "fedify", "message": {"attempt": 1}})
        ));
        let cut = format!("{{\"payload\": \"{}", "x".repeat(MAX_PAYLOAD_BYTES + 10));
        assert!(matches!(
            outcome(&resp(202, &cut, None, Some("5")), 3600),
            Err(JobError::Retryable { reason, .. }) if reason.contains("over")
        ));
    }
}
