//! Enqueueing from Rust (design §13a): a worker built on orderly submits jobs with `POST /jobs`'
//! options and limits, without an HTTP round trip: [`Producer::enqueue`] records the jobs in the
//! ledger and sends them, exactly as the API does (it runs the API's own submission).
//!
//! On Workers, `App::enqueue(&env, ...)` and `App::enqueue_all(&env, ...)` run one over the
//! worker's bindings; natively (and in tests) [`Producer`] takes any ledger, queue and clock.

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::api::{Api, Refusal, Submission, Submitted};
use crate::app::JobTypes;
use crate::clock::Clock;
use crate::config::Config;
use crate::error::InfraError;
use crate::ledger::{AfterDead, Ledger, OnDuplicate, Sql};
use crate::producer::QueueSender;
use crate::seal::Sealer;

/// A job's options, as `POST /jobs` takes them; `Default` is none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Enqueue {
    /// Jobs of one key run one at a time, in order.
    pub ordering_key: Option<String>,
    /// While a job with this key is PENDING or RUNNING, another is a duplicate of it.
    pub dedupe_key: Option<String>,
    /// Whose flow-control policy holds the job's start back (a tenant, a remote host; design §20).
    pub limit_key: Option<String>,
    /// Seconds before the job may run (0..86,400: Queues' longest delay).
    pub delay_seconds: u32,
    /// No attempt starts later than this many seconds after submission (later than
    /// `delay_seconds`): one due later is DEAD, "expired" (design §20).
    pub deadline_seconds: Option<u32>,
    /// A run taking longer is stopped and retried (1..300; never past `WEBHOOK_TIMEOUT_SECONDS`).
    pub timeout_seconds: Option<u32>,
    /// Runs before DEAD (1..1000); `MAX_ATTEMPTS` when `None`.
    pub max_attempts: Option<u32>,
    /// 0 most urgent .. 9; 5 when `None`.
    pub priority: Option<u8>,
    /// The job's id (an idempotency key: a job submitted again with its id is a duplicate); a
    /// fresh one when `None`.
    pub id: Option<String>,
    /// Seal the payload and result at rest under `PAYLOAD_KEY` and never show them.
    pub sensitive: bool,
    /// With a dedupe key, what the job does to the open job holding it (design §22.3):
    /// `"keep"` when `None` (a duplicate), `"replace"` or `"cancel"`.
    pub on_duplicate: Option<OnDuplicate>,
    /// With a dedupe key: starts only after this many seconds without a newer submission of the
    /// key, each newer one replacing its payload (design §22.4); no `delay_seconds` then.
    pub debounce_seconds: Option<u32>,
    /// A debounce's cap from the first submission (default 10 × `debounce_seconds`).
    pub debounce_max_seconds: Option<u32>,
    /// The ids of jobs it runs after (design §24): it starts once each is DONE. Each must exist
    /// already, or come earlier in the same `enqueue_all`.
    pub after: Vec<String>,
    /// What it does when one of them ends DEAD: `Dead` when `None` (it ends DEAD too), or `Run`.
    pub after_dead: Option<AfterDead>,
}

impl Enqueue {
    /// With an ordering key.
    pub fn key(ordering_key: impl Into<String>) -> Self {
        Enqueue { ordering_key: Some(ordering_key.into()), ..Enqueue::default() }
    }

    /// These options, run after the jobs `ids` as well (design §24).
    pub fn after<I: Into<String>>(self, ids: impl IntoIterator<Item = I>) -> Self {
        Enqueue { after: ids.into_iter().map(Into::into).collect(), ..self }
    }

    /// These options, under limit key `limit_key` as well.
    pub fn limited(self, limit_key: impl Into<String>) -> Self {
        Enqueue { limit_key: Some(limit_key.into()), ..self }
    }

    /// The `POST /jobs` job object for `payload` with these options.
    pub fn job(&self, payload: Value) -> Value {
        let mut o = Map::new();
        o.insert("payload".into(), payload);
        if let Some(k) = &self.ordering_key {
            o.insert("ordering_key".into(), json!(k));
        }
        if let Some(k) = &self.dedupe_key {
            o.insert("dedupe_key".into(), json!(k));
        }
        if let Some(k) = &self.limit_key {
            o.insert("limit_key".into(), json!(k));
        }
        if self.delay_seconds > 0 {
            o.insert("delay_seconds".into(), json!(self.delay_seconds));
        }
        if let Some(s) = self.deadline_seconds {
            o.insert("deadline_seconds".into(), json!(s));
        }
        if let Some(s) = self.timeout_seconds {
            o.insert("timeout_seconds".into(), json!(s));
        }
        if let Some(n) = self.max_attempts {
            o.insert("max_attempts".into(), json!(n));
        }
        if let Some(p) = self.priority {
            o.insert("priority".into(), json!(p));
        }
        if let Some(id) = &self.id {
            o.insert("id".into(), json!(id));
        }
        if self.sensitive {
            o.insert("sensitive".into(), json!(true));
        }
        if let Some(d) = self.on_duplicate {
            o.insert("on_duplicate".into(), json!(d.as_str()));
        }
        if let Some(s) = self.debounce_seconds {
            o.insert("debounce_seconds".into(), json!(s));
        }
        if let Some(s) = self.debounce_max_seconds {
            o.insert("debounce_max_seconds".into(), json!(s));
        }
        if !self.after.is_empty() {
            o.insert("after".into(), json!(self.after));
        }
        if let Some(d) = self.after_dead {
            o.insert("after_dead".into(), json!(d.as_str()));
        }
        Value::Object(o)
    }
}

/// Why jobs were not enqueued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnqueueError {
    /// A job is invalid or over a limit; nothing was recorded. Do not retry as is.
    #[error("refused: {0}")]
    Refused(Refusal),
    /// A payload could not be turned into JSON; nothing was recorded.
    #[error("payload is not JSON: {0}")]
    Payload(String),
    /// D1 failed; nothing was recorded. Worth retrying.
    #[error("the ledger is unavailable: {0}")]
    Unavailable(InfraError),
}

/// Submits jobs to orderly from Rust, over the ledger and queue ports.
pub struct Producer<'a, S: Sql, Q, C> {
    /// The API whose submission it runs (no token: the caller is the worker itself).
    api: Api<'a, S, Q, C>,
    cfg: &'a Config,
}

impl<'a, S: Sql, Q: QueueSender, C: Clock> Producer<'a, S, Q, C> {
    /// A producer over these ports, checking payloads against `types`, sealing sensitive ones
    /// with `sealer` (`PAYLOAD_KEY`; without it, sensitive jobs are refused).
    pub fn new(
        ledger: &'a Ledger<S>,
        queue: &'a Q,
        clock: &'a C,
        cfg: &'a Config,
        types: &'a dyn JobTypes,
        new_id: &'a dyn Fn() -> String,
        sealer: Option<&'a dyn Sealer>,
    ) -> Self {
        let api =
            Api { ledger, queue, clock, cfg: Ok(cfg), admin_token: None, producer_token: None, metrics_token: None, new_id, types, sealer };
        Producer { api, cfg }
    }

    #[cfg(any(test, feature = "testing"))]
    /// Enqueues one job. A payload that is recorded but could not be sent yet (a queue outage)
    /// is `Ok`: maintenance sends it.
    pub async fn enqueue(&self, payload: impl Serialize, options: &Enqueue) -> Result<Submitted, EnqueueError> {
        let mut jobs = self.enqueue_all(vec![(payload, options.clone())]).await?;
        jobs.pop().ok_or_else(|| EnqueueError::Unavailable(InfraError::new("D1", "enqueue returned no job")))
    }

    /// Enqueues jobs in order, all or none (at most 500: one D1 statement each).
    pub async fn enqueue_all<P: Serialize>(&self, jobs: Vec<(P, Enqueue)>) -> Result<Vec<Submitted>, EnqueueError> {
        let items = jobs
            .into_iter()
            .map(|(p, o)| serde_json::to_value(p).map(|p| o.job(p)).map_err(|e| EnqueueError::Payload(e.to_string())))
            .collect::<Result<Vec<Value>, _>>()?;
        self.submit(items).await
    }

    /// Enqueues a batch (design §25): `jobs` in order and `then`, which runs once after every one of
    /// them finished, given their ids, statuses and results; all or none. The batch's id is
    /// `then`'s.
    pub async fn enqueue_batch<P: Serialize, T: Serialize>(
        &self,
        jobs: Vec<(P, Enqueue)>,
        then: (T, Enqueue),
    ) -> Result<(Vec<Submitted>, Submitted), EnqueueError> {
        let payload = |e: serde_json::Error| EnqueueError::Payload(e.to_string());
        let items = jobs
            .into_iter()
            .map(|(p, o)| serde_json::to_value(p).map(|p| o.job(p)).map_err(payload))
            .collect::<Result<Vec<Value>, _>>()?;
        let then = then.1.job(serde_json::to_value(then.0).map_err(payload)?);
        match self.api.submit_with(self.cfg, items, Some(then)).await.map_err(EnqueueError::Unavailable)? {
            Submission::Accepted(mut jobs) | Submission::Unsent { mut jobs, .. } => {
                let then = jobs.pop().ok_or_else(|| EnqueueError::Unavailable(InfraError::new("D1", "no callback recorded")))?;
                Ok((jobs, then))
            }
            Submission::Refused(r) => Err(EnqueueError::Refused(r)),
        }
    }

    /// Enqueues jobs written as `POST /jobs` takes them (a schedule's template with its period's
    /// id: design §23), in order, all or none.
    pub(crate) async fn submit(&self, items: Vec<Value>) -> Result<Vec<Submitted>, EnqueueError> {
        match self.api.submit_items(self.cfg, items).await.map_err(EnqueueError::Unavailable)? {
            Submission::Accepted(jobs) | Submission::Unsent { jobs, .. } => Ok(jobs),
            Submission::Refused(r) => Err(EnqueueError::Refused(r)),
        }
    }
}
