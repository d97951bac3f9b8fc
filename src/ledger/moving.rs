//! Moving a D1 ledger to shards (design §19.7), while delivery is paused: every job's row and
//! history copied to the shard of its route, a page at a time and idempotently (a row copied
//! again replaces its copy), with what lives beside the jobs: a page's waits, waiters and batch
//! members with it, every limit key's state and line, paused ordering key and schedule with the
//! last page; then the counts checked, jobs by status and each table's rows. The worker serves it
//! as `POST /ledger/move` and `GET /ledger/move` (`scripts/move-ledger.mjs` drives both), between
//! a D1 ledger and the shard objects it will switch to. Every table of the schema is moved: a test
//! holds [`TABLES`] to the migrations' tables, and [`stmt::JOB_COLUMNS`] to the job table's columns.

use serde::Serialize;
use serde_json::Value;

use super::job::{Counts, JobRow};
use super::placement::Route;
use super::shards::Ledger;
use super::stmt;
use super::store::{Row, Sql, Stmt};
use crate::error::InfraError;

macro_rules! sql {
    ($name:literal) => {
        include_str!(concat!("sql/", $name, ".sql"))
    };
}

/// Where a moved row goes among the shards.
#[derive(Debug, Clone, Copy)]
pub(super) enum Home {
    /// The shard of the job this column names: copied with that job's page.
    Job(&'static str),
    /// The shard of the key this column names (`Route::key`): copied with the last page.
    Key(&'static str),
    /// The first shard (schedules, design §23): copied with the last page.
    First,
}

/// A table a move copies besides `job` and `job_event`: how its rows are read from D1 (for a page's
/// jobs, `after` and `last`; with the last page, whole), written into a shard (its columns in the
/// import's order), and where each goes.
pub(super) struct Table {
    name: &'static str,
    export: &'static str,
    import: &'static str,
    columns: &'static [&'static str],
    home: Home,
}

/// Every table of the schema but `job` and `job_event` (and wrangler's `d1_migrations`).
pub(super) const TABLES: [Table; 8] = [
    Table {
        name: "job_wait",
        export: sql!("export_waits"),
        import: sql!("import_wait"),
        columns: &["job_id", "on_id", "on_route", "on_dead", "registered", "created_at"],
        home: Home::Job("job_id"),
    },
    Table {
        name: "job_waiter",
        export: sql!("export_waiters"),
        import: sql!("import_waiter"),
        columns: &["on_id", "job_id", "job_route"],
        home: Home::Job("on_id"),
    },
    Table {
        name: "batch_member",
        export: sql!("export_batch_members"),
        import: sql!("import_batch_member"),
        columns: &["batch_id", "member_id", "place", "status", "result", "finished_at"],
        home: Home::Job("batch_id"),
    },
    Table {
        name: "limit_state",
        export: sql!("export_limit_states"),
        import: sql!("import_limit_state"),
        columns: &[
            "limit_key",
            "paused",
            "tat_us",
            "overridden",
            "interval_us",
            "tolerance_us",
            "concurrency",
            "trip_after",
            "cooldown_ms",
            "failures",
            "opens",
            "open_until",
            "probe",
            "updated_at",
            "booked_us",
        ],
        home: Home::Key("limit_key"),
    },
    Table {
        name: "limit_permit",
        export: sql!("export_limit_permits"),
        import: sql!("import_limit_permit"),
        columns: &["limit_key", "job_id", "until", "handed"],
        home: Home::Key("limit_key"),
    },
    Table {
        name: "limit_wait",
        export: sql!("export_limit_waits"),
        import: sql!("import_limit_wait"),
        columns: &["limit_key", "job_id", "since", "route"],
        home: Home::Key("limit_key"),
    },
    Table {
        name: "key_pause",
        export: sql!("export_key_pauses"),
        import: sql!("import_key_pause"),
        columns: &["ordering_key", "paused_at"],
        home: Home::Key("ordering_key"),
    },
    Table {
        name: "schedule",
        export: sql!("export_schedules"),
        import: sql!("import_schedule"),
        columns: &["name", "last_period", "last_job_id", "last_enqueued_at", "paused_at"],
        home: Home::First,
    },
];

impl Table {
    /// Its rows to copy: a page's (jobs with ids in `(after, last]`), or, moved with the last
    /// page, all.
    pub(super) fn export(&self, after: &str, last: &str) -> Stmt {
        match self.home {
            Home::Job(_) => Stmt::bind(self.export, [("after", after.into()), ("last", last.into())]),
            Home::Key(_) | Home::First => Stmt::bind(self.export, []),
        }
    }

    /// One row into its shard.
    pub(super) fn import(&self, row: &Row) -> Stmt {
        Stmt::bind(self.import, self.columns.iter().map(|&c| (c, stmt::column(row, c))))
    }

    /// The shard a row goes to, among `shards`; `None` for a page's row whose job is not in the
    /// page (none is: the job's id is what the page's range is of).
    fn shard(&self, row: &Row, routes: &std::collections::HashMap<String, Route>, shards: usize) -> Option<usize> {
        match self.home {
            Home::Job(c) => text(row, c).and_then(|id| routes.get(&id)).map(|r| r.shard(shards)),
            Home::Key(c) => text(row, c).map(|k| Route::key(&k).shard(shards)),
            Home::First => Some(0),
        }
    }
}

/// Every table a move copies, with the columns it copies of each: a test holds these to the
/// schema's, so a migration that adds a table or a column cannot leave it behind.
#[cfg(any(test, feature = "testing"))]
pub fn moved() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut all = vec![("job", stmt::JOB_COLUMNS.to_vec()), ("job_event", stmt::EVENT_COLUMNS.to_vec())];
    all.extend(TABLES.iter().map(|t| (t.name, t.columns.to_vec())));
    all
}

/// The tables a move does not copy: each ledger keeps its own. `job_tally` is kept by the job
/// table's triggers as the jobs arrive; `purge_cursor` by each ledger's purge.
#[cfg(any(test, feature = "testing"))]
pub const NOT_MOVED: [&str; 2] = ["job_tally", "purge_cursor"];

/// Empties a shard of everything a move copies, and of what it keeps from those rows (the tally,
/// the purge's cursor), before a move's first page. Its schema and shard count stay.
fn clear_stmts() -> Vec<Stmt> {
    CLEAR.iter().map(|(_, sql)| Stmt::bind(sql, [])).collect()
}

/// Each table [`clear_stmts`] empties, and how: every table a move copies and those it keeps of
/// them (a test holds the list to [`TABLES`] and [`NOT_MOVED`]).
const CLEAR: [(&str, &str); 12] = [
    ("job", "DELETE FROM job"),
    ("job_event", "DELETE FROM job_event"),
    ("job_wait", "DELETE FROM job_wait"),
    ("job_waiter", "DELETE FROM job_waiter"),
    ("batch_member", "DELETE FROM batch_member"),
    ("limit_state", "DELETE FROM limit_state"),
    ("limit_permit", "DELETE FROM limit_permit"),
    ("limit_wait", "DELETE FROM limit_wait"),
    ("key_pause", "DELETE FROM key_pause"),
    ("schedule", "DELETE FROM schedule"),
    ("job_tally", "DELETE FROM job_tally"),
    ("purge_cursor", "DELETE FROM purge_cursor"),
];

#[cfg(test)]
mod tests {
    #[test]
    fn a_move_begun_again_empties_every_table_it_copies_and_keeps() {
        let mut cleared: Vec<&str> = super::CLEAR.iter().map(|(t, _)| *t).collect();
        let mut want: Vec<&str> = ["job", "job_event"].into_iter().chain(super::TABLES.iter().map(|t| t.name)).chain(super::NOT_MOVED).collect();
        cleared.sort_unstable();
        want.sort_unstable();
        assert_eq!(cleared, want);
    }
}

/// Past every job id: a page read from the source has no upper bound.
const NO_UPPER_BOUND: &str = "\u{10FFFF}";

/// One page of a move's content check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifiedPage {
    /// The source's jobs this page compared.
    pub checked: usize,
    /// The last job id of the page, to ask for the next after; `None` after the last page.
    pub next: Option<String>,
    /// The jobs that differ, or are on one side only (at most 20 named).
    pub differs: Vec<String>,
    /// Whether the shards hold exactly this page of the source.
    pub matches: bool,
}

/// One page of a move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Copied {
    /// Jobs copied by this page.
    pub jobs: usize,
    /// History rows copied with them.
    pub events: usize,
    /// The other rows copied: the jobs' waits, waiters and batch members, and with the last page
    /// every limit key's state and line, paused key and schedule.
    pub rows: usize,
    /// The id to continue after; `None` when every job has been copied.
    pub next: Option<String>,
}

/// The check after a move: the source's counts, the shards' summed, and each shard's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verified {
    /// D1's jobs by status.
    pub source: Counts,
    /// The shards' jobs by status, summed.
    pub shards: Counts,
    /// Each shard's jobs by status, in shard order.
    pub per_shard: Vec<Counts>,
    /// Each other table's rows: D1's, and the shards' summed.
    pub tables: Vec<TableRows>,
    /// Whether the shards hold exactly what D1 holds.
    pub matches: bool,
}

/// A table's rows in a move's check (`move_rows.sql`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableRows {
    /// The table.
    pub table: String,
    /// D1's rows.
    pub source: i64,
    /// The shards' rows, summed.
    pub shards: i64,
}

fn text(row: &Row, column: &str) -> Option<String> {
    row.get(column).and_then(Value::as_str).map(str::to_string)
}

impl<S: Sql> Ledger<S> {
    /// Copies up to `limit` of this (one-database) ledger's jobs after `after`, with their
    /// history, waits, waiters and batches, into `to`'s shards; the last page (fewer than `limit`
    /// jobs) also copies every limit key's state and line, paused key and schedule. Two reads of
    /// D1 and one request per shard touched. The first page (`after` empty) first empties the
    /// shards: a move begun again starts from nothing, so a row D1 deleted since an earlier run
    /// (a purged job, a released wait, a resumed key) is not left on the shards.
    pub async fn copy_to<T: Sql>(&self, to: &Ledger<T>, after: &str, limit: u32) -> Result<Copied, InfraError> {
        let from = self.shards.first().ok_or_else(|| InfraError::new("ledger", "no source database"))?;
        if after.is_empty() {
            to.every(async |s| s.sql.batch(clear_stmts()).await).await?;
        }
        let jobs = from.sql.query(stmt::export_jobs(after, limit)).await?;
        let last = jobs.last().and_then(|r| text(r, "id"));
        let next = last.clone().filter(|_| jobs.len() as u32 == limit);
        // A page's own rows are read when it has jobs; the rest only with the last page.
        let tables: Vec<&Table> = TABLES
            .iter()
            .filter(|t| if matches!(t.home, Home::Job(_)) { last.is_some() } else { next.is_none() })
            .collect();
        let upto = last.as_deref().unwrap_or(after);
        let mut reads: Vec<Stmt> = tables.iter().map(|t| t.export(after, upto)).collect();
        if last.is_some() {
            reads.push(stmt::export_events(after, upto));
        }
        let mut read = if reads.is_empty() { Vec::new() } else { from.sql.batch(reads).await? };
        let events = if last.is_some() { read.pop().unwrap_or_default() } else { Vec::new() };
        // Each row read as a job first: a row that does not fit the schema stops the move.
        let routes: std::collections::HashMap<String, Route> =
            JobRow::all(&jobs)?.into_iter().map(|j| (j.id.clone(), j.route())).collect();
        let n = to.shards.len();
        // A job's rows and its history go to its shard in one batch: both or neither.
        let mut per_shard: Vec<Vec<Stmt>> = vec![Vec::new(); n];
        let mut put = |shard: Option<usize>, s: Stmt| match shard.and_then(|i| per_shard.get_mut(i)) {
            Some(stmts) => {
                stmts.push(s);
                true
            }
            None => false,
        };
        for row in &jobs {
            let shard = text(row, "id").and_then(|id| routes.get(&id)).map(|r| r.shard(n));
            if let Some(id) = text(row, "id") {
                put(shard, stmt::import_untally(&id));
            }
            put(shard, stmt::import_job(row));
            if let Some(id) = text(row, "id") {
                put(shard, stmt::import_rewind(&id));
            }
        }
        for row in &events {
            put(text(row, "job_id").and_then(|id| routes.get(&id)).map(|r| r.shard(n)), stmt::import_event(row));
        }
        let mut rows = 0;
        for (table, found) in tables.iter().zip(&read) {
            for row in found {
                rows += usize::from(put(table.shard(row, &routes, n), table.import(row)));
            }
        }
        let writes = (to.shards.iter().zip(per_shard))
            .filter(|(_, stmts)| !stmts.is_empty())
            .map(|(shard, stmts)| shard.sql.batch(stmts));
        for written in futures::future::join_all(writes).await {
            written?;
        }
        Ok(Copied { jobs: jobs.len(), events: events.len(), rows, next })
    }

    /// Compares a page of jobs (up to `limit` after `after`) with the shards' copies: each job's
    /// status, `updated_at`, attempts, payload and result sizes, and its history, waits, waiters
    /// and batch members by count. One read of D1 and one request per shard, each bounded by the
    /// page, whatever the ledger's size (design §19.7).
    pub async fn verify_page<T: Sql>(&self, to: &Ledger<T>, after: &str, limit: u32) -> Result<VerifiedPage, InfraError> {
        let from = self.shards.first().ok_or_else(|| InfraError::new("ledger", "no source database"))?;
        let source = from.sql.query(stmt::move_page(after, NO_UPPER_BOUND, limit)).await?;
        let last = source.last().and_then(|r| text(r, "id"));
        // The last page reaches past the source's last id: a copy beyond it is named too.
        let full = source.len() as u32 == limit;
        let upto = last.clone().filter(|_| full).unwrap_or_else(|| NO_UPPER_BOUND.to_string());
        // A shard may hold rows the source has not (named, up to 20): read past the page by that.
        let most = limit + 20;
        let mut copies: Vec<Row> =
            to.every(async |s| s.sql.query(stmt::move_page(after, &upto, most)).await).await?.into_iter().flatten().collect();
        copies.sort_by_key(|r| text(r, "id"));
        let (mut differs, mut a, mut b) = (Vec::new(), source.iter().peekable(), copies.iter().peekable());
        while a.peek().is_some() || b.peek().is_some() {
            let (ia, ib) = (a.peek().and_then(|r| text(r, "id")), b.peek().and_then(|r| text(r, "id")));
            match (ia, ib) {
                (Some(x), Some(y)) if x == y => {
                    if a.next() != b.next() {
                        differs.push(x);
                    }
                }
                (Some(x), Some(y)) if x < y => differs.extend(a.next().and(Some(x))),
                (Some(x), None) => differs.extend(a.next().and(Some(x))),
                (_, y) => differs.extend(b.next().and(y)),
            }
        }
        let matches = differs.is_empty();
        differs.truncate(20);
        let next = last.filter(|_| full);
        Ok(VerifiedPage { checked: source.len(), next, differs, matches })
    }

    /// Compares this ledger's counts with `to`'s, shard by shard.
    pub async fn verify_copy<T: Sql>(&self, to: &Ledger<T>) -> Result<Verified, InfraError> {
        let from = self.shards.first().ok_or_else(|| InfraError::new("ledger", "no source database"))?;
        let source = self.counts().await?;
        let per_shard = to.every(async |s| s.counts().await).await?;
        let shards = per_shard.iter().copied().fold(Counts::default(), Counts::plus);
        let held = from.sql.query(stmt::move_rows()).await?;
        let moved = to.every(async |s| s.sql.query(stmt::move_rows()).await).await?;
        let count = |rows: &[Row], table: &str| rows.first().and_then(|r| r.get(table)).and_then(super::job::int_of);
        let mut tables = Vec::new();
        // A job's own rows are compared page by page ([`Self::verify_page`]).
        for table in TABLES.iter().filter(|t| !matches!(t.home, Home::Job(_))).map(|t| t.name) {
            let on_shards = moved.iter().map(|rows| count(rows, table)).sum::<Option<i64>>();
            let (Some(source), Some(shards)) = (count(&held, table), on_shards) else {
                return Err(InfraError::new("ledger", format!("no count of {table}'s rows")));
            };
            tables.push(TableRows { table: table.to_string(), source, shards });
        }
        let matches = source == shards && tables.iter().all(|t| t.source == t.shards);
        Ok(Verified { source, shards, per_shard, tables, matches })
    }
}
