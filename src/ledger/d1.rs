//! The ledger's SQL port on Cloudflare D1: a statement batch is one `batch()` round trip.

use serde_json::Value;
use wasm_bindgen::JsValue;
use worker::D1Database;

use super::store::{Param, Row, Sql, Stmt};
use crate::error::InfraError;

/// A D1 binding.
pub struct D1Sql(pub D1Database);

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
