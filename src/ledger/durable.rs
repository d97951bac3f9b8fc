//! The ledger's shards on SQLite-backed Durable Objects, the Workers edge (design §19): the
//! object (`ledger_object!` makes the user's worker export it), its storage, and the client that
//! reaches shard `i` by name. What the object does with a request is `object.rs`, tested natively.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Function, Reflect};
use serde_json::Value;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use worker::{Env, Method, ObjectNamespace, Request, RequestInit, Response, SqlStorage, State, Stub};

use super::object::{
    LedgerObject, ObjectStmt, ObjectStore, ShardAnswer, ShardRequest, ShardSql, StoreError, Transport, SCHEMA,
};
use super::store::{Row, Sql, Stmt};
use crate::error::InfraError;

/// The Durable Object namespace binding of the ledger's shards (`LEDGER = "do"`).
pub const BINDING: &str = "LEDGER_OBJECT";

/// The name of shard `i`'s object. The count is not in the name: it is stored in every shard and
/// checked on every request, so a changed `LEDGER_SHARDS` is refused instead of opening new, empty
/// objects beside the old ones.
pub fn object_name(shard: u32) -> String {
    format!("orderly-ledger-{shard}")
}

/// A shard's storage: its SQLite, every batch inside `transactionSync` (workers-rs 0.8.7 binds
/// only the async `transaction`; a throw inside the closure rolls the whole batch back).
struct DoStore {
    state: State,
}

fn js_param(v: &Value) -> JsValue {
    match v {
        Value::Null => JsValue::NULL,
        Value::String(s) => JsValue::from_str(s),
        // Integers only (times in ms, counts): exact in an f64.
        v => JsValue::from_f64(v.as_f64().unwrap_or(0.0)),
    }
}

fn run_all(sql: &SqlStorage, stmts: &[ObjectStmt]) -> Result<Vec<Vec<Row>>, StoreError> {
    stmts
        .iter()
        .map(|s| {
            let cursor = sql.exec_raw(&s.sql, s.params.iter().map(js_param).collect::<Vec<_>>());
            let rows: Vec<Value> =
                cursor.and_then(|c| c.to_array()).map_err(|e| StoreError(format!("{e}: {}", s.sql)))?;
            Ok(rows.into_iter().filter_map(|v| if let Value::Object(m) = v { Some(m) } else { None }).collect())
        })
        .collect()
}

impl ObjectStore for DoStore {
    fn transact(&self, stmts: &[ObjectStmt]) -> Result<Vec<Vec<Row>>, StoreError> {
        let storage = self.state.storage();
        let sql = storage.sql();
        let raw: &JsValue = storage.as_raw().as_ref();
        let tx: Function = Reflect::get(raw, &JsValue::from_str("transactionSync"))
            .ok()
            .and_then(|f| f.dyn_into().ok())
            .ok_or_else(|| StoreError("this object's storage has no transactionSync (not SQLite-backed?)".into()))?;
        let out: Rc<RefCell<Result<Vec<Vec<Row>>, StoreError>>> = Rc::new(RefCell::new(Ok(Vec::new())));
        let (inner, stmts) = (out.clone(), stmts.to_vec());
        let body = Closure::<dyn FnMut() -> Result<JsValue, JsValue>>::new(move || {
            let result = run_all(&sql, &stmts);
            let failed = result.as_ref().err().cloned();
            *inner.borrow_mut() = result;
            // Throwing is what rolls the transaction back.
            failed.map_or(Ok(JsValue::UNDEFINED), |e| Err(JsValue::from_str(&e.0)))
        });
        let called = tx.call1(raw, body.as_ref().unchecked_ref());
        let result = out.replace(Ok(Vec::new()));
        match (called, result) {
            (Ok(_), result) => result,
            (Err(_), Err(e)) => Err(e),
            (Err(thrown), Ok(_)) => Err(StoreError(thrown.as_string().unwrap_or_else(|| format!("{thrown:?}")))),
        }
    }
}

/// The ledger shard object's behaviour, for `ledger_object!`'s class.
pub struct ShardObject {
    object: LedgerObject<DoStore>,
    env: Env,
}

impl ShardObject {
    /// The object over its state.
    pub fn new(state: State, env: Env) -> Self {
        ShardObject { object: LedgerObject::new(DoStore { state }), env }
    }

    /// Serves one batch request (`POST`, a [`ShardRequest`]), always answering a [`ShardAnswer`].
    pub async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let answer = match req.json::<ShardRequest>().await {
            Ok(r) => self.serve(&r).await,
            Err(e) => ShardAnswer::Failed(format!("unreadable request: {e}")),
        };
        Response::from_json(&answer)
    }

    async fn serve(&self, req: &ShardRequest) -> ShardAnswer {
        // A new object other than shard 0 first asks shard 0 whether the ledger has this many
        // shards: a raised LEDGER_SHARDS would otherwise open new shards that accept keys whose
        // earlier jobs sit unseen in the old ones.
        let fresh = matches!(self.object.place(), Ok(p) if p.shard.is_none());
        if fresh && req.shard != 0 {
            if let Some(refusal) = self.check_with_shard_zero(req.shards).await {
                return refusal;
            }
        }
        self.object.serve(req)
    }
}

impl ShardObject {
    /// Whether shard 0 agrees the ledger has `shards` shards: `None` when it does.
    async fn check_with_shard_zero(&self, shards: u32) -> Option<ShardAnswer> {
        let probe = ShardRequest { schema: SCHEMA, shard: 0, shards, stmts: Vec::new() };
        let answer = match shard_transport(&self.env, 0) {
            Ok(t) => t.send(&probe).await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(ShardAnswer::Rows(_)) => None,
            Ok(ShardAnswer::Refused(why)) => Some(ShardAnswer::Refused(format!("shard 0 refuses: {why}"))),
            Ok(ShardAnswer::Failed(why)) => {
                Some(ShardAnswer::Failed(format!("shard 0 could not check the count: {why}")))
            }
            Err(e) => Some(ShardAnswer::Failed(format!("shard 0 not reached to check the count: {e}"))),
        }
    }
}

/// The way to one shard's object.
pub struct DoTransport {
    stub: Stub,
}

fn shard_transport(env: &Env, shard: u32) -> Result<DoTransport, InfraError> {
    let ns: ObjectNamespace =
        env.durable_object(BINDING).map_err(|e| InfraError::new("ledger shard", e.to_string()))?;
    let stub = ns.get_by_name(&object_name(shard)).map_err(|e| InfraError::new("ledger shard", e.to_string()))?;
    Ok(DoTransport { stub })
}

impl Transport for DoTransport {
    async fn send(&self, req: &ShardRequest) -> Result<ShardAnswer, InfraError> {
        let err = |e: worker::Error| InfraError::new("ledger shard", e.to_string());
        let body = serde_json::to_string(req).map_err(|e| InfraError::new("ledger shard", e.to_string()))?;
        let mut init = RequestInit::new();
        init.with_method(Method::Post).with_body(Some(JsValue::from_str(&body)));
        let request = Request::new_with_init("https://orderly-ledger/batch", &init).map_err(err)?;
        let mut response = self.stub.fetch_with_request(request).await.map_err(err)?;
        let text = response.text().await.map_err(err)?;
        serde_json::from_str(&text).map_err(|e| InfraError::new("ledger shard", format!("unreadable answer: {e}")))
    }
}

/// The ledger's shards in the `LEDGER_OBJECT` namespace, `shards` of them, in shard order.
pub fn shards(env: &Env, shards: u32) -> Result<Vec<ShardSql<DoTransport>>, InfraError> {
    (0..shards).map(|shard| Ok(ShardSql { transport: shard_transport(env, shard)?, shard, shards })).collect()
}

/// The ledger's databases on Workers: D1, or the client of one shard's Durable Object.
pub enum EdgeSql {
    /// `LEDGER = "d1"`: the `DB` binding.
    D1(super::d1::D1Sql),
    /// `LEDGER = "do"`: one shard.
    Shard(ShardSql<DoTransport>),
}

impl Sql for EdgeSql {
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<Vec<Row>>, InfraError> {
        match self {
            EdgeSql::D1(d1) => d1.batch(stmts).await,
            EdgeSql::Shard(shard) => shard.batch(stmts).await,
        }
    }
}

/// The databases `LEDGER` names: `db` (D1), or `shards` objects of `LEDGER_OBJECT`.
pub fn edge_shards(env: &Env, objects: Option<u32>) -> Result<Vec<EdgeSql>, InfraError> {
    match objects {
        None => {
            let db = env.d1(DB_BINDING).map_err(|e| InfraError::new("D1", format!("{DB_BINDING}: {e}")))?;
            let mount = env.var("ORDERLY_MOUNT").map(|v| v.to_string()).unwrap_or_default();
            Ok(vec![EdgeSql::D1(super::d1::D1Sql(db, mount))])
        }
        Some(n) => Ok(shards(env, n)
            .map_err(|e| InfraError::new("ledger shard", format!("{BINDING}: {}", e.detail)))?
            .into_iter()
            .map(EdgeSql::Shard)
            .collect()),
    }
}

/// The D1 binding of a `LEDGER = "d1"` ledger.
pub const DB_BINDING: &str = "DB";

/// Defines the ledger shards' Durable Object class in the invoking worker: a library defines no
/// class a D1 user would have to export. Bind it as `LEDGER_OBJECT` with a SQLite migration:
///
/// ```toml
/// [[durable_objects.bindings]]
/// name = "LEDGER_OBJECT"
/// class_name = "OrderlyLedger"
///
/// [[migrations]]
/// tag = "orderly-ledger-v1"
/// new_sqlite_classes = ["OrderlyLedger"]
/// ```
///
/// ```ignore
/// orderly::ledger_object!(OrderlyLedger);
/// ```
#[macro_export]
macro_rules! ledger_object {
    ($name:ident) => {
        /// orderly's ledger shard class (`LEDGER = "do"`), in a module of its own: wasm-bindgen's
        /// expansion names the `wasm_bindgen` crate, which the invoking worker need not depend on.
        mod __orderly_ledger_object {
            use ::worker::wasm_bindgen;

            /// orderly's ledger shard (`LEDGER = "do"`).
            #[::worker::durable_object]
            pub struct $name {
                inner: $crate::__private::ShardObject,
            }

            impl ::worker::DurableObject for $name {
                fn new(state: ::worker::State, env: ::worker::Env) -> Self {
                    Self { inner: $crate::__private::ShardObject::new(state, env) }
                }

                async fn fetch(&self, req: ::worker::Request) -> ::worker::Result<::worker::Response> {
                    self.inner.fetch(req).await
                }
            }
        }
        pub use __orderly_ledger_object::$name;
    };
}
