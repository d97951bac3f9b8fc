//! Periodic jobs' rows (design §23): one per schedule, in the ledger's first shard (a schedule's
//! jobs live wherever their route puts them; its row only says which period was seen last and
//! whether an operator paused it). Must not: decide which period is due (`schedule::due` does).

use super::job::int_of;
use super::shard::Shard;
use super::stmt;
use super::store::{Row, Sql};
use crate::error::InfraError;

/// A schedule's row as the cron and operators see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScheduleState {
    pub name: String,
    /// The start (ms) of the latest period seen.
    pub last_period: Option<i64>,
    /// The job of the latest period that had one.
    pub last_job_id: Option<String>,
    /// When that job was submitted.
    pub last_enqueued_at: Option<i64>,
    /// When an operator paused it; `None` while it runs.
    pub paused_at: Option<i64>,
}

pub(super) fn state_of(row: &Row) -> Option<ScheduleState> {
    let int = |c: &str| row.get(c).and_then(int_of);
    Some(ScheduleState {
        name: row.get("name")?.as_str()?.to_string(),
        last_period: int("last_period"),
        last_job_id: row.get("last_job_id").and_then(|v| v.as_str()).map(str::to_string),
        last_enqueued_at: int("last_enqueued_at"),
        paused_at: int("paused_at"),
    })
}

impl<S: Sql> Shard<S> {
    /// Every schedule's row, by name.
    pub async fn schedule_states(&self) -> Result<Vec<ScheduleState>, InfraError> {
        Ok(self.sql.query(stmt::schedule_states()).await?.iter().filter_map(state_of).collect())
    }

    /// Records that a cron run saw each schedule's period (submitting the job named, if any): one
    /// batch, whatever their number.
    pub async fn schedules_seen(&self, seen: &[(&str, i64, Option<String>)], now: i64) -> Result<(), InfraError> {
        if seen.is_empty() {
            return Ok(());
        }
        let stmts = seen.iter().map(|(name, period, job)| stmt::schedule_seen(name, *period, job.as_deref(), now)).collect();
        self.sql.batch(stmts).await.map(drop)
    }

    /// Pauses (`Some(now)`) or resumes (`None`) `name`; its row after.
    pub async fn schedule_pause(&self, name: &str, paused_at: Option<i64>) -> Result<ScheduleState, InfraError> {
        let rows = self.sql.query(stmt::schedule_pause(name, paused_at)).await?;
        rows.first().and_then(state_of).ok_or_else(|| InfraError::new("ledger", "a schedule's pause was not recorded"))
    }
}
