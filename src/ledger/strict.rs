//! Strict mode's ledger operations (design §3b): park delivered jobs, claim a key's next jobs under
//! the run rule (`sql/claim_next.sql`), record a chain's step and claim on in the same round trip,
//! and the operator's view of blocked keys. Each operation is one D1 `batch()` and returns verdicts
//! (parked, claimed, recorded, the key's head), never raw rows. Must not: run handlers or decide
//! acks (the consumer's `strict` module does).

use super::stmt;
use super::job::{int_of, JobRow, JobSpec, Lease};
use super::transition::Record;
use super::store::{Row, Sql};
use super::shard::Shard;
use crate::config::OnDead;
use crate::error::InfraError;

/// One key's delivered jobs, in send order.
#[derive(Debug, Clone)]
pub struct Intake<'a> {
    /// The ordering key.
    pub key: &'a str,
    /// Its jobs as the messages describe them, in send order.
    pub jobs: Vec<&'a JobSpec>,
    /// How many of the key's next jobs to claim in the same transaction, at most (0: none, only
    /// its head is read).
    pub claim: u32,
    /// Jobs these messages wake from their limit key's line: made due before the claim, if still
    /// parked (design §20.10).
    pub woken: Vec<&'a str>,
}

/// What parking did with one delivered job.
#[derive(Debug, Clone, PartialEq)]
pub enum Parked {
    /// The ledger has the job (just recorded, or already): its row.
    Recorded(Box<JobRow>),
    /// Not recorded: its dedupe key is active in another job.
    Clash,
    /// Not reached: its key's shard failed (other keys' shards answered). Try again later.
    Unavailable,
}

/// A key after an operation: jobs claimed for this invocation (in seq order) and the key's head.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyState {
    /// Claimed for us, RUNNING under our lease, to run in this order.
    pub claimed: Vec<JobRow>,
    /// The key's first unfinished job after the operation (ours when we claimed).
    pub head: Option<JobRow>,
}

/// Parking's verdicts for one key.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyIntake {
    /// One per delivered job, in the intake's order.
    pub parked: Vec<Parked>,
    /// What the claim got and the head it left.
    pub state: KeyState,
}

/// How a claim is made.
#[derive(Debug, Clone, Copy)]
pub struct ClaimSpec<'a> {
    /// This invocation.
    pub owner: &'a str,
    /// Times.
    pub lease: Lease,
    /// The DEAD-head policy.
    pub on_dead: OnDead,
    /// Most jobs claimed at once (parking claims each key's [`Intake::claim`] instead).
    pub limit: u32,
}

fn jobs_by_seq(rows: &[Row]) -> Result<Vec<JobRow>, InfraError> {
    let mut jobs = JobRow::all(rows)?;
    jobs.sort_by_key(|j| j.seq);
    Ok(jobs)
}

fn at(out: &[Vec<Row>], i: usize) -> &[Row] {
    out.get(i).map(Vec::as_slice).unwrap_or_default()
}

/// What a chain step recorded, and what it claimed next.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Per record statement: whether it changed its row (false: our lease was lost).
    pub recorded: Vec<bool>,
    /// The jobs it finished that other jobs wait on (design §24).
    pub waited: Vec<String>,
    /// The key afterwards.
    pub state: KeyState,
}

/// A key waiting for an operator: its DEAD head and how many jobs wait behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockedKey {
    /// The ordering key.
    pub key: String,
    /// The DEAD job at its head.
    pub head: JobRow,
    /// PENDING jobs behind it.
    pub waiting: i64,
}

/// Blocked keys from `blocked_keys.sql`'s rows.
pub(super) fn blocked_of(rows: &[Row]) -> Result<Vec<BlockedKey>, InfraError> {
    rows.iter()
        .map(|r| {
            let head = JobRow::from_row(r)?;
            let key = head.ordering_key.clone().ok_or_else(|| InfraError::new("D1", "blocked head has no key"))?;
            let waiting = r.get("waiting").and_then(int_of).unwrap_or(0);
            Ok(BlockedKey { key, head, waiting })
        })
        .collect()
}

/// What an operator's skip did.
#[derive(Debug, Clone, PartialEq)]
pub enum Skip {
    /// The key moved past `skipped`; `next` is its new head, if any (to wake).
    Skipped {
        /// The DEAD job passed over.
        skipped: Box<JobRow>,
        /// The key's head now.
        next: Option<Box<JobRow>>,
    },
    /// The key's head is not an unskipped DEAD job.
    NotBlocked,
}

impl<S: Sql> Shard<S> {
    /// Parks every delivered keyed job and, in the same transaction, tries the claim of each key
    /// with a `claim` to make: so a runner finishing the key either sees our jobs or has finished before our
    /// claim looks. Every key's head is read afterwards.
    pub async fn park_and_claim(
        &self,
        keys: &[&Intake<'_>],
        claim: ClaimSpec<'_>,
    ) -> Result<Vec<KeyIntake>, InfraError> {
        let now = claim.lease.now;
        let mut stmts = Vec::new();
        for k in keys {
            for j in &k.jobs {
                stmts.push(stmt::park(j, now));
                stmts.push(stmt::get(&j.id));
            }
            stmts.extend(k.woken.iter().map(|id| stmt::wake_parked(id, now)));
            if k.claim > 0 {
                stmts.push(stmt::claim_next(k.key, claim.owner, claim.lease, claim.on_dead, k.claim, None));
            }
            stmts.push(stmt::head(k.key, claim.on_dead));
        }
        let out = self.sql.batch(stmts).await?;
        let mut i = 0;
        let mut verdicts = Vec::with_capacity(keys.len());
        for k in keys {
            let mut parked = Vec::with_capacity(k.jobs.len());
            for _ in &k.jobs {
                parked.push(match JobRow::first(at(&out, i + 1))? {
                    Some(j) => Parked::Recorded(Box::new(j)),
                    None => Parked::Clash,
                });
                i += 2;
            }
            // What the wake-ups changed is read in the head and the claim.
            i += k.woken.len();
            let claimed = if k.claim > 0 {
                i += 1;
                jobs_by_seq(at(&out, i - 1))?
            } else {
                Vec::new()
            };
            let head = JobRow::first(at(&out, i))?;
            i += 1;
            verdicts.push(KeyIntake { parked, state: KeyState { claimed, head } });
        }
        Ok(verdicts)
    }

    /// Records a chain's results for `key` and, when `next` is given, claims the key's next jobs
    /// chaining from `prev`, all in one round trip; then reads the key's head.
    pub async fn step(
        &self,
        key: &str,
        records: &[&Record],
        next: Option<(ClaimSpec<'_>, Option<&str>)>,
        on_dead: OnDead,
    ) -> Result<Step, InfraError> {
        let n = records.len();
        let (mut stmts, rides): (Vec<_>, Vec<_>) = records.iter().map(|r| r.stmts()).unzip();
        // History rows ride in the same round trip, after every transition; what they return is not
        // looked at.
        stmts.extend(rides.into_iter().flatten());
        let claim_at = stmts.len();
        if let Some((c, prev)) = next {
            stmts.push(stmt::claim_next(key, c.owner, c.lease, c.on_dead, c.limit, prev));
        }
        stmts.push(stmt::head(key, on_dead));
        let out = self.sql.batch(stmts).await?;
        let recorded = (0..n).map(|i| !at(&out, i).is_empty()).collect();
        let waited = (0..n).filter_map(|i| super::transition::finished_waited(at(&out, i))).collect();
        let claimed = if next.is_some() { jobs_by_seq(at(&out, claim_at))? } else { Vec::new() };
        let head = JobRow::first(at(&out, out.len().saturating_sub(1)))?;
        Ok(Step { recorded, waited, state: KeyState { claimed, head } })
    }

    /// Keys blocked by a DEAD head, oldest first.
    pub async fn blocked_keys(&self, limit: u32) -> Result<Vec<BlockedKey>, InfraError> {
        blocked_of(&self.sql.query(stmt::blocked_keys(limit)).await?)
    }

    /// Lets `key` move past its DEAD head.
    pub async fn skip(&self, key: &str, now: i64) -> Result<Skip, InfraError> {
        let out = self.sql.batch(vec![stmt::skip(key, now), stmt::head(key, OnDead::Block)]).await?;
        Ok(match JobRow::first(at(&out, 0))? {
            Some(skipped) => Skip::Skipped { skipped: Box::new(skipped), next: JobRow::first(at(&out, 1))?.map(Box::new) },
            None => Skip::NotBlocked,
        })
    }
}
