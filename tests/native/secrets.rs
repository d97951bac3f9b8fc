//! Secrets at rest (design §14) over the real ledger SQL: a sensitive job's payload and result reach
//! the ledger sealed (AES-256-GCM, the job id bound in), its queue message carries no payload,
//! the API shows "redacted", the handler gets the plain payload; without `PAYLOAD_KEY` sensitive
//! and `fedify` jobs are refused, and a sealed job waits (retries) instead of running wrongly.

use std::cell::RefCell;

use crate::support::api::{ApiWorld, T0};
use crate::support::AesSealer;
use base64::Engine;
use futures::executor::block_on;
use orderly::clock::Clock;
use orderly::config::Config;
use orderly::consumer::{Consumer, Incoming, Outcome, Role};
use orderly::handlers::{Done, JobContext, JobError, Runner};
use orderly::lock::MemoryKv;
use orderly::seal::{is_sealed, Sealer};
use serde_json::{json, Value};

const SECRET: &str = "-----BEGIN PRIVATE KEY----- d=hunter2";

fn key(byte: u8) -> String {
    base64::engine::general_purpose::STANDARD.encode([byte; 32])
}

/// Runs jobs, keeping the payloads it was given, answering with a result that repeats the secret.
#[derive(Default)]
struct Keeper(RefCell<Vec<Value>>);
impl Runner for Keeper {
    async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
        self.0.borrow_mut().push(job.payload.clone());
        Ok(Done { result: Some(json!({"echo": job.payload["body"]["key"]})), http_status: Some(200) })
    }
}

fn run(w: &ApiWorld, sealer: Option<&dyn Sealer>, runner: &Keeper, msgs: &[Incoming]) -> Vec<Outcome> {
    let kv = MemoryKv::new(orderly::clock::ManualClock::new(T0)); // unkeyed jobs take no lock
    let consumer =
        Consumer::new(&w.cfg, &kv, w.ledger.backend(), runner, &w.clock, &w.queue, "inv-1").with_sealer(sealer);
    block_on(consumer.process(Role::Main, msgs))
}

/// Submits `payload` as a sensitive job: its id and its queue message as the consumer gets it.
fn submit_sensitive(w: &ApiWorld, payload: &Value) -> (String, Incoming) {
    let r = w.call("POST", "/jobs", Some(json!({"payload": payload, "sensitive": true})));
    assert_eq!(r.status, 202, "{}", r.body);
    let id = r.json_body()["jobs"][0]["id"].as_str().unwrap().to_string();
    let sent = w.queue.batches.borrow().last().and_then(|b| b.last()).map(|m| m.json().to_string()).unwrap();
    (id, Incoming { id: "m1".into(), timestamp_ms: T0, body: Ok(serde_json::from_str(&sent).unwrap()) })
}

fn column(w: &ApiWorld, id: &str, col: &str) -> String {
    match w.ledger.backend().column(id, col) {
        rusqlite::types::Value::Text(t) => t,
        other => format!("{other:?}"),
    }
}

#[test]
fn a_sensitive_job_is_sealed_in_the_ledger_redacted_in_the_api_and_plain_for_its_handler() {
    let mut w = ApiWorld::new();
    w.sealer = Some(AesSealer::new(&format!("k2:{}", key(2))));
    let payload = json!({"type": "webhook", "url": "https://example.test/hook", "body": {"key": SECRET}});
    let r = w.call("POST", "/jobs", Some(json!({"payload": payload, "sensitive": true, "ordering_key": "acct"})));
    assert_eq!(r.status, 202, "{}", r.body);
    let id = r.json_body()["jobs"][0]["id"].as_str().unwrap().to_string();

    let stored = column(&w, &id, "payload");
    assert!(is_sealed(&stored) && !stored.contains("hunter2"), "sealed at rest: {stored}");
    let sent = w.queue.sent();
    assert_eq!(
        sent[0].payload,
        json!({"type": "webhook", "__orderly_sealed__": true}),
        "the message carries no payload"
    );
    let shown = w.call("GET", &format!("/jobs/{id}"), None).json_body();
    assert_eq!(shown["job"]["payload"], "redacted");

    let keeper = Keeper::default();
    let sealer = w.sealer.as_ref().map(|s| s as &dyn Sealer);
    let msg = Incoming {
        id: "m1".into(),
        timestamp_ms: T0,
        body: Ok(serde_json::from_str(w.queue.batches.borrow()[0][0].json()).unwrap()),
    };
    assert_eq!(run(&w, sealer, &keeper, &[msg]), vec![Outcome::Ack]);
    assert_eq!(keeper.0.borrow()[0], payload, "the handler gets the plain payload from the ledger");
    let result = column(&w, &id, "result");
    assert!(is_sealed(&result) && !result.contains("hunter2"), "the result is sealed too: {result}");
    assert_eq!(block_on(sealer.unwrap().open(&id, &result)).unwrap(), json!({"echo": SECRET}).to_string());
    let shown = w.call("GET", &format!("/jobs/{id}"), None).json_body();
    assert_eq!((shown["job"]["status"].as_str(), &shown["job"]["result"]), (Some("DONE"), &json!("redacted")));
    // A sealed payload moved to another job's row does not open there.
    assert!(block_on(sealer.unwrap().open("another-job", &stored)).is_err());
}

#[test]
fn without_payload_key_sensitive_and_fedify_jobs_are_refused_naming_it() {
    let mut w = ApiWorld::new();
    w.cfg = Config { service_handlers: vec![("fedify".into(), "FEDIFY".into())], ..Config::default() };
    for job in [
        json!({"payload": {"type": "webhook", "url": "https://example.test/", "body": {}}, "sensitive": true}),
        json!({"payload": {"type": "fedify", "message": {"type": "outbox"}}}),
    ] {
        let r = w.call("POST", "/jobs", Some(job.clone()));
        assert_eq!(r.status, 400, "{job}");
        assert!(r.json_body()["error"].as_str().unwrap().contains("PAYLOAD_KEY"), "{}", r.body);
    }
    assert_eq!(block_on(w.ledger.counts()).unwrap().pending, 0);
    // With a key, a fedify job is always sealed, asked or not.
    w.sealer = Some(AesSealer::new(&format!("k1:{}", key(1))));
    let r = w.call("POST", "/jobs", Some(json!({"payload": {"type": "fedify", "message": {"privateKey": SECRET}}})));
    let id = r.json_body()["jobs"][0]["id"].as_str().unwrap().to_string();
    assert!(is_sealed(&column(&w, &id, "payload")));
}

#[test]
fn a_sealed_job_without_its_key_waits_instead_of_running() {
    let mut w = ApiWorld::new();
    w.sealer = Some(AesSealer::new(&format!("old:{}", key(3))));
    let payload = json!({"type": "webhook", "url": "https://example.test/", "body": {"key": SECRET}});
    let (id, msg) = submit_sensitive(&w, &payload);
    let keeper = Keeper::default();
    // No PAYLOAD_KEY, or one that rotated the old key away: not run, put off without spending an
    // attempt, however often it comes back (MAX_ATTEMPTS is 2 here).
    w.cfg.max_attempts = 2;
    let rotated = AesSealer::new(&format!("new:{}", key(4)));
    for sealer in [None, Some(&rotated as &dyn Sealer), None, Some(&rotated as &dyn Sealer)] {
        let out = run(&w, sealer, &keeper, std::slice::from_ref(&msg));
        if w.clock.now_ms() == T0 {
            assert_eq!(out, vec![Outcome::Defer { delay_seconds: orderly::consumer::SEAL_WAIT_SECONDS }]);
        } else {
            // An old message's wait is a new message (acked, sent again), not a spent delivery.
            assert_eq!(out, vec![Outcome::Ack]);
            let again = w.queue.batches.borrow().last().and_then(|b| b.last()).cloned().unwrap();
            assert_eq!(again.delay_seconds, orderly::consumer::SEAL_WAIT_SECONDS);
            assert!(again.json().contains(&id) && !again.json().contains(SECRET), "{}", again.json());
        }
        assert!(keeper.0.borrow().is_empty(), "nothing ran");
        assert_eq!((column(&w, &id, "status"), column(&w, &id, "attempts")), ("PENDING".into(), "Integer(0)".into()));
        w.clock.advance_ms(3_600_000);
    }
    let shown = w.call("GET", &format!("/jobs/{id}"), None).json_body();
    let last = shown["history"].as_array().and_then(|h| h.last()).cloned().unwrap_or_default();
    assert_eq!(last["outcome"], "snooze", "{shown}");
    assert!(last["error"].as_str().unwrap_or_default().contains("waiting for PAYLOAD_KEY"), "{last}");
    // Rotation: the new key first, the old one still listed, opens it.
    let both = AesSealer::new(&format!("new:{},old:{}", key(4), key(3)));
    assert_eq!(run(&w, Some(&both), &keeper, &[msg]), vec![Outcome::Ack]);
    assert_eq!(keeper.0.borrow()[0], payload);
}

#[test]
fn in_strict_mode_a_sealed_head_without_its_key_holds_its_key_and_never_dies() {
    let mut w = ApiWorld::new();
    w.cfg = Config {
        ordering_mode: orderly::config::OrderingMode::Strict,
        on_dead: orderly::config::OnDead::Skip,
        max_attempts: 2,
        ..Config::default()
    };
    w.sealer = Some(AesSealer::new(&format!("k1:{}", key(1))));
    let create = json!({"type": "webhook", "url": "https://example.test/", "body": {"key": SECRET, "n": 1}});
    let update = json!({"type": "webhook", "url": "https://example.test/", "body": {"key": "plain", "n": 2}});
    let r = w.call(
        "POST",
        "/jobs",
        Some(json!({"jobs": [
            {"payload": create, "sensitive": true, "ordering_key": "note"},
            {"payload": update, "ordering_key": "note"},
        ]})),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let ids: Vec<String> =
        r.json_body()["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().into()).collect();
    let msgs: Vec<Incoming> = w.queue.batches.borrow()[0]
        .iter()
        .enumerate()
        .map(|(i, m)| Incoming {
            id: format!("m{i}"),
            timestamp_ms: T0,
            body: Ok(serde_json::from_str(m.json()).unwrap()),
        })
        .collect();
    let keeper = Keeper::default();
    for _ in 0..4 {
        run(&w, None, &keeper, &msgs);
        assert!(keeper.0.borrow().is_empty(), "neither the sealed head nor the job behind it ran");
        assert_eq!(column(&w, &ids[0], "status"), "PENDING", "never DEAD, so the key never moves past it");
        w.clock.advance_ms(3_600_000);
    }
    // The key is back: the head runs, then the job behind it.
    run(&w, w.sealer.as_ref().map(|s| s as &dyn Sealer), &keeper, &msgs);
    let ran: Vec<Value> = keeper.0.borrow().iter().map(|p| p["body"]["n"].clone()).collect();
    assert_eq!(ran, vec![json!(1), json!(2)]);
}

#[test]
fn a_submission_with_its_own_id_is_idempotent() {
    let w = ApiWorld::new();
    let job = json!({"payload": {"type": "webhook", "url": "https://example.test/", "body": {}}, "id": "fedify-msg-1"});
    let first = w.call("POST", "/jobs", Some(job.clone())).json_body();
    let again = w.call("POST", "/jobs", Some(job)).json_body();
    assert_eq!(
        (first["jobs"][0]["id"].as_str(), first["jobs"][0]["duplicate"].as_bool()),
        (Some("fedify-msg-1"), Some(false))
    );
    assert_eq!(
        (again["jobs"][0]["id"].as_str(), again["jobs"][0]["duplicate"].as_bool()),
        (Some("fedify-msg-1"), Some(true))
    );
    assert_eq!(w.queue.sent().len(), 1, "sent once");
    let reserved = w.call(
        "POST",
        "/jobs",
        Some(json!({"payload": {"type": "webhook", "url": "https://example.test/"}, "id": "counts"})),
    );
    assert_eq!(reserved.status, 400);
}

/// Fails as a webhook to a secret URL would: its error names the URL, path and query.
struct Leaky;
impl Runner for Leaky {
    async fn run(&self, _job: &JobContext<'_>) -> Result<Done, JobError> {
        Err(JobError::Retryable {
            reason: "https://example.test/hooks/s3cret-path?token=t0k: HTTP 503".into(),
            retry_after: None,
            http_status: Some(503),
        })
    }
}

#[test]
fn a_sealed_jobs_errors_keep_no_detail_in_the_ledger_the_api_or_the_log() {
    let mut w = ApiWorld::new();
    w.sealer = Some(AesSealer::new(&format!("k1:{}", key(1))));
    let payload = json!({"type": "webhook", "url": "https://example.test/hooks/s3cret-path?token=t0k", "body": {}});
    let (id, msg) = submit_sensitive(&w, &payload);
    let logged = RefCell::new(String::new());
    let log = |e: &orderly::log::Event<'_>| logged.borrow_mut().push_str(&e.json());
    let kv = MemoryKv::new(orderly::clock::ManualClock::new(T0));
    let sealer = w.sealer.as_ref().map(|s| s as &dyn Sealer);
    let consumer = Consumer::new(&w.cfg, &kv, w.ledger.backend(), &Leaky, &w.clock, &w.queue, "inv-1")
        .with_sealer(sealer)
        .with_log(&log);
    assert!(matches!(block_on(consumer.process(Role::Main, &[msg]))[0], Outcome::Retry { .. }));
    let shown = w.call("GET", &format!("/jobs/{id}"), None).body;
    let stored = column(&w, &id, "last_error");
    assert_eq!(stored, "HTTP 503 (details withheld: the job is sealed)");
    for (what, text) in [("the API", &shown), ("the log", &*logged.borrow())] {
        assert!(!text.contains("s3cret") && !text.contains("t0k"), "{what}: {text}");
    }
    assert!(shown.contains("details withheld"), "{shown}");
}

#[test]
fn a_fedify_job_sent_straight_to_the_queue_is_sealed_before_the_ledger_sees_it() {
    let mut w = ApiWorld::new();
    w.cfg.service_handlers = vec![("fedify".into(), "FEDIFY".into())];
    let body = json!({"__orderly_job__": {"id": "f1"}, "type": "fedify", "message": {"privateKey": SECRET}});
    let msg = Incoming { id: "m1".into(), timestamp_ms: T0, body: Ok(body) };
    let keeper = Keeper::default();
    // Without PAYLOAD_KEY it is not recorded at all (its keys would sit in plain), and waits.
    let out = run(&w, None, &keeper, std::slice::from_ref(&msg));
    assert_eq!(out, vec![Outcome::Defer { delay_seconds: orderly::consumer::INFRA_RETRY_DELAY_SECONDS }]);
    assert!(block_on(w.ledger.get("f1")).unwrap().is_none(), "nothing recorded");
    assert!(keeper.0.borrow().is_empty());
    // With it, the row is sealed, and its handler gets the message in plain.
    let sealer = AesSealer::new(&format!("k1:{}", key(5)));
    assert_eq!(run(&w, Some(&sealer), &keeper, &[msg]), vec![Outcome::Ack]);
    let stored = column(&w, "f1", "payload");
    assert!(is_sealed(&stored) && !stored.contains(SECRET), "{stored}");
    assert_eq!(keeper.0.borrow()[0]["message"]["privateKey"], SECRET);
}
