//! The ledger's conformance suite (`orderly::ledger::conformance`) on real SQLite: the same cases
//! `tests/e2e/conformance.test.mjs` runs on D1 under miniflare.

use crate::support::Sqlite;
use futures::executor::block_on;
use orderly::ledger::{conformance, Ledger, Route};

#[test]
fn the_ledger_conforms_on_sqlite() {
    let db = Sqlite::memory();
    let ledger = Ledger::new(&db);
    let report = block_on(conformance::exercise(&ledger, "sqlite"));
    assert!(report.failed.is_empty(), "{:#?}", report.failed);
    assert_eq!(report.passed.len(), 7, "{report:?}");
    // Twice on the same database: each run's jobs are its own.
    let again = block_on(conformance::exercise(&ledger, "again"));
    assert!(again.failed.is_empty(), "{:#?}", again.failed);
}

#[test]
fn the_ledger_conforms_on_shard_objects() {
    let (dbs, shards) = crate::support::memory_shards(4);
    let ledger = Ledger::sharded(shards);
    for prefix in ["shards", "again"] {
        let report = block_on(conformance::exercise(&ledger, prefix));
        assert!(report.failed.is_empty(), "{:#?}", report.failed);
        assert_eq!(report.passed.len(), 7, "{report:?}");
    }
    // Each job is in the shard of its route, and in no other.
    let mut held = 0;
    for (i, db) in dbs.iter().enumerate() {
        let mut st = db.conn.prepare("SELECT id, ordering_key, dedupe_key FROM job").unwrap();
        let rows: Vec<(String, Option<String>, Option<String>)> =
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect();
        for (id, key, dedupe) in &rows {
            assert_eq!(Route::of(key.as_deref(), dedupe.as_deref(), id).shard(4), i, "{id} in shard {i}");
        }
        held += usize::from(!rows.is_empty());
    }
    assert!(held >= 2, "the jobs spread over the shards");
}

#[test]
fn a_shard_refuses_another_count_or_schema_and_a_failed_batch_applies_nothing() {
    use orderly::ledger::object::{ObjectStmt, ShardAnswer, ShardRequest, SCHEMA};
    let (dbs, shards) = crate::support::memory_shards(2);
    let ledger = Ledger::sharded(shards);
    assert_eq!(block_on(ledger.counts()).unwrap().pending, 0, "both shards prepared");
    let object = orderly::ledger::object::LedgerObject::new(crate::support::ShardDb(dbs[1].clone()));
    let req = |schema, shards, stmts| ShardRequest { schema, shard: 1, shards, stmts };
    let count = ObjectStmt { sql: "SELECT count(*) AS n FROM job".into(), params: vec![] };
    assert!(matches!(object.serve(&req(SCHEMA, 2, vec![count.clone()])), ShardAnswer::Rows(_)));
    let refused = |a: ShardAnswer, what: &str| matches!(a, ShardAnswer::Refused(why) if why.contains(what));
    assert!(refused(object.serve(&req(SCHEMA, 4, vec![count.clone()])), "LEDGER_SHARDS cannot change"));
    assert!(refused(object.serve(&req(SCHEMA - 1, 2, vec![count.clone()])), "version skew"));
    // A batch whose second statement fails leaves no trace of its first.
    let insert = ObjectStmt {
        sql: "INSERT INTO job (id, status, attempts, max_attempts, deferrals, next_run_at, created_at, updated_at) \
              VALUES ('half', 'PENDING', 0, 1, 0, 0, 0, 0)"
            .into(),
        params: vec![],
    };
    let broken = ObjectStmt { sql: "SELECT * FROM no_such_table".into(), params: vec![] };
    assert!(matches!(object.serve(&req(SCHEMA, 2, vec![insert.clone(), broken])), ShardAnswer::Failed(_)));
    let n =
        || -> i64 { dbs[1].conn.query_row("SELECT count(*) FROM job WHERE id = 'half'", [], |r| r.get(0)).unwrap() };
    assert_eq!(n(), 0, "the batch half-applied");
    // The same statement alone applies (so the rollback above is what kept it out).
    assert!(matches!(object.serve(&req(SCHEMA, 2, vec![insert])), ShardAnswer::Rows(_)));
    assert_eq!(n(), 1);
}
