//! [`App`]: orderly on Workers. A worker's `#[event(queue)]`, `#[event(fetch)]` and
//! `#[event(scheduled)]` functions delegate to it; it reads the configuration, opens the bindings
//! (`ORDERING_KV`, `DB`, `JOBS`, `JOBS_URGENT`, the service handlers'), and runs the consumer, the
//! HTTP API and maintenance with the app's handlers. Wasm only; everything it calls is tested
//! natively. A library holds no `#[event]` function: every worker depending on it would export it.

use serde_json::{json, Value};
use worker::{
    console_error, console_log, console_warn, Context, Env, MessageBatch, MessageExt, QueueRetryOptionsBuilder,
    Request, Response, ScheduleContext, ScheduledEvent,
};

use crate::api::{Api, ApiRequest, ApiResponse, Submitted, MAX_BODY_BYTES};
use crate::app::{Bound, Cx, Handlers, Job};
use crate::config::LedgerBackend;
use crate::consumer::{Consumer, Incoming, Outcome, INFRA_RETRY_DELAY_SECONDS};
use crate::edge::{self, SystemClock, WorkerFetch, WorkerKv};
use crate::enqueue::{Enqueue, EnqueueError, Producer};
use crate::error::InfraError;
use crate::handlers::{Done, JobError, Services};
use crate::ledger::durable::{edge_shards, EdgeSql};
use crate::ledger::Ledger;
use crate::log::Event;
use crate::observe::{Attr, Attribute, Observer};
use crate::seal::Sealer;

/// Prints a structured log line at its level.
fn log(event: &Event<'_>) {
    match event.level() {
        "info" => console_log!("{}", event.json()),
        "warn" => console_warn!("{}", event.json()),
        _ => console_error!("{}", event.json()),
    }
}

/// orderly in a worker: its job types and the three entry points.
///
/// ```ignore
/// use orderly::{App, Cx, Done, Job, JobError};
/// use worker::{event, Context, Env, MessageBatch, Request, Response, ScheduleContext, ScheduledEvent};
///
/// #[derive(serde::Deserialize)]
/// struct Resize { key: String, width: u32 }
///
/// async fn resize(job: Job<Resize>, cx: Cx<Env>) -> Result<Done, JobError> {
///     let bucket = cx.env().bucket("IMAGES").map_err(|e| JobError::permanent(e.to_string()))?;
///     // ...
///     Ok(Done::default())
/// }
///
/// fn app() -> App { App::builder().handler("resize", resize).webhook().build() }
///
/// #[event(queue)]
/// async fn queue(batch: MessageBatch<serde_json::Value>, env: Env, ctx: Context) -> worker::Result<()> {
///     app().queue(batch, env, ctx).await
/// }
/// #[event(fetch)]
/// async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> { app().fetch(req, env, ctx).await }
/// #[event(scheduled)]
/// async fn scheduled(event: ScheduledEvent, env: Env, ctx: ScheduleContext) { app().scheduled(event, env, ctx).await }
/// ```
pub struct App {
    handlers: Handlers<Env>,
}

/// Builds an [`App`]: its job types.
pub struct AppBuilder {
    handlers: Handlers<Env>,
}

impl AppBuilder {
    /// Adds job type `job_type`, run by `f` (see [`Handlers::handler`]).
    pub fn handler<T, F, Fut>(self, job_type: &str, f: F) -> Self
    where
        T: serde::de::DeserializeOwned + 'static,
        F: Fn(Job<T>, Cx<Env>) -> Fut + 'static,
        Fut: std::future::Future<Output = Result<Done, JobError>> + 'static,
    {
        AppBuilder { handlers: self.handlers.handler(job_type, f) }
    }

    /// Adds the built-in `webhook` job type.
    pub fn webhook(self) -> Self {
        AppBuilder { handlers: self.handlers.webhook() }
    }

    /// The app.
    pub fn build(self) -> App {
        App { handlers: self.handlers }
    }
}

/// The ledger `LEDGER` names: `DB`, or `LEDGER_SHARDS` objects of `LEDGER_OBJECT`.
fn ledger_shards(env: &Env, backend: LedgerBackend) -> Result<Vec<EdgeSql>, StartError> {
    let objects = match backend {
        LedgerBackend::D1 => None,
        LedgerBackend::Objects(n) => Some(n),
    };
    edge_shards(env, objects).map_err(|e| StartError::Binding(e.to_string()))
}

/// What every entry point opens, the same way and with the same checks ([`App::start`]).
struct Started {
    cfg: crate::config::Config,
    /// The ledger's shards (one for D1).
    shards: Vec<EdgeSql>,
    queue: crate::producer::Lanes<edge::WorkerQueue>,
    sealer: Option<edge::WebCryptoSealer>,
    /// (type, binding) pairs of `SERVICE_HANDLERS` whose binding the worker lacks.
    missing: Vec<(String, String)>,
}

/// Why an entry point cannot start.
#[derive(Debug, thiserror::Error)]
enum StartError {
    /// A var, the job types or `PAYLOAD_KEY` is wrong.
    #[error("configuration error: {0}")]
    Config(crate::config::ConfigError),
    /// A binding the worker needs is missing.
    #[error("binding missing: {0}")]
    Binding(String),
    /// The ledger is being moved (`LEDGER_MOVING`): nothing changes in D1 until the switch
    /// (design §19.7), so the consumer's messages wait in the queue.
    #[error("the ledger is being moved (LEDGER_MOVING = \"true\"); pause delivery during a move (docs/shards.md)")]
    Moving,
}

impl Started {
    /// The ledger over the started shards.
    fn ledger(&self) -> Ledger<&EdgeSql> {
        Ledger::sharded(self.shards.iter().collect())
    }
}

impl App {
    /// Opens the configuration and the bindings every entry point uses, with every check: the
    /// vars, the app's job types, `PAYLOAD_KEY`, then `DB` and the queues. A `SERVICE_HANDLERS`
    /// binding the worker lacks is not an error here: each entry point says what it means.
    fn start(&self, env: &Env) -> Result<Started, StartError> {
        let cfg = edge::config(env).map_err(StartError::Config)?;
        if let Some(problem) = self.handlers.problem(&cfg) {
            return Err(StartError::Config(crate::config::ConfigError {
                var: "the worker's job types",
                value: problem,
                reason: "a job type must have one handler".into(),
            }));
        }
        let sealer = edge::WebCryptoSealer::from_env(env).map_err(StartError::Config)?;
        let shards = ledger_shards(env, cfg.ledger)?;
        let queue = edge::lanes(env, &cfg).map_err(|e| StartError::Binding(e.to_string()))?;
        let missing = missing_bindings(env, &cfg);
        Ok(Started { cfg, shards, queue, sealer, missing })
    }

    /// The bindings alone, under the default configuration: what `fetch` answers a configuration
    /// error with.
    fn start_unconfigured(&self, env: &Env) -> Result<Started, StartError> {
        let cfg = crate::config::Config::default();
        // Never reached, but there must be one: D1's, or else one shard's.
        let shards =
            ledger_shards(env, LedgerBackend::D1).or_else(|_| ledger_shards(env, LedgerBackend::Objects(1)))?;
        let queue = edge::lanes(env, &cfg).map_err(|e| StartError::Binding(e.to_string()))?;
        Ok(Started { cfg, shards, queue, sealer: None, missing: Vec::new() })
    }

    /// An app with no job types yet.
    pub fn builder() -> AppBuilder {
        console_error_panic_hook::set_once();
        AppBuilder { handlers: Handlers::new() }
    }

    /// Enqueues a job from this worker (a `fetch` handler, another job's handler), with
    /// `POST /jobs`' options and limits, checked against this app's job types: recorded in the
    /// ledger and sent to the queue, as the API would.
    pub async fn enqueue(
        &self,
        env: &Env,
        payload: impl serde::Serialize,
        options: &Enqueue,
    ) -> Result<Submitted, EnqueueError> {
        let mut jobs = self.enqueue_all(env, vec![(payload, options.clone())]).await?;
        jobs.pop().ok_or_else(|| EnqueueError::Unavailable(InfraError::new("D1", "enqueue returned no job")))
    }

    /// Enqueues jobs in order, all or none (at most 500).
    pub async fn enqueue_all<P: serde::Serialize>(
        &self,
        env: &Env,
        jobs: Vec<(P, Enqueue)>,
    ) -> Result<Vec<Submitted>, EnqueueError> {
        self.producing(env, async move |p| p.enqueue_all(jobs).await).await
    }

    /// Enqueues a batch (design §25): `jobs`, and `then`, a job that runs once after every one of
    /// them finished, given their ids, statuses and results. All or none.
    pub async fn enqueue_batch<P: serde::Serialize, T: serde::Serialize>(
        &self,
        env: &Env,
        jobs: Vec<(P, Enqueue)>,
        then: (T, Enqueue),
    ) -> Result<(Vec<Submitted>, Submitted), EnqueueError> {
        self.producing(env, async move |p| p.enqueue_batch(jobs, then).await).await
    }

    /// Runs `f` with this worker's producer over its bindings (what every enqueue shares).
    async fn producing<R>(
        &self,
        env: &Env,
        f: impl AsyncFnOnce(
            &Producer<'_, &EdgeSql, crate::producer::Lanes<edge::WorkerQueue>, SystemClock>,
        ) -> Result<R, EnqueueError>,
    ) -> Result<R, EnqueueError> {
        let s = self.start(env).map_err(|e| EnqueueError::Unavailable(InfraError::new("config", e.to_string())))?;
        let sealer = s.sealer.as_ref().map(|s| s as &dyn Sealer);
        let types = Bound { types: &self.handlers, missing: s.missing.clone() };
        let ledger = s.ledger();
        let producer = Producer::new(&ledger, &s.queue, &SystemClock, &s.cfg, &types, &edge::random_id, sealer);
        f(&producer).await
    }

    /// The queue consumer. Settles every message itself and never returns `Err`: an `Err` would
    /// make the runtime retry the whole batch, acked messages included.
    pub async fn queue(&self, batch: MessageBatch<Value>, env: Env, ctx: Context) -> worker::Result<()> {
        let started = js_sys::Date::now() as i64;
        let observer = edge::WorkerObserver::new(ctx.as_ref(), &env);
        let span = open(observer.as_ref(), "orderly.queue", &[("orderly.queue", Attr::Text(batch.queue()))]);
        crate::panics::install();
        let msgs: Vec<worker::RawMessage> = batch.raw_iter().collect();
        let defer_all = |why: &str| {
            log(&Event::ConfigError { error: format!("deferring {} messages: {why}", msgs.len()) });
            let opts = QueueRetryOptionsBuilder::new().with_delay_seconds(INFRA_RETRY_DELAY_SECONDS).build();
            for m in &msgs {
                m.retry_with_options(&opts);
            }
        };
        let (s, kv, services) = match self.start_consumer(&env) {
            Ok(opened) => opened,
            Err(why) => {
                defer_all(&why.to_string());
                return Ok(());
            }
        };
        let Some(role) = crate::consumer::role_of(&s.cfg, &batch.queue()) else {
            defer_all(&format!(
                "queue {:?} is neither JOBS_QUEUE ({:?}) nor DEAD_LETTER_QUEUE ({:?})",
                batch.queue(),
                s.cfg.jobs_queue,
                s.cfg.dead_letter_queue
            ));
            return Ok(());
        };
        let incoming: Vec<Incoming> = msgs
            .iter()
            .map(|m| Incoming {
                id: m.id(),
                timestamp_ms: m.timestamp().as_millis() as i64,
                body: edge::body_json(m.body()),
            })
            .collect();
        let runner = self.handlers.runner(env.clone(), &s.cfg, services);
        let owner = format!("inv-{}", edge::random_id());
        // Live while it runs: a panic in this instance ends this invocation's runs too.
        let _live = crate::panics::Live::new(&owner);
        let Some(first) = s.shards.first() else {
            defer_all("the ledger has no shard");
            return Ok(());
        };
        let sleep = |ms: i64| -> futures::future::LocalBoxFuture<'_, ()> {
            Box::pin(worker::Delay::from(std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
        };
        let consumer = Consumer::new(&s.cfg, &kv, first, &runner, &SystemClock, &s.queue, owner.clone())
            .with_ledger(s.ledger())
            .with_random(&edge::random)
            .with_sleep(&sleep)
            .with_log(&log)
            .with_sealer(s.sealer.as_ref().map(|s| s as &dyn Sealer))
            .with_observer(observer.as_ref().map(|o| o as &dyn Observer));
        let panicked = crate::panics::take();
        if !panicked.is_empty() {
            consumer.record_panics(&panicked).await;
        }
        let outcomes = consumer.process(role, &incoming).await;
        let counts = settle(&batch.queue(), &s.cfg, &msgs, outcomes, started);
        if let Some(span) = span {
            span.end(&counts);
        }
        Ok(())
    }

    /// What the consumer needs besides [`App::start`]'s: the lock's KV, every service handler's
    /// binding, and the signing keys. `Err`: why the batch waits.
    fn start_consumer(&self, env: &Env) -> Result<(Started, WorkerKv, Services<WorkerFetch, SystemClock>), StartError> {
        let s = self.start(env)?;
        if s.cfg.ledger_moving {
            return Err(StartError::Moving);
        }
        let kv = env.kv(edge::KV_BINDING).map_err(|e| StartError::Binding(e.to_string()))?;
        if let Some((ty, binding)) = s.missing.first() {
            return Err(StartError::Config(crate::config::ConfigError {
                var: "SERVICE_HANDLERS",
                value: format!("{ty}={binding}"),
                reason: "names a service binding the worker does not have".into(),
            }));
        }
        let secrets = (edge::secret(env, "WEBHOOK_SECRET"), edge::secret(env, "HANDLER_SECRET"));
        let (webhook_key, handler_key) =
            crate::handlers::webhook::signing_keys(secrets.0.as_deref(), secrets.1.as_deref())
                .map_err(StartError::Config)?;
        let services = Services {
            http: WorkerFetch { env: env.clone() },
            clock: SystemClock,
            webhook_key,
            handler_key,
            allow_private_targets: s.cfg.allow_private_targets,
            retry_after_cap_seconds: s.cfg.backoff_cap_seconds,
            http_timeout_ms: s.cfg.webhook_timeout_seconds * 1000,
            service_handlers: s.cfg.service_handlers.clone(),
        };
        Ok((s, WorkerKv(kv), services))
    }

    /// The HTTP API and dashboard.
    pub async fn fetch(&self, req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
        let observer = edge::WorkerObserver::new(ctx.as_ref(), &env);
        let attrs = [("http.request.method", Attr::Text(req.method().to_string()))];
        let span = open(observer.as_ref(), "orderly.api", &attrs);
        let answer = self.answer(req, env).await;
        if let (Some(span), Ok(r)) = (span, &answer) {
            span.end(&[("http.response.status_code", Attr::Number(f64::from(r.status_code())))]);
        }
        answer
    }

    /// What [`App::fetch`] answers.
    async fn answer(&self, mut req: Request, env: Env) -> worker::Result<Response> {
        let url = req.url()?;
        let mut api_req = ApiRequest {
            method: req.method().to_string(),
            path: url.path().to_string(),
            query: url.query().unwrap_or_default().to_string(),
            authorization: req.headers().get("authorization").ok().flatten(),
            body: Vec::new(),
            trace: crate::trace::TraceContext::from_headers(
                req.headers().get("traceparent").ok().flatten().as_deref(),
                req.headers().get("tracestate").ok().flatten().as_deref(),
            ),
        };
        let admin_token = edge::secret(&env, "ADMIN_TOKEN");
        let producer_token = edge::secret(&env, "PRODUCER_TOKEN");
        let metrics_token = edge::secret(&env, "METRICS_TOKEN");
        let (s, cfg_error) = match self.start(&env) {
            Ok(s) => (s, None),
            // (`start` itself never refuses a move: only the consumer's start does.)
            Err(e @ (StartError::Binding(_) | StartError::Moving)) => {
                return respond(ApiResponse::json_error(500, serde_json::json!({ "error": e.to_string() })));
            }
            // Every route answers with the configuration error (the shell and the document
            // still load); the ledger and the queue are never reached, so the defaults do.
            Err(StartError::Config(e)) => match self.start_unconfigured(&env) {
                Ok(s) => (s, Some(e)),
                Err(e) => return respond(ApiResponse::json_error(500, serde_json::json!({ "error": e.to_string() }))),
            },
        };
        let types = Bound { types: &self.handlers, missing: s.missing.clone() };
        let ledger = s.ledger();
        let api = Api {
            ledger: &ledger,
            queue: &s.queue,
            clock: &SystemClock,
            cfg: cfg_error.as_ref().map_or(Ok(&s.cfg), Err),
            admin_token: admin_token.as_deref(),
            producer_token: producer_token.as_deref(),
            metrics_token: metrics_token.as_deref(),
            new_id: &edge::random_id,
            types: &types,
            sealer: s.sealer.as_ref().map(|s| s as &dyn Sealer),
        };
        // The token is checked before a byte of the body is read.
        if let Some(answer) = api.gate(&api_req.method, &api_req.path, api_req.authorization.as_deref()) {
            return respond(answer);
        }
        if matches!(api_req.method.as_str(), "POST" | "PUT") {
            match edge::read_capped(&mut req, MAX_BODY_BYTES).await {
                Ok(body) => api_req.body = body,
                Err(answer) => return respond(answer),
            }
        }
        // The ledger's administration needs the worker's bindings: answered here, routed and
        // authorized by the API like every route (the gate lets only ADMIN_TOKEN through).
        match crate::api::Endpoint::parse(&api_req.method, &api_req.path) {
            Ok((crate::api::Endpoint::Migrate { apply }, _)) if cfg_error.is_none() => {
                respond(migrate_ledger(&s, apply).await)
            }
            Ok((crate::api::Endpoint::MoveLedger { copy }, _)) if cfg_error.is_none() => {
                respond(move_ledger(&s, &env, &api_req, copy).await)
            }
            _ => respond(api.route(&api_req).await),
        }
    }

    /// The cron's maintenance.
    pub async fn scheduled(&self, event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
        // workers-rs's schedule context hides the runtime's object: a cron run's span opens
        // where the JavaScript wrapper runs it (client/worker.js).
        let s = match self.start(&env) {
            Ok(s) => s,
            Err(e) => return log(&Event::ConfigError { error: format!("maintenance skipped: {e}") }),
        };
        if s.cfg.ledger_moving {
            // The purge and the sweeps would delete rows a move has already copied (design §19.7).
            let error = "maintenance skipped: the ledger is being moved (LEDGER_MOVING = \"true\")".to_string();
            return log(&Event::ConfigError { error });
        }
        let ledger = s.ledger();
        let r = crate::maintenance::run(&ledger, &s.queue, &SystemClock, &s.cfg).await;
        // Periodic jobs (design §23): each due period's job, through the API's own submission, at
        // the time this run was scheduled for (the start of its minute), not the moment it started.
        let sealer = s.sealer.as_ref().map(|s| s as &dyn Sealer);
        let types = Bound { types: &self.handlers, missing: s.missing.clone() };
        let producer = Producer::new(&ledger, &s.queue, &SystemClock, &s.cfg, &types, &edge::random_id, sealer);
        let t = crate::periodic::run(&s.cfg.schedules, &ledger, &producer, event.schedule() as i64).await;
        let mut report = serde_json::to_value(&r).unwrap_or_default();
        report["schedules"] = serde_json::to_value(&t).unwrap_or_default();
        log(&Event::Maintenance { report, failed: !r.errors.is_empty() || !t.errors.is_empty() });
    }
}

/// `POST /admin/migrate` applies the migrations a D1 ledger lacks (`GET` says where it stands;
/// design §21). Durable Object shards migrate themselves on their first request: nothing to do.
async fn migrate_ledger(s: &Started, apply: bool) -> ApiResponse {
    use crate::ledger::schema::{Standing, SCHEMA};
    let Some(EdgeSql::D1(d1)) = s.shards.first() else {
        return ApiResponse::json(
            200,
            json!({ "ledger": "do", "schema": SCHEMA, "applied": [],
                    "note": "each ledger shard applies the migrations it lacks on its first request" }),
        );
    };
    let answer = if apply {
        d1.migrate().await.map(|m| json!({ "ledger": "d1", "schema": m.schema, "applied": m.applied }))
    } else {
        d1.applied().await.map(|applied| {
            let standing = Standing::of(&applied);
            json!({ "ledger": "d1", "schema": SCHEMA, "current": standing == Standing::Current,
                    "problem": standing.refusal(&d1.1), "migrations": applied })
        })
    };
    match answer {
        Ok(body) => ApiResponse::json(200, body),
        Err(e) => ApiResponse::error(503, e.to_string()),
    }
}

/// `POST /ledger/move` `{"shards": N, "after": id, "limit": n}` copies the next page of the D1
/// ledger's jobs to the N shards of `LEDGER_OBJECT`; `GET /ledger/move?shards=N` compares the
/// counts and the tables not a job's own, `GET /ledger/move?shards=N&after=id&limit=n` a page of
/// jobs with their own rows (design §19.7, `scripts/move-ledger.mjs`). Only while `LEDGER` is still "d1", with
/// delivery paused and `LEDGER_MOVING = "true"` (every other write refused meanwhile).
async fn move_ledger(s: &Started, env: &Env, req: &ApiRequest, copy: bool) -> ApiResponse {
    #[derive(serde::Deserialize)]
    struct Page {
        shards: u32,
        #[serde(default)]
        after: String,
        #[serde(default)]
        limit: Option<u32>,
    }
    if s.cfg.ledger != LedgerBackend::D1 {
        return ApiResponse::error(409, "LEDGER is already \"do\": a ledger is moved while it is still on D1");
    }
    // A check with `after` compares that page of jobs; without, the counts and the other tables.
    let mut paged = false;
    let page = if copy {
        match serde_json::from_slice::<Page>(&req.body) {
            Ok(page) => page,
            Err(e) => return ApiResponse::error(400, format!("bad move request: {e}")),
        }
    } else {
        let query: Vec<(String, String)> = url::form_urlencoded::parse(req.query.as_bytes()).into_owned().collect();
        let get = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        paged = get("after").is_some();
        match get("shards") {
            Some(v) => Page {
                shards: v.parse().unwrap_or(0),
                after: get("after").unwrap_or_default(),
                limit: get("limit").and_then(|l| l.parse().ok()),
            },
            None => return ApiResponse::error(400, "give ?shards=N"),
        }
    };
    if !(1..=crate::bounds::MAX_SHARDS as u32).contains(&page.shards) {
        return ApiResponse::error(400, "shards must be 1..32, the LEDGER_SHARDS you will set");
    }
    let shards = match edge_shards(env, Some(page.shards)) {
        Ok(shards) => shards,
        Err(e) => return ApiResponse::error(500, e.to_string()),
    };
    let target = Ledger::sharded(shards.iter().collect());
    let limit = page.limit.unwrap_or(100).clamp(1, 200);
    let answer = if copy {
        s.ledger().copy_to(&target, &page.after, limit).await.map(|c| json!(c))
    } else if paged {
        s.ledger().verify_page(&target, &page.after, limit).await.map(|v| json!(v))
    } else {
        s.ledger().verify_copy(&target).await.map(|v| json!(v))
    };
    match answer {
        // Whether writes wait meanwhile (`LEDGER_MOVING`): scripts/move-ledger.mjs stops unless so.
        Ok(mut body) => {
            body["writes_refused"] = json!(s.cfg.ledger_moving);
            ApiResponse::json(200, body)
        }
        Err(e) => ApiResponse::error(503, e.to_string()),
    }
}

/// Applies a batch's outcomes (ack, or retry with a delay) and logs the batch; what its span says
/// at its end.
fn settle(
    queue: &str,
    cfg: &crate::config::Config,
    msgs: &[worker::RawMessage],
    outcomes: Vec<Outcome>,
    started: i64,
) -> Vec<Attribute> {
    let count = |f: fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
    let batch = Event::Batch {
        queue,
        mode: cfg.ordering_mode.as_str(),
        messages: outcomes.len(),
        acked: count(|o| matches!(o, Outcome::Ack)),
        retried: count(|o| matches!(o, Outcome::Retry { .. })),
        deferred: count(|o| matches!(o, Outcome::Defer { .. })),
        duration_ms: js_sys::Date::now() as i64 - started,
    };
    log(&batch);
    let attrs = crate::observe::batch_attributes(&batch);
    for (m, o) in msgs.iter().zip(outcomes) {
        match o {
            Outcome::Ack => m.ack(),
            Outcome::Retry { delay_seconds } | Outcome::Defer { delay_seconds } => {
                m.retry_with_options(&QueueRetryOptionsBuilder::new().with_delay_seconds(delay_seconds).build());
            }
        }
    }
    attrs
}

/// A span around orderly's own work in an event (design §27.5), when tracing is on.
fn open<'o>(
    observer: Option<&'o edge::WorkerObserver>,
    name: &str,
    attrs: &[Attribute],
) -> Option<Box<dyn crate::observe::Span + 'o>> {
    observer?.open(name, attrs)
}

/// The `SERVICE_HANDLERS` entries (type, binding) whose service binding the worker lacks.
fn missing_bindings(env: &Env, cfg: &crate::config::Config) -> Vec<(String, String)> {
    cfg.service_handlers.iter().filter(|(_, b)| crate::edge::handler_binding(env, b).is_err()).cloned().collect()
}

fn respond(r: ApiResponse) -> worker::Result<Response> {
    let resp = Response::ok(r.body)?.with_status(r.status);
    let headers = resp.headers().clone();
    headers.set("content-type", r.content_type)?;
    headers.set("cache-control", "no-store")?;
    headers.set("x-content-type-options", "nosniff")?;
    for (name, value) in &r.headers {
        headers.set(name, value)?;
    }
    Ok(resp.with_headers(headers))
}
