//! A test fixture: a worker on the orderly library with one job type, `panicky`, whose handler
//! panics in its first `panics` attempts (a bug in a user's handler), and succeeds after
//! (tests/e2e/panic.test.mjs: a panic recorded as the job's failed attempt, not lost to a lease).
//! Its `GET /__conformance` runs the ledger's conformance suite on its D1 database
//! (tests/e2e/conformance.test.mjs), the same cases `tests/conformance.rs` runs on SQLite; with
//! `?shards=N` it runs them on N ledger shard objects (`LEDGER_OBJECT`) instead.

#[cfg(target_arch = "wasm32")]
orderly::ledger_object!(ConformanceLedger);

#[cfg(target_arch = "wasm32")]
mod worker_app {
    use orderly::ledger::{conformance, d1::D1Sql, durable, Ledger};
    use orderly::{App, Cx, Done, Job, JobError};
    use serde::Deserialize;
    use worker::{event, Context, Env, MessageBatch, Request, Response};

    /// `{"type": "panicky", "panics": 1}`
    #[derive(Deserialize)]
    struct Panicky {
        panics: u32,
    }

    async fn panicky(job: Job<Panicky>, cx: Cx<Env>) -> Result<Done, JobError> {
        if cx.attempt <= job.panics {
            let items: Vec<u32> = Vec::new();
            // An index out of bounds, as a handler's bug would have it.
            let _ = items[cx.attempt as usize];
        }
        Ok(Done { result: Some(serde_json::json!({"attempt": cx.attempt})), http_status: None })
    }

    fn app() -> App {
        App::builder().handler("panicky", panicky).build()
    }

    #[event(queue)]
    async fn queue(batch: MessageBatch<serde_json::Value>, env: Env, ctx: Context) -> worker::Result<()> {
        app().queue(batch, env, ctx).await
    }

    #[event(fetch)]
    async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
        if req.path() == "/__conformance" {
            let url = req.url()?;
            let query: std::collections::HashMap<_, _> = url.query_pairs().collect();
            let prefix = query.get("prefix").map_or("d1".to_string(), |p| p.to_string());
            let report = match query.get("shards").and_then(|n| n.parse::<u32>().ok()) {
                Some(n) => {
                    let shards = durable::shards(&env, n).map_err(|e| worker::Error::from(e.to_string()))?;
                    conformance::exercise(&Ledger::sharded(shards), &prefix).await
                }
                None => conformance::exercise(&Ledger::new(D1Sql(env.d1("DB")?, String::new())), &prefix).await,
            };
            return Response::from_json(&report);
        }
        app().fetch(req, env, ctx).await
    }
}
