//! Running one claimed job, for both modes (River's job executor): its deadline, its payload
//! (opened when sealed), its limit key's gate, the handler under its timeout, and what the run
//! leads to (the retry policy's decision, `crate::retry`) as the guarded [`Transition`] and the
//! history line to record. The mode records it and decides what its key does next.

use serde_json::Value;

use super::gate::{Gate, Waits};
use super::leftovers::Leftovers;
use super::ports::Consumer;
use crate::clock::Clock;
use crate::error::InfraError;
use crate::handlers::{bounded_result, Cancellation, Done, JobContext, JobError, Runner, CANCELLED};
use crate::ledger::history::{Run, RunOutcome};
use crate::ledger::{JobRow, Record, Sql, Status, Transition};
use crate::lock::Kv;
use crate::log::Event;
use crate::observe::{within, Attempt, AttemptEnd, Span};
use crate::producer::{QueueSender, MAX_PAYLOAD_BYTES};
use crate::retry::{decide_failure, FailureDecision};
use crate::seal::is_sealed;

/// How long a sealed job whose payload cannot be opened waits before it is tried again.
pub const SEAL_WAIT_SECONDS: u32 = 300;

/// How often a run asks the ledger whether its job was cancelled (design §22.1): one read by id
/// per running job per period, none for a run shorter than it.
pub const CANCEL_CHECK_MS: i64 = 2_000;
/// How long a run whose job was cancelled has to end by itself before it is dropped at its next
/// await (the built-in handlers end at once: their request is aborted).
pub const CANCEL_GRACE_MS: i64 = 1_000;
/// The bound on a cancel's reaching a run in any invocation and the run's ending, ledger round
/// trips aside: one check period, then the grace. The job's lease is given up when its run's
/// transition is recorded right after.
pub const CANCEL_REACH_MS: i64 = CANCEL_CHECK_MS + CANCEL_GRACE_MS;

/// A claimed job's handler run, as both modes record it.
pub(super) struct Ran {
    /// The transition, guarded by our lease (complete, or fail to PENDING or DEAD), with the
    /// run's entry in the job's history (none for a success: the DONE row describes it).
    pub(super) record: Record,
    /// How it ended.
    pub(super) end: RunEnd,
}

/// How a run ended, for the mode to decide what comes next.
pub(super) enum RunEnd {
    Done,
    Dead,
    Retry {
        delay_seconds: u32,
    },
    /// The handler snoozed: like a retry for the key (held until then), but no attempt spent.
    Snooze {
        delay_seconds: u32,
    },
    /// Not run: its limit key refused it a start (design §20). Its key waits; no attempt spent.
    Limited(Waits),
    /// Cancelled while it ran (design §22.1): DEAD "cancelled" and skipped, so its key moves on
    /// (strict mode, even under `ON_DEAD = block`). `recorded`: its record applied at once (its
    /// lease given up without waiting for the rest of the batch), so the mode records it no more.
    Cancelled {
        recorded: bool,
    },
    /// Not run: the checks before its start took past the time its lease was known to cover a
    /// run (the invocation stalled in them), so the job may be another invocation's now. Handed
    /// back if it is still ours; no attempt spent.
    LeaseLost,
}

impl RunEnd {
    /// Seconds until the job runs again, when it does (a retry or a snooze): its key waits.
    pub(super) fn again_after(&self) -> Option<u32> {
        match self {
            RunEnd::Retry { delay_seconds } | RunEnd::Snooze { delay_seconds } => Some(*delay_seconds),
            RunEnd::Limited(waits) => Some(waits.delay_seconds),
            RunEnd::Done | RunEnd::Dead | RunEnd::Cancelled { .. } | RunEnd::LeaseLost => None,
        }
    }
}

/// How a run that happened (its handler called) ended: the history's outcome, and, as a
/// [`RunEnd`], what the mode does next. A refused start, a lost lease and a cancel are no such
/// end, so none reaches the history as one.
#[derive(Debug, Clone, Copy)]
enum Ended {
    Done,
    Dead,
    Retry { delay_seconds: u32 },
    Snooze { delay_seconds: u32 },
}

impl Ended {
    /// What the job's history records of it.
    fn outcome(self) -> RunOutcome {
        match self {
            Ended::Done => RunOutcome::Done,
            Ended::Dead => RunOutcome::Dead,
            Ended::Retry { .. } => RunOutcome::Retry,
            Ended::Snooze { .. } => RunOutcome::Snooze,
        }
    }
}

impl From<Ended> for RunEnd {
    fn from(end: Ended) -> RunEnd {
        match end {
            Ended::Done => RunEnd::Done,
            Ended::Dead => RunEnd::Dead,
            Ended::Retry { delay_seconds } => RunEnd::Retry { delay_seconds },
            Ended::Snooze { delay_seconds } => RunEnd::Snooze { delay_seconds },
        }
    }
}

/// A run's transition, how it ended, its error and its HTTP status.
type Finished = (Transition, Ended, Option<String>, Option<u16>);

/// Why a sealed payload cannot be opened now: its job waits for the key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum Unopened {
    #[error("the payload is sealed and PAYLOAD_KEY is not set")]
    NoKey,
    #[error("the sealed payload: {0}")]
    Open(InfraError),
}

/// What is kept of a sealed job's error: its kind and HTTP status, never its text (a webhook's
/// error names its URL, path and query included; a service handler's quotes its answer; either
/// may carry what the job sealed). A snooze keeps its delay and its next payload.
pub fn withheld(e: JobError) -> JobError {
    let reason = match e.http_status() {
        Some(s) => format!("HTTP {s} (details withheld: the job is sealed)"),
        None => "the handler failed (details withheld: the job is sealed)".to_string(),
    };
    match e {
        JobError::Retryable { retry_after, http_status, .. } => {
            JobError::Retryable { reason, retry_after, http_status }
        }
        JobError::Permanent { http_status, .. } => JobError::Permanent { reason, http_status },
        JobError::Snooze { seconds, http_status, payload, .. } => {
            let reason = reason.replace("the handler failed", "the handler asked");
            JobError::Snooze { seconds, reason, http_status, payload }
        }
    }
}

impl<K: Kv, S: Sql, R: Runner, C: Clock, Q: QueueSender> Consumer<'_, K, S, R, C, Q> {
    /// Runs a job this invocation claimed and says what to record. The ledger row is the truth:
    /// what runs is the row's payload, never the message's. `start_by`: the latest time a run may
    /// start and still be covered by the job's lease (the caller checked it before calling; the
    /// checks here await the ledger, and an invocation may stall in them). What the run leaves
    /// for the batch's end goes to `left`.
    pub(super) async fn run_claimed(&self, job: &JobRow, start_by: i64, left: &mut Leftovers) -> Ran {
        let Some(observer) = self.observer else { return self.attempt(job, start_by, None, left).await };
        // Observed (design §27.5): a span around the attempt, a data point when it ends.
        let started_at = self.clock.now_ms();
        let trace = job.trace().map(|t| t.run(&job.id, u32::try_from(job.attempts).unwrap_or(u32::MAX), &self.owner));
        let attempt = Attempt::of(job, started_at, trace.as_ref());
        let span = observer.open(&attempt.span_name(), &attempt.start_attributes(crate::observe::KeyNames::of_config(self.cfg)));
        let ran = self.attempt(job, start_by, span.as_deref(), left).await;
        let outcome = match ran.end {
            RunEnd::Done => AttemptEnd::Done,
            RunEnd::Dead => AttemptEnd::Dead,
            RunEnd::Retry { .. } => AttemptEnd::Retry,
            RunEnd::Snooze { .. } => AttemptEnd::Snooze,
            RunEnd::Cancelled { .. } => AttemptEnd::Cancelled,
            RunEnd::Limited(_) | RunEnd::LeaseLost => AttemptEnd::Waited,
        };
        let run_ms = self.clock.now_ms() - started_at;
        if let Some(span) = span {
            span.end(&attempt.end_attributes(outcome, run_ms));
        }
        observer.point(&attempt.data_point(outcome, run_ms));
        ran
    }

    /// [`Self::run_claimed`]'s attempt itself; the handler runs inside `span` (the run's, when it
    /// is traced), the ledger's calls beside it.
    async fn attempt(&self, job: &JobRow, start_by: i64, span: Option<&dyn Span>, left: &mut Leftovers) -> Ran {
        let checked_at = self.clock.now_ms();
        let attempt = u32::try_from(job.attempts).unwrap_or(u32::MAX);
        let sealed = job.payload.as_deref().is_some_and(is_sealed);
        if let Some(deadline) = job.deadline_at.filter(|&d| checked_at >= d) {
            // Not run at all: what it was for is past (design §20). DEAD like a permanent failure.
            let why = format!("expired: not started by its deadline ({} s late)", (checked_at - deadline) / 1000);
            return self.ran(job, &self.owner, (checked_at, checked_at), Err(JobError::permanent(why)), false).await;
        }
        if self.cancelled_while_waiting(job, checked_at).await {
            let now = self.clock.now_ms();
            return self.cancelled(job, (now, now), Err(JobError::permanent(CANCELLED)), sealed, left).await;
        }
        let payload = match self.payload_of(job).await {
            Ok(p) => p,
            Err(why) => return self.wait_for_key(job, why),
        };
        // The last check before the start that awaits nothing but its limit key's gate: past this
        // point the run starts (the gate's permit is only asked when the lease still covers it).
        let now = self.clock.now_ms();
        if now > start_by {
            self.outage(format!("job {:?}: lease lost before it started (stalled in its checks); not run", job.id));
            return Ran { record: self.defer(job, now, now).into(), end: RunEnd::LeaseLost };
        }
        let gate = match self.gate(job, left).await {
            Ok(gate) => gate,
            Err(refused) => {
                let (transition, waits) = self.refused(job, refused);
                return Ran { record: Record { transition, run: None }, end: RunEnd::Limited(waits) };
            }
        };
        let cancel = Cancellation::default();
        // The run's own start: the handler is called next, with nothing awaited before.
        let started_at = self.clock.now_ms();
        // This run is a span of the trace the job was submitted in (design §27).
        let trace = job.trace().map(|t| t.run(&job.id, attempt, &self.owner));
        let result = match payload.map(|v| serde_json::from_str::<Value>(&v).ok()) {
            Some(Some(payload)) => {
                let cx = JobContext {
                    trace: trace.as_ref(),
                    id: &job.id,
                    attempt,
                    payload: &payload,
                    ordering_key: job.ordering_key.as_deref(),
                    priority: job.priority,
                    timeout_ms: self.timeout_ms(job),
                    cancel: &cancel,
                };
                self.watched(job, &cancel, self.timed(job, within(span, self.runner.run(&cx)))).await
            }
            Some(None) | None => Err(JobError::permanent("the ledger row has no readable payload")),
        };
        // The run's end, before the limit key's release awaits the ledger.
        let ended_at = self.clock.now_ms();
        if let Gate::Held { until } = gate {
            self.release(job, (until, cancel.is_cancelled()), &result, left).await;
        }
        if cancel.is_cancelled() {
            return self.cancelled(job, (started_at, ended_at), result, sealed, left).await;
        }
        self.ran(job, &self.owner, (started_at, ended_at), result, sealed).await
    }

    /// Whether `job`, claimed ahead in a strict chain and waiting there at least one check period,
    /// was asked to stop meanwhile (design §22.1): one read by id, only for such a job, so a
    /// cancel never lets a job start later than [`CANCEL_CHECK_MS`] after it was answered (a job
    /// claimed after the cancel is never claimed at all). A read that fails lets the run start:
    /// its watch asks again.
    async fn cancelled_while_waiting(&self, job: &JobRow, now: i64) -> bool {
        let waited = job.started_at.map_or(0, |claimed| now - claimed);
        waited >= CANCEL_CHECK_MS && self.ledger.cancel_asked(&job.id, job.route()).await.unwrap_or(false)
    }

    /// `run`, watched for a cancel (design §22.1): every [`CANCEL_CHECK_MS`] the ledger is asked
    /// whether an operator cancelled the job; once one has, `cancel` is set (the built-in
    /// handlers stop at once, a Rust handler sees it on its `Cx`) and the run has
    /// [`CANCEL_GRACE_MS`] to end, else it is dropped at its next await. A check that fails is
    /// tried again at the next period. Without a sleep port (native tests that drive none) the
    /// run is not watched.
    async fn watched(
        &self,
        job: &JobRow,
        cancel: &Cancellation,
        run: impl std::future::Future<Output = Result<Done, JobError>>,
    ) -> Result<Done, JobError> {
        use futures::future::{select, Either};
        let Some(sleep) = self.sleep else { return run.await };
        let mut run = std::pin::pin!(run);
        let watch = async {
            loop {
                sleep(CANCEL_CHECK_MS).await;
                if self.ledger.cancel_asked(&job.id, job.route()).await.unwrap_or(false) {
                    return;
                }
            }
        };
        if let Either::Left((result, _)) = select(run.as_mut(), std::pin::pin!(watch)).await {
            return result;
        }
        cancel.cancel();
        match select(run, sleep(CANCEL_GRACE_MS)).await {
            Either::Left((result, _)) => result,
            Either::Right(_) => Err(JobError::permanent(CANCELLED)),
        }
    }

    /// What a cancelled run records (design §22.1): DEAD "cancelled" whatever it returned, a
    /// result it returned kept (the completion's batch ends the job DEAD,
    /// `settle_cancelled.sql`), and its line in the job's history. Recorded at once, so its lease
    /// is given up within the cancel's bound, not when the batch's other runs end; should that
    /// fail, the mode records it with the batch.
    async fn cancelled(
        &self,
        job: &JobRow,
        (started_at, now): (i64, i64),
        result: Result<Done, JobError>,
        sealed: bool,
        left: &mut Leftovers,
    ) -> Ran {
        let (transition, http_status) = match result {
            Ok(done) => {
                let status = done.http_status;
                (self.done(job, &self.owner, (started_at, now), done, sealed).await.0, status)
            }
            Err(e) => (self.fail(job, &self.owner, (started_at, now), Status::Dead, now, CANCELLED), e.http_status()),
        };
        let run = Run {
            job_id: job.id.clone(),
            attempt: job.attempts,
            started_at,
            finished_at: now,
            outcome: RunOutcome::Dead,
            error: Some(CANCELLED.to_string()),
            http_status,
            actor: self.owner.clone(),
        };
        let record = Record { transition, run: Some(run) };
        let recorded = matches!(self.record_all(std::slice::from_ref(&record), left).await.as_deref(), Ok([true]));
        Ran { record, end: RunEnd::Cancelled { recorded } }
    }

    /// The job's own time limit for a run, ms, never past the configured run bound (design §20).
    fn timeout_ms(&self, job: &JobRow) -> Option<u32> {
        job.timeout_seconds.map(|t| t.min(self.cfg.webhook_timeout_seconds).saturating_mul(1000))
    }

    /// `run`, stopped when it outlasts the job's timeout: a retryable failure. The handler's
    /// future is dropped at its next await (a Rust handler that never awaits cannot be stopped).
    async fn timed(
        &self,
        job: &JobRow,
        run: impl std::future::Future<Output = Result<Done, JobError>>,
    ) -> Result<Done, JobError> {
        let (Some(ms), Some(sleep)) = (self.timeout_ms(job), self.sleep) else { return run.await };
        match futures::future::select(std::pin::pin!(run), sleep(i64::from(ms))).await {
            futures::future::Either::Left((result, _)) => result,
            futures::future::Either::Right(_) => {
                Err(JobError::retry(format!("timed out after {} s (the job's timeout_seconds)", ms / 1000)))
            }
        }
    }

    /// What a run of `job` by `owner` (its lease owner) records: the guarded transition its
    /// result leads to, and its history line.
    pub(super) async fn ran(&self, job: &JobRow, owner: &str, (started_at, now): (i64, i64), result: Result<Done, JobError>, sealed: bool) -> Ran {
        let (transition, end, error, http_status) = match result {
            Ok(done) => self.done(job, owner, (started_at, now), done, sealed).await,
            Err(e) => {
                // A sealed job's error never reaches D1, the API or the logs in plain: a webhook's
                // names its URL, a service handler's quotes its answer.
                let e = if sealed { withheld(e) } else { e };
                let (e, next_payload) = self.next_payload(job, sealed, e).await;
                self.failed(job, owner, (started_at, now), &e, next_payload)
            }
        };
        let outcome = end.outcome();
        // A success is described by the job's DONE row (complete.sql), not by a history row:
        // one row written less per job. (A success whose completion is refused, our lease lost,
        // is still counted in the job's attempts; the reaper records the expired lease.)
        let run = (outcome != RunOutcome::Done).then(|| Run {
            job_id: job.id.clone(),
            attempt: job.attempts,
            started_at,
            finished_at: now,
            outcome,
            error,
            http_status,
            actor: owner.to_string(),
        });
        Ran { record: Record { transition, run }, end: end.into() }
    }

    /// A successful run's completion; a sealed job's result is sealed too (one that cannot be is
    /// not kept).
    async fn done(&self, job: &JobRow, owner: &str, (started_at, now): (i64, i64), done: Done, sealed: bool) -> Finished {
        let mut kept = done.result.as_ref().map(bounded_result);
        if sealed {
            if let (Some(text), Some(sealer)) = (kept.take(), self.sealer) {
                kept = sealer.seal(&job.id, &text).await.ok();
            }
        }
        let complete = Transition::Complete {
            id: job.id.clone(),
            route: job.route(),
            owner: owner.to_string(),
            at: now,
            result: kept,
            http_status: done.http_status,
            started_at: Some(started_at),
        };
        (complete, Ended::Done, None, done.http_status)
    }

    /// A failed run's transition: DEAD, a retry after the backoff, or a snooze (with the next
    /// run's payload, if the handler gave one).
    fn failed(&self, job: &JobRow, owner: &str, ran: (i64, i64), e: &JobError, next_payload: Option<String>) -> Finished {
        let now = ran.1;
        match decide_failure(job.attempts, job.max_attempts, job.snoozes, e, self.cfg, (self.random)()) {
            FailureDecision::Dead(why) => {
                let run = job.trace().map(|t| t.run(&job.id, u32::try_from(job.attempts).unwrap_or(u32::MAX), owner));
                (self.log)(&Event::JobDead {
                    job_id: &job.id,
                    job_type: job.job_type.as_deref(),
                    ordering_key: job.ordering_key.as_deref(),
                    attempts: job.attempts,
                    error: &why,
                    trace: run.as_ref(),
                });
                let dead = self.fail(job, owner, ran, Status::Dead, now, &why);
                (dead, Ended::Dead, Some(why), e.http_status())
            }
            FailureDecision::Retry { delay_ms } => {
                let at = now + delay_ms;
                // Queues' delays are whole seconds: rounded up, so the message never comes
                // before its job is due.
                let delay_seconds = crate::bounds::delay_until(now, Some(at));
                let why = e.to_string();
                let fail = self.fail(job, owner, ran, Status::Pending, at, &why);
                (fail, Ended::Retry { delay_seconds }, Some(why), e.http_status())
            }
            FailureDecision::Snooze { delay_seconds } => {
                // Handed back like a job never run: PENDING, its attempt returned.
                let at = now + i64::from(delay_seconds) * 1000;
                let snooze = self.snooze(job, owner, ran, at, next_payload);
                (snooze, Ended::Snooze { delay_seconds }, Some(e.to_string()), e.http_status())
            }
        }
    }

    /// A sealed job whose payload cannot be opened (no `PAYLOAD_KEY`, its key rotated away): not
    /// run and not failed. It waits [`SEAL_WAIT_SECONDS`] without spending an attempt or a snooze,
    /// its key held (a job of its key must not overtake it), and says why in its history and the
    /// log: fixing `PAYLOAD_KEY` lets it run. Spending attempts on it would end it DEAD, and under
    /// `ON_DEAD = "skip"` its key would move past a job that was never run.
    fn wait_for_key(&self, job: &JobRow, why: Unopened) -> Ran {
        let now = self.clock.now_ms();
        // Not a run: no handler was called.
        let started_at = now;
        let error = format!("{why}; waiting for PAYLOAD_KEY to open it, its key held, no attempt spent");
        self.outage(format!("job {} not run: {error}", job.id));
        let run = Run {
            job_id: job.id.clone(),
            attempt: job.attempts,
            started_at,
            finished_at: now,
            outcome: RunOutcome::Snooze,
            error: Some(error),
            http_status: None,
            actor: self.owner.clone(),
        };
        let delay_seconds = SEAL_WAIT_SECONDS;
        let defer = self.defer(job, now, now + i64::from(delay_seconds) * 1000);
        Ran { record: Record { transition: defer, run: Some(run) }, end: RunEnd::Snooze { delay_seconds } }
    }

    /// A snooze's replacement payload as it is stored (sealed when the job is), or the error that
    /// makes the run a retryable failure instead: a replacement must keep the job's `type` and
    /// fit [`MAX_PAYLOAD_BYTES`], and a sealed job's must be sealed.
    async fn next_payload(&self, job: &JobRow, sealed: bool, e: JobError) -> (JobError, Option<String>) {
        let JobError::Snooze { payload: Some(next), http_status, .. } = &e else { return (e, None) };
        let refuse = |why: String| JobError::Retryable {
            reason: format!("the snooze's replacement payload is refused: {why}"),
            retry_after: None,
            http_status: *http_status,
        };
        let next_type = next.get("type").and_then(Value::as_str);
        if next_type != job.job_type.as_deref() {
            return (refuse(format!("its type {next_type:?} is not the job's {:?}", job.job_type)), None);
        }
        let text = next.to_string();
        if text.len() > MAX_PAYLOAD_BYTES {
            return (refuse(format!("{} bytes as JSON, over {MAX_PAYLOAD_BYTES}", text.len())), None);
        }
        if !sealed {
            return (e, Some(text));
        }
        let Some(sealer) = self.sealer else {
            return (refuse("it cannot be sealed: PAYLOAD_KEY is not set".into()), None);
        };
        match sealer.seal(&job.id, &text).await {
            Ok(kept) => (e, Some(kept)),
            Err(err) => (refuse(format!("it cannot be sealed: {err}")), None),
        }
    }

    /// The job's payload as JSON text: a sealed one opened with `PAYLOAD_KEY`. `None`: the row has
    /// none. Why a sealed payload cannot be opened (no `PAYLOAD_KEY`, a key rotated away) is the
    /// error: the job waits for the key ([`Self::wait_for_key`]).
    async fn payload_of(&self, job: &JobRow) -> Result<Option<String>, Unopened> {
        let Some(text) = job.payload.as_deref() else { return Ok(None) };
        if !is_sealed(text) {
            return Ok(Some(text.to_string()));
        }
        let Some(sealer) = self.sealer else { return Err(Unopened::NoKey) };
        sealer.open(&job.id, text).await.map(Some).map_err(Unopened::Open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_jobs_error_keeps_its_kind_and_status_not_its_text() {
        let e = JobError::Retryable {
            reason: "https://h.test/hook/s3cret?token=t: HTTP 503".into(),
            retry_after: Some(9),
            http_status: Some(503),
        };
        assert_eq!(
            withheld(e),
            JobError::Retryable {
                reason: "HTTP 503 (details withheld: the job is sealed)".into(),
                retry_after: Some(9),
                http_status: Some(503)
            }
        );
        let e = withheld(JobError::permanent("service APP: private key -----BEGIN"));
        assert_eq!(e.to_string(), "the handler failed (details withheld: the job is sealed)");
        let e = withheld(JobError::snooze_with(5, "said the key", serde_json::json!({"type": "t"})));
        assert!(matches!(&e, JobError::Snooze { seconds: 5, payload: Some(_), .. }), "{e:?}");
        assert!(!e.to_string().contains("key"), "{e}");
    }
}
