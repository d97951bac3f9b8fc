//! Migration 0007 (cost per job) moves a live ledger to the new layout in place: a ledger built by
//! migrations 0001-0006 holding jobs of both modes in every status (some running, some waiting,
//! a key blocked by a DEAD head, history rows) is migrated, and every job keeps its data and
//! carries on with the new statements: running jobs complete under their leases, waiting ones are
//! claimed in their key's order, the blocked key stays blocked until skipped, DEAD jobs redrive,
//! old history reads as before, and the purge finds the old DONE rows.

use crate::support::Sqlite;
use futures::executor::block_on;
use orderly::config::OnDead;
use orderly::ledger::history::{Kind, RunOutcome};
use orderly::ledger::strict::Skip;
use orderly::ledger::{stmt, JobRow, Lease, Ledger, Redrive, Sql, Status, Stmt};
use rusqlite::types::Value as SqlValue;

const T0: i64 = 1_700_000_000_000;
const LEASE_MS: i64 = 120_000;

/// The columns every migration before 0007 had, in a stable order.
const OLD_COLUMNS: &str = "id, type, status, ordering_key, dedupe_key, payload, attempts, max_attempts, deferrals, \
     lease_owner, lease_until, next_run_at, last_error, created_at, updated_at, finished_at, seq, skipped_at, \
     priority, result";

/// One old-layout row: (id, status, key, seq, lease owner, finished_at, skipped_at, deferrals, attempts).
type OldRow = (
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<i64>,
    Option<&'static str>,
    Option<i64>,
    Option<i64>,
    i64,
    i64,
);

const ROWS: &[OldRow] = &[
    // Lock mode (no seq): a running unkeyed job, a keyed job put off behind its key, a DONE one
    // (with its run in history, as the old code wrote it), a DEAD one.
    ("lock-running", "RUNNING", None, None, Some("inv-1"), None, None, 0, 1),
    ("lock-waiting", "PENDING", Some("lk"), None, None, None, None, 2, 0),
    ("lock-done", "DONE", Some("lk"), None, None, Some(T0 - 5_000), None, 0, 1),
    ("lock-dead", "DEAD", None, None, None, Some(T0 - 4_000), None, 0, 3),
    // Strict mode, key `s`: DONE, a skipped DEAD job, a running one, two waiting.
    ("s1", "DONE", Some("s"), Some(1), None, Some(T0 - 3_000), None, 0, 1),
    ("s2", "DEAD", Some("s"), Some(2), None, Some(T0 - 2_000), Some(T0 - 1_500), 0, 3),
    ("s3", "RUNNING", Some("s"), Some(3), Some("inv-2"), None, None, 0, 1),
    ("s4", "PENDING", Some("s"), Some(4), None, None, None, 0, 0),
    ("s5", "PENDING", Some("s"), Some(5), None, None, None, 0, 0),
    // Strict mode, key `r`: a job redriven under the old layout below a running one.
    ("r1", "PENDING", Some("r"), Some(1), None, None, None, 0, 0),
    ("r2", "RUNNING", Some("r"), Some(2), Some("inv-5"), None, None, 0, 1),
    ("r3", "PENDING", Some("r"), Some(3), None, None, None, 0, 0),
    // Strict mode, key `b`: blocked by a DEAD head nobody skipped.
    ("b1", "DEAD", Some("b"), Some(1), None, Some(T0 - 1_000), None, 0, 3),
    ("b2", "PENDING", Some("b"), Some(2), None, None, None, 0, 0),
];

fn old_ledger() -> Sqlite {
    let db = Sqlite::bare();
    db.migrate_range(|name| name < "0007");
    for (i, &(id, status, key, seq, owner, finished, skipped, deferrals, attempts)) in ROWS.iter().enumerate() {
        let created = T0 - 10_000 + i as i64;
        db.conn
            .execute(
                "INSERT INTO job (id, type, status, ordering_key, payload, attempts, max_attempts, deferrals, \
                 lease_owner, lease_until, next_run_at, last_error, created_at, updated_at, finished_at, seq, \
                 skipped_at, result) \
                 VALUES (?1, 'webhook', ?2, ?3, '{\"type\":\"webhook\"}', ?4, 3, ?5, ?6, ?7, ?8, ?9, ?8, ?10, ?11, ?12, ?13, ?14)",
                rusqlite::params![
                    id,
                    status,
                    key,
                    attempts,
                    deferrals,
                    owner,
                    owner.map(|_| T0 + LEASE_MS),
                    created,
                    (status == "DEAD").then_some("HTTP 404"),
                    finished.unwrap_or(created),
                    finished,
                    seq,
                    skipped,
                    (status == "DONE").then_some("{\"ok\":true}"),
                ],
            )
            .expect("old row");
    }
    // The old code wrote every run to history, successes included.
    db.conn
        .execute(
            "INSERT INTO job_event (job_id, slot, n, at, kind, actor, attempt, started_at, outcome, http_status) \
             VALUES ('lock-done', 1, 1, ?1, 'attempt', 'inv-0', 1, ?2, 'done', 200)",
            [T0 - 5_000, T0 - 5_100],
        )
        .expect("old history");
    db
}

fn old_columns(db: &Sqlite) -> Vec<Vec<SqlValue>> {
    let mut st = db.conn.prepare(&format!("SELECT {OLD_COLUMNS} FROM job ORDER BY id")).unwrap();
    let n = st.column_count();
    st.query_map([], |r| (0..n).map(|i| r.get::<_, SqlValue>(i)).collect()).unwrap().map(Result::unwrap).collect()
}

fn one(db: &Sqlite, s: Stmt) -> Option<JobRow> {
    JobRow::first(&block_on(db.query(s)).expect("statement runs")).unwrap()
}

fn get(db: &Sqlite, id: &str) -> JobRow {
    one(db, stmt::get(id)).expect("row exists")
}

fn claim_next(db: &Sqlite, key: &str, now: i64, on_dead: OnDead) -> Vec<String> {
    let lease = Lease { now, until: now + LEASE_MS, due_before: now };
    let mut got =
        JobRow::all(&block_on(db.query(stmt::claim_next(key, "inv-3", lease, on_dead, 50, None))).unwrap()).unwrap();
    got.sort_by_key(|j| j.seq);
    got.into_iter().map(|j| j.id).collect()
}

#[test]
fn the_migration_keeps_every_job_and_fills_in_the_new_columns() {
    let db = old_ledger();
    let mut before = old_columns(&db);
    db.migrate_range(|name| name >= "0007");
    // The one change: r1, redriven below the running r2, moved to its key's end (seq 4).
    let r1 = before.iter_mut().find(|row| row[0] == SqlValue::Text("r1".into())).unwrap();
    r1[16] = SqlValue::Integer(4);
    assert_eq!(old_columns(&db), before, "every job, every old column, unchanged");
    let passed: Vec<(String, Option<i64>)> = db
        .conn
        .prepare("SELECT id, passed_at FROM job ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let expected: Vec<(String, Option<i64>)> = {
        let mut v: Vec<_> = ROWS
            .iter()
            .map(|&(id, status, _, _, _, finished, skipped, _, _)| {
                let p = match status {
                    "DONE" => finished,
                    "DEAD" => skipped,
                    _ => None,
                };
                (id.to_string(), p)
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(passed, expected, "DONE and skipped jobs are passed by their keys; nothing else is");
    let indexes: Vec<String> = db
        .conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'job' AND sql IS NOT NULL ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        indexes,
        [
            "job_created",
            "job_dead",
            "job_dead_head",
            "job_dedupe_active",
            "job_finished",
            "job_key_open",
            "job_key_seq",
            "job_lock_key",
            "job_open"
        ]
    );
    let without_rowid: String =
        db.conn.query_row("SELECT sql FROM sqlite_master WHERE name = 'job'", [], |r| r.get(0)).unwrap();
    assert!(without_rowid.contains("WITHOUT ROWID"), "{without_rowid}");
}

#[test]
fn jobs_in_flight_carry_on_after_the_migration() {
    let db = old_ledger();
    db.migrate_range(|name| name >= "0007");
    let ledger = Ledger::new(&db);
    let now = T0 + 1_000;

    // Running jobs complete under the leases they held.
    assert!(one(&db, stmt::complete("lock-running", "inv-1", now, None, None)).is_some());
    assert!(one(&db, stmt::complete("s3", "inv-2", now, None, None)).is_some());
    // Strict key `s` moves on in order past its skipped DEAD job.
    assert_eq!(claim_next(&db, "s", now, OnDead::Block), ["s4", "s5"]);
    // Key `r` runs nothing while r2 runs, then r3 before the moved r1.
    assert!(claim_next(&db, "r", now, OnDead::Block).is_empty());
    assert!(one(&db, stmt::complete("r2", "inv-5", now, None, None)).is_some());
    assert_eq!(claim_next(&db, "r", now, OnDead::Block), ["r3", "r1"]);
    // Key `b` stays blocked by its DEAD head until an operator skips it.
    assert!(claim_next(&db, "b", now, OnDead::Block).is_empty());
    let blocked = block_on(ledger.blocked_keys(10)).unwrap();
    assert_eq!(
        blocked.iter().map(|b| (b.key.as_str(), b.head.id.as_str(), b.waiting)).collect::<Vec<_>>(),
        [("b", "b1", 1)]
    );
    assert!(matches!(block_on(ledger.skip("b", now)).unwrap(), Skip::Skipped { .. }));
    assert_eq!(claim_next(&db, "b", now + 1, OnDead::Block), ["b2"]);
    // The lock-mode job put off behind its key is woken and claimed.
    assert_eq!(one(&db, stmt::wake_waiting("lk", now)).map(|j| j.id).as_deref(), Some("lock-waiting"));
    let waiting = get(&db, "lock-waiting");
    assert!(one(&db, stmt::claim(&waiting.spec(), "inv-4", Lease { now, until: now + LEASE_MS, due_before: now }))
        .is_some());
    // A DEAD job redrives.
    assert!(matches!(block_on(ledger.redrive("lock-dead", now)).unwrap(), Redrive::Redriven(_)));
    assert_eq!(get(&db, "lock-dead").status, Status::Pending);
    // An expired lease is found by the reaper.
    let reaped = JobRow::all(&block_on(db.query(stmt::reap(now + 10 * LEASE_MS, 10))).unwrap()).unwrap();
    let mut reaped: Vec<_> = reaped.into_iter().map(|j| j.id).collect();
    reaped.sort();
    assert_eq!(
        reaped,
        ["b2", "lock-waiting", "r1", "r3", "s4", "s5"],
        "every job claimed after the migration, once its lease expired"
    );
}

#[test]
fn old_history_reads_as_before_and_old_done_rows_are_purged() {
    let db = old_ledger();
    db.migrate_range(|name| name >= "0007");
    let events = block_on(orderly::ledger::Ledger::new(&db).events("lock-done")).unwrap();
    assert_eq!(
        events.iter().map(|e| (e.kind, e.outcome, e.actor.as_str(), e.http_status)).collect::<Vec<_>>(),
        [(Kind::Attempt, Some(RunOutcome::Done), "inv-0", Some(200))],
        "the old success once, not again from the row"
    );
    let purged = block_on(db.batch(stmt::purge(orderly::ledger::Status::Done, 0, T0, 100, false).to_vec())).unwrap();
    let mut ids: Vec<&str> =
        purged.last().into_iter().flatten().filter_map(|r| r.get("id").and_then(|v| v.as_str())).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["lock-done", "s1"]);
    assert!(
        block_on(orderly::ledger::Ledger::new(&db).events("lock-done")).unwrap().is_empty(),
        "its history went with it"
    );
}
