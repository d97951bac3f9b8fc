//! Every SQL file is bound by the names it declares. D1 binds parameters by position only, so a
//! builder that swaps two of them (`now` for `lease_until`) would compile and run; each file says
//! what its `?1..?n` are (`-- params: ?1 id, ?2 now`), each builder names what it binds, and this
//! test holds the two together for every file in `sql/`.

use std::collections::BTreeSet;

use super::history::{Kind, Run, RunOutcome};
use super::*;
use crate::config::{OnDead, OrderingMode};

/// The parameter names a file declares, in order; checks they are `?1..?n` and that its body uses
/// exactly those.
fn declared(file: &str, sql: &str) -> Result<Vec<String>, String> {
    let line = sql
        .lines()
        .find_map(|l| l.strip_prefix("-- params: "))
        .ok_or_else(|| format!("{file}: no `-- params:` line"))?;
    let mut names = Vec::new();
    if line.trim() != "none" {
        for (i, p) in line.split(',').enumerate() {
            let (n, name) = p.trim().split_once(' ').ok_or_else(|| format!("{file}: bad parameter {p:?}"))?;
            if n != format!("?{}", i + 1) {
                return Err(format!("{file}: parameter {} is declared as {n}", i + 1));
            }
            names.push(name.to_string());
        }
    }
    let body: String = sql.lines().filter(|l| !l.trim_start().starts_with("--")).collect::<Vec<_>>().join("\n");
    let used: BTreeSet<usize> = body
        .split('?')
        .skip(1)
        .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect();
    let want: BTreeSet<usize> = (1..=names.len()).collect();
    if used != want {
        return Err(format!("{file}: the body uses {used:?}, the file declares {} parameters", names.len()));
    }
    Ok(names)
}

/// One statement from every builder, with every optional parameter given.
fn every_statement() -> Vec<Stmt> {
    let spec = JobSpec {
        id: "a".into(),
        job_type: Some("t".into()),
        ordering_key: Some("k".into()),
        dedupe_key: Some("d".into()),
        limit_key: None,
        deadline_at: None,
        timeout_seconds: None,
        payload: Some("{}".into()),
        max_attempts: 3,
        priority: 5,
    };
    let lease = Lease { now: 1, until: 2, due_before: 3 };
    let run = Run {
        job_id: "a".into(),
        attempt: 1,
        started_at: 1,
        finished_at: 2,
        outcome: RunOutcome::Retry,
        error: Some("e".into()),
        http_status: Some(503),
        actor: "w".into(),
    };
    let filter =
        ListFilter { status: Some(Status::Dead), job_type: Some("t"), ordering_key: Some("k"), priority: Some(1) };
    let dead = DeadFilter { job_type: None, ordering_key: None, error: Some("e".into()), from: Some(1), to: Some(2) };
    let mut all = vec![
        stmt::claim_sent(&spec, 1, "w", lease),
        stmt::get("a"),
        stmt::complete("a", "w", 1, Some("{}"), Some(200)),
        stmt::fail("a", "w", 1, Status::Pending, 2, "e"),
        stmt::defer("a", "w", 1, 2, true),
        stmt::snooze("a", "w", 1, 2, Some("{}")),
        stmt::note_deferral(&spec, 1, 2),
        stmt::keep_due("a", 2, 1, 3),
        stmt::record_dead(&spec, 1, "e"),
        stmt::renew("w", 1, 2, &["a".to_string()]),
        stmt::end_leases(1, "w", "e"),
        stmt::reap(1, 10),
        stmt::overdue(1, 10, OrderingMode::Strict),
        stmt::park(&spec, 1),
        stmt::claim_next("k", "w", lease, OnDead::Block, 5, Some("p")),
        stmt::head("k", OnDead::Skip),
        stmt::wake_waiting("k", 1),
        stmt::wake_parked("a", 1),
        stmt::blocked_keys(10),
        stmt::key_pause("k", 1),
        stmt::schedule_states(),
        stmt::schedule_seen("s", 1, Some("j"), 2),
        stmt::schedule_pause("s", Some(1)),
        stmt::wait_add("a", super::job::AfterDead::Dead, 1, &[("b".into(), Route::key("k"))]),
        stmt::wait_register("b", "a", Route::key("k")),
        stmt::wait_registered("a", "b"),
        stmt::wait_dead("a", "b", 1, "e"),
        stmt::wait_release("a", "b"),
        stmt::waiting("a"),
        stmt::waiters("b", 10),
        stmt::waiter_done("b", "a"),
        stmt::waiters_finished(10),
        stmt::waits_unregistered(1, 10),
        stmt::batch_add("a", &[("b".into(), Route::key("k"))]),
        stmt::batch_done("a", "b", Status::Done, Some("{}"), 1),
        stmt::batch_ready("a", 10),
        stmt::batch_members("a"),
        stmt::wait_on("a"),
        stmt::key_resume("k"),
        stmt::key_waiting("k", 10),
        stmt::paused_keys("a", 10),
        stmt::skip("k", 1),
        stmt::stalled_heads(1, OnDead::Block, 10),
        stmt::mark_resent("a", 1, 2),
        stmt::enqueue(&super::job::Submit { debounce_until: Some(4), ..super::job::Submit::due(&spec, 2) }, 1),
        stmt::cancel_asked("a"),
        stmt::settle_cancelled("a", 1),
        stmt::cancel_matching(&CancelFilter::default(), 1, 10),
        stmt::cancellable_matching(&CancelFilter::default()),
        stmt::existing("a", Some("d")),
        stmt::counts(),
        stmt::metrics_jobs(1, OnDead::Skip),
        stmt::list_filtered(&filter, Some((1, "a")), 10),
        stmt::redrive("a", 1),
        stmt::dead_matching(&dead, 10),
        stmt::cancel("a", 1),
        stmt::run(&run),
        stmt::action("a", 1, Kind::Cancel, Status::Dead),
        stmt::events("a"),
        stmt::activity_runs(1),
        stmt::activity_jobs(1),
        stmt::run_times(1, 10),
        stmt::export_jobs("a", 10),
        stmt::export_events("a", "b"),
        stmt::import_job(&Row::new()),
        stmt::import_event(&Row::new()),
        stmt::move_rows(),
    ];
    for table in &moving::TABLES {
        all.push(table.export("a", "b"));
        all.push(table.import(&Row::new()));
    }
    for status in [None, Some(Status::Pending), Some(Status::Done), Some(Status::Dead)] {
        all.push(stmt::list(status, Some((1, "a")), 10));
    }
    all.extend(stmt::purge(Status::Dead, 0, 1, 10, true));
    all.push(stmt::purge_cursor(Status::Done));
    all.push(stmt::metrics_limited_due(1, OnDead::Skip));
    all.push(stmt::held_limit_keys(1));
    all.push(stmt::purge_advance(Status::Done, 1));
    all.push(stmt::import_untally("a"));
    all.push(stmt::import_rewind("a"));
    all.push(stmt::move_page("a", "b", 10));
    // Flow control's statements (limit.rs), with every policy part given.
    let policy = crate::flow::Policy {
        throttle: Some(crate::flow::Throttle { rate: 1, per_seconds: 1, burst: 1 }),
        concurrency: Some(1),
        breaker: Some(crate::flow::Breaker { trip_after: 1, cooldown_seconds: 1 }),
    };
    let ask = limit::Ask { limit_key: "l", job_id: "a", route: Route::key("k"), until: 2, policy, pace_ms: 0 };
    all.extend(limit::ask_stmts(&ask, 1));
    let verdict = crate::flow::RunVerdict::Failed { retry_after_ms: 5 };
    all.extend(limit::release_stmts(&limit::Release { limit_key: "l", job_id: "a", until: 2, verdict, policy }, 1));
    all.extend(limit::line_stmts("l", &[("a", Route::key("k"))], &policy, 1));
    all.extend(limit::give_back_stmts("l", "a", &policy, 1));
    all.extend(limit::forget_stmts("l", &["a"], &policy, 1));
    for on_duplicate in [super::job::OnDuplicate::Replace, super::job::OnDuplicate::Cancel] {
        all.extend(stmt::supersede(&super::job::Submit { on_duplicate, debounce_until: Some(9), ..super::job::Submit::due(&spec, 2) }, 1));
    }
    let change = limit::Change { paused: Some(true), policy: Some(Some(policy)) };
    all.push(limit::set_stmt("l", &change, 1));
    all.push(limit::states_stmt("a", 1, 10));
    all.push(limit::state_stmt("l", 1));
    all
}

#[test]
fn every_file_is_bound_by_its_declared_names() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ledger/sql");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("src/ledger/sql")
        .map(|e| e.expect("a file").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .map(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            (name, std::fs::read_to_string(&p).expect("readable"))
        })
        .collect();
    files.sort();
    let stmts = every_statement();
    let mut wrong = Vec::new();
    for (file, text) in &files {
        let names = match declared(file, text) {
            Ok(names) => names,
            Err(e) => {
                wrong.push(e);
                continue;
            }
        };
        let bound: Vec<&Stmt> = stmts.iter().filter(|s| s.sql == text.as_str()).collect();
        if bound.is_empty() {
            wrong.push(format!("{file}: no builder binds it"));
        }
        for s in bound {
            if s.names != names {
                wrong.push(format!("{file}: declares {names:?}, its builder binds {:?}", s.names));
            }
            if s.params.len() != s.names.len() {
                wrong.push(format!("{file}: {} values for {} names", s.params.len(), s.names.len()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_file_whose_body_and_declaration_differ_is_refused() {
    let sql = "-- params: ?1 id, ?2 now\nSELECT * FROM job WHERE id = ?1";
    assert!(declared("x.sql", sql).is_err(), "?2 is declared but never used");
    let sql = "-- params: ?1 id, ?3 now\nSELECT * FROM job WHERE id = ?1 AND updated_at = ?3";
    assert!(declared("x.sql", sql).is_err(), "numbered out of order");
    let sql = "-- params: ?1 id\nSELECT * FROM job WHERE id = ?1 AND updated_at = ?2";
    assert!(declared("x.sql", sql).is_err(), "?2 is used but not declared");
    assert_eq!(declared("x.sql", "-- params: ?1 id\nSELECT ?1").unwrap(), ["id"]);
}
