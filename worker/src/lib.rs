//! The deployable orderly worker: the library's [`orderly::App`] with the built-in `webhook` job
//! type (and the service handlers `SERVICE_HANDLERS` names). Wiring only: each event delegates.

// The ledger's shards (`LEDGER = "do"`, bound as `LEDGER_OBJECT`); unused with the D1 ledger.
#[cfg(target_arch = "wasm32")]
orderly::ledger_object!(OrderlyLedger);

#[cfg(target_arch = "wasm32")]
mod events {
    use orderly::App;
    use worker::{event, Context, Env, MessageBatch, Request, Response, ScheduleContext, ScheduledEvent};

    fn app() -> App {
        App::builder().webhook().build()
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
