//! Each attempt observed (design §27.5), in both modes: a span per attempt named for its job type,
//! opened before the run and ended once after it with its outcome, and one data point per
//! finished attempt (type, outcome, queue wait, run time, attempt), through the consumer's
//! observer port; a consumer with no observer runs the same.

use std::cell::RefCell;

use orderly::config::{Config, OrderingMode};
use orderly::handlers::{Done, JobContext, JobError, Runner};
use orderly::observe::Attr;
use serde_json::json;

use crate::support::consumer::{ConsumerWorld, Observed};

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// `ok` succeeds; `flaky` fails its first attempt; `nap` snoozes once; `bad` fails for good.
#[derive(Default)]
struct Mixed {
    napped: RefCell<bool>,
}

impl Runner for Mixed {
    async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
        match job.id {
            "flaky" if job.attempt == 1 => Err(JobError::retry("not yet")),
            "nap" if !self.napped.replace(true) => Err(JobError::snooze(5, "later")),
            "bad" => Err(JobError::permanent("never")),
            _ => Ok(Done::default()),
        }
    }
}

fn text(attrs: &[(&'static str, Attr)], name: &str) -> Option<String> {
    attrs.iter().find(|(n, _)| *n == name).map(|(_, v)| match v {
        Attr::Text(t) => t.clone(),
        Attr::Number(n) => n.to_string(),
    })
}

#[test]
fn every_attempt_is_a_span_and_a_data_point_with_its_outcome() {
    for mode in [OrderingMode::Lock, OrderingMode::Strict] {
        let w = ConsumerWorld::new(Config { ordering_mode: mode, ..Config::default() });
        let job = |id: &str, ty: &str| json!({"id": id, "payload": {"type": ty, "url": "https://h.test/"}, "ordering_key": id});
        let mut jobs =
            vec![job("ok", "webhook"), job("flaky", "webhook"), job("nap", "webhook"), job("bad", "webhook")];
        jobs[0]["traceparent"] = json!(PARENT);
        let r = w.call("POST", "/jobs", Some(json!({ "jobs": jobs })));
        assert_eq!(r.status, 202, "{}", r.body);
        w.drain_with(&Mixed::default());

        let spans = w.observed.spans.borrow();
        let points = w.observed.points.borrow();
        assert_eq!(spans.len(), points.len(), "{mode:?}: a data point per span");
        let mut seen: Vec<(String, String, String)> = Vec::new();
        for ((name, start, end), point) in spans.iter().zip(points.iter()) {
            let end = end.as_ref().unwrap_or_else(|| panic!("{mode:?}: span {name} never ended"));
            let id = text(start, "orderly.job.id").unwrap();
            let ty = text(start, "orderly.job.type").unwrap();
            let outcome = text(end, "orderly.job.outcome").unwrap();
            assert_eq!(name, &format!("orderly.run {ty}"));
            assert_eq!(point.blobs, [ty.clone(), outcome.clone()], "{mode:?} {id}");
            assert_eq!(point.index, ty);
            assert_eq!(point.doubles[2].to_string(), text(start, "orderly.job.attempt").unwrap(), "{mode:?} {id}");
            let key = text(start, "orderly.job.ordering_key").unwrap();
            assert!(key.starts_with("hmac:") && !key.contains(&id), "{mode:?}: keys hashed by default: {key}");
            seen.push((id, text(start, "orderly.job.attempt").unwrap(), outcome));
        }
        seen.sort();
        let want = [
            ("bad", "1", "dead"),
            ("flaky", "1", "retry"),
            ("flaky", "2", "done"),
            ("nap", "1", "done"),
            ("nap", "1", "snooze"),
            ("ok", "1", "done"),
        ];
        let got: Vec<(&str, &str, &str)> = seen.iter().map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str())).collect();
        assert_eq!(got, want, "{mode:?}");
        // The retry's second attempt waited from its due time (its backoff's end), not from its
        // failure: delivered at its delay, it waited next to nothing.
        let second = spans
            .iter()
            .find(|s| {
                text(&s.1, "orderly.job.id").as_deref() == Some("flaky")
                    && text(&s.1, "orderly.job.attempt").as_deref() == Some("2")
            })
            .unwrap();
        let wait: f64 = text(&second.1, "orderly.job.queue_wait_ms").unwrap().parse().unwrap();
        assert!(wait < 1_000.0, "{mode:?}: {wait} ms");
        // The dashboard's time charts (design §27.6): every run of the hour timed, the queue wait
        // of each successful one.
        let activity = w.call("GET", "/jobs/activity", None).json_body();
        let times = &activity["times"];
        assert_eq!(times.as_array().map(Vec::len), Some(1), "{mode:?}: {activity}");
        assert_eq!(
            (times[0]["type"].as_str(), times[0]["runs"].as_u64(), times[0]["waits"].as_u64()),
            (Some("webhook"), Some(6), Some(3)),
            "{mode:?}: {times}"
        );
        // Its waits are the spans' waits (one rule, observe::queue_wait_ms, written twice: in Rust
        // for the span, in run_times.sql for the chart): with three, p50 the middle, p95 the most.
        let mut waits: Vec<i64> = spans
            .iter()
            .filter(|s| s.2.as_ref().and_then(|end| text(end, "orderly.job.outcome")).as_deref() == Some("done"))
            .map(|s| text(&s.1, "orderly.job.queue_wait_ms").unwrap().parse::<f64>().unwrap() as i64)
            .collect();
        waits.sort_unstable();
        assert_eq!(
            (times[0]["wait_p50_ms"].as_i64(), times[0]["wait_p95_ms"].as_i64()),
            (Some(waits[1]), Some(waits[2])),
            "{mode:?}: {times} against the spans' {waits:?}"
        );
        let ok = spans.iter().find(|s| text(&s.1, "orderly.job.id").as_deref() == Some("ok")).unwrap();
        let run = text(&ok.1, "orderly.job.traceparent").expect("a job with a trace names it");
        assert!(run.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && run != PARENT, "{run}");
    }
}

#[test]
fn trace_keys_plain_names_keys_as_they_are() {
    let cfg = Config::from_lookup(|v| (v == "TRACE_KEYS").then(|| "plain".to_string())).unwrap();
    assert!(cfg.trace_keys_plain);
    assert!(Config::from_lookup(|v| (v == "TRACE_KEYS").then(|| "yes".to_string())).is_err());
    let w = ConsumerWorld::new(cfg);
    let r = w.call(
        "POST",
        "/jobs",
        Some(json!({"payload": {"type": "webhook", "url": "https://h.test/"}, "ordering_key": "alice"})),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    w.drain_with(&Mixed::default());
    let spans = w.observed.spans.borrow();
    assert_eq!(text(&spans[0].1, "orderly.job.ordering_key").as_deref(), Some("alice"));
}

/// A run as [`Inside`] saw it: its job, and the span entered at each of its polls.
type SeenRun = (String, Vec<Option<usize>>);

/// Records which span is entered while the handler runs: at its start, and again after it has
/// yielded once (a second poll, as a fetch's answer would wake it).
struct Inside<'a> {
    observed: &'a Observed,
    runs: RefCell<Vec<SeenRun>>,
}

impl Runner for Inside<'_> {
    async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
        let first = self.observed.entered.get();
        let mut yielded = false;
        std::future::poll_fn(|cx| {
            if std::mem::replace(&mut yielded, true) {
                return std::task::Poll::Ready(());
            }
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        })
        .await;
        let second = self.observed.entered.get();
        self.runs.borrow_mut().push((job.id.to_string(), vec![first, second]));
        Ok(Done::default())
    }
}

#[test]
fn a_handler_runs_inside_its_own_run_s_span() {
    for mode in [OrderingMode::Lock, OrderingMode::Strict] {
        let w = ConsumerWorld::new(Config { ordering_mode: mode, ..Config::default() });
        let jobs: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|id| json!({"id": id, "payload": {"type": "webhook", "url": "https://h.test/"}, "ordering_key": id}))
            .collect();
        let r = w.call("POST", "/jobs", Some(json!({ "jobs": jobs })));
        assert_eq!(r.status, 202, "{}", r.body);
        let inside = Inside { observed: &w.observed, runs: RefCell::default() };
        w.drain_with(&inside);
        // Entered only while the run's own polls run: the ledger's calls between are beside it.
        assert_eq!(w.observed.entered.get(), None, "{mode:?}: no span stays entered after its run");
        let spans = w.observed.spans.borrow();
        let runs = inside.runs.borrow();
        assert_eq!(runs.len(), 3, "{mode:?}: {runs:?}");
        for (id, polls) in runs.iter() {
            for entered in polls {
                let span = entered.unwrap_or_else(|| panic!("{mode:?}: {id} ran outside any span: {polls:?}"));
                assert_eq!(
                    text(&spans[span].1, "orderly.job.id").as_deref(),
                    Some(id.as_str()),
                    "{mode:?}: {id}'s own span"
                );
            }
        }
    }
}
