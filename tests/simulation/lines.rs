//! Flow control's lines, checked after every scheduler step (design §20): a job parked in a limit
//! key's line waits only while there is a reason to, and something is on its way to wake it. It is
//! the liveness half of the permit check (`permits.rs`): a line that waits for nothing, or for a
//! waker that will never come, leaves its jobs to maintenance (a minute a tick in production)
//! instead of their own wake-up, as the breaker beside a concurrency once did (issue 38).
//!
//! After each step, for each limit key with PENDING jobs in its line, unless it is paused:
//! - **no free slot**: while its breaker is closed, its live permits (runs, and slots handed to
//!   woken jobs) fill its concurrency (a key without one has no reason to park but a pause or a
//!   probe);
//! - **a waker**: a live permit (its run's release hands the next slot; a woken job that cannot
//!   start gives its slot back, which hands it on), a job of the key RUNNING (it asks, then
//!   releases or parks), or a message on its way for a job of the key outside the line: a
//!   wake-up (its job asks, or gives back what it may hold, which hands the line its free slots),
//!   or any message whose job's ordering key has nothing in the line (it will ask: a job just
//!   submitted).
//!
//! A fault that loses a waker (an invocation crashed or stalled, a ledger call or a send lost)
//! leaves the line to maintenance, as designed: a line is excused while such a fault fired at most
//! a lease and a hand-off's hold before its oldest job parked. The setups without infrastructure
//! faults (`*-limits-calm`) check every line exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use orderly::flow::{Policies, WOKEN_HOLD_SECONDS};

use crate::support::Sqlite;

/// One limit key's line and what could wake it, over every database of the ledger.
#[derive(Default, Debug)]
struct Key {
    paused: bool,
    closed: bool,
    /// Whether an operator's override holds, and the concurrency it set (`None`: no limit).
    overridden: bool,
    override_concurrency: Option<i64>,
    permits: i64,
    /// PENDING jobs in the line: (job, since).
    line: Vec<(String, i64)>,
}

/// A job of a limit key: (ordering key, status).
type Job = (Option<String>, String);

fn read(dbs: &[Rc<Sqlite>], now: i64) -> (BTreeMap<String, Key>, BTreeMap<String, (String, Job)>) {
    let mut keys: BTreeMap<String, Key> = BTreeMap::new();
    let mut jobs: BTreeMap<String, (String, Job)> = BTreeMap::new();
    for db in dbs {
        let c = &db.conn;
        let rows = |sql: &str, f: &mut dyn FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<()>| {
            if let Ok(mut st) = c.prepare_cached(sql) {
                if let Ok(mut rs) = st.query([now]) {
                    while let Ok(Some(r)) = rs.next() {
                        let _ = f(r);
                    }
                }
            }
        };
        rows(
            "SELECT id, ordering_key, limit_key, status FROM job
             WHERE limit_key IS NOT NULL AND status IN ('PENDING', 'RUNNING') AND ?1 = ?1",
            &mut |r| {
                jobs.insert(r.get(0)?, (r.get(2)?, (r.get(1)?, r.get(3)?)));
                Ok(())
            },
        );
        rows(
            "SELECT limit_key, paused, open_until, overridden, concurrency FROM limit_state WHERE ?1 = ?1",
            &mut |r| {
                let k = keys.entry(r.get(0)?).or_default();
                k.paused = r.get::<_, i64>(1)? == 1;
                k.closed = r.get::<_, Option<i64>>(2)?.is_none();
                k.overridden = r.get::<_, i64>(3)? == 1;
                k.override_concurrency = r.get(4)?;
                Ok(())
            },
        );
        rows("SELECT limit_key, count(*) FROM limit_permit WHERE until > ?1 GROUP BY limit_key", &mut |r| {
            keys.entry(r.get(0)?).or_default().permits += r.get::<_, i64>(1)?;
            Ok(())
        });
        rows("SELECT limit_key, job_id, since FROM limit_wait WHERE ?1 = ?1", &mut |r| {
            keys.entry(r.get(0)?).or_default().line.push((r.get(1)?, r.get(2)?));
            Ok(())
        });
    }
    // Only PENDING jobs wait: a line entry of a job running or finished is no one waiting.
    for k in keys.values_mut() {
        k.line.retain(|(id, _)| jobs.get(id).is_some_and(|(_, (_, status))| status == "PENDING"));
    }
    (keys, jobs)
}

/// The messages on their way (waiting, put off, or in an invocation's hands), by job.
#[derive(Clone, Copy)]
pub struct OnTheWay<'a> {
    /// Jobs with any message on its way.
    pub messages: &'a BTreeSet<String>,
    /// Jobs with a wake-up on its way: delivered, its job asks, or gives back the slot it may hold,
    /// which hands the line the slots free, whatever its ordering key.
    pub wake_ups: &'a BTreeSet<String>,
}

/// The lines that wait with no reason to, or with nothing to wake them, each as a sentence.
/// `faults`: when a fault that may lose a waker fired; `lease_ms`: how long a lost run's permit
/// holds its slot.
pub fn check(
    dbs: &[Rc<Sqlite>],
    now: i64,
    policies: &Policies,
    on_the_way: OnTheWay<'_>,
    faults: &[i64],
    lease_ms: i64,
) -> Vec<String> {
    let queued = on_the_way.messages;
    // Most steps see no line at all: nothing more to read.
    let waits = |db: &Rc<Sqlite>| {
        db.conn.prepare_cached("SELECT 1 FROM limit_wait LIMIT 1").is_ok_and(|mut st| st.exists([]).unwrap_or(false))
    };
    if !dbs.iter().any(waits) {
        return Vec::new();
    }
    let (keys, jobs) = read(dbs, now);
    let mut out = Vec::new();
    for (name, k) in &keys {
        let Some(oldest) = k.line.iter().map(|(_, since)| *since).min() else { continue };
        if k.paused {
            continue;
        }
        let horizon = oldest - lease_ms - i64::from(WOKEN_HOLD_SECONDS) * 1000;
        if faults.iter().any(|&t| t >= horizon) {
            continue;
        }
        let n = k.line.len();
        let in_line: BTreeSet<&str> = k.line.iter().map(|(id, _)| id.as_str()).collect();
        let parked_keys: BTreeSet<&str> =
            k.line.iter().filter_map(|(id, _)| jobs.get(id).and_then(|(_, (ok, _))| ok.as_deref())).collect();
        let concurrency =
            if k.overridden { k.override_concurrency } else { policies.for_key(name).concurrency.map(i64::from) };
        if k.closed && concurrency.is_none_or(|c| k.permits < c) {
            out.push(format!(
                "limit {name}: {n} job(s) wait in line since +{} ms with a slot free ({} of {concurrency:?} taken, breaker closed)",
                oldest - crate::T0,
                k.permits
            ));
            continue;
        }
        let of_key = jobs.iter().filter(|(_, (limit, _))| limit == name);
        let running = of_key.clone().any(|(_, (_, (_, status)))| status == "RUNNING");
        let coming = of_key.clone().any(|(id, (_, (ordering, _)))| {
            queued.contains(id)
                && !in_line.contains(id.as_str())
                && (on_the_way.wake_ups.contains(id) || ordering.as_deref().is_none_or(|o| !parked_keys.contains(o)))
        });
        if k.permits == 0 && !running && !coming {
            out.push(format!(
                "limit {name}: {n} job(s) wait in line since +{} ms with nothing to wake them (no permit, no run, no message of the key on its way)",
                oldest - crate::T0
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICIES: &str = r#"{"host": {"concurrency": 1, "trip_after": 3}, "free": {"trip_after": 3}}"#;

    fn db(sql: &str) -> Vec<Rc<Sqlite>> {
        let db = Sqlite::memory();
        db.conn.execute_batch(sql).unwrap();
        vec![Rc::new(db)]
    }

    fn check_at(dbs: &[Rc<Sqlite>], queued: &[&str], faults: &[i64]) -> Vec<String> {
        check_with(dbs, queued, &[], faults)
    }

    fn check_with(dbs: &[Rc<Sqlite>], queued: &[&str], wake_ups: &[&str], faults: &[i64]) -> Vec<String> {
        let policies = Policies::parse(POLICIES).unwrap();
        let set = |ids: &[&str]| ids.iter().map(|s| (*s).to_string()).collect::<BTreeSet<String>>();
        let (messages, wake_ups) = (set(queued), set(wake_ups));
        check(dbs, 1_000, &policies, OnTheWay { messages: &messages, wake_ups: &wake_ups }, faults, 100)
    }

    /// `b` waits in `key`'s line (since 500); `a`, of another ordering key, is PENDING outside it.
    fn line_of(key: &str, open_until: &str, paused: i64) -> String {
        format!(
            "INSERT INTO job (id, type, payload, status, ordering_key, seq, limit_key, created_at, updated_at, next_run_at, max_attempts)
               VALUES ('a', 't', '{{}}', 'PENDING', 'k1', 1, '{key}', 0, 0, 0, 5),
                      ('b', 't', '{{}}', 'PENDING', 'k2', 1, '{key}', 0, 0, 0, 5),
                      ('c', 't', '{{}}', 'PENDING', 'k2', 2, '{key}', 0, 0, 0, 5);
             INSERT INTO limit_state (limit_key, paused, open_until, updated_at) VALUES ('{key}', {paused}, {open_until}, 0);
             INSERT INTO limit_wait (limit_key, job_id, since, route) VALUES ('{key}', 'b', 500, '0');"
        )
    }

    #[test]
    fn a_line_with_a_free_slot_is_reported_and_a_full_or_paused_one_is_not() {
        let free = check_at(&db(&line_of("host", "NULL", 0)), &["a"], &[]);
        assert_eq!(free.len(), 1, "{free:?}");
        assert!(free[0].contains("with a slot free"), "{free:?}");
        let no_limit = check_at(&db(&line_of("free", "NULL", 0)), &["a"], &[]);
        assert!(no_limit[0].contains("with a slot free"), "a key without a concurrency: {no_limit:?}");
        let full = line_of("host", "NULL", 0)
            + "INSERT INTO limit_permit (limit_key, job_id, until, handed) VALUES ('host', 'x', 2000, 0);";
        assert!(check_at(&db(&full), &[], &[]).is_empty(), "full, its run wakes b");
        assert!(check_at(&db(&line_of("host", "NULL", 1)), &[], &[]).is_empty(), "paused: a resume wakes b");
    }

    #[test]
    fn a_line_behind_an_open_breaker_needs_a_job_on_its_way_to_probe() {
        let open = db(&line_of("host", "900", 0));
        let found = check_at(&open, &[], &[]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("nothing to wake them"), "{found:?}");
        assert!(check_at(&open, &["a"], &[]).is_empty(), "a comes back for the cool-down and probes");
        assert_eq!(check_at(&open, &["c"], &[]).len(), 1, "c is behind b in its ordering key: it asks nothing");
        assert!(check_with(&open, &["c"], &["c"], &[]).is_empty(), "c's wake-up gives back what it holds: a waker");
        assert_eq!(check_at(&open, &["b"], &[]).len(), 1, "a message of a parked job wakes nothing");
    }

    #[test]
    fn a_slot_handed_behind_a_parked_job_of_its_own_key_holds_the_line_only_while_it_is_live() {
        // c, behind b in k2, was handed a slot it cannot use while k2 is held for b: its wake-up,
        // delivered, gives the slot back, so the line waits only while the hand-off is live. A
        // lapsed one (kept until it lapsed, as once) is a line standing still with a slot free.
        let live = line_of("host", "NULL", 0)
            + "INSERT INTO limit_permit (limit_key, job_id, until, handed) VALUES ('host', 'c', 2000, 1);";
        assert!(check_at(&db(&live), &["c"], &[]).is_empty());
        let lapsed = line_of("host", "NULL", 0)
            + "INSERT INTO limit_permit (limit_key, job_id, until, handed) VALUES ('host', 'c', 900, 1);";
        let found = check_at(&db(&lapsed), &[], &[]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("with a slot free"), "{found:?}");
    }

    #[test]
    fn a_fault_that_may_have_lost_the_waker_excuses_the_line() {
        let free = db(&line_of("host", "NULL", 0));
        // since 500, a lease of 100 ms and the hand-off's hold before it.
        let hold = i64::from(WOKEN_HOLD_SECONDS) * 1000;
        assert!(check_at(&free, &[], &[500 - 100 - hold]).is_empty(), "a crash a lease and a hold before");
        assert_eq!(check_at(&free, &[], &[500 - 100 - hold - 1]).len(), 1, "a fault longer ago excuses nothing");
    }
}
