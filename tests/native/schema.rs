//! The embedded schema on real SQLite (design §21): an empty database is refused naming the fix,
//! `migrate` brings it to this code's schema one file per transaction, recorded as wrangler records
//! it, and the ledger then works on it; a second run applies nothing; a half-migrated database
//! gets only what it lacks.

use crate::support::Sqlite;
use futures::executor::block_on;
use orderly::ledger::schema::{self, MIGRATIONS, SCHEMA};
use orderly::ledger::{Sql, Stmt};

fn empty() -> Sqlite {
    let path = std::env::temp_dir().join(format!("orderly-schema-{}-{}.sqlite", std::process::id(), rand_suffix()));
    let _ = std::fs::remove_file(&path);
    Sqlite::open(&path)
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

fn names() -> Vec<&'static str> {
    MIGRATIONS.iter().map(|(n, _)| *n).collect()
}

#[test]
fn an_empty_database_is_refused_then_migrated_and_used() {
    let db = empty();
    let refused = block_on(schema::check(&db, "")).expect_err("no schema yet");
    assert!(
        refused.detail.contains("no orderly ledger yet") && refused.detail.contains("POST /admin/migrate"),
        "{refused}"
    );

    let migrated = block_on(schema::migrate(&db)).expect("migrates");
    assert_eq!(migrated.applied, names());
    assert_eq!(migrated.schema, SCHEMA);
    block_on(schema::check(&db, "")).expect("current now");
    let listed = block_on(schema::applied(&db)).expect("listed");
    assert_eq!(listed, names());
    // The ledger's own tables are there: a job can be counted.
    let counted = block_on(db.query(Stmt::bind("SELECT COUNT(*) AS n FROM job", []))).expect("job table");
    assert_eq!(counted[0]["n"], 0);

    assert!(block_on(schema::migrate(&db)).expect("again").applied.is_empty(), "nothing left to apply");
}

#[test]
fn a_half_migrated_database_gets_only_what_it_lacks() {
    let db = empty();
    db.migrate_range(|name| name < "0010");
    // As wrangler would have recorded the files it applied.
    block_on(db.batch(vec![Stmt::bind(
        "CREATE TABLE d1_migrations(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE, \
         applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL)",
        [],
    )]))
    .expect("table");
    for name in names().into_iter().filter(|n| *n < "0010") {
        block_on(db.query(Stmt::bind("INSERT INTO d1_migrations (name) VALUES (?1)", [("name", name.into())])))
            .expect("recorded");
    }
    let refused = block_on(schema::check(&db, "")).expect_err("behind");
    assert!(refused.detail.contains("9 of 20"), "{refused}");
    let migrated = block_on(schema::migrate(&db)).expect("migrates");
    assert_eq!(
        migrated.applied,
        [
            "0010_throttle_bookings.sql",
            "0011_deadlines.sql",
            "0012_limit_hand_offs.sql",
            "0013_key_pauses.sql",
            "0014_parked_jobs.sql",
            "0015_cancel_and_supersede.sql",
            "0016_schedules.sql",
            "0017_dependencies.sql",
            "0018_trace_context.sql",
            "0019_batch_of_a_job.sql",
            "0020_ledger_tally.sql"
        ]
    );
    block_on(schema::check(&db, "")).expect("current now");
}

#[test]
fn a_failing_migration_applies_nothing_of_itself() {
    let db = empty();
    // Something in the way of the first file's first table: its transaction rolls back whole.
    block_on(db.query(Stmt::bind("CREATE TABLE job (x INT)", []))).expect("in the way");
    let failed = block_on(schema::migrate(&db)).expect_err("the first file cannot apply");
    assert!(failed.detail.contains("migration 0001_job_ledger.sql not applied"), "{failed}");
    assert!(block_on(schema::applied(&db)).expect("listed").is_empty(), "not recorded");
}
