//! Periodic jobs (design §23) on the host: `SCHEDULES` read by the real configuration, cron runs
//! (`periodic::run`) submitting through the real API over real SQLite, the jobs run by the
//! real consumer. Each period's job is enqueued once however many runs see it; a missed period is
//! caught up once (or skipped); a pause enqueues nothing and catches nothing up; a refused template
//! is retried, never passed over; the API lists and pauses.

use crate::support::api::T0;
use crate::support::consumer::ConsumerWorld as World;
use orderly::clock::Clock;
use orderly::config::Config;
use orderly::ledger::Status;
use serde_json::{json, Value};

const MIN: i64 = 60_000;

/// A world whose `SCHEDULES` is `schedules`, its clock at the start of a minute.
fn world(schedules: Value) -> World {
    let text = schedules.to_string();
    let cfg = Config::from_lookup(|k| (k == "SCHEDULES").then(|| text.clone())).expect("SCHEDULES reads");
    let w = World::new(cfg);
    w.clock.advance_ms(MIN - T0.rem_euclid(MIN));
    w
}

fn webhook(tag: &str) -> Value {
    json!({"type": "webhook", "url": "https://h.test/", "body": {"tag": tag}})
}

fn every_minute(missed: &str) -> Value {
    json!([{"name": "beat", "cron": "* * * * *", "missed": missed,
            "job": {"payload": webhook("beat"), "ordering_key": "beats"}}])
}

/// The ids of the schedule's jobs in the ledger, oldest first.
fn jobs_of(w: &World) -> Vec<String> {
    let r = w.call("GET", "/jobs?ordering_key=beats&limit=100", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let mut ids: Vec<String> =
        r.json_body()["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect();
    ids.sort();
    ids
}

fn minute_id(m: i64, start: i64) -> String {
    format!("schedule:beat:{}", start + m * MIN)
}

#[test]
fn two_runs_in_a_minute_enqueue_one_job_and_a_skipped_minute_is_caught_up_once() {
    let w = world(every_minute("catch_up"));
    let start = w.clock.now_ms();
    w.clock.advance_ms(5_000);
    assert_eq!(w.tick().submitted, vec![minute_id(0, start)], "a new every-minute schedule runs at once");
    w.clock.advance_ms(30_000);
    assert_eq!(w.tick().submitted, Vec::<String>::new(), "a second run in the same minute");
    // Minute 1 has no run; minute 2's run catches it up, once.
    w.clock.advance_ms(2 * MIN);
    let t = w.tick();
    assert_eq!(t.submitted, vec![minute_id(1, start), minute_id(2, start)], "{t:?}");
    assert_eq!(w.tick().submitted, Vec::<String>::new());
    // Three minutes without a run: only the latest missed one is caught up.
    w.clock.advance_ms(4 * MIN);
    assert_eq!(w.tick().submitted, vec![minute_id(5, start), minute_id(6, start)]);
    assert_eq!(jobs_of(&w), (0..=6).filter(|m| ![3, 4].contains(m)).map(|m| minute_id(m, start)).collect::<Vec<_>>());
    // The jobs run, in their key's order, as any job does.
    w.drain();
    assert_eq!(w.runs(), jobs_of(&w));
}

#[test]
fn with_skip_a_missed_period_is_not_enqueued() {
    let w = world(every_minute("skip"));
    let start = w.clock.now_ms();
    w.tick();
    w.clock.advance_ms(3 * MIN);
    assert_eq!(w.tick().submitted, vec![minute_id(3, start)]);
}

#[test]
fn a_period_whose_job_was_purged_is_not_enqueued_again() {
    let w = world(every_minute("catch_up"));
    let start = w.clock.now_ms();
    w.tick();
    w.drain();
    assert_eq!(w.job(&minute_id(0, start)).status, Status::Done);
    // The DONE job is purged (retention 0 days); a run in the same minute submits nothing.
    let mut cfg = w.cfg.clone();
    cfg.retention_days = 0;
    w.clock.advance_ms(1_000);
    let purged = futures::executor::block_on(orderly::maintenance::run(
        &orderly::ledger::Ledger::new(&w.db),
        &w.queue,
        &w.clock,
        &cfg,
    ))
    .purged;
    assert_eq!(purged, 1);
    assert_eq!(w.tick().submitted, Vec::<String>::new(), "the schedule's row remembers the period");
}

#[test]
fn a_run_that_died_before_recording_its_period_leaves_the_next_run_a_duplicate() {
    let w = world(every_minute("catch_up"));
    let start = w.clock.now_ms();
    // The run submitted the job, then died: the period is not recorded.
    w.call(
        "POST",
        "/jobs",
        Some(json!({"id": minute_id(0, start), "payload": webhook("beat"), "ordering_key": "beats"})),
    );
    assert_eq!(w.tick().submitted, Vec::<String>::new(), "the same id: a duplicate, not a second job");
    assert_eq!(jobs_of(&w), vec![minute_id(0, start)]);
}

#[test]
fn a_paused_schedule_enqueues_nothing_and_its_resume_catches_none_of_the_pause_up() {
    let w = world(every_minute("catch_up"));
    let start = w.clock.now_ms();
    w.tick();
    let r = w.call("PUT", "/schedules/beat", Some(json!({"paused": true})));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json_body()["paused"], true);
    for _ in 0..3 {
        w.clock.advance_ms(MIN);
        assert_eq!(w.tick().submitted, Vec::<String>::new());
    }
    assert_eq!(w.call("PUT", "/schedules/beat", Some(json!({"paused": false}))).json_body()["paused"], false);
    w.clock.advance_ms(MIN);
    assert_eq!(w.tick().submitted, vec![minute_id(4, start)], "no catch-up of the paused minutes");
}

#[test]
fn a_daily_schedule_first_seen_late_in_its_period_runs_first_at_the_next() {
    let w = world(json!([{"name": "nightly", "cron": "0 3 * * *", "job": {"payload": webhook("n")}}]));
    let day = w.clock.now_ms() - w.clock.now_ms().rem_euclid(1440 * MIN);
    w.clock.advance_ms(day + 1440 * MIN + 15 * 60 * MIN - w.clock.now_ms());
    assert_eq!(w.tick().submitted, Vec::<String>::new(), "15:00: today's 03:00 is not run late");
    w.clock.advance_ms(12 * 60 * MIN + 30_000);
    assert_eq!(w.tick().submitted, vec![format!("schedule:nightly:{}", day + 2 * 1440 * MIN + 180 * MIN)]);
}

#[test]
fn a_refused_template_is_reported_and_tried_again_not_passed_over() {
    let w = world(json!([{"name": "bad", "every_seconds": 60,
                          "job": {"payload": {"type": "webhook", "url": "http://127.0.0.1/"}}}]));
    let t = w.tick();
    assert!(t.submitted.is_empty() && t.errors.len() == 1, "{t:?}");
    assert!(t.errors[0].starts_with("schedule bad: refused"), "{t:?}");
    let listed = w.call("GET", "/schedules", None).json_body();
    assert_eq!(listed["schedules"][0]["last_period"], Value::Null, "not recorded as seen");
    w.clock.advance_ms(10_000);
    assert_eq!(w.tick().errors.len(), 1, "tried again on the next run");
}

#[test]
fn the_api_lists_each_schedule_with_its_last_and_next_period_and_refuses_what_it_cannot_do() {
    let w = world(json!([
        {"name": "beat", "cron": "*/5 * * * *", "job": {"payload": webhook("b")}},
        {"name": "hourly", "every_seconds": 3600, "missed": "skip", "job": {"payload": webhook("h")}},
    ]));
    let now = w.clock.now_ms();
    let five = now - now.rem_euclid(5 * MIN);
    let listed = w.call("GET", "/schedules", None).json_body();
    let beat = &listed["schedules"][0];
    assert_eq!(
        (beat["name"].as_str(), beat["cron"].as_str(), beat["missed"].as_str()),
        (Some("beat"), Some("*/5 * * * *"), Some("catch_up"))
    );
    assert_eq!((beat["last_period"].clone(), beat["next_period"].as_i64()), (Value::Null, Some(five + 5 * MIN)));
    assert_eq!(listed["schedules"][1]["every_seconds"], 3600);
    w.clock.advance_ms(5 * MIN - (now - five));
    w.tick();
    let beat = w.call("GET", "/schedules", None).json_body()["schedules"][0].clone();
    assert_eq!(beat["last_period"].as_i64(), Some(five + 5 * MIN));
    assert_eq!(beat["last_job_id"].as_str().map(str::to_string), Some(format!("schedule:beat:{}", five + 5 * MIN)));
    for (body, status) in [(json!({"paused": "yes"}), 400), (json!({}), 400), (json!({"paused": true, "when": 1}), 400)]
    {
        assert_eq!(w.call("PUT", "/schedules/beat", Some(body)).status, status);
    }
    assert_eq!(w.call("PUT", "/schedules/nope", Some(json!({"paused": true}))).status, 404);
}

#[test]
fn a_sensitive_schedule_s_payload_is_not_shown() {
    let w = world(json!([{"name": "secret", "every_seconds": 60,
                          "job": {"payload": webhook("s3cret"), "sensitive": true}}]));
    let listed = w.call("GET", "/schedules", None).body;
    assert!(!listed.contains("s3cret"), "{listed}");
    assert!(listed.contains("\"payload\":\"redacted\""), "{listed}");
}

#[test]
fn a_bad_schedules_var_is_a_configuration_error_naming_it() {
    let e = Config::from_lookup(|k| {
        (k == "SCHEDULES").then(|| r#"[{"name": "x", "cron": "* * *", "job": {"payload": 1}}]"#.into())
    })
    .unwrap_err();
    assert_eq!(e.var, "SCHEDULES");
    assert!(e.reason.contains("schedule 0: cron:"), "{e}");
}

#[test]
fn a_run_that_saw_an_older_period_finishing_late_does_not_move_the_schedule_back() {
    let w = world(every_minute("catch_up"));
    let ledger = orderly::ledger::Ledger::new(&w.db);
    futures::executor::block_on(ledger.schedules_seen(&[("beat", 5 * MIN, Some("new".into()))], T0)).unwrap();
    futures::executor::block_on(ledger.schedules_seen(&[("beat", 3 * MIN, Some("old".into()))], T0)).unwrap();
    let states = futures::executor::block_on(ledger.schedule_states()).unwrap();
    assert_eq!((states[0].last_period, states[0].last_job_id.as_deref()), (Some(5 * MIN), Some("new")));
}

#[test]
fn a_schedule_s_job_keeps_its_ordering_key_and_limit_key_and_waits_for_a_paused_key() {
    let w = world(json!([{"name": "beat", "cron": "* * * * *",
                          "job": {"payload": webhook("beat"), "ordering_key": "beats", "limit_key": "host.test"}}]));
    let start = w.clock.now_ms();
    assert_eq!(w.call("PUT", "/keys/beats", Some(json!({"paused": true}))).status, 200);
    assert_eq!(w.tick().submitted, vec![minute_id(0, start)]);
    let job = w.job(&minute_id(0, start));
    assert_eq!((job.ordering_key.as_deref(), job.limit_key.as_deref()), (Some("beats"), Some("host.test")));
    w.drain();
    assert!(w.runs().is_empty(), "its ordering key is paused: nothing of it starts");
    assert_eq!(w.call("PUT", "/keys/beats", Some(json!({"paused": false}))).status, 200);
    w.drain();
    assert_eq!(w.runs(), vec![minute_id(0, start)]);
    assert_eq!(w.job(&minute_id(0, start)).status, Status::Done);
}
