//! The operator's tools over the real ledger SQL: cancel, bulk redrive with a dry run, list
//! filters, per-minute activity, the audit trail in each job's history, priorities, and the
//! OpenAPI document checked against the routes the API actually answers.

use std::collections::BTreeSet;

use crate::support::api::{ApiWorld, T0};
use futures::executor::block_on;
use orderly::api::{routes, Endpoint, NotRouted, OPENAPI};
use orderly::clock::Clock;
use orderly::ledger::history::{Run, RunOutcome};
use orderly::ledger::{stmt, Lease, Record, Sql, Status, Transition};
use orderly::maintenance::{self, RESEND_GRACE_MS};
use serde_json::{json, Value};

type World = ApiWorld;

/// What the operator tests do beside calling the API.
trait Operator {
    fn submit(&self, job: Value) -> String;
    fn kill(&self, id: &str, error: &str, at: i64);
    fn history(&self, id: &str) -> Vec<Value>;
}

impl Operator for ApiWorld {
    /// Submits a job; its id.
    fn submit(&self, job: Value) -> String {
        let r = self.call("POST", "/jobs", Some(job));
        assert_eq!(r.status, 202, "{}", r.body);
        r.json_body()["jobs"][0]["id"].as_str().unwrap().to_string()
    }
    /// Makes a PENDING job DEAD through a failed run, as a consumer would.
    fn kill(&self, id: &str, error: &str, at: i64) {
        let job = block_on(self.ledger.get(id)).unwrap().unwrap();
        let rows = block_on(self.ledger.backend().query(stmt::claim(
            &job.spec(),
            "inv-1",
            Lease { now: at, until: at + 120_000, due_before: at },
        )))
        .unwrap();
        assert_eq!(rows.len(), 1, "claimed");
        let rows = block_on(self.ledger.backend().query(stmt::fail(
            id,
            "inv-1",
            at,
            orderly::ledger::Status::Dead,
            at,
            error,
        )))
        .unwrap();
        assert_eq!(rows.len(), 1, "failed");
    }
    fn history(&self, id: &str) -> Vec<Value> {
        let r = self.call("GET", &format!("/jobs/{id}"), None);
        assert_eq!(r.status, 200, "{}", r.body);
        r.json_body()["history"].as_array().unwrap().clone()
    }
}

fn webhook(path: &str) -> Value {
    json!({"type": "webhook", "url": format!("https://example.test/{path}"), "body": {}})
}

#[test]
fn a_pending_job_is_cancelled_and_audited_and_nothing_else_is() {
    let w = World::new();
    let id = w.submit(json!({"payload": webhook("a")}));
    w.clock.advance_ms(1_000);
    let r = w.call("POST", &format!("/jobs/{id}/cancel"), None);
    assert_eq!(r.status, 200, "{}", r.body);
    let job = &r.json_body()["job"];
    assert_eq!((job["status"].as_str(), job["last_error"].as_str()), (Some("DEAD"), Some("cancelled")));
    assert!(job["skipped_at"].is_i64(), "a cancelled job never blocks its key");
    let h = w.history(&id);
    assert_eq!(h.len(), 1);
    assert_eq!(
        (h[0]["kind"].as_str(), h[0]["actor"].as_str(), h[0]["at"].as_i64()),
        (Some("cancel"), Some("api"), Some(T0 + 1_000))
    );

    // Once DEAD, a second cancel is refused and not audited again.
    let again = w.call("POST", &format!("/jobs/{id}/cancel"), None);
    assert_eq!((again.status, again.json_body()["status"].as_str()), (409, Some("DEAD")));
    assert_eq!(w.history(&id).len(), 1);

    // A RUNNING job is asked to stop (design §22.1): it stays RUNNING until its run ends, is
    // never claimed again, and a second cancel is refused.
    let running = w.submit(json!({"payload": webhook("b")}));
    let spec = block_on(w.ledger.get(&running)).unwrap().unwrap().spec();
    let now = T0 + 1_000;
    let claimed = block_on(w.ledger.backend().query(stmt::claim(
        &spec,
        "inv",
        Lease { now, until: now + 120_000, due_before: now },
    )))
    .unwrap();
    assert_eq!(claimed.len(), 1);
    let r = w.call("POST", &format!("/jobs/{running}/cancel"), None);
    assert_eq!((r.status, r.json_body()["job"]["status"].as_str()), (202, Some("RUNNING")));
    assert_eq!(r.json_body()["within_ms"], orderly::consumer::CANCEL_REACH_MS);
    let asked = block_on(w.ledger.get(&running)).unwrap().unwrap();
    assert!(asked.cancel_requested_at.is_some(), "{asked:?}");
    let again = w.call("POST", &format!("/jobs/{running}/cancel"), None);
    assert_eq!((again.status, again.json_body()["status"].as_str()), (409, Some("RUNNING")));
    assert_eq!(w.call("POST", "/jobs/nope/cancel", None).status, 404);
    assert_eq!(w.call("GET", "/jobs/job-002/cancel", None).status, 405);
}

#[test]
fn bulk_redrive_counts_first_then_redrives_only_what_matches() {
    let w = World::new();
    let a = w.submit(json!({"payload": webhook("a"), "ordering_key": "k1"}));
    let b = w.submit(json!({"payload": webhook("b"), "ordering_key": "k2"}));
    let c = w.submit(json!({"payload": {"type": "webhook", "url": "https://other.test/", "body": 1}}));
    let pending = w.submit(json!({"payload": webhook("d")}));
    w.kill(&a, "https://example.test/a: HTTP 503 (attempt 8 of 8, no attempts left)", T0 + 10_000);
    w.kill(&b, "https://example.test/b: HTTP 404", T0 + 20_000);
    w.kill(&c, "https://other.test/: HTTP 503 (attempt 8 of 8, no attempts left)", T0 + 30_000);
    let sent_before = w.queue.sent().len();

    let dry = |filter: Value| {
        let r = w.call("POST", "/jobs/redrive", Some(json!({"dry_run": true, "filter": filter})));
        assert_eq!(r.status, 200, "{}", r.body);
        r.json_body()["matched"].as_i64().unwrap()
    };
    assert_eq!(dry(json!({})), 3);
    assert_eq!(dry(json!({"error": "HTTP 503"})), 2);
    assert_eq!(dry(json!({"error": "HTTP 503", "ordering_key": "k1"})), 1);
    assert_eq!(dry(json!({"type": "webhook", "from": T0 + 15_000})), 2);
    assert_eq!(dry(json!({"to": T0 + 15_000})), 1);
    assert_eq!(dry(json!({"type": "email"})), 0);
    assert_eq!(w.queue.sent().len(), sent_before, "a dry run sends nothing");
    assert_eq!(block_on(w.ledger.counts()).unwrap().dead, 3, "and changes nothing");

    w.clock.advance_ms(60_000);
    let r = w.call("POST", "/jobs/redrive", Some(json!({"filter": {"error": "HTTP 503"}})));
    assert_eq!(r.status, 200, "{}", r.body);
    let body = r.json_body();
    assert_eq!(
        (body["matched"].as_i64(), body["redriven"].as_i64(), body["remaining"].as_i64()),
        (Some(2), Some(2), Some(0))
    );
    let sent: Vec<String> = w.queue.sent()[sent_before..].iter().filter_map(|e| e.meta.id.clone()).collect();
    assert_eq!(sent, vec![a.clone(), c.clone()], "oldest death first, each re-sent once");
    for id in [&a, &c] {
        let job = block_on(w.ledger.get(id)).unwrap().unwrap();
        assert_eq!(job.status.as_str(), "PENDING");
        let h = w.history(id);
        let last = h.last().unwrap();
        assert_eq!((last["kind"].as_str(), last["actor"].as_str()), (Some("redrive"), Some("api")), "{h:?}");
    }
    assert_eq!(block_on(w.ledger.get(&b)).unwrap().unwrap().status.as_str(), "DEAD", "a 404 did not match");
    assert_eq!(block_on(w.ledger.get(&pending)).unwrap().unwrap().status.as_str(), "PENDING");

    for (body, want) in [
        (json!({"filter": {"colour": "red"}}), "unknown filter field"),
        (json!({"filter": {"from": "yesterday"}}), "milliseconds"),
        (json!({"dry_run": "yes"}), "dry_run"),
        (json!({"filter": [1]}), "must be an object"),
        (json!({"everything": true}), "unknown field"),
    ] {
        let r = w.call("POST", "/jobs/redrive", Some(body.clone()));
        assert_eq!(r.status, 400, "{body}");
        assert!(r.json_body()["error"].as_str().unwrap().contains(want), "{body}: {}", r.body);
    }
}

#[test]
fn lists_filter_by_type_key_priority_and_status() {
    let w = World::new();
    w.submit(json!({"payload": webhook("a"), "ordering_key": "k1"}));
    w.clock.advance_ms(1);
    let b = w.submit(json!({"payload": webhook("b"), "ordering_key": "k2"}));
    w.clock.advance_ms(1);
    w.submit(json!({"payload": webhook("c"), "ordering_key": "k1", "priority": 0}));
    w.kill(&b, "HTTP 404", T0 + 5);
    let ids = |q: &str| -> Vec<String> {
        let r = w.call("GET", &format!("/jobs?{q}"), None);
        assert_eq!(r.status, 200, "{q}: {}", r.body);
        r.json_body()["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(ids("ordering_key=k1"), vec!["job-003", "job-001"]);
    assert_eq!(ids("ordering_key=k1&status=DEAD"), Vec::<String>::new());
    assert_eq!(ids("type=webhook&status=DEAD"), vec!["job-002"]);
    assert_eq!(ids("type=email"), Vec::<String>::new());
    assert_eq!(ids("type=webhook&limit=2").len(), 2);
    let page1 = w.call("GET", "/jobs?type=webhook&limit=2", None).json_body();
    let cursor = page1["next_cursor"].as_str().unwrap().to_string();
    assert_eq!(ids(&format!("type=webhook&limit=2&cursor={cursor}")), vec!["job-001"]);
    assert_eq!(ids("type=&ordering_key="), vec!["job-003", "job-002", "job-001"], "empty filters are no filters");
    assert_eq!(ids("priority=0"), vec!["job-003"]);
    assert_eq!(ids("priority=5&ordering_key=k1"), vec!["job-001"]);
    assert_eq!(w.call("GET", "/jobs?priority=high", None).status, 400);
    assert_eq!(w.call("GET", "/jobs?priority=10", None).status, 400);
}

#[test]
fn activity_counts_runs_deaths_and_the_backlog_by_minute() {
    let w = World::new();
    let start = (T0 / 60_000 + 1) * 60_000; // a minute boundary
    w.clock.advance_ms(start - T0);
    for n in 0..5 {
        w.submit(json!({"payload": webhook(&n.to_string())}));
    }
    // Minute 1: job-001 succeeds; job-002 fails once. Minute 2: job-003 dies.
    let run = |id: &str, at: i64, outcome: RunOutcome| {
        let job = block_on(w.ledger.get(id)).unwrap().unwrap();
        block_on(w.ledger.backend().query(stmt::claim(
            &job.spec(),
            "inv",
            Lease { now: at, until: at + 120_000, due_before: at },
        )))
        .unwrap();
        let (id, owner) = (id.to_string(), "inv".to_string());
        let route = job.route();
        let fail = |to, next_run_at, error: &str| Transition::Fail {
            started_at: None,
            id: id.clone(),
            route,
            owner: owner.clone(),
            at,
            to,
            next_run_at,
            error: error.into(),
        };
        let transition = match outcome {
            RunOutcome::Done => Transition::Complete {
                started_at: None,
                id: id.clone(),
                route,
                owner: owner.clone(),
                at,
                result: None,
                http_status: None,
            },
            RunOutcome::Retry => fail(Status::Pending, at + 5_000, "HTTP 503"),
            RunOutcome::Dead => fail(Status::Dead, at, "HTTP 404"),
            RunOutcome::Snooze => Transition::Defer {
                id: id.clone(),
                route,
                owner: owner.clone(),
                at,
                next_run_at: at + 5_000,
                parked: false,
            },
        };
        // As the consumer records them: a success is described by its DONE row alone.
        let run = (outcome != RunOutcome::Done).then(|| Run {
            job_id: id.clone(),
            attempt: 1,
            started_at: at,
            finished_at: at,
            outcome,
            error: None,
            http_status: Some(200),
            actor: owner.clone(),
        });
        block_on(w.ledger.record_all(&[Record { transition, run }])).unwrap();
    };
    run("job-001", start + 60_000 + 5, RunOutcome::Done);
    run("job-002", start + 60_000 + 6, RunOutcome::Retry);
    run("job-003", start + 120_000 + 7, RunOutcome::Dead);
    w.clock.advance_ms(120_000 + 30_000);
    let r = w.call("GET", "/jobs/activity", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let minutes = r.json_body()["minutes"].as_array().unwrap().clone();
    assert_eq!(minutes.len(), 60);
    let m = |back: usize| minutes[59 - back].clone();
    assert_eq!(m(0)["at"].as_i64(), Some(start + 120_000));
    assert_eq!((m(0)["dead"].as_i64(), m(0)["backlog"].as_i64()), (Some(1), Some(3)), "now: 5 - 2 finished");
    assert_eq!((m(1)["done"].as_i64(), m(1)["failed"].as_i64(), m(1)["backlog"].as_i64()), (Some(1), Some(1), Some(4)));
    assert_eq!(m(2)["backlog"].as_i64(), Some(5), "all five submitted in the first minute");
    assert_eq!(m(3)["backlog"].as_i64(), Some(0), "before any was submitted");
}

#[test]
fn a_redriven_old_job_is_backlog_from_its_redrive_not_all_hour() {
    let w = World::new();
    let start = (T0 / 60_000 + 1) * 60_000;
    w.clock.advance_ms(start - T0);
    let old = w.submit(json!({"payload": webhook("old")}));
    w.kill(&old, "HTTP 404", start + 1);
    // Two hours later it is redriven: open again, from this minute on only.
    w.clock.advance_ms(2 * 3_600_000 + 10_000);
    assert_eq!(w.call("POST", &format!("/jobs/{old}/redrive"), None).status, 200);
    let minutes = w.call("GET", "/jobs/activity", None).json_body()["minutes"].as_array().unwrap().clone();
    let backlog: Vec<i64> = minutes.iter().map(|m| m["backlog"].as_i64().unwrap()).collect();
    assert_eq!(backlog[59], 1, "open now");
    assert_eq!(backlog[..59].iter().sum::<i64>(), 0, "and not before its redrive: {backlog:?}");
}

#[test]
fn bulk_redrive_reaches_redrivable_jobs_behind_ones_it_cannot_redrive() {
    let w = World::new();
    // 300 DEAD jobs without a readable payload died first; 5 redrivable ones after them.
    let unreadable: Vec<_> = (0..300)
        .map(|i| {
            let spec = crate::support::unreadable_spec(&format!("bad-{i:03}"));
            stmt::record_dead(&spec, T0 + i, "payload is 300000 bytes as JSON, over the limit")
        })
        .collect();
    block_on(w.ledger.backend().batch(unreadable)).unwrap();
    let good: Vec<String> = (0..5).map(|i| w.submit(json!({"payload": webhook(&format!("g{i}"))}))).collect();
    for (i, id) in good.iter().enumerate() {
        w.kill(id, "HTTP 503", T0 + 1_000 + i as i64);
    }
    let dry = w.call("POST", "/jobs/redrive", Some(json!({"dry_run": true}))).json_body();
    assert_eq!((dry["matched"].as_i64(), dry["redrivable"].as_i64()), (Some(305), Some(5)));
    let r = w.call("POST", "/jobs/redrive", Some(json!({"filter": {}})));
    assert_eq!(r.status, 200, "{}", r.body);
    let body = r.json_body();
    assert_eq!(
        (body["matched"].as_i64(), body["redriven"].as_i64(), body["remaining"].as_i64()),
        (Some(305), Some(5), Some(0)),
        "{body}"
    );
    assert_eq!(body["refused"], json!([]), "unredrivable jobs are counted, never taken");
    for id in &good {
        assert_eq!(block_on(w.ledger.get(id)).unwrap().unwrap().status.as_str(), "PENDING");
    }
}

#[test]
fn bulk_redrive_takes_at_most_the_configured_number_per_call() {
    let mut w = World::new();
    w.cfg.bulk_redrive_limit = 2;
    let ids: Vec<String> = (0..3).map(|i| w.submit(json!({"payload": webhook(&format!("b{i}"))}))).collect();
    for (i, id) in ids.iter().enumerate() {
        w.kill(id, "HTTP 503", T0 + 10 + i as i64);
    }
    let first = w.call("POST", "/jobs/redrive", Some(json!({}))).json_body();
    assert_eq!((first["redriven"].as_i64(), first["remaining"].as_i64()), (Some(2), Some(1)), "{first}");
    let second = w.call("POST", "/jobs/redrive", Some(json!({}))).json_body();
    assert_eq!((second["redriven"].as_i64(), second["remaining"].as_i64()), (Some(1), Some(0)), "{second}");
}

#[test]
fn a_bulk_redrive_pinned_to_its_count_never_takes_a_job_that_died_again() {
    let mut w = World::new();
    w.cfg.bulk_redrive_limit = 2;
    let ids: Vec<String> = (0..3).map(|i| w.submit(json!({"payload": webhook(&format!("p{i}"))}))).collect();
    for (i, id) in ids.iter().enumerate() {
        w.kill(id, "HTTP 503", T0 + 10 + i as i64);
    }
    w.clock.advance_ms(1_000);
    let dry = w.call("POST", "/jobs/redrive", Some(json!({"dry_run": true}))).json_body();
    assert_eq!(dry["matched"].as_i64(), Some(3));
    let as_of = dry["as_of"].as_i64().unwrap();
    let pinned = json!({"filter": {"to": as_of + 1}});
    w.clock.advance_ms(1_000);
    let first = w.call("POST", "/jobs/redrive", Some(pinned.clone())).json_body();
    assert_eq!(first["redriven"].as_i64(), Some(2));
    // The first redriven job dies again before the next round.
    w.kill(&ids[0], "HTTP 503", w.clock.now_ms() + 1);
    let second = w.call("POST", "/jobs/redrive", Some(pinned)).json_body();
    assert_eq!((second["redriven"].as_i64(), second["remaining"].as_i64()), (Some(1), Some(0)), "{second}");
    assert_eq!(block_on(w.ledger.get(&ids[0])).unwrap().unwrap().status.as_str(), "DEAD", "not redriven twice");
    assert_eq!(block_on(w.ledger.get(&ids[2])).unwrap().unwrap().status.as_str(), "PENDING");
}

#[test]
fn cancelling_a_delayed_strict_head_wakes_the_next_job_of_its_key() {
    let mut w = World::new();
    w.cfg.ordering_mode = orderly::config::OrderingMode::Strict;
    let head = w.submit(json!({"payload": webhook("h"), "ordering_key": "k", "delay_seconds": 600}));
    let next = w.submit(json!({"payload": webhook("n"), "ordering_key": "k"}));
    let other = w.submit(json!({"payload": webhook("o")}));
    let before = w.queue.sent().len();
    let r = w.call("POST", &format!("/jobs/{head}/cancel"), None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json_body()["woken"].as_str(), Some(next.as_str()));
    let woken: Vec<_> = w.queue.sent_with_delay()[before..].iter().map(|(e, d)| (e.meta.id.clone(), *d)).collect();
    assert_eq!(woken, vec![(Some(next), 0)], "one wake-up, for the job now at the key's head, due now");
    // An unkeyed job wakes nothing.
    let r = w.call("POST", &format!("/jobs/{other}/cancel"), None);
    assert_eq!((r.status, r.json_body()["woken"].is_null()), (200, true));
    assert_eq!(w.queue.sent().len(), before + 1);
}

#[test]
fn skipping_a_blocked_key_wakes_its_next_job_at_once() {
    let mut w = World::new();
    w.cfg.ordering_mode = orderly::config::OrderingMode::Strict;
    w.cfg.on_dead = orderly::config::OnDead::Block;
    let head = w.submit(json!({"payload": webhook("h"), "ordering_key": "k"}));
    let next = w.submit(json!({"payload": webhook("n"), "ordering_key": "k"}));
    w.kill(&head, "HTTP 404", T0 + 1);
    let before = w.queue.sent().len();
    let r = w.call("POST", "/keys/k/skip", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json_body()["skipped"]["id"].as_str(), Some(head.as_str()));
    let woken: Vec<_> = w.queue.sent_with_delay()[before..].iter().map(|(e, d)| (e.meta.id.clone(), *d)).collect();
    assert_eq!(woken, vec![(Some(next), 0)], "one wake-up, for the key's new head, due now: not the cron's");
    // Once moved on the key is not blocked; and no key is, where dead jobs never block.
    let again = w.call("POST", "/keys/k/skip", None);
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("not blocked"), "{}", again.body);
    w.cfg.on_dead = orderly::config::OnDead::Skip;
    let never = w.call("POST", "/keys/k/skip", None);
    assert!(never.status == 409 && never.body.contains("never blocked"), "{}", never.body);
    assert_eq!(w.queue.sent().len(), before + 1);
}

#[test]
fn cancelling_a_lock_holder_wakes_the_job_put_off_behind_it() {
    let w = World::new();
    let holder = w.submit(json!({"payload": webhook("h"), "ordering_key": "k"}));
    w.clock.advance_ms(1);
    let waiting = w.submit(json!({"payload": webhook("w"), "ordering_key": "k"}));
    // The holder failed and waits for its retry an hour away; the other was put off behind it.
    let job = block_on(w.ledger.get(&holder)).unwrap().unwrap();
    block_on(w.ledger.backend().query(stmt::claim(
        &job.spec(),
        "inv",
        Lease { now: T0, until: T0 + 120_000, due_before: T0 },
    )))
    .unwrap();
    let retry_at = T0 + 3_600_000;
    block_on(w.ledger.backend().query(stmt::fail(
        &holder,
        "inv",
        T0,
        orderly::ledger::Status::Pending,
        retry_at,
        "HTTP 503",
    )))
    .unwrap();
    let spec = block_on(w.ledger.get(&waiting)).unwrap().unwrap().spec();
    // As lock mode records a deferral: noted, and its due time kept with the holder's retry.
    block_on(w.ledger.backend().batch(vec![
        stmt::note_deferral(&spec, T0 + 1_000, retry_at),
        stmt::keep_due(&spec.id, retry_at, T0 + 1_000, orderly::maintenance::RESEND_GRACE_MS / 2),
    ]))
    .unwrap();
    assert_eq!(block_on(w.ledger.get(&waiting)).unwrap().unwrap().next_run_at, retry_at);
    w.clock.advance_ms(60_000);
    let before = w.queue.sent().len();
    let r = w.call("POST", &format!("/jobs/{holder}/cancel"), None);
    assert_eq!(r.json_body()["woken"].as_str(), Some(waiting.as_str()), "{}", r.body);
    let woken = block_on(w.ledger.get(&waiting)).unwrap().unwrap();
    assert_eq!(woken.next_run_at, w.clock.now_ms(), "due now, not when the holder's retry was");
    let sent: Vec<_> = w.queue.sent_with_delay()[before..].iter().map(|(e, d)| (e.meta.id.clone(), *d)).collect();
    assert_eq!(sent, vec![(Some(waiting), 0)]);
}

#[test]
fn cancelling_a_lock_holder_never_cuts_short_a_snooze_of_the_job_behind_it() {
    // The simulation's cancels found it: a job waiting out its own snooze (put off behind the
    // holder once before) was made due at once by the holder's cancel.
    let w = World::new();
    let holder = w.submit(json!({"payload": webhook("h"), "ordering_key": "k"}));
    w.clock.advance_ms(1);
    let snoozed = w.submit(json!({"payload": webhook("s"), "ordering_key": "k"}));
    let spec = block_on(w.ledger.get(&snoozed)).unwrap().unwrap().spec();
    let now = T0 + 1;
    let lease = Lease { now, until: now + 120_000, due_before: now };
    let until = T0 + 3_600_000;
    block_on(w.ledger.backend().batch(vec![
        stmt::note_deferral(&spec, now, now),
        stmt::claim(&spec, "inv", lease),
        stmt::snooze(&snoozed, "inv", now, until, None),
    ]))
    .unwrap();
    let r = w.call("POST", &format!("/jobs/{holder}/cancel"), None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(block_on(w.ledger.get(&snoozed)).unwrap().unwrap().next_run_at, until, "its snooze stands");
}

#[test]
fn query_values_take_plus_as_a_space_and_bad_priorities_are_quoted() {
    let w = World::new();
    let spaced = w.submit(json!({"payload": webhook("s"), "ordering_key": "a b"}));
    let plus = w.submit(json!({"payload": webhook("p"), "ordering_key": "a+b"}));
    let ids = |q: &str| -> Vec<String> {
        let r = w.call("GET", &format!("/jobs?{q}"), None);
        r.json_body()["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(ids("ordering_key=a+b"), vec![spaced.clone()], "URLSearchParams writes a space as +");
    assert_eq!(ids("ordering_key=a%20b"), vec![spaced]);
    assert_eq!(ids("ordering_key=a%2Bb"), vec![plus]);
    for bad in ["-1", "10", "high", "18446744073709551616"] {
        let r = w.call("GET", &format!("/jobs?priority={bad}"), None);
        assert_eq!(r.status, 400);
        let msg = r.json_body()["error"].as_str().unwrap().to_string();
        assert!(msg.ends_with(&format!("got \"{bad}\"")), "{msg}");
    }
}

#[test]
fn priority_is_validated_stored_and_orders_maintenance_resends() {
    let w = World::new();
    // Submitted least urgent first, so their due times alone would re-send them in that order.
    let low = w.submit(json!({"payload": webhook("a"), "priority": 9}));
    w.clock.advance_ms(1);
    let normal = w.submit(json!({"payload": webhook("b")}));
    w.clock.advance_ms(1);
    let urgent = w.submit(json!({"payload": webhook("c"), "priority": 0}));
    let job = w.call("GET", &format!("/jobs/{urgent}"), None).json_body()["job"].clone();
    assert_eq!(job["priority"], 0);
    assert_eq!(w.call("GET", &format!("/jobs/{normal}"), None).json_body()["job"]["priority"], 5, "default");
    assert_eq!(w.queue.sent()[2].meta.priority, Some(0), "the priority rides in the message");
    let r = w.call("POST", "/jobs", Some(json!({"payload": webhook("d"), "priority": 10})));
    assert_eq!(r.status, 400);
    // Their messages are lost; maintenance re-sends them most urgent first.
    let before = w.queue.sent().len();
    w.clock.advance_ms(RESEND_GRACE_MS + 1);
    let report = block_on(maintenance::run(&w.ledger, &w.queue, &w.clock, &w.cfg));
    assert_eq!(report.resent, 3);
    let order: Vec<String> = w.queue.sent()[before..].iter().filter_map(|e| e.meta.id.clone()).collect();
    assert_eq!(order, vec![urgent, normal, low]);
}

/// Every path in the document, as (method, path) with `{name}` placeholders.
fn documented() -> BTreeSet<(String, String)> {
    let doc: Value = serde_json::from_str(OPENAPI).expect("openapi.json is JSON");
    assert_eq!(doc["openapi"].as_str().map(|v| &v[..3]), Some("3.1"));
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            out.insert((method.to_ascii_uppercase(), path.clone()));
        }
    }
    out
}

#[test]
fn the_openapi_document_describes_exactly_the_routes_the_api_answers() {
    let served: BTreeSet<(String, String)> = routes().map(|(m, p)| (m.to_string(), p.to_string())).collect();
    assert_eq!(documented(), served, "openapi.json and api::routes() differ");
    let doc: Value = serde_json::from_str(OPENAPI).unwrap();
    let w = World::new();
    for (method, pattern) in routes() {
        // Each route answers as itself: the router matches it, and the API does not 404 it as
        // an unknown route (a missing job is a 404 with its own message).
        let path = pattern.replace("{id}", "some-job").replace("{key}", "some-key");
        assert_eq!(Endpoint::parse(method, &path).map(|(_, p)| p), Ok(pattern), "{method} {path}");
        let (route, _) = Endpoint::parse(method, &path).unwrap();
        if matches!(route, Endpoint::Migrate { .. } | Endpoint::MoveLedger { .. }) {
            // The worker's edge answers these (it holds the D1 and shard bindings), after the
            // API's gate: e2e, schema.test.mjs and move.test.mjs.
            continue;
        }
        let r = w.call(method, &path, Some(json!({})));
        assert!(!r.body.contains("no route") && !r.body.contains("no handler"), "{method} {path}: {}", r.body);
        // Every status the API answered is documented for the route.
        if pattern != "/" {
            let responses = &doc["paths"][pattern][method.to_ascii_lowercase()]["responses"];
            assert!(
                responses.get(r.status.to_string()).is_some(),
                "{method} {path} answered {} undocumented",
                r.status
            );
        }
    }
    // And nothing else is served.
    for (method, path) in [("GET", "/nope"), ("DELETE", "/jobs/x"), ("GET", "/jobs/x/history"), ("PUT", "/keys")] {
        assert!(Endpoint::parse(method, path).is_err(), "{method} {path}");
    }
    assert_eq!(Endpoint::parse("GET", "/nope"), Err(NotRouted::NotFound));
    // The document is served to anyone (no token), as JSON that describes the routes.
    let served = w.call_with(None, Ok(&w.cfg), "GET", "/openapi.json", None);
    assert_eq!((served.status, served.content_type), (200, "application/json"));
    let paths = served.json_body()["paths"].as_object().cloned().unwrap_or_default();
    assert!(routes().all(|(_, p)| paths.contains_key(p)), "{:?}", paths.keys());
}

/// `JobInput` in the document names exactly the fields `POST /jobs` reads from a job object (read
/// from the submission code's text: each field it takes out of the object), and each one the
/// document names is taken alone with a sample value: a client validating against the document
/// refuses no documented request (the trace context was once left out).
#[test]
fn the_openapi_job_input_is_what_post_jobs_takes() {
    let doc: Value = serde_json::from_str(OPENAPI).unwrap();
    let input = &doc["components"]["schemas"]["JobInput"];
    assert_eq!(input["additionalProperties"], json!(false));
    let documented: BTreeSet<String> = input["properties"].as_object().unwrap().keys().cloned().collect();
    let code = include_str!("../../src/api/input.rs");
    let taken = regex_lite_fields(code);
    // `filter` and `dry_run` are the bulk routes' (POST /jobs/cancel, /jobs/redrive), read there too.
    let taken: BTreeSet<String> = taken.into_iter().filter(|f| f != "filter" && f != "dry_run").collect();
    assert_eq!(documented, taken, "JobInput's properties and the fields POST /jobs takes");
    let sample = |f: &str| -> Value {
        match f {
            "id" => json!("sample-id"),
            "ordering_key" | "dedupe_key" | "limit_key" => json!("sample"),
            "payload" => webhook("sample"),
            "sensitive" => json!(false),
            "priority" => json!(3),
            "max_attempts" => json!(2),
            "on_duplicate" => json!("keep"),
            "after" => json!([]),
            "after_dead" => json!("dead"),
            "debounce_seconds" | "debounce_max_seconds" => json!(5),
            "traceparent" => json!("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            "tracestate" => json!("vendor=1"),
            _ => json!(5),
        }
    };
    for f in &documented {
        let w = World::new();
        let mut job = json!({"payload": webhook("sample")});
        job[f.as_str()] = sample(f);
        if f == "tracestate" {
            job["traceparent"] = sample("traceparent");
        }
        if f == "debounce_max_seconds" {
            job["debounce_seconds"] = sample(f);
            job["dedupe_key"] = json!("d");
            job["on_duplicate"] = json!("replace");
        }
        if f == "debounce_seconds" {
            job["dedupe_key"] = json!("d");
            job["on_duplicate"] = json!("replace");
        }
        let r = w.call("POST", "/jobs", Some(job.clone()));
        assert_eq!(r.status, 202, "{f}: {job} answered {}", r.body);
    }
}

/// The field names a job object's reader takes out of it: `o.remove("f")`, `(&mut o, "f"` and
/// `(o, "f"`.
fn regex_lite_fields(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for marker in ["o.remove(\"", "(&mut o, \"", "(o, \""] {
        for (i, _) in code.match_indices(marker) {
            let rest = &code[i + marker.len()..];
            if let Some(end) = rest.find('"') {
                out.insert(rest[..end].to_string());
            }
        }
    }
    out
}

/// Every request body the document closes (`additionalProperties: false`), walked from the
/// document itself, not a list kept here: each property it names, alone with the required ones
/// (and each property of a closed object within), is one the route reads (no "unknown field"),
/// and a property it does not name is refused. `POST /jobs` has its own test above; `POST
/// /ledger/move` is answered by the worker's edge.
#[test]
fn every_closed_request_body_in_the_openapi_document_is_what_its_route_takes() {
    let doc: Value = serde_json::from_str(OPENAPI).unwrap();
    let resolve = |s: &Value| -> Value {
        match s["$ref"].as_str() {
            Some(r) => doc["components"]["schemas"][r.trim_start_matches("#/components/schemas/")].clone(),
            None => s.clone(),
        }
    };
    let sample = |s: &Value| -> Value {
        let s = resolve(s);
        match (s["enum"].get(0), s["type"].as_str()) {
            (Some(first), _) => first.clone(),
            (None, Some("boolean")) => json!(false),
            (None, Some("integer" | "number")) => json!(1),
            (None, Some("string")) => json!("x"),
            (None, Some("array")) => json!([]),
            _ => json!({}),
        }
    };
    let closed = |s: &Value| s["additionalProperties"] == json!(false) && s["properties"].is_object();
    let refused_as_unknown = |r: &orderly::api::ApiResponse| r.status == 400 && r.body.contains("unknown");
    let mut walked = 0;
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let schema = resolve(&op["requestBody"]["content"]["application/json"]["schema"]);
            if !closed(&schema) {
                continue;
            }
            let (method, path) = (method.to_uppercase(), path.replace("{key}", "k").replace("{name}", "beat"));
            let mut base = json!({});
            for r in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                base[r] = sample(&schema["properties"][r]);
            }
            let mut bodies = Vec::new();
            for (prop, ps) in schema["properties"].as_object().unwrap() {
                let mut body = base.clone();
                body[prop.as_str()] = sample(ps);
                bodies.push((prop.clone(), body));
                let inner = resolve(ps);
                if closed(&inner) {
                    for (p, s) in inner["properties"].as_object().unwrap() {
                        let mut body = base.clone();
                        body[prop.as_str()] = json!({ p.as_str(): sample(s) });
                        bodies.push((format!("{prop}.{p}"), body));
                    }
                    let mut body = base.clone();
                    body[prop.as_str()] = json!({"undocumented": 1});
                    let r = call_with_schedule(&method, &path, body);
                    assert!(
                        refused_as_unknown(&r),
                        "{method} {path}: {prop}.undocumented answered {} {}",
                        r.status,
                        r.body
                    );
                }
            }
            for (what, body) in bodies {
                let r = call_with_schedule(&method, &path, body.clone());
                assert!(
                    !refused_as_unknown(&r),
                    "{method} {path}: the documented {what} is refused: {body} answered {}",
                    r.body
                );
            }
            let mut body = base.clone();
            body["undocumented"] = json!(1);
            let r = call_with_schedule(&method, &path, body);
            assert!(refused_as_unknown(&r), "{method} {path}: an undocumented field answered {} {}", r.status, r.body);
            walked += 1;
        }
    }
    assert!(walked >= 5, "the document's closed bodies: {walked}");
}

/// A request to a fresh world with one schedule, `beat`.
fn call_with_schedule(method: &str, path: &str, body: Value) -> orderly::api::ApiResponse {
    let mut w = World::new();
    let schedules =
        r#"[{"name": "beat", "every_seconds": 60, "job": {"payload": {"type": "webhook", "url": "https://b.test/"}}}]"#;
    w.cfg = orderly::config::Config::from_lookup(|k| (k == "SCHEDULES").then(|| schedules.to_string())).unwrap();
    w.call(method, path, Some(body))
}

/// Every answer the document describes is what its route answers: each route of the API's own
/// table (not a list kept here), called so that it succeeds on a ledger holding a PENDING and a
/// DEAD job, answers a body that fits the document's schema for its status: each required
/// property present, each property of the documented type, and no property the document does not
/// name (a client generated from the document would drop it or refuse the answer). The routes
/// the worker's edge answers (the migration, the move) and the text ones (`/`, `/metrics`) are
/// checked e2e.
#[test]
fn every_answer_in_the_openapi_document_is_what_its_route_answers() {
    let doc: Value = serde_json::from_str(OPENAPI).unwrap();
    let (mut walked, mut wrong) = (0, Vec::new());
    for (method, pattern) in routes() {
        let (w, pending, dead) = world_with_a_pending_and_a_dead_job();
        let id = if pattern.contains("redrive") { &dead } else { &pending };
        // The DEAD job's key is blocked (strict, ON_DEAD=block): the one a skip is for.
        let key = if pattern.ends_with("/skip") { "b" } else { "k" };
        let path = pattern.replace("{id}", id).replace("{key}", key).replace("{name}", "beat");
        let (route, _) = Endpoint::parse(method, &path).unwrap();
        let path = if pattern == "/keys" { format!("{path}?state=blocked") } else { path };
        if matches!(
            route,
            Endpoint::Migrate { .. } | Endpoint::MoveLedger { .. } | Endpoint::Metrics | Endpoint::Dashboard
        ) {
            continue;
        }
        let body = match (method, pattern) {
            ("POST", "/jobs") => Some(json!({"payload": webhook("answer")})),
            ("POST", "/jobs/redrive") => Some(json!({"dry_run": true})),
            ("POST", "/jobs/cancel") => Some(json!({"dry_run": true, "filter": {"type": "webhook"}})),
            ("PUT", "/keys/{key}" | "/schedules/{name}") => Some(json!({"paused": true})),
            ("PUT", "/limits/{key}") => Some(json!({"paused": false})),
            ("GET", "/batches/{id}") => {
                let r = w.call(
                    "POST",
                    "/jobs",
                    Some(json!({"jobs": [{"payload": webhook("a")}], "then": {"payload": webhook("then")}})),
                );
                let batch = r.json_body()["then"]["id"].as_str().unwrap().to_string();
                let r = w.call(method, &format!("/batches/{batch}"), None);
                wrong.extend(check_answer(&doc, method, pattern, &r));
                walked += 1;
                continue;
            }
            _ => None,
        };
        let r = w.call(method, &path, body);
        wrong.extend(check_answer(&doc, method, pattern, &r));
        walked += 1;
    }
    assert!(wrong.is_empty(), "answers the document does not describe:\n{}", wrong.join("\n"));
    assert!(walked >= 20, "routes walked: {walked}");
}

/// An API in strict mode with `ON_DEAD=block` on a fresh ledger with one schedule, `beat`, a
/// PENDING job of the keys `k` and a DEAD one of the ordering key `b`: their ids.
fn world_with_a_pending_and_a_dead_job() -> (World, String, String) {
    let mut w = World::new();
    let schedules =
        r#"[{"name": "beat", "every_seconds": 60, "job": {"payload": {"type": "webhook", "url": "https://b.test/"}}}]"#;
    w.cfg = orderly::config::Config::from_lookup(|k| match k {
        "SCHEDULES" => Some(schedules.to_string()),
        "ORDERING_MODE" => Some("strict".into()),
        "ON_DEAD" => Some("block".into()),
        _ => None,
    })
    .unwrap();
    let pending = w.submit(json!({"payload": webhook("p"), "ordering_key": "k", "limit_key": "k"}));
    let dead = w.submit(json!({"payload": webhook("d"), "ordering_key": "b"}));
    w.kill(&dead, "boom", T0 + 1);
    (w, pending, dead)
}

/// Where `r`, the answer to `method pattern`, is no success or does not fit the document's schema
/// for its status: none when it fits.
fn check_answer(doc: &Value, method: &str, pattern: &str, r: &orderly::api::ApiResponse) -> Vec<String> {
    let op = &doc["paths"][pattern][method.to_ascii_lowercase()];
    let schema = &op["responses"][r.status.to_string()]["content"]["application/json"]["schema"];
    if !(200..300).contains(&r.status) || schema.is_null() {
        return vec![format!(
            "{method} {pattern} answered {}, no success the document describes: {}",
            r.status, r.body
        )];
    }
    let mut wrong = Vec::new();
    fits(doc, schema, &r.json_body(), "", &mut wrong);
    wrong.into_iter().map(|w| format!("{method} {pattern}: {w}")).collect()
}

/// Collects in `wrong` each place where `v` does not fit `schema`: a type, a required property, a
/// property the schema does not name (unless it allows others), an enum's value.
fn fits(doc: &Value, schema: &Value, v: &Value, at: &str, wrong: &mut Vec<String>) {
    if let Some(r) = schema["$ref"].as_str() {
        let named = &doc["components"]["schemas"][r.trim_start_matches("#/components/schemas/")];
        return fits(doc, named, v, at, wrong);
    }
    if let Some(options) = schema["oneOf"].as_array().or(schema["anyOf"].as_array()) {
        let fitting = options.iter().any(|s| {
            let mut w = Vec::new();
            fits(doc, s, v, at, &mut w);
            w.is_empty()
        });
        if !fitting {
            wrong.push(format!("{at}: {v} fits none of its schemas"));
        }
        return;
    }
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if !types.is_empty() && !types.iter().any(|t| *t == kind || (*t == "number" && kind == "integer")) {
        wrong.push(format!("{at}: {v} is {kind}, documented {types:?}"));
        return;
    }
    if let Some(values) = schema["enum"].as_array() {
        if !values.contains(v) {
            wrong.push(format!("{at}: {v} is not one of {values:?}"));
        }
    }
    match v {
        Value::Array(items) if schema["items"].is_object() => {
            for (i, item) in items.iter().enumerate() {
                fits(doc, &schema["items"], item, &format!("{at}[{i}]"), wrong);
            }
        }
        Value::Object(fields) if schema["properties"].is_object() || !schema["additionalProperties"].is_null() => {
            for r in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if !fields.contains_key(r) {
                    wrong.push(format!("{at}.{r}: required, absent"));
                }
            }
            for (name, value) in fields {
                let place = format!("{at}.{name}");
                match (&schema["properties"][name.as_str()], &schema["additionalProperties"]) {
                    (Value::Null, Value::Bool(true)) => {}
                    (Value::Null, Value::Object(other)) => {
                        fits(doc, &Value::Object(other.clone()), value, &place, wrong);
                    }
                    (Value::Null, _) => wrong.push(format!("{place}: not in the document")),
                    (s, _) => fits(doc, s, value, &place, wrong),
                }
            }
        }
        _ => {}
    }
}
