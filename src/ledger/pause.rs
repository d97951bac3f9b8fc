//! Pausing an ordering key (design §20.11): an operator's `key_pause` row in the key's shard,
//! which both claims read (`sql/claim_next.sql` claims nothing for a paused key, `sql/claim.sql`
//! records a paused key's new job PENDING and claims none), and which maintenance's re-send and
//! wake-up scans skip. A paused key's messages are acked (nothing polls it); resuming deletes the
//! row and reads the key's PENDING jobs, whose messages the caller sends again. Must not: send
//! messages (the API does).

use super::stmt;
use super::job::{int_of, JobRow};
use super::store::{Row, Sql};
use super::shard::Shard;
use crate::config::OrderingMode;
use crate::error::InfraError;

/// A paused ordering key as operators see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPause {
    /// The ordering key.
    pub key: String,
    /// When it was paused, ms.
    pub paused_at: i64,
    /// Its PENDING jobs (a paused list read says; a pause just made does not count them: 0).
    pub waiting: i64,
}

/// What resuming a key found.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumed {
    /// The pause it ended (`None`: the key was not paused).
    pub ended: Option<KeyPause>,
    /// The PENDING jobs whose messages go again, oldest first: in strict mode the key's first one
    /// (whoever runs it chains to the rest), in lock mode each of them, up to the limit asked for
    /// (maintenance sends the rest, as overdue jobs).
    pub wake: Vec<JobRow>,
}

pub(super) fn pause_of(row: &Row) -> Option<KeyPause> {
    Some(KeyPause {
        key: row.get("ordering_key")?.as_str()?.to_string(),
        paused_at: row.get("paused_at").and_then(int_of)?,
        waiting: row.get("waiting").and_then(int_of).unwrap_or(0),
    })
}

impl<S: Sql> Shard<S> {
    /// Pauses `key` (again: its first pause stands).
    pub async fn pause_key(&self, key: &str, now: i64) -> Result<KeyPause, InfraError> {
        let rows = self.sql.query(stmt::key_pause(key, now)).await?;
        rows.first().and_then(pause_of).ok_or_else(|| InfraError::new("ledger", "a key's pause was not recorded"))
    }

    /// Resumes `key` and, in the same round trip, reads the jobs to send again (at most `limit`).
    pub async fn resume_key(&self, key: &str, mode: OrderingMode, limit: u32) -> Result<Resumed, InfraError> {
        let out = self.sql.batch(vec![stmt::key_resume(key), stmt::key_waiting(key, limit)]).await?;
        let ended = out.first().and_then(|rows| rows.first()).and_then(pause_of);
        let mut wake = JobRow::all(out.get(1).map(Vec::as_slice).unwrap_or_default())?;
        if mode == OrderingMode::Strict {
            // A strict key needs one message: its runner chains through the rest in seq order.
            wake.retain(|j| j.seq.is_some());
            wake.truncate(1);
        }
        Ok(Resumed { ended, wake })
    }

    /// Paused keys by name after `after`, at most `limit`.
    pub async fn paused_keys(&self, after: &str, limit: u32) -> Result<Vec<KeyPause>, InfraError> {
        Ok(self.sql.query(stmt::paused_keys(after, limit)).await?.iter().filter_map(pause_of).collect())
    }
}
