//! `GET /metrics` (design §27): the ledger's state in the Prometheus text format, for scrapers
//! (Prometheus, Grafana Agent, Datadog's OpenMetrics check). Admin only. Every figure is read from
//! the ledger as it stands now, with the same cheap reads the dashboard makes: open jobs through
//! the open indexes, DEAD jobs through theirs, DONE ones only in total (a count by type would read
//! every row on every scrape). At most [`MAX_LISTED`] keys of a kind are listed and counted.

use super::http::ApiResponse;
use super::ports::Api;
use crate::clock::Clock;
use crate::config::{Config, OnDead, OrderingMode};
use crate::error::InfraError;
use crate::ledger::limit::LimitState;
use crate::ledger::pause::KeyPause;
use crate::ledger::schedule::ScheduleState;
use crate::ledger::scrape::ScrapeOf;
use crate::ledger::strict::BlockedKey;
use crate::ledger::{Counts, Sql, Status, TypeCount};
use crate::prometheus::{render, Family};
use crate::observe::KeyNames;
use crate::producer::QueueSender;

/// The most limit keys, paused keys and blocked keys one scrape lists by name.
pub const MAX_LISTED: u32 = 200;

/// The exposition format's content type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn seconds(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

impl<S: Sql, Q: QueueSender, C: Clock> Api<'_, S, Q, C> {
    /// `GET /metrics`.
    pub(super) async fn metrics(&self, cfg: &Config) -> Result<ApiResponse, InfraError> {
        let now = self.clock.now_ms();
        // Only strict mode under ON_DEAD = block ever blocks a key; under skip every DEAD keyed
        // job is still in job_dead_head (its key passes it without marking it), so none is read.
        let blocked = cfg.ordering_mode == OrderingMode::Strict && cfg.on_dead == OnDead::Block;
        let of = ScrapeOf { blocked, schedules: !cfg.schedules.0.is_empty(), listed: MAX_LISTED, on_dead: cfg.on_dead };
        // One request per shard, whatever the scrape shows.
        let s = self.ledger.scrape(now, of).await?;
        let mut families = jobs(&s.counts, &s.by_type, now);
        // Keys may name people: labels name them as spans do (design §27.5).
        let names = KeyNames::of_config(cfg);
        families.extend(keys(&s.blocked, &s.paused, names));
        families.extend(limit_keys(&s.limits, now, names));
        families.extend(periodic(cfg, &s.schedules, now));
        Ok(ApiResponse { status: 200, content_type: CONTENT_TYPE, body: render(&families), headers: Vec::new() })
    }
}

/// Jobs by status, by status and type, and the oldest due job's age.
fn jobs(counts: &Counts, by_type: &[TypeCount], now: i64) -> Vec<Family> {
    let mut all = Family::gauge("orderly_jobs", "Jobs in the ledger by status.");
    for (status, n) in [("PENDING", counts.pending), ("RUNNING", counts.running), ("DONE", counts.done), ("DEAD", counts.dead)] {
        all.push(&[("status", status)], n as f64);
    }
    let mut typed = Family::gauge("orderly_jobs_by_type", "PENDING, RUNNING and DEAD jobs by status and type.");
    for c in by_type {
        typed.push(&[("status", c.status.as_str()), ("type", c.job_type.as_deref().unwrap_or(""))], c.n as f64);
    }
    let oldest = by_type.iter().filter(|c| c.status == Status::Pending).filter_map(|c| c.oldest_due).min();
    let age = Family::gauge(
        "orderly_oldest_due_job_age_seconds",
        "How long the oldest PENDING job that is due has been due (0: none is).",
    )
    .sample(&[], oldest.map_or(0.0, |due| seconds(now - due).max(0.0)));
    vec![all, typed, age]
}

/// Blocked and paused ordering keys: how many, and the jobs waiting in each.
fn keys(blocked: &[BlockedKey], paused: &[KeyPause], names: KeyNames<'_>) -> Vec<Family> {
    let totals = Family::gauge("orderly_keys", "Blocked and paused ordering keys (listed and counted up to 200 of each).")
        .sample(&[("state", "blocked")], blocked.len() as f64)
        .sample(&[("state", "paused")], paused.len() as f64);
    let mut behind = Family::gauge("orderly_blocked_key_waiting_jobs", "Jobs waiting behind each blocked key's DEAD head (ON_DEAD = block).");
    for k in blocked {
        behind.push(&[("ordering_key", &names.of(&k.key))], k.waiting as f64);
    }
    let mut held = Family::gauge("orderly_paused_key_waiting_jobs", "Jobs waiting in each paused ordering key.");
    for k in paused {
        held.push(&[("ordering_key", &names.of(&k.key))], k.waiting as f64);
    }
    vec![totals, behind, held]
}

/// Each limit key's running and waiting jobs, its breaker and its pause.
fn limit_keys(limits: &[LimitState], now: i64, names: KeyNames<'_>) -> Vec<Family> {
    let (mut running, mut waiting, mut open, mut paused) = (
        Family::gauge("orderly_limit_running", "Jobs running under each limit key."),
        Family::gauge("orderly_limit_waiting", "Jobs parked in each limit key's line."),
        Family::gauge("orderly_limit_breaker_open", "1 while a limit key's circuit breaker is open."),
        Family::gauge("orderly_limit_paused", "1 while a limit key is paused."),
    );
    for l in limits {
        let name = names.of(&l.limit_key);
        let key = [("limit_key", name.as_str())];
        running.push(&key, l.running as f64);
        waiting.push(&key, l.waiting as f64);
        open.push(&key, f64::from(u8::from(l.open_until.is_some_and(|until| until > now))));
        paused.push(&key, f64::from(u8::from(l.paused)));
    }
    vec![running, waiting, open, paused]
}

/// Each schedule's latest period seen, its next, and its pause.
fn periodic(cfg: &Config, states: &[ScheduleState], now: i64) -> Vec<Family> {
    let (mut last, mut next, mut paused) = (
        Family::gauge("orderly_schedule_last_period_seconds", "The start of each schedule's latest period seen (Unix time)."),
        Family::gauge("orderly_schedule_next_period_seconds", "The start of each schedule's next period (Unix time)."),
        Family::gauge("orderly_schedule_paused", "1 while a schedule is paused."),
    );
    for s in &cfg.schedules.0 {
        let state = states.iter().find(|st| st.name == s.name);
        let name = [("schedule", s.name.as_str())];
        if let Some(at) = state.and_then(|st| st.last_period) {
            last.push(&name, seconds(at));
        }
        next.push(&name, seconds(s.when.next_after(now)));
        paused.push(&name, f64::from(u8::from(state.is_some_and(|st| st.paused_at.is_some()))));
    }
    vec![last, next, paused]
}
