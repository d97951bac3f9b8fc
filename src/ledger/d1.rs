//! The ledger's SQL port on Cloudflare D1: a statement batch is one `batch()` round trip. Before
//! its first batch in an isolate, the port checks the database's schema against the code's
//! (`schema.rs`, design §21): on another schema every batch is refused, naming the fix.

use std::cell::Cell;

use serde_json::Value;
use wasm_bindgen::JsValue;
use worker::D1Database;

use super::schema::{self, Migrated};
use super::store::{Param, Row, Sql, Stmt};
use crate::error::InfraError;

thread_local! {
    /// Whether this isolate has found the D1 ledger's schema to be this code's: checked once per
    /// isolate (one read), not per batch.
    static CURRENT: Cell<bool> = const { Cell::new(false) };
}

/// A D1 binding, and where the worker serves orderly's routes (`ORDERLY_MOUNT`: `/orderly` under
/// the JS wrapper, design §13c), so a refusal names the route that fixes it.
pub struct D1Sql(pub D1Database, pub String);

/// The binding without the schema check: what checks and migrates it.
struct Unchecked<'a>(&'a D1Database);

impl D1Sql {
    /// Brings the database to this code's schema (`POST /admin/migrate`).
    pub async fn migrate(&self) -> Result<Migrated, InfraError> {
        let migrated = schema::migrate(&Unchecked(&self.0)).await?;
        CURRENT.set(true);
        Ok(migrated)
    }

    /// The migrations the database lists.
    pub async fn applied(&self) -> Result<Vec<String>, InfraError> {
        schema::applied(&Unchecked(&self.0)).await
    }
}

fn js(p: &Param) -> JsValue {
    match p {
        Param::Null => JsValue::NULL,
        // Milliseconds since the epoch are exact in an f64; D1 stores whole numbers as INTEGER.
        Param::Int(i) => JsValue::from_f64(*i as f64),
        Param::Text(s) => JsValue::from_str(s),
    }
}

impl Sql for D1Sql {
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<Vec<Row>>, InfraError> {
        if !CURRENT.get() {
            schema::check(&Unchecked(&self.0), &self.1).await?;
            CURRENT.set(true);
        }
        Unchecked(&self.0).batch(stmts).await
    }
}

impl Sql for Unchecked<'_> {
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<Vec<Row>>, InfraError> {
        let err = |e: worker::Error| InfraError::new("D1", e.to_string());
        let prepared = stmts
            .iter()
            .map(|s| self.0.prepare(s.sql).bind(&s.params.iter().map(js).collect::<Vec<_>>()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        let results = self.0.batch(prepared).await.map_err(err)?;
        results
            .into_iter()
            .map(|r| {
                if let Some(e) = r.error() {
                    return Err(InfraError::new("D1", e));
                }
                let rows: Vec<Value> = r.results().map_err(err)?;
                Ok(rows.into_iter().filter_map(|v| if let Value::Object(m) = v { Some(m) } else { None }).collect())
            })
            .collect()
    }
}
