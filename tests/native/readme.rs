//! The README's first job: a handler and its test, run with orderly's test kit.

use orderly::testkit::TestJob;
use orderly::{Cx, Done, Handlers, Job, JobError};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
struct Greet {
    name: String,
}

/// Greets someone. No name is a permanent failure: the job is DEAD at once, with the reason.
async fn greet<E>(job: Job<Greet>, cx: Cx<E>) -> Result<Done, JobError> {
    if job.name.is_empty() {
        return Err(JobError::permanent("no name to greet"));
    }
    let greeting = json!({ "greeting": format!("hello, {}", job.name), "attempt": cx.attempt });
    Ok(Done { result: Some(greeting), http_status: None })
}

/// Your job types, by name: in a worker, `App::builder().handler("greet", greet)`.
fn handlers<E: 'static>() -> Handlers<E> {
    Handlers::new().handler("greet", greet)
}

#[test]
fn greets_by_name_and_gives_up_on_no_name() {
    let job = TestJob::new(json!({ "type": "greet", "name": "Ada" }), ());
    let done = job.run_now(&handlers()).unwrap();
    assert_eq!(done.result, Some(json!({ "greeting": "hello, Ada", "attempt": 1 })));

    let nameless = TestJob::new(json!({ "type": "greet", "name": "" }), ());
    assert!(matches!(nameless.run_now(&handlers()), Err(JobError::Permanent { .. })));
}
