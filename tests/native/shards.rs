//! The ledger over shards (design §19) on SQLite shard objects in process: what asks every shard
//! (lists, counts, dead matches, lookups by id) merges as one database would answer, and what
//! names a key asks its shard alone.

use futures::executor::block_on;
use orderly::ledger::{DeadFilter, JobSpec, Ledger, ListFilter, Route, Status};

const T0: i64 = 1_700_000_000_000;

fn spec(id: &str, key: Option<&str>) -> JobSpec {
    JobSpec {
        id: id.into(),
        job_type: Some("webhook".into()),
        ordering_key: key.map(str::to_string),
        dedupe_key: None,
        limit_key: None,
        deadline_at: None,
        timeout_seconds: None,
        payload: Some("{\"type\":\"webhook\"}".into()),
        max_attempts: 3,
        priority: 5,
    }
}

/// A ledger of 30 jobs over 4 shards, created a millisecond apart (two at the same time, so the
/// id breaks the tie), keyed by 5 keys and some unkeyed.
fn thirty() -> (Ledger<orderly::ledger::object::ShardSql<crate::support::InProcess>>, Vec<JobSpec>) {
    let (_, shards) = crate::support::memory_shards(4);
    let ledger = Ledger::sharded(shards);
    let jobs: Vec<JobSpec> =
        (0..30).map(|i| spec(&format!("j{i:02}"), (i % 3 != 0).then(|| ["a", "b", "c", "d", "e"][i % 5]))).collect();
    for (i, j) in jobs.iter().enumerate() {
        let at = T0 + (i as i64).min(28);
        block_on(ledger.enqueue(j, at, at)).unwrap();
    }
    (ledger, jobs)
}

#[test]
fn a_list_pages_over_every_shard_newest_first_without_a_gap_or_a_repeat() {
    let (ledger, _) = thirty();
    let mut seen = Vec::new();
    let mut cursor: Option<(i64, String)> = None;
    loop {
        let c = cursor.as_ref().map(|(at, id)| (*at, id.as_str()));
        let (page, next) = block_on(ledger.list(&ListFilter::default(), c, 7)).unwrap();
        assert!(page.len() <= 7);
        seen.extend(page.iter().map(|j| (j.created_at, j.id.clone())));
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    let mut expected = seen.clone();
    expected.sort_by(|a, b| b.cmp(a));
    assert_eq!(seen, expected, "newest first, ties by id");
    let ids: std::collections::BTreeSet<_> = seen.iter().map(|s| s.1.clone()).collect();
    assert_eq!((seen.len(), ids.len()), (30, 30), "every job once");
}

#[test]
fn counts_sum_and_a_key_lists_from_its_shard() {
    let (ledger, jobs) = thirty();
    assert_eq!(block_on(ledger.counts()).unwrap().pending, 30);
    let filter = ListFilter { ordering_key: Some("b"), ..ListFilter::default() };
    let (page, _) = block_on(ledger.list(&filter, None, 100)).unwrap();
    let want = jobs.iter().filter(|j| j.ordering_key.as_deref() == Some("b")).count();
    assert_eq!(page.len(), want);
    assert!(block_on(ledger.get("j07")).unwrap().is_some(), "an id found without its key");
    assert_eq!(Route::key("b").shard(4), Route::of(Some("b"), None, "anything").shard(4));
}

#[test]
fn dead_matches_merge_oldest_death_first_and_redrive_finds_each_shard() {
    let (ledger, jobs) = thirty();
    for (i, j) in jobs.iter().enumerate().take(12) {
        let at = T0 + 1_000 + i as i64;
        block_on(ledger.cancel(&j.id, at)).unwrap();
    }
    let found = block_on(ledger.dead_matching(&DeadFilter::default(), 5)).unwrap();
    assert_eq!((found.matched, found.redrivable), (12, 12));
    assert_eq!(found.ids, ["j00", "j01", "j02", "j03", "j04"], "oldest death first, over every shard");
    let ids: Vec<&str> = jobs.iter().take(12).map(|j| j.id.as_str()).collect();
    let redriven = block_on(ledger.redrive_all(&ids, T0 + 5_000)).unwrap();
    assert!(redriven.iter().all(|r| matches!(r, orderly::ledger::Redrive::Redriven(j) if j.status == Status::Pending)));
    assert_eq!(block_on(ledger.counts()).unwrap().pending, 30);
}

/// The move copies every table the migrations make, every column of each: a migration adding a
/// table or a column the move does not name fails here, not in an operator's move.
#[test]
fn a_move_copies_every_table_and_column_of_the_schema() {
    use orderly::ledger::{Sql, Stmt};
    use std::collections::{BTreeMap, BTreeSet};
    let db = crate::support::Sqlite::memory();
    let read = |sql: &'static str, params: Vec<(&'static str, orderly::ledger::Param)>| {
        block_on(db.query(Stmt::bind(sql, params))).expect("read")
    };
    let names = |rows: Vec<orderly::ledger::Row>| -> BTreeSet<String> {
        rows.iter().filter_map(|r| r.get("name").and_then(|v| v.as_str()).map(str::to_string)).collect()
    };
    let mut tables = names(read(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_cf_%' \
         AND name <> 'd1_migrations'",
        vec![],
    ));
    // Each ledger keeps these itself (moving::NOT_MOVED): named there, and they exist.
    for t in orderly::ledger::moving::NOT_MOVED {
        assert!(tables.remove(t), "{t} is not a table of the schema");
    }
    let schema: BTreeMap<String, BTreeSet<String>> = tables
        .into_iter()
        .map(|t| {
            let columns = names(read("SELECT name FROM pragma_table_info(?1)", vec![("table", t.as_str().into())]));
            (t, columns)
        })
        .collect();
    let moved: BTreeMap<String, BTreeSet<String>> = orderly::ledger::moving::moved()
        .into_iter()
        .map(|(t, cs)| (t.to_string(), cs.into_iter().map(str::to_string).collect()))
        .collect();
    assert_eq!(moved, schema, "what a move copies, and what the schema holds");
}

#[test]
fn a_d1_ledger_moved_to_shards_keeps_every_job_its_history_and_its_keys_order() {
    use orderly::config::OnDead;
    use orderly::ledger::strict::{ClaimSpec, Intake};
    use orderly::ledger::{Lease, Record, Transition};
    let d1 = crate::support::Sqlite::memory();
    let source = Ledger::new(&d1);
    // Key "k": j0..j5 parked in order; j0 and j1 run and complete; j2 claimed, RUNNING; j6 unkeyed
    // and cancelled (DEAD, with a history line).
    let jobs: Vec<JobSpec> = (0..6).map(|i| spec(&format!("j{i}"), Some("k"))).collect();
    let lease = |now| Lease { now, until: now + 120_000, due_before: now };
    let claim = |now| ClaimSpec { owner: "inv", lease: lease(now), on_dead: OnDead::Skip, limit: 1 };
    let intake = Intake { key: "k", jobs: jobs.iter().collect(), claim: 0, woken: vec![] };
    block_on(source.park_and_claim(&[intake], claim(T0))).unwrap();
    let mut prev: Option<String> = None;
    for (i, at) in [(0, T0 + 10), (1, T0 + 20)] {
        let step = block_on(source.step("k", &[], Some((claim(at), prev.as_deref())), OnDead::Skip)).unwrap();
        let won = &step.state.claimed[0];
        assert_eq!(won.id, format!("j{i}"));
        let done = Transition::Complete {
            started_at: None,
            id: won.id.clone(),
            route: won.route(),
            owner: "inv".into(),
            at: at + 1,
            result: None,
            http_status: Some(200),
        };
        block_on(source.step("k", &[Record::from(done)], None, OnDead::Skip)).unwrap();
        prev = Some(won.id.clone());
    }
    block_on(source.step("k", &[], Some((claim(T0 + 30), prev.as_deref())), OnDead::Skip)).unwrap();
    block_on(source.enqueue(&spec("j6", None), T0, T0)).unwrap();
    block_on(source.cancel("j6", T0 + 40)).unwrap();

    let (_, shards) = crate::support::memory_shards(4);
    let target = Ledger::sharded(shards);
    // Twice, in pages of 3: a move run again replaces its copies.
    for _ in 0..2 {
        let mut after = String::new();
        loop {
            let page = block_on(source.copy_to(&target, &after, 3)).unwrap();
            match page.next {
                Some(next) => after = next,
                None => break,
            }
        }
    }
    let check = block_on(source.verify_copy(&target)).unwrap();
    assert!(check.matches, "{check:?}");
    assert_eq!((check.shards.done, check.shards.running, check.shards.pending, check.shards.dead), (2, 1, 3, 1));
    assert_eq!(block_on(target.events("j6")).unwrap(), block_on(source.events("j6")).unwrap(), "history moved");
    // On the shards, the key goes on where it was: j2 still RUNNING under its lease, then j3.
    assert_eq!(block_on(target.get("j2")).unwrap().map(|j| j.status), Some(Status::Running));
    let done = Transition::Complete {
        started_at: None,
        id: "j2".into(),
        route: Route::key("k"),
        owner: "inv".into(),
        at: T0 + 50,
        result: None,
        http_status: None,
    };
    let step = block_on(target.step("k", &[Record::from(done)], Some((claim(T0 + 50), Some("j2"))), OnDead::Skip));
    assert_eq!(step.unwrap().state.claimed.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), ["j3"]);
}

#[test]
fn one_shard_down_holds_only_its_own_jobs() {
    use orderly::config::OnDead;
    use orderly::ledger::strict::{ClaimSpec, Intake, Parked};
    use orderly::ledger::{Claimed, Lease};
    let (_, shards) = crate::support::memory_shards(4);
    let down = Route::key("down-key").shard(4);
    let up = (0..1000).map(|i| format!("up-{i}")).find(|k| Route::key(k).shard(4) != down).unwrap();
    let ledger = Ledger::sharded(shards);
    assert_eq!(block_on(ledger.counts()).unwrap().pending, 0, "every shard prepared");
    ledger.backends().nth(down).unwrap().transport.1.set(true);
    let lease = Lease { now: T0, until: T0 + 120_000, due_before: T0 };
    let (a, b) = (spec("a", Some("down-key")), spec("b", Some(&up)));
    let claimed = block_on(ledger.claim_all(&[(&a, T0), (&b, T0)], "inv", lease)).unwrap();
    assert!(matches!(claimed[0], Claimed::Unavailable(_)), "{claimed:?}");
    assert!(matches!(claimed[1], Claimed::Won(_)), "{claimed:?}");
    let (c, d) = (spec("c", Some("down-key")), spec("d", Some(&up)));
    let keys = [
        Intake { key: "down-key", jobs: vec![&c], claim: 1, woken: vec![] },
        Intake { key: &up, jobs: vec![&d], claim: 1, woken: vec![] },
    ];
    let claim = ClaimSpec { owner: "inv", lease, on_dead: OnDead::Skip, limit: 5 };
    let parked = block_on(ledger.park_and_claim(&keys, claim)).unwrap();
    assert_eq!(parked[0].parked, [Parked::Unavailable]);
    assert!(matches!(parked[1].parked[0], Parked::Recorded(_)));
    // Every shard asked is down: the call fails, as the one database's would.
    let only_down = block_on(ledger.claim_all(&[(&a, T0)], "inv", lease));
    assert!(only_down.is_err());
}

/// A move run again after the shards' purge has passed a time (the switch made, their cron
/// running) still brings in jobs finished before it: the job copied moves the shard's purge
/// cursor back, so it is purged in its turn, not kept for ever.
#[test]
fn a_job_moved_in_behind_the_purge_cursor_is_still_purged() {
    use orderly::ledger::PurgeBudget;
    let d1 = crate::support::Sqlite::memory();
    let source = Ledger::new(&d1);
    block_on(source.counts()).unwrap();
    d1.exec(
        &format!(
            "INSERT INTO job (id, type, status, max_attempts, attempts, next_run_at, created_at, updated_at, finished_at)
             VALUES ('old', 'webhook', 'DONE', 5, 1, {T0}, {T0}, {T0}, {})",
            T0 + 10
        ),
        &[],
    )
    .unwrap();
    let (_, shards) = crate::support::memory_shards(2);
    let target = Ledger::sharded(shards);
    let spent = || false;
    let budget = PurgeBudget { limit: 100, batches: 2, spent: &spent };
    // The shards' purge has run past the job's time: nothing of theirs was due.
    assert_eq!(block_on(target.purge(Status::Done, T0 + 1_000_000, false, &budget)).unwrap(), 0);
    let mut after = String::new();
    while let Some(next) = block_on(source.copy_to(&target, &after, 10)).unwrap().next {
        after = next;
    }
    assert_eq!(block_on(target.get("old")).unwrap().map(|j| j.status), Some(Status::Done));
    assert_eq!(
        block_on(target.purge(Status::Done, T0 + 2_000_000, false, &budget)).unwrap(),
        1,
        "the moved job is purged"
    );
    assert_eq!(block_on(target.get("old")).unwrap(), None);
}

/// A move begun again starts from nothing: a job D1 no longer holds (purged, or cancelled and
/// purged, between two runs) is not left on the shards, and the check then matches.
#[test]
fn a_move_begun_again_leaves_nothing_d1_deleted_since() {
    let d1 = crate::support::Sqlite::memory();
    let source = Ledger::new(&d1);
    for id in ["a", "b", "c"] {
        block_on(source.enqueue(&spec(id, Some(id)), T0, T0)).unwrap();
    }
    let (_, shards) = crate::support::memory_shards(2);
    let target = Ledger::sharded(shards);
    let copy = || {
        let mut after = String::new();
        while let Some(next) = block_on(source.copy_to(&target, &after, 2)).unwrap().next {
            after = next;
        }
    };
    copy();
    assert!(block_on(target.get("b")).unwrap().is_some());
    d1.exec("DELETE FROM job WHERE id = 'b'", &[]).unwrap();
    copy();
    assert_eq!(block_on(target.get("b")).unwrap(), None, "gone from D1, gone from the shards");
    let check = block_on(source.verify_copy(&target)).unwrap();
    assert!(check.matches, "{check:?}");
    assert_eq!(check.shards.pending, 2);
}

/// The move's check compares every job with its copy a page at a time, reading no more than the
/// page on either side: a copy changed since (a write during the move), one gone and one the
/// source never had (within the pages, and past the source's last job) are each named.
#[test]
fn a_move_s_page_check_names_every_job_whose_copy_differs() {
    let d1 = crate::support::Sqlite::memory();
    let source = Ledger::new(&d1);
    for id in ["a", "b", "c", "d", "e"] {
        block_on(source.enqueue(&spec(id, Some(id)), T0, T0)).unwrap();
    }
    let (dbs, shards) = crate::support::memory_shards(2);
    let target = Ledger::sharded(shards);
    let mut after = String::new();
    while let Some(next) = block_on(source.copy_to(&target, &after, 2)).unwrap().next {
        after = next;
    }
    let check = |limit: u32| {
        let (mut from, mut checked, mut differs) = (String::new(), 0, Vec::new());
        loop {
            let page = block_on(source.verify_page(&target, &from, limit)).unwrap();
            checked += page.checked;
            differs.extend(page.differs);
            match page.next {
                Some(next) => from = next,
                None => return (checked, differs),
            }
        }
    };
    assert_eq!(check(2), (5, vec![]), "a faithful copy");
    // b replaced in D1 after its page was copied; d gone from the shards; "bb" only on a shard.
    d1.exec("UPDATE job SET updated_at = updated_at + 1, payload = '{\"type\":\"webhook\",\"url\":\"https://x.test/\"}' WHERE id = 'b'", &[]).unwrap();
    for db in &dbs {
        db.exec("DELETE FROM job WHERE id = 'd'", &[]).unwrap();
    }
    for id in ["bb", "zz"] {
        let insert = format!("INSERT INTO job (id, status, max_attempts, next_run_at, created_at, updated_at) VALUES (?1, 'PENDING', 5, {T0}, {T0}, {T0})");
        dbs[0].exec(&insert, &[id]).unwrap();
    }
    for limit in [1, 2, 10] {
        let (checked, mut differs) = check(limit);
        differs.sort();
        assert_eq!(
            (checked, differs),
            (5, vec!["b".to_string(), "bb".into(), "d".into(), "zz".into()]),
            "pages of {limit}"
        );
    }
}
