//! The ledger's conformance suite (`orderly::ledger::conformance`) on real SQLite: the same cases
//! `tests/e2e/conformance.test.mjs` runs on D1 under miniflare.

mod support;

use futures::executor::block_on;
use orderly::ledger::{conformance, Ledger};
use support::Sqlite;

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
