//! The native D1 stand-in refuses what D1 refuses (design §26), each case here shown once. The
//! replay (`tests/d1/replay.test.mjs`) runs these same batches on miniflare's D1 and requires the
//! same answers, refusals included, so the stand-in cannot drift kinder than the platform.

use futures::executor::block_on;
use orderly::ledger::{Param, Sql, Stmt};
use serde_json::json;

use crate::support::{Sqlite, D1_FREE_QUERIES};

fn stmt(sql: &'static str, params: Vec<Param>) -> Stmt {
    let names = params.iter().map(|_| "p").collect();
    Stmt { sql, params, names }
}

fn run(db: &Sqlite, stmts: Vec<Stmt>) -> Result<Vec<Vec<orderly::ledger::Row>>, String> {
    block_on(db.batch(stmts)).map_err(|e| e.to_string())
}

/// `SELECT ?1, ..., ?n` with n numbers bound.
fn select_n(n: usize) -> (&'static str, Vec<Param>) {
    let sql = format!("SELECT {}", (1..=n).map(|i| format!("?{i} AS c{i}")).collect::<Vec<_>>().join(", "));
    (Box::leak(sql.into_boxed_str()), (1..=n).map(|i| Param::Int(i as i64)).collect())
}

#[test]
fn an_empty_batch_is_refused() {
    let db = Sqlite::memory();
    let err = run(&db, Vec::new()).unwrap_err();
    assert!(err.contains("No SQL statements detected"), "{err}");
}

#[test]
fn a_statement_binds_at_most_100_parameters() {
    let db = Sqlite::memory();
    let (sql, params) = select_n(100);
    assert_eq!(run(&db, vec![stmt(sql, params)]).unwrap()[0][0]["c100"], json!(100));
    let (sql, params) = select_n(101);
    let err = run(&db, vec![stmt(sql, params)]).unwrap_err();
    assert!(err.contains("variable number must be between ?1 and ?100"), "{err}");
}

#[test]
fn a_statement_is_at_most_100_kb() {
    let db = Sqlite::memory();
    let fits = format!("SELECT '{}' AS s", "x".repeat(99_000));
    assert!(run(&db, vec![stmt(Box::leak(fits.into_boxed_str()), vec![])]).is_ok());
    let over = format!("SELECT '{}' AS s", "x".repeat(100_001));
    let err = run(&db, vec![stmt(Box::leak(over.into_boxed_str()), vec![])]).unwrap_err();
    assert!(err.contains("too long") || err.contains("too big"), "{err}");
}

#[test]
fn a_function_takes_at_most_32_arguments_and_a_like_pattern_50_bytes() {
    let db = Sqlite::memory();
    let args = |n: usize| (1..=n).map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
    let ok = format!("SELECT max({}) AS m", args(32));
    assert_eq!(run(&db, vec![stmt(Box::leak(ok.into_boxed_str()), vec![])]).unwrap()[0][0]["m"], json!(32));
    // Refused by D1 (its limits page), not by miniflare's: the replay knows this one.
    let over = format!("SELECT max({}) AS m", args(33));
    let err = run(&db, vec![stmt(Box::leak(over.into_boxed_str()), vec![])]).unwrap_err();
    assert!(err.contains("too many arguments on function"), "{err}");
    let like = "SELECT 'a' LIKE ?1 AS m";
    assert!(run(&db, vec![stmt(like, vec![Param::Text("a".repeat(50))])]).is_ok());
    let err = run(&db, vec![stmt(like, vec![Param::Text("a".repeat(51))])]).unwrap_err();
    assert!(err.contains("LIKE or GLOB pattern too complex"), "{err}");
}

#[test]
fn a_number_is_bound_as_the_platform_binds_it_a_real() {
    let db = Sqlite::memory();
    let rows = run(&db, vec![stmt("SELECT typeof(?1) AS t, ?1 || '' AS s, 7 / ?1 AS q, ?1 AS n", vec![Param::Int(5)])])
        .unwrap();
    // A whole REAL reaches the Worker as a JS number: 5, not 5.0.
    assert_eq!(json!(rows[0][0]), json!({"t": "real", "s": "5.0", "q": 1.4, "n": 5}));
}

#[test]
fn a_batch_is_one_transaction_all_or_nothing() {
    let db = Sqlite::memory();
    let insert = "INSERT INTO job (id, status, max_attempts, next_run_at, created_at, updated_at) VALUES (?1, 'PENDING', 1, 0, 0, 0)";
    let err =
        run(&db, vec![stmt(insert, vec![Param::Text("half".into())]), stmt("SELECT * FROM no_such_table", vec![])]);
    assert!(err.is_err());
    let count =
        run(&db, vec![stmt("SELECT count(*) AS n FROM job WHERE id = ?1", vec![Param::Text("half".into())])]).unwrap();
    assert_eq!(count[0][0]["n"], json!(0));
}

#[test]
fn an_invocation_runs_at_most_its_query_budget_a_batch_counting_one() {
    let db = Sqlite::memory();
    db.budget.set(Some(D1_FREE_QUERIES));
    let many: Vec<Stmt> = (0..200).map(|_| stmt("SELECT 1 AS one", vec![])).collect();
    for _ in 0..D1_FREE_QUERIES {
        assert!(run(&db, many.clone()).is_ok());
    }
    let err = run(&db, vec![stmt("SELECT 1 AS one", vec![])]).unwrap_err();
    assert!(err.contains("Too many API requests by single worker invocation"), "{err}");
    db.invocation();
    assert!(run(&db, vec![stmt("SELECT 1 AS one", vec![])]).is_ok());
}
