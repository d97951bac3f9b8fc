//! Enqueueing from Rust (`orderly::enqueue::Producer`) over the real ledger SQL: the same options,
//! checks and limits as `POST /jobs`, because it runs the API's own submission.

use crate::support::api::{ApiWorld, T0};
use futures::executor::block_on;
use orderly::api::Submitted;
use orderly::app::BuiltIn;
use orderly::enqueue::{Enqueue, EnqueueError, Producer};
use orderly::ledger::Status;
use serde_json::json;

fn webhook(n: u32) -> serde_json::Value {
    json!({"type": "webhook", "url": "https://example.test/hook", "body": {"n": n}})
}

#[test]
fn a_rust_producer_records_and_sends_with_every_option() {
    let w = ApiWorld::new();
    let ids = std::cell::Cell::new(0);
    let new_id = || {
        ids.set(ids.get() + 1);
        format!("rs-{}", ids.get())
    };
    let p = Producer::new(&w.ledger, &w.queue, &w.clock, &w.cfg, &BuiltIn, &new_id, None);
    let options = Enqueue {
        ordering_key: Some("acct/1".into()),
        dedupe_key: Some("welcome-1".into()),
        delay_seconds: 30,
        max_attempts: Some(3),
        priority: Some(1),
        deadline_seconds: Some(3_600),
        timeout_seconds: Some(20),
        ..Enqueue::default()
    }
    .limited("host.example");
    let job = block_on(p.enqueue(webhook(1), &options)).unwrap();
    assert_eq!(
        job,
        Submitted { id: "rs-1".into(), status: Status::Pending, duplicate: false, replaced: false, superseded: None }
    );
    let row = block_on(w.ledger.get("rs-1")).unwrap().unwrap();
    assert_eq!(
        (row.ordering_key.as_deref(), row.dedupe_key.as_deref(), row.max_attempts, row.priority, row.next_run_at),
        (Some("acct/1"), Some("welcome-1"), 3, 1, T0 + 30_000)
    );
    assert_eq!(row.limit_key.as_deref(), Some("host.example"));
    assert_eq!((row.deadline_at, row.timeout_seconds), (Some(T0 + 3_600_000), Some(20)));
    let sent = w.queue.sent_with_delay();
    assert_eq!((sent[0].0.meta.deadline_at, sent[0].0.meta.timeout_seconds), (Some(T0 + 3_600_000), Some(20)));
    assert_eq!(
        (sent[0].0.meta.id.as_deref(), sent[0].0.ordering_key.as_deref(), sent[0].1),
        (Some("rs-1"), Some("acct/1"), 30)
    );
    // The same dedupe key while the first is active: the first job, marked a duplicate.
    let again = block_on(p.enqueue(webhook(2), &options)).unwrap();
    assert_eq!((again.id.as_str(), again.duplicate), ("rs-1", true));
    // With `on_duplicate: replace` (design §22.3) the PENDING holder takes the newer payload.
    let replacing = Enqueue { on_duplicate: Some(orderly::ledger::OnDuplicate::Replace), ..options.clone() };
    let replaced = block_on(p.enqueue(webhook(7), &replacing)).unwrap();
    assert_eq!((replaced.id.as_str(), replaced.replaced), ("rs-1", true));
    let row = block_on(w.ledger.get("rs-1")).unwrap().unwrap();
    assert!(row.payload.as_deref().is_some_and(|p| p.contains("\"n\":7")), "{row:?}");
    // A debounce is an option like any other: refused without what it needs.
    let debounced = Enqueue { debounce_seconds: Some(2), ..Enqueue::default() };
    assert!(matches!(block_on(p.enqueue(webhook(8), &debounced)), Err(EnqueueError::Refused(_))));
    // Many, in order, all or none.
    let many = block_on(p.enqueue_all(vec![(webhook(3), Enqueue::key("k")), (webhook(4), Enqueue::key("k"))])).unwrap();
    assert_eq!(many.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), vec!["rs-5", "rs-6"]);
}

#[test]
fn a_rust_producer_is_refused_what_the_api_refuses() {
    let w = ApiWorld::new();
    let new_id = || "x".to_string();
    let p = Producer::new(&w.ledger, &w.queue, &w.clock, &w.cfg, &BuiltIn, &new_id, None);
    let refused = |r: Result<Vec<Submitted>, EnqueueError>| match r {
        Err(EnqueueError::Refused(r)) => (r.status, r.index, r.error),
        other => panic!("not refused: {other:?}"),
    };
    let (status, index, error) = refused(block_on(
        p.enqueue_all(vec![(webhook(1), Enqueue::default()), (json!({"type": "fax"}), Enqueue::default())]),
    ));
    assert_eq!((status, index), (400, Some(1)));
    assert!(error.contains("unknown job type \"fax\""), "{error}");
    let late = Enqueue { delay_seconds: 86_401, ..Enqueue::default() };
    assert_eq!(refused(block_on(p.enqueue_all(vec![(webhook(1), late)]))).0, 400);
    let too_many: Vec<_> = (0..501).map(|n| (webhook(n), Enqueue::default())).collect();
    assert_eq!(refused(block_on(p.enqueue_all(too_many))).0, 413);
    assert_eq!(block_on(w.ledger.counts()).unwrap().pending, 0, "nothing recorded");
    assert!(w.queue.sent().is_empty());
}

#[test]
fn a_rust_producer_names_its_jobs_and_seals_sensitive_ones() {
    let w = ApiWorld::new();
    let new_id = || "fresh".to_string();
    let p = Producer::new(&w.ledger, &w.queue, &w.clock, &w.cfg, &BuiltIn, &new_id, None);
    // Its own id: an idempotency key, a second submission is the same job.
    let named = Enqueue { id: Some("order-42".into()), ..Enqueue::default() };
    assert_eq!(block_on(p.enqueue(webhook(1), &named)).unwrap().id, "order-42");
    assert!(block_on(p.enqueue(webhook(2), &named)).unwrap().duplicate);
    // Sensitive: refused without PAYLOAD_KEY, naming it; sealed at rest with it.
    let secret = Enqueue { sensitive: true, ..Enqueue::default() };
    match block_on(p.enqueue(webhook(3), &secret)) {
        Err(EnqueueError::Refused(r)) => assert!(r.error.contains("PAYLOAD_KEY"), "{}", r.error),
        other => panic!("not refused: {other:?}"),
    }
    let sealer = crate::support::AesSealer::new(&format!("k1:{}", "A".repeat(43) + "="));
    let p = Producer::new(&w.ledger, &w.queue, &w.clock, &w.cfg, &BuiltIn, &new_id, Some(&sealer));
    let id = block_on(p.enqueue(webhook(4), &secret)).unwrap().id;
    let row = block_on(w.ledger.get(&id)).unwrap().unwrap();
    assert!(orderly::seal::is_sealed(row.payload.as_deref().unwrap()), "{:?}", row.payload);
}
