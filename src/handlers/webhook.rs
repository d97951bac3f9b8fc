//! The built-in `webhook` job: deliver a JSON body to a URL, signed per Standard Webhooks.
//!
//! Payload: `{"type": "webhook", "url": "http(s)://...", "body": any, "headers"?: {..},
//! "method"?: "POST"|"PUT"}`. 2xx succeeds; 408, 429, 5xx, network errors and timeouts retry
//! (429/503 `Retry-After` seconds honoured); any other status is permanent. With `WEBHOOK_SECRET`
//! each request carries `webhook-id`, `webhook-timestamp` and `webhook-signature: v1,<base64>`.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use super::{HttpClient, HttpRequest, HttpResponse, JobContext, JobError, JobHandler, Services};
use crate::clock::Clock;
use crate::config::MAX_DELAY_SECONDS;

/// The `webhook` job type.
pub struct Webhook;

impl JobHandler for Webhook {
    const TYPE: &'static str = "webhook";

    fn check(payload: &Value) -> Result<(), JobError> {
        request(payload).map(|_| ())
    }

    async fn run<H: HttpClient, C: Clock>(job: &JobContext<'_>, services: &Services<H, C>) -> Result<(), JobError> {
        let mut req = request(job.payload)?;
        if let Some(secret) = services.webhook_secret.as_deref() {
            let ts = services.clock.now_ms() / 1000;
            let sig = sign(secret, job.id, ts, &req.body);
            req.headers.retain(|(n, _)| !n.to_ascii_lowercase().starts_with("webhook-"));
            req.headers.push(("webhook-id".into(), job.id.to_string()));
            req.headers.push(("webhook-timestamp".into(), ts.to_string()));
            req.headers.push(("webhook-signature".into(), sig));
        }
        let url = req.url.clone();
        match services.http.send(req, services.http_timeout_ms).await {
            Ok(resp) => classify(&resp).map_err(|e| with_url(e, &url)),
            Err(network) => Err(JobError::retry(format!("{url}: {network}"))),
        }
    }
}

fn with_url(e: JobError, url: &str) -> JobError {
    match e {
        JobError::Retryable { reason, retry_after } => {
            JobError::Retryable { reason: format!("{url}: {reason}"), retry_after }
        }
        JobError::Permanent { reason } => JobError::Permanent { reason: format!("{url}: {reason}") },
    }
}

/// Builds the request from a payload, or says (permanently) what is wrong with it.
pub fn request(payload: &Value) -> Result<HttpRequest, JobError> {
    let bad = |m: String| JobError::permanent(format!("bad webhook payload: {m}"));
    let url = payload.get("url").and_then(Value::as_str).ok_or_else(|| bad("\"url\" must be a string".into()))?;
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| bad(format!("url {url:?} is not http(s)")))?;
    if rest.is_empty() || rest.starts_with('/') || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad(format!("url {url:?} has no host or has spaces")));
    }
    let method = match payload.get("method") {
        None | Some(Value::Null) => "POST",
        Some(Value::String(m)) if m.eq_ignore_ascii_case("POST") => "POST",
        Some(Value::String(m)) if m.eq_ignore_ascii_case("PUT") => "PUT",
        Some(other) => return Err(bad(format!("method must be \"POST\" or \"PUT\", got {other}"))),
    };
    let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
    match payload.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(h)) => {
            for (name, value) in h {
                let Value::String(value) = value else {
                    return Err(bad(format!("header {name:?} must be a string")));
                };
                let valid_name = !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic() && b != b':');
                if !valid_name || value.chars().any(|c| c == '\r' || c == '\n') {
                    return Err(bad(format!("header {name:?} is not a valid HTTP header")));
                }
                headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
                headers.push((name.clone(), value.clone()));
            }
        }
        Some(_) => return Err(bad("\"headers\" must be an object of strings".into())),
    }
    let body = payload.get("body").unwrap_or(&Value::Null).to_string();
    Ok(HttpRequest { method: method.into(), url: url.into(), headers, body })
}

/// Standard Webhooks signature: `v1,` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")). A
/// `whsec_` secret is base64 of the key (the spec's form); any other secret is used as raw bytes.
pub fn sign(secret: &str, id: &str, timestamp_s: i64, body: &str) -> String {
    let key =
        secret.strip_prefix("whsec_").and_then(|b| B64.decode(b).ok()).unwrap_or_else(|| secret.as_bytes().to_vec());
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    mac.update(format!("{id}.{timestamp_s}.{body}").as_bytes());
    format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
}

/// Turns a response into success, a retry, or a permanent failure.
pub fn classify(resp: &HttpResponse) -> Result<(), JobError> {
    let s = resp.status;
    match s {
        200..=299 => Ok(()),
        408 | 429 | 500..=599 => {
            let honoured = matches!(s, 429 | 503);
            let retry_after = if honoured { resp.retry_after.as_deref().and_then(retry_after_seconds) } else { None };
            Err(JobError::Retryable { reason: format!("HTTP {s}"), retry_after })
        }
        _ => Err(JobError::permanent(format!("HTTP {s}"))),
    }
}

/// `Retry-After` as delay-seconds (the HTTP-date form is not used by the services we call back and
/// falls back to backoff), capped at the Queues maximum.
pub fn retry_after_seconds(v: &str) -> Option<u32> {
    let n: u64 = v.trim().parse().ok()?;
    Some(n.min(u64::from(MAX_DELAY_SECONDS)) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use futures::executor::block_on;
    use serde_json::json;
    use std::cell::RefCell;

    fn resp(status: u16, retry_after: Option<&str>) -> HttpResponse {
        HttpResponse { status, retry_after: retry_after.map(str::to_string) }
    }

    #[test]
    fn statuses_are_classified_per_spec() {
        assert_eq!(classify(&resp(200, None)), Ok(()));
        assert_eq!(classify(&resp(204, None)), Ok(()));
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(matches!(classify(&resp(s, None)), Err(JobError::Retryable { .. })), "{s}");
        }
        for s in [301, 400, 401, 404, 410, 422] {
            assert!(matches!(classify(&resp(s, None)), Err(JobError::Permanent { .. })), "{s}");
        }
    }

    #[test]
    fn retry_after_is_honoured_on_429_and_503_only() {
        assert_eq!(
            classify(&resp(429, Some("17"))),
            Err(JobError::Retryable { reason: "HTTP 429".into(), retry_after: Some(17) })
        );
        assert_eq!(
            classify(&resp(503, Some(" 5 "))),
            Err(JobError::Retryable { reason: "HTTP 503".into(), retry_after: Some(5) })
        );
        assert_eq!(
            classify(&resp(500, Some("17"))),
            Err(JobError::Retryable { reason: "HTTP 500".into(), retry_after: None })
        );
        assert_eq!(retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(retry_after_seconds("999999"), Some(MAX_DELAY_SECONDS));
    }

    #[test]
    fn request_is_built_from_the_payload() {
        let req = request(&json!({"type": "webhook", "url": "https://h.test/x", "body": {"a": [1]}, "method": "put",
            "headers": {"X-Trace": "t1", "Content-Type": "application/activity+json"}}))
        .unwrap();
        assert_eq!(req.method, "PUT");
        assert_eq!(req.url, "https://h.test/x");
        assert_eq!(req.body, r#"{"a":[1]}"#);
        assert_eq!(
            req.headers,
            vec![("Content-Type".into(), "application/activity+json".into()), ("X-Trace".into(), "t1".into())]
        );
    }

    #[test]
    fn bad_payloads_are_permanent_with_a_reason() {
        for (p, want) in [
            (json!({"type": "webhook"}), "url"),
            (json!({"type": "webhook", "url": "ftp://h/x"}), "not http"),
            (json!({"type": "webhook", "url": "https://"}), "no host"),
            (json!({"type": "webhook", "url": "https://h/ x"}), "spaces"),
            (json!({"type": "webhook", "url": "https://h", "method": "GET"}), "method"),
            (json!({"type": "webhook", "url": "https://h", "headers": {"a": 1}}), "must be a string"),
            (json!({"type": "webhook", "url": "https://h", "headers": {"a": "x\r\ny: z"}}), "not a valid"),
            (json!({"type": "webhook", "url": "https://h", "headers": {"a b": "x"}}), "not a valid"),
            (json!({"type": "webhook", "url": "https://h", "headers": ["a"]}), "object"),
        ] {
            match request(&p) {
                Err(JobError::Permanent { reason }) => assert!(reason.contains(want), "{p}: {reason}"),
                other => panic!("{p}: {other:?}"),
            }
        }
    }

    #[test]
    fn signature_matches_the_standard_webhooks_reference_vector() {
        // The reference vector published with the Standard Webhooks libraries.
        let sig = sign(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            r#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    struct Recorder(RefCell<Vec<HttpRequest>>, Result<HttpResponse, String>);
    impl HttpClient for Recorder {
        async fn send(&self, req: HttpRequest, _timeout_ms: u32) -> Result<HttpResponse, String> {
            self.0.borrow_mut().push(req);
            self.1.clone()
        }
    }

    #[test]
    fn a_signed_delivery_carries_the_standard_headers() {
        let services = Services {
            http: Recorder(RefCell::default(), Ok(resp(200, None))),
            clock: ManualClock::new(1_614_265_330_123),
            webhook_secret: Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
            http_timeout_ms: 30_000,
        };
        let payload =
            json!({"type": "webhook", "url": "http://h/", "body": {"test": 1}, "headers": {"webhook-id": "forged"}});
        block_on(Webhook::run(&JobContext { id: "job-1", attempt: 1, payload: &payload }, &services)).unwrap();
        let sent = services.http.0.borrow();
        let h = |n: &str| sent[0].headers.iter().filter(|(k, _)| k == n).map(|(_, v)| v.clone()).collect::<Vec<_>>();
        assert_eq!(h("webhook-id"), vec!["job-1".to_string()]);
        assert_eq!(h("webhook-timestamp"), vec!["1614265330".to_string()]);
        assert_eq!(
            h("webhook-signature"),
            vec![sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "job-1", 1_614_265_330, r#"{"test":1}"#)]
        );
    }

    #[test]
    fn a_network_error_is_retryable() {
        let services = Services {
            http: Recorder(RefCell::default(), Err("timed out".into())),
            clock: ManualClock::new(0),
            webhook_secret: None,
            http_timeout_ms: 30_000,
        };
        let payload = json!({"type": "webhook", "url": "http://h/", "body": 1});
        let got = block_on(Webhook::run(&JobContext { id: "j", attempt: 1, payload: &payload }, &services));
        assert_eq!(got, Err(JobError::retry("http://h/: timed out")));
        assert!(services.http.0.borrow()[0].headers.iter().all(|(k, _)| !k.starts_with("webhook-")));
    }
}
