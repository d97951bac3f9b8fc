//! What an operator's own tools see of each run (design §27.5): a span per attempt, named for its
//! job type, with the job's id, type, attempt, priority, keys, queue wait and outcome; and one
//! Analytics Engine data point per finished attempt. Pure: the [`Attempt`] a run makes and what
//! it says as span attributes and as a data point. The consumer calls an [`Observer`] (the edge's
//! writes to Workers tracing and to an `ORDERLY_METRICS` dataset; none: nothing is observed, at
//! no cost).

use std::fmt::Write;

use sha2::{Digest, Sha256};

use crate::ledger::JobRow;
use crate::trace::TraceContext;

/// How an attempt ended, as spans and data points name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptEnd {
    /// DONE.
    Done,
    /// Failed; tried again after its backoff.
    Retry,
    /// The handler snoozed (or a sealed payload waits for its key): again later, no attempt spent.
    Snooze,
    /// DEAD: a permanent failure, the last attempt, or past its deadline.
    Dead,
    /// Cancelled while it ran or waited to (DEAD "cancelled").
    Cancelled,
    /// Not run: its limit key refused it a start, or its lease ran out in the checks before it.
    Waited,
}

impl AttemptEnd {
    /// Its name: `done`, `retry`, `snooze`, `dead`, `cancelled` or `waited`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptEnd::Done => "done",
            AttemptEnd::Retry => "retry",
            AttemptEnd::Snooze => "snooze",
            AttemptEnd::Dead => "dead",
            AttemptEnd::Cancelled => "cancelled",
            AttemptEnd::Waited => "waited",
        }
    }
}

/// A span attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    /// Text.
    Text(String),
    /// A number (JS numbers: integers up to 2^53 exactly).
    Number(f64),
}

/// A span attribute: its name and value.
pub type Attribute = (&'static str, Attr);

/// One attempt of a job, as the consumer ran it.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt<'a> {
    /// The job.
    pub job_id: &'a str,
    /// Its payload type (empty when it has none).
    pub job_type: &'a str,
    /// Which attempt (1 for the first; a snooze gives its attempt back).
    pub attempt: i64,
    /// Its priority, 0 (most urgent) to 9.
    pub priority: u8,
    /// Its ordering key.
    pub ordering_key: Option<&'a str>,
    /// Its limit key (design §20).
    pub limit_key: Option<&'a str>,
    /// How long it waited past its due time before this attempt started, ms.
    pub queue_wait_ms: i64,
    /// The run's own trace context (the job's trace, this attempt's span id), when the job was
    /// submitted in a trace.
    pub trace: Option<&'a TraceContext>,
}

impl<'a> Attempt<'a> {
    /// The attempt of `job` (as claimed) that starts at `started_at`, in the run's trace context.
    pub fn of(job: &'a JobRow, started_at: i64, trace: Option<&'a TraceContext>) -> Attempt<'a> {
        Attempt {
            job_id: &job.id,
            job_type: job.job_type.as_deref().unwrap_or_default(),
            attempt: job.attempts,
            priority: job.priority,
            ordering_key: job.ordering_key.as_deref(),
            limit_key: job.limit_key.as_deref(),
            queue_wait_ms: queue_wait_ms(job, started_at),
            trace,
        }
    }

    /// The span's name: `orderly.run <type>`.
    pub fn span_name(&self) -> String {
        format!("orderly.run {}", self.job_type)
    }

    /// What the span says from its start. Keys may name people: each is named as `names` says
    /// (a keyed hash of itself unless `TRACE_KEYS = "plain"`). The job's own trace is named too:
    /// Workers' spans cannot link to another trace, so the attribute is the link.
    pub fn start_attributes(&self, names: KeyNames<'_>) -> Vec<Attribute> {
        let key = |k: &str| Attr::Text(names.of(k));
        let mut attrs = vec![
            ("orderly.job.id", Attr::Text(self.job_id.to_string())),
            ("orderly.job.type", Attr::Text(self.job_type.to_string())),
            ("orderly.job.attempt", Attr::Number(self.attempt as f64)),
            ("orderly.job.priority", Attr::Number(f64::from(self.priority))),
            ("orderly.job.queue_wait_ms", Attr::Number(self.queue_wait_ms as f64)),
        ];
        attrs.extend(self.ordering_key.map(|k| ("orderly.job.ordering_key", key(k))));
        attrs.extend(self.limit_key.map(|k| ("orderly.job.limit_key", key(k))));
        if let Some(t) = self.trace {
            attrs.push(("orderly.job.traceparent", Attr::Text(t.traceparent.clone())));
        }
        attrs
    }

    /// What the span says at its end: how the attempt ended and how long it ran.
    pub fn end_attributes(&self, outcome: AttemptEnd, run_ms: i64) -> Vec<Attribute> {
        vec![("orderly.job.outcome", Attr::Text(outcome.as_str().into())), ("orderly.job.run_ms", Attr::Number(run_ms as f64))]
    }

    /// The attempt's Analytics Engine data point (design §27.5): blob1 the type, blob2 the
    /// outcome; double1 the queue wait (ms), double2 the run time (ms), double3 the attempt,
    /// double4 the priority; index1 the type (the sampling key: Analytics Engine allows one, up to
    /// 96 bytes, and a type is at most 64).
    pub fn data_point(&self, outcome: AttemptEnd, run_ms: i64) -> DataPoint {
        DataPoint {
            blobs: vec![self.job_type.to_string(), outcome.as_str().to_string()],
            doubles: vec![self.queue_wait_ms as f64, run_ms as f64, self.attempt as f64, f64::from(self.priority)],
            index: self.job_type.to_string(),
        }
    }
}

/// What a batch's span says at its end (design §27.5): its queue, mode and what became of its
/// messages, as its log line says.
pub fn batch_attributes(batch: &crate::log::Event<'_>) -> Vec<Attribute> {
    let crate::log::Event::Batch { mode, messages, acked, retried, deferred, .. } = batch else { return Vec::new() };
    let n = |v: &usize| Attr::Number(*v as f64);
    vec![
        ("orderly.mode", Attr::Text((*mode).to_string())),
        ("orderly.batch.messages", n(messages)),
        ("orderly.batch.acked", n(acked)),
        ("orderly.batch.retried", n(retried)),
        ("orderly.batch.deferred", n(deferred)),
    ]
}

/// One Analytics Engine data point.
#[derive(Debug, Clone, PartialEq)]
pub struct DataPoint {
    /// blob1, blob2, ...
    pub blobs: Vec<String>,
    /// double1, double2, ...
    pub doubles: Vec<f64>,
    /// index1.
    pub index: String,
}

/// How long `job`, claimed for the attempt that starts at `started_at`, waited past its due time:
/// from `next_run_at` (a retry's, a snooze's, a delayed job's due time, which a claim keeps), or,
/// for a job its claim recorded (`next_run_at` the claim's own time, claim.sql), from when its
/// message was sent (`created_at`).
pub fn queue_wait_ms(job: &JobRow, started_at: i64) -> i64 {
    let recorded_by_its_claim = job.started_at == Some(job.next_run_at);
    let due = if recorded_by_its_claim { job.created_at.min(job.next_run_at) } else { job.next_run_at };
    (started_at - due).max(0)
}

/// How spans and metric labels name ordering and limit keys (design §27.5): one rule for both,
/// so what a trace backend and a scraper's storage keep of a key is the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyNames<'a> {
    /// As they are (`TRACE_KEYS = "plain"`).
    Plain,
    /// Each a hash of itself keyed with this secret ([`hashed`]).
    Hashed(&'a [u8]),
}

impl<'a> KeyNames<'a> {
    /// As `cfg` says: `TRACE_KEYS`, and the secret the edge read.
    pub fn of_config(cfg: &'a crate::config::Config) -> KeyNames<'a> {
        if cfg.trace_keys_plain {
            KeyNames::Plain
        } else {
            KeyNames::Hashed(cfg.key_hash_secret.0.as_bytes())
        }
    }

    /// `key` as spans and metric labels name it.
    pub fn of(&self, key: &str) -> String {
        match self {
            KeyNames::Plain => key.to_string(),
            KeyNames::Hashed(secret) => hashed(key, secret),
        }
    }
}

/// A key as spans and metric labels name it by default: `hmac:` and the first 8 bytes of its
/// HMAC-SHA-256 under `secret`, in hex. The same key is always the same name (a trace backend or
/// a query can group by it), says nothing of itself, and, keyed, cannot be found by hashing a
/// dictionary of likely keys (inbox URLs, emails) without the secret.
pub fn hashed(key: &str, secret: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).map(|m| m.chain_update(key.as_bytes()).finalize().into_bytes());
    // HMAC takes a key of any length; should that ever fail, a plain digest still names no one.
    let digest = mac.unwrap_or_else(|_| Sha256::digest(key.as_bytes()));
    digest[..8].iter().fold(String::from("hmac:"), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A span opened for a run; ended once, with what it says at its end.
pub trait Span {
    /// Runs `step` as this span's own work: what it calls out (a webhook's fetch, a JS handler's
    /// call) nests inside the span (design §27.5). By default it only runs it.
    fn enter(&self, step: &mut dyn FnMut()) {
        step();
    }
    /// Adds these attributes and ends the span.
    fn end(self: Box<Self>, attrs: &[Attribute]);
}

/// `run`, each of its polls inside `span` (none: polled as it is). A handler's run shares its
/// task with the batch's other runs (wasm-bindgen polls an invocation's jobs in one task), so no
/// async context tells them apart: the span is entered only while this run's own poll runs, and
/// what the run starts in that poll is the span's.
pub async fn within<F: std::future::Future>(span: Option<&dyn Span>, run: F) -> F::Output {
    let Some(span) = span else { return run.await };
    let mut run = std::pin::pin!(run);
    std::future::poll_fn(|cx| {
        let mut polled = std::task::Poll::Pending;
        span.enter(&mut || polled = run.as_mut().poll(cx));
        polled
    })
    .await
}

/// Where attempts are observed: Workers tracing and Analytics Engine on the edge, a recording in
/// the native tests.
pub trait Observer {
    /// Opens the span of an attempt that starts now; `None`: tracing is off.
    fn open(&self, name: &str, attrs: &[Attribute]) -> Option<Box<dyn Span + '_>>;
    /// Records a finished attempt's data point (nothing when metrics are off).
    fn point(&self, point: &DataPoint);
}

/// Analytics Engine takes at most 250 data points per Worker invocation; a strict invocation
/// may run more attempts than that (`STRICT_RUN_BUDGET` chained runs after a batch's own).
pub const POINTS_PER_INVOCATION: u32 = 250;

/// The data points an invocation may still write: the first [`POINTS_PER_INVOCATION`] attempts
/// are written, the rest are not asked of the platform (their spans still say all).
#[derive(Debug, Default)]
pub struct PointBudget(std::cell::Cell<u32>);

impl PointBudget {
    /// Whether one more point may be written; counts it when it may.
    pub fn take(&self) -> bool {
        let used = self.0.get();
        (used < POINTS_PER_INVOCATION).then(|| self.0.set(used + 1)).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invocation_writes_at_most_the_platform_s_points() {
        let budget = PointBudget::default();
        let written = (0..400).filter(|_| budget.take()).count();
        assert_eq!(written, POINTS_PER_INVOCATION as usize);
        assert!(!budget.take(), "spent stays spent");
    }


    fn job() -> JobRow {
        let row = serde_json::json!({
            "id": "j1", "type": "email", "status": "RUNNING", "ordering_key": "alice@example.com",
            "limit_key": "smtp", "attempts": 2, "max_attempts": 8, "deferrals": 0, "snoozes": 0,
            "next_run_at": 0, "created_at": 0, "updated_at": 0, "priority": 3,
        });
        let serde_json::Value::Object(row) = row else { unreachable!() };
        JobRow::from_row(&row).unwrap()
    }

    #[test]
    fn an_attempt_says_its_job_its_wait_and_hashes_its_keys() {
        let mut j = job();
        j.created_at = 1_000;
        j.next_run_at = 5_000;
        let a = Attempt::of(&j, 5_250, None);
        assert_eq!(a.queue_wait_ms, 250, "a retry waits from its due time");
        assert_eq!(a.span_name(), "orderly.run email");
        let attrs = a.start_attributes(KeyNames::Hashed(b"secret"));
        let get = |name: &str| attrs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
        assert_eq!(get("orderly.job.id"), Some(Attr::Text("j1".into())));
        assert_eq!(get("orderly.job.attempt"), Some(Attr::Number(2.0)));
        assert_eq!(get("orderly.job.queue_wait_ms"), Some(Attr::Number(250.0)));
        let Some(Attr::Text(key)) = get("orderly.job.ordering_key") else { panic!("{attrs:?}") };
        assert!(key.starts_with("hmac:") && key.len() == 21 && !key.contains("alice"), "{key}");
        assert_eq!(key, hashed("alice@example.com", b"secret"), "the same key, the same hash");
        assert_ne!(hashed("alice@example.com", b"secret"), hashed("bob@example.com", b"secret"));
        let unkeyed = Sha256::digest(b"alice@example.com")[..8].iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        });
        assert!(!key.contains(&unkeyed), "not the key's plain digest, which a dictionary reverses");
        assert_ne!(key, hashed("alice@example.com", b"another"), "keyed: another secret, another name");
        let plain = a.start_attributes(KeyNames::Plain);
        assert!(plain.contains(&("orderly.job.limit_key", Attr::Text("smtp".into()))), "{plain:?}");
        assert_eq!(get("orderly.job.traceparent"), None, "no trace, no traceparent");
    }

    #[test]
    fn a_job_its_claim_recorded_waited_from_its_send() {
        let mut j = job();
        j.created_at = 9_000;
        j.next_run_at = 9_400;
        j.started_at = Some(9_400);
        assert_eq!(queue_wait_ms(&j, 9_410), 410, "claimed as it was recorded: from its send");
        j.started_at = Some(9_800);
        assert_eq!(queue_wait_ms(&j, 9_810), 410, "claimed after it was due: from its due time");
        j.next_run_at = 20_000;
        assert_eq!(queue_wait_ms(&j, 12_000), 0, "a clock behind: never negative");
    }

    #[test]
    fn a_data_point_is_type_outcome_wait_run_attempt() {
        let j = job();
        let a = Attempt { queue_wait_ms: 40, ..Attempt::of(&j, 0, None) };
        let p = a.data_point(AttemptEnd::Retry, 1_200);
        assert_eq!(p.blobs, ["email", "retry"]);
        assert_eq!(p.doubles, [40.0, 1_200.0, 2.0, 3.0]);
        assert_eq!(p.index, "email");
        assert_eq!(
            a.end_attributes(AttemptEnd::Cancelled, 7),
            [("orderly.job.outcome", Attr::Text("cancelled".into())), ("orderly.job.run_ms", Attr::Number(7.0))]
        );
    }
}
