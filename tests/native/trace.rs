//! Trace context carried with a job (design §27), on the D1 stand-in: a job submitted with a W3C
//! `traceparent` (its own field, or the request's) keeps it on its row, and each attempt runs as
//! a span of that trace (the same trace id, a span id of its own), which its handler sees and a
//! webhook or service handler's request carries on; a job submitted with none has none.

use std::cell::RefCell;

use orderly::config::{Config, OrderingMode};
use orderly::handlers::{Done, JobContext, JobError, Runner};
use serde_json::json;

use crate::support::consumer::ConsumerWorld;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Records each run's trace context; fails each job's first attempt.
#[derive(Default)]
struct Traced {
    runs: RefCell<Vec<(String, u32, Option<String>)>>,
}

impl Runner for Traced {
    async fn run(&self, job: &JobContext<'_>) -> Result<Done, JobError> {
        self.runs.borrow_mut().push((job.id.to_string(), job.attempt, job.trace.map(|t| t.traceparent.clone())));
        if job.attempt == 1 {
            return Err(JobError::retry("not yet"));
        }
        Ok(Done::default())
    }
}

#[test]
fn each_attempt_of_a_job_submitted_in_a_trace_is_a_span_of_that_trace() {
    for mode in [OrderingMode::Lock, OrderingMode::Strict] {
        let w = ConsumerWorld::new(Config { ordering_mode: mode, ..Config::default() });
        let jobs = json!({"jobs": [
            {"id": "traced", "payload": {"type": "webhook", "url": "https://h.test/"}, "ordering_key": "k", "traceparent": PARENT, "tracestate": "congo=t61"},
            {"id": "plain", "payload": {"type": "webhook", "url": "https://h.test/"}},
        ]});
        let r = w.call("POST", "/jobs", Some(jobs));
        assert_eq!(r.status, 202, "{}", r.body);
        let row = w.call("GET", "/jobs/traced", None).json_body();
        assert_eq!(row["job"]["traceparent"], json!(PARENT), "{row}");
        assert_eq!(row["job"]["tracestate"], json!("congo=t61"));
        let runner = Traced::default();
        w.drain_with(&runner);
        let runs = runner.runs.borrow();
        let traced: Vec<&(String, u32, Option<String>)> = runs.iter().filter(|r| r.0 == "traced").collect();
        assert_eq!(traced.iter().map(|r| r.1).collect::<Vec<_>>(), [1, 2], "{mode:?}");
        let spans: Vec<&str> = traced.iter().map(|r| r.2.as_deref().expect("a trace context")).collect();
        for span in &spans {
            assert!(span.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && span.ends_with("-01"), "{span}");
            assert_ne!(*span, PARENT, "the run is a span of its own");
        }
        assert_ne!(spans[0], spans[1], "each attempt its own span");
        assert!(runs.iter().filter(|r| r.0 == "plain").all(|r| r.2.is_none()), "no trace, no context");
    }
}

#[test]
fn a_bad_traceparent_field_is_refused_naming_it() {
    let w = ConsumerWorld::new(Config::default());
    for bad in [json!("00-xyz"), json!(7)] {
        let r = w.call(
            "POST",
            "/jobs",
            Some(json!({"payload": {"type": "webhook", "url": "https://h.test/"}, "traceparent": bad})),
        );
        assert_eq!(r.status, 400, "{}", r.body);
        assert!(r.json_body()["error"].as_str().unwrap().contains("traceparent"), "{}", r.body);
    }
    let r = w.call(
        "POST",
        "/jobs",
        Some(json!({"payload": {"type": "webhook", "url": "https://h.test/"}, "tracestate": "a=b"})),
    );
    assert_eq!(r.status, 400, "a tracestate alone: {}", r.body);
}

#[test]
fn a_request_s_traceparent_header_is_carried_by_its_jobs() {
    use futures::executor::block_on;
    use orderly::api::ApiRequest;
    use orderly::trace::TraceContext;
    let w = crate::support::api::ApiWorld::new();
    let new_id = || "from-header".to_string();
    let api = w.api(Ok(&w.cfg), Some(crate::support::api::TOKEN), &new_id);
    let req = ApiRequest {
        method: "POST".into(),
        path: "/jobs".into(),
        authorization: Some(format!("Bearer {}", crate::support::api::TOKEN)),
        body: json!({"payload": {"type": "webhook", "url": "https://h.test/"}}).to_string().into_bytes(),
        trace: TraceContext::from_headers(Some(PARENT), None),
        ..ApiRequest::default()
    };
    assert_eq!(block_on(api.handle(&req)).status, 202);
    assert_eq!(w.call("GET", "/jobs/from-header", None).json_body()["job"]["traceparent"], json!(PARENT));
}
