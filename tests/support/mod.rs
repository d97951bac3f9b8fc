//! Native test backends: the ledger's SQL port on real SQLite (bundled), with the migrations from
//! `migrations/` applied, so the same SQL text D1 runs is exercised on the host.

#![allow(dead_code)]

pub mod api;
pub mod consumer;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use orderly::envelope::Envelope;
use orderly::error::InfraError;
use orderly::ledger::object::{
    LedgerObject, ObjectStmt, ObjectStore, ShardAnswer, ShardRequest, ShardSql, StoreError, Transport,
};
use orderly::ledger::{Param, Row, Sql, Stmt};
use orderly::producer::{OutMessage, QueueSender};
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{params_from_iter, Connection};
use serde_json::Value;

/// D1 as the platform runs it, on SQLite: what D1 refuses, this refuses (design §26), so a
/// test or a seed that passes here does not pass only because SQLite is kinder:
/// - an empty batch ("No SQL statements detected");
/// - D1's limits, as SQLite's own (`sqlite3_limit`): 100 bound parameters and 100 KB a
///   statement, 2 MB a string or row, 32 arguments to a function, 50 bytes of LIKE pattern,
///   expressions 100 deep; foreign keys on;
/// - numbers bound as the platform binds a JS number, REAL (`typeof(?1)` is `real`, `?1 || ''`
///   is `5.0`), and read back as a JS number: a whole REAL arrives as an integer;
/// - more queries in one invocation than its budget ([`Sqlite::budget`]): a batch is one query,
///   one call to D1 (design §26, what counts).
///
/// A batch is one IMMEDIATE transaction, like D1's `batch()`. With `ORDERLY_D1_TRACE` set to a
/// folder, a database of the native suite writes every batch it ran and what it answered there, and
/// `tests/d1/replay.test.mjs` runs the same batches on miniflare's D1 and compares the answers.
pub struct Sqlite {
    pub conn: Connection,
    /// Batches run, i.e. D1 round trips.
    pub round_trips: std::cell::Cell<u64>,
    /// Queries (batches) run since the invocation began ([`Sqlite::invocation`]).
    pub queries: std::cell::Cell<u64>,
    /// The per-invocation query budget: a batch past it is refused, as D1 refuses past 1,000
    /// (paid) or 50 (free). `None`: unbounded (the default).
    pub budget: std::cell::Cell<Option<u64>>,
    /// Where the batches run are traced for the replay on D1 (`ORDERLY_D1_TRACE`).
    trace: Option<std::cell::RefCell<Trace>>,
    /// When set, every batch fails as an outage would.
    pub down: std::cell::Cell<bool>,
    /// When set to n, batches after the n-th fail (an outage that starts mid-invocation).
    pub down_after: std::cell::Cell<Option<u64>>,
}

/// D1's queries per Worker invocation on the paid plan, and on the free plan.
pub const D1_PAID_QUERIES: u64 = 1_000;
pub const D1_FREE_QUERIES: u64 = 50;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// The database files a second connection opened (perhaps on another thread).
static SHARED: std::sync::Mutex<std::collections::BTreeSet<std::path::PathBuf>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

impl Sqlite {
    fn with(conn: Connection) -> Sqlite {
        use rusqlite::limits::Limit;
        for (limit, value) in [
            (Limit::SQLITE_LIMIT_VARIABLE_NUMBER, 100),
            (Limit::SQLITE_LIMIT_SQL_LENGTH, 100_000),
            (Limit::SQLITE_LIMIT_LENGTH, 2_000_000),
            (Limit::SQLITE_LIMIT_FUNCTION_ARG, 32),
            (Limit::SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 50),
            (Limit::SQLITE_LIMIT_EXPR_DEPTH, 100),
        ] {
            conn.set_limit(limit, value);
        }
        conn.pragma_update(None, "foreign_keys", "ON").expect("foreign keys");
        Sqlite {
            conn,
            round_trips: Default::default(),
            queries: Default::default(),
            budget: Default::default(),
            trace: None,
            down: Default::default(),
            down_after: Default::default(),
        }
    }

    /// A fresh, migrated database in a temp file (a file, so other connections can race on it),
    /// traced as [`Sqlite::memory`] is until another connection opens it.
    pub fn temp() -> (Sqlite, std::path::PathBuf) {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!("orderly-test-{}-{n}.sqlite", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut db = Sqlite::connect(&path);
        db.trace = Trace::new(Some(&path));
        db.migrate();
        (db, path)
    }

    /// A fresh, migrated database in memory, its batches traced for the replay on D1 when
    /// `ORDERLY_D1_TRACE` is set (one connection, so its trace is the whole of what changed it).
    pub fn memory() -> Sqlite {
        let mut db = Sqlite::bare();
        db.trace = Trace::new(None);
        db.migrate();
        db
    }

    /// Opens another connection to `path` (its first connection's trace is then not written:
    /// what this one changes is not in it).
    pub fn open(path: &Path) -> Sqlite {
        SHARED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(path.to_path_buf());
        Sqlite::connect(path)
    }

    fn connect(path: &Path) -> Sqlite {
        let conn = Connection::open(path).expect("open sqlite");
        conn.busy_timeout(Duration::from_secs(10)).expect("busy timeout");
        conn.pragma_update(None, "journal_mode", "WAL").expect("wal");
        Sqlite::with(conn)
    }

    /// A new invocation begins: its query budget is whole again.
    pub fn invocation(&self) {
        self.queries.set(0);
    }

    /// Runs one statement outside the ledger (a test setting up a state), traced like a batch.
    pub fn exec(&self, sql: &str, params: &[&str]) -> rusqlite::Result<usize> {
        let out = self.conn.execute(sql, params_from_iter(params.iter()));
        if let Some(t) = &self.trace {
            let stmts = [(sql.to_string(), params.iter().map(|p| Value::from(*p)).collect())];
            t.borrow_mut().batch(&stmts, &out.as_ref().map(|_| vec![Vec::new()]).map_err(ToString::to_string));
        }
        out
    }

    /// Applies every file of `migrations/`, in name order.
    pub fn migrate(&self) {
        self.migrate_range(|_| true);
    }

    /// Applies the files of `migrations/` whose names `take` accepts, in name order.
    pub fn migrate_range(&self, take: impl Fn(&str) -> bool) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            if take(&name) {
                self.conn.execute_batch(&std::fs::read_to_string(&f).unwrap()).expect("migration applies");
                if let Some(t) = &self.trace {
                    t.borrow_mut().line(serde_json::json!({ "migration": name }));
                }
            }
        }
    }

    /// An unmigrated database in memory.
    pub fn bare() -> Sqlite {
        Sqlite::with(Connection::open_in_memory().expect("open sqlite"))
    }

    /// Runs `stmts` as D1's `batch()` does, refusing what D1 refuses first.
    fn run(&self, stmts: &[Stmt]) -> rusqlite::Result<Vec<Vec<Row>>> {
        let refuse = |why: String| Err(rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(1), Some(why)));
        if stmts.is_empty() {
            if let Some(t) = &self.trace {
                t.borrow_mut().batch(&[], &Err("no statements".into()));
            }
            return refuse("D1_ERROR: No SQL statements detected.".into());
        }
        let spent = self.queries.get() + 1;
        if let Some(budget) = self.budget.get().filter(|&b| spent > b) {
            return refuse(format!(
                "Too many API requests by single worker invocation ({spent} queries, budget {budget})"
            ));
        }
        self.queries.set(spent);
        let out = self.run_sql(stmts.iter().map(|s| (s.sql, s.params.iter().map(bound).collect())));
        if let Some(t) = &self.trace {
            let traced: Vec<(String, Vec<Value>)> =
                stmts.iter().map(|s| (s.sql.to_string(), s.params.iter().map(param_json).collect())).collect();
            t.borrow_mut().batch(&traced, &out.as_ref().map(Clone::clone).map_err(ToString::to_string));
        }
        out
    }

    /// Runs statements in one IMMEDIATE transaction: all apply or none.
    fn run_sql<'s>(
        &self,
        stmts: impl IntoIterator<Item = (&'s str, Vec<SqlValue>)>,
    ) -> rusqlite::Result<Vec<Vec<Row>>> {
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        let result = (|| {
            let mut out = Vec::new();
            for (sql, params) in stmts {
                let mut st = self.conn.prepare_cached(sql)?;
                let names: Vec<String> = st.column_names().iter().map(std::string::ToString::to_string).collect();
                let mut rows = st.query(params_from_iter(params))?;
                let mut got = Vec::new();
                while let Some(r) = rows.next()? {
                    let mut m = Row::new();
                    for (i, n) in names.iter().enumerate() {
                        let v = match r.get_ref(i)? {
                            ValueRef::Null => Value::Null,
                            ValueRef::Integer(x) => Value::from(x),
                            ValueRef::Real(x) => js_number(x),
                            ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
                            ValueRef::Blob(_) => Value::Null,
                        };
                        m.insert(n.clone(), v);
                    }
                    got.push(m);
                }
                out.push(got);
            }
            Ok(out)
        })();
        match result {
            Ok(out) => {
                self.conn.execute_batch("COMMIT")?;
                Ok(out)
            }
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    /// Reads one column of one job directly (for assertions that bypass the ledger code).
    pub fn column(&self, id: &str, col: &str) -> SqlValue {
        self.conn
            .query_row(&format!("SELECT {col} FROM job WHERE id = ?1"), [id], |r| r.get::<_, SqlValue>(0))
            .unwrap_or(SqlValue::Null)
    }
}

impl Sql for Sqlite {
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<Vec<Row>>, InfraError> {
        self.round_trips.set(self.round_trips.get() + 1);
        if self.down.get() || self.down_after.get().is_some_and(|n| self.round_trips.get() > n) {
            return Err(InfraError::new("D1", "simulated outage"));
        }
        self.run(&stmts).map_err(|e| InfraError::new("D1", e.to_string()))
    }
}

/// A parameter as the trace writes it: a number, a string, or null.
fn param_json(p: &Param) -> Value {
    match p {
        Param::Null => Value::Null,
        Param::Int(i) => Value::from(*i),
        Param::Text(t) => Value::from(t.as_str()),
    }
}

/// A database's trace for the replay on D1 (`tests/d1/replay.test.mjs`): one JSON line per
/// migration applied and per batch run, with its answer; each SQL text written once, then named
/// by its number. Written when the database is dropped, if it ran any batch.
struct Trace {
    path: std::path::PathBuf,
    /// The database's file, if it has one.
    file: Option<std::path::PathBuf>,
    lines: Vec<String>,
    sqls: std::collections::HashMap<String, usize>,
    batches: usize,
}

impl Trace {
    fn new(file: Option<&Path>) -> Option<std::cell::RefCell<Trace>> {
        let dir = std::env::var_os("ORDERLY_D1_TRACE")?;
        // The native suite's databases only: the simulation's own checks build states by hand.
        let exe = std::env::current_exe().ok()?;
        if !exe.file_name()?.to_string_lossy().starts_with("native-") {
            return None;
        }
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let test = std::thread::current().name().unwrap_or("main").replace("::", ".");
        let path = Path::new(&dir).join(format!("{test}-{}-{n}.jsonl", std::process::id()));
        let file = file.map(Path::to_path_buf);
        Some(std::cell::RefCell::new(Trace { path, file, lines: Vec::new(), sqls: Default::default(), batches: 0 }))
    }

    fn line(&mut self, v: Value) {
        self.lines.push(v.to_string());
    }

    fn batch(&mut self, stmts: &[(String, Vec<Value>)], out: &Result<Vec<Vec<Row>>, String>) {
        let mut batch = Vec::new();
        for (sql, params) in stmts {
            let next = self.sqls.len();
            let n = *self.sqls.entry(sql.clone()).or_insert_with(|| {
                self.lines.push(serde_json::json!({ "sql": next, "text": sql }).to_string());
                next
            });
            batch.push(serde_json::json!({ "sql": n, "params": params }));
        }
        self.batches += 1;
        let answer = match out {
            Ok(rows) => serde_json::json!({ "batch": batch, "rows": rows }),
            Err(e) => serde_json::json!({ "batch": batch, "error": e }),
        };
        self.lines.push(answer.to_string());
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        let shared = self
            .file
            .as_ref()
            .is_some_and(|f| SHARED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(f));
        if self.batches > 0 && !shared {
            let _ = std::fs::create_dir_all(self.path.parent().unwrap_or(Path::new(".")));
            let _ = std::fs::write(&self.path, self.lines.join("\n") + "\n");
        }
    }
}

/// A parameter as the platform binds it: a JS number is a REAL (D1 and a Durable Object's SQL
/// alike), whole or not.
fn bound(p: &Param) -> SqlValue {
    match p {
        Param::Null => SqlValue::Null,
        Param::Int(i) => SqlValue::Real(*i as f64),
        Param::Text(t) => SqlValue::Text(t.clone()),
    }
}

/// A REAL as it reaches the Worker: a JS number, which arrives as an integer when whole.
fn js_number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() <= 9_007_199_254_740_992.0 {
        Value::from(x as i64)
    } else {
        Value::from(x)
    }
}

/// A ledger shard's object storage on SQLite (unmigrated until its object prepares it), as a
/// Durable Object's `transactionSync` runs it: a batch is one transaction.
pub struct ShardDb(pub std::rc::Rc<Sqlite>);

impl ObjectStore for ShardDb {
    fn transact(&self, stmts: &[ObjectStmt]) -> Result<Vec<Vec<Row>>, StoreError> {
        let value = |v: &Value| match v {
            Value::Null => SqlValue::Null,
            Value::String(s) => SqlValue::Text(s.clone()),
            v => SqlValue::Real(v.as_f64().unwrap_or(f64::NAN)),
        };
        let stmts = stmts.iter().map(|s| (s.sql.as_str(), s.params.iter().map(value).collect()));
        self.0.run_sql(stmts).map_err(|e| StoreError(e.to_string()))
    }
}

/// A shard object reached in process: every request and answer goes through its JSON, as over
/// a Durable Object fetch. While `down`, every request fails before it arrives. Counts the
/// requests sent (each a Durable Object request, a subrequest of the invocation).
pub struct InProcess(pub std::rc::Rc<LedgerObject<ShardDb>>, pub std::cell::Cell<bool>, pub std::cell::Cell<u64>);

impl Transport for InProcess {
    async fn send(&self, req: &ShardRequest) -> Result<ShardAnswer, InfraError> {
        self.2.set(self.2.get() + 1);
        if self.1.get() {
            return Err(InfraError::new("ledger shard", "simulated outage"));
        }
        let wire = serde_json::to_string(req).map_err(|e| InfraError::new("ledger shard", e.to_string()))?;
        let req: ShardRequest =
            serde_json::from_str(&wire).map_err(|e| InfraError::new("ledger shard", e.to_string()))?;
        let answer = serde_json::to_string(&self.0.serve(&req)).unwrap_or_default();
        serde_json::from_str(&answer).map_err(|e| InfraError::new("ledger shard", e.to_string()))
    }
}

/// `n` fresh shard objects over in-memory SQLite (each prepares its schema on first use), their
/// databases, and the ledger's SQL ports to them.
pub fn memory_shards(n: u32) -> (Vec<std::rc::Rc<Sqlite>>, Vec<ShardSql<InProcess>>) {
    let dbs: Vec<_> = (0..n).map(|_| std::rc::Rc::new(Sqlite::bare())).collect();
    let sqls = dbs
        .iter()
        .enumerate()
        .map(|(i, db)| ShardSql {
            transport: InProcess(
                std::rc::Rc::new(LedgerObject::new(ShardDb(db.clone()))),
                Default::default(),
                Default::default(),
            ),
            shard: i as u32,
            shards: n,
        })
        .collect();
    (dbs, sqls)
}

/// One database of a test's ledger: the D1 stand-in ([`Sqlite`]), or a shard object reached in
/// process. Tests that must hold on every ledger users deploy run over [`ledger_dbs`].
pub enum Db {
    D1(Box<Sqlite>),
    Shard(ShardSql<InProcess>),
}

impl Sql for Db {
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<Vec<Row>>, InfraError> {
        match self {
            Db::D1(d1) => d1.batch(stmts).await,
            Db::Shard(shard) => shard.batch(stmts).await,
        }
    }
}

/// A ledger's databases: `0` is one D1 database (the stand-in), `n` is n shard objects.
pub fn ledger_dbs(shards: u32) -> Vec<Db> {
    if shards == 0 {
        return vec![Db::D1(Box::new(Sqlite::memory()))];
    }
    memory_shards(shards).1.into_iter().map(Db::Shard).collect()
}

/// The ledgers users deploy, for tests over each: D1, one shard object, three.
pub const EVERY_LEDGER: [u32; 3] = [0, 1, 3];

/// A queue producer that records what it was sent, and can go down.
#[derive(Default)]
pub struct MemoryQueue {
    pub batches: std::cell::RefCell<Vec<Vec<OutMessage>>>,
    pub down: std::cell::Cell<bool>,
}

impl QueueSender for MemoryQueue {
    async fn send_batch(&self, msgs: &[OutMessage]) -> Result<(), InfraError> {
        if self.down.get() {
            return Err(InfraError::new("Queue", "simulated outage"));
        }
        self.batches.borrow_mut().push(msgs.to_vec());
        Ok(())
    }
}

impl MemoryQueue {
    /// Every message sent so far, decoded.
    pub fn sent(&self) -> Vec<Envelope> {
        self.batches
            .borrow()
            .iter()
            .flatten()
            .map(|m| Envelope::decode(serde_json::from_str(m.json()).unwrap()).unwrap())
            .collect()
    }
    /// Every message sent so far, with its delay.
    pub fn sent_with_delay(&self) -> Vec<(Envelope, u32)> {
        self.batches
            .borrow()
            .iter()
            .flatten()
            .map(|m| (Envelope::decode(serde_json::from_str(m.json()).unwrap()).unwrap(), m.delay_seconds))
            .collect()
    }
}

/// `PAYLOAD_KEY`'s cipher on the host: AES-256-GCM (the `aes-gcm` crate) in the sealed format of
/// `orderly::seal`, the job id as additional data, nonces from a counter (unique per sealer).
pub struct AesSealer {
    pub keys: orderly::seal::Keys,
    nonces: std::cell::Cell<u64>,
}

impl AesSealer {
    /// A sealer with `PAYLOAD_KEY` = `secret`.
    pub fn new(secret: &str) -> AesSealer {
        AesSealer {
            keys: orderly::seal::Keys::parse(secret).expect("a good PAYLOAD_KEY"),
            nonces: std::cell::Cell::new(1),
        }
    }
}

impl orderly::seal::Sealer for AesSealer {
    fn seal<'a>(
        &'a self,
        job_id: &'a str,
        plain: &'a str,
    ) -> futures::future::LocalBoxFuture<'a, Result<String, InfraError>> {
        use aes_gcm::aead::{Aead, KeyInit, Payload};
        let key = self.keys.current();
        let n = self.nonces.get();
        self.nonces.set(n + 1);
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&n.to_be_bytes());
        let cipher = aes_gcm::Aes256Gcm::new((&key.bytes).into());
        let out = cipher
            .encrypt((&nonce).into(), Payload { msg: plain.as_bytes(), aad: job_id.as_bytes() })
            .map(|ct| orderly::seal::format(&key.id, &nonce, &ct))
            .map_err(|_| InfraError::new("seal", "encryption failed"));
        Box::pin(std::future::ready(out))
    }
    fn open<'a>(
        &'a self,
        job_id: &'a str,
        sealed: &'a str,
    ) -> futures::future::LocalBoxFuture<'a, Result<String, InfraError>> {
        use aes_gcm::aead::{Aead, KeyInit, Payload};
        let out = (|| {
            let (id, nonce, ct) = orderly::seal::parse(sealed)?;
            let key =
                self.keys.get(id).ok_or_else(|| InfraError::new("seal", format!("no key {id:?} in PAYLOAD_KEY")))?;
            let cipher = aes_gcm::Aes256Gcm::new((&key.bytes).into());
            let plain = cipher
                .decrypt(nonce.as_slice().into(), Payload { msg: &ct, aad: job_id.as_bytes() })
                .map_err(|_| InfraError::new("seal", "the sealed text does not open with its key"))?;
            String::from_utf8(plain).map_err(|_| InfraError::new("seal", "not text"))
        })();
        Box::pin(std::future::ready(out))
    }
}

/// A job as recorded from a body that could not be read: no type, no key, no payload.
pub fn unreadable_spec(id: &str) -> orderly::ledger::JobSpec {
    orderly::ledger::JobSpec {
        id: id.into(),
        job_type: None,
        ordering_key: None,
        dedupe_key: None,
        limit_key: None,
        deadline_at: None,
        timeout_seconds: None,
        payload: None,
        max_attempts: 8,
        priority: 5,
    }
}
