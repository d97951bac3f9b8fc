//! A worker with a job type of its own: `archive` fetches a page and keeps a copy in R2, in each
//! key's order, with orderly's retries, snoozes, history and dashboard. The whole worker is this
//! file: the handler, the list of job types, the three events delegating to `orderly::App`, and a
//! producer: every cron run enqueues an archive of each page `ARCHIVE_URLS` lists.

// The ledger's shard class, for `LEDGER = "do"` (wrangler.toml binds it as LEDGER_OBJECT); a worker
// that keeps the D1 ledger may leave it out.
#[cfg(target_arch = "wasm32")]
orderly::ledger_object!(OrderlyLedger);

#[cfg(target_arch = "wasm32")]
mod worker_app {
    use orderly::{App, Cx, Done, Enqueue, Job, JobError};
    use serde::Deserialize;
    use worker::{event, Context, Env, Fetch, MessageBatch, Request, Response, ScheduleContext, ScheduledEvent};

    /// `{"type": "archive", "url": "https://...", "key": "pages/home.html"}`
    #[derive(Deserialize)]
    struct Archive {
        url: String,
        key: String,
    }

    /// Fetches `url` and stores its body in the `ARCHIVE` bucket under `key`. A rate limit (429)
    /// is waited out with a snooze, which spends no attempt; a 5xx or a network error is retried
    /// with backoff; any other refusal is permanent.
    async fn archive(job: Job<Archive>, cx: Cx<Env>) -> Result<Done, JobError> {
        let mut resp = Fetch::Url(job.url.parse().map_err(|e| JobError::permanent(format!("url: {e}")))?)
            .send()
            .await
            .map_err(|e| JobError::retry(format!("fetch failed: {e}")))?;
        let status = resp.status_code();
        match status {
            200..=299 => {}
            429 => {
                let wait = resp.headers().get("retry-after").ok().flatten().and_then(|v| v.parse().ok()).unwrap_or(30);
                return Err(JobError::Snooze {
                    seconds: wait,
                    reason: "rate limited".into(),
                    http_status: Some(429),
                    payload: None,
                });
            }
            500..=599 => {
                return Err(JobError::Retryable {
                    reason: format!("HTTP {status}"),
                    retry_after: None,
                    http_status: Some(status),
                })
            }
            _ => return Err(JobError::Permanent { reason: format!("HTTP {status}"), http_status: Some(status) }),
        }
        let body = resp.bytes().await.map_err(|e| JobError::retry(format!("body: {e}")))?;
        let bucket = cx.env().bucket("ARCHIVE").map_err(|e| JobError::permanent(format!("no ARCHIVE bucket: {e}")))?;
        bucket.put(&job.key, body.clone()).execute().await.map_err(|e| JobError::retry(format!("R2: {e}")))?;
        Ok(Done { result: Some(serde_json::json!({"key": job.key, "bytes": body.len()})), http_status: Some(status) })
    }

    fn app() -> App {
        App::builder().handler("archive", archive).webhook().build()
    }

    #[event(queue)]
    async fn queue(batch: MessageBatch<serde_json::Value>, env: Env, ctx: Context) -> worker::Result<()> {
        app().queue(batch, env, ctx).await
    }

    #[event(fetch)]
    async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
        app().fetch(req, env, ctx).await
    }

    /// orderly's maintenance, then this cron run's archive jobs: one per page of `ARCHIVE_URLS`
    /// (comma-separated), each page's in order (its URL is the ordering key), at most one per
    /// page and hour (the dedupe key).
    #[event(scheduled)]
    async fn scheduled(event: ScheduledEvent, env: Env, ctx: ScheduleContext) {
        let app = app();
        app.scheduled(event, env.clone(), ctx).await;
        let urls = env.var("ARCHIVE_URLS").map(|v| v.to_string()).unwrap_or_default();
        let hour = worker::Date::now().as_millis() / 3_600_000;
        let jobs: Vec<(serde_json::Value, Enqueue)> = urls
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(|url| {
                let key = format!("{}/{hour}.html", url.trim_start_matches("https://").trim_start_matches("http://"));
                let payload = serde_json::json!({"type": "archive", "url": url, "key": key});
                let options = Enqueue { dedupe_key: Some(format!("{url}@{hour}")), ..Enqueue::key(url) };
                (payload, options)
            })
            .collect();
        if !jobs.is_empty() {
            if let Err(e) = app.enqueue_all(&env, jobs).await {
                worker::console_error!("archive jobs not enqueued: {e}");
            }
        }
    }
}
