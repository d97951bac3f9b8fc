//! An invocation's leases on the jobs it claimed: when they were last renewed and confirmed, which
//! jobs are still ours, and when one must be taken for lost (design §3, §18). Both modes renew
//! them before each run and ask them before starting one.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;

use super::ports::Consumer;
use crate::clock::Clock;
use crate::handlers::Runner;
use crate::ledger::{JobRow, Route, Sql};
use crate::lock::Kv;
use crate::producer::QueueSender;

/// This invocation's leases: when they were last renewed, and which jobs that renewal found still
/// ours. A lease is also taken for lost once what is left of it since the last claim or renewal
/// that confirmed it may not cover a run: a renewal that failed, or that a concurrent group
/// started and has not finished, confirms nothing (the simulation over shards found a group run a job while another
/// group's renewal, which would have found it lost, was still in flight). A job missing from it lost its lease while the invocation stalled (the reaper may have
/// given it to another invocation): it must not run here.
pub(super) struct Leases {
    /// When a renewal was last tried (they are spaced by `refresh_after_ms`).
    renewed_at: Cell<i64>,
    /// When the leases were last known ours: the claim, or the last renewal that answered.
    confirmed_at: Cell<i64>,
    /// Every job this invocation claimed: a renewal extends these (by id in each job's shard,
    /// never a table scan).
    ids: RefCell<Vec<(String, Route)>>,
    held: RefCell<Option<HashSet<String>>>,
}

impl Leases {
    /// The leases of the jobs claimed so far, taken at `now`.
    pub(super) fn new<'a>(now: i64, jobs: impl IntoIterator<Item = &'a JobRow>) -> Leases {
        let ids = jobs.into_iter().map(|j| (j.id.clone(), j.route())).collect();
        let at = Cell::new(now);
        Leases { renewed_at: at.clone(), confirmed_at: at, ids: RefCell::new(ids), held: RefCell::new(None) }
    }

    /// Whether `job`'s lease may not outlast a run starting at `now`: the last renewal did not find
    /// it, or more than `fresh_ms` ([`Config::refresh_after_ms`]) has passed since the leases were
    /// last confirmed (what is left of them may not cover a run).
    pub(super) fn lost(&self, job: &str, now: i64, fresh_ms: i64) -> bool {
        now - self.confirmed_at.get() > fresh_ms || self.held.borrow().as_ref().is_some_and(|held| !held.contains(job))
    }

    /// The latest time a run may start and still be covered by the leases as last confirmed.
    pub(super) fn start_by(&self, fresh_ms: i64) -> i64 {
        self.confirmed_at.get() + fresh_ms
    }

    /// Jobs claimed since the last renewal are ours too.
    pub(super) fn claimed<'a>(&self, jobs: impl IntoIterator<Item = &'a JobRow>) {
        let jobs: Vec<(String, Route)> = jobs.into_iter().map(|j| (j.id.clone(), j.route())).collect();
        if let Some(held) = self.held.borrow_mut().as_mut() {
            held.extend(jobs.iter().map(|j| j.0.clone()));
        }
        self.ids.borrow_mut().extend(jobs);
    }
}

impl<K: Kv, S: Sql, R: Runner, C: Clock, Q: QueueSender> Consumer<'_, K, S, R, C, Q> {
    /// Before a handler run: extends this invocation's leases when what is left of them might not
    /// outlast the run (see [`Config::refresh_after_ms`]), and learns which jobs are still ours.
    pub(super) async fn renew_leases(&self, leases: &Leases) {
        let now = self.clock.now_ms();
        let lease_ms = i64::from(self.cfg.lease_seconds) * 1000;
        if now - leases.renewed_at.get() > self.cfg.refresh_after_ms(self.cfg.lease_seconds) {
            let last = leases.renewed_at.replace(now);
            let ids = leases.ids.borrow().clone();
            match self.ledger.renew(&self.owner, now, now + lease_ms, &ids).await {
                Ok(held) => {
                    *leases.held.borrow_mut() = Some(held);
                    leases.confirmed_at.set(leases.confirmed_at.get().max(now));
                }
                Err(e) => {
                    leases.renewed_at.set(last);
                    self.outage(format!("lease renewal failed, leases may expire under running jobs: {e}"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_no_renewal_confirmed_for_longer_than_a_run_may_take_is_taken_for_lost() {
        // The simulation over shards once found a group run a job while another group's renewal,
        // which would have found its lease lost, was still in flight.
        let leases = Leases::new(1_000, std::iter::empty::<&JobRow>());
        assert!(!leases.lost("a", 6_000, 5_000), "confirmed by the claim, within a run's time");
        assert!(leases.lost("a", 6_001, 5_000), "no renewal answered since: it may not cover a run");
        // A renewal answers: the leases it found are confirmed from then on, the others lost.
        *leases.held.borrow_mut() = Some(HashSet::from(["a".to_string()]));
        leases.confirmed_at.set(6_001);
        assert!(!leases.lost("a", 6_002, 5_000));
        assert!(leases.lost("b", 6_002, 5_000), "a job the renewal did not find");
        leases.claimed(std::iter::empty::<&JobRow>());
        assert!(leases.lost("a", 11_002, 5_000), "unconfirmed again past a run's time");
    }
}
