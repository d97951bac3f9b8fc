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

use std::net::Ipv4Addr;

use url::{Host, Url};

use super::contract::{Done, HttpClient, HttpRequest, HttpResponse, JobContext, JobError, JobHandler, SendError, Services};
use crate::clock::Clock;
use crate::config::{Config, ConfigError, MAX_DELAY_SECONDS};

/// The `webhook` job type.
pub struct Webhook;

impl JobHandler for Webhook {
    const TYPE: &'static str = "webhook";

    fn check(payload: &Value, cfg: &Config) -> Result<(), JobError> {
        request(payload, cfg.allow_private_targets).map(|_| ())
    }

    async fn run<H: HttpClient, C: Clock>(job: &JobContext<'_>, services: &Services<H, C>) -> Result<Done, JobError> {
        let mut req = request(job.payload, services.allow_private_targets)?;
        if let Some(key) = services.webhook_key.as_deref() {
            let ts = services.clock.now_ms() / 1000;
            let sig = sign(key, job.id, ts, &req.body);
            req.headers.retain(|(n, _)| !n.to_ascii_lowercase().starts_with("webhook-"));
            req.headers.push(("webhook-id".into(), job.id.to_string()));
            req.headers.push(("webhook-timestamp".into(), ts.to_string()));
            req.headers.push(("webhook-signature".into(), sig));
        }
        // The run's trace context, when the job has one, is the one that goes on (design §27).
        if job.trace.is_some() {
            req.headers.retain(|(n, _)| !matches!(n.to_ascii_lowercase().as_str(), "traceparent" | "tracestate"));
            req.headers.extend(job.trace_headers());
        }
        // Errors name the target without its credentials: they end up in the ledger and on the
        // dashboard.
        let shown = redacted(&req.url);
        match services
            .http
            .send(req, job.timeout_ms.map_or(services.http_timeout_ms, |t| t.min(services.http_timeout_ms)))
            .await
        {
            Ok(resp) => classify(&resp, services.retry_after_cap_seconds)
                .map(|()| Done { result: Some(result_of(&resp)), http_status: Some(resp.status) })
                .map_err(|e| with_url(e, &shown)),
            Err(SendError::Network(e)) => Err(JobError::retry(format!("{shown}: {e}"))),
            Err(SendError::Invalid(e)) => Err(JobError::permanent(format!("{shown}: {e}"))),
        }
    }
}

fn with_url(e: JobError, url: &str) -> JobError {
    match e {
        JobError::Retryable { reason, retry_after, http_status } => {
            JobError::Retryable { reason: format!("{url}: {reason}"), retry_after, http_status }
        }
        JobError::Permanent { reason, http_status } => {
            JobError::Permanent { reason: format!("{url}: {reason}"), http_status }
        }
        JobError::Snooze { seconds, reason, http_status, payload } => {
            JobError::Snooze { seconds, reason: format!("{url}: {reason}"), http_status, payload }
        }
    }
}

/// A URL without its userinfo, for messages.
fn redacted(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Err(_) => "(unparsable url)".to_string(),
    }
}

/// Whether `host` is one a webhook must not reach unless `WEBHOOK_ALLOW_PRIVATE` is set:
/// loopback, private, link-local (cloud metadata lives there), unspecified, shared and broadcast
/// addresses, and `localhost` names. A name that resolves to such an address cannot be seen from
/// a Worker; Cloudflare's own egress does not reach private networks.
fn is_private(host: &Host<&str>) -> bool {
    fn v4(ip: Ipv4Addr) -> bool {
        let [a, b, ..] = ip.octets();
        ip.is_loopback()
            || ip.is_private()
            || ip.is_link_local()
            || ip.is_unspecified()
            || ip.is_broadcast()
            || a == 0
            || (a == 100 && (64..128).contains(&b))
    }
    match host {
        Host::Ipv4(ip) => v4(*ip),
        Host::Ipv6(ip) => {
            let first = ip.segments()[0];
            ip.is_loopback()
                || ip.is_unspecified()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || ip.to_ipv4_mapped().is_some_and(v4)
        }
        Host::Domain(d) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            d == "localhost" || d.ends_with(".localhost")
        }
    }
}

/// RFC 9110 `token`: the characters a header name may have.
fn is_token(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Builds the request from a payload, or says (permanently) what is wrong with it.
pub fn request(payload: &Value, allow_private: bool) -> Result<HttpRequest, JobError> {
    let bad = |m: String| JobError::permanent(format!("bad webhook payload: {m}"));
    let raw = payload.get("url").and_then(Value::as_str).ok_or_else(|| bad("\"url\" must be a string".into()))?;
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("url has spaces or control characters".into()));
    }
    let url = Url::parse(raw).map_err(|e| bad(format!("url is not valid: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(format!("url scheme {:?} is not http(s)", url.scheme())));
    }
    let host = url.host().ok_or_else(|| bad("url has no host".into()))?;
    if !allow_private && is_private(&host) {
        return Err(bad(format!(
            "url host {host} is a loopback, private or link-local address (set WEBHOOK_ALLOW_PRIVATE=true to allow)"
        )));
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
                if !is_token(name) || !crate::envelope::is_header_value(value) {
                    return Err(bad(format!("header {name:?} is not a valid HTTP header")));
                }
                headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
                headers.push((name.clone(), value.clone()));
            }
        }
        Some(_) => return Err(bad("\"headers\" must be an object of strings".into())),
    }
    let body = payload.get("body").unwrap_or(&Value::Null).to_string();
    Ok(HttpRequest {
        method: method.into(),
        url: url.to_string(),
        headers,
        body,
        via: None,
        read_limit: super::contract::RESPONSE_START_BYTES,
    })
}

/// The signing key of a secret (`WEBHOOK_SECRET`, `HANDLER_SECRET`, named by `var`): a `whsec_`
/// secret is base64 of the key (the Standard Webhooks form), any other secret is the key's bytes.
/// A `whsec_` secret that is not base64 is a configuration error (every signature made with it
/// would be wrong).
pub fn signing_key(var: &'static str, secret: &str) -> Result<Vec<u8>, ConfigError> {
    match secret.strip_prefix("whsec_") {
        Some(b) => B64.decode(b.trim()).map_err(|_| ConfigError {
            var,
            value: "whsec_…".to_string(),
            reason: "the part after whsec_ is not base64".into(),
        }),
        None => Ok(secret.as_bytes().to_vec()),
    }
}

/// The webhooks' key and the service handlers' key, each if its secret is set.
pub type SigningKeys = (Option<Vec<u8>>, Option<Vec<u8>>);

/// The keys that sign webhooks (`WEBHOOK_SECRET`) and service-handler calls (`HANDLER_SECRET`),
/// each if its secret is set. One secret for both is refused: every receiver of a webhook holds
/// the webhooks' key, and could sign a call to a handler with it.
pub fn signing_keys(webhook_secret: Option<&str>, handler_secret: Option<&str>) -> Result<SigningKeys, ConfigError> {
    let webhook = webhook_secret.map(|s| signing_key("WEBHOOK_SECRET", s)).transpose()?;
    let handler = handler_secret.map(|s| signing_key("HANDLER_SECRET", s)).transpose()?;
    if webhook.is_some() && webhook == handler {
        return Err(ConfigError {
            var: "HANDLER_SECRET",
            value: "(the same key as WEBHOOK_SECRET)".into(),
            reason: "it must differ from WEBHOOK_SECRET, which every webhook receiver holds".into(),
        });
    }
    Ok((webhook, handler))
}

/// Standard Webhooks signature: `v1,` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")).
pub fn sign(key: &[u8], id: &str, timestamp_s: i64, body: &str) -> String {
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    mac.update(format!("{id}.{timestamp_s}.{body}").as_bytes());
    format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
}

/// A delivered webhook's result (design §12): the receiver's status, content type and the start of
/// its body.
pub fn result_of(resp: &HttpResponse) -> Value {
    serde_json::json!({
        "status": resp.status,
        "content_type": resp.content_type,
        "body": resp.body_start,
    })
}

/// Turns a response into success, a retry, or a permanent failure. A redirect is permanent:
/// following it would turn a POST into a bodiless GET, or send the signed body to another host.
pub fn classify(resp: &HttpResponse, retry_after_cap: u32) -> Result<(), JobError> {
    let s = resp.status;
    match s {
        200..=299 => Ok(()),
        300..=399 => {
            Err(JobError::Permanent { reason: format!("HTTP {s} (redirects are not followed)"), http_status: Some(s) })
        }
        408 | 429 | 500..=599 => {
            let honoured = matches!(s, 429 | 503);
            let retry_after = if honoured {
                resp.retry_after.as_deref().and_then(retry_after_seconds).map(|r| r.min(retry_after_cap))
            } else {
                None
            };
            Err(JobError::Retryable { reason: format!("HTTP {s}"), retry_after, http_status: Some(s) })
        }
        _ => Err(JobError::Permanent { reason: format!("HTTP {s}"), http_status: Some(s) }),
    }
}

/// `Retry-After` as delay-seconds (RFC 9110: digits only; the HTTP-date form is not used by the
/// services we call back and falls back to backoff), capped at the Queues maximum. `0` also falls
/// back to backoff: retrying at once would spend every attempt in moments.
pub fn retry_after_seconds(v: &str) -> Option<u32> {
    let v = v.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = v.parse().unwrap_or(u64::MAX);
    (n > 0).then(|| n.min(u64::from(MAX_DELAY_SECONDS)) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::Cancellation;
    use crate::clock::ManualClock;
    use futures::executor::block_on;
    use serde_json::json;
    use std::cell::RefCell;

    fn resp(status: u16, retry_after: Option<&str>) -> HttpResponse {
        HttpResponse {
            status,
            retry_after: retry_after.map(str::to_string),
            content_type: None,
            body_start: String::new(),
            snooze: None,
            own_words: false,
        }
    }

    #[test]
    fn statuses_are_classified_per_spec() {
        assert_eq!(classify(&resp(200, None), 3600), Ok(()));
        assert_eq!(classify(&resp(204, None), 3600), Ok(()));
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(matches!(classify(&resp(s, None), 3600), Err(JobError::Retryable { .. })), "{s}");
        }
        for s in [301, 400, 401, 404, 410, 422] {
            assert!(matches!(classify(&resp(s, None), 3600), Err(JobError::Permanent { .. })), "{s}");
        }
    }

    #[test]
    fn retry_after_is_honoured_on_429_and_503_only() {
        assert_eq!(
            classify(&resp(429, Some("17")), 3600),
            Err(JobError::Retryable { reason: "HTTP 429".into(), retry_after: Some(17), http_status: Some(429) })
        );
        assert_eq!(
            classify(&resp(503, Some(" 5 ")), 3600),
            Err(JobError::Retryable { reason: "HTTP 503".into(), retry_after: Some(5), http_status: Some(503) })
        );
        assert_eq!(
            classify(&resp(500, Some("17")), 3600),
            Err(JobError::Retryable { reason: "HTTP 500".into(), retry_after: None, http_status: Some(500) })
        );
        assert_eq!(retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        // Digits only; 0 would retry at once and spend every attempt: backoff instead.
        for v in ["0", "+30", "-1", "3.5", ""] {
            assert_eq!(retry_after_seconds(v), None, "{v:?}");
        }
        assert_eq!(retry_after_seconds(" 30 "), Some(30));
        assert_eq!(retry_after_seconds("99999999999999999999999"), Some(MAX_DELAY_SECONDS));
        assert_eq!(retry_after_seconds("999999"), Some(MAX_DELAY_SECONDS));
    }

    #[test]
    fn request_is_built_from_the_payload() {
        let req = request(
            &json!({"type": "webhook", "url": "https://h.test/x", "body": {"a": [1]}, "method": "put",
            "headers": {"X-Trace": "t1", "Content-Type": "application/activity+json"}}),
            false,
        )
        .unwrap();
        assert_eq!(req.method, "PUT");
        assert_eq!(req.url, "https://h.test/x");
        assert_eq!(req.body, r#"{"a":[1]}"#);
        assert_eq!(
            req.headers,
            vec![("X-Trace".into(), "t1".into()), ("Content-Type".into(), "application/activity+json".into())],
            "headers in the order given; the default content type replaced"
        );
    }

    #[test]
    fn a_body_keeps_its_numbers_and_key_order_exactly() {
        let payload: Value = serde_json::from_str(
            r#"{"type": "webhook", "url": "https://h.test/", "body": {"z": 9007199254740993, "a": 1.0, "m": 0.1}}"#,
        )
        .unwrap();
        assert_eq!(request(&payload, false).unwrap().body, r#"{"z":9007199254740993,"a":1.0,"m":0.1}"#);
    }

    #[test]
    fn bad_payloads_are_permanent_with_a_reason() {
        for (p, want) in [
            (json!({"type": "webhook"}), "url"),
            (json!({"type": "webhook", "url": "ftp://h/x"}), "not http"),
            (json!({"type": "webhook", "url": "https://"}), "not valid"),
            (json!({"type": "webhook", "url": "https://h/ x"}), "spaces"),
            (json!({"type": "webhook", "url": "http://h:99999/"}), "not valid"),
            (json!({"type": "webhook", "url": "http://[::1/x"}), "not valid"),
            (json!({"type": "webhook", "url": "http://%zz/"}), "not valid"),
            (json!({"type": "webhook", "url": "http://h/", "headers": {"x(y": "v"}}), "not a valid"),
            (json!({"type": "webhook", "url": "http://h/", "headers": {"x": "a\u{0}b"}}), "not a valid"),
            (json!({"type": "webhook", "url": "http://127.0.0.1/"}), "loopback, private"),
            (json!({"type": "webhook", "url": "http://169.254.169.254/latest"}), "loopback, private"),
            (json!({"type": "webhook", "url": "http://10.1.2.3/"}), "loopback, private"),
            (json!({"type": "webhook", "url": "http://192.168.0.1/"}), "loopback, private"),
            (json!({"type": "webhook", "url": "http://localhost:8787/"}), "loopback, private"),
            (json!({"type": "webhook", "url": "http://[::1]/"}), "loopback, private"),
            (json!({"type": "webhook", "url": "http://[fd00::1]/"}), "loopback, private"),
            (json!({"type": "webhook", "url": "http://[::ffff:127.0.0.1]/"}), "loopback, private"),
            (json!({"type": "webhook", "url": "http://0x7f.1/"}), "loopback, private"),
            (json!({"type": "webhook", "url": "https://h", "method": "GET"}), "method"),
            (json!({"type": "webhook", "url": "https://h", "headers": {"a": 1}}), "must be a string"),
            (json!({"type": "webhook", "url": "https://h", "headers": {"a": "x\r\ny: z"}}), "not a valid"),
            (json!({"type": "webhook", "url": "https://h", "headers": {"a": "\u{263a}"}}), "not a valid"),
            (json!({"type": "webhook", "url": "https://h", "headers": {"a b": "x"}}), "not a valid"),
            (json!({"type": "webhook", "url": "https://h", "headers": ["a"]}), "object"),
        ] {
            match request(&p, false) {
                Err(JobError::Permanent { reason, .. }) => assert!(reason.contains(want), "{p}: {reason}"),
                other => panic!("{p}: {other:?}"),
            }
        }
    }

    #[test]
    fn private_targets_are_allowed_only_when_configured() {
        let p = json!({"type": "webhook", "url": "http://127.0.0.1:9/"});
        assert!(request(&p, false).is_err());
        assert!(request(&p, true).is_ok());
        assert!(request(&json!({"type": "webhook", "url": "https://example.com/x"}), false).is_ok());
    }

    #[test]
    fn redirects_are_permanent_and_retry_after_is_capped() {
        assert!(
            matches!(classify(&resp(302, None), 3600), Err(JobError::Permanent { reason, .. }) if reason.contains("redirects"))
        );
        assert!(matches!(classify(&resp(307, None), 3600), Err(JobError::Permanent { .. })));
        assert_eq!(
            classify(&resp(503, Some("999999")), 3600),
            Err(JobError::Retryable { reason: "HTTP 503".into(), retry_after: Some(3600), http_status: Some(503) })
        );
    }

    #[test]
    fn a_malformed_whsec_secret_is_a_configuration_error() {
        assert_eq!(signing_key("WEBHOOK_SECRET", "whsec_!!not base64!!").unwrap_err().var, "WEBHOOK_SECRET");
        assert_eq!(signing_key("WEBHOOK_SECRET", "raw-secret").unwrap(), b"raw-secret".to_vec());
        // Webhooks and service handlers are signed with keys of their own, never one for both.
        let (w, h) = signing_keys(Some("webhooks-key"), Some("handlers-key")).unwrap();
        assert_eq!((w.as_deref(), h.as_deref()), (Some(&b"webhooks-key"[..]), Some(&b"handlers-key"[..])));
        assert_eq!(signing_keys(Some("k"), None).unwrap(), (Some(b"k".to_vec()), None));
        let same = signing_keys(
            Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        );
        assert_eq!(same.unwrap_err().var, "HANDLER_SECRET");
        assert_eq!(signing_keys(None, Some("whsec_!!")).unwrap_err().var, "HANDLER_SECRET");
    }

    #[test]
    fn credentials_in_a_url_never_reach_an_error() {
        let services = Services {
            http: Recorder(RefCell::default(), Ok(resp(404, None))),
            clock: ManualClock::new(0),
            webhook_key: None,
            handler_key: None,
            allow_private_targets: false,
            retry_after_cap_seconds: 3600,
            http_timeout_ms: 30_000,
            service_handlers: Vec::new(),
        };
        let payload = json!({"type": "webhook", "url": "https://user:hunter2@h.test/x"});
        let err = block_on(Webhook::run(
            &JobContext { id: "j", attempt: 1, payload: &payload, ordering_key: None, priority: 5, timeout_ms: None, cancel: &Cancellation::default(), trace: None },
            &services,
        ))
        .unwrap_err();
        assert!(!err.to_string().contains("hunter2") && !err.to_string().contains("user"), "{err}");
        assert!(err.to_string().contains("h.test/x"), "{err}");
    }

    #[test]
    fn signature_matches_the_standard_webhooks_reference_vector() {
        // The reference vector published with the Standard Webhooks libraries.
        let sig = sign(
            &signing_key("WEBHOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap(),
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            r#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    struct Recorder(RefCell<Vec<HttpRequest>>, Result<HttpResponse, SendError>);
    impl HttpClient for Recorder {
        async fn send(&self, req: HttpRequest, _timeout_ms: u32) -> Result<HttpResponse, SendError> {
            self.0.borrow_mut().push(req);
            self.1.clone()
        }
    }

    #[test]
    fn a_signed_delivery_carries_the_standard_headers() {
        let services = Services {
            http: Recorder(RefCell::default(), Ok(resp(200, None))),
            clock: ManualClock::new(1_614_265_330_123),
            webhook_key: Some(signing_key("WEBHOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap()),
            handler_key: None,
            allow_private_targets: false,
            retry_after_cap_seconds: 3600,
            http_timeout_ms: 30_000,
            service_handlers: Vec::new(),
        };
        let payload =
            json!({"type": "webhook", "url": "http://h/", "body": {"test": 1}, "headers": {"webhook-id": "forged"}});
        let done = block_on(Webhook::run(
            &JobContext {
                id: "job-1",
                attempt: 1,
                payload: &payload,
                ordering_key: None,
                priority: 5,
                timeout_ms: None,
                cancel: &Cancellation::default(),
                trace: None,
            },
            &services,
        ))
        .unwrap();
        assert_eq!(done.http_status, Some(200));
        assert_eq!(done.result, Some(json!({"status": 200, "content_type": null, "body": ""})));
        let sent = services.http.0.borrow();
        let h = |n: &str| sent[0].headers.iter().filter(|(k, _)| k == n).map(|(_, v)| v.clone()).collect::<Vec<_>>();
        assert_eq!(h("webhook-id"), vec!["job-1".to_string()]);
        assert_eq!(h("webhook-timestamp"), vec!["1614265330".to_string()]);
        assert_eq!(
            h("webhook-signature"),
            vec![sign(
                &signing_key("WEBHOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap(),
                "job-1",
                1_614_265_330,
                r#"{"test":1}"#
            )]
        );
    }

    #[test]
    fn a_network_error_is_retryable() {
        let services = Services {
            http: Recorder(RefCell::default(), Err(SendError::Network("timed out".into()))),
            clock: ManualClock::new(0),
            webhook_key: None,
            handler_key: None,
            allow_private_targets: false,
            retry_after_cap_seconds: 3600,
            http_timeout_ms: 30_000,
            service_handlers: Vec::new(),
        };
        let payload = json!({"type": "webhook", "url": "http://h/", "body": 1});
        let got = block_on(Webhook::run(
            &JobContext { id: "j", attempt: 1, payload: &payload, ordering_key: None, priority: 5, timeout_ms: None, cancel: &Cancellation::default(), trace: None },
            &services,
        ));
        assert_eq!(got, Err(JobError::retry("http://h/: timed out")));
        assert!(services.http.0.borrow()[0].headers.iter().all(|(k, _)| !k.starts_with("webhook-")));
    }
}
