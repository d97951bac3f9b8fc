//! One ledger shard's capacity (design §19), measured natively: the ledger's own SQLite time per
//! job over a whole strict-mode life (parked and claimed, completed, purged), as one shard
//! object's requests carry it, on a table already holding 1M jobs; and with Durable Objects'
//! documented write rate per object, the jobs a second one shard and N shards sustain, and the N
//! that reaches one queue's 5,000 messages a second. `npm run capacity` prints it; never a timed
//! test (it asserts nothing about speed).

use std::time::Instant;

use crate::support::Sqlite;
use futures::executor::block_on;
use orderly::config::OnDead;
use orderly::ledger::strict::{ClaimSpec, Intake};
use orderly::ledger::{JobSpec, Lease, Ledger, Record, Transition};

const T0: i64 = 1_700_000_000_000;
/// Jobs already in the table.
const BACKGROUND: i64 = 1_000_000;
/// Jobs whose lives are timed.
const MEASURED: usize = 5_000;
/// The Rules of Durable Objects estimate 200-500 requests a second for requests that write
/// storage (soft limit ~1,000 for any request): the higher figure is the planning number.
const WRITING_REQUESTS_PER_OBJECT: f64 = 500.0;
/// One queue's throughput (Cloudflare Queues limits).
const QUEUE_MESSAGES_PER_SECOND: f64 = 5_000.0;

/// Fills the ledger with `BACKGROUND` finished jobs over 50,000 keys, as a busy ledger between
/// purges holds them (within the retention, so the purge keeps them).
fn fill(db: &Sqlite) {
    db.conn.execute_batch("BEGIN").unwrap();
    {
        let mut st = db
            .conn
            .prepare(
                "INSERT INTO job (id, type, status, ordering_key, payload, attempts, max_attempts, next_run_at, \
                 created_at, updated_at, finished_at, seq, passed_at) \
                 VALUES (?1, 'webhook', 'DONE', ?2, '{\"type\":\"webhook\"}', 1, 8, ?3, ?3, ?3, ?3, ?4, ?3)",
            )
            .unwrap();
        for i in 0..BACKGROUND {
            let at = T0 - 3_600_000 + i;
            st.execute(rusqlite::params![format!("bg-{i}"), format!("bg-key-{}", i % 50_000), at, i / 50_000 + 1])
                .unwrap();
        }
    }
    db.conn.execute_batch("COMMIT").unwrap();
}

fn spec(i: usize) -> JobSpec {
    JobSpec {
        id: format!("m-{i}"),
        job_type: Some("webhook".into()),
        ordering_key: Some(format!("key-{}", i % 500)),
        dedupe_key: None,
        limit_key: None,
        deadline_at: None,
        timeout_seconds: None,
        payload: Some("{\"type\":\"webhook\",\"url\":\"https://example.com/hook\",\"body\":{}}".into()),
        max_attempts: 8,
        priority: 5,
    }
}

#[test]
#[ignore = "prints one shard's capacity: npm run capacity"]
fn one_shards_capacity() {
    let (db, _path) = Sqlite::temp();
    let filled = Instant::now();
    fill(&db);
    println!("filled {BACKGROUND} jobs in {:.1} s", filled.elapsed().as_secs_f64());
    let ledger = Ledger::new(&db);
    let jobs: Vec<JobSpec> = (0..MEASURED).map(spec).collect();
    let before = db.round_trips.get();
    let started = Instant::now();
    for (i, job) in jobs.iter().enumerate() {
        let now = T0 + i as i64 * 10;
        let key = job.ordering_key.as_deref().unwrap_or_default();
        let lease = Lease { now, until: now + 120_000, due_before: now };
        let claim = ClaimSpec { owner: "inv", lease, on_dead: OnDead::Skip, limit: 10 };
        // One request: park the delivered job and claim the key's next (strict mode's intake).
        let parked = block_on(
            ledger.park_and_claim(&[Intake { key, jobs: vec![job], claim: claim.limit, woken: vec![] }], claim),
        )
        .unwrap();
        let claimed = parked[0].state.claimed.first().expect("the key's head is claimed").clone();
        // One request: the run's completion, the chain's step (no history row for a success).
        let done = Transition::Complete {
            started_at: None,
            id: claimed.id.clone(),
            route: claimed.route(),
            owner: "inv".into(),
            at: now + 5,
            result: Some("{\"status\":200}".into()),
            http_status: Some(200),
        };
        block_on(ledger.step(key, &[Record::from(done)], None, OnDead::Skip)).unwrap();
    }
    // The cron's purge, in its batches of 1,000: the measured jobs only (the rest are recent).
    let purge_at = T0 + MEASURED as i64 * 10 + 8 * 86_400_000;
    let budget = orderly::ledger::PurgeBudget { limit: 1000, batches: u32::MAX, spent: &|| false };
    let purged =
        block_on(ledger.purge(orderly::ledger::Status::Done, purge_at - 7 * 86_400_000, false, &budget)).unwrap();
    assert!(purged >= MEASURED, "{purged}");
    let seconds = started.elapsed().as_secs_f64();
    let requests = (db.round_trips.get() - before) as f64 / MEASURED as f64;
    let us_per_job = seconds * 1e6 / MEASURED as f64;
    let by_cpu = 1e6 / us_per_job;
    let by_requests = WRITING_REQUESTS_PER_OBJECT / requests;
    let per_shard = by_cpu.min(by_requests);
    let needed = (QUEUE_MESSAGES_PER_SECOND / per_shard).ceil();
    println!("\n| input | value |\n|---|---|");
    println!("| jobs in the table | {BACKGROUND} |");
    println!("| lives timed (park+claim, complete, purge; strict mode) | {MEASURED} ({purged} purged) |");
    println!("| SQLite time per job | {us_per_job:.0} µs |");
    println!("| shard requests per job | {requests:.2} |");
    println!("| writing requests per object per second (Durable Objects' rules) | {WRITING_REQUESTS_PER_OBJECT} |");
    println!("\n| result | jobs/s |\n|---|---|");
    println!("| one shard, by SQLite time alone | {by_cpu:.0} |");
    println!("| one shard, by requests ({WRITING_REQUESTS_PER_OBJECT}/s ÷ {requests:.2}) | {by_requests:.0} |");
    println!("| one shard (the lower) | {per_shard:.0} |");
    for n in [4, 16, 32] {
        println!("| {n} shards | {:.0} |", per_shard * f64::from(n));
    }
    println!("| shards for one queue's {QUEUE_MESSAGES_PER_SECOND} messages/s | {needed} |");
    assert_eq!(purged, MEASURED, "every measured job purged");
}
