//! The HTTP API on the host as tests call it: the real `Api` over a SQLite ledger, a queue that
//! keeps what it is sent, a manual clock, and sequential job ids (`job-001`, ...).

use std::cell::Cell;

use futures::executor::block_on;
use orderly::api::{Api, ApiRequest, ApiResponse};
use orderly::clock::ManualClock;
use orderly::config::{Config, ConfigError};
use orderly::ledger::Ledger;
use serde_json::Value;

use super::{MemoryQueue, Sqlite};

/// Epoch of the clock, ms.
pub const T0: i64 = 1_700_000_000_000;
/// The configured admin token.
pub const TOKEN: &str = "s3cret-token-0123456789";
/// The producer's token: submit and read only.
pub const PRODUCER_TOKEN: &str = "producer-token-0123456789";
/// The scraper's token: `GET /metrics` only.
pub const METRICS_TOKEN: &str = "metrics-token-0123456789";

/// One API with its ports.
pub struct ApiWorld {
    pub ledger: Ledger<Sqlite>,
    pub queue: MemoryQueue,
    pub clock: ManualClock,
    pub cfg: Config,
    pub ids: Cell<u32>,
    /// `PAYLOAD_KEY`'s sealer, when the test sets one.
    pub sealer: Option<super::AesSealer>,
}

impl ApiWorld {
    pub fn new() -> ApiWorld {
        ApiWorld {
            ledger: Ledger::new(Sqlite::temp().0),
            queue: MemoryQueue::default(),
            clock: ManualClock::new(T0),
            cfg: Config::default(),
            ids: Cell::new(0),
            sealer: None,
        }
    }

    /// The API over this world's ports, with this configuration and admin token.
    pub fn api<'a>(
        &'a self,
        cfg: Result<&'a Config, &'a ConfigError>,
        admin_token: Option<&'a str>,
        new_id: &'a dyn Fn() -> String,
    ) -> Api<'a, Sqlite, MemoryQueue, ManualClock> {
        Api {
            ledger: &self.ledger,
            queue: &self.queue,
            clock: &self.clock,
            cfg,
            admin_token,
            producer_token: Some(PRODUCER_TOKEN),
            metrics_token: Some(METRICS_TOKEN),
            new_id,
            types: &orderly::app::BuiltIn,
            sealer: self.sealer.as_ref().map(|s| s as &dyn orderly::seal::Sealer),
        }
    }

    /// A request with this token (or none) and configuration; `path` may carry `?query`.
    pub fn call_with(
        &self,
        token: Option<&str>,
        cfg: Result<&Config, &ConfigError>,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> ApiResponse {
        let next_id = || {
            self.ids.set(self.ids.get() + 1);
            format!("job-{:03}", self.ids.get())
        };
        let api = self.api(cfg, Some(TOKEN), &next_id);
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let req = ApiRequest {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            authorization: token.map(|t| format!("Bearer {t}")),
            body: body.map(|b| b.to_string().into_bytes()).unwrap_or_default(),
            trace: None,
        };
        block_on(api.handle(&req))
    }

    /// An authorized request.
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> ApiResponse {
        self.call_with(Some(TOKEN), Ok(&self.cfg), method, path, body)
    }
}
