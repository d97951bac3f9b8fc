//! The ledger's conformance suite: what any [`Sql`] backend must do for the ledger, exercised
//! through [`Ledger`]'s own methods (as River's `riverdrivertest.Exercise` does for its drivers).
//! It runs natively on SQLite (`tests/native/conformance.rs`) and on D1 under miniflare (the fixture
//! worker's `GET /__conformance`, `tests/e2e/conformance.test.mjs`), so a new backend (a Durable
//! Object's SQLite) is held to the same. Every case names its own jobs and keys by `prefix`, so
//! the suite runs on a database that holds other jobs, and twice on the same one.

use super::history::{Run, RunOutcome};
use super::strict::{ClaimSpec, Intake, Parked};
use super::transition::{Record, Transition};
use super::job::{Cancel, Claimed, JobSpec, Lease, Redrive, Status};
use super::shards::Ledger;
use super::store::Sql;
use crate::config::OnDead;
use crate::error::InfraError;

/// A case that failed, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    /// The case.
    pub case: &'static str,
    /// What went wrong.
    pub why: String,
}

/// What a run of the suite found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// Cases that held.
    pub passed: Vec<&'static str>,
    /// Cases that did not.
    pub failed: Vec<Failure>,
}

/// A case's verdict: `Err` says what did not hold (or the backend's error).
type Verdict = Result<(), String>;

fn check(ok: bool, why: impl FnOnce() -> String) -> Verdict {
    if ok {
        Ok(())
    } else {
        Err(why())
    }
}

fn infra(e: InfraError) -> String {
    format!("backend error: {e}")
}

/// Ids and keys of one run, unique by its prefix.
pub struct Names {
    prefix: String,
}

impl Names {
    fn id(&self, case: &str, n: &str) -> String {
        format!("{}-{case}-{n}", self.prefix)
    }
}

/// A clock far from any real job's, so the suite's jobs are due, expired or not as it says.
const T0: i64 = 4_000_000_000_000;
const LEASE_MS: i64 = 120_000;

fn lease(now: i64) -> Lease {
    Lease { now, until: now + LEASE_MS, due_before: now }
}

fn spec(id: String, key: Option<String>, dedupe: Option<String>) -> JobSpec {
    JobSpec {
        id,
        job_type: Some("conformance".into()),
        ordering_key: key,
        dedupe_key: dedupe,
        limit_key: None,
        deadline_at: None,
        timeout_seconds: None,
        payload: Some("{\"type\":\"conformance\"}".into()),
        max_attempts: 3,
        priority: 5,
    }
}

fn complete(job: &JobSpec, owner: &str, at: i64) -> Record {
    Transition::Complete {
        id: job.id.clone(),
        route: job.route(),
        owner: owner.into(),
        at,
        result: Some("{\"ok\":1}".into()),
        http_status: None,
        started_at: None,
    }
    .into()
}

/// Runs every case on `ledger`; each case's jobs are named by `prefix`.
pub async fn exercise<S: Sql>(ledger: &Ledger<S>, prefix: &str) -> Report {
    let n = &Names { prefix: prefix.to_string() };
    let mut report = Report::default();
    let mut note = |case: &'static str, verdict: Verdict| match verdict {
        Ok(()) => report.passed.push(case),
        Err(why) => report.failed.push(Failure { case, why }),
    };
    note("a claim wins once and only its owner completes", claim_and_complete(ledger, n).await);
    note("a retry waits until due, then runs its next attempt", retry_waits(ledger, n).await);
    note("an active dedupe key refuses a second job", dedupe_clash(ledger, n).await);
    note("an enqueue of a known id is a duplicate", enqueue_duplicate(ledger, n).await);
    note("cancel and redrive move only the right states", cancel_and_redrive(ledger, n).await);
    note("strict mode parks in order and chains to the next job", strict_chain(ledger, n).await);
    note("an expired lease is reaped and its run kept in history", reap_expired(ledger, n).await);
    report
}

async fn claim_and_complete<S: Sql>(l: &Ledger<S>, n: &Names) -> Verdict {
    let a = spec(n.id("claim", "a"), None, None);
    let won = l.claim_all(&[(&a, T0)], "w1", lease(T0)).await.map_err(infra)?;
    check(matches!(won.as_slice(), [Claimed::Won(j)] if j.status == Status::Running), || {
        format!("first claim: {won:?}")
    })?;
    let again = l.claim_all(&[(&a, T0)], "w2", lease(T0 + 1)).await.map_err(infra)?;
    check(matches!(again.as_slice(), [Claimed::Running(Some(_))]), || format!("second claim: {again:?}"))?;
    let applied = l.record_all(&[complete(&a, "w2", T0 + 2), complete(&a, "w1", T0 + 3)]).await.map_err(infra)?;
    check(applied == [false, true], || format!("completions by w2 then w1 applied {applied:?}"))?;
    let done = l.get(&a.id).await.map_err(infra)?;
    check(done.as_ref().is_some_and(|j| j.status == Status::Done && j.result.is_some()), || format!("{done:?}"))?;
    let late = l.claim_all(&[(&a, T0)], "w3", lease(T0 + 4)).await.map_err(infra)?;
    check(matches!(late.as_slice(), [Claimed::Finished]), || format!("claim of a DONE job: {late:?}"))
}

async fn retry_waits<S: Sql>(l: &Ledger<S>, n: &Names) -> Verdict {
    let a = spec(n.id("retry", "a"), None, None);
    l.claim_all(&[(&a, T0)], "w1", lease(T0)).await.map_err(infra)?;
    let fail = Transition::Fail {
        id: a.id.clone(),
        route: a.route(),
        owner: "w1".into(),
        at: T0 + 1,
        to: Status::Pending,
        next_run_at: T0 + 5_000,
        error: "HTTP 503".into(),
        started_at: None,
    };
    let run = Run {
        job_id: a.id.clone(),
        attempt: 1,
        started_at: T0,
        finished_at: T0 + 1,
        outcome: RunOutcome::Retry,
        error: Some("HTTP 503".into()),
        http_status: Some(503),
        actor: "w1".into(),
    };
    let applied = l.record_all(&[Record { transition: fail, run: Some(run) }]).await.map_err(infra)?;
    check(applied == [true], || format!("the failure applied {applied:?}"))?;
    let early = l.claim_all(&[(&a, T0)], "w2", lease(T0 + 4_999)).await.map_err(infra)?;
    check(matches!(early.as_slice(), [Claimed::NotDue(at)] if *at == T0 + 5_000), || {
        format!("early claim: {early:?}")
    })?;
    let due = l.claim_all(&[(&a, T0)], "w2", lease(T0 + 5_000)).await.map_err(infra)?;
    check(matches!(due.as_slice(), [Claimed::Won(j)] if j.attempts == 2), || format!("due claim: {due:?}"))?;
    let events = l.events(&a.id).await.map_err(infra)?;
    check(events.iter().any(|e| e.outcome == Some(RunOutcome::Retry) && e.http_status == Some(503)), || {
        format!("history: {events:?}")
    })
}

async fn dedupe_clash<S: Sql>(l: &Ledger<S>, n: &Names) -> Verdict {
    let dedupe = Some(n.id("dedupe", "key"));
    let (a, b) = (spec(n.id("dedupe", "a"), None, dedupe.clone()), spec(n.id("dedupe", "b"), None, dedupe));
    let out = l.claim_all(&[(&a, T0), (&b, T0)], "w1", lease(T0)).await.map_err(infra)?;
    check(matches!(out.as_slice(), [Claimed::Won(_), Claimed::Clash]), || format!("claims: {out:?}"))?;
    let dead = l.record_dead_all(&[(b.clone(), "duplicate".into())], T0).await.map_err(infra)?;
    check(dead.first().is_some_and(|d| d.recorded && d.job.as_ref().is_some_and(|j| j.status == Status::Dead)), || {
        format!("the clash recorded DEAD: {dead:?}")
    })
}

async fn enqueue_duplicate<S: Sql>(l: &Ledger<S>, n: &Names) -> Verdict {
    let a = spec(n.id("enqueue", "a"), Some(n.id("enqueue", "k")), None);
    let first = l.enqueue_all(&[super::job::Submit::due(&a, T0)], T0).await.map_err(infra)?;
    let again = l.enqueue_all(&[super::job::Submit::due(&a, T0)], T0 + 1).await.map_err(infra)?;
    check(
        first.first().is_some_and(|(_, new)| *new) && again.first().is_some_and(|(j, new)| !new && j.id == a.id),
        || format!("first {first:?}, again {again:?}"),
    )?;
    check(first.first().is_some_and(|(j, _)| j.seq == Some(1)), || format!("a keyed job's seq: {first:?}"))
}

async fn cancel_and_redrive<S: Sql>(l: &Ledger<S>, n: &Names) -> Verdict {
    let a = spec(n.id("cancel", "a"), None, None);
    l.enqueue_all(&[super::job::Submit::due(&a, T0)], T0).await.map_err(infra)?;
    let refused = l.redrive(&a.id, T0 + 1).await.map_err(infra)?;
    check(matches!(refused, Redrive::Refused(_)), || format!("redrive of a PENDING job: {refused:?}"))?;
    let cancelled = l.cancel(&a.id, T0 + 2).await.map_err(infra)?;
    check(matches!(&cancelled, Cancel::Cancelled(j) if j.status == Status::Dead), || format!("{cancelled:?}"))?;
    let redriven = l.redrive(&a.id, T0 + 3).await.map_err(infra)?;
    check(matches!(&redriven, Redrive::Redriven(j) if j.status == Status::Pending), || format!("{redriven:?}"))?;
    let missing = l.cancel(&n.id("cancel", "none"), T0).await.map_err(infra)?;
    check(matches!(missing, Cancel::NotFound), || format!("cancel of no job: {missing:?}"))
}

async fn strict_chain<S: Sql>(l: &Ledger<S>, n: &Names) -> Verdict {
    let key = n.id("strict", "k");
    let (x, y) =
        (spec(n.id("strict", "x"), Some(key.clone()), None), spec(n.id("strict", "y"), Some(key.clone()), None));
    let c = ClaimSpec { owner: "w1", lease: lease(T0), on_dead: OnDead::Block, limit: 1 };
    let parked = l
        .park_and_claim(&[Intake { key: &key, jobs: vec![&x, &y], claim: c.limit, woken: vec![] }], c)
        .await
        .map_err(infra)?;
    let Some(k) = parked.first() else { return Err("no verdict for the key".into()) };
    check(k.parked.iter().all(|p| matches!(p, Parked::Recorded(_))), || format!("parked: {:?}", k.parked))?;
    check(k.state.claimed.iter().map(|j| j.id.as_str()).eq([x.id.as_str()]), || {
        format!("claimed {:?}", k.state.claimed)
    })?;
    let next = ClaimSpec { owner: "w1", lease: lease(T0 + 10), on_dead: OnDead::Block, limit: 5 };
    let step = l.step(&key, &[complete(&x, "w1", T0 + 10)], Some((next, Some(&x.id))), OnDead::Block).await;
    let step = step.map_err(infra)?;
    check(step.recorded == [true], || format!("recorded {:?}", step.recorded))?;
    check(step.state.claimed.iter().map(|j| j.id.as_str()).eq([y.id.as_str()]), || {
        format!("chained to {:?}", step.state.claimed)
    })
}

async fn reap_expired<S: Sql>(l: &Ledger<S>, n: &Names) -> Verdict {
    let a = spec(n.id("reap", "a"), None, None);
    l.claim_all(&[(&a, T0)], "w-dead", lease(T0)).await.map_err(infra)?;
    let held = l.renew("w-dead", T0 + 1, T0 + LEASE_MS, &[(a.id.clone(), a.route())]).await.map_err(infra)?;
    check(held.contains(&a.id), || format!("renewal held {held:?}"))?;
    let reaped = l.reap(T0 + 10 * LEASE_MS, 1000).await.map_err(infra)?;
    let ours: Vec<_> = reaped.iter().filter(|j| j.id == a.id).collect();
    check(ours.len() == 1 && ours[0].status == Status::Pending, || format!("reaped {ours:?}"))?;
    l.record_reaped(&reaped, T0 + 10 * LEASE_MS).await.map_err(infra)?;
    let events = l.events(&a.id).await.map_err(infra)?;
    check(events.iter().any(|e| e.actor == "maintenance"), || format!("history {events:?}"))
}
