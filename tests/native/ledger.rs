//! Ledger conformance suite on real SQLite: the same SQL text D1 runs, migrations from
//! `migrations/`. For every transition, the loser's situation (wrong status, other owner, live
//! lease) changes nothing, and a re-read of the row proves it.

use crate::support::Sqlite;
use futures::executor::block_on;
use orderly::config::OrderingMode;
use orderly::ledger::{history, stmt, JobRow, JobSpec, Lease, Ledger, ListFilter, Redrive, Sql, Status};

const T0: i64 = 1_700_000_000_000;
const LEASE: i64 = 120_000;

fn spec(id: &str) -> JobSpec {
    JobSpec {
        id: id.into(),
        job_type: Some("webhook".into()),
        ordering_key: Some("k".into()),
        dedupe_key: None,
        limit_key: None,
        deadline_at: None,
        timeout_seconds: None,
        payload: Some(r#"{"type":"webhook"}"#.into()),
        max_attempts: 3,
        priority: 5,
    }
}

fn one(db: &Sqlite, s: orderly::ledger::Stmt) -> Option<JobRow> {
    JobRow::first(&block_on(db.query(s)).expect("statement runs")).unwrap()
}

fn get(db: &Sqlite, id: &str) -> JobRow {
    one(db, stmt::get(id)).expect("row exists")
}

fn claim(db: &Sqlite, s: &JobSpec, owner: &str, now: i64) -> Option<JobRow> {
    one(db, stmt::claim(s, owner, Lease { now, until: now + LEASE, due_before: now }))
}

#[test]
fn claim_inserts_a_new_job_running_with_one_attempt() {
    let (db, _) = Sqlite::temp();
    let j = claim(&db, &spec("a"), "w1", T0).expect("claimed");
    assert_eq!(
        (j.status, j.attempts, j.lease_owner.as_deref(), j.lease_until),
        (Status::Running, 1, Some("w1"), Some(T0 + LEASE))
    );
    assert_eq!(get(&db, "a"), j);
}

#[test]
fn claim_is_refused_while_lease_is_live() {
    let (db, _) = Sqlite::temp();
    claim(&db, &spec("a"), "w1", T0).unwrap();
    let before = get(&db, "a");
    assert_eq!(claim(&db, &spec("a"), "w2", T0 + LEASE - 1), None);
    assert_eq!(get(&db, "a"), before);
}

#[test]
fn claim_takes_over_an_expired_lease_and_counts_the_attempt() {
    let (db, _) = Sqlite::temp();
    claim(&db, &spec("a"), "w1", T0).unwrap();
    let j = claim(&db, &spec("a"), "w2", T0 + LEASE).expect("expired lease is claimable");
    assert_eq!((j.attempts, j.lease_owner.as_deref()), (2, Some("w2")));
}

#[test]
fn an_expired_lease_out_of_attempts_is_left_to_the_reaper() {
    let (db, _) = Sqlite::temp();
    // max_attempts 3: three claims whose runners all died.
    claim(&db, &spec("a"), "w1", T0).unwrap();
    claim(&db, &spec("a"), "w2", T0 + LEASE).unwrap();
    claim(&db, &spec("a"), "w3", T0 + 2 * LEASE).unwrap();
    let before = get(&db, "a");
    assert_eq!(claim(&db, &spec("a"), "w4", T0 + 3 * LEASE), None, "a fourth run would exceed max_attempts");
    assert_eq!(get(&db, "a"), before);
    let reaped = JobRow::all(&block_on(db.query(stmt::reap(T0 + 3 * LEASE, 10))).unwrap()).unwrap();
    assert_eq!((reaped[0].status, reaped[0].attempts), (Status::Dead, 3));
}

/// SQLite's plan for a statement, one line per step.
fn plan(db: &Sqlite, s: &orderly::ledger::Stmt) -> Vec<String> {
    db.conn
        .prepare(&format!("EXPLAIN QUERY PLAN {}", s.sql))
        .unwrap()
        .query_map(
            rusqlite::params_from_iter(s.params.iter().map(|p| match p {
                orderly::ledger::Param::Null => rusqlite::types::Value::Null,
                orderly::ledger::Param::Int(i) => rusqlite::types::Value::Integer(*i),
                orderly::ledger::Param::Text(t) => rusqlite::types::Value::Text(t.clone()),
            })),
            |r| r.get::<_, String>(3),
        )
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn a_list_of_one_status_reads_its_index_not_the_table() {
    let (db, _) = Sqlite::temp();
    for (status, index) in [(Status::Dead, "job_dead"), (Status::Done, "job_created")] {
        let plan = plan(&db, &stmt::list(Some(status), None, 50));
        assert!(plan.iter().any(|p| p.contains(index)), "{status:?}: {plan:?}");
        assert!(!plan.iter().any(|p| p.contains("TEMP B-TREE")), "no sort: {plan:?}");
    }
    for status in [Status::Pending, Status::Running] {
        let plan = plan(&db, &stmt::list(Some(status), None, 50));
        for index in ["job_open", "job_key_open"] {
            assert!(plan.iter().any(|p| p.contains(index)), "{status:?}: {plan:?}");
        }
    }
}

#[test]
fn lists_never_read_a_payload_or_a_result() {
    let (db, _) = Sqlite::temp();
    let ledger = Ledger::new(&db);
    for (id, status) in [("p", Status::Pending), ("r", Status::Running), ("d", Status::Done), ("x", Status::Dead)] {
        block_on(db.query(stmt::enqueue(&orderly::ledger::Submit::due(&spec(id), T0), T0))).unwrap();
        if status != Status::Pending {
            claim(&db, &spec(id), "inv", T0);
        }
        match status {
            Status::Done => drop(block_on(db.query(stmt::complete(id, "inv", T0, Some("{\"big\":1}"), None)))),
            Status::Dead => drop(block_on(db.query(stmt::fail(id, "inv", T0, Status::Dead, T0, "gone")))),
            _ => {}
        }
    }
    let filters = [None, Some(Status::Pending), Some(Status::Running), Some(Status::Done), Some(Status::Dead)];
    for status in filters {
        for job_type in [None, Some("webhook")] {
            let filter = ListFilter { status, job_type, ordering_key: None, priority: None };
            let (jobs, _) = block_on(ledger.list(&filter, None, 50)).unwrap();
            assert!(!jobs.is_empty(), "{status:?} {job_type:?}");
            for j in jobs {
                assert_eq!((j.payload, j.result), (None, None), "{status:?} {job_type:?}: {}", j.id);
            }
        }
    }
    assert!(get(&db, "d").result.is_some() && get(&db, "d").payload.is_some(), "the row keeps them");
}

/// The names the statements give the job table: `job`, and every `job AS x` of `src/ledger/sql/`
/// (read from the files, so a new alias is covered without anyone adding it here).
fn job_aliases() -> Vec<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/ledger/sql");
    let mut aliases = vec!["job".to_string()];
    for entry in std::fs::read_dir(dir).expect("src/ledger/sql") {
        let sql = std::fs::read_to_string(entry.expect("entry").path()).expect("readable");
        let code: Vec<&str> = sql.lines().filter(|l| !l.trim_start().starts_with("--")).collect();
        let words: Vec<&str> = code.iter().flat_map(|l| l.split_whitespace()).collect();
        for w in words.windows(3).filter(|w| w[0] == "job" && w[1].eq_ignore_ascii_case("AS")) {
            let alias: String = w[2].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !aliases.contains(&alias) {
                aliases.push(alias);
            }
        }
    }
    aliases
}

#[test]
fn the_job_tables_aliases_are_read_from_the_statements() {
    let aliases = job_aliases();
    for alias in ["job", "k", "had", "above", "other"] {
        assert!(aliases.iter().any(|a| a == alias), "{alias} in {aliases:?}");
    }
    assert!(reads_every_job("SCAN had"), "a whole-table read under park.sql's alias is seen");
}

/// A plan step that walks the whole job table (under any of the statements' aliases): a scan
/// without an index, or the primary key (the table itself: WITHOUT ROWID) searched by nothing.
fn reads_every_job(step: &str) -> bool {
    let aliases = job_aliases();
    let table = step.split_whitespace().nth(1).is_some_and(|t| aliases.iter().any(|a| a == t));
    table
        && ((step.starts_with("SCAN") && !step.contains("INDEX"))
            || (step.contains("USING PRIMARY KEY") && !step.contains("(id=")))
}

/// Every index of `migrations/0007` serves the statements that need it: no statement a job's
/// life or maintenance runs reads the whole table (a plan step `SCAN job` without an index).
#[test]
fn every_index_serves_the_queries_that_need_it() {
    use orderly::config::OnDead;
    let (db, _) = Sqlite::temp();
    let mut deduped = spec("d");
    deduped.dedupe_key = Some("dk".into());
    let lease = orderly::ledger::Lease { now: T0, until: T0 + LEASE, due_before: T0 };
    let cases: Vec<(&str, orderly::ledger::Stmt, &[&str])> = vec![
        ("get", stmt::get("a"), &["PRIMARY KEY"]),
        ("list_all", stmt::list(None, None, 50), &["job_created"]),
        ("park (the key's next seq)", stmt::park(&spec("a"), T0), &["job_key_seq"]),
        (
            "enqueue (the key's next seq)",
            stmt::enqueue(&orderly::ledger::Submit::due(&spec("a"), T0), T0),
            &["job_key_seq"],
        ),
        (
            "claim (dedupe)",
            stmt::claim(&deduped, "w", Lease { now: T0, until: T0 + LEASE, due_before: T0 }),
            &["job_dedupe_active"],
        ),
        ("existing (dedupe)", stmt::existing("a", Some("dk")), &["job_dedupe_active"]),
        ("claim_next", stmt::claim_next("k", "w", lease, OnDead::Block, 50, Some("p")), &["job_key_open"]),
        ("head", stmt::head("k", OnDead::Block), &["job_key_open"]),
        ("stalled_heads", stmt::stalled_heads(T0, OnDead::Block, 10), &["job_key_open"]),
        ("skip", stmt::skip("k", T0), &["job_key_open"]),
        ("blocked_keys", stmt::blocked_keys(10), &["job_dead_head", "job_key_open"]),
        ("overdue", stmt::overdue(T0, 10, OrderingMode::Lock), &["job_open", "job_key_open"]),
        ("reap", stmt::reap(T0, 10), &["job_open", "job_key_open"]),
        ("wake_waiting", stmt::wake_waiting("k", T0), &["job_lock_key", "job_key_open"]),
        ("redrive (the key's next seq)", stmt::redrive("a", T0), &["job_key_seq"]),
        ("activity_jobs", stmt::activity_jobs(T0), &["job_created", "job_finished"]),
        ("counts", stmt::counts(), &["job_open", "job_key_open", "job_tally"]),
        (
            "metrics_jobs",
            stmt::metrics_jobs(T0, orderly::config::OnDead::Skip),
            &["job_open", "job_key_open", "job_tally"],
        ),
    ];
    for (what, s, indexes) in cases {
        let plan = plan(&db, &s);
        for index in indexes {
            assert!(plan.iter().any(|p| p.contains(index)), "{what} uses {index}: {plan:?}");
        }
        assert!(!plan.iter().any(|p| reads_every_job(p)), "{what} reads the whole table: {plan:?}");
    }
}

#[test]
fn the_purge_reads_done_rows_through_the_finished_index() {
    let (db, _) = Sqlite::temp();
    for s in stmt::purge(orderly::ledger::Status::Dead, 0, T0, 100, true) {
        let plan = plan(&db, &s);
        assert!(plan.iter().any(|p| p.contains("job_finished")), "{}: {plan:?}", s.sql);
        assert!(!plan.iter().any(|p| p.contains("TEMP B-TREE FOR ORDER BY")), "no sort of every DONE row: {plan:?}");
    }
}

#[test]
fn the_charts_read_recent_runs_and_redrives_through_their_index() {
    let (db, _) = Sqlite::temp();
    let plan = plan(&db, &orderly::ledger::stmt::activity_runs(T0));
    assert!(plan.iter().any(|p| p.contains("job_event_at")), "{plan:?}");
}

#[test]
fn claim_of_a_finished_job_changes_nothing() {
    let (db, _) = Sqlite::temp();
    claim(&db, &spec("a"), "w1", T0).unwrap();
    one(&db, stmt::complete("a", "w1", T0 + 1, None, None)).unwrap();
    let done = get(&db, "a");
    assert_eq!(claim(&db, &spec("a"), "w2", T0 + 10 * LEASE), None);
    assert_eq!(get(&db, "a"), done);

    one(&db, stmt::record_dead(&spec("b"), T0, "bad body")).unwrap();
    let dead = get(&db, "b");
    assert_eq!(claim(&db, &spec("b"), "w2", T0 + 1), None);
    assert_eq!(get(&db, "b"), dead);
}

#[test]
fn claim_waits_for_a_pending_job_to_be_due() {
    let (db, _) = Sqlite::temp();
    claim(&db, &spec("a"), "w1", T0).unwrap();
    one(&db, stmt::fail("a", "w1", T0, Status::Pending, T0 + 5_000, "HTTP 503")).unwrap();
    let before = get(&db, "a");
    assert_eq!(
        one(&db, stmt::claim(&spec("a"), "w2", Lease { now: T0 + 1_000, until: T0 + LEASE, due_before: T0 + 4_999 })),
        None
    );
    assert_eq!(get(&db, "a"), before);
    let j =
        one(&db, stmt::claim(&spec("a"), "w2", Lease { now: T0 + 5_000, until: T0 + LEASE, due_before: T0 + 5_000 }))
            .expect("due");
    assert_eq!((j.status, j.attempts), (Status::Running, 2));
}

#[test]
fn complete_by_another_owner_or_from_the_wrong_state_changes_nothing() {
    let (db, _) = Sqlite::temp();
    claim(&db, &spec("a"), "w1", T0).unwrap();
    let before = get(&db, "a");
    assert_eq!(one(&db, stmt::complete("a", "w2", T0 + 1, None, None)), None);
    assert_eq!(get(&db, "a"), before);

    let done = one(&db, stmt::complete("a", "w1", T0 + 2, None, None)).expect("owner completes");
    assert_eq!((done.status, done.finished_at, done.lease_owner.as_deref()), (Status::Done, Some(T0 + 2), None));
    assert_eq!(one(&db, stmt::complete("a", "w1", T0 + 3, None, None)), None);
    assert_eq!(get(&db, "a"), done);
}

#[test]
fn fail_retries_then_is_dead_at_max_attempts() {
    let (db, _) = Sqlite::temp();
    let mut now = T0;
    for attempt in 1..=3 {
        let j = claim(&db, &spec("a"), "w", now).expect("claimable");
        assert_eq!(j.attempts, attempt);
        let to = if j.attempts >= j.max_attempts { Status::Dead } else { Status::Pending };
        let failed = one(&db, stmt::fail("a", "w", now, to, now + 1_000, &format!("HTTP 500 #{attempt}"))).unwrap();
        assert_eq!(failed.status, to);
        now += 1_000;
    }
    let j = get(&db, "a");
    assert_eq!(
        (j.status, j.attempts, j.last_error.as_deref(), j.finished_at),
        (Status::Dead, 3, Some("HTTP 500 #3"), Some(T0 + 2_000))
    );
}

#[test]
fn fail_by_another_owner_changes_nothing() {
    let (db, _) = Sqlite::temp();
    claim(&db, &spec("a"), "w1", T0).unwrap();
    let before = get(&db, "a");
    assert_eq!(one(&db, stmt::fail("a", "w2", T0, Status::Dead, T0, "x")), None);
    assert_eq!(get(&db, "a"), before);
}

#[test]
fn defer_gives_the_attempt_back_and_counts_a_deferral() {
    let (db, _) = Sqlite::temp();
    claim(&db, &spec("a"), "w1", T0).unwrap();
    assert_eq!(one(&db, stmt::defer("a", "w2", T0, T0 + 1, false)), None);
    let j = one(&db, stmt::defer("a", "w1", T0, T0 + 2_000, false)).unwrap();
    assert_eq!((j.status, j.attempts, j.deferrals, j.next_run_at), (Status::Pending, 0, 1, T0 + 2_000));
    assert_eq!(one(&db, stmt::defer("a", "w1", T0, T0 + 3_000, false)), None, "not RUNNING any more");
}

#[test]
fn a_lock_deferral_counts_deferrals_never_attempts() {
    let (db, _) = Sqlite::temp();
    for i in 0..5 {
        one(&db, stmt::note_deferral(&spec("a"), T0 + i, T0 + i + 1_000)).unwrap();
    }
    let j = get(&db, "a");
    assert_eq!((j.status, j.attempts, j.deferrals), (Status::Pending, 0, 5));
    // A running job is not touched by a deferral note.
    claim(&db, &spec("a"), "w", T0 + 2_000).unwrap();
    let running = get(&db, "a");
    assert_eq!(one(&db, stmt::note_deferral(&spec("a"), T0, T0)), None);
    assert_eq!(get(&db, "a"), running);
}

#[test]
fn counts_read_through_the_indexes_match_the_table() {
    use orderly::config::OnDead;
    let (db, _) = Sqlite::temp();
    let ledger = Ledger::new(&db);
    let unkeyed = |id: &str| JobSpec { ordering_key: None, ..spec(id) };
    let keyed = |id: &str, key: &str| JobSpec { ordering_key: Some(key.into()), ..spec(id) };
    // Unkeyed: PENDING, RUNNING, DONE, DEAD; lock mode's keyed RUNNING; strict keys with a DONE
    // job, a DEAD head blocking two PENDING ones, and a RUNNING one.
    block_on(ledger.enqueue(&unkeyed("u-pending"), T0, T0)).unwrap();
    claim(&db, &unkeyed("u-running"), "w", T0).unwrap();
    claim(&db, &unkeyed("u-done"), "w", T0).unwrap();
    one(&db, stmt::complete("u-done", "w", T0, None, None)).unwrap();
    one(&db, stmt::record_dead(&unkeyed("u-dead"), T0, "bad body")).unwrap();
    claim(&db, &keyed("l-running", "lk"), "w", T0).unwrap();
    let specs = [keyed("s1", "s"), keyed("s2", "s"), keyed("b1", "b"), keyed("b2", "b"), keyed("b3", "b")];
    block_on(ledger.enqueue_all(&specs.iter().map(|s| orderly::ledger::Submit::due(s, T0)).collect::<Vec<_>>(), T0))
        .unwrap();
    let lease = orderly::ledger::Lease { now: T0, until: T0 + LEASE, due_before: T0 };
    for key in ["s", "b"] {
        block_on(db.query(stmt::claim_next(key, "w", lease, OnDead::Block, 1, None))).unwrap();
    }
    one(&db, stmt::complete("s1", "w", T0, None, None)).unwrap();
    block_on(db.query(stmt::claim_next("s", "w", lease, OnDead::Block, 1, None))).unwrap();
    one(&db, stmt::fail("b1", "w", T0, Status::Dead, T0, "HTTP 404")).unwrap();
    let table: Vec<(String, i64)> = db
        .conn
        .prepare("SELECT status, count(*) FROM job GROUP BY status ORDER BY status")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(table, [("DEAD".into(), 2), ("DONE".into(), 2), ("PENDING".into(), 3), ("RUNNING".into(), 3)]);
    let c = block_on(ledger.counts()).unwrap();
    assert_eq!((c.pending, c.running, c.done, c.dead), (3, 3, 2, 2));
}

#[test]
fn a_job_polling_a_held_key_keeps_its_due_time_within_the_slack() {
    let (db, _) = Sqlite::temp();
    let slack = orderly::maintenance::RESEND_GRACE_MS / 2;
    let keep = |at: i64| block_on(db.batch(vec![stmt::keep_due("a", at + 1_000, at, slack)])).unwrap();
    one(&db, stmt::note_deferral(&spec("a"), T0, T0 + 1_000)).unwrap();
    // Polls every second for a while: the due time is not rewritten until it is `slack` behind.
    for s in 1..=(slack / 1_000) {
        keep(T0 + s * 1_000);
    }
    assert_eq!(get(&db, "a").next_run_at, T0 + 1_000, "not written within the slack");
    keep(T0 + slack + 1_000);
    assert_eq!(get(&db, "a").next_run_at, T0 + slack + 2_000, "written once it fell behind");
    // Maintenance (overdue by RESEND_GRACE_MS) never takes the polling job's message for lost.
    assert!(slack < orderly::maintenance::RESEND_GRACE_MS);
    // A running job is not touched.
    claim(&db, &spec("a"), "w", T0 + 10 * slack).unwrap();
    let running = get(&db, "a");
    keep(T0 + 20 * slack);
    assert_eq!(get(&db, "a"), running);
}

#[test]
fn record_dead_leaves_done_jobs_and_live_leases_alone() {
    let (db, _) = Sqlite::temp();
    claim(&db, &spec("live"), "w", T0).unwrap();
    let live = get(&db, "live");
    assert_eq!(one(&db, stmt::record_dead(&spec("live"), T0 + 1, "delivery attempts exhausted")), None);
    assert_eq!(get(&db, "live"), live);
    let dead =
        one(&db, stmt::record_dead(&spec("live"), T0 + LEASE, "delivery attempts exhausted")).expect("expired lease");
    assert_eq!(dead.status, Status::Dead);

    claim(&db, &spec("done"), "w", T0).unwrap();
    one(&db, stmt::complete("done", "w", T0, None, None)).unwrap();
    let done = get(&db, "done");
    assert_eq!(one(&db, stmt::record_dead(&spec("done"), T0 + 1, "x")), None);
    assert_eq!(get(&db, "done"), done);
}

#[test]
fn renew_extends_only_the_owners_leases() {
    let (db, _) = Sqlite::temp();
    claim(&db, &spec("a"), "w1", T0).unwrap();
    claim(&db, &spec("b"), "w2", T0).unwrap();
    claim(&db, &spec("c"), "w1", T0).unwrap();
    one(&db, stmt::complete("c", "w1", T0 + 5, None, None)).unwrap();
    // w1 names every job it claimed, and b too: only its own RUNNING ones are extended.
    let ids: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
    let renewed = block_on(db.query(stmt::renew("w1", T0 + 10, T0 + 999_999, &ids))).unwrap();
    assert_eq!(renewed.len(), 1);
    assert_eq!(get(&db, "a").lease_until, Some(T0 + 999_999));
    assert_eq!(get(&db, "b").lease_until, Some(T0 + LEASE));
    assert_eq!((get(&db, "c").status, get(&db, "c").lease_until), (Status::Done, None));
}

#[test]
fn an_expired_lease_is_reaped_with_attempts_kept() {
    let (db, _) = Sqlite::temp();
    claim(&db, &spec("a"), "w1", T0).unwrap();
    assert!(block_on(db.query(stmt::reap(T0 + LEASE - 1, 10))).unwrap().is_empty(), "live lease is not reaped");
    let reaped = block_on(db.query(stmt::reap(T0 + LEASE, 10))).unwrap();
    assert_eq!(reaped.len(), 1);
    let j = get(&db, "a");
    assert_eq!((j.status, j.attempts, j.lease_owner.as_deref()), (Status::Pending, 1, None));
    assert!(j.last_error.unwrap().contains("lease of w1 expired"));
    // The reaped job is claimable again and its attempt count continues.
    assert_eq!(claim(&db, &spec("a"), "w2", T0 + LEASE).unwrap().attempts, 2);
}

#[test]
fn a_reaped_job_out_of_attempts_is_dead() {
    let (db, _) = Sqlite::temp();
    let mut s = spec("a");
    s.max_attempts = 1;
    claim(&db, &s, "w1", T0).unwrap();
    block_on(db.query(stmt::reap(T0 + LEASE, 10))).unwrap();
    let j = get(&db, "a");
    assert_eq!((j.status, j.finished_at), (Status::Dead, Some(T0 + LEASE)));
}

#[test]
fn an_active_dedupe_key_blocks_and_a_finished_one_does_not() {
    let (db, _) = Sqlite::temp();
    let ledger = Ledger::new(&db);
    let with_key = |id: &str| JobSpec { dedupe_key: Some("d1".into()), limit_key: None, ..spec(id) };
    let (first, inserted) = block_on(ledger.enqueue(&with_key("a"), T0, T0)).unwrap();
    assert!(inserted);
    let (dup, inserted) = block_on(ledger.enqueue(&with_key("b"), T0, T0)).unwrap();
    assert!(!inserted);
    assert_eq!(dup.id, first.id);
    // The claim path refuses too: nothing is inserted for a message with an active dedupe key.
    assert_eq!(claim(&db, &with_key("c"), "w", T0), None);
    assert_eq!(one(&db, stmt::get("c")), None);

    claim(&db, &with_key("a"), "w", T0).unwrap();
    one(&db, stmt::complete("a", "w", T0, None, None)).unwrap();
    let (fresh, inserted) = block_on(ledger.enqueue(&with_key("d"), T0, T0)).unwrap();
    assert!(inserted);
    assert_eq!(fresh.id, "d");
}

#[test]
fn the_schema_refuses_a_second_active_job_with_the_same_dedupe_key() {
    let (db, _) = Sqlite::temp();
    let insert = "INSERT INTO job (id, status, dedupe_key, max_attempts, next_run_at, created_at, updated_at) VALUES (?1, 'PENDING', 'd', 1, 0, 0, 0)";
    db.conn.execute(insert, ["a"]).unwrap();
    assert!(db.conn.execute(insert, ["b"]).is_err());
}

#[test]
fn the_schema_refuses_an_unknown_status_and_a_running_job_without_a_lease() {
    let (db, _) = Sqlite::temp();
    let bad =
        "INSERT INTO job (id, status, max_attempts, next_run_at, created_at, updated_at) VALUES ('x', ?1, 1, 0, 0, 0)";
    assert!(db.conn.execute(bad, ["LOST"]).is_err());
    assert!(db.conn.execute(bad, ["RUNNING"]).is_err());
    assert!(db.conn.execute(bad, ["PENDING"]).is_ok());
}

#[test]
fn redrive_moves_dead_to_pending_keeping_the_history() {
    let (db, _) = Sqlite::temp();
    let ledger = Ledger::new(&db);
    // Dead after a run, so the redrive has an attempt to reset.
    claim(&db, &spec("a"), "w", T0).unwrap();
    one(&db, stmt::fail("a", "w", T0, Status::Dead, T0, "HTTP 404")).unwrap();
    let Redrive::Redriven(j) = block_on(ledger.redrive("a", T0 + 5)).unwrap() else { panic!("redriven") };
    assert_eq!((j.status, j.attempts, j.next_run_at, j.finished_at), (Status::Pending, 0, T0 + 5, None));
    assert!(j.last_error.unwrap().contains("HTTP 404"));
    assert!(
        matches!(block_on(ledger.redrive("a", T0 + 6)).unwrap(), Redrive::Refused(r) if r.status == Status::Pending)
    );
    assert_eq!(block_on(ledger.redrive("nope", T0)).unwrap(), Redrive::NotFound);
}

#[test]
fn a_redrive_clears_a_deadline_already_past_and_keeps_one_ahead() {
    let (db, _) = Sqlite::temp();
    let ledger = Ledger::new(&db);
    let with_deadline = |id: &str, at: i64| JobSpec { deadline_at: Some(at), ..spec(id) };
    one(&db, stmt::record_dead(&with_deadline("expired", T0), T0 + 1, "expired: not started by its deadline")).unwrap();
    one(&db, stmt::record_dead(&with_deadline("ahead", T0 + 60_000), T0 + 1, "HTTP 500")).unwrap();
    // Redriven, the expired job may run (its next claim would expire it again otherwise); the
    // other keeps the producer's bound.
    let Redrive::Redriven(j) = block_on(ledger.redrive("expired", T0 + 5)).unwrap() else { panic!("redriven") };
    assert_eq!(j.deadline_at, None);
    let Redrive::Redriven(j) = block_on(ledger.redrive("ahead", T0 + 5)).unwrap() else { panic!("redriven") };
    assert_eq!(j.deadline_at, Some(T0 + 60_000));
}
#[test]
fn redrive_is_refused_while_the_dedupe_key_is_active_elsewhere() {
    let (db, _) = Sqlite::temp();
    let ledger = Ledger::new(&db);
    let with_key = |id: &str| JobSpec { dedupe_key: Some("d".into()), limit_key: None, ..spec(id) };
    one(&db, stmt::record_dead(&with_key("old"), T0, "HTTP 410")).unwrap();
    block_on(ledger.enqueue(&with_key("new"), T0, T0)).unwrap();
    let before = get(&db, "old");
    assert!(matches!(block_on(ledger.redrive("old", T0)).unwrap(), Redrive::Refused(j) if j.status == Status::Dead));
    assert_eq!(get(&db, "old"), before);
}

#[test]
fn counts_always_have_all_four_statuses() {
    let (db, _) = Sqlite::temp();
    let ledger = Ledger::new(&db);
    let c = block_on(ledger.counts()).unwrap();
    assert_eq!(serde_json::to_value(c).unwrap(), serde_json::json!({"PENDING": 0, "RUNNING": 0, "DONE": 0, "DEAD": 0}));
    claim(&db, &spec("r"), "w", T0).unwrap();
    one(&db, stmt::record_dead(&spec("d"), T0, "x")).unwrap();
    block_on(ledger.enqueue(&spec("p"), T0, T0)).unwrap();
    let c = block_on(ledger.counts()).unwrap();
    assert_eq!((c.pending, c.running, c.done, c.dead), (1, 1, 0, 1));
}

#[test]
fn list_pages_newest_first_with_a_cursor() {
    let (db, _) = Sqlite::temp();
    let ledger = Ledger::new(&db);
    for i in 0..7 {
        one(&db, stmt::record_dead(&spec(&format!("j{i}")), T0 + (i / 2), "x")).unwrap();
    }
    claim(&db, &spec("running"), "w", T0 + 100).unwrap();
    let mut seen = Vec::new();
    let mut cursor: Option<(i64, String)> = None;
    loop {
        let (page, next) = block_on(ledger.list(
            &ListFilter { status: Some(Status::Dead), ..ListFilter::default() },
            cursor.as_ref().map(|(a, i)| (*a, i.as_str())),
            3,
        ))
        .unwrap();
        seen.extend(page.into_iter().map(|j| j.id));
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, vec!["j6", "j5", "j4", "j3", "j2", "j1", "j0"]);
    let (all, _) = block_on(ledger.list(&ListFilter::default(), None, 50)).unwrap();
    assert_eq!(all.len(), 8);
    assert_eq!(all[0].id, "running");
}

#[test]
fn purge_deletes_only_done_rows_older_than_the_cutoff() {
    let (db, _) = Sqlite::temp();
    for (id, at) in [("old", T0), ("new", T0 + 10)] {
        claim(&db, &spec(id), "w", at).unwrap();
        one(&db, stmt::complete(id, "w", at, None, None)).unwrap();
        let run = history::Run {
            job_id: id.to_string(),
            attempt: 1,
            started_at: at,
            finished_at: at,
            outcome: history::RunOutcome::Done,
            error: None,
            http_status: None,
            actor: "w".to_string(),
        };
        block_on(db.query(stmt::run(&run))).unwrap();
    }
    one(&db, stmt::record_dead(&spec("dead"), T0, "x")).unwrap();
    let purged = block_on(db.batch(stmt::purge(orderly::ledger::Status::Done, 0, T0 + 5, 100, false).into())).unwrap();
    assert_eq!(purged.last().map(Vec::len), Some(1));
    assert_eq!(one(&db, stmt::get("old")), None);
    assert!(one(&db, stmt::get("new")).is_some());
    assert!(one(&db, stmt::get("dead")).is_some());
    // A purged job's history goes with it; the others' stays.
    assert!(block_on(orderly::ledger::Ledger::new(&db).events("old")).unwrap().is_empty());
    assert_eq!(block_on(orderly::ledger::Ledger::new(&db).events("new")).unwrap().len(), 1);
}

#[test]
fn an_overdue_job_is_taken_for_resending_once() {
    let (db, _) = Sqlite::temp();
    one(&db, stmt::note_deferral(&spec("a"), T0, T0)).unwrap();
    let overdue = block_on(db.query(stmt::overdue(T0 + 1, 10, OrderingMode::Lock))).unwrap();
    let j = JobRow::from_row(&overdue[0]).unwrap();
    assert!(one(&db, stmt::mark_resent("a", j.next_run_at, T0 + 2)).is_some());
    assert_eq!(one(&db, stmt::mark_resent("a", j.next_run_at, T0 + 3)), None, "a second run does not re-send it");
}

#[test]
fn eight_connections_racing_to_claim_twelve_jobs_give_eight_distinct_winners() {
    let (db, path) = Sqlite::temp();
    for i in 0..12 {
        block_on(Ledger::new(&db).enqueue(&spec(&format!("j{i:02}")), T0, T0)).unwrap();
    }
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|w| {
            let path = path.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let conn = Sqlite::open(&path);
                let owner = format!("w{w}");
                barrier.wait();
                // Every connection goes for the same jobs in the same order and stops at its first
                // win: the most contended race the claim can face.
                (0..12)
                    .map(|k| format!("j{k:02}"))
                    .find(|id| claim(&conn, &spec(id), &owner, T0).is_some())
                    .map(|id| (id, owner))
            })
        })
        .collect();
    let wins: Vec<(String, String)> = handles.into_iter().filter_map(|h| h.join().unwrap()).collect();
    assert_eq!(wins.len(), 8, "every connection won a job");
    let jobs: std::collections::BTreeSet<&str> = wins.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(jobs.len(), 8, "no job was claimed twice");
    for (id, owner) in &wins {
        let j = get(&db, id);
        assert_eq!((j.attempts, j.lease_owner.as_deref()), (1, Some(owner.as_str())), "the row names its one winner");
    }
    let c = block_on(Ledger::new(&db).counts()).unwrap();
    assert_eq!((c.running, c.pending), (8, 4));
}

/// The statements that may read every job, each with why. Any other SQL file of the ledger that
/// reads the whole table fails [`no_statement_reads_the_whole_table`].
const WHOLE_TABLE_READS: &[(&str, &str)] = &[
    (
        "export_jobs",
        "moving a D1 ledger to shards reads every job by design: a page at a time by id (LIMIT), with delivery paused",
    ),
    (
        "move_page",
        "the move's check compares every job with its copy by design: a page at a time by id (LIMIT), with writes refused",
    ),
];

/// Every SQL file of `src/ledger/sql/` (found in the folder, so a new one cannot be left out),
/// planned by SQLite: none reads the whole job table, DONE rows and payloads included, but the
/// ones [`WHOLE_TABLE_READS`] names.
#[test]
fn no_statement_reads_the_whole_table() {
    let (db, _) = Sqlite::temp();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ledger/sql");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() > 30, "the SQL files are found: {files:?}");
    let mut offenders = Vec::new();
    for path in files.iter().filter(|p| p.extension().is_some_and(|e| e == "sql")) {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let sql: &'static str = Box::leak(std::fs::read_to_string(path).unwrap().into_boxed_str());
        // Bound NULL, each parameter: SQLite plans a statement once, whatever its values.
        let count = (1..=40).filter(|n| sql.contains(&format!("?{n}"))).max().unwrap_or(0);
        let s = orderly::ledger::Stmt::bind(sql, (0..count).map(|_| ("any", orderly::ledger::Param::Null)));
        let plan = plan(&db, &s);
        let whole = plan.iter().any(|p| reads_every_job(p));
        if whole != WHOLE_TABLE_READS.iter().any(|(n, _)| *n == name) {
            offenders.push(format!("{name}: {plan:?}"));
        }
    }
    assert!(offenders.is_empty(), "reads the whole job table (or no longer does, and is still listed): {offenders:#?}");
}

/// A ledger's life (design "The ledger's life"): one cron run purges well over the 7,500 DONE
/// jobs a minute one D1 takes in, in batches, and the next run starts where it stopped; DEAD jobs
/// past their own retention go too, but for a key's blocking head; the tally of finished jobs
/// stays what the rows say through it all.
#[test]
fn one_cron_run_purges_what_a_minute_brings_and_the_tally_follows() {
    use orderly::config::{Config, OnDead};
    use orderly::maintenance;
    let db = Sqlite::memory();
    let now = T0 + 40 * 86_400_000;
    // 12,000 DONE jobs past the 7-day retention, each its own key; a DEAD one every 50th, 31
    // days old (past DEAD_RETENTION_DAYS' 30), every 100th of those its key's blocking head.
    // Set up through `exec`, traced like the ledger's batches, so the replay on D1 has the rows.
    let at = now - 31 * 86_400_000;
    db.exec(
        &format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 12000)
             INSERT INTO job (id, type, status, ordering_key, seq, max_attempts, next_run_at, created_at,
                              updated_at, finished_at, passed_at)
             SELECT 'j' || i, 't' || (i % 3), CASE WHEN i % 50 = 0 THEN 'DEAD' ELSE 'DONE' END, 'k' || i,
                    CASE WHEN i % 5000 = 0 THEN 1 END, 1, {at} - i, {at} - i, {at} - i, {at} - i,
                    CASE WHEN i % 50 = 0 AND i % 5000 <> 0 THEN {at} - i END
             FROM n"
        ),
        &[],
    )
    .unwrap();
    let tally = |db: &Sqlite| -> (i64, i64) {
        let q = |sql: &str| db.conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
        (q("SELECT count(*) FROM job WHERE finished_at IS NOT NULL"), q("SELECT coalesce(sum(n), 0) FROM job_tally"))
    };
    assert_eq!(tally(&db), (12_000, 12_000));
    let ledger = Ledger::new(&db);
    let clock = orderly::clock::ManualClock::new(now);
    let queue = crate::support::MemoryQueue::default();
    let cfg = Config { ordering_mode: OrderingMode::Strict, on_dead: OnDead::Block, ..Config::default() };
    let r = block_on(maintenance::run(&ledger, &queue, &clock, &cfg));
    assert_eq!((r.purged, r.purged_dead, r.errors.len()), (11_760, 238, 0), "{r:?}");
    // The two blocking heads are kept; the tally holds what is left.
    assert_eq!(tally(&db), (2, 2));
    let left: Vec<String> = db
        .conn
        .prepare("SELECT id FROM job ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(left, ["j10000", "j5000"]);
    // The DONE purge's cursor stands at the retention's edge: the next run reads nothing twice.
    let until: i64 = db.conn.query_row("SELECT until FROM purge_cursor WHERE name = 'DONE'", [], |r| r.get(0)).unwrap();
    assert_eq!(until, now - 7 * 86_400_000);
}
