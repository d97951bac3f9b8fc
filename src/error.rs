//! Errors shared by the I/O ports (KV, D1, Queue): an outage is never the job's fault.

use thiserror::Error;

/// A binding failed or is missing (KV, D1, Queue). Generally transient: defer the message and
/// try again later; never dead-letter a job for it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{what} unavailable: {detail}")]
pub struct InfraError {
    /// Which binding: "KV", "D1", "Queue".
    pub what: &'static str,
    /// What it said.
    pub detail: String,
}

impl InfraError {
    /// An error from binding `what`.
    pub fn new(what: &'static str, detail: impl Into<String>) -> Self {
        InfraError { what, detail: detail.into() }
    }
}
