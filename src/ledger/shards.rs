//! The ledger over its shards (design §19): one database (D1, `LEDGER = "d1"`) or N SQLite
//! Durable Objects (`LEDGER = "do"`). Every method the crate calls is here, with the same shape
//! whatever N is: work on jobs goes to the shard of each job's [`Route`] (one request per shard
//! touched, the shards concurrently, answers put back in the caller's order), lookups by id alone
//! ask every shard, and lists, counts and scans ask every shard and merge.
//!
//! With one shard every call is exactly the single database's: the same statements, the same
//! round trips. Must not: hold SQL (the shard methods in the sibling modules do), or let a key's
//! jobs reach two shards (routing is only [`Route::shard`]).

use std::collections::{BTreeMap, HashSet};

use futures::future::join_all;

use super::history::{Event, Minute};
use super::limit::{Answer, Ask, Change, Forgotten, LimitState, Lined, Release, Woken};
use super::pause::{KeyPause, Resumed};
use super::schedule::ScheduleState;
use super::strict::{BlockedKey, ClaimSpec, Intake, KeyIntake, Parked, Skip, Step};
use super::job::{Cancel, CancelFilter, Cancellable, Claimed, Enqueued, Counts, DeadFilter, DeadMatches, JobRow, JobSpec, Lease, ListFilter, Redrive, Sent, Status, Submit};
use super::transition::{Record, RecordedDead};
use super::placement::Route;
use super::maintain::PurgeBudget;
use super::shard::Shard;
use super::store::{Port, Sql};
use crate::config::{OnDead, OrderingMode};
use crate::error::InfraError;
use crate::flow::Policy;

#[cfg(any(test, feature = "testing"))]
pub use crate::bounds::MAX_SHARDS;

/// Keys whose statements go in one batch at most, on a path that takes a list (a bulk cancel's
/// keys moved on): D1 runs a batch in one transaction within 30 s, and a list of any length costs
/// one query per shard per this many keys, inside the free plan's 50 queries per invocation.
pub const KEYS_PER_BATCH: usize = 100;

/// The job ledger: every read and write of a job's row is a method here, taking typed values and
/// answering verdicts or rows. No other module sees a statement or a shard.
pub struct Ledger<S> {
    pub(super) shards: Vec<Shard<S>>,
}

fn mismatch() -> InfraError {
    InfraError::new("ledger", "a shard answered a different number of results than it was asked")
}

impl<S> Ledger<S> {
    /// A ledger in one database.
    pub fn new(sql: S) -> Self {
        Ledger { shards: vec![Shard { sql: Port(sql) }] }
    }

    /// A ledger over `shards` databases (at least one), in shard order: shard `i` must always be
    /// the same database.
    pub fn sharded(shards: Vec<S>) -> Self {
        Ledger { shards: shards.into_iter().map(|sql| Shard { sql: Port(sql) }).collect() }
    }

    /// The first shard's backend, for the project's tests that look under the ledger.
    #[cfg(feature = "testing")]
    pub fn backend(&self) -> &S {
        &self.shards[0].sql.0
    }

    /// Every shard's backend, in shard order.
    #[cfg(feature = "testing")]
    pub fn backends(&self) -> impl Iterator<Item = &S> {
        self.shards.iter().map(|s| &s.sql.0)
    }

    pub(super) fn at(&self, route: Route) -> &Shard<S> {
        &self.shards[route.shard(self.shards.len())]
    }
}

impl<S: Sql> Ledger<S> {
    /// Splits `items` by shard, runs `f` on each shard touched with its items (in their order),
    /// every shard at once, and puts the answers back in the order of `items`. Any shard's error is
    /// the call's error (what the other shards applied stands, as after a lost answer).
    pub(super) async fn routed<'t, T, R>(
        &self,
        items: &'t [T],
        route: impl Fn(&T) -> Route,
        f: impl AsyncFn(&Shard<S>, Vec<&'t T>) -> Result<Vec<R>, InfraError>,
    ) -> Result<Vec<R>, InfraError> {
        if let [one] = self.shards.as_slice() {
            return f(one, items.iter().collect()).await;
        }
        self.routed_each(items, route, f).await.into_iter().collect()
    }

    /// Each shard's items, by shard in order: the positions in `routes` of the items routed to
    /// it. One kind of map for every caller, whatever its items (each kind is code in the worker).
    fn parts(&self, routes: impl Iterator<Item = Route>) -> BTreeMap<usize, Vec<usize>> {
        let mut parts: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, route) in routes.enumerate() {
            parts.entry(route.shard(self.shards.len())).or_default().push(i);
        }
        parts
    }

    /// `items` by shard, in shard order, each shard's in their order (see [`Self::parts`]).
    fn parted<T: Clone>(&self, items: &[T], route: impl Fn(&T) -> Route) -> Vec<(usize, Vec<T>)> {
        let parts = self.parts(items.iter().map(route));
        parts.into_iter().map(|(s, at)| (s, at.iter().map(|&i| items[i].clone()).collect())).collect()
    }

    /// [`Self::routed`], each item answered alone: an item whose shard failed gets that shard's
    /// error, the others their answers (one shard down holds only its own jobs).
    async fn routed_each<'t, T, R>(
        &self,
        items: &'t [T],
        route: impl Fn(&T) -> Route,
        f: impl AsyncFn(&Shard<S>, Vec<&'t T>) -> Result<Vec<R>, InfraError>,
    ) -> Vec<Result<R, InfraError>> {
        let parts = self.parts(items.iter().map(route));
        let answers =
            join_all(parts.iter().map(|(&s, at)| f(&self.shards[s], at.iter().map(|&i| &items[i]).collect()))).await;
        let mut out: Vec<Result<R, InfraError>> = items.iter().map(|_| Err(mismatch())).collect();
        for ((_, at), answer) in parts.iter().zip(answers) {
            match answer {
                Ok(answer) if answer.len() == at.len() => {
                    for (&i, r) in at.iter().zip(answer) {
                        out[i] = Ok(r);
                    }
                }
                Ok(_) => {}
                Err(e) => at.iter().for_each(|&i| out[i] = Err(e.clone())),
            }
        }
        out
    }

    /// Answers each item alone unless every shard asked failed: then the first error.
    fn unless_all_failed<R>(
        answers: Vec<Result<R, InfraError>>,
        failed: impl Fn(InfraError) -> R,
    ) -> Result<Vec<R>, InfraError> {
        if let Some(Err(e)) = answers.iter().find(|a| a.is_err()).filter(|_| answers.iter().all(Result::is_err)) {
            return Err(e.clone());
        }
        Ok(answers.into_iter().map(|a| a.unwrap_or_else(&failed)).collect())
    }

    /// Runs `f` on every shard at once: the answers in shard order.
    pub(super) async fn every<R>(
        &self,
        f: impl AsyncFn(&Shard<S>) -> Result<R, InfraError>,
    ) -> Result<Vec<R>, InfraError> {
        join_all(self.shards.iter().map(|s| f(s))).await.into_iter().collect()
    }

    /// [`Self::every`], each shard told its index.
    pub(super) async fn every_indexed<R>(
        &self,
        f: impl AsyncFn(usize, &Shard<S>) -> Result<R, InfraError>,
    ) -> Result<Vec<R>, InfraError> {
        join_all(self.shards.iter().enumerate().map(|(i, s)| f(i, s))).await.into_iter().collect()
    }

    /// The shard holding `id` (asked of every shard when there are several), or `None`.
    async fn holder(&self, id: &str) -> Result<Option<&Shard<S>>, InfraError> {
        if let [one] = self.shards.as_slice() {
            return Ok(Some(one));
        }
        let found = self.every(async |s| s.get(id).await).await?;
        Ok(found.iter().position(Option::is_some).map(|i| &self.shards[i]))
    }

    /// One job (asked of every shard when there are several: an id does not say its shard).
    pub async fn get(&self, id: &str) -> Result<Option<JobRow>, InfraError> {
        Ok(self.every(async |s| s.get(id).await).await?.into_iter().flatten().next())
    }

    /// One job with its history (oldest event first), in one round trip per shard.
    pub async fn get_with_history(&self, id: &str) -> Result<Option<(JobRow, Vec<Event>)>, InfraError> {
        Ok(self.every(async |s| s.get_with_history(id).await).await?.into_iter().flatten().next())
    }

    /// Jobs by id (each shard asked for all of them): `None` for each id without a row.
    pub async fn get_all(&self, ids: &[&str]) -> Result<Vec<Option<JobRow>>, InfraError> {
        let per_shard = self.every(async |s| s.get_all(ids).await).await?;
        Ok((0..ids.len()).map(|i| per_shard.iter().find_map(|rows| rows.get(i).cloned().flatten())).collect())
    }

    /// Jobs by id, each looked up in the shard of its route only.
    pub async fn get_routed(&self, jobs: &[(&str, Route)]) -> Result<Vec<Option<JobRow>>, InfraError> {
        self.routed(jobs, |j| j.1, async |s, part| s.get_all(&part.iter().map(|j| j.0).collect::<Vec<_>>()).await).await
    }

    /// Claims each delivered job for `owner` (lock mode, and strict mode's unkeyed jobs): a new
    /// job is inserted RUNNING, a due PENDING one (or one whose lease expired with attempts left)
    /// becomes RUNNING; each refusal says why, from the row read after it. A job whose shard failed
    /// is `Unavailable`; when every shard asked failed, the call fails.
    pub async fn claim_all(&self, jobs: &[Sent<'_>], owner: &str, lease: Lease) -> Result<Vec<Claimed>, InfraError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let claim = async |s: &Shard<S>, part: Vec<&Sent<'_>>| {
            s.claim_all(&part.into_iter().copied().collect::<Vec<_>>(), owner, lease).await
        };
        Self::unless_all_failed(self.routed_each(jobs, |(j, _)| j.route(), claim).await, Claimed::Unavailable)
    }

    /// Counts by status, zeros included, summed over the shards.
    pub async fn counts(&self) -> Result<Counts, InfraError> {
        Ok(self.every(async |s| s.counts().await).await?.into_iter().fold(Counts::default(), Counts::plus))
    }

    /// A page of jobs, newest first (by `(created_at, id)`, which orders every shard alike, so a
    /// page is each shard's page merged and cut); the cursor for the next page when there may be
    /// more. A key's jobs are all in its shard: a list by key asks that shard alone.
    pub async fn list(
        &self,
        filter: &ListFilter<'_>,
        cursor: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<(Vec<JobRow>, Option<(i64, String)>), InfraError> {
        if let Some(key) = filter.ordering_key {
            return self.at(Route::key(key)).list(filter, cursor, limit).await;
        }
        let pages = self.every(async |s| s.list(filter, cursor, limit).await).await?;
        if pages.len() == 1 {
            return Ok(pages.into_iter().next().unwrap_or_default());
        }
        let mut jobs: Vec<JobRow> = pages.into_iter().flat_map(|(jobs, _)| jobs).collect();
        jobs.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        jobs.truncate(limit as usize);
        let next = if jobs.len() as u32 == limit { jobs.last().map(|j| (j.created_at, j.id.clone())) } else { None };
        Ok((jobs, next))
    }

    #[cfg(any(test, feature = "testing"))]
    /// Records an API job PENDING: `(job, inserted)`; when not inserted, the job it duplicates.
    pub async fn enqueue(&self, job: &JobSpec, now: i64, next_run_at: i64) -> Result<(JobRow, bool), InfraError> {
        self.at(job.route()).enqueue(job, now, next_run_at).await
    }

    #[cfg(any(test, feature = "testing"))]
    /// Records many API jobs PENDING, in order, one round trip per shard: for each, `(job,
    /// inserted)`; when not inserted, the job it duplicates (same id, or the active holder of its
    /// dedupe key in its shard).
    pub async fn enqueue_all(&self, jobs: &[Submit<'_>], now: i64) -> Result<Vec<(JobRow, bool)>, InfraError> {
        self.routed(jobs, |j| j.spec.route(), async |s, part| s.enqueue_all(&part, now).await).await
    }

    /// Records submissions, each in its shard, after what its `on_duplicate` does to the job
    /// holding its dedupe key there (design §22.3): in order, one round trip per shard.
    pub async fn submit_all(&self, jobs: &[Submit<'_>], now: i64) -> Result<Vec<Enqueued>, InfraError> {
        self.routed(jobs, |j| j.spec.route(), async |s, part| s.submit_all(&part, now).await).await
    }

    /// DEAD -> PENDING, or why not; audited in the job's history.
    pub async fn redrive(&self, id: &str, now: i64) -> Result<Redrive, InfraError> {
        match self.holder(id).await? {
            Some(s) => s.redrive(id, now).await,
            None => Ok(Redrive::NotFound),
        }
    }

    /// Redrives many jobs, in order, one round trip per shard holding some (found first when
    /// there are several shards); each audited.
    pub async fn redrive_all(&self, ids: &[&str], now: i64) -> Result<Vec<Redrive>, InfraError> {
        if self.shards.len() == 1 {
            return self.shards[0].redrive_all(ids, now).await;
        }
        let found = self.get_all(ids).await?;
        let known: Vec<(&str, Route)> =
            ids.iter().zip(&found).filter_map(|(id, j)| j.as_ref().map(|j| (*id, j.route()))).collect();
        let mut done = self
            .routed(
                &known,
                |j| j.1,
                async |s, part| s.redrive_all(&part.iter().map(|j| j.0).collect::<Vec<_>>(), now).await,
            )
            .await?
            .into_iter();
        Ok(found
            .iter()
            .map(|j| if j.is_some() { done.next().unwrap_or(Redrive::NotFound) } else { Redrive::NotFound })
            .collect())
    }

    /// DEAD jobs matching `filter`: how many, how many can be redriven, and the first `limit` of
    /// those (oldest death first, merged over the shards).
    pub async fn dead_matching(&self, filter: &DeadFilter, limit: u32) -> Result<DeadMatches, InfraError> {
        let found = match filter.ordering_key.as_deref() {
            Some(key) => vec![self.at(Route::key(key)).dead_matching(filter, limit).await?],
            None => self.every(async |s| s.dead_matching(filter, limit).await).await?,
        };
        let mut ids: Vec<(i64, String)> = found.iter().flat_map(|f| f.ids.iter().cloned()).collect();
        ids.sort();
        ids.truncate(limit as usize);
        Ok(DeadMatches {
            matched: found.iter().map(|f| f.matched).sum(),
            redrivable: found.iter().map(|f| f.redrivable).sum(),
            ids: ids.into_iter().map(|(_, id)| id).collect(),
        })
    }

    /// How many open jobs match `filter`, not yet cancelled or asked to stop, over the shards that
    /// may hold them (design §22.2).
    pub async fn cancellable_matching(&self, filter: &CancelFilter) -> Result<Cancellable, InfraError> {
        Ok(match filter.ordering_key.as_deref() {
            Some(key) => self.at(Route::key(key)).cancellable_matching(filter).await?,
            None => self.every(async |s| s.cancellable_matching(filter).await).await?.into_iter().fold(
                Cancellable::default(),
                |a, b| Cancellable { matched: a.matched + b.matched, running: a.running + b.running },
            ),
        })
    }

    /// Cancels open jobs matching `filter`, at most `limit` per shard holding them (PENDING ones
    /// DEAD "cancelled", RUNNING ones asked to stop): their rows.
    pub async fn cancel_matching(&self, filter: &CancelFilter, now: i64, limit: u32) -> Result<Vec<JobRow>, InfraError> {
        Ok(match filter.ordering_key.as_deref() {
            Some(key) => self.at(Route::key(key)).cancel_matching(filter, now, limit).await?,
            None => self.every(async |s| s.cancel_matching(filter, now, limit).await).await?.into_iter().flatten().collect(),
        })
    }

    #[cfg(any(test, feature = "testing"))]
    /// The job to wake once `key`'s holder is gone (cancelled): in strict mode the key's head; in
    /// lock mode its oldest PENDING job if it was put off behind the holder (made due now).
    /// `None` when there is no PENDING job to wake.
    pub async fn key_to_wake(
        &self,
        key: &str,
        mode: OrderingMode,
        on_dead: OnDead,
        now: i64,
    ) -> Result<Option<JobRow>, InfraError> {
        Ok(self.keys_to_wake(&[key], mode, on_dead, now).await?.pop().flatten())
    }

    /// [`Self::key_to_wake`] for each of `keys`, in their order: one batch per shard touched, of at
    /// most [`KEYS_PER_BATCH`] keys, whatever their number (design "The ledger's life").
    pub async fn keys_to_wake(
        &self,
        keys: &[&str],
        mode: OrderingMode,
        on_dead: OnDead,
        now: i64,
    ) -> Result<Vec<Option<JobRow>>, InfraError> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(KEYS_PER_BATCH) {
            out.extend(
                self.routed(chunk, |k| Route::key(k), async |s, part| {
                    let part: Vec<&str> = part.into_iter().copied().collect();
                    s.keys_to_wake(&part, mode, on_dead, now).await
                })
                .await?,
            );
        }
        Ok(out)
    }

    /// PENDING -> DEAD "cancelled", or why not; audited in the job's history.
    pub async fn cancel(&self, id: &str, now: i64) -> Result<Cancel, InfraError> {
        match self.holder(id).await? {
            Some(s) => s.cancel(id, now).await,
            None => Ok(Cancel::NotFound),
        }
    }

    /// Applies records, in order, one round trip per shard: for each, whether its transition
    /// changed its row (a guarded one that did not: the lease was lost).
    pub async fn record_all(&self, records: &[Record]) -> Result<Vec<bool>, InfraError> {
        Ok(self.record_all_waking(records).await?.0)
    }

    /// [`Self::record_all`], and the jobs it finished that other jobs wait on (design §24):
    /// `(id, route)` each, for their dependents' release.
    pub async fn record_all_waking(&self, records: &[Record]) -> Result<(Vec<bool>, Vec<(String, Route)>), InfraError> {
        if records.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let out = self.routed(records, |r| r.transition.route(), async |s, part| s.record_all(&part).await).await?;
        let mut waited = Vec::new();
        let applied = records
            .iter()
            .zip(out)
            .map(|(r, (applied, finished))| {
                waited.extend(finished.map(|id| (id, r.transition.route())));
                applied
            })
            .collect();
        Ok((applied, waited))
    }

    /// Records jobs that can never run DEAD with their errors, one round trip per shard, and reads
    /// each row back (a job running elsewhere is left to its run).
    pub async fn record_dead_all(&self, jobs: &[(JobSpec, String)], now: i64) -> Result<Vec<RecordedDead>, InfraError> {
        self.routed(jobs, |j| j.0.route(), async |s, part| s.record_dead_all(&part, now).await).await
    }

    /// Ends the leases of `owners`, invocations known to have died, in every shard: their RUNNING
    /// jobs back to PENDING (or DEAD when out of attempts), `why` their error, each run in its
    /// job's history. Returns the ended jobs' rows.
    pub async fn end_leases(&self, owners: &[&str], now: i64, why: &str) -> Result<Vec<JobRow>, InfraError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.every(async |s| s.end_leases(owners, now, why).await).await?.into_iter().flatten().collect())
    }

    /// Whether an operator asked running job `id` to stop (design §22.1): a run's watch.
    pub async fn cancel_asked(&self, id: &str, route: Route) -> Result<bool, InfraError> {
        Ok(!self.at(route).sql.query(super::stmt::cancel_asked(id)).await?.is_empty())
    }

    /// Extends `owner`'s leases on `jobs` (the jobs it claimed) until `until`: the ids still ours.
    pub async fn renew(
        &self,
        owner: &str,
        now: i64,
        until: i64,
        jobs: &[(String, Route)],
    ) -> Result<HashSet<String>, InfraError> {
        let held = self
            .routed(
                jobs,
                |j| j.1,
                async |s, part| {
                    let ids: Vec<String> = part.iter().map(|j| j.0.clone()).collect();
                    let held = s.renew(owner, now, until, &ids).await?;
                    Ok(ids.into_iter().map(|id| held.contains(&id).then_some(id)).collect())
                },
            )
            .await?;
        Ok(held.into_iter().flatten().collect())
    }

    /// Expired leases back to PENDING (or DEAD when out of attempts), at most `limit` per shard:
    /// their rows. Each expired lease was a run that never reported; [`Self::record_reaped`]
    /// writes its line.
    pub async fn reap(&self, now: i64, limit: u32) -> Result<Vec<JobRow>, InfraError> {
        Ok(self.every(async |s| s.reap(now, limit).await).await?.into_iter().flatten().collect())
    }

    /// The history lines of reaped runs.
    pub async fn record_reaped(&self, reaped: &[JobRow], now: i64) -> Result<(), InfraError> {
        if reaped.is_empty() {
            return Ok(());
        }
        self.routed(reaped, JobRow::route, async |s, part| {
            let n = part.len();
            s.record_reaped(&part, now).await.map(|()| vec![(); n])
        })
        .await
        .map(|_| ())
    }

    /// PENDING jobs due before `due_before` (their message was probably lost), at most `limit` in
    /// all, most urgent and longest due first; in strict mode only those outside a key's sequence.
    pub async fn overdue(&self, due_before: i64, limit: u32, mode: OrderingMode) -> Result<Vec<JobRow>, InfraError> {
        let found = self.every(async |s| s.overdue(due_before, limit, mode).await).await?;
        Ok(most_urgent(found, limit))
    }

    /// Strict mode: the due heads of keys nothing runs, at most `limit` in all.
    pub async fn stalled_heads(&self, due_before: i64, on_dead: OnDead, limit: u32) -> Result<Vec<JobRow>, InfraError> {
        let found = self.every(async |s| s.stalled_heads(due_before, on_dead, limit).await).await?;
        Ok(most_urgent(found, limit))
    }

    /// Takes each found PENDING job for re-sending, if unchanged since it was read (so two
    /// overlapping runs never both send it): the jobs taken.
    pub async fn take_for_resend(&self, found: &[JobRow], now: i64) -> Result<Vec<JobRow>, InfraError> {
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let taken = self
            .routed(found, JobRow::route, async |s, part| {
                let taken = s.take_for_resend(&part, now).await?;
                Ok(part.iter().map(|j| taken.iter().find(|t| t.id == j.id).cloned()).collect())
            })
            .await?;
        Ok(taken.into_iter().flatten().collect())
    }

    /// Deletes the jobs of `status` finished before `before` on every shard at once, each within
    /// `budget` (`Shard::purge`): how many.
    pub async fn purge(
        &self,
        status: Status,
        before: i64,
        keep_keyed: bool,
        budget: &PurgeBudget<'_>,
    ) -> Result<usize, InfraError> {
        Ok(self.every(async |s| s.purge(status, before, keep_keyed, budget).await).await?.into_iter().sum())
    }

    /// Parks every delivered keyed job and, in the same transaction, tries the claim of each key
    /// marked `claim` (design §3b), one round trip per shard touched. Every key's head is read
    /// afterwards. A key whose shard failed has its jobs `Unavailable` and nothing claimed; when
    /// every shard asked failed, the call fails.
    pub async fn park_and_claim(
        &self,
        keys: &[Intake<'_>],
        claim: ClaimSpec<'_>,
    ) -> Result<Vec<KeyIntake>, InfraError> {
        let park = async |s: &Shard<S>, part: Vec<&Intake<'_>>| s.park_and_claim(&part, claim).await;
        let answers = self.routed_each(keys, |k| Route::key(k.key), park).await;
        let mut out =
            Self::unless_all_failed(answers, |_| KeyIntake { parked: Vec::new(), state: Default::default() })?;
        for (k, intake) in keys.iter().zip(&mut out) {
            if intake.parked.len() != k.jobs.len() {
                intake.parked = vec![Parked::Unavailable; k.jobs.len()];
            }
        }
        Ok(out)
    }

    /// Records a chain's results for `key` and, when `next` is given, claims the key's next jobs
    /// chaining from `prev`, all in one round trip to the key's shard; then reads the key's head.
    pub async fn step(
        &self,
        key: &str,
        records: &[Record],
        next: Option<(ClaimSpec<'_>, Option<&str>)>,
        on_dead: OnDead,
    ) -> Result<Step, InfraError> {
        self.at(Route::key(key)).step(key, &records.iter().collect::<Vec<_>>(), next, on_dead).await
    }

    /// Keys blocked by a DEAD head, oldest first, at most `limit` in all.
    pub async fn blocked_keys(&self, limit: u32) -> Result<Vec<BlockedKey>, InfraError> {
        Ok(merged_blocked(self.every(async |s| s.blocked_keys(limit).await).await?, limit))
    }

    /// Lets `key` move past its DEAD head.
    pub async fn skip(&self, key: &str, now: i64) -> Result<Skip, InfraError> {
        self.at(Route::key(key)).skip(key, now).await
    }

    /// Pauses `key` in its shard (design §20.11).
    pub async fn pause_key(&self, key: &str, now: i64) -> Result<KeyPause, InfraError> {
        self.at(Route::key(key)).pause_key(key, now).await
    }

    /// Resumes `key`: the pause ended and the jobs to send again (at most `limit`).
    pub async fn resume_key(&self, key: &str, mode: OrderingMode, limit: u32) -> Result<Resumed, InfraError> {
        self.at(Route::key(key)).resume_key(key, mode, limit).await
    }

    /// Every schedule's row (design §23), from the first shard, which holds them all.
    pub async fn schedule_states(&self) -> Result<Vec<ScheduleState>, InfraError> {
        self.shards[0].schedule_states().await
    }

    /// Records that a cron run saw each schedule's period (submitting the job named, if any), in
    /// the first shard: one batch.
    pub async fn schedules_seen(&self, seen: &[(&str, i64, Option<String>)], now: i64) -> Result<(), InfraError> {
        self.shards[0].schedules_seen(seen, now).await
    }

    /// Pauses (`Some(now)`) or resumes (`None`) schedule `name`: its row after.
    pub async fn schedule_pause(&self, name: &str, paused_at: Option<i64>) -> Result<ScheduleState, InfraError> {
        self.shards[0].schedule_pause(name, paused_at).await
    }

    /// Paused keys by name after `after`, at most `limit` in all, from every shard.
    pub async fn paused_keys(&self, after: &str, limit: u32) -> Result<Vec<KeyPause>, InfraError> {
        Ok(merged_paused(self.every(async |s| s.paused_keys(after, limit).await).await?, limit))
    }

    #[cfg(any(test, feature = "testing"))]
    /// A job's history, oldest first, its row's successful run included.
    pub async fn events(&self, job_id: &str) -> Result<Vec<Event>, InfraError> {
        Ok(self.get_with_history(job_id).await?.map(|(_, events)| events).unwrap_or_default())
    }

    /// The activity of the last hour, minute by minute, summed over the shards; and each job
    /// type's run times and queue waits over the hour (design §27.6).
    pub async fn activity(&self, now: i64) -> Result<(Vec<Minute>, Vec<super::history::Times>), InfraError> {
        let per_shard = self.every(async |s| s.activity(now).await).await?;
        let (per_shard, samples): (Vec<Vec<Minute>>, Vec<Vec<super::history::Sample>>) = per_shard.into_iter().unzip();
        let mut sum = per_shard.first().cloned().unwrap_or_default();
        for shard in per_shard.iter().skip(1) {
            for (m, n) in sum.iter_mut().zip(shard) {
                m.done += n.done;
                m.failed += n.failed;
                m.dead += n.dead;
                m.backlog += n.backlog;
            }
        }
        Ok((sum, super::history::times(samples.into_iter().flatten().collect())))
    }

    /// Audits an operator's skip of `skipped` (DEAD, as the skip left it). Best effort: the skip
    /// stands without its line.
    pub async fn audit_skip(&self, skipped: &JobRow) {
        self.at(skipped.route()).audit_skip(&skipped.id, skipped.updated_at).await;
    }

    /// Asks for a job's permit to start, in its limit key's shard (design §20).
    pub async fn ask(&self, ask: &Ask<'_>, now: i64) -> Result<Answer, InfraError> {
        self.at(Route::key(ask.limit_key)).ask(ask, now).await
    }

    #[cfg(any(test, feature = "testing"))]
    /// [`Self::ask`], the verdict alone.
    pub async fn acquire(&self, ask: &Ask<'_>, now: i64) -> Result<super::limit::Permit, InfraError> {
        Ok(self.ask(ask, now).await?.permit)
    }

    /// Frees a job's permit when its run ended: the jobs woken to take its slot.
    pub async fn release(&self, r: &Release<'_>, now: i64) -> Result<Vec<Woken>, InfraError> {
        self.at(Route::key(r.limit_key)).release(r, now).await
    }

    /// A woken job that could not start gives back the slot handed to it, in its limit key's
    /// shard: the jobs woken to take it.
    pub async fn give_back(&self, key: &str, job: &str, policy: &Policy, now: i64) -> Result<Vec<Woken>, InfraError> {
        self.at(Route::key(key)).give_back(key, job, policy, now).await
    }

    #[cfg(any(test, feature = "testing"))]
    /// Cancelled jobs leave `key`'s line and give back the slots handed to them, in the limit key's
    /// shard: the jobs woken to take the slots.
    pub async fn forget(&self, key: &str, jobs: &[&str], policy: &Policy, now: i64) -> Result<Vec<Woken>, InfraError> {
        self.forget_all(&[(key, jobs.to_vec(), *policy)], now).await
    }

    /// [`Self::forget`] for several limit keys at once: one batch per shard touched, of at most
    /// [`KEYS_PER_BATCH`] keys, whatever their number. The jobs woken to take the slots.
    pub async fn forget_all(&self, keys: &[Forgotten<'_>], now: i64) -> Result<Vec<Woken>, InfraError> {
        let mut woken = Vec::new();
        for chunk in keys.chunks(KEYS_PER_BATCH) {
            let parts = self.parted(chunk, |k| Route::key(k.0));
            let answers = join_all(parts.iter().map(|(s, part)| self.shards[*s].forget_all(part, now))).await;
            for a in answers {
                woken.extend(a?);
            }
        }
        Ok(woken)
    }

    #[cfg(any(test, feature = "testing"))]
    /// Hands the oldest `n` jobs in `key`'s line a slot each and takes them out of it (tests; an
    /// operator's change wakes in its own batch, [`Self::set_limit`]).
    pub async fn wake(&self, key: &str, n: u32, policy: &Policy, now: i64) -> Result<Vec<Woken>, InfraError> {
        self.at(Route::key(key)).wake(key, n, policy, now).await
    }

    /// Jobs submitted parked join their limit keys' lines, and the slots free now go to each
    /// line's oldest (design §20.12): one batch per shard touched, of at most [`KEYS_PER_BATCH`]
    /// keys, whatever their number. Each batch answers apart, with the keys it carried: the jobs
    /// to send, or why that batch failed (its jobs are then the caller's to send).
    pub async fn line_all<'a>(&self, keys: &[Lined<'a>], now: i64) -> Vec<(Vec<&'a str>, Result<Vec<Woken>, InfraError>)> {
        let mut out = Vec::new();
        for chunk in keys.chunks(KEYS_PER_BATCH) {
            let parts = self.parted(chunk, |k| Route::key(k.0));
            let answers = join_all(parts.iter().map(|(s, part)| self.shards[*s].line_all(part, now))).await;
            out.extend(parts.iter().map(|(_, part)| part.iter().map(|k| k.0).collect()).zip(answers));
        }
        out
    }

    /// An operator's change to a limit key, and the jobs of its line it wakes.
    pub async fn set_limit(&self, key: &str, change: &Change, policy: &Policy, now: i64) -> Result<Vec<Woken>, InfraError> {
        self.at(Route::key(key)).set_limit(key, change, policy, now).await
    }

    /// One limit key as operators see it (`None`: no job of it has asked to start yet).
    pub async fn limit_state(&self, key: &str, now: i64) -> Result<Option<LimitState>, InfraError> {
        self.at(Route::key(key)).limit_state(key, now).await
    }

    /// Limit keys by name after `after`, at most `limit`, from every shard.
    pub async fn limit_states(&self, after: &str, now: i64, limit: u32) -> Result<Vec<LimitState>, InfraError> {
        Ok(merged_limits(self.every(async |s| s.limit_states(after, now, limit).await).await?, limit))
    }
}

/// The shards' blocked keys, oldest head first, at most `limit`.
pub(super) fn merged_blocked(pages: Vec<Vec<BlockedKey>>, limit: u32) -> Vec<BlockedKey> {
    let mut keys: Vec<BlockedKey> = pages.into_iter().flatten().collect();
    keys.sort_by(|a, b| (a.head.finished_at, &a.head.id).cmp(&(b.head.finished_at, &b.head.id)));
    keys.truncate(limit as usize);
    keys
}

/// The shards' paused keys by name, at most `limit`.
pub(super) fn merged_paused(pages: Vec<Vec<KeyPause>>, limit: u32) -> Vec<KeyPause> {
    let mut all: Vec<KeyPause> = pages.into_iter().flatten().collect();
    all.sort_by(|a, b| a.key.cmp(&b.key));
    all.truncate(limit as usize);
    all
}

/// The shards' limit keys by name, at most `limit`.
pub(super) fn merged_limits(pages: Vec<Vec<LimitState>>, limit: u32) -> Vec<LimitState> {
    let mut all: Vec<LimitState> = pages.into_iter().flatten().collect();
    all.sort_by(|a, b| a.limit_key.cmp(&b.limit_key));
    all.truncate(limit as usize);
    all
}

/// At most `limit` of the shards' finds, most urgent first, then longest due.
fn most_urgent(found: Vec<Vec<JobRow>>, limit: u32) -> Vec<JobRow> {
    if found.len() == 1 {
        return found.into_iter().flatten().collect();
    }
    let mut jobs: Vec<JobRow> = found.into_iter().flatten().collect();
    jobs.sort_by_key(|j| (j.priority, j.next_run_at));
    jobs.truncate(limit as usize);
    jobs
}
