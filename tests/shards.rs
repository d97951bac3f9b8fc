//! The ledger over shards (design §19) on SQLite shard objects in process: what asks every shard
//! (lists, counts, dead matches, lookups by id) merges as one database would answer, and what
//! names a key asks its shard alone.

mod support;

use futures::executor::block_on;
use orderly::ledger::{DeadFilter, JobSpec, Ledger, ListFilter, Route, Status};

const T0: i64 = 1_700_000_000_000;

fn spec(id: &str, key: Option<&str>) -> JobSpec {
    JobSpec {
        id: id.into(),
        job_type: Some("webhook".into()),
        ordering_key: key.map(str::to_string),
        dedupe_key: None,
        payload: Some("{\"type\":\"webhook\"}".into()),
        max_attempts: 3,
        priority: 5,
    }
}

/// A ledger of 30 jobs over 4 shards, created a millisecond apart (two at the same time, so the
/// id breaks the tie), keyed by 5 keys and some unkeyed.
fn thirty() -> (Ledger<orderly::ledger::object::ShardSql<support::InProcess>>, Vec<JobSpec>) {
    let (_, shards) = support::memory_shards(4);
    let ledger = Ledger::sharded(shards);
    let jobs: Vec<JobSpec> = (0..30)
        .map(|i| spec(&format!("j{i:02}"), (i % 3 != 0).then(|| ["a", "b", "c", "d", "e"][i % 5])))
        .collect();
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
