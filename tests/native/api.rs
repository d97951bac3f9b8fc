//! The HTTP API and cron maintenance on the host: real SQLite ledger, a queue fake that keeps
//! what it was sent (and can go down).

use crate::support::api::{ApiWorld, METRICS_TOKEN, PRODUCER_TOKEN, T0, TOKEN};
use futures::executor::block_on;
use orderly::api::{ApiRequest, ApiResponse, MAX_BODY_BYTES};
use orderly::config::Config;
use orderly::ledger::{stmt, JobSpec, Lease, Sql, Status};
use orderly::maintenance::{self, RESEND_GRACE_MS};
use serde_json::{json, Value};

type World = ApiWorld;

fn webhook(n: u32) -> Value {
    json!({"type": "webhook", "url": "https://example.test/hook", "body": {"n": n}})
}

#[test]
fn the_api_refuses_missing_and_wrong_tokens() {
    let w = World::new();
    assert_eq!(w.call_with(None, Ok(&w.cfg), "GET", "/jobs/counts", None).status, 401);
    assert_eq!(w.call_with(Some("wrong"), Ok(&w.cfg), "GET", "/jobs/counts", None).status, 401);
    assert_eq!(w.call_with(Some(""), Ok(&w.cfg), "POST", "/jobs", Some(json!({"payload": 1}))).status, 401);
    let r = w.call_with(Some(TOKEN), Ok(&w.cfg), "GET", "/jobs/counts", None);
    assert_eq!(r.status, 200);
    assert!(w.queue.sent().is_empty());
}

#[test]
fn without_a_configured_token_the_api_answers_503() {
    let w = World::new();
    let api = w.api(Ok(&w.cfg), None, &|| "x".into());
    let req = ApiRequest {
        method: "GET".into(),
        path: "/jobs/counts".into(),
        authorization: Some(format!("Bearer {TOKEN}")),
        ..Default::default()
    };
    let r = block_on(api.handle(&req));
    assert_eq!(r.status, 503);
    assert!(r.json_body()["error"].as_str().unwrap().contains("ADMIN_TOKEN"));
}

#[test]
fn a_bad_var_makes_the_api_answer_500_naming_it() {
    let w = World::new();
    let err = Config::from_lookup(|k| (k == "MAX_ATTEMPTS").then(|| "many".to_string())).unwrap_err();
    let r = w.call_with(Some(TOKEN), Err(&err), "GET", "/jobs/counts", None);
    assert_eq!(r.status, 500);
    let msg = r.json_body()["error"].as_str().unwrap().to_string();
    assert!(msg.contains("MAX_ATTEMPTS") && msg.contains("many"), "{msg}");
}

#[test]
fn a_delay_may_be_a_whole_day_as_queues_allows_and_no_longer() {
    // Cloudflare Queues takes send and retry delays up to 24 hours since 2026-02 (12 before).
    let w = World::new();
    let job = |delay: u32| json!({"payload": {"type": "webhook", "url": "https://x.test"}, "delay_seconds": delay});
    let r = w.call("POST", "/jobs", Some(job(86_400)));
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(w.queue.batches.borrow()[0][0].delay_seconds, 86_400);
    let r = w.call("POST", "/jobs", Some(job(86_401)));
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json_body()["error"].as_str().unwrap_or_default().contains("delay_seconds"), "{}", r.body);
}

#[test]
fn a_submitted_job_is_recorded_pending_and_sent_intact() {
    let w = World::new();
    let payload = json!({"type": "webhook", "url": "https://x.test", "body": {"deep": [1, {"a": null}]}});
    let r = w.call(
        "POST",
        "/jobs",
        Some(json!({"payload": payload, "ordering_key": "actor:1", "delay_seconds": 30, "max_attempts": 4})),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.json_body(), json!({"jobs": [{"id": "job-001", "status": "PENDING", "duplicate": false}]}));
    let j = block_on(w.ledger.get("job-001")).unwrap().unwrap();
    assert_eq!(
        (j.status, j.max_attempts, j.next_run_at, j.ordering_key.as_deref()),
        (Status::Pending, 4, T0 + 30_000, Some("actor:1"))
    );
    let sent = w.queue.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].payload, payload);
    assert_eq!(sent[0].ordering_key.as_deref(), Some("actor:1"));
    assert_eq!(sent[0].meta.id.as_deref(), Some("job-001"));
    assert_eq!(w.queue.batches.borrow()[0][0].delay_seconds, 30);
}

#[test]
fn many_jobs_are_sent_in_batches_of_at_most_one_hundred() {
    let w = World::new();
    let jobs: Vec<Value> = (0..250).map(|n| json!({"payload": webhook(n)})).collect();
    let r = w.call("POST", "/jobs", Some(json!({ "jobs": jobs })));
    assert_eq!(r.status, 202);
    assert_eq!(w.queue.batches.borrow().iter().map(Vec::len).collect::<Vec<_>>(), vec![100, 100, 50]);
    assert_eq!(block_on(w.ledger.counts()).unwrap().pending, 250);
}

#[test]
fn an_active_dedupe_key_answers_with_the_existing_job() {
    let w = World::new();
    let job = json!({"payload": webhook(1), "dedupe_key": "order-7"});
    let first = w.call("POST", "/jobs", Some(job.clone())).json_body();
    let second = w.call("POST", "/jobs", Some(job)).json_body();
    assert_eq!(second["jobs"][0], json!({"id": first["jobs"][0]["id"], "status": "PENDING", "duplicate": true}));
    assert_eq!(w.queue.sent().len(), 1, "the duplicate is not sent");
}

#[test]
fn bad_submissions_get_4xx_with_a_json_error() {
    let w = World::new();
    for (body, status, want) in [
        (json!("text"), 400, "job object"),
        (json!({"jobs": "x"}), 400, "array"),
        (json!({"jobs": []}), 400, "no jobs"),
        (
            json!({"jobs": [{"payload": webhook(1)}, {"payload": webhook(2), "delay_seconds": 99999}]}),
            400,
            "delay_seconds",
        ),
        (json!({"payload": webhook(1), "colour": "red"}), 400, "unknown field"),
        (json!({"payload": {"type": "fax"}}), 400, "unknown job type"),
        (json!({"payload": {"type": "webhook", "url": "mailto:x"}}), 400, "bad webhook payload"),
    ] {
        let r = w.call("POST", "/jobs", Some(body.clone()));
        assert_eq!(r.status, status, "{body}");
        assert!(r.json_body()["error"].as_str().unwrap().contains(want), "{body}: {}", r.body);
    }
    let r = w.call(
        "POST",
        "/jobs",
        Some(json!({"jobs": [{"payload": webhook(1)}, {"payload": webhook(2), "delay_seconds": 99999}]})),
    );
    assert_eq!(r.json_body()["index"], 1);
    // Each job is within the message limit; together they pass the body limit.
    let part = json!({"payload": {"type": "webhook", "url": "https://x.test", "body": "x".repeat(64 * 1024)}});
    let huge = json!({ "jobs": vec![part; MAX_BODY_BYTES / (64 * 1024) + 1] });
    assert_eq!(w.call("POST", "/jobs", Some(huge)).status, 413);
    let r = w.call_with(Some(TOKEN), Ok(&w.cfg), "POST", "/jobs", None);
    assert_eq!(r.status, 400);
    assert!(w.queue.sent().is_empty(), "nothing of a refused request is sent");
    assert_eq!(block_on(w.ledger.counts()).unwrap().pending, 0, "nothing of a refused request is recorded");
}

#[test]
fn a_queue_outage_answers_503_and_keeps_the_jobs_pending() {
    let w = World::new();
    w.queue.down.set(true);
    let r = w.call("POST", "/jobs", Some(json!({"payload": webhook(1)})));
    assert_eq!(r.status, 503);
    assert_eq!(r.json_body()["jobs"][0]["status"], "PENDING");
    assert_eq!(block_on(w.ledger.counts()).unwrap().pending, 1);
}

#[test]
fn counts_list_and_get() {
    let w = World::new();
    for n in 0..5 {
        w.clock.advance_ms(1);
        w.call("POST", "/jobs", Some(json!({"payload": webhook(n)})));
    }
    assert_eq!(
        w.call("GET", "/jobs/counts", None).json_body(),
        json!({"PENDING": 5, "RUNNING": 0, "DONE": 0, "DEAD": 0})
    );
    let page = w.call("GET", "/jobs?status=PENDING&limit=2", None).json_body();
    assert_eq!(
        page["jobs"].as_array().unwrap().iter().map(|j| j["id"].clone()).collect::<Vec<_>>(),
        vec![json!("job-005"), json!("job-004")]
    );
    let cursor = page["next_cursor"].as_str().unwrap();
    let next = w.call("GET", &format!("/jobs?status=PENDING&limit=2&cursor={cursor}"), None).json_body();
    assert_eq!(next["jobs"][0]["id"], "job-003");
    assert_eq!(w.call("GET", "/jobs?status=LOST", None).status, 400);
    assert_eq!(w.call("GET", "/jobs?limit=0", None).status, 400);
    assert_eq!(w.call("GET", "/jobs?cursor=zzz", None).status, 400);
    let one = w.call("GET", "/jobs/job-002", None).json_body();
    assert_eq!(one["job"]["payload"], webhook(1), "the payload is shown as JSON");
    assert_eq!(w.call("GET", "/jobs/nope", None).status, 404);
    assert_eq!(w.call("DELETE", "/jobs/job-002", None).status, 405);
    assert_eq!(w.call("GET", "/elsewhere", None).status, 404);
}

#[test]
fn redrive_resends_a_dead_job_and_refuses_others() {
    let w = World::new();
    let spec = JobSpec {
        id: "d1".into(),
        job_type: Some("webhook".into()),
        ordering_key: Some("k".into()),
        dedupe_key: None,
        limit_key: None,
        deadline_at: None,
        timeout_seconds: None,
        payload: Some(webhook(9).to_string()),
        max_attempts: 2,
        priority: 5,
    };
    block_on(w.ledger.backend().query(stmt::record_dead(&spec, T0, "HTTP 500 (attempt 2 of 2)"))).unwrap();
    let r = w.call("POST", "/jobs/d1/redrive", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json_body()["job"]["status"], "PENDING");
    let sent = w.queue.sent();
    assert_eq!(
        (sent[0].meta.id.as_deref(), sent[0].ordering_key.as_deref(), &sent[0].payload),
        (Some("d1"), Some("k"), &webhook(9))
    );
    let again = w.call("POST", "/jobs/d1/redrive", None);
    assert_eq!(again.status, 409);
    assert_eq!(w.call("POST", "/jobs/none/redrive", None).status, 404);
}

#[test]
fn the_dashboard_shell_needs_no_token_and_holds_no_data() {
    let w = World::new();
    let secret = json!({"type": "webhook", "url": "https://example.test/hook", "body": {"card": "4111-secret"}});
    let r = w.call("POST", "/jobs", Some(json!({"payload": secret, "ordering_key": "acct-secret-key"})));
    assert_eq!(r.status, 202);
    let id = r.json_body()["jobs"][0]["id"].as_str().unwrap().to_string();
    let r = w.call_with(None, Ok(&w.cfg), "GET", "/", None);
    assert_eq!((r.status, r.content_type), (200, "text/html; charset=utf-8"));
    assert!(r.body.contains("Dead letters"));
    for data in [id.as_str(), "4111-secret", "acct-secret-key", "example.test"] {
        assert!(!r.body.contains(data), "the page served without a token carries {data:?}");
    }
}

fn seed_running(w: &World, id: &str, max_attempts: u32, now: i64) {
    let spec = JobSpec {
        id: id.into(),
        job_type: Some("webhook".into()),
        ordering_key: None,
        dedupe_key: None,
        limit_key: None,
        deadline_at: None,
        timeout_seconds: None,
        payload: Some(webhook(0).to_string()),
        max_attempts,
        priority: 5,
    };
    block_on(w.ledger.backend().query(stmt::claim(
        &spec,
        "dead-invocation",
        Lease { now, until: now + 120_000, due_before: now },
    )))
    .unwrap();
}

#[test]
fn maintenance_reaps_expired_leases_and_resends_them() {
    let w = World::new();
    seed_running(&w, "a", 8, T0);
    seed_running(&w, "b", 1, T0);
    w.clock.advance_ms(120_000);
    let r = block_on(maintenance::run(&w.ledger, &w.queue, &w.clock, &w.cfg));
    assert_eq!((r.reaped, r.reaped_dead), (1, 1));
    assert_eq!(w.queue.sent().iter().map(|e| e.meta.id.clone().unwrap()).collect::<Vec<_>>(), vec!["a"]);
    let a = block_on(w.ledger.get("a")).unwrap().unwrap();
    assert_eq!((a.status, a.attempts), (Status::Pending, 1));
    assert_eq!(block_on(w.ledger.get("b")).unwrap().unwrap().status, Status::Dead);
    // Idempotent: a second run finds nothing more to do.
    assert_eq!(block_on(maintenance::run(&w.ledger, &w.queue, &w.clock, &w.cfg)), maintenance::Report::default());
}

#[test]
fn maintenance_resends_overdue_pending_jobs_once_and_purges_old_done_rows() {
    let w = World::new();
    w.call("POST", "/jobs", Some(json!({"payload": webhook(1)})));
    seed_running(&w, "done", 8, T0);
    block_on(w.ledger.backend().query(stmt::complete("done", "dead-invocation", T0, None, None))).unwrap();
    w.clock.advance_ms(RESEND_GRACE_MS + 1);
    let r = block_on(maintenance::run(&w.ledger, &w.queue, &w.clock, &w.cfg));
    assert_eq!((r.resent, r.purged), (1, 0));
    assert_eq!(w.queue.sent().len(), 2, "the original send and one re-send");
    assert_eq!(block_on(maintenance::run(&w.ledger, &w.queue, &w.clock, &w.cfg)).resent, 0);
    w.clock.advance_ms(7 * 86_400_000);
    assert_eq!(block_on(maintenance::run(&w.ledger, &w.queue, &w.clock, &w.cfg)).purged, 1);
    assert!(block_on(w.ledger.get("done")).unwrap().is_none());
    assert!(block_on(w.ledger.get("job-001")).unwrap().is_some(), "PENDING rows are never purged");
}

fn gate(token: Option<&str>, authorization: Option<&str>, method: &str, path: &str) -> Option<ApiResponse> {
    let w = World::new();
    let api = w.api(Ok(&w.cfg), token, &|| "x".into());
    api.gate(method, path, authorization)
}

#[test]
fn the_bearer_scheme_is_case_insensitive_and_a_padded_token_still_matches() {
    assert!(gate(Some(TOKEN), Some(&format!("bearer {TOKEN}")), "GET", "/jobs").is_none());
    assert!(gate(Some(TOKEN), Some(&format!("BEARER  {TOKEN} ")), "GET", "/jobs").is_none());
    assert!(gate(Some(&format!(" {TOKEN}\n")), Some(&format!("Bearer {TOKEN}")), "GET", "/jobs").is_none());
    assert_eq!(gate(Some(TOKEN), Some(&format!("Basic {TOKEN}")), "GET", "/jobs").map(|r| r.status), Some(401));
}

#[test]
fn a_short_admin_token_is_a_configuration_error() {
    let r = gate(Some("x"), Some("Bearer x"), "GET", "/jobs").expect("refused");
    assert_eq!(r.status, 500);
    assert!(r.json_body()["error"].as_str().unwrap().contains("shorter than 16"));
}

#[test]
fn the_gate_answers_without_the_body_and_serves_the_dashboard_with_a_strict_policy() {
    assert_eq!(gate(Some(TOKEN), None, "POST", "/jobs").map(|r| r.status), Some(401));
    let page = gate(Some(TOKEN), None, "GET", "/").expect("the page");
    let csp = page.headers.iter().find(|(n, _)| *n == "content-security-policy").map(|(_, v)| v.clone()).unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(csp.contains("script-src 'sha256-") && !csp.contains("unsafe-inline"), "{csp}");
}

#[test]
fn lists_leave_payloads_out_and_one_job_has_it() {
    let w = World::new();
    let r = w.call("POST", "/jobs", Some(json!({"payload": webhook(1)})));
    let id = r.json_body()["jobs"][0]["id"].as_str().unwrap().to_string();
    let list = w.call("GET", "/jobs", None).json_body();
    assert!(list["jobs"][0].get("payload").is_none(), "{list}");
    assert!(list["jobs"][0].get("result").is_none(), "{list}");
    assert_eq!(list["jobs"][0]["id"], json!(id));
    let keys: Vec<&String> = list["jobs"][0].as_object().unwrap().keys().collect();
    assert_eq!(keys[..3], ["id", "type", "status"], "fields keep their order");
    assert_eq!(w.call("GET", &format!("/jobs/{id}"), None).json_body()["job"]["payload"], webhook(1));
}

#[test]
fn a_submission_takes_one_statement_per_job_and_at_most_500_jobs() {
    let w = World::new();
    let jobs: Vec<Value> = (0..500).map(|n| json!({"payload": webhook(n)})).collect();
    let before = w.ledger.backend().round_trips.get();
    assert_eq!(w.call("POST", "/jobs", Some(json!({"jobs": jobs}))).status, 202);
    assert_eq!(w.ledger.backend().round_trips.get() - before, 1, "no duplicates: one round trip");
    let too_many: Vec<Value> = (0..501).map(|n| json!({"payload": webhook(n)})).collect();
    assert_eq!(w.call("POST", "/jobs", Some(json!({"jobs": too_many}))).status, 413);
}

#[test]
fn maintenance_dead_letters_a_job_too_large_to_send_and_goes_on() {
    let w = World::new();
    w.call("POST", "/jobs", Some(json!({"payload": webhook(1)})));
    // Recorded before the limit was right (or by a direct producer whose body grows when orderly
    // re-wraps it): its message can never be sent.
    let big = JobSpec {
        id: "big".into(),
        job_type: Some("webhook".into()),
        ordering_key: None,
        dedupe_key: None,
        limit_key: None,
        deadline_at: None,
        timeout_seconds: None,
        payload: Some(
            json!({"type": "webhook", "url": "https://example.test/", "body": "x".repeat(130_000)}).to_string(),
        ),
        max_attempts: 8,
        priority: 5,
    };
    block_on(w.ledger.enqueue_all(&[orderly::ledger::Submit::due(&big, T0)], T0)).unwrap();
    w.clock.advance_ms(RESEND_GRACE_MS + 1);
    let r = block_on(maintenance::run(&w.ledger, &w.queue, &w.clock, &w.cfg));
    assert_eq!(r.errors, Vec::<String>::new());
    let dead = block_on(w.ledger.get("big")).unwrap().unwrap();
    assert_eq!(dead.status, Status::Dead);
    assert!(dead.last_error.as_deref().unwrap().contains("128,000"), "{:?}", dead.last_error);
    assert_eq!(w.queue.sent().len(), 2, "the other job was re-sent");
    assert!(w.queue.batches.borrow().iter().flatten().all(orderly::producer::OutMessage::fits));
}

#[test]
fn a_failed_send_does_not_stop_the_rest_of_maintenance() {
    let w = World::new();
    seed_running(&w, "a", 8, T0);
    seed_running(&w, "done", 8, T0);
    block_on(w.ledger.backend().query(stmt::complete("done", "dead-invocation", T0, None, None))).unwrap();
    w.clock.advance_ms(8 * 86_400_000);
    w.queue.down.set(true);
    let r = block_on(maintenance::run(&w.ledger, &w.queue, &w.clock, &w.cfg));
    assert_eq!(r.reaped, 0);
    assert!(r.errors.iter().any(|e| e.starts_with("reap:")), "{:?}", r.errors);
    assert_eq!(r.purged, 1, "the purge still ran");
    // The reaped job is PENDING; once Queues is back, the overdue step sends it.
    w.queue.down.set(false);
    w.clock.advance_ms(RESEND_GRACE_MS + 1);
    assert_eq!(block_on(maintenance::run(&w.ledger, &w.queue, &w.clock, &w.cfg)).resent, 1);
}

#[test]
fn a_dead_job_without_a_readable_payload_is_not_redriven() {
    let w = World::new();
    let unreadable = crate::support::unreadable_spec("bytes");
    block_on(w.ledger.backend().query(stmt::record_dead(&unreadable, T0, "body is bytes"))).unwrap();
    let r = w.call("POST", "/jobs/bytes/redrive", None);
    assert_eq!(r.status, 409);
    let j = block_on(w.ledger.get("bytes")).unwrap().unwrap();
    assert_eq!((j.status, j.last_error.as_deref()), (Status::Dead, Some("body is bytes")), "left as it was");
}

#[test]
fn the_producer_token_submits_and_reads_state_and_nothing_else() {
    let w = World::new();
    let p = |method: &str, path: &str, body: Option<Value>| {
        w.call_with(Some(PRODUCER_TOKEN), Ok(&w.cfg), method, path, body)
    };
    let r = p("POST", "/jobs", Some(json!({"payload": webhook(1), "ordering_key": "k"})));
    assert_eq!(r.status, 202, "{}", r.body);
    let id = r.json_body()["jobs"][0]["id"].as_str().unwrap().to_string();
    let state = p("GET", &format!("/jobs/{id}"), None);
    assert_eq!(state.status, 200, "{}", state.body);
    let job = &state.json_body()["job"];
    assert_eq!((job["status"].as_str(), job["ordering_key"].as_str()), (Some("PENDING"), Some("k")));
    for hidden in ["payload", "result", "last_error"] {
        assert!(job.get(hidden).is_none(), "{hidden} is not a producer's to read: {}", state.body);
    }
    assert!(state.json_body().get("history").is_none());
    assert_eq!(p("GET", "/jobs/counts", None).status, 200);
    for (method, path) in [
        ("GET", "/jobs".to_string()),
        ("POST", format!("/jobs/{id}/cancel")),
        ("POST", format!("/jobs/{id}/redrive")),
        ("POST", "/jobs/redrive".to_string()),
        ("GET", "/keys".to_string()),
        ("POST", "/keys/k/skip".to_string()),
        ("GET", "/jobs/activity".to_string()),
        ("GET", "/limits".to_string()),
        ("PUT", "/keys/k".to_string()),
        ("POST", "/admin/migrate".to_string()),
        ("GET", "/ledger/move".to_string()),
    ] {
        let r = p(method, &path, Some(json!({})));
        assert_eq!(r.status, 403, "{method} {path}: {}", r.body);
        assert!(r.json_body()["error"].as_str().unwrap().contains("ADMIN_TOKEN"));
    }
    assert_eq!(
        w.call("GET", &format!("/jobs/{id}"), None).json_body()["job"]["payload"],
        webhook(1),
        "the admin reads all"
    );
    // The producer's token cannot be the admin's, nor short.
    let mut api = w.api(Ok(&w.cfg), Some(TOKEN), &|| "x".into());
    api.producer_token = Some(TOKEN);
    assert_eq!(api.gate("GET", "/jobs", Some(&format!("Bearer {TOKEN}"))).map(|r| r.status), Some(500));
    api.producer_token = Some("short");
    assert_eq!(api.gate("POST", "/jobs", Some("Bearer short")).map(|r| r.status), Some(500));
}

/// A scraper's credential reads `GET /metrics` and nothing else: it holds no power to submit,
/// cancel, redrive, migrate or move, nor to read a job.
#[test]
fn the_metrics_token_reads_the_metrics_and_nothing_else() {
    let w = World::new();
    let m = |method: &str, path: &str| w.call_with(Some(METRICS_TOKEN), Ok(&w.cfg), method, path, Some(json!({})));
    let r = m("GET", "/metrics");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("orderly_jobs"), "{}", r.body);
    for (method, path) in [
        ("POST", "/jobs"),
        ("GET", "/jobs/counts"),
        ("GET", "/jobs/x"),
        ("GET", "/jobs"),
        ("POST", "/jobs/cancel"),
        ("POST", "/jobs/redrive"),
        ("POST", "/admin/migrate"),
        ("GET", "/ledger/move"),
        ("GET", "/limits"),
    ] {
        let r = m(method, path);
        assert_eq!(r.status, 403, "{method} {path}: {}", r.body);
        assert!(r.json_body()["error"].as_str().unwrap().contains("METRICS_TOKEN may only read GET /metrics"));
    }
    // The admin still scrapes; the producer does not.
    assert_eq!(w.call("GET", "/metrics", None).status, 200);
    assert_eq!(w.call_with(Some(PRODUCER_TOKEN), Ok(&w.cfg), "GET", "/metrics", None).status, 403);
    // It can be neither the admin's token, nor the producer's, nor short.
    let mut api = w.api(Ok(&w.cfg), Some(TOKEN), &|| "x".into());
    for bad in [TOKEN, PRODUCER_TOKEN, "short"] {
        api.metrics_token = Some(bad);
        assert_eq!(api.gate("GET", "/metrics", Some(&format!("Bearer {bad}"))).map(|r| r.status), Some(500), "{bad}");
    }
}

#[test]
fn an_operator_pauses_a_limit_key_sets_its_policy_and_a_resume_wakes_its_parked_jobs() {
    let mut w = World::new();
    w.cfg.limits = orderly::flow::Policies::parse(r#"{"host*": {"concurrency": 4}}"#).unwrap();
    // A key no job has used yet is shown with its configured policy.
    let r = w.call("GET", "/limits/host.example", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json_body()["policy"], json!({"concurrency": 4}));
    assert_eq!((r.json_body()["paused"].clone(), r.json_body()["waiting"].clone()), (json!(false), json!(0)));
    // A submitted job carries its limit key to the ledger and the queue.
    let r = w.call("POST", "/jobs", Some(json!({"payload": webhook(1), "limit_key": "host.example"})));
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(block_on(w.ledger.get("job-001")).unwrap().unwrap().limit_key.as_deref(), Some("host.example"));
    assert_eq!(w.queue.sent()[0].meta.limit_key.as_deref(), Some("host.example"));

    let r =
        w.call("PUT", "/limits/host.example", Some(json!({"paused": true, "policy": {"rate": 2, "concurrency": 1}})));
    assert_eq!(r.status, 200, "{}", r.body);
    let shown = r.json_body();
    assert_eq!((shown["paused"].clone(), shown["overridden"].clone()), (json!(true), json!(true)));
    assert_eq!(shown["policy"], json!({"rate": 2, "per_seconds": 1, "burst": 1, "concurrency": 1}));
    assert_eq!(shown["configured"], json!({"concurrency": 4}));
    // The job asks to start while the key is paused: it is parked.
    let ask = orderly::ledger::limit::Ask {
        limit_key: "host.example",
        job_id: "job-001",
        route: block_on(w.ledger.get("job-001")).unwrap().unwrap().route(),
        until: T0 + 120_000,
        policy: w.cfg.limits.for_key("host.example"),
        pace_ms: 0,
    };
    let refused = block_on(w.ledger.acquire(&ask, T0)).unwrap();
    assert_eq!(refused, orderly::ledger::limit::Permit::Refused(orderly::flow::Refusal::Paused));
    assert_eq!(w.call("GET", "/limits", None).json_body()["limits"][0]["waiting"], json!(1));
    // Resumed: the parked job is sent again.
    let before = w.queue.sent().len();
    let r = w.call("PUT", "/limits/host.example", Some(json!({"paused": false, "policy": null})));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!((r.json_body()["overridden"].clone(), r.json_body()["waiting"].clone()), (json!(false), json!(0)));
    let sent = w.queue.sent();
    assert_eq!(sent.len(), before + 1);
    assert_eq!(sent[before].meta.id.as_deref(), Some("job-001"));

    for (body, says) in [
        (json!({}), "nothing to change"),
        (json!({"policy": {"concurrency": 0}}), "concurrency must be from 1"),
        (json!({"paused": 1}), "true or false"),
    ] {
        let r = w.call("PUT", "/limits/host.example", Some(body));
        assert_eq!(r.status, 400);
        assert!(r.json_body()["error"].as_str().unwrap().contains(says), "{}", r.body);
    }
}

/// While the ledger is being moved (`LEDGER_MOVING = "true"`), every write is refused with a 503
/// that says why and when to try again, and nothing is recorded; reads still answer (design §19.7).
#[test]
fn while_the_ledger_moves_every_write_is_refused_and_reads_answer() {
    let mut w = ApiWorld::new();
    assert_eq!(w.call("POST", "/jobs", Some(json!({"id": "before", "payload": webhook(0)}))).status, 202);
    w.cfg = Config::from_lookup(|k| (k == "LEDGER_MOVING").then(|| "true".to_string())).expect("LEDGER_MOVING reads");
    for (method, path, body) in [
        ("POST", "/jobs", Some(json!({"id": "during", "payload": webhook(1)}))),
        ("POST", "/jobs/before/cancel", None),
        ("PUT", "/keys/k", Some(json!({"paused": true}))),
        ("POST", "/jobs/cancel", Some(json!({"filter": {"type": "webhook"}}))),
    ] {
        let r = w.call(method, path, body);
        assert_eq!(r.status, 503, "{method} {path}: {}", r.body);
        assert!(r.json_body()["error"].as_str().unwrap_or_default().contains("being moved"), "{}", r.body);
        assert!(r.headers.iter().any(|(h, v)| *h == "retry-after" && v == "60"), "{:?}", r.headers);
    }
    assert_eq!(w.call("GET", "/jobs/during", None).status, 404, "nothing recorded");
    assert_eq!(w.call("GET", "/jobs/before", None).json_body()["job"]["status"], json!("PENDING"), "not cancelled");
    assert_eq!(w.call("GET", "/jobs/counts", None).status, 200, "reads answer");
    assert!(w.queue.sent().len() <= 1, "nothing sent during the move");
    assert!(Config::from_lookup(|k| (k == "LEDGER_MOVING").then(|| "yes".to_string())).is_err());
}
