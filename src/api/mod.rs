//! The operator HTTP API (design §5): submit, count, list, inspect, cancel and redrive jobs (one or
//! in bulk by filter), per-minute activity, ordering keys (`keys.rs`: strict mode's blocked keys
//! and skip, an operator's pause), flow control's limit keys (`limits.rs`); the dashboard and
//! the API's OpenAPI document, and the ledger's administration (migrate, move; answered by the
//! worker's edge). [`Endpoint`] (`endpoint.rs`) is the one list of routes, parsed from method and path
//! (by the gate before the body is read, by the router after): the router matches only these,
//! and a test checks `openapi.json` against it. What a route does to
//! a job or key is an operation (`crate::operations`); this layer reads, authorizes and answers.
//!
//! Plain requests in, plain responses out, over the ledger and queue ports, so every route is
//! tested natively. Every route but the dashboard shell needs `Authorization: Bearer <ADMIN_TOKEN>`
//! (compared in constant time), or, for a producer, `PRODUCER_TOKEN`, which may only submit jobs
//! and read a job's state and the counts ([`Endpoint::producer_may`]); the shell carries no data and
//! asks for the token itself, because a browser cannot attach a bearer token to a page load.
//! Errors are `{"error": ...}` JSON.

mod http;
mod input;
mod jobs;
mod keys;
mod limits;
mod metrics;
mod ports;
mod endpoint;
mod schedules;
mod submission;

pub use http::{ApiRequest, ApiResponse};
pub use ports::Api;
#[cfg(any(test, feature = "testing"))]
pub use endpoint::routes;
pub use endpoint::{NotRouted, Endpoint};

use base64::Engine;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::clock::Clock;
use crate::ledger::{CancelFilter, Sql};
use crate::producer::QueueSender;
#[cfg(any(test, feature = "testing"))]
pub use input::BadInput;
use input::parse_cancel_filter;
pub use submission::{Refusal, Submission, Submitted, MAX_BODY_BYTES, MAX_JOBS_PER_REQUEST};

/// The answer to a write while the ledger is being moved (`LEDGER_MOVING`).
pub const MOVING: &str = "the ledger is being moved to shards (LEDGER_MOVING = \"true\"): nothing is written until the move ends; try again in a few minutes";
/// Shortest `ADMIN_TOKEN` accepted: a guessable token is a configuration error, not a lock.
pub const MIN_TOKEN_BYTES: usize = 16;
/// The dashboard's Content-Security-Policy: nothing but its own inline script and style (by hash)
/// and calls to its own origin; never framed.
fn dashboard_csp() -> String {
    let hash = |tag: &str| {
        let open = format!("<{tag}>");
        let close = format!("</{tag}>");
        let body = DASHBOARD.split_once(&open).and_then(|(_, rest)| rest.split_once(&close)).map_or("", |(b, _)| b);
        base64::engine::general_purpose::STANDARD.encode(Sha256::digest(body.as_bytes()))
    };
    format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; connect-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        hash("script"),
        hash("style")
    )
}

const DASHBOARD: &str = include_str!("../dashboard.html");
/// The API described in OpenAPI 3.1, served at `GET /openapi.json`.
pub const OPENAPI: &str = include_str!("../openapi.json");

/// Who a request's bearer token says it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// `ADMIN_TOKEN`: every route.
    Admin,
    /// `PRODUCER_TOKEN`: the routes [`Endpoint::producer_may`] names.
    Producer,
    /// `METRICS_TOKEN`: `GET /metrics` only, so a scraper holds no power to act.
    Metrics,
}

/// Compares two secrets without revealing where (or whether, by length) they differ.
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    let (x, y) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    x.iter().zip(y.iter()).fold(0u8, |acc, (p, q)| acc | (p ^ q)) == 0
}

/// The answer to a route anyone may ask for: the dashboard page, or the OpenAPI document.
fn public_answer(route: &Endpoint) -> ApiResponse {
    if *route == Endpoint::OpenApi {
        return ApiResponse {
            status: 200,
            content_type: "application/json",
            body: OPENAPI.to_string(),
            headers: vec![("access-control-allow-origin", "*".into())],
        };
    }
    ApiResponse {
        status: 200,
        content_type: "text/html; charset=utf-8",
        body: DASHBOARD.to_string(),
        headers: vec![("content-security-policy", dashboard_csp()), ("x-frame-options", "DENY".into())],
    }
}

impl<S: Sql, Q: QueueSender, C: Clock> Api<'_, S, Q, C> {
    /// What to answer before the body is read: the dashboard page, or a refusal (no token
    /// configured, a token too short, a missing or wrong bearer token). `None`: read the body and
    /// call [`Api::handle`].
    pub fn gate(&self, method: &str, path: &str, authorization: Option<&str>) -> Option<ApiResponse> {
        let parsed = Endpoint::parse(method, path);
        let public = match &parsed {
            Ok((route @ (Endpoint::Dashboard | Endpoint::OpenApi), _)) => Some(route.clone()),
            _ if (method, path) == ("GET", "/index.html") => Some(Endpoint::Dashboard),
            _ => None,
        };
        if let Some(route) = public {
            return Some(public_answer(&route));
        }
        let Some(token) = self.admin_token.map(str::trim).filter(|t| !t.is_empty()) else {
            return Some(ApiResponse::error(
                503,
                "ADMIN_TOKEN is not configured; set it with `wrangler secret put ADMIN_TOKEN`",
            ));
        };
        if token.len() < MIN_TOKEN_BYTES {
            return Some(ApiResponse::error(
                500,
                format!("ADMIN_TOKEN is shorter than {MIN_TOKEN_BYTES} characters; set a longer one"),
            ));
        }
        let producer = self.producer_token.map(str::trim).filter(|t| !t.is_empty());
        if let Some(p) = producer {
            if p.len() < MIN_TOKEN_BYTES || constant_time_eq(p, token) {
                return Some(ApiResponse::error(
                    500,
                    format!("PRODUCER_TOKEN must be at least {MIN_TOKEN_BYTES} characters and not ADMIN_TOKEN"),
                ));
            }
        }
        if let Some(m) = self.metrics_token.map(str::trim).filter(|t| !t.is_empty()) {
            if m.len() < MIN_TOKEN_BYTES || constant_time_eq(m, token) || producer.is_some_and(|p| constant_time_eq(m, p)) {
                return Some(ApiResponse::error(
                    500,
                    format!(
                        "METRICS_TOKEN must be at least {MIN_TOKEN_BYTES} characters and neither ADMIN_TOKEN nor PRODUCER_TOKEN"
                    ),
                ));
            }
        }
        match self.caller(authorization) {
            None => Some(ApiResponse::error(401, "missing or wrong bearer token")),
            Some(Caller::Admin) => None,
            Some(Caller::Producer) => match parsed {
                Ok((route, _)) if route.producer_may() => None,
                Ok(_) => Some(ApiResponse::error(
                    403,
                    "PRODUCER_TOKEN may only submit jobs (POST /jobs) and read their state (GET /jobs/{id}, \
                     GET /batches/{id}, GET /jobs/counts); this needs ADMIN_TOKEN",
                )),
                // Unknown paths and methods are answered by the router, as for the admin.
                _ => None,
            },
            Some(Caller::Metrics) => match parsed {
                Ok((Endpoint::Metrics, _)) => None,
                _ => Some(ApiResponse::error(403, "METRICS_TOKEN may only read GET /metrics; this needs ADMIN_TOKEN")),
            },
        }
    }

    /// Whose token the `Authorization` header presents, if either.
    pub fn caller(&self, authorization: Option<&str>) -> Option<Caller> {
        // RFC 9110: the scheme is case-insensitive.
        let presented = authorization.and_then(|h| {
            let (scheme, credentials) = h.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| credentials.trim())
        })?;
        let is = |t: Option<&str>| {
            t.map(str::trim).filter(|t| !t.is_empty()).is_some_and(|t| constant_time_eq(presented, t))
        };
        if is(self.admin_token) {
            Some(Caller::Admin)
        } else if is(self.producer_token) {
            Some(Caller::Producer)
        } else if is(self.metrics_token) {
            Some(Caller::Metrics)
        } else {
            None
        }
    }

    #[cfg(any(test, feature = "testing"))]
    /// Answers one request. Never fails: errors are responses.
    pub async fn handle(&self, req: &ApiRequest) -> ApiResponse {
        match self.gate(&req.method, &req.path, req.authorization.as_deref()) {
            Some(answer) => answer,
            None => self.route(req).await,
        }
    }

    /// Answers a request that [`Api::gate`] let through (the edge gates before reading the body).
    pub async fn route(&self, req: &ApiRequest) -> ApiResponse {
        let cfg = match self.cfg {
            Ok(c) => c,
            Err(e) => return ApiResponse::error(500, format!("configuration error: {e}")),
        };
        let route = match Endpoint::parse(&req.method, &req.path) {
            Ok((route, _)) => route,
            Err(NotRouted::WrongMethod) => return ApiResponse::error(405, "method not allowed"),
            Err(NotRouted::NotFound) => return ApiResponse::error(404, format!("no route {} {}", req.method, req.path)),
        };
        if cfg.ledger_moving && req.method != "GET" {
            // A write recorded in D1 after its page was copied would be lost at the switch.
            return ApiResponse { headers: vec![("retry-after", "60".into())], ..ApiResponse::error(503, MOVING) };
        }
        let result = match route {
            Endpoint::Dashboard | Endpoint::OpenApi => Ok(public_answer(&route)),
            Endpoint::Submit => self.submit(cfg, &req.body, req.trace.as_ref()).await,
            Endpoint::List => self.list(&req.query).await,
            Endpoint::Counts => self.ledger.counts().await.map(|c| ApiResponse::json(200, json!(c))),
            Endpoint::Activity => self
                .ledger
                .activity(self.clock.now_ms())
                .await
                .map(|(minutes, times)| ApiResponse::json(200, json!({ "minutes": minutes, "times": times }))),
            Endpoint::RedriveMatching => self.redrive_matching(cfg, &req.body).await,
            Endpoint::Job(id) if self.caller(req.authorization.as_deref()) == Some(Caller::Producer) => {
                self.state(&id).await
            }
            Endpoint::Job(id) => self.get(&id).await,
            Endpoint::Batch(id) => {
                let admin = self.caller(req.authorization.as_deref()) == Some(Caller::Admin);
                self.batch(&id, admin).await
            }
            Endpoint::Redrive(id) => self.redrive(cfg, &id).await,
            Endpoint::Cancel(id) => self.cancel(cfg, &id).await,
            Endpoint::CancelMatching => match parse_cancel_filter(&req.body) {
                Ok((filter, dry_run)) => self.cancel_matching(cfg, filter, dry_run).await,
                Err(e) => Ok(ApiResponse::error(e.status(), e.to_string())),
            },
            Endpoint::CancelKey(key) => {
                let filter = CancelFilter { ordering_key: Some(key), ..CancelFilter::default() };
                self.cancel_matching(cfg, filter, false).await
            }
            Endpoint::Keys => self.keys(cfg, &req.query).await,
            Endpoint::ChangeKey(key) => self.change_key(cfg, &key, &req.body).await,
            Endpoint::SkipKey(key) => self.skip(cfg, &key).await,
            Endpoint::Limits => self.limits(cfg, &req.query).await,
            Endpoint::Limit(key) => self.limit(cfg, &key).await,
            Endpoint::ChangeLimit(key) => self.change_limit(cfg, &key, &req.body).await,
            Endpoint::Schedules => self.schedules(cfg).await,
            Endpoint::Metrics => self.metrics(cfg).await,
            Endpoint::ChangeSchedule(name) => self.change_schedule(cfg, &name, &req.body).await,
            // The worker's edge answers these before it calls the API: they need its bindings.
            Endpoint::Migrate { .. } | Endpoint::MoveLedger { .. } => {
                Ok(ApiResponse::error(501, "the ledger's administration is answered by the worker, not the API"))
            }
        };
        result.unwrap_or_else(|e| ApiResponse::error(503, format!("{e}; try again")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_equal_only_when_equal() {
        assert!(constant_time_eq("s3cret", "s3cret"));
        assert!(!constant_time_eq("s3cret", "s3cre"));
        assert!(!constant_time_eq("s3cret", "S3cret"));
        assert!(!constant_time_eq("", "x"));
    }
}
