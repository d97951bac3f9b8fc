//! Your own job types: typed handlers registered by name, beside the built-in `webhook` and the
//! service handlers of `SERVICE_HANDLERS` (design §13).
//!
//! A handler is an `async fn(Job<T>, Cx<E>) -> Result<Done, JobError>` where `T` is the payload
//! (any `serde::Deserialize`) and [`Cx`] says which job runs (id, attempt, ordering key, priority)
//! and carries the worker's environment (`worker::Env` on Workers, your bindings: R2, D1, AI,
//! secrets). [`Handlers`] routes a payload's `type` to its handler, checks payloads at submission
//! (a payload that does not deserialize is refused with a 400, or DEAD naming the field), and is
//! the consumer's [`Runner`]. Generic over the environment, so handlers and routing are tested
//! natively. The Workers entry points that use it are `App`'s (`entry.rs`, wasm only).

use std::collections::BTreeMap;
use std::future::Future;
use std::marker::PhantomData;
use std::ops::Deref;
use std::rc::Rc;

use futures::future::LocalBoxFuture;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::clock::Clock;
use crate::config::Config;
use crate::handlers::webhook::Webhook;
use crate::handlers::{self, service, Cancellation, Done, HttpClient, JobContext, JobError, JobHandler, Runner, Services};

/// A job's payload, typed: what the handler is given. Derefs to the payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Job<T> {
    /// The payload, read from the ledger's JSON (its `type` field included when `T` has one).
    pub payload: T,
}

impl<T> Deref for Job<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.payload
    }
}

impl<T> Job<T> {
    /// The payload.
    pub fn into_inner(self) -> T {
        self.payload
    }
}

/// Which job runs, and the worker's environment.
#[derive(Debug, Clone)]
pub struct Cx<E> {
    /// The job's id (stable across attempts: an idempotency key for what the handler calls).
    pub id: String,
    /// This run's attempt, from 1 (a snooze spends none).
    pub attempt: u32,
    /// The job's ordering key, if any.
    pub ordering_key: Option<String>,
    /// 0 most urgent .. 9.
    pub priority: u8,
    env: E,
    cancel: Cancellation,
}

impl<E> Cx<E> {
    /// The context of a run of job `id`.
    pub(crate) fn new(id: String, attempt: u32, ordering_key: Option<String>, priority: u8, env: E) -> Self {
        Cx { id, attempt, ordering_key, priority, env, cancel: Cancellation::default() }
    }

    /// This context, cancelled by `cancel` (design §22.1).
    pub(crate) fn cancelled_by(self, cancel: Cancellation) -> Self {
        Cx { cancel, ..self }
    }

    /// Whether an operator cancelled the running job (design §22.1): stop, and return what you
    /// have; whatever you return, the job ends DEAD "cancelled" (a result is kept).
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Completes once an operator cancels the running job (never, if nobody does): select on it
    /// beside long work to stop early. A handler that has not ended
    /// [`crate::consumer::CANCEL_GRACE_MS`] after the cancel reached it is dropped at its next
    /// await.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    /// The worker's environment: on Workers, `worker::Env` with your bindings.
    pub fn env(&self) -> &E {
        &self.env
    }
}

/// One job type's handler, its payload type erased. Implemented for every
/// `async fn(Job<T>, Cx<E>) -> Result<Done, JobError>` by [`Handlers::handler`].
pub trait Handler<E> {
    /// Whether `payload` is one this handler can run (it deserializes).
    fn check(&self, payload: &Value) -> Result<(), JobError>;
    /// Runs one job.
    fn run(&self, payload: Value, cx: Cx<E>) -> LocalBoxFuture<'static, Result<Done, JobError>>;
}

struct Typed<T, F> {
    job_type: String,
    f: F,
    payload: PhantomData<fn() -> T>,
}

impl<T, F> Typed<T, F>
where
    T: DeserializeOwned,
{
    /// The typed payload, or a permanent error naming the field that does not fit. Read from the
    /// JSON text, so numbers keep their exact form and errors their plain wording.
    fn read(&self, payload: Value) -> Result<T, JobError> {
        let text = payload.to_string();
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(&text)).map_err(|e| {
            let field = e.path().to_string();
            let why = e.into_inner().to_string();
            let why = why.split(" at line ").next().unwrap_or(&why).to_string();
            let at = if field == "." { String::new() } else { format!(" at {field}") };
            JobError::permanent(format!("payload is not a {:?} job{at}: {why}", self.job_type))
        })
    }
}

impl<E, T, F, Fut> Handler<E> for Typed<T, F>
where
    T: DeserializeOwned + 'static,
    F: Fn(Job<T>, Cx<E>) -> Fut,
    Fut: Future<Output = Result<Done, JobError>> + 'static,
{
    fn check(&self, payload: &Value) -> Result<(), JobError> {
        self.read(payload.clone()).map(|_| ())
    }
    fn run(&self, payload: Value, cx: Cx<E>) -> LocalBoxFuture<'static, Result<Done, JobError>> {
        match self.read(payload) {
            Ok(payload) => Box::pin((self.f)(Job { payload }, cx)),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}

/// Says which job types exist and whether a payload fits one (what `POST /jobs` checks).
pub trait JobTypes {
    /// `Ok` when a handler exists for the payload's `type` and accepts the payload.
    fn check(&self, payload: &Value, cfg: &Config) -> Result<(), JobError>;
}

/// A worker's job types as submissions are checked against them: a type whose `SERVICE_HANDLERS`
/// binding the worker lacks is refused with a configuration error naming it, since its jobs could
/// never run (the consumer defers every batch while a binding is missing).
pub struct Bound<'a> {
    /// The worker's types.
    pub types: &'a dyn JobTypes,
    /// (type, binding) pairs of `SERVICE_HANDLERS` whose binding the worker lacks.
    pub missing: Vec<(String, String)>,
}

impl JobTypes for Bound<'_> {
    fn check(&self, payload: &Value, cfg: &Config) -> Result<(), JobError> {
        let t = payload.get("type").and_then(Value::as_str);
        if let Some((ty, binding)) = self.missing.iter().find(|(ty, _)| Some(ty.as_str()) == t) {
            return Err(JobError::permanent(format!(
                "configuration error: SERVICE_HANDLERS names binding {binding:?} for type {ty:?}, \
                 but the worker has no such service binding"
            )));
        }
        self.types.check(payload, cfg)
    }
}

#[cfg(any(test, feature = "testing"))]
/// The deployable worker's job types without handlers of its own: `webhook` and the service
/// handlers of `SERVICE_HANDLERS`.
pub struct BuiltIn;

#[cfg(any(test, feature = "testing"))]
impl JobTypes for BuiltIn {
    fn check(&self, payload: &Value, cfg: &Config) -> Result<(), JobError> {
        handlers::check(payload, cfg)
    }
}

/// Every job type of an app: its own handlers by name, the built-in `webhook` when enabled, and
/// the service handlers `SERVICE_HANDLERS` names (configuration, read per invocation).
pub struct Handlers<E> {
    own: BTreeMap<String, Rc<dyn Handler<E>>>,
    webhook: bool,
    /// Why this set of handlers cannot be used (a type registered twice): a configuration error.
    problem: Option<String>,
}

impl<E: 'static> Default for Handlers<E> {
    fn default() -> Self {
        Handlers { own: BTreeMap::new(), webhook: false, problem: None }
    }
}

impl<E: 'static> Handlers<E> {
    /// No job types yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds job type `job_type`, run by `f`. Registering a type twice is a configuration error
    /// (reported when the worker runs, never a panic).
    pub fn handler<T, F, Fut>(mut self, job_type: &str, f: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(Job<T>, Cx<E>) -> Fut + 'static,
        Fut: Future<Output = Result<Done, JobError>> + 'static,
    {
        let handler = Typed { job_type: job_type.to_string(), f, payload: PhantomData };
        if self.own.insert(job_type.to_string(), Rc::new(handler)).is_some() || job_type == Webhook::TYPE {
            self.problem.get_or_insert(format!("job type {job_type:?} has two handlers"));
        }
        self
    }

    /// Adds the built-in `webhook` job type (design §7).
    pub fn webhook(mut self) -> Self {
        self.webhook = true;
        self
    }

    /// Why these handlers cannot run with `cfg` (a type with two handlers, one of them a
    /// service handler of `SERVICE_HANDLERS`), if so.
    pub fn problem(&self, cfg: &Config) -> Option<String> {
        if let Some(p) = &self.problem {
            return Some(p.clone());
        }
        let both =
            cfg.service_handlers.iter().find(|(t, _)| self.own.contains_key(t) || (self.webhook && t == "webhook"));
        both.map(|(t, b)| format!("job type {t:?} has a handler in the worker and in SERVICE_HANDLERS ({b})"))
    }

    /// The handler of your own job type `job_type`, if there is one.
    pub(crate) fn own(&self, job_type: &str) -> Option<&Rc<dyn Handler<E>>> {
        self.own.get(job_type)
    }

    /// The job types, in the order errors list them.
    fn names<'a>(&'a self, cfg: &'a Config) -> Vec<&'a str> {
        let webhook = self.webhook.then_some(Webhook::TYPE);
        self.own
            .keys()
            .map(String::as_str)
            .chain(webhook)
            .chain(cfg.service_handlers.iter().map(|(t, _)| t.as_str()))
            .collect()
    }

    fn unknown(&self, job_type: &str, cfg: &Config) -> JobError {
        JobError::permanent(format!("unknown job type {job_type:?} (known: {})", self.names(cfg).join(", ")))
    }

    /// The consumer's [`Runner`] over these handlers, for one invocation.
    pub fn runner<'a, H, C>(&'a self, env: E, cfg: &'a Config, services: Services<H, C>) -> AppRunner<'a, E, H, C> {
        AppRunner { handlers: self, env, cfg, services }
    }
}

impl<E: 'static> JobTypes for Handlers<E> {
    fn check(&self, payload: &Value, cfg: &Config) -> Result<(), JobError> {
        let t = handlers::job_type(payload)?;
        if let Some(h) = self.own.get(t) {
            return h.check(payload);
        }
        if self.webhook && t == Webhook::TYPE {
            return Webhook::check(payload, cfg);
        }
        if cfg.service_handlers.iter().any(|(s, _)| s == t) {
            return Ok(());
        }
        Err(self.unknown(t, cfg))
    }
}

/// Runs jobs through an app's handlers: its own, then `webhook`, then service handlers.
pub struct AppRunner<'a, E, H, C> {
    handlers: &'a Handlers<E>,
    env: E,
    cfg: &'a Config,
    services: Services<H, C>,
}

impl<E, H, C> AppRunner<'_, E, H, C> {
    /// What the built-in handlers use (outbound HTTP, the clock, signing).
    pub fn services(&self) -> &Services<H, C> {
        &self.services
    }
}

impl<E: Clone + 'static, H: HttpClient, C: Clock> Runner for AppRunner<'_, E, H, C> {
    async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
        let t = handlers::job_type(job.payload)?;
        if let Some(h) = self.handlers.own.get(t) {
            let cx = Cx::new(
                job.id.to_string(),
                job.attempt,
                job.ordering_key.map(str::to_string),
                job.priority,
                self.env.clone(),
            )
            .cancelled_by(job.cancel.clone());
            // Noted as running while polled: a panic inside is recorded as this job's failure.
            return crate::panics::Noted::new(job.id, job.attempt, h.run(job.payload.clone(), cx)).await;
        }
        // The built-in handlers stop as soon as a cancel reaches the run: their request is
        // aborted (design §22.1).
        if self.handlers.webhook && t == Webhook::TYPE {
            return job.cancel.or_cancelled(Webhook::run(job, &self.services)).await;
        }
        match self.services.service_handlers.iter().find(|(s, _)| s == t) {
            Some((_, binding)) => job.cancel.or_cancelled(service::run(job, t, binding, &self.services)).await,
            None => Err(self.handlers.unknown(t, self.cfg)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize)]
    struct Resize {
        key: String,
        width: u32,
    }

    async fn resize(job: Job<Resize>, cx: Cx<&'static str>) -> Result<Done, JobError> {
        if job.width == 0 {
            return Err(JobError::snooze(60, "not uploaded yet"));
        }
        Ok(Done {
            result: Some(json!({"key": job.key, "w": job.width, "env": cx.env(), "attempt": cx.attempt})),
            http_status: None,
        })
    }

    fn ctx(payload: &Value) -> JobContext<'_> {
        // Leaked: a test's context lives as long as the test.
        let cancel = Box::leak(Box::new(Cancellation::default()));
        JobContext { id: "j", attempt: 2, payload, ordering_key: Some("k"), priority: 5, timeout_ms: None, cancel, trace: None }
    }

    struct NoHttp;
    impl HttpClient for NoHttp {
        async fn send(&self, _: handlers::HttpRequest, _: u32) -> Result<handlers::HttpResponse, handlers::SendError> {
            Err(handlers::SendError::Network("no network here".into()))
        }
    }

    fn services(service_handlers: Vec<(String, String)>) -> Services<NoHttp, crate::clock::ManualClock> {
        Services {
            http: NoHttp,
            clock: crate::clock::ManualClock::new(0),
            webhook_key: None,
            handler_key: None,
            allow_private_targets: false,
            retry_after_cap_seconds: 60,
            http_timeout_ms: 1_000,
            service_handlers,
        }
    }

    #[test]
    fn a_type_whose_service_binding_is_missing_is_refused_naming_it() {
        let handlers = Handlers::<&'static str>::new().webhook();
        let cfg = Config { service_handlers: vec![("notify".into(), "MISSING".into())], ..Config::default() };
        let bound = Bound { types: &handlers, missing: vec![("notify".into(), "MISSING".into())] };
        let err = bound.check(&json!({"type": "notify"}), &cfg).unwrap_err().to_string();
        assert!(err.contains("configuration error") && err.contains("\"MISSING\""), "{err}");
        assert!(handlers.check(&json!({"type": "notify"}), &cfg).is_ok(), "the type itself is known");
        let webhook = json!({"type": "webhook", "url": "https://x.test/", "body": {}});
        assert!(bound.check(&webhook, &cfg).is_ok(), "other types are accepted");
    }

    #[test]
    fn a_typed_handler_gets_its_payload_and_context() {
        let app = Handlers::new().handler("resize", resize);
        let cfg = Config::default();
        let runner = app.runner("the-env", &cfg, services(vec![]));
        let payload = json!({"type": "resize", "key": "a.png", "width": 64});
        let done = block_on(runner.run(&ctx(&payload))).unwrap();
        assert_eq!(done.result, Some(json!({"key": "a.png", "w": 64, "env": "the-env", "attempt": 2})));
        let zero = json!({"type": "resize", "key": "a.png", "width": 0});
        assert!(matches!(block_on(runner.run(&ctx(&zero))), Err(JobError::Snooze { seconds: 60, .. })));
    }

    #[test]
    fn a_payload_that_does_not_fit_is_refused_naming_the_field() {
        let app = Handlers::new().handler("resize", resize);
        let cfg = Config::default();
        let bad = json!({"type": "resize", "key": "a.png"});
        let err = app.check(&bad, &cfg).unwrap_err();
        assert_eq!(err.to_string(), "payload is not a \"resize\" job: missing field `width`");
        let wrong = json!({"type": "resize", "key": "a.png", "width": "wide"});
        assert_eq!(
            app.check(&wrong, &cfg).unwrap_err().to_string(),
            "payload is not a \"resize\" job at width: invalid type: string \"wide\", expected u32"
        );
        let runner = app.runner("env", &cfg, services(vec![]));
        assert!(matches!(block_on(runner.run(&ctx(&bad))), Err(JobError::Permanent { .. })));
        assert!(app.check(&json!({"type": "resize", "key": "k", "width": 1}), &cfg).is_ok());
    }

    #[test]
    fn types_route_to_their_handler_and_unknown_ones_list_every_type() {
        let app = Handlers::new().handler("resize", resize);
        let cfg = Config { service_handlers: vec![("email".into(), "APP".into())], ..Config::default() };
        assert!(app.check(&json!({"type": "email", "to": 1}), &cfg).is_ok(), "a service handler's type");
        let err = app.check(&json!({"type": "webhook", "url": "https://h.test/"}), &cfg).unwrap_err();
        assert_eq!(err.to_string(), "unknown job type \"webhook\" (known: resize, email)", "webhook is opt-in");
        let with_webhook = Handlers::<&str>::new().webhook();
        assert!(with_webhook.check(&json!({"type": "webhook", "url": "https://h.test/"}), &cfg).is_ok());
        assert!(with_webhook.check(&json!({"type": "webhook", "url": "ftp://h.test/"}), &cfg).is_err());
        let runner = app.runner("env", &cfg, services(cfg.service_handlers.clone()));
        let email = json!({"type": "email"});
        assert!(
            matches!(block_on(runner.run(&ctx(&email))), Err(JobError::Retryable { reason, .. }) if reason.contains("service APP")),
            "routed to the service binding"
        );
    }

    #[test]
    fn a_type_with_two_handlers_is_a_configuration_problem() {
        let twice = Handlers::new().handler("resize", resize).handler("resize", resize);
        assert!(twice.problem(&Config::default()).unwrap().contains("two handlers"));
        let clash = Handlers::new().handler("email", resize);
        let cfg = Config { service_handlers: vec![("email".into(), "APP".into())], ..Config::default() };
        assert!(clash.problem(&cfg).unwrap().contains("SERVICE_HANDLERS"));
        assert_eq!(Handlers::new().handler("resize", resize).problem(&cfg), None);
    }
}
