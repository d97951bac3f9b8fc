//! One ledger shard inside a SQLite-backed Durable Object (design §19): what the object does with
//! a request, over its own SQLite (`ObjectStore`), pure and synchronous so that it runs natively in
//! the tests and the simulation exactly as in the object. `durable.rs` is the Workers edge: the
//! object class (`ledger_object!`) and the client (`DoSql`).
//!
//! A request carries the statements of one `Sql::batch` and what the worker expects of the shard:
//! the ledger's schema (how many migrations its SQL was written for), and the shard's place
//! (`shard` of `shards`). On its first request an object applies the migrations it lacks, all in one
//! transaction, and records its place; afterwards a request that expects another schema (worker and
//! object on different code during a deploy) or another place (`LEDGER_SHARDS` changed) is refused
//! before anything applies: the worker defers its messages, nothing runs on a ledger whose keys
//! would map elsewhere. Every batch runs in one transaction (`transactionSync` in the object): all
//! statements apply, or none.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use super::schema::SCHEMA;
use super::schema::{statements, MIGRATIONS};
use super::store::{Param, Row, Sql, Stmt};
use crate::error::InfraError;

/// The object's own bookkeeping: its schema and its place among the shards.
const META: &str = "CREATE TABLE IF NOT EXISTS orderly_shard (name TEXT PRIMARY KEY, value INTEGER NOT NULL)";
const READ_META: &str = "SELECT name, value FROM orderly_shard";
const WRITE_META: &str = "INSERT INTO orderly_shard (name, value) VALUES (?1, ?2) \
                          ON CONFLICT (name) DO UPDATE SET value = excluded.value";

/// One statement of a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectStmt {
    /// SQL text.
    pub sql: String,
    /// `?1..?n`: null, integer or text.
    pub params: Vec<Value>,
}

impl ObjectStmt {
    /// A statement with its parameters as JSON.
    pub fn new(sql: &str, params: &[Param]) -> ObjectStmt {
        let params = params
            .iter()
            .map(|p| match p {
                Param::Null => Value::Null,
                Param::Int(i) => Value::from(*i),
                Param::Text(s) => Value::from(s.as_str()),
            })
            .collect();
        ObjectStmt { sql: sql.to_string(), params }
    }
}

/// What the worker sends a shard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardRequest {
    /// The schema the worker's SQL is written for ([`SCHEMA`]).
    pub schema: u32,
    /// Which shard the worker means this object to be.
    pub shard: u32,
    /// Of how many.
    pub shards: u32,
    /// One batch: run in order in one transaction.
    pub stmts: Vec<ObjectStmt>,
}

/// What a shard answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardAnswer {
    /// The batch applied: each statement's rows.
    Rows(Vec<Vec<Row>>),
    /// Not applied: the request does not fit this shard (schema or place).
    Refused(String),
    /// Not applied: a statement failed and the transaction rolled back.
    Failed(String),
}

/// A statement in the object's SQLite failed (the transaction rolled back), as SQLite said it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

/// The object's SQLite: statements run in one transaction, all or nothing.
pub trait ObjectStore {
    /// Runs `stmts` in order in one transaction; each one's rows. On an error nothing applied.
    fn transact(&self, stmts: &[ObjectStmt]) -> Result<Vec<Vec<Row>>, StoreError>;
}

/// Carries a request to a shard's object and its answer back (a Durable Object fetch on
/// Workers; a call in process in the tests and the simulation).
#[allow(async_fn_in_trait)]
pub trait Transport {
    /// Sends `req`; an error means the answer did not come back (the batch may have applied).
    async fn send(&self, req: &ShardRequest) -> Result<ShardAnswer, InfraError>;
}

/// The ledger's SQL port on one shard's object: a statement batch is one request.
pub struct ShardSql<T> {
    /// The way to the object.
    pub transport: T,
    /// This shard's index.
    pub shard: u32,
    /// Of how many.
    pub shards: u32,
}

impl<T: Transport> Sql for ShardSql<T> {
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<Vec<Row>>, InfraError> {
        let n = stmts.len();
        let req = ShardRequest {
            schema: SCHEMA,
            shard: self.shard,
            shards: self.shards,
            stmts: stmts.iter().map(|s| ObjectStmt::new(s.sql, &s.params)).collect(),
        };
        let shard = self.shard;
        match self.transport.send(&req).await? {
            ShardAnswer::Rows(rows) if rows.len() == n => Ok(rows),
            ShardAnswer::Rows(rows) => Err(InfraError::new(
                "ledger shard",
                format!("shard {shard}: {} results for {n} statements", rows.len()),
            )),
            ShardAnswer::Refused(why) | ShardAnswer::Failed(why) => {
                Err(InfraError::new("ledger shard", format!("shard {shard}: {why}")))
            }
        }
    }
}

/// The shard's place and schema as recorded, if any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Place {
    /// Migrations applied.
    pub schema: u32,
    /// This shard's index, once recorded.
    pub shard: Option<u32>,
    /// The ledger's shard count, once recorded.
    pub shards: Option<u32>,
}

fn int(v: Option<&Value>) -> Option<u32> {
    v.and_then(super::job::int_of).and_then(|i| u32::try_from(i).ok())
}

/// A shard's object: its store and, once read, its place (the object alone writes its storage, so
/// the place read once stays true until the object is reset).
pub struct LedgerObject<T> {
    store: T,
    place: std::cell::Cell<Option<Place>>,
}

impl<T: ObjectStore> LedgerObject<T> {
    /// The object over its storage.
    pub fn new(store: T) -> Self {
        LedgerObject { store, place: std::cell::Cell::new(None) }
    }

    /// The recorded place, read once per object instance.
    pub fn place(&self) -> Result<Place, StoreError> {
        if let Some(p) = self.place.get() {
            return Ok(p);
        }
        let p = read_place(&self.store)?;
        self.place.set(Some(p));
        Ok(p)
    }

    /// Serves one request: checks the worker's schema, brings the shard to it on first use and
    /// records its place, checks the place, and runs the batch in one transaction.
    pub fn serve(&self, req: &ShardRequest) -> ShardAnswer {
        if req.schema != SCHEMA {
            return ShardAnswer::Refused(format!(
                "version skew: the worker's ledger expects schema {}, this object's code has {SCHEMA}; \
                 deferred until both run the same release",
                req.schema
            ));
        }
        let place = match self.place() {
            Ok(p) => p,
            Err(e) => return ShardAnswer::Failed(e.0),
        };
        if let Some(refusal) = misplaced(&place, req) {
            return ShardAnswer::Refused(refusal);
        }
        if place.schema < SCHEMA || place.shard.is_none() {
            if let Err(e) = prepare(&self.store, &place, req) {
                return ShardAnswer::Failed(format!("shard {} not prepared: {e}", req.shard));
            }
            self.place.set(Some(Place { schema: SCHEMA, shard: Some(req.shard), shards: Some(req.shards) }));
        }
        match self.store.transact(&req.stmts) {
            Ok(rows) => ShardAnswer::Rows(rows),
            Err(e) => ShardAnswer::Failed(e.0),
        }
    }
}

/// The recorded schema and place (none on a new object).
fn read_place(store: &impl ObjectStore) -> Result<Place, StoreError> {
    let meta = ObjectStmt { sql: META.into(), params: Vec::new() };
    let read = ObjectStmt { sql: READ_META.into(), params: Vec::new() };
    let out = store.transact(&[meta, read])?;
    let mut place = Place::default();
    for row in out.get(1).into_iter().flatten() {
        let value = int(row.get("value"));
        match row.get("name").and_then(Value::as_str) {
            Some("schema") => place.schema = value.unwrap_or(0),
            Some("shard") => place.shard = value,
            Some("shards") => place.shards = value,
            _ => {}
        }
    }
    Ok(place)
}

/// Why `req` does not fit the recorded place, if it does not.
fn misplaced(place: &Place, req: &ShardRequest) -> Option<String> {
    if place.schema > SCHEMA {
        return Some(format!(
            "version skew: this shard is at schema {}, newer than this code's {SCHEMA}; deferred",
            place.schema
        ));
    }
    match (place.shard, place.shards) {
        (Some(shard), Some(shards)) if (shard, shards) != (req.shard, req.shards) => Some(format!(
            "configuration: this ledger has {shards} shards (this is shard {shard}), but the worker routes over \
             {} (as shard {}); LEDGER_SHARDS cannot change while a ledger exists (docs/design.md §19)",
            req.shards, req.shard
        )),
        _ => None,
    }
}

/// Applies the migrations the shard lacks and records its place, in one transaction.
fn prepare(store: &impl ObjectStore, place: &Place, req: &ShardRequest) -> Result<(), StoreError> {
    let mut stmts: Vec<ObjectStmt> = MIGRATIONS
        .iter()
        .skip(place.schema as usize)
        .flat_map(|(_, file)| statements(file))
        .map(|sql| ObjectStmt { sql: sql.to_string(), params: Vec::new() })
        .collect();
    for (name, value) in [("schema", SCHEMA), ("shard", req.shard), ("shards", req.shards)] {
        stmts.push(ObjectStmt { sql: WRITE_META.into(), params: vec![name.into(), value.into()] });
    }
    store.transact(&stmts).map(|_| ())
}
