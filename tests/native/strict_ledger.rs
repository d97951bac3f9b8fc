//! Conformance of strict mode's statements (design §3b) on real SQLite: sequence numbers, parking,
//! the run rule (`claim_next.sql`) from every losing situation, chain steps, blocked keys and skip,
//! the stalled-key scan, and real connections racing for one key (exactly one chains).

use crate::support::Sqlite;
use futures::executor::block_on;
use orderly::config::{OnDead, OrderingMode};
use orderly::ledger::strict::{ClaimSpec, Intake, Parked, Skip};
use orderly::ledger::{stmt, JobRow, JobSpec, Lease, Ledger, Record, Route, Sql, Status, Stmt, Transition};

const T0: i64 = 1_700_000_000_000;
const LEASE_MS: i64 = 120_000;

fn spec(id: &str, key: Option<&str>) -> JobSpec {
    JobSpec {
        id: id.into(),
        job_type: Some("webhook".into()),
        ordering_key: key.map(str::to_string),
        dedupe_key: None,
        limit_key: None,
        deadline_at: None,
        timeout_seconds: None,
        payload: Some(format!(r#"{{"type":"webhook","id":"{id}"}}"#)),
        max_attempts: 3,
        priority: 5,
    }
}

fn rows(db: &Sqlite, s: Stmt) -> Vec<JobRow> {
    JobRow::all(&block_on(db.query(s)).expect("statement runs")).unwrap()
}

/// `owner`'s completion of `id`, a job of key "k", as the consumer records it.
fn complete(id: &str, owner: &str, at: i64) -> Record {
    let route = Route::key("k");
    Transition::Complete {
        id: id.into(),
        route,
        owner: owner.into(),
        at,
        result: None,
        http_status: None,
        started_at: None,
    }
    .into()
}

fn get(db: &Sqlite, id: &str) -> JobRow {
    rows(db, stmt::get(id)).pop().expect("row exists")
}

fn lease(now: i64) -> Lease {
    Lease { now, until: now + LEASE_MS, due_before: now }
}

fn claim(
    db: &Sqlite,
    key: &str,
    owner: &str,
    now: i64,
    on_dead: OnDead,
    limit: u32,
    prev: Option<&str>,
) -> Vec<String> {
    let mut got = rows(db, stmt::claim_next(key, owner, lease(now), on_dead, limit, prev));
    got.sort_by_key(|j| j.seq);
    got.into_iter().map(|j| j.id).collect()
}

/// Enqueues jobs of key `k` in order (as `POST /jobs` does), due at `T0`.
fn enqueue(db: &Sqlite, ids: &[&str]) {
    let ledger = Ledger::new(db);
    let specs: Vec<JobSpec> = ids.iter().map(|id| spec(id, Some("k"))).collect();
    block_on(ledger.enqueue_all(&specs.iter().map(|s| orderly::ledger::Submit::due(s, T0)).collect::<Vec<_>>(), T0))
        .unwrap();
}

fn set(db: &Sqlite, id: &str, sql: &str) {
    db.exec(&format!("UPDATE job SET {sql} WHERE id = ?1"), &[id]).unwrap();
}

#[test]
fn enqueue_numbers_each_keys_jobs_in_request_order() {
    let (db, _) = Sqlite::temp();
    let ledger = Ledger::new(&db);
    let specs = [spec("a", Some("k")), spec("x", Some("other")), spec("b", Some("k")), spec("u", None)];
    block_on(ledger.enqueue_all(&specs.iter().map(|s| orderly::ledger::Submit::due(s, T0)).collect::<Vec<_>>(), T0))
        .unwrap();
    let seq = |id| get(&db, id).seq;
    assert_eq!((seq("a"), seq("b"), seq("x"), seq("u")), (Some(1), Some(2), Some(1), None));
}

#[test]
fn park_numbers_a_new_job_once_and_leaves_a_known_one_alone() {
    let (db, _) = Sqlite::temp();
    enqueue(&db, &["a"]);
    let parked = rows(&db, stmt::park(&spec("b", Some("k")), T0));
    assert_eq!((parked[0].status, parked[0].seq, parked[0].attempts), (Status::Pending, Some(2), 0));
    let before = get(&db, "a");
    assert!(rows(&db, stmt::park(&spec("a", Some("k")), T0 + 5)).is_empty(), "a known job is not rewritten");
    assert_eq!(get(&db, "a"), before);
    // A duplicate delivery of a parked job changes nothing either.
    assert!(rows(&db, stmt::park(&spec("b", Some("k")), T0 + 5)).is_empty());
    assert_eq!(get(&db, "b").seq, Some(2));
}

#[test]
fn park_numbers_a_keyed_row_recorded_before_strict_mode() {
    let (db, _) = Sqlite::temp();
    enqueue(&db, &["a"]);
    // Lock mode's claim path records keyed jobs without a seq.
    block_on(db.query(stmt::note_deferral(&spec("old", Some("k")), T0, T0))).unwrap();
    assert_eq!(get(&db, "old").seq, None);
    let parked = rows(&db, stmt::park(&spec("old", Some("k")), T0 + 1));
    assert_eq!(parked[0].seq, Some(2));
}

#[test]
fn park_refuses_a_job_whose_dedupe_key_is_active_elsewhere() {
    let (db, _) = Sqlite::temp();
    let mut a = spec("a", Some("k"));
    a.dedupe_key = Some("d".into());
    block_on(db.query(stmt::park(&a, T0))).unwrap();
    let mut b = spec("b", Some("k"));
    b.dedupe_key = Some("d".into());
    assert!(rows(&db, stmt::park(&b, T0)).is_empty());
    assert!(rows(&db, stmt::get("b")).is_empty());
}

#[test]
fn claim_next_takes_the_keys_due_jobs_in_seq_order_up_to_the_limit() {
    let (db, _) = Sqlite::temp();
    enqueue(&db, &["a", "b", "c", "d"]);
    assert_eq!(claim(&db, "k", "w1", T0, OnDead::Skip, 3, None), vec!["a", "b", "c"]);
    let a = get(&db, "a");
    assert_eq!((a.status, a.attempts, a.lease_owner.as_deref()), (Status::Running, 1, Some("w1")));
    assert_eq!(get(&db, "d").status, Status::Pending);
}

#[test]
fn claim_next_is_refused_while_any_job_of_the_key_runs() {
    let (db, _) = Sqlite::temp();
    enqueue(&db, &["a", "b"]);
    assert_eq!(claim(&db, "k", "w1", T0, OnDead::Skip, 1, None), vec!["a"]);
    let before = get(&db, "b");
    assert!(claim(&db, "k", "w2", T0, OnDead::Skip, 5, None).is_empty(), "live lease");
    assert!(claim(&db, "k", "w2", T0 + LEASE_MS + 1, OnDead::Skip, 5, None).is_empty(), "expired lease: the reaper's");
    assert_eq!(get(&db, "b"), before);
}

#[test]
fn claim_next_stops_at_a_job_waiting_for_its_retry() {
    let (db, _) = Sqlite::temp();
    enqueue(&db, &["a", "b", "c"]);
    set(&db, "b", &format!("next_run_at = {}", T0 + 60_000));
    assert_eq!(claim(&db, "k", "w1", T0, OnDead::Skip, 5, None), vec!["a"], "b blocks c");
    assert_eq!(rows(&db, stmt::complete("a", "w1", T0, None, None)).len(), 1, "a is DONE");
    assert!(claim(&db, "k", "w1", T0 + 1, OnDead::Skip, 5, None).is_empty(), "the head is not due");
    assert_eq!(claim(&db, "k", "w1", T0 + 60_000, OnDead::Skip, 5, None), vec!["b", "c"]);
}

#[test]
fn a_dead_head_lets_the_key_move_on_only_under_skip_or_once_skipped() {
    let (db, _) = Sqlite::temp();
    enqueue(&db, &["a", "b"]);
    set(&db, "a", &format!("status = 'DEAD', finished_at = {T0}, last_error = 'HTTP 404'"));
    assert!(claim(&db, "k", "w1", T0, OnDead::Block, 5, None).is_empty(), "block: the DEAD head blocks");
    let blocked = block_on(Ledger::new(&db).blocked_keys(10)).unwrap();
    assert_eq!(blocked.len(), 1);
    assert_eq!((blocked[0].key.as_str(), blocked[0].head.id.as_str(), blocked[0].waiting), ("k", "a", 1));
    assert_eq!(claim(&db, "k", "w1", T0, OnDead::Skip, 5, None), vec!["b"], "skip: it does not");
}

#[test]
fn skip_passes_only_the_current_dead_head_and_names_the_next() {
    let (db, _) = Sqlite::temp();
    enqueue(&db, &["a", "b"]);
    let ledger = Ledger::new(&db);
    assert_eq!(block_on(ledger.skip("k", T0)).unwrap(), Skip::NotBlocked, "a PENDING head is not skipped");
    set(&db, "a", &format!("status = 'DEAD', finished_at = {T0}, last_error = 'x'"));
    match block_on(ledger.skip("k", T0 + 1)).unwrap() {
        Skip::Skipped { skipped, next } => {
            assert_eq!((skipped.id.as_str(), skipped.skipped_at), ("a", Some(T0 + 1)));
            assert_eq!(next.map(|j| j.id), Some("b".to_string()));
        }
        other @ Skip::NotBlocked => panic!("{other:?}"),
    }
    assert_eq!(block_on(ledger.skip("k", T0 + 2)).unwrap(), Skip::NotBlocked, "skipped once");
    assert!(block_on(ledger.blocked_keys(10)).unwrap().is_empty());
    assert_eq!(claim(&db, "k", "w1", T0 + 3, OnDead::Block, 5, None), vec!["b"]);
}

#[test]
fn a_redriven_head_runs_before_the_jobs_behind_it_again() {
    let (db, _) = Sqlite::temp();
    enqueue(&db, &["a", "b"]);
    set(
        &db,
        "a",
        &format!("status = 'DEAD', finished_at = {T0}, last_error = 'x', skipped_at = {T0}, passed_at = {T0}"),
    );
    let ledger = Ledger::new(&db);
    assert!(matches!(block_on(ledger.redrive("a", T0 + 1)).unwrap(), orderly::ledger::Redrive::Redriven(_)));
    assert_eq!(get(&db, "a").skipped_at, None, "redrive undoes the skip");
    assert_eq!(claim(&db, "k", "w1", T0 + 1, OnDead::Block, 1, None), vec!["a"]);
}

#[test]
fn a_chain_step_claims_on_only_when_the_previous_job_is_finished() {
    let (db, _) = Sqlite::temp();
    enqueue(&db, &["a", "b"]);
    claim(&db, "k", "w1", T0, OnDead::Skip, 1, None);
    // Our lease was lost: the reaper put `a` back. Our completion changes nothing, and the chain
    // must not claim `a` again as if it were the next job.
    set(&db, "a", "status = 'PENDING', lease_owner = NULL, lease_until = NULL");
    let c = ClaimSpec { owner: "w1", lease: lease(T0 + 10), on_dead: OnDead::Skip, limit: 5 };
    let step =
        block_on(Ledger::new(&db).step("k", &[complete("a", "w1", T0 + 10)], Some((c, Some("a"))), OnDead::Skip))
            .unwrap();
    assert_eq!(step.recorded, vec![false]);
    assert!(step.state.claimed.is_empty());
    // Now as it should go: run, record, chain.
    claim(&db, "k", "w2", T0 + 20, OnDead::Skip, 1, None);
    let c = ClaimSpec { owner: "w2", lease: lease(T0 + 30), on_dead: OnDead::Skip, limit: 5 };
    let step =
        block_on(Ledger::new(&db).step("k", &[complete("a", "w2", T0 + 30)], Some((c, Some("a"))), OnDead::Skip))
            .unwrap();
    assert_eq!(step.recorded, vec![true]);
    assert_eq!(step.state.claimed.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), vec!["b"]);
    assert_eq!(step.state.head.map(|j| j.id), Some("b".to_string()));
}

#[test]
fn park_and_claim_parks_in_send_order_and_claims_in_the_same_transaction() {
    let (db, _) = Sqlite::temp();
    let (x, y) = (spec("x", Some("k")), spec("y", Some("k")));
    let c = ClaimSpec { owner: "w1", lease: lease(T0), on_dead: OnDead::Skip, limit: 1 };
    let out = block_on(
        Ledger::new(&db).park_and_claim(&[Intake { key: "k", jobs: vec![&y, &x], claim: c.limit, woken: vec![] }], c),
    )
    .unwrap();
    assert_eq!(db.round_trips.get(), 1);
    let ids: Vec<String> =
        out[0].parked.iter().map(|p| if let Parked::Recorded(j) = p { j.id.clone() } else { String::new() }).collect();
    assert_eq!(ids, vec!["y", "x"]);
    assert_eq!((get(&db, "y").seq, get(&db, "x").seq), (Some(1), Some(2)));
    assert_eq!(out[0].state.claimed.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), vec!["y"]);
}

#[test]
fn the_stalled_key_scan_finds_due_heads_nothing_runs() {
    let (db, _) = Sqlite::temp();
    enqueue(&db, &["a", "b"]);
    let spec_o = spec("o", Some("other"));
    block_on(db.query(stmt::park(&spec_o, T0))).unwrap();
    claim(&db, "other", "w1", T0, OnDead::Skip, 1, None);
    let found: Vec<String> = rows(&db, stmt::stalled_heads(T0, OnDead::Skip, 10)).into_iter().map(|j| j.id).collect();
    assert_eq!(found, vec!["a"], "only k's head: b waits behind it, `other` runs");
    // Strict mode's overdue re-send leaves sequenced jobs to this scan; lock mode's does not.
    assert!(rows(&db, stmt::overdue(T0, 10, OrderingMode::Strict)).is_empty());
    assert_eq!(rows(&db, stmt::overdue(T0, 10, OrderingMode::Lock)).len(), 2);
}

#[test]
fn racing_connections_claim_a_key_exactly_once() {
    for round in 0..10 {
        let (db, path) = Sqlite::temp();
        enqueue(&db, &["a", "b", "c"]);
        // `a` is running under w0; w0 finishes it and chains while seven others park and claim.
        claim(&db, "k", "w0", T0, OnDead::Skip, 1, None);
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let conn = Sqlite::open(&path);
                    let owner = format!("w{i}");
                    let now = T0 + 1_000;
                    let c = ClaimSpec { owner: &owner, lease: lease(now), on_dead: OnDead::Skip, limit: 5 };
                    if i == 0 {
                        let step = block_on(Ledger::new(&conn).step(
                            "k",
                            &[complete("a", "w0", now)],
                            Some((c, Some("a"))),
                            OnDead::Skip,
                        ))
                        .unwrap();
                        step.state.claimed.len()
                    } else {
                        let new = spec(&format!("n{round}-{i}"), Some("k"));
                        let out = block_on(Ledger::new(&conn).park_and_claim(
                            &[Intake { key: "k", jobs: vec![&new], claim: c.limit, woken: vec![] }],
                            c,
                        ))
                        .unwrap();
                        out[0].state.claimed.len()
                    }
                })
            })
            .collect();
        let claimed: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(claimed.iter().filter(|&&n| n > 0).count(), 1, "round {round}: exactly one chains: {claimed:?}");
        let running: i64 = db
            .conn
            .query_row("SELECT count(DISTINCT lease_owner) FROM job WHERE status = 'RUNNING'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(running, 1);
        let seqs: Vec<i64> = db
            .conn
            .prepare("SELECT seq FROM job ORDER BY seq")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(seqs, (1..=10).collect::<Vec<_>>(), "every parked job got its own seq");
    }
}

#[test]
fn a_redriven_job_below_a_running_one_waits_for_it() {
    let (db, _) = Sqlite::temp();
    enqueue(&db, &["a", "b", "c"]);
    // `a` went DEAD under skip, the key moved on, and `b` runs; an operator redrives `a`.
    set(&db, "a", &format!("status = 'DEAD', finished_at = {T0}, last_error = 'x'"));
    assert_eq!(claim(&db, "k", "w1", T0, OnDead::Skip, 1, None), vec!["b"]);
    assert!(matches!(block_on(Ledger::new(&db).redrive("a", T0 + 1)).unwrap(), orderly::ledger::Redrive::Redriven(_)));
    assert!(claim(&db, "k", "w2", T0 + 2, OnDead::Skip, 5, None).is_empty(), "never two jobs of a key at once");
    assert_eq!(get(&db, "a").status, Status::Pending);
    assert_eq!(get(&db, "a").seq, Some(4), "the key had moved past it: it goes to the key's end");
}

#[test]
fn a_running_job_blocks_its_key_even_with_a_due_job_before_it() {
    let (db, _) = Sqlite::temp();
    enqueue(&db, &["a", "b", "c"]);
    set(
        &db,
        "a",
        &format!("status = 'DEAD', finished_at = {T0}, last_error = 'x', skipped_at = {T0}, passed_at = {T0}"),
    );
    assert_eq!(claim(&db, "k", "w1", T0, OnDead::Block, 1, None), vec!["b"]);
    // A job below the running one back in the key's way without a new seq (a redrive and
    // migration 0007 never leave one so; lock mode's runs of API jobs, before a switch to strict
    // mode, can): the run rule still sees `b` running among the jobs it reads.
    set(&db, "a", "status = 'PENDING', finished_at = NULL, skipped_at = NULL, passed_at = NULL");
    assert!(claim(&db, "k", "w2", T0 + 1, OnDead::Block, 5, None).is_empty(), "never two jobs of a key at once");
}
