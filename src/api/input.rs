//! What a request asks for, read and checked before anything is recorded: a submitted job
//! (`POST /jobs`, `App::enqueue`) and a bulk redrive's filter. A refusal names its kind
//! ([`BadInput`]); the HTTP layer turns the kind into a status.

use serde_json::{Map, Value};

use crate::app::JobTypes;
use crate::config::{Config, MAX_DELAY_SECONDS};
use crate::envelope::{
    checked_id, checked_key, checked_max_attempts, checked_priority, checked_timeout, Envelope, JobMeta,
};
use crate::ledger::{AfterDead, CancelFilter, DeadFilter, JobSpec, OnDuplicate, DEFAULT_PRIORITY};
use crate::bounds::MAX_DEADLINE_SECONDS;
use crate::producer::{self, OutMessage, MAX_MESSAGE_BYTES, MAX_PAYLOAD_BYTES};
use crate::seal::FEDIFY_TYPE;
use crate::trace::TraceContext;

/// Why input is refused, nothing recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadInput {
    /// It does not say what it must (HTTP 400).
    #[error("{0}")]
    Invalid(String),
    /// It is over a limit (HTTP 413).
    #[error("{0}")]
    TooLarge(String),
}

impl BadInput {
    /// The HTTP status it is answered with.
    pub fn status(&self) -> u16 {
        match self {
            BadInput::Invalid(_) => 400,
            BadInput::TooLarge(_) => 413,
        }
    }

    fn invalid(why: impl Into<String>) -> Self {
        BadInput::Invalid(why.into())
    }
}

/// A job read from a submission.
pub(super) struct Parsed {
    pub(super) spec: JobSpec,
    pub(super) msg: OutMessage,
    pub(super) delay: u32,
    /// Its payload (and result) are sealed at rest; its message carries no payload.
    pub(super) sensitive: bool,
    /// What it does to an open job holding its dedupe key (design §22.3).
    pub(super) on_duplicate: OnDuplicate,
    /// Debounced (design §22.4): the latest newer submissions may put its start off to, ms.
    pub(super) debounce_until: Option<i64>,
    /// The ids of the jobs it runs after (design §24), unique, not its own.
    pub(super) after: Vec<String>,
    /// What it does when one of them ends DEAD.
    pub(super) after_dead: AfterDead,
    /// A batch's callback, `after` its members (design §25).
    pub(super) batch: bool,
    /// A batch's member: the batch's id (its callback's).
    pub(super) in_batch: Option<String>,
    /// The trace context it belongs to (design §27).
    pub(super) trace: Option<TraceContext>,
}

/// The most jobs one job may run after (design §24): each is a row and a wake-up.
pub const MAX_AFTER: usize = 100;

/// The longest a debounce may hold a job from its first submission: Queues' longest delay.
pub const MAX_DEBOUNCE_SECONDS: u32 = MAX_DELAY_SECONDS;
/// A debounce's cap when none is given: this many quiet periods from the first submission.
pub const DEFAULT_DEBOUNCE_CAP_PERIODS: u32 = 10;

/// A job object's fields besides its payload, each checked.
struct Fields {
    id: String,
    ordering_key: Option<String>,
    dedupe_key: Option<String>,
    limit_key: Option<String>,
    sensitive: bool,
    delay: u32,
    max_attempts: Option<u32>,
    priority: Option<u8>,
    deadline_seconds: Option<u32>,
    timeout_seconds: Option<u32>,
    on_duplicate: OnDuplicate,
    /// (quiet period, cap), seconds.
    debounce: Option<(u32, u32)>,
    after: Vec<String>,
    after_dead: AfterDead,
    trace: Option<TraceContext>,
}

/// Reads `traceparent` and `tracestate` (design §27): the W3C trace context the job belongs to,
/// when its producer gives its own (Fedify's messages carry one); else the request's headers'.
fn trace_fields(o: &mut Map<String, Value>) -> Result<Option<TraceContext>, BadInput> {
    let text = |v: Option<Value>, f: &str| match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(BadInput::invalid(format!("\"{f}\" must be a string"))),
    };
    let parent = text(o.remove("traceparent"), "traceparent")?;
    let state = text(o.remove("tracestate"), "tracestate")?;
    match parent {
        Some(p) => TraceContext::parse(&p, state.as_deref()).map(Some).map_err(|e| BadInput::invalid(e.to_string())),
        None if state.is_some() => Err(BadInput::invalid("\"tracestate\" needs a \"traceparent\"")),
        None => Ok(None),
    }
}

fn key_field(o: &mut Map<String, Value>, f: &str) -> Result<Option<String>, BadInput> {
    match o.remove(f) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => checked_key(f, s).map(Some).map_err(|e| BadInput::invalid(e.to_string())),
        Some(_) => Err(BadInput::invalid(format!("\"{f}\" must be a string"))),
    }
}

/// A whole number of seconds in `low..=high`, if given.
fn seconds_field(o: &mut Map<String, Value>, f: &str, low: u32, high: u32) -> Result<Option<u32>, BadInput> {
    match o.remove(f) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) if (low..=high).contains(&n) => Ok(Some(n)),
            _ => Err(BadInput::invalid(format!("{f} must be a whole number from {low} to {high}"))),
        },
    }
}

/// Reads the fields of a job object (its payload already taken out); any other field is refused.
fn fields(mut o: Map<String, Value>, new_id: String) -> Result<Fields, BadInput> {
    let ordering_key = key_field(&mut o, "ordering_key")?;
    let dedupe_key = key_field(&mut o, "dedupe_key")?;
    let limit_key = key_field(&mut o, "limit_key")?;
    // A caller's own id makes a submission idempotent: the same id again is a duplicate.
    let id = match key_field(&mut o, "id")? {
        Some(id) if crate::envelope::RESERVED_IDS.contains(&id.as_str()) => {
            return Err(BadInput::invalid(format!("id {id:?} is reserved")))
        }
        Some(id) => checked_id("id", id).map_err(|e| BadInput::invalid(e.to_string()))?,
        None => new_id,
    };
    let sensitive = match o.remove("sensitive") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(_) => return Err(BadInput::invalid("\"sensitive\" must be true or false")),
    };
    let delay = seconds_field(&mut o, "delay_seconds", 0, MAX_DELAY_SECONDS)?.unwrap_or(0);
    let (on_duplicate, debounce) = superseding(&mut o, dedupe_key.is_some(), delay)?;
    // A debounced job first waits out its quiet period.
    let delay = debounce.map_or(delay, |(quiet, _)| quiet);
    let invalid = |e: crate::envelope::OutOfRange| BadInput::invalid(e.to_string());
    let max_attempts = match o.remove("max_attempts") {
        None | Some(Value::Null) => None,
        Some(v) => Some(checked_max_attempts(&v).map_err(invalid)?),
    };
    let priority = match o.remove("priority") {
        None | Some(Value::Null) => None,
        Some(v) => Some(checked_priority(&v).map_err(invalid)?),
    };
    let deadline_seconds = seconds_field(&mut o, "deadline_seconds", 1, MAX_DEADLINE_SECONDS)?;
    if deadline_seconds.is_some_and(|d| d <= delay) {
        return Err(BadInput::invalid(
            "deadline_seconds must be later than delay_seconds: the job would expire before it is due",
        ));
    }
    let timeout_seconds = match o.remove("timeout_seconds") {
        None | Some(Value::Null) => None,
        Some(v) => Some(checked_timeout(&v).map_err(invalid)?),
    };
    let (after, after_dead) = dependencies(&mut o, &id)?;
    let trace = trace_fields(&mut o)?;
    if !after.is_empty() && on_duplicate == OnDuplicate::Replace {
        // A replacement lands in the job it replaces, whose waits were fixed when it was recorded.
        return Err(BadInput::invalid("\"after\" cannot be combined with a replacement or a debounce"));
    }
    if let Some(k) = o.keys().next() {
        return Err(BadInput::invalid(format!("unknown field {k:?}")));
    }
    Ok(Fields {
        id,
        ordering_key,
        dedupe_key,
        limit_key,
        sensitive,
        delay,
        max_attempts,
        priority,
        deadline_seconds,
        timeout_seconds,
        on_duplicate,
        debounce,
        after,
        after_dead,
        trace,
    })
}

/// Reads `after` and `after_dead` (design §24): the ids of the jobs this one runs after, at most
/// [`MAX_AFTER`], none twice and not its own; whether they exist is the submission's to check.
fn dependencies(o: &mut Map<String, Value>, id: &str) -> Result<(Vec<String>, AfterDead), BadInput> {
    let after = match o.remove("after") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ids)) => {
            if ids.len() > MAX_AFTER {
                return Err(BadInput::TooLarge(format!("\"after\" names more than {MAX_AFTER} jobs")));
            }
            let mut after: Vec<String> = Vec::with_capacity(ids.len());
            for v in ids {
                let Value::String(dep) = v else { return Err(BadInput::invalid("\"after\" must be an array of job ids")) };
                let dep = checked_id("after", dep).map_err(|e| BadInput::invalid(e.to_string()))?;
                if dep == id {
                    return Err(BadInput::invalid(format!("\"after\" names the job itself ({id:?})")));
                }
                if after.contains(&dep) {
                    return Err(BadInput::invalid(format!("\"after\" names {dep:?} twice")));
                }
                after.push(dep);
            }
            after
        }
        Some(_) => return Err(BadInput::invalid("\"after\" must be an array of job ids")),
    };
    let after_dead = match o.remove("after_dead") {
        None | Some(Value::Null) => AfterDead::Dead,
        Some(Value::String(s)) => AfterDead::parse(&s)
            .ok_or_else(|| BadInput::invalid(format!("\"after_dead\" must be \"dead\" or \"run\", not {s:?}")))?,
        Some(_) => return Err(BadInput::invalid("\"after_dead\" must be \"dead\" or \"run\"")),
    };
    if after.is_empty() && after_dead == AfterDead::Run {
        return Err(BadInput::invalid("\"after_dead\" needs \"after\""));
    }
    Ok((after, after_dead))
}

/// Reads `on_duplicate`, `debounce_seconds` and `debounce_max_seconds` (design §22.3, §22.4):
/// both need a dedupe key (the key names what is superseded), a debounce replaces (it is the
/// point of one) and takes no `delay_seconds` of its own (its quiet period is its delay).
fn superseding(
    o: &mut Map<String, Value>,
    deduped: bool,
    delay: u32,
) -> Result<(OnDuplicate, Option<(u32, u32)>), BadInput> {
    let on_duplicate = match o.remove("on_duplicate") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(OnDuplicate::parse(&s).ok_or_else(|| {
            BadInput::invalid(format!("on_duplicate must be \"keep\", \"replace\" or \"cancel\", got {s:?}"))
        })?),
        Some(_) => return Err(BadInput::invalid("on_duplicate must be a string")),
    };
    let quiet = seconds_field(o, "debounce_seconds", 1, MAX_DEBOUNCE_SECONDS)?;
    let cap = seconds_field(o, "debounce_max_seconds", 1, MAX_DEBOUNCE_SECONDS)?;
    let needs_key = |what: &str| BadInput::invalid(format!("{what} needs a dedupe_key: it names the job superseded"));
    if on_duplicate.is_some_and(|d| d != OnDuplicate::Keep) && !deduped {
        return Err(needs_key("on_duplicate"));
    }
    let Some(quiet) = quiet else {
        if cap.is_some() {
            return Err(BadInput::invalid("debounce_max_seconds is only for a debounced job (debounce_seconds)"));
        }
        return Ok((on_duplicate.unwrap_or_default(), None));
    };
    if !deduped {
        return Err(needs_key("debounce_seconds"));
    }
    if on_duplicate.is_some_and(|d| d != OnDuplicate::Replace) {
        return Err(BadInput::invalid("a debounced job replaces its pending duplicate: on_duplicate must be \"replace\" or absent"));
    }
    if delay > 0 {
        return Err(BadInput::invalid("a debounced job waits its debounce_seconds; give it no delay_seconds"));
    }
    let cap = cap.unwrap_or_else(|| quiet.saturating_mul(DEFAULT_DEBOUNCE_CAP_PERIODS).min(MAX_DEBOUNCE_SECONDS));
    if cap < quiet {
        return Err(BadInput::invalid("debounce_max_seconds must be at least debounce_seconds"));
    }
    Ok((OnDuplicate::Replace, Some((quiet, cap))))
}

/// The payload as JSON text, if it is within the one size limit every job has, sealed or not: a
/// sensitive job's message is a stub, but its row is read whole by claims, lists and redrives, so
/// it may be no larger than a plain job's.
fn within_size(payload: &Value) -> Result<String, BadInput> {
    let plain = payload.to_string();
    if plain.len() > MAX_PAYLOAD_BYTES {
        return Err(BadInput::TooLarge(format!(
            "payload is {} bytes as JSON; a job's payload is at most {MAX_PAYLOAD_BYTES} (what one Cloudflare \
             Queues message of 128,000 bytes carries), sealed or not",
            plain.len()
        )));
    }
    Ok(plain)
}

/// Reads one submitted job at `now`: its ledger spec, its message and its delay. `sealing`:
/// whether `PAYLOAD_KEY` is set (sensitive jobs need it); `new_id`: its id unless it names its own.
pub(super) fn parse_job(
    item: Value,
    cfg: &Config,
    types: &dyn JobTypes,
    sealing: bool,
    new_id: String,
    now: i64,
) -> Result<Parsed, BadInput> {
    let Value::Object(mut o) = item else { return Err(BadInput::invalid("a job must be an object")) };
    let payload = o.remove("payload").ok_or_else(|| BadInput::invalid("\"payload\" is required"))?;
    let f = fields(o, new_id)?;
    types.check(&payload, cfg).map_err(|e| BadInput::invalid(e.to_string()))?;
    let job_type = crate::handlers::job_type(&payload).ok().map(str::to_string);
    let sensitive = f.sensitive || job_type.as_deref() == Some(FEDIFY_TYPE);
    if sensitive && !sealing {
        return Err(BadInput::invalid(
            "PAYLOAD_KEY is not set: sensitive jobs (and every fedify job) are sealed at rest with it; \
             set it with `wrangler secret put PAYLOAD_KEY` (docs/operations.md: Secrets at rest)",
        ));
    }
    let plain = within_size(&payload)?;
    let deadline_at = f.deadline_seconds.map(|s| now + i64::from(s) * 1000);
    let meta = JobMeta {
        id: Some(f.id.clone()),
        dedupe_key: f.dedupe_key.clone(),
        limit_key: f.limit_key.clone(),
        max_attempts: f.max_attempts,
        priority: f.priority,
        deadline_at,
        timeout_seconds: f.timeout_seconds,
        queued_at: None,
        woken: false,
    };
    let env = Envelope {
        ordering_key: f.ordering_key.clone(),
        // A sensitive job's message names its type only: the ledger row is what runs.
        payload: if sensitive { producer::sealed_stub(job_type.as_deref()) } else { payload },
        meta,
    };
    let msg = OutMessage::of(&env, f.delay);
    if !msg.fits() {
        return Err(BadInput::TooLarge(format!(
            "job is {} bytes as a queue message; Cloudflare Queues takes at most {MAX_MESSAGE_BYTES} \
             (128,000 with its metadata)",
            msg.size()
        )));
    }
    let spec = JobSpec {
        id: f.id,
        job_type,
        ordering_key: f.ordering_key,
        dedupe_key: f.dedupe_key,
        limit_key: f.limit_key,
        deadline_at,
        timeout_seconds: f.timeout_seconds,
        payload: Some(plain),
        max_attempts: f.max_attempts.unwrap_or(cfg.max_attempts),
        priority: f.priority.unwrap_or(DEFAULT_PRIORITY),
    };
    let debounce_until = f.debounce.map(|(_, cap)| now + i64::from(cap) * 1000);
    let (delay, on_duplicate, after, after_dead, trace) = (f.delay, f.on_duplicate, f.after, f.after_dead, f.trace);
    Ok(Parsed { spec, msg, delay, sensitive, on_duplicate, debounce_until, after, after_dead, batch: false, in_batch: None, trace })
}

/// A bulk operation's body, `{"filter": {...}, "dry_run"?: bool}`: its filter's fields and
/// whether it is a dry run. Any other field is refused.
fn bulk_body(body: &[u8]) -> Result<(Map<String, Value>, bool), BadInput> {
    let v: Value = serde_json::from_slice(body).map_err(|e| BadInput::invalid(format!("body is not JSON: {e}")))?;
    let Value::Object(mut o) = v else { return Err(BadInput::invalid("body must be an object")) };
    let dry_run = match o.remove("dry_run") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(_) => return Err(BadInput::invalid("\"dry_run\" must be true or false")),
    };
    let f = match o.remove("filter") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(f)) => f,
        Some(_) => return Err(BadInput::invalid("\"filter\" must be an object")),
    };
    if let Some(k) = o.keys().next() {
        return Err(BadInput::invalid(format!("unknown field {k:?}")));
    }
    Ok((f, dry_run))
}

/// A filter's text field (empty is none).
fn filter_text(f: &mut Map<String, Value>, k: &str) -> Result<Option<String>, BadInput> {
    match f.remove(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(BadInput::invalid(format!("filter.{k} must be a string"))),
    }
}

/// A filter's time field, ms since the epoch.
fn filter_time(f: &mut Map<String, Value>, k: &str) -> Result<Option<i64>, BadInput> {
    match f.remove(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            v.as_i64().map(Some).ok_or_else(|| BadInput::invalid(format!("filter.{k} must be milliseconds since the epoch")))
        }
    }
}

fn no_more(f: &Map<String, Value>) -> Result<(), BadInput> {
    match f.keys().next() {
        Some(k) => Err(BadInput::invalid(format!("unknown filter field {k:?}"))),
        None => Ok(()),
    }
}

/// Reads a bulk redrive's body: `{"filter": {"type"?, "ordering_key"?, "error"?, "from"?, "to"?},
/// "dry_run"?: bool}` (times in ms since the epoch; `error` is text the job's error contains).
pub(super) fn parse_dead_filter(body: &[u8]) -> Result<(DeadFilter, bool), BadInput> {
    let (mut f, dry_run) = bulk_body(body)?;
    let (job_type, ordering_key, error) =
        (filter_text(&mut f, "type")?, filter_text(&mut f, "ordering_key")?, filter_text(&mut f, "error")?);
    let (from, to) = (filter_time(&mut f, "from")?, filter_time(&mut f, "to")?);
    no_more(&f)?;
    Ok((DeadFilter { job_type, ordering_key, error, from, to }, dry_run))
}

/// Reads a bulk cancel's body (design §22.2): `{"filter": {"type"?, "ordering_key"?,
/// "limit_key"?, "error"?, "from"?, "to"?}, "dry_run"?: bool}`, times bounding when the jobs were
/// submitted. An empty filter is refused: cancelling every PENDING job is never a default.
pub(super) fn parse_cancel_filter(body: &[u8]) -> Result<(CancelFilter, bool), BadInput> {
    let (mut f, dry_run) = bulk_body(body)?;
    let filter = CancelFilter {
        job_type: filter_text(&mut f, "type")?,
        ordering_key: filter_text(&mut f, "ordering_key")?,
        limit_key: filter_text(&mut f, "limit_key")?,
        error: filter_text(&mut f, "error")?,
        from: filter_time(&mut f, "from")?,
        to: filter_time(&mut f, "to")?,
    };
    no_more(&f)?;
    if filter == CancelFilter::default() {
        return Err(BadInput::invalid(
            "a cancel's filter must name at least one of type, ordering_key, limit_key, error, from, to",
        ));
    }
    Ok((filter, dry_run))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_job_is_validated_field_by_field() {
        let cfg = Config::default();
        let ok = parse_job(
            json!({"payload": {"type": "webhook", "url": "https://h.test/"}, "ordering_key": "k", "delay_seconds": 5, "max_attempts": 2}),
            &cfg,
            &crate::app::BuiltIn,
            false,
            "id1".into(),
            0,
        )
        .unwrap();
        assert_eq!(ok.spec.max_attempts, 2);
        assert_eq!(ok.delay, 5);
        assert_eq!(
            Envelope::decode(serde_json::from_str(ok.msg.json()).unwrap()).unwrap().meta.id.as_deref(),
            Some("id1")
        );
        for (job, want) in [
            (json!({}), "payload"),
            (json!({"payload": 1, "delay_seconds": 86401}), "delay_seconds"),
            (json!({"payload": 1, "delay_seconds": -1}), "delay_seconds"),
            (json!({"payload": 1, "max_attempts": 0}), "max_attempts"),
            (json!({"payload": 1, "ordering_key": 3}), "ordering_key"),
            (json!({"payload": 1, "dedupe_key": ""}), "dedupe_key"),
            (json!({"payload": 1, "priority": 10}), "priority must be"),
            (json!({"payload": 1, "priorty": 1}), "unknown field"),
            (json!({"payload": 1, "deadline_seconds": 0}), "deadline_seconds must be a whole number from 1"),
            (json!({"payload": 1, "deadline_seconds": 60, "delay_seconds": 60}), "would expire before it is due"),
            (json!({"payload": 1, "timeout_seconds": 301}), "timeout_seconds must be a whole number from 1 to 300"),
            (json!([1]), "object"),
            (json!({"payload": {"type": "fax"}}), "unknown job type \"fax\" (known: webhook)"),
            (json!({"payload": [1]}), "no \"type\""),
            (json!({"payload": {"type": "webhook", "url": "ftp://x"}}), "not http"),
            (json!({"payload": 1, "id": "line\nbreak"}), "id has a character an HTTP header cannot carry"),
            (json!({"payload": 1, "id": "\u{2603}"}), "id has a character an HTTP header cannot carry"),
            (
                json!({"payload": {"type": "webhook", "url": "https://h.test/", "headers": {"x-a": "\u{2603}"}}}),
                "not a valid HTTP header",
            ),
        ] {
            let Err(e) = parse_job(job.clone(), &cfg, &crate::app::BuiltIn, false, "x".into(), 0) else {
                panic!("{job} was accepted")
            };
            let (status, msg) = (e.status(), e.to_string());
            assert_eq!(status, 400, "{job}");
            assert!(msg.contains(want), "{job}: {msg}");
        }
        let big =
            json!({"payload": {"type": "webhook", "url": "https://h.test/", "body": "x".repeat(MAX_MESSAGE_BYTES)}});
        assert!(matches!(parse_job(big, &cfg, &crate::app::BuiltIn, false, "x".into(), 0), Err(BadInput::TooLarge(_))));
        // A sensitive job's message is a stub, but its payload is held to the same limit.
        let big = json!({"payload": {"type": "webhook", "url": "https://h.test/", "body": "x".repeat(900_000)},
                         "sensitive": true});
        let refused = parse_job(big, &cfg, &crate::app::BuiltIn, true, "x".into(), 0);
        assert!(
            matches!(&refused, Err(BadInput::TooLarge(m)) if m.contains("a job's payload is at most")),
            "{:?}",
            refused.err()
        );
    }
}
