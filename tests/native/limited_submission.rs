//! A burst submitted through the API under a limit key with a concurrency (design §20.12), on the
//! host: the real API, strict consumer and ledger over real SQLite and a recording queue. In
//! strict mode the burst waits in the limit key's line, not in the queue: only the jobs handed a
//! slot are sent, so another key's message is never behind the burst; every job still runs, in
//! its ordering key's order, without maintenance. Lock mode sends every job, as before.

use crate::support::api::T0;
use crate::support::consumer::ConsumerWorld as World;
use orderly::config::{Config, OrderingMode};
use orderly::ledger::Status;
use serde_json::{json, Value};

/// A world in this mode with the limit key `host` at concurrency 2.
fn world(mode: OrderingMode) -> World {
    let limits = orderly::flow::Policies::parse(r#"{"host": {"concurrency": 2}}"#).unwrap();
    World::new(Config { ordering_mode: mode, limits, ..Config::default() })
}

fn job(id: &str, key: &str, limit_key: Option<&str>) -> Value {
    json!({"id": id, "ordering_key": key, "limit_key": limit_key, "payload": {"type": "webhook", "url": "https://h.test/"}})
}

/// Five ordering keys of two jobs each under `host` (concurrency 2), then one job of another key.
fn burst(w: &World) {
    let mut jobs: Vec<Value> = ["a", "b", "c", "d", "e"]
        .iter()
        .flat_map(|k| [job(&format!("{k}1"), k, Some("host")), job(&format!("{k}2"), k, Some("host"))])
        .collect();
    jobs.push(job("q1", "q", None));
    let r = w.call("POST", "/jobs", Some(json!({ "jobs": jobs })));
    assert_eq!(r.status, 202, "{}", r.body);
}

#[test]
fn strict_mode_a_burst_under_a_full_limit_key_waits_in_its_line_not_in_the_queue() {
    let w = world(OrderingMode::Strict);
    burst(&w);
    let sent = w.sent_since();
    let ids: Vec<String> =
        sent.iter().map(|m| m.body.as_ref().unwrap()["__orderly_job__"]["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(sent.len(), 3, "two jobs handed the key's two slots, and the other key's job: {ids:?}");
    assert!(ids.contains(&"q1".to_string()), "{ids:?}");
    let host = w.call("GET", "/limits/host", None).json_body();
    assert_eq!((host["running"].clone(), host["waiting"].clone()), (json!(2), json!(3)), "{host}");
    // The heads wait parked (due only at their wake-up); the jobs behind them wait for their key.
    let (head, behind) = (w.job("c1"), w.job("c2"));
    assert!(head.parked && head.next_run_at > T0, "{head:?}");
    assert!(!behind.parked && behind.next_run_at == T0, "{behind:?}");

    // Delivered in turn, each run hands its slot to the next in line: every job runs, each
    // key's in order, with no maintenance and at most one delivery per job.
    w.delivered.set(0);
    let deliveries = w.drain();
    let runs = w.runs();
    assert_eq!(runs.len(), 11, "{runs:?}");
    for k in ["a", "b", "c", "d", "e"] {
        let at = |id: String| runs.iter().position(|r| *r == id).unwrap_or_else(|| panic!("{id} never ran: {runs:?}"));
        assert!(at(format!("{k}1")) < at(format!("{k}2")), "{runs:?}");
        assert_eq!(w.job(&format!("{k}2")).status, Status::Done);
    }
    assert!(deliveries <= 11, "{deliveries} deliveries for 11 jobs");
    let host = w.call("GET", "/limits/host", None).json_body();
    assert_eq!((host["running"].clone(), host["waiting"].clone()), (json!(0), json!(0)), "{host}");
}

#[test]
fn strict_mode_an_unkeyed_job_waits_in_its_line_due_so_its_wake_up_runs_it() {
    // An unkeyed job takes the lock-mode path, whose claim reads no wake-up's mark: recorded not
    // due (as a key's head is), its wake-up found it not due and the slot handed to it stood
    // empty until the recheck, 30 s on (issue 38).
    let w = world(OrderingMode::Strict);
    let unkeyed =
        |id: &str| json!({"id": id, "limit_key": "host", "payload": {"type": "webhook", "url": "https://h.test/"}});
    let r = w.call("POST", "/jobs", Some(json!({ "jobs": [unkeyed("u1"), unkeyed("u2"), unkeyed("u3")] })));
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(w.sent_since().len(), 2, "two jobs handed the key's two slots");
    let third = w.job("u3");
    assert!(third.parked && third.next_run_at == T0, "in line, and due: {third:?}");
    w.delivered.set(0);
    let deliveries = w.drain();
    assert_eq!(w.runs().len(), 3, "{:?}", w.runs());
    assert_eq!(w.job("u3").status, Status::Done);
    assert!(deliveries <= 3, "{deliveries} deliveries for 3 jobs");
}

#[test]
fn lock_mode_sends_every_submitted_job() {
    let w = world(OrderingMode::Lock);
    burst(&w);
    assert_eq!(w.sent_since().len(), 11);
    assert!(!w.job("c1").parked);
}

#[test]
fn strict_mode_one_request_lines_each_limit_key_in_its_own_line() {
    let limits = orderly::flow::Policies::parse(r#"{"host": {"concurrency": 2}, "api": {"concurrency": 1}}"#).unwrap();
    let w = World::new(Config { ordering_mode: OrderingMode::Strict, limits, ..Config::default() });
    let jobs: Vec<Value> =
        [("a1", "a", "host"), ("b1", "b", "host"), ("c1", "c", "host"), ("x1", "x", "api"), ("y1", "y", "api")]
            .iter()
            .map(|(id, key, limit)| job(id, key, Some(limit)))
            .collect();
    let r = w.call("POST", "/jobs", Some(json!({ "jobs": jobs })));
    assert_eq!(r.status, 202, "{}", r.body);
    let sent: Vec<String> = w
        .sent_since()
        .iter()
        .map(|m| m.body.as_ref().unwrap()["__orderly_job__"]["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sent.len(), 3, "host's two slots and api's one: {sent:?}");
    for (key, running, waiting) in [("host", 2, 1), ("api", 1, 1)] {
        let state = w.call("GET", &format!("/limits/{key}"), None).json_body();
        assert_eq!(
            (state["running"].clone(), state["waiting"].clone()),
            (json!(running), json!(waiting)),
            "{key}: {state}"
        );
    }
    w.delivered.set(0);
    w.drain();
    let mut runs = w.runs();
    runs.sort();
    assert_eq!(runs, ["a1", "b1", "c1", "x1", "y1"]);
}
