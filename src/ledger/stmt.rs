//! The statement builders: one per SQL file of `sql/`, each binding its file's parameters by the
//! names the file declares (`-- params: ?1 id, ?2 now`). Pure: they only bind. Only the ledger
//! runs them; `params::every_file_is_bound_by_its_declared_names` checks each builder against
//! its file.

use serde_json::Value;

use super::history::{Kind, Run, API_ACTOR, HISTORY_KEEP};
use super::job::{DeadFilter, JobSpec, Lease, ListFilter, Status};
use super::store::{Param, Row, Stmt};
use crate::bounds::MAX_PRIORITY;
use crate::config::{OnDead, OrderingMode};

macro_rules! sql {
    ($name:literal) => {
        include_str!(concat!("sql/", $name, ".sql"))
    };
}

/// A statement of `sql` with named parameters.
fn with<const N: usize>(sql: &'static str, params: [(&'static str, Param); N]) -> Stmt {
    Stmt::bind(sql, params)
}

/// A job's spec as the first six parameters of the statements that record one, then `rest`, then
/// its limit key (added with migration 0009), deadline and timeout (0011).
fn spec_then(sql: &'static str, job: &JobSpec, rest: impl IntoIterator<Item = (&'static str, Param)>) -> Stmt {
    let spec = [
        ("id", job.id.as_str().into()),
        ("type", job.job_type.clone().into()),
        ("ordering_key", job.ordering_key.clone().into()),
        ("dedupe_key", job.dedupe_key.clone().into()),
        ("payload", job.payload.clone().into()),
        ("max_attempts", job.max_attempts.into()),
    ];
    let last = [
        ("limit_key", job.limit_key.clone().into()),
        ("deadline_at", job.deadline_at.map_or(Param::Null, Param::Int)),
        ("timeout_seconds", job.timeout_seconds.map_or(Param::Null, |t| Param::Int(i64::from(t)))),
    ];
    Stmt::bind(sql, spec.into_iter().chain(rest).chain(last))
}

fn priority(job: &JobSpec) -> (&'static str, Param) {
    ("priority", Param::Int(i64::from(job.priority.min(MAX_PRIORITY))))
}

fn status_code(s: Option<u16>) -> Param {
    s.map_or(Param::Null, |s| Param::Int(i64::from(s)))
}

/// Claims `job` for `owner` under `lease`; PENDING rows qualify once due before `lease.due_before`.
/// A new job is created now. (The tests' shorthand: the consumer always knows when it was sent.)
#[cfg(feature = "testing")]
pub fn claim(job: &JobSpec, owner: &str, lease: Lease) -> Stmt {
    claim_sent(job, lease.now, owner, lease)
}
/// [`claim`] for a job whose message was sent at `sent_at`: a new job is created then.
pub fn claim_sent(job: &JobSpec, sent_at: i64, owner: &str, lease: Lease) -> Stmt {
    let rest = [
        ("lease_owner", owner.into()),
        ("lease_until", lease.until.into()),
        ("now", lease.now.into()),
        ("due_before", lease.due_before.into()),
        priority(job),
    ];
    let mut s = spec_then(sql!("claim"), job, rest);
    s.names.push("sent_at");
    s.params.push(sent_at.into());
    s
}
/// Reads one job.
pub fn get(id: &str) -> Stmt {
    with(sql!("get"), [("id", id.into())])
}
/// RUNNING -> DONE, by the owner, keeping the run's result (JSON text, already bounded) and the
/// HTTP status the run got (the row describes the run).
#[cfg(any(test, feature = "testing"))]
pub fn complete(id: &str, owner: &str, now: i64, result: Option<&str>, http_status: Option<u16>) -> Stmt {
    complete_run(id, owner, now, result, http_status, None)
}
/// [`complete`] for a run whose handler was called at `started_at` (`None`: the row keeps its claim's).
pub fn complete_run(id: &str, owner: &str, now: i64, result: Option<&str>, http_status: Option<u16>, started_at: Option<i64>) -> Stmt {
    let params = [
        ("id", id.into()),
        ("lease_owner", owner.into()),
        ("now", now.into()),
        ("result", result.into()),
        ("http_status", status_code(http_status)),
        ("started_at", started_at.map_or(Param::Null, Param::Int)),
    ];
    with(sql!("complete"), params)
}
/// RUNNING -> PENDING (retry at `next_run_at`) or DEAD, by the owner.
#[cfg(any(test, feature = "testing"))]
pub fn fail(id: &str, owner: &str, now: i64, to: Status, next_run_at: i64, error: &str) -> Stmt {
    fail_run(id, owner, now, to, next_run_at, error, None)
}
/// [`fail`] for a run whose handler was called at `started_at`.
pub fn fail_run(id: &str, owner: &str, now: i64, to: Status, next_run_at: i64, error: &str, started_at: Option<i64>) -> Stmt {
    let params = [
        ("id", id.into()),
        ("lease_owner", owner.into()),
        ("now", now.into()),
        ("status", to.as_str().into()),
        ("next_run_at", next_run_at.into()),
        ("error", error.into()),
        ("started_at", started_at.map_or(Param::Null, Param::Int)),
    ];
    with(sql!("fail"), params)
}
/// A claimed job not run: back to PENDING, attempt given back, deferral counted.
pub fn defer(id: &str, owner: &str, now: i64, next_run_at: i64, parked: bool) -> Stmt {
    let params = [
        ("id", id.into()),
        ("lease_owner", owner.into()),
        ("now", now.into()),
        ("next_run_at", next_run_at.into()),
        ("parked", i64::from(parked).into()),
    ];
    with(sql!("defer"), params)
}
/// A run that snoozed: back to PENDING at `next_run_at`, attempt given back, snooze counted, its
/// payload replaced by `payload` if given (sealed already when the job is).
#[cfg(any(test, feature = "testing"))]
pub fn snooze(id: &str, owner: &str, now: i64, next_run_at: i64, payload: Option<&str>) -> Stmt {
    snooze_run(id, owner, now, next_run_at, payload, None)
}
/// [`snooze`] for a run whose handler was called at `started_at`.
pub fn snooze_run(id: &str, owner: &str, now: i64, next_run_at: i64, payload: Option<&str>, started_at: Option<i64>) -> Stmt {
    let params = [
        ("id", id.into()),
        ("lease_owner", owner.into()),
        ("now", now.into()),
        ("next_run_at", next_run_at.into()),
        ("payload", payload.into()),
        ("started_at", started_at.map_or(Param::Null, Param::Int)),
    ];
    with(sql!("snooze"), params)
}
/// A message put off because its key is locked: recorded PENDING, deferral counted.
pub fn note_deferral(job: &JobSpec, now: i64, next_run_at: i64) -> Stmt {
    spec_then(sql!("note_deferral"), job, [("now", now.into()), ("next_run_at", next_run_at.into()), priority(job)])
}
/// A PENDING job put off again: its `next_run_at` kept within `slack_ms` of `next_run_at`.
pub fn keep_due(id: &str, next_run_at: i64, now: i64, slack_ms: i64) -> Stmt {
    let params =
        [("id", id.into()), ("next_run_at", next_run_at.into()), ("now", now.into()), ("slack", slack_ms.into())];
    with(sql!("keep_due"), params)
}
/// A job that can never run: DEAD with `error`.
pub fn record_dead(job: &JobSpec, now: i64, error: &str) -> Stmt {
    spec_then(sql!("record_dead"), job, [("now", now.into()), ("error", error.into()), priority(job)])
}
/// Extends `owner`'s leases on `ids` (the jobs it claimed), each read by its id.
pub fn renew(owner: &str, now: i64, lease_until: i64, ids: &[String]) -> Stmt {
    let ids = Value::from(ids.to_vec()).to_string();
    let params =
        [("lease_owner", owner.into()), ("now", now.into()), ("lease_until", lease_until.into()), ("ids", ids.into())];
    with(sql!("renew"), params)
}
/// The leases of `owner`, an invocation that died, ended now: its RUNNING jobs back to PENDING (or
/// DEAD when out of attempts), `why` their error.
pub fn end_leases(now: i64, owner: &str, why: &str) -> Stmt {
    with(sql!("end_leases"), [("now", now.into()), ("lease_owner", owner.into()), ("why", why.into())])
}
/// Expired leases back to PENDING (or DEAD when out of attempts).
pub fn reap(now: i64, limit: u32) -> Stmt {
    with(sql!("reap"), [("now", now.into()), ("limit", limit.into())])
}
/// PENDING jobs due before `due_before`; in strict mode only those outside a key's sequence.
pub fn overdue(due_before: i64, limit: u32, mode: OrderingMode) -> Stmt {
    with(sql!("overdue"), [("due_before", due_before.into()), ("limit", limit.into()), ("mode", mode.as_str().into())])
}
/// Strict mode: records a delivered keyed job PENDING with its key's next seq, if new.
pub fn park(job: &JobSpec, now: i64) -> Stmt {
    spec_then(sql!("park"), job, [("now", now.into()), priority(job)])
}
/// Strict mode's run rule: claims up to `limit` of `key`'s next due jobs, in seq order, if no job
/// of the key runs and (when `prev` is given) `prev` is finished.
pub fn claim_next(key: &str, owner: &str, lease: Lease, on_dead: OnDead, limit: u32, prev: Option<&str>) -> Stmt {
    let params = [
        ("ordering_key", key.into()),
        ("lease_owner", owner.into()),
        ("lease_until", lease.until.into()),
        ("now", lease.now.into()),
        ("due_before", lease.due_before.into()),
        ("on_dead", on_dead.as_str().into()),
        ("limit", limit.into()),
        ("prev", prev.into()),
    ];
    with(sql!("claim_next"), params)
}
/// A key's head: its first job not finished for ordering purposes.
pub fn head(key: &str, on_dead: OnDead) -> Stmt {
    with(sql!("head"), [("ordering_key", key.into()), ("on_dead", on_dead.as_str().into())])
}
/// Strict mode: a job woken from its limit key's line made due now, if it is still parked.
pub fn wake_parked(id: &str, now: i64) -> Stmt {
    with(sql!("wake_parked"), [("id", id.into()), ("now", now.into())])
}
/// Lock mode: a key's oldest PENDING job, if it waited for the key, made due now.
pub fn wake_waiting(key: &str, now: i64) -> Stmt {
    with(sql!("wake_waiting"), [("ordering_key", key.into()), ("now", now.into())])
}
/// An operator pauses `key` (design §20.11).
pub fn key_pause(key: &str, now: i64) -> Stmt {
    with(sql!("key_pause"), [("ordering_key", key.into()), ("now", now.into())])
}
/// An operator resumes `key`: the pause it ended, if any.
pub fn key_resume(key: &str) -> Stmt {
    with(sql!("key_resume"), [("ordering_key", key.into())])
}
/// A resumed key's PENDING jobs, oldest first, at most `limit` of each kind.
pub fn key_waiting(key: &str, limit: u32) -> Stmt {
    with(sql!("key_waiting"), [("ordering_key", key.into()), ("limit", limit.into())])
}
/// Paused keys by name after `after`.
pub fn paused_keys(after: &str, limit: u32) -> Stmt {
    with(sql!("paused_keys"), [("after", after.into()), ("limit", limit.into())])
}
/// Keys whose head is an unskipped DEAD job.
pub fn blocked_keys(limit: u32) -> Stmt {
    with(sql!("blocked_keys"), [("limit", limit.into())])
}
/// Lets `key` move past its DEAD head.
pub fn skip(key: &str, now: i64) -> Stmt {
    with(sql!("skip"), [("ordering_key", key.into()), ("now", now.into())])
}
/// Due heads of keys nothing runs.
pub fn stalled_heads(due_before: i64, on_dead: OnDead, limit: u32) -> Stmt {
    let params = [("due_before", due_before.into()), ("on_dead", on_dead.as_str().into()), ("limit", limit.into())];
    with(sql!("stalled_heads"), params)
}
/// Takes an overdue job for re-sending, if unchanged since read.
pub fn mark_resent(id: &str, next_run_at_read: i64, now: i64) -> Stmt {
    with(sql!("mark_resent"), [("id", id.into()), ("next_run_at", next_run_at_read.into()), ("now", now.into())])
}
/// Records an API-submitted job PENDING.
pub fn enqueue(s: &super::job::Submit<'_>, now: i64) -> Stmt {
    let job = s.spec;
    let mut st =
        spec_then(sql!("enqueue"), job, [("now", now.into()), ("next_run_at", s.due_at.into()), priority(job)]);
    st.names.push("parks_until");
    st.params.push(s.parks_until.map_or(Param::Null, Param::Int));
    st.names.push("debounce_until");
    st.params.push(s.debounce_until.map_or(Param::Null, Param::Int));
    st.names.push("replaceable");
    st.params.push(Param::Int(i64::from(s.on_duplicate == super::job::OnDuplicate::Replace)));
    st.names.push("traceparent");
    st.params.push(s.trace.map(|t| t.traceparent.as_str()).into());
    st.names.push("tracestate");
    st.params.push(s.trace.and_then(|t| t.tracestate.as_deref()).into());
    st.names.push("batch_id");
    st.params.push(s.in_batch.into());
    st
}
/// What a submission with a dedupe key and `on_duplicate` does to the open job holding the key,
/// before it is recorded (design §22.3): the PENDING holder replaced or cancelled, then a RUNNING
/// one superseded (and asked to stop, for `cancel`). None for `keep`.
pub fn supersede(s: &super::job::Submit<'_>, now: i64) -> Vec<Stmt> {
    use super::job::OnDuplicate;
    let (job, cancel) = (s.spec, s.on_duplicate == OnDuplicate::Cancel);
    let Some(key) = job.dedupe_key.as_deref() else { return Vec::new() };
    let held = || [("dedupe_key", Param::from(key)), ("id", job.id.as_str().into()), ("now", now.into())];
    let pending = match s.on_duplicate {
        OnDuplicate::Keep => return Vec::new(),
        OnDuplicate::Replace => {
            let options = [
                ("payload", job.payload.clone().into()),
                ("max_attempts", job.max_attempts.into()),
                priority(job),
                ("deadline_at", job.deadline_at.map_or(Param::Null, Param::Int)),
                // A debounced submission puts the holder's start off to its own due time.
                ("due_at", s.debounce_until.map_or(Param::Null, |_| Param::Int(s.due_at))),
                ("timeout_seconds", job.timeout_seconds.map_or(Param::Null, |t| Param::Int(i64::from(t)))),
            ];
            Stmt::bind(sql!("replace"), held().into_iter().chain(options))
        }
        OnDuplicate::Cancel => Stmt::bind(sql!("supersede_cancel"), held()),
    };
    let running = Stmt::bind(sql!("supersede_running"), held().into_iter().chain([("cancel", i64::from(cancel).into())]));
    vec![pending, running]
}
/// Whether an operator asked running job `id` to stop (design §22.1).
pub fn cancel_asked(id: &str) -> Stmt {
    with(sql!("cancel_asked"), [("id", id.into())])
}
/// A run's transition just applied: a job asked to stop meanwhile ends DEAD "cancelled".
pub fn settle_cancelled(id: &str, now: i64) -> Stmt {
    with(sql!("settle_cancelled"), [("id", id.into()), ("now", now.into())])
}
/// The job an enqueue collided with.
pub fn existing(id: &str, dedupe_key: Option<&str>) -> Stmt {
    with(sql!("existing"), [("id", id.into()), ("dedupe_key", dedupe_key.into())])
}
/// Counts per status.
pub fn counts() -> Stmt {
    with(sql!("counts"), [])
}
/// Open jobs per status and type, DEAD ones per type, and each open group's oldest due job.
pub fn metrics_jobs(now: i64, on_dead: OnDead) -> Stmt {
    with(sql!("metrics_jobs"), [("now", now.into()), ("on_dead", on_dead.as_str().into())])
}
/// Per type and limit key, the oldest due job a limit key may hold back.
pub fn metrics_limited_due(now: i64, on_dead: OnDead) -> Stmt {
    with(sql!("metrics_limited_due"), [("now", now.into()), ("on_dead", on_dead.as_str().into())])
}
/// The limit keys whose flow control holds their jobs back now.
pub fn held_limit_keys(now: i64) -> Stmt {
    with(sql!("held_limit_keys"), [("now", now.into())])
}

fn cursor(cursor: Option<(i64, &str)>) -> [(&'static str, Param); 2] {
    let (at, id) = match cursor {
        Some((at, id)) => (Param::Int(at), Param::from(id)),
        None => (Param::Null, Param::Null),
    };
    [("cursor_at", at), ("cursor_id", id)]
}

/// A page, newest first, after `cursor` = (created_at, id); one status's through its index.
pub fn list(status: Option<Status>, after: Option<(i64, &str)>, limit: u32) -> Stmt {
    let [at, id] = cursor(after);
    let limit = ("limit", limit.into());
    match status {
        Some(s @ (Status::Pending | Status::Running)) => {
            with(sql!("list_open"), [("status", s.as_str().into()), at, id, limit])
        }
        Some(Status::Dead) => with(sql!("list_dead"), [at, id, limit]),
        Some(Status::Done) => with(sql!("list_done"), [at, id, limit]),
        None => with(sql!("list_all"), [at, id, limit]),
    }
}
/// A page filtered by any of status, type and ordering key, newest first.
pub fn list_filtered(filter: &ListFilter<'_>, after: Option<(i64, &str)>, limit: u32) -> Stmt {
    let [at, id] = cursor(after);
    let params = [
        ("status", filter.status.map(Status::as_str).into()),
        ("type", filter.job_type.into()),
        ("ordering_key", filter.ordering_key.into()),
        at,
        id,
        ("limit", limit.into()),
        ("priority", filter.priority.map_or(Param::Null, |p| Param::Int(i64::from(p)))),
    ];
    with(sql!("list_filtered"), params)
}
/// DEAD -> PENDING.
pub fn redrive(id: &str, now: i64) -> Stmt {
    with(sql!("redrive"), [("id", id.into()), ("now", now.into())])
}
/// DEAD jobs matching `filter` (ids, and how many match in all).
pub fn dead_matching(filter: &DeadFilter, limit: u32) -> Stmt {
    let params = [
        ("type", filter.job_type.clone().into()),
        ("ordering_key", filter.ordering_key.clone().into()),
        ("error", filter.error.clone().into()),
        ("from", filter.from.into()),
        ("to", filter.to.into()),
        ("limit", limit.into()),
    ];
    with(sql!("dead_matching"), params)
}
/// PENDING -> DEAD "cancelled"; RUNNING: asked to stop (design §22.1).
pub fn cancel(id: &str, now: i64) -> Stmt {
    with(sql!("cancel"), [("id", id.into()), ("now", now.into())])
}
/// The filter's parameters, in `cancel_matching.sql`'s and `cancellable_matching.sql`'s order.
fn cancel_filter(f: &super::job::CancelFilter) -> [(&'static str, Param); 6] {
    [
        ("type", f.job_type.clone().into()),
        ("ordering_key", f.ordering_key.clone().into()),
        ("limit_key", f.limit_key.clone().into()),
        ("error", f.error.clone().into()),
        ("from", f.from.map_or(Param::Null, Param::Int)),
        ("to", f.to.map_or(Param::Null, Param::Int)),
    ]
}
/// Open jobs matching `filter` cancelled, at most `limit` (design §22.2): PENDING ones DEAD
/// "cancelled", RUNNING ones asked to stop.
pub fn cancel_matching(filter: &super::job::CancelFilter, now: i64, limit: u32) -> Stmt {
    Stmt::bind(sql!("cancel_matching"), cancel_filter(filter).into_iter().chain([("now", now.into()), ("limit", limit.into())]))
}
/// How many open jobs match `filter`, not yet cancelled or asked to stop (and of them RUNNING).
pub fn cancellable_matching(filter: &super::job::CancelFilter) -> Stmt {
    with(sql!("cancellable_matching"), cancel_filter(filter))
}
/// Deletes at most `limit` jobs of `status` finished in `[since, before)`, oldest first, after
/// their tally, history, waits and batch rows; DEAD ones a key or a waiter still needs are kept
/// (`keep_keyed`: ON_DEAD = "block"). The last statement answers the deleted jobs' `finished_at`.
pub fn purge(status: Status, since: i64, before: i64, limit: u32, keep_keyed: bool) -> [Stmt; 5] {
    let params = || -> [(&'static str, Param); 5] {
        [
            ("since", since.into()),
            ("before", before.into()),
            ("status", status.as_str().into()),
            ("limit", limit.into()),
            ("keep_keyed", i64::from(keep_keyed).into()),
        ]
    };
    [
        with(sql!("purge_tally"), params()),
        with(sql!("purge_events"), params()),
        with(sql!("purge_waits"), params()),
        with(sql!("purge_batches"), params()),
        with(sql!("purge"), params()),
    ]
}
/// Where the purge of `status` starts: the `finished_at` before which none of its jobs is left.
pub fn purge_cursor(status: Status) -> Stmt {
    with(sql!("purge_cursor"), [("status", status.as_str().into())])
}
/// Moves the purge of `status` on to `until`.
pub fn purge_advance(status: Status, until: i64) -> Stmt {
    with(sql!("purge_advance"), [("status", status.as_str().into()), ("until", until.into())])
}
/// Moving a ledger: takes a finished job's earlier copy off the tally before it is copied again.
pub fn import_untally(id: &str) -> Stmt {
    with(sql!("import_untally"), [("id", id.into())])
}
/// Moving a ledger: a finished job copied in behind the purge's cursor moves the cursor back to it.
pub fn import_rewind(id: &str) -> Stmt {
    with(sql!("import_rewind"), [("id", id.into())])
}

/// An event of `job_id`'s history ring. `run`: a handler run's details; `when_status`: recorded only
/// if the job is now in that status, updated at `at`; `after_change`: only if the statement before
/// it in the batch changed a row.
fn event(job_id: &str, at: i64, kind: Kind, actor: &str, run: Option<&Run>, when: (Option<Status>, bool)) -> Stmt {
    let (attempt, started, outcome, error, http) = match run {
        Some(r) => (
            Param::Int(r.attempt),
            Param::Int(r.started_at),
            Param::from(r.outcome.as_str()),
            Param::from(r.error.clone()),
            status_code(r.http_status),
        ),
        None => (Param::Null, Param::Null, Param::Null, Param::Null, Param::Null),
    };
    let (when_status, after_change) = when;
    let params = [
        ("job_id", job_id.into()),
        ("at", at.into()),
        ("kind", kind.as_str().into()),
        ("actor", actor.into()),
        ("attempt", attempt),
        ("started_at", started),
        ("outcome", outcome),
        ("error", error),
        ("http_status", http),
        ("keep", HISTORY_KEEP.into()),
        ("status", when_status.map(Status::as_str).into()),
        ("after_change", Param::Int(i64::from(after_change))),
    ];
    with(sql!("event"), params)
}

/// Records a run in its job's history (whether or not its result could be recorded: the run
/// happened).
pub fn run(r: &Run) -> Stmt {
    event(&r.job_id, r.finished_at, Kind::Attempt, &r.actor, Some(r), (None, false))
}
/// Records an operator's action on `job_id`; placed right after the action's statement in one
/// batch, only if that statement changed a row and left the job `status`, updated at `at`.
pub fn action(job_id: &str, at: i64, kind: Kind, status: Status) -> Stmt {
    event(job_id, at, kind, API_ACTOR, None, (Some(status), true))
}
/// Records an operator's action that already applied (in an earlier round trip), if the job is
/// still `status` as of `at`.
pub fn action_applied(job_id: &str, at: i64, kind: Kind, status: Status) -> Stmt {
    event(job_id, at, kind, API_ACTOR, None, (Some(status), false))
}
/// A job's history, oldest first.
pub fn events(job_id: &str) -> Stmt {
    with(sql!("events"), [("job_id", job_id.into())])
}
/// Runs per minute by outcome since `since`.
pub fn activity_runs(since: i64) -> Stmt {
    with(sql!("activity_runs"), [("since", since.into())])
}
/// The run times and queue waits of the runs since `since`, at most `most` of each kind.
pub fn run_times(since: i64, most: u32) -> Stmt {
    with(sql!("run_times"), [("since", since.into()), ("most", most.into())])
}
/// Jobs created and finished per minute since `since`.
pub fn activity_jobs(since: i64) -> Stmt {
    with(sql!("activity_jobs"), [("since", since.into())])
}

/// Moving a D1 ledger to shards: a page of job rows after `after`.
pub fn export_jobs(after: &str, limit: u32) -> Stmt {
    with(sql!("export_jobs"), [("after", after.into()), ("limit", limit.into())])
}
/// Moving a D1 ledger to shards: the history rows of the jobs with ids in `(after, last]`.
pub fn export_events(after: &str, last: &str) -> Stmt {
    with(sql!("export_events"), [("after", after.into()), ("last", last.into())])
}

/// The columns of a job row, in `import_job.sql`'s order.
pub const JOB_COLUMNS: [&str; 36] = [
    "id",
    "type",
    "status",
    "ordering_key",
    "dedupe_key",
    "payload",
    "attempts",
    "max_attempts",
    "deferrals",
    "lease_owner",
    "lease_until",
    "next_run_at",
    "last_error",
    "created_at",
    "updated_at",
    "finished_at",
    "seq",
    "skipped_at",
    "priority",
    "result",
    "passed_at",
    "started_at",
    "ran_by",
    "http_status",
    "snoozes",
    "limit_key",
    "deadline_at",
    "timeout_seconds",
    "parked",
    "cancel_requested_at",
    "debounce_until",
    "superseded_at",
    "replaceable",
    "traceparent",
    "tracestate",
    "batch_id",
];
/// The columns of a history row, in `import_event.sql`'s order.
pub const EVENT_COLUMNS: [&str; 11] =
    ["job_id", "slot", "n", "at", "kind", "actor", "attempt", "started_at", "outcome", "error", "http_status"];

/// A column of an exported row as a parameter (text, integer or NULL, as the schema stores them).
pub(super) fn column(row: &Row, name: &str) -> Param {
    match row.get(name) {
        Some(Value::String(s)) => Param::Text(s.clone()),
        Some(v) => super::job::int_of(v).map_or(Param::Null, Param::Int),
        None => Param::Null,
    }
}
/// Moving a D1 ledger to shards: a job's whole row into its shard.
pub fn import_job(row: &Row) -> Stmt {
    Stmt::bind(sql!("import_job"), JOB_COLUMNS.map(|c| (c, column(row, c))))
}
/// Moving a D1 ledger to shards: how many rows each table besides `job` holds (`move_rows.sql`).
pub fn move_rows() -> Stmt {
    with(sql!("move_rows"), [])
}
/// Moving a D1 ledger to shards: a page of jobs as the check compares them, ids in `(after, upto]`.
pub fn move_page(after: &str, upto: &str, limit: u32) -> Stmt {
    with(sql!("move_page"), [("after", after.into()), ("upto", upto.into()), ("limit", limit.into())])
}
/// Moving a D1 ledger to shards: a history row into its job's shard.
pub fn import_event(row: &Row) -> Stmt {
    Stmt::bind(sql!("import_event"), EVENT_COLUMNS.map(|c| (c, column(row, c))))
}
/// Every schedule's row (design §23).
pub fn schedule_states() -> Stmt {
    with(sql!("schedule_states"), [])
}
/// A cron run saw `name`'s `period`, having submitted `job_id` (or nothing) at `now`.
pub fn schedule_seen(name: &str, period: i64, job_id: Option<&str>, now: i64) -> Stmt {
    with(sql!("schedule_seen"), [("name", name.into()), ("period", period.into()), ("job_id", job_id.into()), ("now", now.into())])
}
/// An operator pauses (`Some(now)`) or resumes (`None`) schedule `name`.
pub fn schedule_pause(name: &str, paused_at: Option<i64>) -> Stmt {
    with(sql!("schedule_pause"), [("name", name.into()), ("paused_at", paused_at.into())])
}
/// A submitted job's dependencies, `(id, route)` each, recorded only if its insert made it (§24).
pub fn wait_add(job_id: &str, on_dead: super::job::AfterDead, now: i64, deps: &[(String, super::placement::Route)]) -> Stmt {
    let deps = Value::Array(deps.iter().map(|(id, r)| serde_json::json!([id, r.to_text()])).collect()).to_string();
    with(sql!("wait_add"), [("id", job_id.into()), ("on_dead", on_dead.as_str().into()), ("now", now.into()), ("deps", deps.into())])
}
/// In the dependency's shard: `job_id` (living at `job_route`) waits on `on_id`, if unfinished.
pub fn wait_register(on_id: &str, job_id: &str, job_route: super::placement::Route) -> Stmt {
    with(sql!("wait_register"), [("on_id", on_id.into()), ("job_id", job_id.into()), ("job_route", job_route.to_text().into())])
}
/// In the dependent's shard: its wait on `on_id` is registered.
pub fn wait_registered(job_id: &str, on_id: &str) -> Stmt {
    with(sql!("wait_registered"), [("job_id", job_id.into()), ("on_id", on_id.into())])
}
/// In the dependent's shard: `on_id` ended DEAD; the dependent ends DEAD too unless it runs anyway.
pub fn wait_dead(job_id: &str, on_id: &str, now: i64, error: &str) -> Stmt {
    with(sql!("wait_dead"), [("job_id", job_id.into()), ("on_id", on_id.into()), ("now", now.into()), ("error", error.into())])
}
/// In the dependent's shard: it no longer waits on `on_id`.
pub fn wait_release(job_id: &str, on_id: &str) -> Stmt {
    with(sql!("wait_release"), [("job_id", job_id.into()), ("on_id", on_id.into())])
}
/// A dependent's row and whether it still waits.
pub fn waiting(id: &str) -> Stmt {
    with(sql!("waiting"), [("id", id.into())])
}
/// The jobs waiting on `on_id`.
pub fn waiters(on_id: &str, limit: u32) -> Stmt {
    with(sql!("waiters"), [("on_id", on_id.into()), ("limit", limit.into())])
}
/// `job_id` is released from `on_id`.
pub fn waiter_done(on_id: &str, job_id: &str) -> Stmt {
    with(sql!("waiter_done"), [("on_id", on_id.into()), ("job_id", job_id.into())])
}
/// Maintenance: waiters of finished jobs, left unreleased.
pub fn waiters_finished(limit: u32) -> Stmt {
    with(sql!("waiters_finished"), [("limit", limit.into())])
}
/// Maintenance: waits recorded before `before` and never registered.
pub fn waits_unregistered(before: i64, limit: u32) -> Stmt {
    with(sql!("waits_unregistered"), [("before", before.into()), ("limit", limit.into())])
}
/// A batch's members, after its callback's waits (design §25).
pub fn batch_add(id: &str, members: &[(String, super::placement::Route)]) -> Stmt {
    let members = Value::Array(members.iter().map(|(m, _)| Value::String(m.clone())).collect()).to_string();
    with(sql!("batch_add"), [("id", id.into()), ("members", members.into())])
}
/// Member `on_id` of batch `job_id` finished with `status` and `result`.
pub fn batch_done(job_id: &str, on_id: &str, status: Status, result: Option<&str>, now: i64) -> Stmt {
    with(
        sql!("batch_done"),
        [("job_id", job_id.into()), ("on_id", on_id.into()), ("status", status.as_str().into()), ("result", result.into()), ("now", now.into())],
    )
}
/// A batch's callback waiting on nothing more gets the batch in its payload, results up to `limit` bytes.
pub fn batch_ready(job_id: &str, limit: u32) -> Stmt {
    with(sql!("batch_ready"), [("job_id", job_id.into()), ("limit", limit.into())])
}
/// A batch's members, in order.
pub fn batch_members(batch_id: &str) -> Stmt {
    with(sql!("batch_members"), [("batch_id", batch_id.into())])
}
/// A dependency as a registration reads it, with its last redrive's time (design §24).
pub fn wait_on(on_id: &str) -> Stmt {
    with(sql!("wait_on"), [("on_id", on_id.into())])
}
