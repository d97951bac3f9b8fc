//! The thin I/O edge: `worker` bindings behind the core's ports (KV, D1, Queue, fetch, clock).
//!
//! Only compiled for wasm32. No decisions here: every adapter translates, and every failure
//! becomes an [`InfraError`] for the core to handle.

use std::time::Duration;

use futures::future::{select, Either};
use serde_json::Value;
use wasm_bindgen::{JsCast, JsValue};
use worker::{
    AbortController, Delay, Env, Fetch, Headers, KvStore, Method, Queue, QueueContentType, RawMessageBuilder, Request,
    RequestInit, RequestRedirect,
};

use crate::api::ApiResponse;
use crate::clock::Clock;
use crate::config::{Config, ConfigError};
use crate::envelope::{BodyError, MAX_BODY_JSON_BYTES};
use crate::error::InfraError;
use crate::handlers::{HttpClient, HttpRequest, HttpResponse, SendError};
use crate::lock::Kv;
use crate::producer::{OutMessage, QueueSender};

/// Binding names from `wrangler.toml`.
pub const KV_BINDING: &str = "ORDERING_KV";
/// The job queue producer.
pub const QUEUE_BINDING: &str = "JOBS";
/// The urgent lane's producer (optional, design §12).
pub const URGENT_BINDING: &str = "JOBS_URGENT";

/// The queues jobs are sent to: the main queue, and the urgent lane when `JOBS_URGENT` is bound.
pub fn lanes(env: &Env, cfg: &Config) -> worker::Result<crate::producer::Lanes<WorkerQueue>> {
    Ok(crate::producer::Lanes {
        main: WorkerQueue(env.queue(QUEUE_BINDING)?),
        urgent: env.queue(URGENT_BINDING).ok().map(WorkerQueue),
        urgent_priority: cfg.urgent_priority,
        keyed_by_priority: cfg.ordering_mode == crate::config::OrderingMode::Strict,
    })
}

/// `Date.now()`.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        js_sys::Date::now() as i64
    }
}

/// `Math.random()`.
pub fn random() -> f64 {
    js_sys::Math::random()
}

/// A random 128-bit hex id (jobs, lease owners). Not a secret, only unique.
pub fn random_id() -> String {
    (0..4).fold(String::with_capacity(32), |mut id, _| {
        let _ = std::fmt::Write::write_fmt(&mut id, format_args!("{:08x}", (random() * f64::from(u32::MAX)) as u32));
        id
    })
}

/// Reads and checks the vars.
pub fn config(env: &Env) -> Result<Config, ConfigError> {
    let mut cfg = Config::from_lookup(|name| env.var(name).ok().map(|v| v.to_string()))?;
    // Keys in spans and metric labels are hashed under a secret, so a dictionary of likely keys
    // does not reverse them (design §27.5).
    let secret = secret(env, "KEY_HASH_SECRET").or_else(|| secret(env, "ADMIN_TOKEN"));
    cfg.key_hash_secret = crate::config::KeySecret(secret.unwrap_or_default());
    Ok(cfg)
}

/// A secret (or plain var) by name, if set and non-empty.
pub fn secret(env: &Env, name: &str) -> Option<String> {
    env.secret(name).ok().map(|s| s.to_string()).filter(|s| !s.is_empty())
}

/// A message body as JSON. Bytes and values JSON cannot hold are refused with the reason.
pub fn body_json(body: JsValue) -> Result<Value, BodyError> {
    if body.is_undefined() {
        return Err("the message has no body".into());
    }
    if body.is_instance_of::<js_sys::ArrayBuffer>() || js_sys::ArrayBuffer::is_view(&body) {
        return Err("the body is bytes (content type \"bytes\"), not JSON".into());
    }
    if let Some(text) = body.as_string() {
        // orderly sends its own messages as JSON text, so numbers and key order survive exactly
        // (JS numbers would round big integers and drop `.0`); any other text message is a JSON
        // string payload, taken as is.
        if text.len() <= MAX_BODY_JSON_BYTES {
            if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(&text) {
                if v.get(crate::envelope::JOB_FIELD).is_some() {
                    return Ok(v);
                }
            }
        }
        return Ok(Value::String(text));
    }
    let text = js_sys::JSON::stringify(&body).map_err(|e| BodyError(format!("JSON.stringify failed: {e:?}")))?;
    let text = text.as_string().ok_or(BodyError::from("the body has no JSON form"))?;
    if text.len() > MAX_BODY_JSON_BYTES {
        return Err(BodyError(format!(
            "the body is {} bytes as JSON, over the {MAX_BODY_JSON_BYTES}-byte limit",
            text.len()
        )));
    }
    serde_json::from_str(&text).map_err(|e| BodyError(e.to_string()))
}

/// Reads a request body, at most `limit` bytes, whether or not it declares its length: a body
/// that declares more, or streams more, is refused (413) without reading the rest.
pub async fn read_capped(req: &mut Request, limit: usize) -> Result<Vec<u8>, ApiResponse> {
    use futures::StreamExt;
    let declared = req.headers().get("content-length").ok().flatten().and_then(|l| l.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiResponse::too_large(limit));
    }
    // No stream: no body at all.
    let Ok(mut stream) = req.stream() else { return Ok(Vec::new()) };
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| ApiResponse::json_error(400, serde_json::json!({"error": format!("body unreadable: {e}")})))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiResponse::too_large(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The start of a response body as text; the stream is cancelled when dropped (wasm-streams
/// cancels on drop), so the rest is never downloaded. A body that fails mid-read keeps what came.
async fn read_start(resp: &mut worker::Response, limit: usize) -> String {
    use futures::StreamExt;
    let Ok(mut stream) = resp.stream() else { return String::new() };
    let mut start = Vec::new();
    while start.len() < limit {
        match stream.next().await {
            Some(Ok(chunk)) => start.extend_from_slice(&chunk),
            _ => break,
        }
    }
    start.truncate(limit);
    String::from_utf8_lossy(&start).into_owned()
}

/// Workers KV.
pub struct WorkerKv(pub KvStore);

impl Kv for WorkerKv {
    async fn get(&self, key: &str) -> Result<Option<String>, InfraError> {
        self.0.get(key).text().await.map_err(|e| InfraError::new("KV", e.to_string()))
    }
    async fn put(&self, key: &str, value: &str, ttl_seconds: u32) -> Result<(), InfraError> {
        let put = self.0.put(key, value).map_err(|e| InfraError::new("KV", e.to_string()))?;
        put.expiration_ttl(u64::from(ttl_seconds)).execute().await.map_err(|e| InfraError::new("KV", e.to_string()))
    }
    async fn delete(&self, key: &str) -> Result<(), InfraError> {
        self.0.delete(key).await.map_err(|e| InfraError::new("KV", e.to_string()))
    }
}

/// The job queue's producer binding.
pub struct WorkerQueue(pub Queue);

impl QueueSender for WorkerQueue {
    async fn send_batch(&self, msgs: &[OutMessage]) -> Result<(), InfraError> {
        let mut batch = Vec::with_capacity(msgs.len());
        for m in msgs {
            // As text: JSON through JS numbers would not arrive as written (see `body_json`).
            let mut b = RawMessageBuilder::new(JsValue::from_str(m.json()));
            if m.delay_seconds > 0 {
                b = b.delay_seconds(m.delay_seconds);
            }
            batch.push(b.build_with_content_type(QueueContentType::Text));
        }
        self.0.send_raw_batch(batch).await.map_err(|e| InfraError::new("Queue", e.to_string()))
    }
}

/// `fetch` with a timeout that aborts the request. Redirects are not followed (a 3xx is the
/// answer). Only the first `read_limit` bytes of the body are read (for the job's result),
/// then the body is cancelled: Workers stall new fetches while six responses are open.
pub struct WorkerFetch {
    /// The worker's bindings: service handlers are reached through them.
    pub env: Env,
}

impl HttpClient for WorkerFetch {
    async fn send(&self, req: HttpRequest, timeout_ms: u32) -> Result<HttpResponse, SendError> {
        let headers = Headers::new();
        for (name, value) in &req.headers {
            headers.set(name, value).map_err(|e| SendError::Invalid(format!("bad header {name}: {e}")))?;
        }
        let mut init = RequestInit::new();
        init.with_method(Method::from(req.method.clone()))
            .with_headers(headers)
            .with_redirect(RequestRedirect::Manual)
            .with_body(Some(JsValue::from_str(&req.body)));
        let request =
            Request::new_with_init(&req.url, &init).map_err(|e| SendError::Invalid(format!("bad request: {e}")))?;
        let controller = AbortController::default();
        let signal = controller.signal();
        let _abort = AbortOnDrop(Some(controller));
        // The signal rides in the request itself, so the timeout aborts a service binding's call
        // too (`Fetcher::fetch_request` takes no signal): a handler orderly has given up on must
        // not go on running beside the retry.
        let with_signal = web_sys::RequestInit::new();
        with_signal.set_signal(Some(&signal));
        let request: Request = web_sys::Request::new_with_request_and_init(request.inner(), &with_signal)
            .map_err(|e| SendError::Invalid(format!("bad request: {e:?}")))?
            .into();
        // The timeout covers the answer and the start of its body.
        // A service binding is a Worker of the user's, looked up by name (a missing one was
        // refused as a configuration error before any job ran).
        let service = match req.via.as_deref() {
            Some(binding) => Some(handler_binding(&self.env, binding)?),
            None => None,
        };
        let limit = req.read_limit;
        let fetch = Box::pin(async move {
            // Inside the run's span when it is traced (its first call out: design §27.5).
            let target = match &service {
                Some(s) => JsValue::from(s.as_ref()),
                None => js_sys::global().into(),
            };
            let mut resp = match inside_entered_span(&target, "fetch", request.inner()) {
                Some(answer) => {
                    let answer: web_sys::Response = wasm_bindgen_futures::JsFuture::from(answer).await?.dyn_into()?;
                    worker::Response::from(answer)
                }
                None => match service {
                    Some(s) => s.fetch_request(request).await?,
                    None => Fetch::Request(request).send_with_signal(&signal).await?,
                },
            };
            let header = |name: &str| resp.headers().get(name).ok().flatten();
            let (retry_after, content_type, snooze) =
                (header("retry-after"), header("content-type"), header(crate::handlers::service::SNOOZE_HEADER));
            let own_words = header(crate::handlers::service::OWN_WORDS_HEADER).is_some_and(|v| v == "1");
            let status = resp.status_code();
            let body_start = read_start(&mut resp, limit).await;
            Ok::<_, worker::Error>(HttpResponse { status, retry_after, content_type, body_start, snooze, own_words })
        });
        let timeout = Delay::from(Duration::from_millis(u64::from(timeout_ms)));
        match select(fetch, timeout).await {
            Either::Left((Ok(resp), _)) => Ok(resp),
            Either::Left((Err(e), _)) => Err(SendError::Network(format!("network error: {e}"))),
            // The request is aborted as `_abort` drops.
            Either::Right(_) => Err(SendError::Network(format!("timed out after {timeout_ms} ms"))),
        }
    }
}

/// Aborts its request when dropped: on a timeout, and when the run is given up on before its
/// answer (its job cancelled, design §22.1, drops the request's future), so a handler orderly
/// has stopped waiting for is stopped too. Aborting a request already answered and read does
/// nothing.
struct AbortOnDrop(Option<AbortController>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(controller) = self.0.take() {
            controller.abort();
        }
    }
}

/// A service handler's binding (`SERVICE_HANDLERS`): a service binding to another Worker, or any
/// object in `env` with a `fetch(request)` method, such as the JavaScript handlers of the Worker
/// that embeds orderly (`orderly-queues/worker`, design §13c), called in the same isolate.
/// workers-rs's `Env::service` takes only an object whose constructor is named `Fetcher`; the
/// call is the same `fetch`.
pub fn handler_binding(env: &Env, name: &str) -> Result<worker::Fetcher, SendError> {
    let binding = js_sys::Reflect::get(env.as_ref(), &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED);
    let fetch = js_sys::Reflect::get(&binding, &JsValue::from_str("fetch")).unwrap_or(JsValue::UNDEFINED);
    if binding.is_object() && fetch.is_function() {
        Ok(binding.unchecked_into::<worker::Fetcher>())
    } else {
        Err(SendError::Invalid(format!("binding {name:?} is no service binding (an object with a fetch method)")))
    }
}

/// `PAYLOAD_KEY`'s cipher on Workers: WebCrypto's AES-256-GCM, in `seal.rs`'s sealed format.
pub struct WebCryptoSealer {
    keys: crate::seal::Keys,
    /// Keys imported into WebCrypto, by id: imported once per invocation, not per job.
    imported: std::cell::RefCell<std::collections::HashMap<String, web_sys::CryptoKey>>,
}

impl WebCryptoSealer {
    /// The sealer for the `PAYLOAD_KEY` secret, if set; a malformed one is a configuration error.
    pub fn from_env(env: &Env) -> Result<Option<WebCryptoSealer>, ConfigError> {
        match secret(env, "PAYLOAD_KEY") {
            None => Ok(None),
            Some(s) => Ok(Some(WebCryptoSealer { keys: crate::seal::Keys::parse(&s)?, imported: Default::default() })),
        }
    }
}

fn crypto() -> Result<web_sys::Crypto, InfraError> {
    js_sys::Reflect::get(&js_sys::global(), &JsValue::from_str("crypto"))
        .ok()
        .and_then(|c| c.dyn_into::<web_sys::Crypto>().ok())
        .ok_or_else(|| InfraError::new("seal", "no WebCrypto in this runtime"))
}

impl WebCryptoSealer {
    /// `key` as a WebCrypto AES-GCM key.
    async fn crypto_key(&self, key: &crate::seal::Key) -> Result<web_sys::CryptoKey, InfraError> {
        if let Some(k) = self.imported.borrow().get(&key.id) {
            return Ok(k.clone());
        }
        let k = aes_key(&key.bytes).await?;
        self.imported.borrow_mut().insert(key.id.clone(), k.clone());
        Ok(k)
    }
}

async fn aes_key(bytes: &[u8; 32]) -> Result<web_sys::CryptoKey, InfraError> {
    let err = |e: JsValue| InfraError::new("seal", format!("{e:?}"));
    let subtle = crypto()?.subtle();
    let algorithm = js_sys::Object::new();
    js_sys::Reflect::set(&algorithm, &"name".into(), &"AES-GCM".into()).map_err(err)?;
    let usages = js_sys::Array::of2(&"encrypt".into(), &"decrypt".into());
    let raw = js_sys::Uint8Array::from(&bytes[..]);
    let promise = subtle.import_key_with_object("raw", &raw, &algorithm, false, &usages).map_err(err)?;
    wasm_bindgen_futures::JsFuture::from(promise).await.map_err(err)?.dyn_into().map_err(err)
}

fn gcm(nonce: &[u8], aad: &str) -> web_sys::AesGcmParams {
    let params = web_sys::AesGcmParams::new("AES-GCM", &js_sys::Uint8Array::from(nonce));
    params.set_additional_data_u8_array(&js_sys::Uint8Array::from(aad.as_bytes()));
    params
}

impl crate::seal::Sealer for WebCryptoSealer {
    fn seal<'a>(
        &'a self,
        job_id: &'a str,
        plain: &'a str,
    ) -> futures::future::LocalBoxFuture<'a, Result<String, InfraError>> {
        Box::pin(async move {
            let err = |e: JsValue| InfraError::new("seal", format!("{e:?}"));
            let key = self.keys.current();
            let mut nonce = [0u8; 12];
            crypto()?.get_random_values_with_u8_array(&mut nonce).map_err(err)?;
            let promise = crypto()?
                .subtle()
                .encrypt_with_object_and_u8_array(&gcm(&nonce, job_id), &self.crypto_key(key).await?, plain.as_bytes())
                .map_err(err)?;
            let out = wasm_bindgen_futures::JsFuture::from(promise).await.map_err(err)?;
            Ok(crate::seal::format(&key.id, &nonce, &js_sys::Uint8Array::new(&out).to_vec()))
        })
    }
    fn open<'a>(
        &'a self,
        job_id: &'a str,
        sealed: &'a str,
    ) -> futures::future::LocalBoxFuture<'a, Result<String, InfraError>> {
        Box::pin(async move {
            let err = |e: JsValue| InfraError::new("seal", format!("{e:?}"));
            let (id, nonce, ciphertext) = crate::seal::parse(sealed)?;
            let key =
                self.keys.get(id).ok_or_else(|| InfraError::new("seal", format!("no key {id:?} in PAYLOAD_KEY")))?;
            let promise = crypto()?
                .subtle()
                .decrypt_with_object_and_u8_array(&gcm(&nonce, job_id), &self.crypto_key(key).await?, &ciphertext)
                .map_err(err)?;
            let out = wasm_bindgen_futures::JsFuture::from(promise)
                .await
                .map_err(|_| InfraError::new("seal", "the sealed text does not open with its key"))?;
            String::from_utf8(js_sys::Uint8Array::new(&out).to_vec()).map_err(|_| InfraError::new("seal", "not text"))
        })
    }
}

/// The Analytics Engine dataset binding attempts are written to (optional; design §27.5).
pub const METRICS_BINDING: &str = "ORDERLY_METRICS";

/// Workers tracing (the event context's `tracing`, design §27.5) and the `ORDERLY_METRICS`
/// dataset, behind the consumer's [`Observer`](crate::observe::Observer). Either may be absent:
/// a runtime without the tracing API, or no binding, observes nothing there.
pub struct WorkerObserver {
    tracing: Option<JsValue>,
    metrics: Option<worker::AnalyticsEngineDataset>,
    /// One per event: the points its invocation may still write.
    points: crate::observe::PointBudget,
}

impl WorkerObserver {
    /// The observer of the event whose context is `ctx`; `None` when neither is there.
    pub fn new(ctx: &JsValue, env: &Env) -> Option<WorkerObserver> {
        let tracing = js_sys::Reflect::get(ctx, &"tracing".into()).ok().filter(JsValue::is_object);
        let metrics = env.analytics_engine(METRICS_BINDING).ok();
        (tracing.is_some() || metrics.is_some()).then(|| WorkerObserver {
            tracing,
            metrics,
            points: Default::default(),
        })
    }

    /// A span named `name`, open until ended, and its door: `tracing.startActiveSpan` hands its
    /// callback the span (it stays open until `end()`), and the callback leaves a promise whose
    /// reaction was registered while the span was active. Workers' async context is the one a
    /// reaction was registered in, so what the reaction calls nests inside the span, whenever it
    /// runs (design §27.5). The API has no way to re-enter a span later (no `startSpan`, no
    /// context to hand back): the door is how the run's first call out gets inside it.
    fn start(&self, name: &str) -> Option<WorkerSpan> {
        let tracing = self.tracing.as_ref()?;
        let start =
            js_sys::Reflect::get(tracing, &"startActiveSpan".into()).ok()?.dyn_into::<js_sys::Function>().ok()?;
        let door: Door = Default::default();
        let kept = door.clone();
        // Closures, not `new Function`: Workers refuse code made from strings. `call_a_function`
        // is `Function.prototype.call.bind(Function.prototype.call)`: `call_a_function(f)` is
        // `f()`, and it leaves no Rust closure behind when the door is never opened.
        let in_span = wasm_bindgen::closure::Closure::once_into_js(move |span: JsValue| {
            let mut resolve = None;
            let opened = js_sys::Promise::new(&mut |r, _| resolve = Some(r));
            // `then` through Reflect: js-sys's takes only a Rust closure.
            let then = |call: &js_sys::Function| {
                let then = js_sys::Reflect::get(&opened, &"then".into()).ok()?.dyn_into::<js_sys::Function>().ok()?;
                then.call1(&opened, call).ok()?.dyn_into::<js_sys::Promise>().ok()
            };
            if let (Some(resolve), Some(answer)) = (resolve, call_a_function().as_ref().and_then(then)) {
                *kept.borrow_mut() = Some((resolve, answer));
            }
            span
        });
        let span = start.call2(tracing, &name.into(), &in_span).ok().filter(JsValue::is_object)?;
        Some(WorkerSpan { span, door })
    }
}

/// A run span's door: the resolver of a promise whose reaction runs inside the span, and the
/// promise of what that reaction returns. Opened once.
type Door = std::rc::Rc<std::cell::RefCell<Option<(js_sys::Function, js_sys::Promise)>>>;

thread_local! {
    /// The door of the span whose run is being polled now ([`crate::observe::within`]).
    static ENTERED: std::cell::RefCell<Option<Door>> = const { std::cell::RefCell::new(None) };
}

/// `Function.prototype.call.bind(Function.prototype.call)`.
fn call_a_function() -> Option<js_sys::Function> {
    let function = js_sys::Reflect::get(&js_sys::global(), &"Function".into()).ok()?;
    let call: js_sys::Function =
        js_sys::Reflect::get(&js_sys::Reflect::get(&function, &"prototype".into()).ok()?, &"call".into())
            .ok()?
            .dyn_into()
            .ok()?;
    Some(call.bind0(&call))
}

/// `target[method](arg)` called inside the span whose run is being polled, when its door is
/// still shut (a run's first call out); `None`: no span is entered, or its door was used, and the
/// caller calls as it would have.
fn inside_entered_span(target: &JsValue, method: &'static str, arg: &JsValue) -> Option<js_sys::Promise> {
    let door = ENTERED.with(|e| e.borrow().clone())?;
    let (resolve, opened) = door.borrow_mut().take()?;
    let (target, arg) = (target.clone(), arg.clone());
    let call = wasm_bindgen::closure::Closure::once_into_js(move || -> JsValue {
        js_sys::Reflect::get(&target, &method.into())
            .and_then(JsCast::dyn_into::<js_sys::Function>)
            .and_then(|f| f.call1(&target, &arg))
            .unwrap_or_else(|e| js_sys::Promise::reject(&e).into())
    });
    resolve.call1(&JsValue::UNDEFINED, &call).ok()?;
    Some(opened)
}

/// A Workers span: attributes set with `setAttribute`, ended once with `end()`; its door lets
/// the run's first call out in.
struct WorkerSpan {
    span: JsValue,
    door: Door,
}

impl WorkerSpan {
    fn set(&self, attrs: &[crate::observe::Attribute]) {
        let Some(set) = js_sys::Reflect::get(&self.span, &"setAttribute".into())
            .ok()
            .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
        else {
            return;
        };
        for (name, value) in attrs {
            let value = match value {
                crate::observe::Attr::Text(t) => JsValue::from_str(t),
                crate::observe::Attr::Number(n) => JsValue::from_f64(*n),
            };
            let _ = set.call2(&self.span, &JsValue::from_str(name), &value);
        }
    }
}

impl crate::observe::Span for WorkerSpan {
    fn enter(&self, step: &mut dyn FnMut()) {
        let outer = ENTERED.with(|e| e.replace(Some(self.door.clone())));
        step();
        ENTERED.with(|e| *e.borrow_mut() = outer);
    }

    fn end(self: Box<Self>, attrs: &[crate::observe::Attribute]) {
        self.set(attrs);
        if let Ok(end) = js_sys::Reflect::get(&self.span, &"end".into()).and_then(JsCast::dyn_into::<js_sys::Function>)
        {
            let _ = end.call0(&self.span);
        }
    }
}

impl crate::observe::Observer for WorkerObserver {
    fn open(&self, name: &str, attrs: &[crate::observe::Attribute]) -> Option<Box<dyn crate::observe::Span + '_>> {
        let span = self.start(name)?;
        // A span not sampled records nothing: its attributes are not worth the calls.
        let traced = js_sys::Reflect::get(&span.span, &"isTraced".into()).map_or(true, |t| t.as_bool() != Some(false));
        if traced {
            span.set(attrs);
        }
        Some(Box::new(span))
    }

    fn point(&self, point: &crate::observe::DataPoint) {
        let Some(metrics) = &self.metrics else { return };
        if !self.points.take() {
            return;
        }
        let p = worker::AnalyticsEngineDataPointBuilder::new()
            .indexes([point.index.as_str()])
            .blobs(point.blobs.iter().map(String::as_str))
            .doubles(point.doubles.iter().copied())
            .build();
        // Best effort: a data point not written loses a number, never a job.
        let _ = metrics.write_data_point(&p);
    }
}
