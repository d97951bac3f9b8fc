//! Every API path at its documented maximum stays within D1's per-invocation query budget
//! (design §26): each request runs as one invocation on the D1 stand-in with the free plan's 50
//! queries, a batch counting one, so a path that loops over its items one query at a time fails
//! here before it fails on the platform. Each test says how many it took.

use orderly::config::{Config, OrderingMode, MAX_BULK_REDRIVE};
use orderly::operations::RELEASE_PAGE;
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

/// `on_duplicate: "cancel"` over 300 holders, each job its own ordering key and limit key: the
/// cancelled holders' keys move on in one batch, not a query per key (it once made 303).
#[test]
fn superseding_300_holders_each_its_own_keys_stays_within_the_budget() {
    for mode in [OrderingMode::Lock, OrderingMode::Strict] {
        let mut w = world();
        w.cfg = Config {
            ordering_mode: mode,
            limits: orderly::flow::Policies::parse(r#"{"host-*": {"concurrency": 1}}"#).expect("limits"),
            ..Config::default()
        };
        let jobs = |round: usize, on_duplicate: &str| -> Vec<Value> {
            (0..300)
                .map(|i| json!({"payload": hook(i * 10 + round), "ordering_key": format!("k{i}"), "limit_key": format!("host-{i}"),
                    "dedupe_key": format!("d{i}"), "on_duplicate": on_duplicate}))
                .collect()
        };
        let (status, body, _) = request(&w, "POST", "/jobs", Some(json!({ "jobs": jobs(0, "keep") })));
        assert_eq!(status, 202, "{body}");
        let (status, body, queries) = request(&w, "POST", "/jobs", Some(json!({ "jobs": jobs(1, "cancel") })));
        assert_eq!(status, 202, "{body}");
        let id = body["jobs"][299]["id"].as_str().unwrap_or_default().to_string();
        let (_, job, _) = request(&w, "GET", &format!("/jobs/{id}"), None);
        assert_eq!(job["job"]["status"], json!("PENDING"), "{mode:?}: {job}");
        assert!(queries <= 50, "{mode:?}: queries: {queries}");
    }
}

/// A cron run with 100 schedules due, each job its own ordering key and limit key: their jobs
/// are submitted and their periods recorded in a handful of batches, not two or more queries per
/// schedule (it once made 257). In strict mode, where a limited job lines up at submission.
#[test]
fn a_cron_run_with_100_schedules_due_each_its_own_keys_stays_within_the_budget() {
    let schedules: Vec<Value> = (0..100)
        .map(|i| {
            json!({"name": format!("s{i}"), "every_seconds": 60,
            "job": {"payload": hook(i), "ordering_key": format!("k{i}"), "limit_key": format!("host-{i}")}})
        })
        .collect();
    let text = Value::Array(schedules).to_string();
    let cfg = Config::from_lookup(|k| match k {
        "SCHEDULES" => Some(text.clone()),
        "ORDERING_MODE" => Some("strict".into()),
        "LIMITS" => Some(r#"{"host-*": {"concurrency": 1}}"#.into()),
        _ => None,
    })
    .expect("config");
    let w = crate::support::consumer::ConsumerWorld::new(cfg);
    w.db.budget.set(Some(D1_FREE_QUERIES));
    for round in 0..2 {
        w.db.invocation();
        let t = w.tick();
        assert!(t.errors.is_empty(), "{t:?}");
        assert_eq!(t.submitted.len(), 100, "round {round}: every schedule's job: {t:?}");
        let queries = w.db.queries.get();
        assert!(queries <= 50, "round {round}: queries {queries}");
        w.clock.advance_ms(60_000);
    }
}

/// A job with 2,500 dependents, each its own ordering key and limit key, cancelled: its cancel
/// releases a page of them ([`RELEASE_PAGE`]) and maintenance the rest, a page a run, each
/// invocation within the budget (a release once read and released every dependent in one batch,
/// which at 100,000 outlasts D1's 30 s per query; two pages a run passed the budget).
#[test]
fn a_death_with_2500_dependents_each_its_own_keys_is_released_in_pages_within_the_budget() {
    let cfg = Config {
        limits: orderly::flow::Policies::parse(r#"{"host-*": {"concurrency": 1}}"#).expect("limits"),
        ..Config::default()
    };
    let w = crate::support::consumer::ConsumerWorld::new(cfg);
    let dead =
        |w: &crate::support::consumer::ConsumerWorld| w.call("GET", "/jobs/counts", None).json_body()["DEAD"].as_u64();
    assert_eq!(w.call("POST", "/jobs", Some(json!({"id": "root", "payload": hook(0)}))).status, 202);
    for part in 0..5 {
        let jobs: Vec<Value> = (part * 500..(part + 1) * 500)
            .map(|i| json!({"id": format!("d{i}"), "payload": hook(i), "ordering_key": format!("k{i}"), "limit_key": format!("host-{i}"), "after": ["root"]}))
            .collect();
        let r = w.call("POST", "/jobs", Some(json!({ "jobs": jobs })));
        assert_eq!(r.status, 202, "{}", r.body);
    }
    w.db.budget.set(Some(D1_FREE_QUERIES));
    w.db.invocation();
    let r = w.call("POST", "/jobs/root/cancel", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let cancel = w.db.queries.get();
    assert_eq!(dead(&w), Some(1 + u64::from(RELEASE_PAGE)), "the root and a page of its dependents");
    assert!(cancel <= 50, "queries: cancel {cancel}");
    for (run, released) in [(1, 2_001), (2, 2_501)] {
        w.db.invocation();
        let report = w.maintain();
        let tick = w.db.queries.get();
        assert!(report.errors.is_empty(), "run {run}: {report:?}");
        assert_eq!(dead(&w), Some(released), "run {run} released a page");
        assert!(tick <= 50, "run {run}: queries {tick}");
    }
}
