//! The ledger's schema, shipped inside the library (design §21): the migrations, which schema the
//! code's SQL is written for, and how a D1 ledger is checked against it and brought up to it.
//!
//! A D1 ledger keeps its applied migrations where `wrangler d1 migrations apply` keeps them (the
//! `d1_migrations` table, one row per file name), so the two ways of migrating agree: wrangler over
//! the files the package ships (`migrations/`), or `POST /admin/migrate`, which applies the
//! embedded files below. Before its first statement in an isolate, the D1 ledger reads that table
//! once ([`check`]) and refuses to run on a schema older or newer than its own, naming the command
//! that fixes it: the consumer defers its messages, the API answers 503, nothing is lost. A
//! Durable Object shard migrates itself on its first request (`object.rs`).

use serde::Serialize;
use serde_json::Value;

use super::store::{Sql, Stmt};
use crate::error::InfraError;

/// The ledger's migrations, in order, by file name (as wrangler records them).
pub const MIGRATIONS: &[(&str, &str)] = &[
    ("0001_job_ledger.sql", include_str!("../../migrations/0001_job_ledger.sql")),
    ("0002_strict_order.sql", include_str!("../../migrations/0002_strict_order.sql")),
    ("0003_list_index.sql", include_str!("../../migrations/0003_list_index.sql")),
    ("0004_history_priority_results.sql", include_str!("../../migrations/0004_history_priority_results.sql")),
    ("0005_history_snooze_and_redrives.sql", include_str!("../../migrations/0005_history_snooze_and_redrives.sql")),
    ("0006_one_finished_index.sql", include_str!("../../migrations/0006_one_finished_index.sql")),
    ("0007_cost_per_job.sql", include_str!("../../migrations/0007_cost_per_job.sql")),
    ("0008_snoozes.sql", include_str!("../../migrations/0008_snoozes.sql")),
    ("0009_limits.sql", include_str!("../../migrations/0009_limits.sql")),
    ("0010_throttle_bookings.sql", include_str!("../../migrations/0010_throttle_bookings.sql")),
    ("0011_deadlines.sql", include_str!("../../migrations/0011_deadlines.sql")),
    ("0012_limit_hand_offs.sql", include_str!("../../migrations/0012_limit_hand_offs.sql")),
    ("0013_key_pauses.sql", include_str!("../../migrations/0013_key_pauses.sql")),
    ("0014_parked_jobs.sql", include_str!("../../migrations/0014_parked_jobs.sql")),
    ("0015_cancel_and_supersede.sql", include_str!("../../migrations/0015_cancel_and_supersede.sql")),
    ("0016_schedules.sql", include_str!("../../migrations/0016_schedules.sql")),
    ("0017_dependencies.sql", include_str!("../../migrations/0017_dependencies.sql")),
    ("0018_trace_context.sql", include_str!("../../migrations/0018_trace_context.sql")),
    ("0019_batch_of_a_job.sql", include_str!("../../migrations/0019_batch_of_a_job.sql")),
    ("0020_ledger_tally.sql", include_str!("../../migrations/0020_ledger_tally.sql")),
];

/// The schema this code's SQL is written for: how many migrations it has.
pub const SCHEMA: u32 = MIGRATIONS.len() as u32;

/// What fixes a D1 ledger whose schema is behind, said in every refusal: each way, for the
/// ledger's routes at `mount` (`""` for a worker that is all orderly's, `"/orderly"` under the JS
/// wrapper), and where the release's notes on migrations ship (both packages carry CHANGELOG.md).
pub fn migrate_hint(mount: &str) -> String {
    format!(
        "apply the migrations: locally `npx wrangler d1 migrations apply DB --local` (`npm start` does), on \
         Cloudflare `npx wrangler d1 migrations apply DB --remote` (`npm run deploy` does), or `POST \
         {mount}/admin/migrate` with the admin token (orderly's CHANGELOG.md, \"Version policy\")"
    )
}

/// wrangler's table of applied migrations (its default `migrations_table`), as wrangler creates it.
const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS d1_migrations(id INTEGER PRIMARY KEY AUTOINCREMENT, \
     name TEXT UNIQUE, applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL)";
const APPLIED: &str = "SELECT name FROM d1_migrations ORDER BY id";
const RECORD: &str = "INSERT INTO d1_migrations (name) VALUES (?1)";

/// The statements of a migration file, in order: split at each `;` outside a `--` comment, the
/// comments before each statement and blank ones dropped (a D1 batch and a Durable Object's `exec`
/// take one statement each); a `CREATE TRIGGER` runs on to its `END` (its body's statements end
/// in `;` too). No migration has `;` or `--` inside a string literal (a test checks).
pub fn statements(file: &'static str) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut push = |segment: &'static str| {
        let mut s = segment.trim_start();
        while s.starts_with("--") {
            s = s.find('\n').map_or("", |i| &s[i + 1..]).trim_start();
        }
        if !s.trim_end().is_empty() {
            out.push(s.trim_end());
        }
    };
    let (mut start, mut in_comment) = (0, false);
    let bytes = file.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'\n' => in_comment = false,
            b'-' if !in_comment && bytes.get(i + 1) == Some(&b'-') => in_comment = true,
            b';' if !in_comment && !inside_trigger(&file[start..i]) => {
                push(&file[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    push(&file[start..]);
    out
}

/// Whether `segment` (a statement so far, comments included) is a trigger whose body has not
/// reached its `END` yet.
fn inside_trigger(segment: &str) -> bool {
    let code: Vec<&str> = segment.lines().map(|l| l.split("--").next().unwrap_or("")).collect();
    let code = code.join("\n");
    let words: Vec<String> = code.split_whitespace().map(str::to_ascii_uppercase).collect();
    words.starts_with(&["CREATE".to_string(), "TRIGGER".to_string()]) && words.last().map(String::as_str) != Some("END")
}

/// Where a D1 ledger's schema stands against this code's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Every migration applied, nothing else.
    Current,
    /// These of ours are not applied yet.
    Behind(Vec<&'static str>),
    /// The table lists migrations this code does not know: a newer release applied them.
    Ahead(Vec<String>),
}

impl Standing {
    /// Where `applied` (file names, as the table lists them) stands.
    pub fn of(applied: &[String]) -> Standing {
        let unknown: Vec<String> =
            applied.iter().filter(|a| !MIGRATIONS.iter().any(|(name, _)| name == a)).cloned().collect();
        if !unknown.is_empty() {
            return Standing::Ahead(unknown);
        }
        let missing: Vec<&'static str> =
            MIGRATIONS.iter().map(|(name, _)| *name).filter(|name| !applied.iter().any(|a| a == name)).collect();
        if missing.is_empty() {
            Standing::Current
        } else {
            Standing::Behind(missing)
        }
    }

    /// Why the ledger cannot run on this schema, naming what fixes it for the ledger's routes at
    /// `mount` ([`migrate_hint`]); `None` when it can.
    pub fn refusal(&self, mount: &str) -> Option<String> {
        let hint = migrate_hint(mount);
        match self {
            Standing::Current => None,
            Standing::Behind(missing) if missing.len() == MIGRATIONS.len() => {
                Some(format!("the D1 database has no orderly ledger yet (schema 0 of {SCHEMA}): {hint}"))
            }
            Standing::Behind(missing) => Some(format!(
                "the D1 ledger's schema is behind this orderly's ({} of {SCHEMA} migrations; missing {}): {hint}",
                MIGRATIONS.len() - missing.len(),
                missing.join(", ")
            )),
            Standing::Ahead(unknown) => Some(format!(
                "the D1 ledger's schema is newer than this orderly's (d1_migrations lists {}, which this release \
                 does not know): deploy the release that migrated it, or keep other migrations in another \
                 migrations_table (orderly's CHANGELOG.md, \"Version policy\")",
                unknown.join(", ")
            )),
        }
    }
}

/// The migrations a D1 database lists (file names), none when it has no `d1_migrations` table.
pub async fn applied(sql: &impl Sql) -> Result<Vec<String>, InfraError> {
    // Created if missing, as wrangler does before it lists: an empty table reads as "no schema".
    let rows = sql.batch(vec![Stmt::bind(CREATE_TABLE, []), Stmt::bind(APPLIED, [])]).await?;
    Ok(rows
        .get(1)
        .into_iter()
        .flatten()
        .filter_map(|row| row.get("name").and_then(Value::as_str).map(str::to_string))
        .collect())
}

/// Checks a D1 ledger's schema: `Err` names what is wrong and what fixes it (its routes at `mount`).
pub async fn check(sql: &impl Sql, mount: &str) -> Result<(), InfraError> {
    let applied = applied(sql).await?;
    match Standing::of(&applied).refusal(mount) {
        None => Ok(()),
        Some(why) => Err(InfraError::new("ledger", why)),
    }
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Migrated {
    /// Migrations applied now, in order.
    pub applied: Vec<&'static str>,
    /// The schema the ledger is at afterwards.
    pub schema: u32,
}

/// Brings a D1 ledger to this code's schema: each missing migration and its `d1_migrations` row in
/// one batch (one transaction, as wrangler applies a file), in order. Refuses a newer schema. Two
/// at once are safe: the second's batch fails on what the first created and rolls back.
pub async fn migrate(sql: &impl Sql) -> Result<Migrated, InfraError> {
    let applied_before = applied(sql).await?;
    let missing = match Standing::of(&applied_before) {
        Standing::Current => Vec::new(),
        Standing::Behind(missing) => missing,
        ahead @ Standing::Ahead(_) => return Err(InfraError::new("ledger", ahead.refusal("").unwrap_or_default())),
    };
    for name in &missing {
        let file = MIGRATIONS.iter().find(|(n, _)| n == name).map(|(_, f)| *f).unwrap_or_default();
        let mut stmts: Vec<Stmt> = statements(file).into_iter().map(|s| Stmt::bind(s, [])).collect();
        stmts.push(Stmt::bind(RECORD, [("name", (*name).into())]));
        sql.batch(stmts).await.map_err(|e| InfraError::new("ledger", format!("migration {name} not applied: {e}")))?;
    }
    Ok(Migrated { applied: missing, schema: SCHEMA })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_blank_statements_are_dropped() {
        let s = statements("-- a; comment\nCREATE TABLE t (a INT, -- why; here\n b INT); -- trailing; here\n\nCREATE INDEX i ON t (a);\n-- end;\n");
        assert_eq!(s, ["CREATE TABLE t (a INT, -- why; here\n b INT)", "CREATE INDEX i ON t (a)"]);
    }

    #[test]
    fn no_migration_has_a_comment_marker_or_semicolon_inside_a_string() {
        for (name, file) in MIGRATIONS {
            for line in file.lines() {
                let code = line.split("--").next().unwrap_or("");
                // Inside quotes, neither "--" nor ";" may appear: the splitter would cut there.
                let quoted: Vec<&str> = code.split('\'').skip(1).step_by(2).collect();
                assert!(quoted.iter().all(|q| !q.contains(';')), "{name}: {line}");
                let after = line.find("--").map_or(line, |i| &line[..i]);
                assert_eq!(after.matches('\'').count() % 2, 0, "{name}: a comment marker inside a string: {line}");
            }
        }
    }

    #[test]
    fn every_file_of_migrations_is_embedded_in_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| std::path::Path::new(n).extension().is_some_and(|e| e == "sql"))
            .collect();
        files.sort();
        let embedded: Vec<&str> = MIGRATIONS.iter().map(|(n, _)| *n).collect();
        assert_eq!(files, embedded);
    }

    #[test]
    fn standing_names_what_is_missing_or_unknown() {
        let all: Vec<String> = MIGRATIONS.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(Standing::of(&all), Standing::Current);
        assert_eq!(Standing::of(&all).refusal(""), None);
        let behind = Standing::of(&all[..9]);
        assert_eq!(
            behind,
            Standing::Behind(vec![
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
            ])
        );
        let why = behind.refusal("").unwrap_or_default();
        assert!(why.contains("9 of 20") && why.contains("`POST /admin/migrate`"), "{why}");
        // Under the JS wrapper's mount, its route; the local and the remote command either way.
        let mounted = Standing::of(&[]).refusal("/orderly").unwrap_or_default();
        assert!(mounted.contains("no orderly ledger yet") && mounted.contains("`POST /orderly/admin/migrate`"), "{mounted}");
        assert!(mounted.contains("migrations apply DB --local") && mounted.contains("migrations apply DB --remote"), "{mounted}");
        let mut newer = all.clone();
        newer.push("0099_next.sql".into());
        assert_eq!(Standing::of(&newer), Standing::Ahead(vec!["0099_next.sql".into()]));
        assert!(Standing::of(&newer).refusal("").unwrap_or_default().contains("newer than this orderly's"));
    }
}
