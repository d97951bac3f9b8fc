//! Flow control's permits, checked after every scheduler step (design §20): a permit belongs to
//! a run. Every live permit a job took (not a slot handed to a woken job, which lapses on its own
//! within `WOKEN_HOLD_SECONDS`) was taken by an invocation still running, or by one whose release
//! may have been lost (it crashed, stalled past its lease, or lost a ledger call: such a permit
//! lapses with the lease it was asked for). A permit outliving a run that ended normally is a
//! slot counted that nobody uses: its key runs below its concurrency until the permit lapses
//! (the breaker-beside-a-concurrency defect held a key for a minute so).

use std::collections::{BTreeMap, BTreeSet};

use crate::support::Sqlite;

/// A permit: (limit key, job, until).
type Permit = (String, String, i64);

/// Who took each live permit, as the steps that made it appear saw it.
#[derive(Default)]
pub struct Owners {
    taken_by: BTreeMap<Permit, String>,
}

/// The live permits a job took (not handed slots), over every database of the ledger.
fn live(dbs: &[std::rc::Rc<Sqlite>], now: i64) -> BTreeSet<Permit> {
    let mut out = BTreeSet::new();
    for db in dbs {
        let Ok(mut st) =
            db.conn.prepare_cached("SELECT limit_key, job_id, until FROM limit_permit WHERE until > ?1 AND handed = 0")
        else {
            continue;
        };
        let rows = st.query_map([now], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)));
        out.extend(rows.into_iter().flatten().flatten());
    }
    out
}

impl Owners {
    /// After the step of task `by` (an invocation's name, or `None` for any other task): notes
    /// the permits that step took, and returns the live permits whose taker has ended normally.
    /// `alive` names the invocations still running; `excused` those whose release may be lost.
    pub fn step(
        &mut self,
        dbs: &[std::rc::Rc<Sqlite>],
        now: i64,
        by: Option<&str>,
        alive: &BTreeSet<String>,
        excused: &BTreeSet<String>,
    ) -> Vec<String> {
        let live = live(dbs, now);
        self.taken_by.retain(|p, _| live.contains(p));
        let mut out = Vec::new();
        for p in live {
            let taker = self
                .taken_by
                .entry(p.clone())
                .or_insert_with(|| by.unwrap_or("a task that is no invocation").to_string());
            if !alive.contains(taker.as_str()) && !excused.contains(taker.as_str()) {
                out.push(format!(
                    "limit {}: a permit outlived its run: {} holds one until +{} ms, taken by {taker}, which has ended",
                    p.0,
                    p.1,
                    p.2 - crate::T0
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    fn db_with(rows: &[(&str, &str, i64, i64)]) -> Vec<Rc<Sqlite>> {
        let db = Sqlite::memory();
        for (k, j, until, handed) in rows {
            db.conn
                .execute(
                    "INSERT INTO limit_permit (limit_key, job_id, until, handed) VALUES (?1, ?2, ?3, ?4)",
                    rusqlite::params![k, j, until, handed],
                )
                .unwrap();
        }
        vec![Rc::new(db)]
    }

    #[test]
    fn a_permit_whose_taker_ended_is_reported_and_one_of_a_running_or_faulted_taker_is_not() {
        let dbs = db_with(&[("host", "a", 10_000, 0)]);
        let mut owners = Owners::default();
        let alive: BTreeSet<String> = ["inv-1".to_string()].into();
        let none = BTreeSet::new();
        assert!(owners.step(&dbs, 0, Some("inv-1"), &alive, &none).is_empty(), "its taker still runs");
        let found = owners.step(&dbs, 1, Some("inv-2"), &none, &none);
        assert_eq!(found.len(), 1, "inv-1 ended, its permit is still live: {found:?}");
        assert!(found[0].contains("taken by inv-1"), "{found:?}");
        let other: BTreeSet<String> = ["inv-9".to_string()].into();
        assert_eq!(owners.step(&dbs, 2, None, &none, &other).len(), 1, "another invocation's fault excuses nothing");
        let excused: BTreeSet<String> = ["inv-1".to_string()].into();
        assert!(owners.step(&dbs, 2, None, &none, &excused).is_empty(), "a lost release lapses on its own");
        assert!(owners.step(&dbs, 10_000, None, &none, &none).is_empty(), "lapsed: no longer live");
    }

    #[test]
    fn a_slot_handed_to_a_woken_job_is_no_run_s_permit() {
        let dbs = db_with(&[("host", "a", 10_000, 1)]);
        let mut owners = Owners::default();
        assert!(owners.step(&dbs, 0, None, &BTreeSet::new(), &BTreeSet::new()).is_empty());
    }
}
