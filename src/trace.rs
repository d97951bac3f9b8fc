//! W3C Trace Context carried with a job (design §27): the `traceparent` (and `tracestate`) of the
//! request or message that submitted it, kept on its row, so each attempt's work joins the trace
//! that caused it however much later it runs. Each run is a span of that trace: its id is derived
//! from the job, the attempt and the invocation that ran it, and a webhook or service handler's
//! request carries the run's `traceparent` on. Pure: parsing and deriving only.

use std::fmt::Write;

use sha2::{Digest, Sha256};

/// Why a `traceparent` or `tracestate` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadTrace(String);

/// The longest `tracestate` kept (W3C: at most 32 list members; 512 bytes is what it asks
/// vendors to propagate at least).
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// A trace context: a valid `traceparent`, and its `tracestate` if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `00-<trace id: 32 hex>-<parent id: 16 hex>-<flags: 2 hex>`.
    pub traceparent: String,
    /// Vendors' state, passed on as given.
    pub tracestate: Option<String>,
}

/// `len` lowercase hex digits.
fn lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// An id: `len` lowercase hex digits, not all zeros.
fn hex(s: &str, len: usize) -> bool {
    lower_hex(s, len) && s.bytes().any(|b| b != b'0')
}

impl TraceContext {
    /// A context from a `traceparent` and `tracestate`, or why it is not one. Version 00's form
    /// is required (a later version's first four fields, as the spec says to read them, are kept
    /// as version 00), lowercase hex, ids not all zeros. A `tracestate` that cannot go on as a
    /// header (over [`MAX_TRACESTATE_BYTES`], or other than printable ASCII) is dropped and the
    /// `traceparent` kept, as the spec asks.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Result<TraceContext, BadTrace> {
        let bad = || BadTrace(format!("traceparent {traceparent:?} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)"));
        let parts: Vec<&str> = traceparent.trim().split('-').collect();
        let [version, trace_id, parent_id, flags, ..] = parts[..] else { return Err(bad()) };
        let version_ok = lower_hex(version, 2) && version != "ff";
        let exact = version != "00" || parts.len() == 4;
        if !(version_ok && exact && hex(trace_id, 32) && hex(parent_id, 16) && lower_hex(flags, 2)) {
            return Err(bad());
        }
        let sendable = |s: &&str| s.len() <= MAX_TRACESTATE_BYTES && s.bytes().all(|b| (0x20..=0x7e).contains(&b));
        let tracestate = tracestate.map(str::trim).filter(|s| !s.is_empty()).filter(sendable);
        Ok(TraceContext {
            traceparent: format!("00-{trace_id}-{parent_id}-{flags}"),
            tracestate: tracestate.map(str::to_string),
        })
    }

    /// A context from request headers, when they carry a valid one (an invalid one is ignored,
    /// as the spec asks of a receiver).
    pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<TraceContext> {
        TraceContext::parse(traceparent?, tracestate).ok()
    }

    /// The trace's id (32 hex).
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The span id of the context (16 hex): the parent of what it starts.
    pub fn span_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// The context of a run of the job: the same trace and flags, the run's own span id,
    /// derived from the job, the attempt and who ran it (the invocation's lease owner), so each
    /// attempt is a span of its own and a retried invocation's is another.
    pub fn run(&self, job_id: &str, attempt: u32, owner: &str) -> TraceContext {
        let digest = Sha256::new().chain_update(job_id).chain_update([0]).chain_update(attempt.to_be_bytes()).chain_update(owner).finalize();
        let mut span = String::with_capacity(16);
        for b in &digest[..8] {
            let _ = write!(span, "{b:02x}");
        }
        if span.bytes().all(|b| b == b'0') {
            span.replace_range(15..16, "1");
        }
        let flags = &self.traceparent[53..55];
        TraceContext { traceparent: format!("00-{}-{span}-{flags}", self.trace_id()), tracestate: self.tracestate.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_w3c_traceparent_is_read_and_a_bad_one_refused() {
        let t = TraceContext::parse(PARENT, Some(" congo=t61rcWkgMzE ")).unwrap();
        assert_eq!((t.trace_id(), t.span_id()), ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"));
        assert_eq!(t.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
        // A later version's first four fields are read as version 00's.
        let later = TraceContext::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", None).unwrap();
        assert_eq!(later.traceparent, PARENT);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-+1",
            "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(TraceContext::parse(bad, None).is_err(), "{bad:?}");
            assert_eq!(TraceContext::from_headers(Some(bad), None), None);
        }
        // A tracestate that cannot go on as a header is dropped; the traceparent is kept.
        for bad in ["k=v,".repeat(200), "k=\u{0}v".into(), "k=caf\u{e9}".into(), "k=v\r\nx: y".into()] {
            assert_eq!(TraceContext::parse(PARENT, Some(&bad)).unwrap(), TraceContext { traceparent: PARENT.into(), tracestate: None });
        }
    }

    #[test]
    fn a_run_is_a_span_of_the_job_s_trace_one_per_attempt() {
        let t = TraceContext::parse(PARENT, Some("congo=t61rcWkgMzE")).unwrap();
        let first = t.run("job-1", 1, "inv-a");
        let second = t.run("job-1", 2, "inv-b");
        for run in [&first, &second] {
            assert_eq!(run.trace_id(), t.trace_id());
            assert_ne!(run.span_id(), t.span_id());
            assert!(TraceContext::parse(&run.traceparent, None).is_ok(), "{}", run.traceparent);
            assert!(run.traceparent.ends_with("-01"));
            assert_eq!(run.tracestate, t.tracestate);
        }
        assert_ne!(first.span_id(), second.span_id());
        assert_eq!(first, t.run("job-1", 1, "inv-a"), "the same run, the same span");
    }
}
