//! The SQL port: statements as plain values, run in batches by a backend (D1 on the edge, SQLite in
//! native tests). The ledger's SQL text is the same for both.

use serde_json::{Map, Value};

use crate::error::InfraError;

/// A bound parameter. Times and counts are integers (milliseconds fit an f64 exactly, which is how
/// D1 carries them).
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    /// SQL NULL.
    Null,
    /// An INTEGER.
    Int(i64),
    /// TEXT.
    Text(String),
}

impl From<i64> for Param {
    fn from(v: i64) -> Self {
        Param::Int(v)
    }
}
impl From<u32> for Param {
    fn from(v: u32) -> Self {
        Param::Int(i64::from(v))
    }
}
impl From<&str> for Param {
    fn from(v: &str) -> Self {
        Param::Text(v.to_string())
    }
}
impl From<String> for Param {
    fn from(v: String) -> Self {
        Param::Text(v)
    }
}
impl<T: Into<Param>> From<Option<T>> for Param {
    fn from(v: Option<T>) -> Self {
        v.map_or(Param::Null, Into::into)
    }
}

/// One statement with its parameters (`?1`, `?2`, ... in order). D1 binds by position only, so
/// each parameter also carries the name its SQL file declares for it (`-- params: ?1 id, ...`):
/// `ledger::params` checks every builder against its file, so none can be bound out of order.
#[derive(Debug, Clone, PartialEq)]
pub struct Stmt {
    /// SQL text from `src/ledger/sql/`.
    pub sql: &'static str,
    /// Values for `?1..?n`.
    pub params: Vec<Param>,
    /// The name of each parameter, as its file declares it.
    pub names: Vec<&'static str>,
}

impl Stmt {
    /// `sql` with `params` bound in order, each by its declared name.
    pub fn bind(sql: &'static str, params: impl IntoIterator<Item = (&'static str, Param)>) -> Stmt {
        let (names, params) = params.into_iter().unzip();
        Stmt { sql, params, names }
    }
}

/// A result row, column name to JSON value.
pub type Row = Map<String, Value>;

/// Runs statements. `batch` is one round trip and one transaction: all statements apply, in order,
/// or none do. Errors are infrastructure errors (the caller defers, never drops).
#[allow(async_fn_in_trait)]
pub trait Sql {
    /// Runs `stmts` in order in one transaction; the rows each returned, in the same order.
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<Vec<Row>>, InfraError>;

    /// Runs one statement.
    async fn query(&self, stmt: Stmt) -> Result<Vec<Row>, InfraError> {
        let mut out = self.batch(vec![stmt]).await?;
        Ok(out.pop().unwrap_or_default())
    }
}

/// The ledger's way to its database, whatever the backend: the rules every batch keeps, in one
/// place. A batch of no statements makes no round trip and answers no results: D1 refuses an empty
/// `batch()` ("No SQL statements detected"), and a list the ledger works on (the waits still open,
/// the jobs a filter matched) is often empty (design §26). Must not: know a backend.
pub(crate) struct Port<S>(pub(crate) S);

impl<S: Sql> Sql for Port<S> {
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<Vec<Row>>, InfraError> {
        if stmts.is_empty() {
            return Ok(Vec::new());
        }
        self.0.batch(stmts).await
    }
}

impl<S: Sql> Sql for &S {
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<Vec<Row>>, InfraError> {
        (**self).batch(stmts).await
    }
}
