//! {{name}}: a worker whose jobs orderly runs in each key's order, with retries, dead letters, a
//! ledger you can query and a dashboard. Add a job type: a payload struct, an async handler, one
//! `.handler(...)` line in `app()`.

// The ledger's shard class, for `LEDGER = "do"`; a worker that keeps the D1 ledger may drop it.
#[cfg(target_arch = "wasm32")]
orderly::ledger_object!(OrderlyLedger);

#[cfg(target_arch = "wasm32")]
mod worker_app {
    use orderly::{App, Cx, Done, Job, JobError};
    use serde::Deserialize;
    use worker::{event, Context, Env, MessageBatch, Request, Response, ScheduleContext, ScheduledEvent};

    /// `{"type": "greet", "name": "Ada"}`
    #[derive(Deserialize)]
    struct Greet {
        name: String,
    }

    /// Greets `name`; the greeting is kept as the job's result. A name that is empty is refused
    /// for good (DEAD, with the reason); anything your handler should retry, return as
    /// `JobError::retry(...)`.
    async fn greet(job: Job<Greet>, _cx: Cx<Env>) -> Result<Done, JobError> {
        if job.name.trim().is_empty() {
            return Err(JobError::permanent("name is empty"));
        }
        Ok(Done { result: Some(serde_json::json!({ "greeting": format!("Hello, {}!", job.name) })), ..Done::default() })
    }

    fn app() -> App {
        App::builder().handler("greet", greet).webhook().build()
    }

    #[event(queue)]
    async fn queue(batch: MessageBatch<serde_json::Value>, env: Env, ctx: Context) -> worker::Result<()> {
        app().queue(batch, env, ctx).await
    }

    #[event(fetch)]
    async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
        app().fetch(req, env, ctx).await
    }

    #[event(scheduled)]
    async fn scheduled(event: ScheduledEvent, env: Env, ctx: ScheduleContext) {
        app().scheduled(event, env, ctx).await
    }
}
