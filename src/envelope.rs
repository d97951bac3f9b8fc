//! Message envelopes: what a queue message body means, and how orderly writes one.
//!
//! Reads Fedify's `@fedify/cfworkers` form (`__fedify_ordering_key__` / `__fedify_payload__`), any other
//! JSON body as a bare payload, and orderly's own `__orderly_job__` metadata, which rides beside the
//! payload and never leaks into it. Pure: no I/O. A body that cannot be read is an
//! [`EnvelopeError`]; the consumer records it DEAD with that reason, it never crashes a batch.

use serde_json::{Map, Value};
use thiserror::Error;

use crate::bounds::{MAX_PRIORITY, MAX_TIMEOUT_SECONDS};

/// Fedify's ordering key field.
pub const ORDERING_KEY_FIELD: &str = "__fedify_ordering_key__";
/// Fedify's payload field.
pub const PAYLOAD_FIELD: &str = "__fedify_payload__";
/// orderly's metadata field.
pub const JOB_FIELD: &str = "__orderly_job__";
/// Job options only a submission through the ledger can honour (design §22.3, §22.4, §24: a
/// message sent straight to the queue is recorded only when delivered, too late to refuse its
/// sender a dependency on an unknown job).
const SUBMISSION_ONLY: [&str; 5] = ["on_duplicate", "debounce_seconds", "debounce_max_seconds", "after", "after_dead"];
/// Longest ordering key, job id or dedupe key accepted (KV keys are limited to 512 bytes).
pub const MAX_KEY_BYTES: usize = 256;
/// Largest message body accepted, as JSON text. Queues caps a message at 128,000 bytes, but a
/// body sent in another content type (`v8`) can grow when read as JSON (a sparse array of a few
/// bytes is megabytes of `null`s); past this it is recorded DEAD without its payload, so it can
/// never sink its batch-mates' D1 round trip.
pub const MAX_BODY_JSON_BYTES: usize = 256_000;
/// Job ids that no URL `/jobs/{id}` can reach.
pub const RESERVED_IDS: [&str; 4] = ["counts", "activity", ".", ".."];
/// Highest per-job `max_attempts`.
pub const MAX_ATTEMPTS_LIMIT: u32 = 1000;

/// A decoded message: the job it asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// Per-key ordering; `None` runs unordered.
    pub ordering_key: Option<String>,
    /// The handler's input; its `type` string selects the handler.
    pub payload: Value,
    /// orderly's metadata, all optional.
    pub meta: JobMeta,
}

/// `__orderly_job__`: identity and limits a producer may set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobMeta {
    /// Job id; the queue message id when absent.
    pub id: Option<String>,
    /// At most one active (PENDING/RUNNING) job per dedupe key.
    pub dedupe_key: Option<String>,
    /// The limit key whose flow-control policy holds the job's start back (design §20).
    pub limit_key: Option<String>,
    /// Overrides the `MAX_ATTEMPTS` var for this job.
    pub max_attempts: Option<u32>,
    /// 0 most urgent .. 9; 5 when absent (design §12).
    pub priority: Option<u8>,
    /// No attempt starts at or after this, ms since the epoch: one due later is DEAD, "expired"
    /// (design §20).
    pub deadline_at: Option<i64>,
    /// A run taking longer is stopped and fails, retryable; 1..=300, and never longer than
    /// `WEBHOOK_TIMEOUT_SECONDS` (design §20).
    pub timeout_seconds: Option<u32>,
    /// When the job's first message was sent (ms), written by orderly when it sends a waiting
    /// job's message again (design §3): a key's messages keep their order in a batch, whose
    /// members are planned by send time, though a re-sent one has a new one.
    pub queued_at: Option<i64>,
    /// Written by orderly on the message that wakes a job parked in its limit key's line (design
    /// §20.10): strict mode makes that job due at the message's delivery, in the same transaction
    /// as the claim, if it is still parked.
    pub woken: bool,
}

/// Why a body cannot be read. Permanent: the same bytes will never decode, so the job is DEAD.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EnvelopeError {
    /// An envelope field has the wrong type or value.
    #[error("bad envelope: {0}")]
    BadField(String),
}

impl Envelope {
    /// The payload's `type`, if it is an object with a string `type`.
    pub fn job_type(&self) -> Option<&str> {
        self.payload.get("type").and_then(Value::as_str)
    }

    /// Reads a message body (already JSON) into an envelope.
    pub fn decode(body: Value) -> Result<Envelope, EnvelopeError> {
        let Value::Object(mut obj) = body else {
            // Fedify's backward-compatible path: any other JSON is the payload itself.
            return Ok(Envelope { ordering_key: None, payload: body, meta: JobMeta::default() });
        };
        let meta = match obj.remove(JOB_FIELD) {
            None => JobMeta::default(),
            Some(m) => decode_meta(m)?,
        };
        let is_fedify = obj.contains_key(PAYLOAD_FIELD) || obj.contains_key(ORDERING_KEY_FIELD);
        if !is_fedify {
            return Ok(Envelope { ordering_key: None, payload: Value::Object(obj), meta });
        }
        let ordering_key = match obj.remove(ORDERING_KEY_FIELD) {
            None | Some(Value::Null) => None,
            Some(Value::String(k)) => Some(checked_key(ORDERING_KEY_FIELD, k)?),
            Some(other) => return Err(bad(format!("{ORDERING_KEY_FIELD} must be a string, got {}", kind(&other)))),
        };
        let payload =
            obj.remove(PAYLOAD_FIELD).ok_or_else(|| bad(format!("{ORDERING_KEY_FIELD} without {PAYLOAD_FIELD}")))?;
        Ok(Envelope { ordering_key, payload, meta })
    }

    /// Writes the envelope orderly sends: Fedify's form, so Fedify-aware consumers read it too.
    pub fn encode(&self) -> Value {
        let mut obj = Map::new();
        if let Some(k) = &self.ordering_key {
            obj.insert(ORDERING_KEY_FIELD.into(), Value::String(k.clone()));
        }
        obj.insert(PAYLOAD_FIELD.into(), self.payload.clone());
        let mut meta = Map::new();
        if let Some(id) = &self.meta.id {
            meta.insert("id".into(), Value::String(id.clone()));
        }
        if let Some(d) = &self.meta.dedupe_key {
            meta.insert("dedupe_key".into(), Value::String(d.clone()));
        }
        if let Some(l) = &self.meta.limit_key {
            meta.insert("limit_key".into(), Value::String(l.clone()));
        }
        if let Some(m) = self.meta.max_attempts {
            meta.insert("max_attempts".into(), Value::from(m));
        }
        if let Some(p) = self.meta.priority {
            meta.insert("priority".into(), Value::from(p));
        }
        if let Some(at) = self.meta.deadline_at {
            meta.insert("deadline_at".into(), Value::from(at));
        }
        if let Some(t) = self.meta.timeout_seconds {
            meta.insert("timeout_seconds".into(), Value::from(t));
        }
        if let Some(at) = self.meta.queued_at {
            meta.insert("queued_at".into(), Value::from(at));
        }
        if self.meta.woken {
            meta.insert("woken".into(), Value::Bool(true));
        }
        if !meta.is_empty() {
            obj.insert(JOB_FIELD.into(), Value::Object(meta));
        }
        Value::Object(obj)
    }
}

fn decode_meta(m: Value) -> Result<JobMeta, EnvelopeError> {
    let Value::Object(mut m) = m else {
        return Err(bad(format!("{JOB_FIELD} must be an object, got {}", kind(&m))));
    };
    let text = |m: &mut Map<String, Value>, field: &str| -> Result<Option<String>, EnvelopeError> {
        match m.remove(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => checked_key(field, s).map(Some),
            Some(other) => Err(bad(format!("{JOB_FIELD}.{field} must be a string, got {}", kind(&other)))),
        }
    };
    let id = text(&mut m, "id")?.map(|id| checked_id(&format!("{JOB_FIELD}.id"), id)).transpose()?;
    if let Some(id) = id.as_deref().filter(|id| RESERVED_IDS.contains(id)) {
        // `GET /jobs/counts` is a route, and URLs fold `.` and `..` away: such a job could never
        // be fetched or redriven.
        return Err(bad(format!("{JOB_FIELD}.id {id:?} is reserved")));
    }
    let dedupe_key = text(&mut m, "dedupe_key")?;
    // Superseding and debouncing change a job the ledger already holds, before anything is sent
    // (design §22.3): options of a submission, never of a message already on the queue.
    if let Some(field) = SUBMISSION_ONLY.iter().find(|f| m.contains_key(**f)) {
        return Err(bad(format!(
            "{JOB_FIELD}.{field} is an option of a submission (POST /jobs, the JS client's enqueue, the Rust Enqueue), not of a message sent straight to the queue"
        )));
    }
    let limit_key = text(&mut m, "limit_key")?;
    let max_attempts = match m.remove("max_attempts") {
        None | Some(Value::Null) => None,
        Some(v) => Some(checked_max_attempts(&v).map_err(|e| bad(format!("{JOB_FIELD}.{e}")))?),
    };
    let priority = match m.remove("priority") {
        None | Some(Value::Null) => None,
        Some(v) => Some(checked_priority(&v).map_err(|e| bad(format!("{JOB_FIELD}.{e}")))?),
    };
    let ms = |m: &mut Map<String, Value>, field: &str| match m.remove(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .filter(|&ms| ms >= 0)
            .map(Some)
            .ok_or_else(|| bad(format!("{JOB_FIELD}.{field} must be a whole number of milliseconds, got {v}"))),
    };
    let deadline_at = ms(&mut m, "deadline_at")?;
    let timeout_seconds = match m.remove("timeout_seconds") {
        None | Some(Value::Null) => None,
        Some(v) => Some(checked_timeout(&v).map_err(|e| bad(format!("{JOB_FIELD}.{e}")))?),
    };
    let queued_at = ms(&mut m, "queued_at")?;
    let woken = match m.remove("woken") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(other) => return Err(bad(format!("{JOB_FIELD}.woken must be true or false, got {}", kind(&other)))),
    };
    Ok(JobMeta { id, dedupe_key, limit_key, max_attempts, priority, deadline_at, timeout_seconds, queued_at, woken })
}

/// Why a message body is not JSON (bytes, no body, a value JSON cannot hold), as the edge read it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BodyError(pub String);

impl From<&str> for BodyError {
    fn from(why: &str) -> Self {
        BodyError(why.to_string())
    }
}

/// A whole-number field outside its range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} must be a whole number from {low}{low_means} to {high}, got {got}")]
pub struct OutOfRange {
    /// The field.
    pub field: &'static str,
    /// The least allowed.
    pub low: u64,
    /// What the least means, if it needs saying.
    pub low_means: &'static str,
    /// The most allowed.
    pub high: u64,
    /// The value given, as JSON.
    pub got: String,
}

fn whole_in(field: &'static str, v: &Value, low: u64, low_means: &'static str, high: u64) -> Result<u64, OutOfRange> {
    v.as_u64().filter(|n| (low..=high).contains(n)).ok_or_else(|| OutOfRange {
        field,
        low,
        low_means,
        high,
        got: v.to_string(),
    })
}

/// Checks a `priority` value: a whole number in 0..=9. Shared with the HTTP API.
pub fn checked_priority(v: &Value) -> Result<u8, OutOfRange> {
    let n = whole_in("priority", v, 0, " (most urgent)", u64::from(MAX_PRIORITY))?;
    Ok(u8::try_from(n).unwrap_or(MAX_PRIORITY))
}

/// Checks a `max_attempts` value: a whole number in 1..=1000. Shared with the HTTP API.
pub fn checked_max_attempts(v: &Value) -> Result<u32, OutOfRange> {
    let n = whole_in("max_attempts", v, 1, "", u64::from(MAX_ATTEMPTS_LIMIT))?;
    Ok(u32::try_from(n).unwrap_or(MAX_ATTEMPTS_LIMIT))
}

/// Checks a `timeout_seconds` value: a whole number in 1..=300. Shared with the HTTP API.
pub fn checked_timeout(v: &Value) -> Result<u32, OutOfRange> {
    let n = whole_in("timeout_seconds", v, 1, "", u64::from(MAX_TIMEOUT_SECONDS))?;
    Ok(u32::try_from(n).unwrap_or(MAX_TIMEOUT_SECONDS))
}

/// Checks an id-like string (ordering key, job id, dedupe key): non-empty, at most 256 bytes.
pub fn checked_key(field: &str, s: String) -> Result<String, EnvelopeError> {
    if s.is_empty() {
        return Err(bad(format!("{field} must not be empty")));
    }
    if s.len() > MAX_KEY_BYTES {
        return Err(bad(format!("{field} is longer than {MAX_KEY_BYTES} bytes")));
    }
    Ok(s)
}

/// Checks a job id beyond [`checked_key`]: it travels in HTTP headers (`orderly-job-id`,
/// `webhook-id`), so it may hold only what a header value can carry. Refused at submission, not
/// found out at the first run.
pub fn checked_id(field: &str, id: String) -> Result<String, EnvelopeError> {
    if !is_header_value(&id) {
        return Err(bad(format!(
            "{field} has a character an HTTP header cannot carry (a control character, or one above U+00FF): \
             it is sent in the orderly-job-id and webhook-id headers"
        )));
    }
    Ok(id)
}

/// Whether `value` can be an HTTP header value as Workers' `Headers` take one: visible characters
/// up to U+00FF, spaces and tabs; never CR, LF, NUL or another control character.
pub fn is_header_value(value: &str) -> bool {
    value.chars().all(|c| c == ' ' || c == '\t' || (!c.is_control() && c != '\u{7f}' && c <= '\u{ff}'))
}

fn bad(msg: String) -> EnvelopeError {
    EnvelopeError::BadField(msg)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_a_header_cannot_carry_are_refused() {
        for id in ["a\nb", "a\rb", "a\u{0}b", "\u{100}", "emoji-\u{1F600}", "del\u{7f}"] {
            let err = Envelope::decode(serde_json::json!({"type": "t", JOB_FIELD: {"id": id}})).unwrap_err();
            assert!(
                err.to_string().contains("__orderly_job__.id has a character an HTTP header cannot carry"),
                "{id:?}: {err}"
            );
        }
        for id in ["job 1", "caf\u{e9}", "a/b:c"] {
            assert!(Envelope::decode(serde_json::json!({"type": "t", JOB_FIELD: {"id": id}})).is_ok(), "{id:?}");
        }
    }

    #[test]
    fn ids_no_url_can_reach_are_refused() {
        for id in RESERVED_IDS {
            let body = serde_json::json!({"type": "t", JOB_FIELD: {"id": id}});
            let err = Envelope::decode(body).unwrap_err();
            assert!(err.to_string().contains("reserved"), "{id}: {err}");
        }
        assert!(Envelope::decode(serde_json::json!({"type": "t", JOB_FIELD: {"id": "counts-1"}})).is_ok());
    }
    use serde_json::json;

    #[test]
    fn priority_rides_in_the_metadata_and_is_checked() {
        let e = Envelope::decode(json!({"type": "t", JOB_FIELD: {"priority": 0}})).unwrap();
        assert_eq!(e.meta.priority, Some(0));
        assert_eq!(Envelope::decode(e.encode()).unwrap().meta.priority, Some(0), "round trip");
        for bad in [json!(10), json!(-1), json!(1.5), json!("1")] {
            let err = Envelope::decode(json!({"type": "t", JOB_FIELD: {"priority": bad}})).unwrap_err();
            assert!(err.to_string().contains("priority must be"), "{bad}: {err}");
        }
    }

    #[test]
    fn fedify_form_gives_key_and_payload() {
        let e = Envelope::decode(
            json!({"__fedify_ordering_key__": "actor:1", "__fedify_payload__": {"type": "webhook", "n": 1}}),
        )
        .unwrap();
        assert_eq!(e.ordering_key.as_deref(), Some("actor:1"));
        assert_eq!(e.payload, json!({"type": "webhook", "n": 1}));
        assert_eq!(e.job_type(), Some("webhook"));
    }

    #[test]
    fn fedify_form_without_key_is_unordered() {
        let e = Envelope::decode(json!({"__fedify_payload__": [1, 2]})).unwrap();
        assert_eq!(e.ordering_key, None);
        assert_eq!(e.payload, json!([1, 2]));
        let e = Envelope::decode(json!({"__fedify_ordering_key__": null, "__fedify_payload__": 3})).unwrap();
        assert_eq!(e.ordering_key, None);
    }

    #[test]
    fn any_other_json_is_the_payload_unchanged() {
        for body in
            [json!({"type": "x", "deep": {"a": [1, {"b": null}]}}), json!([1]), json!("s"), json!(7), json!(null)]
        {
            let e = Envelope::decode(body.clone()).unwrap();
            assert_eq!(e.payload, body);
            assert_eq!(e.ordering_key, None);
        }
    }

    #[test]
    fn orderly_metadata_never_leaks_into_the_payload() {
        let e = Envelope::decode(
            json!({"type": "t", "__orderly_job__": {"id": "j1", "dedupe_key": "d", "max_attempts": 3}}),
        )
        .unwrap();
        assert_eq!(e.payload, json!({"type": "t"}));
        assert_eq!(
            e.meta,
            JobMeta {
                id: Some("j1".into()),
                dedupe_key: Some("d".into()),
                limit_key: None,
                max_attempts: Some(3),
                priority: None,
                deadline_at: None,
                timeout_seconds: None,
                queued_at: None,
                woken: false,
            }
        );
        let e = Envelope::decode(json!({"__fedify_payload__": {"a": 1}, "__orderly_job__": {"id": "j2"}})).unwrap();
        assert_eq!(e.payload, json!({"a": 1}));
        assert_eq!(e.meta.id.as_deref(), Some("j2"));
    }

    #[test]
    fn encode_then_decode_round_trips() {
        let e = Envelope {
            ordering_key: Some("k".into()),
            payload: json!({"type": "webhook", "__fedify_payload__": "inner keys survive"}),
            meta: JobMeta {
                id: Some("id".into()),
                dedupe_key: None,
                limit_key: Some("example.com".into()),
                max_attempts: Some(2),
                priority: None,
                deadline_at: Some(1_764_603_600_000),
                timeout_seconds: Some(20),
                queued_at: Some(1_764_600_000_000),
                woken: true,
            },
        };
        assert_eq!(Envelope::decode(e.encode()).unwrap(), e);
        for (meta, want) in [
            (json!({"deadline_at": -5}), "deadline_at must be a whole number of milliseconds"),
            (json!({"timeout_seconds": 0}), "timeout_seconds must be a whole number from 1 to 300"),
            (json!({"timeout_seconds": 301}), "timeout_seconds must be a whole number from 1 to 300"),
        ] {
            let err = Envelope::decode(json!({"__orderly_job__": meta})).unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
        }
        for bad in [json!(-1), json!(1.5), json!("soon")] {
            let err = Envelope::decode(json!({"__orderly_job__": {"queued_at": bad}})).unwrap_err();
            assert!(err.to_string().contains("queued_at must be a whole number"), "{err}");
        }
        let plain = Envelope { ordering_key: None, payload: json!(null), meta: JobMeta::default() };
        assert_eq!(Envelope::decode(plain.encode()).unwrap(), plain);
    }

    #[test]
    fn malformed_envelopes_are_refused_with_a_reason() {
        let cases = [
            (json!({"__fedify_ordering_key__": 5, "__fedify_payload__": {}}), "must be a string"),
            (json!({"__fedify_ordering_key__": "", "__fedify_payload__": {}}), "must not be empty"),
            (json!({"__fedify_ordering_key__": "k".repeat(300), "__fedify_payload__": {}}), "longer than"),
            (json!({"__fedify_ordering_key__": "k"}), "without __fedify_payload__"),
            (json!({"__fedify_ordering_key__": ["k"], "__fedify_payload__": 1}), "got an array"),
            (json!({"type": "t", "__orderly_job__": "id"}), "must be an object"),
            (json!({"type": "t", "__orderly_job__": {"id": 9}}), "id must be a string"),
            (json!({"type": "t", "__orderly_job__": {"id": ""}}), "must not be empty"),
            (json!({"type": "t", "__orderly_job__": {"dedupe_key": true}}), "dedupe_key must be a string"),
            (json!({"type": "t", "__orderly_job__": {"dedupe_key": "d", "on_duplicate": "replace"}}), "on_duplicate is an option of a submission"),
            (json!({"type": "t", "__orderly_job__": {"dedupe_key": "d", "debounce_seconds": 2}}), "debounce_seconds is an option"),
            (json!({"type": "t", "__orderly_job__": {"after": ["a"]}}), "after is an option of a submission"),
            (json!({"type": "t", "__orderly_job__": {"max_attempts": 0}}), "max_attempts"),
            (json!({"type": "t", "__orderly_job__": {"max_attempts": 2.5}}), "max_attempts"),
            (json!({"type": "t", "__orderly_job__": {"max_attempts": "3"}}), "max_attempts"),
            (json!({"type": "t", "__orderly_job__": {"max_attempts": 5000}}), "max_attempts"),
        ];
        for (body, expect) in cases {
            let err = Envelope::decode(body.clone()).expect_err(&body.to_string());
            assert!(err.to_string().contains(expect), "{body}: {err}");
        }
    }

    #[test]
    fn payload_without_a_type_string_has_no_job_type() {
        assert_eq!(Envelope::decode(json!({"type": 3})).unwrap().job_type(), None);
        assert_eq!(Envelope::decode(json!("webhook")).unwrap().job_type(), None);
    }
}
