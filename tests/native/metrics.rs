//! `GET /metrics` (design §27) on the D1 stand-in: the ledger's state as Prometheus gauges, each
//! figure what the ledger holds (jobs by status and type, the oldest due job, paused keys, limit
//! keys, schedules), admin only.

use orderly::config::Config;
use serde_json::json;

use crate::support::api::{ApiWorld, PRODUCER_TOKEN, T0};

fn hook(host: &str) -> serde_json::Value {
    json!({"type": "webhook", "url": format!("https://{host}.test/")})
}

#[test]
fn metrics_answer_the_ledger_s_state_in_the_prometheus_text_format() {
    let mut w = ApiWorld::new();
    let schedules = r#"[{"name": "beat", "every_seconds": 300, "job": {"payload": {"type": "webhook", "url": "https://b.test/"}}}]"#;
    // Keys shown as they are first (TRACE_KEYS = "plain"), to see each label and its escaping.
    w.cfg = Config::from_lookup(|k| match k {
        "SCHEDULES" => Some(schedules.to_string()),
        "TRACE_KEYS" => Some("plain".into()),
        _ => None,
    })
    .expect("SCHEDULES reads");
    // The paused key's job is the oldest due, but its key holds it: not the consumer's to catch up.
    let held = json!({"payload": hook("p"), "ordering_key": "paused \"one\""});
    assert_eq!(w.call("POST", "/jobs", Some(held)).status, 202);
    assert_eq!(w.call("PUT", "/keys/paused%20%22one%22", Some(json!({"paused": true}))).status, 200);
    w.clock.advance_ms(30_000);
    let jobs = json!({"jobs": [
        {"payload": hook("a"), "ordering_key": "k"},
        {"payload": hook("a"), "ordering_key": "k"},
        {"payload": {"type": "webhook", "url": "https://later.test/"}, "delay_seconds": 600},
        {"id": "gone", "payload": hook("c")},
    ]});
    assert_eq!(w.call("POST", "/jobs", Some(jobs)).status, 202);
    assert_eq!(w.call("POST", "/jobs/gone/cancel", None).status, 200);
    assert_eq!(w.call("PUT", "/limits/host-1", Some(json!({"paused": true}))).status, 200);
    w.clock.advance_ms(60_000);

    let r = w.call("GET", "/metrics", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
    let lines: Vec<&str> = r.body.lines().collect();
    let has = |line: &str| assert!(lines.contains(&line), "{line:?} not in:\n{}", r.body);
    has("# TYPE orderly_jobs gauge");
    has("orderly_jobs{status=\"PENDING\"} 4");
    has("orderly_jobs{status=\"DEAD\"} 1");
    has("orderly_jobs_by_type{status=\"PENDING\",type=\"webhook\"} 4");
    has("orderly_jobs_by_type{status=\"DEAD\",type=\"webhook\"} 1");
    // k's head has been due 60 s (the paused key's job 90 s, the delayed one not yet).
    has("orderly_oldest_due_job_age_seconds 60");
    has("orderly_keys{state=\"paused\"} 1");
    has("orderly_paused_key_waiting_jobs{ordering_key=\"paused \\\"one\\\"\"} 1");
    has("orderly_limit_paused{limit_key=\"host-1\"} 1");
    has("orderly_limit_running{limit_key=\"host-1\"} 0");
    has(&format!("orderly_schedule_next_period_seconds{{schedule=\"beat\"}} {}", (T0 + 90_000) / 300_000 * 300 + 300));
    has("orderly_schedule_paused{schedule=\"beat\"} 0");

    // By default a label names a key as a span does: a hash keyed with the secret, never the key
    // (design §27.5).
    w.cfg.trace_keys_plain = false;
    w.cfg.key_hash_secret = orderly::config::KeySecret("s3cret".into());
    let hashed = w.call("GET", "/metrics", None).body;
    let name = |key: &str| orderly::observe::hashed(key, b"s3cret");
    assert!(hashed.contains(&format!("orderly_limit_paused{{limit_key=\"{}\"}} 1", name("host-1"))), "{hashed}");
    let paused = format!("orderly_paused_key_waiting_jobs{{ordering_key=\"{}\"}} 1", name("paused \"one\""));
    assert!(hashed.contains(&paused), "{hashed}");
    assert!(!hashed.contains("host-1") && !hashed.contains("one\\\""), "no key in plain: {hashed}");

    // The admin's alone: a producer's token may not read it.
    let as_producer = w.call_with(Some(PRODUCER_TOKEN), Ok(&w.cfg), "GET", "/metrics", None);
    assert_eq!(as_producer.status, 403);
}

/// The oldest due job is one nothing but the consumer holds back: a job behind a paused limit key
/// (or one whose breaker is open, or whose line waits for slots) is the limit key's to hold, not
/// the consumer's lag. On shards the limit key's state lives in its own shard, not the job's: the
/// ledger judges every shard's jobs against every shard's limit keys.
#[test]
fn a_paused_limit_key_s_due_job_is_not_the_oldest_due_on_d1_and_across_shards() {
    use futures::executor::block_on;
    use orderly::ledger::{Ledger, Status};
    // Set up through `exec`, traced like the ledger's batches, so the replay on D1 has the rows.
    let insert = |db: &crate::support::Sqlite, id: &str, limit_key: &str, due: i64| {
        let sql = format!(
            "INSERT INTO job (id, type, status, limit_key, max_attempts, next_run_at, created_at, updated_at)
             VALUES (?1, 'webhook', 'PENDING', ?2, 5, {due}, {due}, {due})"
        );
        db.exec(&sql, &[id, limit_key]).unwrap();
    };
    let pause = |db: &crate::support::Sqlite, key: &str| {
        db.exec(&format!("INSERT INTO limit_state (limit_key, paused, updated_at) VALUES (?1, 1, {T0})"), &[key])
            .unwrap();
    };
    fn scraped<S: orderly::ledger::Sql>(ledger: &Ledger<S>, now: i64) -> Vec<orderly::ledger::TypeCount> {
        let of = orderly::ledger::scrape::ScrapeOf {
            blocked: false,
            schedules: false,
            listed: 200,
            on_dead: orderly::config::OnDead::Block,
        };
        block_on(ledger.scrape(now, of)).unwrap().by_type
    }
    let oldest = |counts: Vec<orderly::ledger::TypeCount>| {
        counts.iter().filter(|c| c.status == Status::Pending).filter_map(|c| c.oldest_due).min()
    };
    // D1: one database.
    let db = crate::support::Sqlite::memory();
    insert(&db, "held", "tenant", T0);
    insert(&db, "free", "other", T0 + 30_000);
    pause(&db, "tenant");
    assert_eq!(oldest(scraped(&Ledger::new(&db), T0 + 90_000)), Some(T0 + 30_000));
    // Three shards: the held job in one, the free one in another, the pause in the third.
    let (dbs, sqls) = crate::support::memory_shards(3);
    let ledger = Ledger::sharded(sqls);
    block_on(ledger.counts()).unwrap();
    insert(&dbs[0], "held", "tenant", T0);
    insert(&dbs[1], "free", "other", T0 + 30_000);
    pause(&dbs[2], "tenant");
    assert_eq!(oldest(scraped(&ledger, T0 + 90_000)), Some(T0 + 30_000));
    // Resumed, its job is the consumer's again.
    dbs[2].exec("UPDATE limit_state SET paused = 0", &[]).unwrap();
    assert_eq!(oldest(scraped(&ledger, T0 + 90_000)), Some(T0));
}

/// What holds a due job back is judged as the consumer judges it. Under `ON_DEAD = "skip"` a DEAD
/// job is in no one's way: the job after it is its key's head and, due, the consumer's lag (the
/// gauge once left every job behind a skipped death out, for good). A limit key's line holds its
/// jobs only while a permit is live or the throttle has booked a later start: once every permit
/// has run out, its waiting jobs are maintenance's to wake, and a dead cron shows in the gauge.
#[test]
fn the_oldest_due_counts_a_job_behind_a_skipped_death_and_a_line_whose_permits_ran_out() {
    use futures::executor::block_on;
    use orderly::config::OnDead;
    use orderly::ledger::{Ledger, Status};
    let job = |db: &crate::support::Sqlite, id: &str, status: &str, key: &str, seq: &str, limit_key: &str, due: i64| {
        let sql = format!(
            "INSERT INTO job (id, type, status, ordering_key, seq, limit_key, max_attempts, next_run_at, created_at, updated_at, finished_at)
             VALUES (?1, 'webhook', ?2, nullif(?3, ''), CAST(nullif(?4, '') AS INTEGER), nullif(?5, ''), 5, {due}, {due}, {due},
                     CASE WHEN ?2 = 'DEAD' THEN {due} END)"
        );
        db.exec(&sql, &[id, status, key, seq, limit_key]).unwrap();
    };
    fn oldest<S: orderly::ledger::Sql>(ledger: &Ledger<S>, now: i64, on_dead: OnDead) -> Option<i64> {
        let of = orderly::ledger::scrape::ScrapeOf { blocked: false, schedules: false, listed: 200, on_dead };
        let by_type = block_on(ledger.scrape(now, of)).unwrap().by_type;
        by_type.iter().filter(|c| c.status == Status::Pending).filter_map(|c| c.oldest_due).min()
    }
    // A key whose first job died: under block its follower waits for an operator; under skip it
    // is the head, due 60 s.
    let db = crate::support::Sqlite::memory();
    job(&db, "died", "DEAD", "k", "1", "", T0);
    job(&db, "next", "PENDING", "k", "2", "", T0 + 30_000);
    assert_eq!(oldest(&Ledger::new(&db), T0 + 90_000, OnDead::Block), None);
    assert_eq!(oldest(&Ledger::new(&db), T0 + 90_000, OnDead::Skip), Some(T0 + 30_000));
    // The same with a limit key that holds nothing (its due jobs are judged apart).
    let db = crate::support::Sqlite::memory();
    job(&db, "died", "DEAD", "k", "1", "", T0);
    job(&db, "next", "PENDING", "k", "2", "free", T0 + 30_000);
    assert_eq!(oldest(&Ledger::new(&db), T0 + 90_000, OnDead::Block), None);
    assert_eq!(oldest(&Ledger::new(&db), T0 + 90_000, OnDead::Skip), Some(T0 + 30_000));
    // A line on `busy`: held while its one permit lives, the consumer's lag once it ran out. On
    // three shards, the job in one and the limit key's line and permit in another.
    let (dbs, sqls) = crate::support::memory_shards(3);
    let ledger = Ledger::sharded(sqls);
    block_on(ledger.counts()).unwrap();
    job(&dbs[0], "lined", "PENDING", "", "", "busy", T0);
    let line = &dbs[2];
    line.exec(
        &format!("INSERT INTO limit_wait (limit_key, job_id, since, route) VALUES ('busy', 'lined', {T0}, '0')"),
        &[],
    )
    .unwrap();
    let until = T0 + 60_000;
    line.exec(&format!("INSERT INTO limit_permit (limit_key, job_id, until) VALUES ('busy', 'holder', {until})"), &[])
        .unwrap();
    assert_eq!(oldest(&ledger, T0 + 30_000, OnDead::Block), None, "its permit lives: the line holds it");
    assert_eq!(
        oldest(&ledger, T0 + 90_000, OnDead::Block),
        Some(T0),
        "every permit ran out: nothing but the consumer holds it"
    );
    // A throttle that booked a later start holds it too.
    let booked = (T0 + 120_000) * 1000;
    line.exec(
        &format!("INSERT INTO limit_state (limit_key, booked_us, updated_at) VALUES ('busy', {booked}, {T0})"),
        &[],
    )
    .unwrap();
    assert_eq!(oldest(&ledger, T0 + 90_000, OnDead::Block), None, "the throttle holds it");
    assert_eq!(oldest(&ledger, T0 + 130_000, OnDead::Block), Some(T0));
}

/// A scrape over 16 shards, showing everything a scrape can (blocked keys, paused keys, limit
/// keys, schedules), sends each shard one request (design "The ledger's life": it once sent five
/// per shard and one more, 81 subrequests at 16 shards, past the free plan's 50).
#[test]
fn a_scrape_sends_each_shard_one_request_whatever_it_shows() {
    use futures::executor::block_on;
    use orderly::ledger::Ledger;
    let (_dbs, sqls) = crate::support::memory_shards(16);
    let ledger = Ledger::sharded(sqls);
    block_on(ledger.counts()).unwrap();
    let cfg = Config::from_lookup(|k| match k {
        "ORDERING_MODE" => Some("strict".into()),
        "ON_DEAD" => Some("block".into()),
        "SCHEDULES" => Some(r#"[{"name": "beat", "every_seconds": 60, "job": {"payload": {"type": "webhook", "url": "https://h.test/"}}}]"#.into()),
        _ => None,
    })
    .expect("config");
    let w = crate::support::api::ApiWorld::new();
    let new_id = || "unused".to_string();
    let api = orderly::api::Api {
        ledger: &ledger,
        queue: &w.queue,
        clock: &w.clock,
        cfg: Ok(&cfg),
        admin_token: Some(crate::support::api::TOKEN),
        producer_token: None,
        metrics_token: None,
        new_id: &new_id,
        types: &orderly::app::BuiltIn,
        sealer: None,
    };
    for port in ledger.backends() {
        port.transport.2.set(0);
    }
    let req = orderly::api::ApiRequest {
        method: "GET".into(),
        path: "/metrics".into(),
        query: String::new(),
        authorization: Some(format!("Bearer {}", crate::support::api::TOKEN)),
        body: Vec::new(),
        trace: None,
    };
    let r = block_on(api.handle(&req));
    assert_eq!(r.status, 200, "{}", r.body);
    let sent: Vec<u64> = ledger.backends().map(|p| p.transport.2.get()).collect();
    assert!(sent.iter().all(|&n| n == 1), "requests per shard: {sent:?}");
}
