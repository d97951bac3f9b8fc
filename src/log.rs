//! Structured logs: one JSON object per event, with stable field names, so Workers Logs
//! (`[observability]` in `wrangler.toml`) can filter on them, e.g. `event = "job_dead"`.
//!
//! Every line has `"event"` (what happened), `"level"` (`info`, `warn` or `error`) and
//! `"message"` (for people); the other fields depend on the event and keep their names across
//! versions. Pure: the edge prints [`Event::json`] with `console.log` / `console.error`.

use std::fmt;

use serde_json::{json, Map, Value};

/// Something worth a log line.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<'a> {
    /// A consumer batch was settled.
    Batch {
        /// The queue it came from.
        queue: &'a str,
        /// `lock` or `strict`.
        mode: &'a str,
        /// Messages in the batch.
        messages: usize,
        /// Acked.
        acked: usize,
        /// Retried after a failed attempt.
        retried: usize,
        /// Put off without an attempt (key busy, outage, not yet due).
        deferred: usize,
        /// Wall time of the batch, ms.
        duration_ms: i64,
    },
    /// D1, KV or Queues failed; the work affected is deferred, never dropped.
    Outage {
        /// What was affected and why.
        message: String,
    },
    /// A job became DEAD in a run.
    JobDead {
        /// The job.
        job_id: &'a str,
        /// Its payload type.
        job_type: Option<&'a str>,
        /// Its ordering key.
        ordering_key: Option<&'a str>,
        /// Attempts spent.
        attempts: i64,
        /// Why.
        error: &'a str,
        /// The trace the job was submitted in, when it carries a trace context (design §27), with
        /// the span of the run that ended it (or, for a job that never ran, the submitter's):
        /// Workers Logs joins the line to its trace.
        trace: Option<&'a crate::trace::TraceContext>,
    },
    /// A var or secret is unusable: nothing is processed until it is fixed.
    ConfigError {
        /// What is wrong.
        error: String,
    },
    /// One cron run of maintenance.
    Maintenance {
        /// Its report (`maintenance::Report`).
        report: Value,
        /// Whether a step failed.
        failed: bool,
    },
}

impl Event<'_> {
    /// The event's name (the `event` field).
    pub fn name(&self) -> &'static str {
        match self {
            Event::Batch { .. } => "batch",
            Event::Outage { .. } => "outage",
            Event::JobDead { .. } => "job_dead",
            Event::ConfigError { .. } => "config_error",
            Event::Maintenance { .. } => "maintenance",
        }
    }

    /// `info`, `warn` or `error`.
    pub fn level(&self) -> &'static str {
        match self {
            Event::Batch { .. } => "info",
            Event::Maintenance { failed: false, .. } => "info",
            Event::Outage { .. } | Event::JobDead { .. } | Event::Maintenance { .. } => "warn",
            Event::ConfigError { .. } => "error",
        }
    }

    /// The log line: one JSON object.
    pub fn json(&self) -> String {
        let fields = match self {
            Event::Batch { queue, mode, messages, acked, retried, deferred, duration_ms } => json!({
                "queue": queue, "mode": mode, "messages": messages, "acked": acked,
                "retried": retried, "deferred": deferred, "duration_ms": duration_ms,
            }),
            Event::Outage { .. } | Event::ConfigError { .. } => json!({}),
            Event::JobDead { job_id, job_type, ordering_key, attempts, error, trace } => {
                let mut f = json!({
                    "job_id": job_id, "job_type": job_type, "ordering_key": ordering_key,
                    "attempts": attempts, "error": error,
                });
                if let Some(t) = trace {
                    f["trace_id"] = json!(t.trace_id());
                    f["span_id"] = json!(t.span_id());
                }
                f
            }
            Event::Maintenance { report, .. } => json!({ "report": report }),
        };
        let mut line = Map::new();
        line.insert("event".into(), self.name().into());
        line.insert("level".into(), self.level().into());
        line.insert("message".into(), self.to_string().into());
        if let Value::Object(f) = fields {
            line.extend(f);
        }
        // Logs are read by more people than the ledger: no URL's credentials travel in them.
        scrub_urls(&Value::Object(line).to_string())
    }
}

/// Takes out of `text` every http(s) URL's query string and fragment (Slack-style hooks carry
/// their secret there) and its userinfo, keeping scheme, host and path: `https://u:p@h/x?k=s`
/// becomes `https://h/x?[redacted]`. A URL ends at whitespace, a quote, a backslash (a JSON
/// escape) or an angle bracket; punctuation right after it stays.
pub fn scrub_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = find_scheme(rest) {
        let (before, from) = rest.split_at(start);
        out.push_str(before);
        let scheme_len = from.find("://").map_or(0, |i| i + 3);
        let end = from[scheme_len..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\\' | '<' | '>' | '`' | '\''))
            .map_or(from.len(), |i| i + scheme_len);
        let (url, after) = from.split_at(end);
        let (scheme, tail) = url.split_at(scheme_len);
        let authority_end = tail.find(['/', '?', '#']).unwrap_or(tail.len());
        let (authority, path) = tail.split_at(authority_end);
        out.push_str(scheme);
        out.push_str(authority.rsplit_once('@').map_or(authority, |(_, host)| host));
        match path.find(['?', '#']) {
            Some(q) => {
                out.push_str(&path[..q]);
                let secret = &path[q..];
                let kept = secret.trim_end_matches([':', ',', ';', '.', ')']);
                out.push_str(if kept.len() > 1 { "?[redacted]" } else { kept });
                out.push_str(&secret[kept.len()..]);
            }
            None => out.push_str(path),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Where the next `http://` or `https://` starts, in any case.
fn find_scheme(text: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    [lower.find("http://"), lower.find("https://")].into_iter().flatten().min()
}

impl fmt::Display for Event<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Batch { queue, messages, acked, retried, deferred, .. } => {
                write!(f, "{queue} batch of {messages}: {acked} acked, {retried} retried, {deferred} deferred")
            }
            Event::Outage { message } => write!(f, "{message}"),
            Event::JobDead { job_id, error, .. } => write!(f, "job {job_id} is DEAD: {error}"),
            Event::ConfigError { error } => write!(f, "configuration error: {error}"),
            Event::Maintenance { failed: false, .. } => write!(f, "maintenance ran"),
            Event::Maintenance { .. } => write!(f, "maintenance ran; failed steps retry next run"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_query_fragment_and_userinfo() {
        for (text, want) in [
            ("see https://h.test/a/b?k=s", "see https://h.test/a/b?[redacted]"),
            ("HTTPS://u:pw@h.test/p#frag, then", "HTTPS://h.test/p?[redacted], then"),
            ("http://h.test:8080?x=1 and http://g.test/ok", "http://h.test:8080?[redacted] and http://g.test/ok"),
            ("\"url\":\"https://h.test/x?t=1\"", "\"url\":\"https://h.test/x?[redacted]\""),
            ("https://h.test/x?", "https://h.test/x?"),
            ("no url here?a=b", "no url here?a=b"),
            ("a https://h.test/plain/path.", "a https://h.test/plain/path."),
        ] {
            assert_eq!(scrub_urls(text), want, "{text}");
        }
    }

    #[test]
    fn every_line_is_one_json_object_with_stable_fields() {
        let dead = Event::JobDead {
            job_id: "j1",
            job_type: Some("webhook"),
            ordering_key: None,
            attempts: 8,
            error: "HTTP 404",
            trace: None,
        };
        let v: Value = serde_json::from_str(&dead.json()).unwrap();
        assert_eq!(
            v,
            json!({"event": "job_dead", "level": "warn", "message": "job j1 is DEAD: HTTP 404", "job_id": "j1",
                   "job_type": "webhook", "ordering_key": null, "attempts": 8, "error": "HTTP 404"})
        );
        let batch = Event::Batch {
            queue: "orderly-jobs",
            mode: "strict",
            messages: 3,
            acked: 2,
            retried: 1,
            deferred: 0,
            duration_ms: 12,
        };
        let v: Value = serde_json::from_str(&batch.json()).unwrap();
        assert_eq!(
            (v["event"].as_str(), v["acked"].as_u64(), v["level"].as_str()),
            (Some("batch"), Some(2), Some("info"))
        );
        let run = crate::trace::TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None)
            .unwrap()
            .run("j2", 1, "inv");
        let hook = Event::JobDead {
            job_id: "j2",
            job_type: Some("webhook"),
            ordering_key: None,
            attempts: 1,
            error: "https://hooks.test/services/T0/B0?token=s3cret&x=1: HTTP 404",
            trace: Some(&run),
        };
        let line = hook.json();
        assert!(!line.contains("s3cret"), "{line}");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["error"], "https://hooks.test/services/T0/B0?[redacted]: HTTP 404");
        // A job with a trace context: the line names its trace and its run's span (design §27).
        assert_eq!((v["trace_id"].as_str(), v["span_id"].as_str()), (Some(run.trace_id()), Some(run.span_id())));
        let outage: Value = serde_json::from_str(&Event::Outage { message: "D1 \"down\"\n".into() }.json()).unwrap();
        assert_eq!(outage["message"], "D1 \"down\"\n", "messages are escaped, never break the line");
        assert_eq!(Event::ConfigError { error: "x".into() }.level(), "error");
    }
}
