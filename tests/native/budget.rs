//! Every API path at its documented maximum stays within D1's per-invocation query budget
//! (design §26): each request runs as one invocation on the D1 stand-in with the free plan's 50
//! queries, a batch counting one, so a path that loops over its items one query at a time fails
//! here before it fails on the platform. Each test says how many it took.

use orderly::config::{Config, MAX_BULK_REDRIVE};
use serde_json::{json, Value};

use crate::support::api::ApiWorld;
use crate::support::D1_FREE_QUERIES;

/// A world whose every request is one invocation within the free plan's query budget.
fn world() -> ApiWorld {
    let w = ApiWorld::new();
    w.ledger.backend().budget.set(Some(D1_FREE_QUERIES));
    w
}

/// `method path body` as one invocation: its answer, and the queries it made.
fn request(w: &ApiWorld, method: &str, path: &str, body: Option<Value>) -> (u16, Value, u64) {
    w.ledger.backend().invocation();
    let r = w.call(method, path, body);
    (r.status, r.json_body(), w.ledger.backend().queries.get())
}

fn hook(n: usize) -> Value {
    json!({"type": "webhook", "url": format!("https://h.test/{n}")})
}

#[test]
fn post_jobs_with_500_jobs_each_deduplicated_and_replacing_takes_a_handful_of_queries() {
    let w = world();
    let jobs = |round: usize| -> Vec<Value> {
        (0..500)
            .map(|i| json!({"payload": hook(i * 10 + round), "ordering_key": format!("k{}", i % 7), "dedupe_key": format!("d{i}"), "on_duplicate": "replace"}))
            .collect()
    };
    let (status, body, first) = request(&w, "POST", "/jobs", Some(json!({ "jobs": jobs(0) })));
    assert_eq!(status, 202, "{body}");
    let (status, body, again) = request(&w, "POST", "/jobs", Some(json!({ "jobs": jobs(1) })));
    assert_eq!(status, 202, "{body}");
    assert!(body["jobs"].as_array().unwrap().iter().all(|j| j["replaced"] == json!(true)), "{body}");
    assert!(first <= 10 && again <= 10, "queries: {first}, then {again}");
}

#[test]
fn a_batch_of_499_jobs_with_a_callback_fits_and_500_is_refused_recording_nothing() {
    let w = world();
    let batch = |n: usize, id: &str| {
        let jobs: Vec<Value> = (0..n).map(|i| json!({"id": format!("{id}-{i}"), "payload": hook(i)})).collect();
        json!({"jobs": jobs, "then": {"id": id, "payload": hook(9999)}})
    };
    let (status, body, queries) = request(&w, "POST", "/jobs", Some(batch(499, "fits")));
    assert_eq!(status, 202, "{body}");
    assert!(queries <= 10, "queries: {queries}");
    let (status, body, _) = request(&w, "POST", "/jobs", Some(batch(500, "over")));
    assert_eq!(status, 413, "{body}");
    assert!(body["error"].as_str().unwrap().contains("499"), "{body}");
    let (status, _, _) = request(&w, "GET", "/jobs/over-0", None);
    assert_eq!(status, 404, "nothing recorded");
}

#[test]
fn bulk_cancel_and_bulk_redrive_at_their_most_per_call_and_matching_nothing() {
    let mut w = world();
    w.cfg = Config { bulk_redrive_limit: MAX_BULK_REDRIVE, ..Config::default() };
    let jobs: Vec<Value> = (0..MAX_BULK_REDRIVE as usize)
        .map(|i| json!({"payload": hook(i), "ordering_key": format!("k{}", i % 5)}))
        .collect();
    for part in jobs.chunks(500) {
        assert_eq!(request(&w, "POST", "/jobs", Some(json!({ "jobs": part }))).0, 202);
    }
    let filter = json!({"filter": {"type": "webhook"}});
    let (status, body, cancel) = request(&w, "POST", "/jobs/cancel", Some(filter.clone()));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["cancelled"], json!(MAX_BULK_REDRIVE), "{body}");
    let (status, body, redrive) = request(&w, "POST", "/jobs/redrive", Some(filter.clone()));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["redriven"], json!(MAX_BULK_REDRIVE), "{body}");
    for path in ["/jobs/cancel", "/jobs/redrive"] {
        for dry_run in [true, false] {
            let (status, body, _) =
                request(&w, "POST", path, Some(json!({"filter": {"type": "none-such"}, "dry_run": dry_run})));
            assert_eq!(status, 200, "{path} matching nothing: {body}");
        }
    }
    assert!(cancel <= 20 && redrive <= 20, "queries: cancel {cancel}, redrive {redrive}");
}

#[test]
fn cancelling_a_job_100_others_wait_on_releases_them_all_in_one_invocation() {
    let w = world();
    assert_eq!(
        request(&w, "POST", "/jobs", Some(json!({"id": "root", "payload": hook(0), "ordering_key": "r"}))).0,
        202
    );
    let dependents: Vec<Value> =
        (0..100).map(|i| json!({"id": format!("d{i}"), "payload": hook(i), "ordering_key": format!("k{}", i % 9), "after": ["root"]})).collect();
    let (status, body, submitted) = request(&w, "POST", "/jobs", Some(json!({ "jobs": dependents })));
    assert_eq!(status, 202, "{body}");
    let (status, body, cancelled) = request(&w, "POST", "/jobs/root/cancel", None);
    assert_eq!(status, 200, "{body}");
    for i in [0, 57, 99] {
        let (_, job, _) = request(&w, "GET", &format!("/jobs/d{i}"), None);
        assert_eq!(job["job"]["status"], json!("DEAD"), "{job}");
    }
    assert!(submitted <= 10 && cancelled <= 20, "queries: submit {submitted}, cancel {cancelled}");
}

/// The same bulk paths with every job its own ordering key and its own limit key: grouping by key
/// once hid a query per key (a bulk cancel of 300 such jobs made 604 queries).
#[test]
fn bulk_cancel_and_redrive_with_every_job_its_own_keys_stay_within_the_budget() {
    let mut w = world();
    w.cfg = Config {
        bulk_redrive_limit: MAX_BULK_REDRIVE,
        limits: orderly::flow::Policies::parse(r#"{"host-*": {"concurrency": 1}}"#).expect("limits"),
        ..Config::default()
    };
    let jobs: Vec<Value> = (0..MAX_BULK_REDRIVE as usize)
        .map(|i| json!({"payload": hook(i), "ordering_key": format!("k{i}"), "limit_key": format!("host-{i}")}))
        .collect();
    for part in jobs.chunks(500) {
        let (status, body, _) = request(&w, "POST", "/jobs", Some(json!({ "jobs": part })));
        assert_eq!(status, 202, "{body}");
    }
    let filter = json!({"filter": {"type": "webhook"}});
    let (status, body, cancel) = request(&w, "POST", "/jobs/cancel", Some(filter.clone()));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["cancelled"], json!(MAX_BULK_REDRIVE), "{body}");
    let (status, body, redrive) = request(&w, "POST", "/jobs/redrive", Some(filter));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["redriven"], json!(MAX_BULK_REDRIVE), "{body}");
    assert!(cancel <= 50 && redrive <= 50, "queries: cancel {cancel}, redrive {redrive}");
}
