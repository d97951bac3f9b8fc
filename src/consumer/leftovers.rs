//! What a batch's runs leave for its end: each run returns its own [`Leftovers`], the batch
//! gathers them, and `mod.rs` acts on them once, after every result is recorded. Nothing a run
//! leaves is hidden in the consumer: it is in the signatures of the functions that leave it.

use std::collections::HashSet;

use crate::ledger::limit::Woken;
use crate::ledger::Route;

/// What runs leave for their batch's end.
#[derive(Debug, Default)]
pub(super) struct Leftovers {
    /// Jobs taken out of a limit key's line that this very invocation holds (it parked them and
    /// has not yet recorded handing them back): sent again once the batch is recorded (design §20).
    pub woken: Vec<Woken>,
    /// Woken jobs whose handed slot was dealt with: taken over by their ask, or given back. The
    /// batch's end gives back the slot of every other woken job it was handed.
    pub dealt: HashSet<String>,
    /// Jobs finished that other jobs wait on, `(id, route)`: their dependents are released once
    /// the batch is recorded (design §24).
    pub finished: Vec<(String, Route)>,
}

impl Leftovers {
    /// Adds what another run left.
    pub(super) fn gather(&mut self, other: Leftovers) {
        self.woken.extend(other.woken);
        self.dealt.extend(other.dealt);
        self.finished.extend(other.finished);
    }
}
