//! Worker configuration: the vars of `wrangler.toml`, parsed and checked.
//!
//! Pure: values come in through a lookup function, so the rules are tested natively. A bad value is
//! never guessed around: it is a [`ConfigError`] naming the var and the value, and the caller defers
//! the batch (queue) or answers 500 (HTTP). Only `ORDERING_LOCK_TTL` below 60 is clamped, because the
//! spec says so and KV rejects shorter TTLs.

use thiserror::Error;

/// The most `BULK_REDRIVE_LIMIT` may be. A call is a few D1 queries however many jobs it takes (a
/// batch counts one, design §26); the most keeps one call's transaction a few thousand statements.
pub const MAX_BULK_REDRIVE: u32 = 333;
pub use crate::bounds::MAX_DELAY_SECONDS;
/// The job types orderly itself handles (`handlers::TYPES` says the same, checked by a test):
/// named here so that configuration is read without the handlers.
pub const BUILT_IN_TYPES: &[&str] = &["webhook"];
/// Shortest `expirationTtl` Workers KV accepts.
pub const MIN_LOCK_TTL_SECONDS: u32 = 60;

/// What a lock or lease must have left beyond one handler run's longest time, and how much longer
/// than that run both must be (so a fresh one always outlives a run).
pub const KEEPALIVE_MARGIN_SECONDS: u32 = 15;

/// How keyed jobs are ordered (`ORDERING_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderingMode {
    /// design §3: Fedify's best-effort KV lock. Order holds with one consumer invocation at a time.
    Lock,
    /// design §3b: the ledger sequences every key; order holds at any consumer concurrency.
    Strict,
}

impl OrderingMode {
    /// The var's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OrderingMode::Lock => "lock",
            OrderingMode::Strict => "strict",
        }
    }
}

/// Where the job ledger lives (`LEDGER`, `LEDGER_SHARDS`; design §19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerBackend {
    /// One D1 database (`DB`): small deployments, a few hundred jobs a second.
    D1,
    /// This many SQLite-backed Durable Objects (`LEDGER_OBJECT`), each key's jobs in one of them.
    Objects(u32),
}

/// What a DEAD head does to its key in strict mode (`ON_DEAD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDead {
    /// The key moves on past it (as SQS FIFO does after its dead-letter queue).
    Skip,
    /// The key waits for an operator: skip it or redrive it (as pg-boss `key_strict_fifo`).
    Block,
}

impl OnDead {
    /// The var's spelling, also bound into the ledger's SQL.
    pub fn as_str(self) -> &'static str {
        match self {
            OnDead::Skip => "skip",
            OnDead::Block => "block",
        }
    }
}

/// Everything the consumer, the API and maintenance read from vars.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// KV key prefix of ordering locks (Fedify's by default, so both can share a namespace).
    pub ordering_key_prefix: String,
    /// Lock TTL in seconds, >= 60.
    pub lock_ttl_seconds: u32,
    /// Handler attempts before a job is DEAD, unless the job sets its own.
    pub max_attempts: u32,
    /// Snoozes a job may take before it is DEAD (`MAX_SNOOZES`): a snooze spends no attempt, so
    /// without an end a handler that snoozes for ever (an inbox answering 429 for ever) would hold
    /// its key for ever.
    pub max_snoozes: u32,
    /// Backoff of the first retry.
    pub backoff_base_seconds: u32,
    /// Longest backoff, <= 86400 (Queues' longest delay).
    pub backoff_cap_seconds: u32,
    /// Delay before a message whose key is locked is delivered again.
    pub lock_retry_delay_seconds: u32,
    /// How long a RUNNING job's lease lasts before maintenance may reclaim it.
    pub lease_seconds: u32,
    /// DONE rows older than this are purged.
    pub retention_days: u32,
    /// DEAD rows older than this are purged (but a key's blocking head, or one a job still waits
    /// on, which an operator or a release must see first).
    pub dead_retention_days: u32,
    /// How long one webhook delivery may take before it counts as a (retryable) timeout.
    pub webhook_timeout_seconds: u32,
    /// Lock mode or strict mode.
    pub ordering_mode: OrderingMode,
    /// Strict mode: whether a DEAD head lets its key move on.
    pub on_dead: OnDead,
    /// Where the ledger lives.
    pub ledger: LedgerBackend,
    /// Whether webhooks may target loopback, private and link-local addresses (`WEBHOOK_ALLOW_PRIVATE`).
    pub allow_private_targets: bool,
    /// `LEDGER_MOVING = "true"`: the D1 ledger is being moved to shards (design §19.7): the API
    /// refuses every write with a 503 saying so, the consumer defers every message, and the cron
    /// does nothing, so no row changes in D1 between the copy and the switch.
    pub ledger_moving: bool,
    /// The main queue's name: its batches are run as jobs.
    pub jobs_queue: String,
    /// The dead-letter queue's name: its batches are recorded DEAD.
    pub dead_letter_queue: String,
    /// The urgent lane's queue name (design §12): its batches are run like the main queue's. Used
    /// when the `JOBS_URGENT` producer binding exists.
    pub urgent_queue: String,
    /// Jobs at or below this priority go to the urgent lane, when there is one.
    pub urgent_priority: u8,
    /// Strict mode: most jobs one invocation runs by chaining, so it stays within Workers'
    /// per-invocation subrequest and D1 query limits (1,000 on paid plans, 50 on free).
    pub strict_run_budget: u32,
    /// Most DEAD jobs one bulk redrive takes: three D1 statements each plus one, within Workers'
    /// D1 queries per invocation (1,000 on paid plans: 250; 50 on free: at most 16).
    pub bulk_redrive_limit: u32,
    /// Job types run by other Workers through service bindings (design §13b): (type, binding),
    /// from `SERVICE_HANDLERS = "email=APP,fedify=FEDIFY"`.
    pub service_handlers: Vec<(String, String)>,
    /// Flow control per limit key (design §20), from `LIMITS`: a JSON object from rule (a limit key,
    /// or a prefix ending in `*`) to policy.
    pub limits: crate::flow::Policies,
    /// Periodic jobs (design §23), from `SCHEDULES`: a JSON array of schedules.
    pub schedules: crate::schedule::Schedules,
    /// `TRACE_KEYS = "plain"`: spans and metric labels name ordering and limit keys as they are;
    /// by default (`"hashed"`) each is a keyed hash of itself, since keys may name people (design
    /// §27.5).
    pub trace_keys_plain: bool,
    /// The secret keys are hashed with: the `KEY_HASH_SECRET` secret, else `ADMIN_TOKEN` (set at
    /// the edge, which reads secrets; empty until then).
    pub key_hash_secret: KeySecret,
}

/// A secret that never prints (a `Config` is printed in errors and tests).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KeySecret(pub String);

impl std::fmt::Debug for KeySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "KeySecret(unset)" } else { "KeySecret(..)" })
    }
}


impl Default for Config {
    fn default() -> Self {
        Config {
            ordering_key_prefix: "__fedify_ordering_".to_string(),
            lock_ttl_seconds: 60,
            max_attempts: 8,
            max_snoozes: 1000,
            backoff_base_seconds: 5,
            backoff_cap_seconds: 3600,
            lock_retry_delay_seconds: 2,
            lease_seconds: 120,
            retention_days: 7,
            dead_retention_days: 30,
            webhook_timeout_seconds: 30,
            ordering_mode: OrderingMode::Lock,
            on_dead: OnDead::Skip,
            ledger: LedgerBackend::D1,
            strict_run_budget: 200,
            bulk_redrive_limit: 250,
            service_handlers: Vec::new(),
            limits: crate::flow::Policies::default(),
            schedules: crate::schedule::Schedules::default(),
            trace_keys_plain: false,
            key_hash_secret: KeySecret::default(),
            allow_private_targets: false,
            ledger_moving: false,
            jobs_queue: "orderly-jobs".to_string(),
            dead_letter_queue: "orderly-dlq".to_string(),
            urgent_queue: "orderly-jobs-urgent".to_string(),
            urgent_priority: 2,
        }
    }
}

/// A var whose value cannot be used. Fix the var in `wrangler.toml`; nothing is processed until then.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("var {var} has bad value {value:?}: {reason}")]
pub struct ConfigError {
    /// The var's name.
    pub var: &'static str,
    /// The value as configured.
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Config {
    /// How long after writing a lock or lease of `ttl_seconds` it must be renewed before the next
    /// handler run starts: when less than one run (the webhook timeout) plus a margin is left.
    pub fn refresh_after_ms(&self, ttl_seconds: u32) -> i64 {
        let keep = i64::from(self.webhook_timeout_seconds + KEEPALIVE_MARGIN_SECONDS);
        (i64::from(ttl_seconds) - keep).max(0) * 1000
    }

    /// Reads every var through `lookup` (None = unset = default) and checks it.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let d = Config::default();
        let num = |var: &'static str, default: u32, min: u32, max: u32| number(&lookup, var, default, (min, max));
        let ordering_key_prefix = lookup("ORDERING_KEY_PREFIX").unwrap_or_else(|| d.ordering_key_prefix.clone());
        if ordering_key_prefix.len() > 256 {
            return Err(ConfigError {
                var: "ORDERING_KEY_PREFIX",
                value: ordering_key_prefix,
                reason: "longer than 256 bytes".into(),
            });
        }
        // Below 60 is clamped rather than refused: KV's floor, and the spec's rule.
        let lock_ttl_seconds =
            num("ORDERING_LOCK_TTL", d.lock_ttl_seconds, 0, MAX_DELAY_SECONDS)?.max(MIN_LOCK_TTL_SECONDS);
        let backoff_base_seconds = num("BACKOFF_BASE_SECONDS", d.backoff_base_seconds, 1, MAX_DELAY_SECONDS)?;
        let backoff_cap_seconds = num("BACKOFF_CAP_SECONDS", d.backoff_cap_seconds, 1, MAX_DELAY_SECONDS)?;
        if backoff_cap_seconds < backoff_base_seconds {
            return Err(ConfigError {
                var: "BACKOFF_CAP_SECONDS",
                value: backoff_cap_seconds.to_string(),
                reason: "smaller than BACKOFF_BASE_SECONDS".into(),
            });
        }
        let ordering_mode = choice(
            &lookup,
            "ORDERING_MODE",
            &[("lock", OrderingMode::Lock), ("strict", OrderingMode::Strict)],
            "not lock or strict",
        )?;
        let on_dead =
            choice(&lookup, "ON_DEAD", &[("skip", OnDead::Skip), ("block", OnDead::Block)], "not skip or block")?;
        let (jobs_queue, dead_letter_queue, urgent_queue) = queues(&lookup, &d)?;
        let urgent_priority = num("URGENT_PRIORITY", u32::from(d.urgent_priority), 0, 9)? as u8;
        let webhook_timeout_seconds = num("WEBHOOK_TIMEOUT_SECONDS", d.webhook_timeout_seconds, 1, 300)?;
        let lease_seconds = num("LEASE_SECONDS", d.lease_seconds, 10, MAX_DELAY_SECONDS)?;
        outlive_a_run(lease_seconds, lock_ttl_seconds, webhook_timeout_seconds)?;
        let (retention_days, dead_retention_days) = retention(&num)?;
        let allow_private_targets =
            choice(&lookup, "WEBHOOK_ALLOW_PRIVATE", &[("false", false), ("true", true)], "not true or false")?;
        Ok(Config {
            trace_keys_plain: choice(&lookup, "TRACE_KEYS", &[("hashed", false), ("plain", true)], "not hashed or plain")?,
            ledger_moving: choice(&lookup, "LEDGER_MOVING", &[("false", false), ("true", true)], "not true or false")?,
            allow_private_targets,
            webhook_timeout_seconds,
            lease_seconds,
            jobs_queue,
            dead_letter_queue,
            urgent_queue,
            urgent_priority,
            ordering_mode,
            on_dead,
            ledger: ledger_backend(&lookup)?,
            strict_run_budget: num("STRICT_RUN_BUDGET", d.strict_run_budget, 1, 1000)?,
            bulk_redrive_limit: num("BULK_REDRIVE_LIMIT", d.bulk_redrive_limit, 1, MAX_BULK_REDRIVE)?,
            service_handlers: service_handlers(lookup("SERVICE_HANDLERS").as_deref().unwrap_or(""))?,
            limits: limits(&lookup)?,
            schedules: schedules(&lookup)?,
            ordering_key_prefix,
            lock_ttl_seconds,
            max_attempts: num("MAX_ATTEMPTS", d.max_attempts, 1, 1000)?,
            max_snoozes: num("MAX_SNOOZES", d.max_snoozes, 1, 1_000_000)?,
            backoff_base_seconds,
            backoff_cap_seconds,
            lock_retry_delay_seconds: num("LOCK_RETRY_DELAY_SECONDS", d.lock_retry_delay_seconds, 0, MAX_DELAY_SECONDS)?,
            retention_days,
            dead_retention_days,
            key_hash_secret: KeySecret::default(),
        })
    }
}

/// Reads `LEDGER` ("d1", the default, or "do") and, for "do", `LEDGER_SHARDS` (1 to
/// [`MAX_SHARDS`](crate::bounds::MAX_SHARDS), 16 by default). The count can never change once a
/// ledger exists: every shard stores it and refuses another (design §19).
fn ledger_backend(lookup: &impl Fn(&str) -> Option<String>) -> Result<LedgerBackend, ConfigError> {
    let objects = choice(lookup, "LEDGER", &[("d1", false), ("do", true)], "not d1 or do")?;
    let max = crate::bounds::MAX_SHARDS as u32;
    let shards = number(lookup, "LEDGER_SHARDS", DEFAULT_SHARDS, (1, max))?;
    if !objects && lookup("LEDGER_SHARDS").is_some_and(|v| v.trim() != "1") {
        return Err(ConfigError {
            var: "LEDGER_SHARDS",
            value: lookup("LEDGER_SHARDS").unwrap_or_default(),
            reason: "shards are Durable Objects: set LEDGER = \"do\" (a D1 ledger is one database)".into(),
        });
    }
    Ok(if objects { LedgerBackend::Objects(shards) } else { LedgerBackend::D1 })
}

/// Reads `SCHEDULES` (design §23); unset or empty: none.
fn schedules(lookup: &impl Fn(&str) -> Option<String>) -> Result<crate::schedule::Schedules, ConfigError> {
    let text = lookup("SCHEDULES").unwrap_or_default();
    crate::schedule::Schedules::parse(&text).map_err(|e| ConfigError { var: "SCHEDULES", value: text.clone(), reason: e.0 })
}

/// Reads `LIMITS` (design §20); unset or empty: no limits configured (operators may still set them
/// at run time).
fn limits(lookup: &impl Fn(&str) -> Option<String>) -> Result<crate::flow::Policies, ConfigError> {
    let text = lookup("LIMITS").unwrap_or_default();
    crate::flow::Policies::parse(&text).map_err(|e| ConfigError { var: "LIMITS", value: text.clone(), reason: e.0 })
}

/// Shards of a `LEDGER = "do"` ledger when `LEDGER_SHARDS` is unset.
pub const DEFAULT_SHARDS: u32 = 16;

/// Reads `SERVICE_HANDLERS`: comma-separated `type=BINDING` pairs. A type is 1..64 of letters,
/// digits and `_.:-`; a binding a JavaScript identifier; a type given twice, or the name of a
/// built-in type, is refused (a job type has one handler).
pub fn service_handlers(var: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let bad =
        |reason: &'static str| ConfigError { var: "SERVICE_HANDLERS", value: var.to_string(), reason: reason.into() };
    let mut out: Vec<(String, String)> = Vec::new();
    for pair in var.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (ty, binding) = pair.split_once('=').ok_or_else(|| bad("each entry must be type=BINDING"))?;
        let (ty, binding) = (ty.trim(), binding.trim());
        let type_ok = (1..=64).contains(&ty.len())
            && ty.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'));
        if !type_ok {
            return Err(bad("a type must be 1 to 64 letters, digits, _ . : or -"));
        }
        let mut chars = binding.chars();
        let binding_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
        if !binding_ok {
            return Err(bad("a binding must be a service binding's name (letters, digits, _)"));
        }
        if BUILT_IN_TYPES.contains(&ty) {
            return Err(bad("a built-in type (webhook) cannot also be a service handler"));
        }
        if out.iter().any(|(t, _)| t == ty) {
            return Err(bad("a type is listed twice"));
        }
        out.push((ty.to_string(), binding.to_string()));
    }
    Ok(out)
}

/// A var that takes one of `options` (the first is the default when unset).
/// A whole-number var in `range` (inclusive), or `default` when unset.
fn number(
    lookup: &impl Fn(&str) -> Option<String>,
    var: &'static str,
    default: u32,
    (min, max): (u32, u32),
) -> Result<u32, ConfigError> {
    let Some(raw) = lookup(var) else { return Ok(default) };
    let bad = |reason: &str| ConfigError { var, value: raw.clone(), reason: reason.into() };
    let n: u64 = raw.trim().parse().map_err(|_| bad("not a whole number"))?;
    if n < u64::from(min) {
        return Err(bad("too small"));
    }
    if n > u64::from(max) {
        return Err(bad("too large"));
    }
    Ok(n as u32)
}

/// The three queues' names (jobs, dead letters, urgent): none empty, no two the same.
fn queues(lookup: &impl Fn(&str) -> Option<String>, d: &Config) -> Result<(String, String, String), ConfigError> {
    let name = |var: &str, default: &str| lookup(var).map(|q| q.trim().to_string()).unwrap_or(default.to_string());
    let jobs_queue = name("JOBS_QUEUE", &d.jobs_queue);
    let dead_letter_queue = name("DEAD_LETTER_QUEUE", &d.dead_letter_queue);
    if jobs_queue.is_empty() || jobs_queue == dead_letter_queue {
        return Err(ConfigError {
            var: "JOBS_QUEUE",
            value: jobs_queue,
            reason: "empty, or the same as DEAD_LETTER_QUEUE".into(),
        });
    }
    if dead_letter_queue.is_empty() {
        return Err(ConfigError { var: "DEAD_LETTER_QUEUE", value: dead_letter_queue, reason: "empty".into() });
    }
    let urgent_queue = name("URGENT_QUEUE", &d.urgent_queue);
    if urgent_queue.is_empty() || urgent_queue == jobs_queue || urgent_queue == dead_letter_queue {
        return Err(ConfigError {
            var: "URGENT_QUEUE",
            value: urgent_queue,
            reason: "empty, or the same as JOBS_QUEUE or DEAD_LETTER_QUEUE".into(),
        });
    }
    Ok((jobs_queue, dead_letter_queue, urgent_queue))
}

/// `RETENTION_DAYS` and `DEAD_RETENTION_DAYS`: a DEAD job is kept at least as long as a DONE one
/// (an operator has more to read in it), and the DEAD purge, which reads the finished jobs from
/// the oldest, then never reads DONE ones that are still kept.
fn retention(
    num: &impl Fn(&'static str, u32, u32, u32) -> Result<u32, ConfigError>,
) -> Result<(u32, u32), ConfigError> {
    let d = Config::default();
    let done = num("RETENTION_DAYS", d.retention_days, 1, 3650)?;
    let dead = num("DEAD_RETENTION_DAYS", d.dead_retention_days.max(done), 1, 3650)?;
    if dead < done {
        return Err(ConfigError {
            var: "DEAD_RETENTION_DAYS",
            value: dead.to_string(),
            reason: "shorter than RETENTION_DAYS: a DEAD job is kept at least as long as a DONE one".into(),
        });
    }
    Ok((done, dead))
}

/// A lease or lock must outlive the longest handler run, or the reaper (or another group) could
/// take a job or key while it still runs.
fn outlive_a_run(lease_seconds: u32, lock_ttl_seconds: u32, webhook_timeout_seconds: u32) -> Result<(), ConfigError> {
    let floor = webhook_timeout_seconds + KEEPALIVE_MARGIN_SECONDS;
    if lease_seconds < floor {
        return Err(ConfigError {
            var: "LEASE_SECONDS",
            value: lease_seconds.to_string(),
            reason: "shorter than WEBHOOK_TIMEOUT_SECONDS + 15: a lease must outlive the longest run".into(),
        });
    }
    if lock_ttl_seconds < floor {
        return Err(ConfigError {
            var: "ORDERING_LOCK_TTL",
            value: lock_ttl_seconds.to_string(),
            reason: "shorter than WEBHOOK_TIMEOUT_SECONDS + 15: a lock must outlive the longest run".into(),
        });
    }
    Ok(())
}

fn choice<T: Copy>(
    lookup: &impl Fn(&str) -> Option<String>,
    var: &'static str,
    options: &[(&'static str, T)],
    reason: &'static str,
) -> Result<T, ConfigError> {
    let Some(raw) = lookup(var) else {
        return options.first().map(|(_, v)| *v).ok_or(ConfigError {
            var,
            value: String::new(),
            reason: reason.into(),
        });
    };
    options.iter().find(|(name, _)| *name == raw.trim()).map(|(_, v)| *v).ok_or_else(|| ConfigError {
        var,
        value: raw.clone(),
        reason: reason.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_lookup(|k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn unset_vars_take_the_spec_defaults() {
        assert_eq!(with(&[]).unwrap(), Config::default());
        assert_eq!(Config::default().ordering_key_prefix, "__fedify_ordering_");
    }

    #[test]
    fn lock_ttl_below_sixty_is_clamped() {
        assert_eq!(with(&[("ORDERING_LOCK_TTL", "5")]).unwrap().lock_ttl_seconds, 60);
        assert_eq!(with(&[("ORDERING_LOCK_TTL", "90")]).unwrap().lock_ttl_seconds, 90);
    }

    #[test]
    fn a_bad_value_names_the_var_and_the_value() {
        let err = with(&[("MAX_ATTEMPTS", "lots")]).unwrap_err();
        assert_eq!(err.var, "MAX_ATTEMPTS");
        assert_eq!(err.value, "lots");
        assert!(err.to_string().contains("MAX_ATTEMPTS") && err.to_string().contains("lots"));
        assert_eq!(with(&[("MAX_ATTEMPTS", "0")]).unwrap_err().reason, "too small");
        assert_eq!(with(&[("BACKOFF_CAP_SECONDS", "86401")]).unwrap_err().var, "BACKOFF_CAP_SECONDS");
        assert_eq!(with(&[("LEASE_SECONDS", "-3")]).unwrap_err().var, "LEASE_SECONDS");
        assert!(with(&[("BACKOFF_BASE_SECONDS", "50"), ("BACKOFF_CAP_SECONDS", "10")]).is_err());
        assert_eq!(with(&[("WEBHOOK_TIMEOUT_SECONDS", "0")]).unwrap_err().var, "WEBHOOK_TIMEOUT_SECONDS");
        assert_eq!(with(&[("WEBHOOK_TIMEOUT_SECONDS", "301")]).unwrap_err().reason, "too large");
        let limits = with(&[("LIMITS", r#"{"host": {"concurrency": 2}}"#)]).unwrap().limits;
        assert_eq!(limits.for_key("host").concurrency, Some(2));
        let e = with(&[("LIMITS", r#"{"host": {"concurrency": 0}}"#)]).unwrap_err();
        assert_eq!(e.var, "LIMITS");
        assert!(e.reason.contains("concurrency must be from 1"), "{}", e.reason);
    }

    #[test]
    fn the_ledger_backend_and_its_shards_are_read_and_checked() {
        assert_eq!(with(&[]).unwrap().ledger, LedgerBackend::D1);
        assert_eq!(with(&[("LEDGER", "do")]).unwrap().ledger, LedgerBackend::Objects(DEFAULT_SHARDS));
        assert_eq!(with(&[("LEDGER", "do"), ("LEDGER_SHARDS", "4")]).unwrap().ledger, LedgerBackend::Objects(4));
        assert_eq!(with(&[("LEDGER", "do"), ("LEDGER_SHARDS", "0")]).unwrap_err().var, "LEDGER_SHARDS");
        assert_eq!(with(&[("LEDGER", "do"), ("LEDGER_SHARDS", "33")]).unwrap_err().var, "LEDGER_SHARDS");
        assert_eq!(with(&[("LEDGER_SHARDS", "4")]).unwrap_err().var, "LEDGER_SHARDS");
        assert_eq!(with(&[("LEDGER", "sqlite")]).unwrap_err().var, "LEDGER");
    }

    #[test]
    fn ordering_mode_and_dead_policy_are_read_and_checked() {
        let c = with(&[("ORDERING_MODE", "strict"), ("ON_DEAD", "block"), ("STRICT_RUN_BUDGET", "30")]).unwrap();
        assert_eq!((c.ordering_mode, c.on_dead, c.strict_run_budget), (OrderingMode::Strict, OnDead::Block, 30));
        assert_eq!(with(&[("ORDERING_MODE", "fifo")]).unwrap_err().var, "ORDERING_MODE");
        assert_eq!(with(&[("ON_DEAD", "drop")]).unwrap_err().var, "ON_DEAD");
        assert_eq!(with(&[("STRICT_RUN_BUDGET", "0")]).unwrap_err().var, "STRICT_RUN_BUDGET");
    }

    #[test]
    fn service_handlers_are_type_binding_pairs_with_one_handler_a_type() {
        let c = with(&[("SERVICE_HANDLERS", " email=APP , fedify=FEDIFY_HANDLER,")]).unwrap();
        assert_eq!(
            c.service_handlers,
            vec![("email".to_string(), "APP".to_string()), ("fedify".to_string(), "FEDIFY_HANDLER".to_string())]
        );
        assert!(with(&[]).unwrap().service_handlers.is_empty());
        for bad in ["email", "email=", "=APP", "webhook=APP", "a=X,a=Y", "e mail=APP", "email=1APP", "email=A-B"] {
            assert_eq!(with(&[("SERVICE_HANDLERS", bad)]).unwrap_err().var, "SERVICE_HANDLERS", "{bad}");
        }
    }

    #[test]
    fn the_bulk_redrive_limit_stays_within_an_invocations_d1_queries() {
        assert_eq!(with(&[]).unwrap().bulk_redrive_limit, 250);
        assert_eq!(with(&[("BULK_REDRIVE_LIMIT", "16")]).unwrap().bulk_redrive_limit, 16);
        assert_eq!(with(&[("BULK_REDRIVE_LIMIT", "0")]).unwrap_err().var, "BULK_REDRIVE_LIMIT");
        // Three statements a job plus the count: 334 would be 1,003 queries.
        assert_eq!(with(&[("BULK_REDRIVE_LIMIT", "334")]).unwrap_err().var, "BULK_REDRIVE_LIMIT");
    }

    #[test]
    fn dead_jobs_are_kept_at_least_as_long_as_done_ones() {
        let c = with(&[]).unwrap();
        assert_eq!((c.retention_days, c.dead_retention_days), (7, 30));
        // A longer DONE retention carries the DEAD one's default with it.
        let c = with(&[("RETENTION_DAYS", "60")]).unwrap();
        assert_eq!((c.retention_days, c.dead_retention_days), (60, 60));
        assert_eq!(with(&[("DEAD_RETENTION_DAYS", "3")]).unwrap_err().var, "DEAD_RETENTION_DAYS");
        assert_eq!(with(&[("DEAD_RETENTION_DAYS", "7")]).unwrap().dead_retention_days, 7);
    }

    #[test]
    fn leases_and_locks_shorter_than_one_run_are_refused() {
        assert_eq!(
            with(&[("WEBHOOK_TIMEOUT_SECONDS", "300"), ("LEASE_SECONDS", "120")]).unwrap_err().var,
            "LEASE_SECONDS"
        );
        let e = with(&[("WEBHOOK_TIMEOUT_SECONDS", "300"), ("LEASE_SECONDS", "600")]).unwrap_err();
        assert_eq!(e.var, "ORDERING_LOCK_TTL");
        assert!(
            with(&[("WEBHOOK_TIMEOUT_SECONDS", "300"), ("LEASE_SECONDS", "600"), ("ORDERING_LOCK_TTL", "315")]).is_ok()
        );
        assert_eq!(with(&[("LEASE_SECONDS", "10")]).unwrap_err().var, "LEASE_SECONDS");
        // At the defaults a lock (60 s) is refreshed before a run once 15 s have passed.
        assert_eq!(Config::default().refresh_after_ms(60), 15_000);
    }

    #[test]
    fn a_custom_prefix_is_kept() {
        assert_eq!(with(&[("ORDERING_KEY_PREFIX", "app:lock:")]).unwrap().ordering_key_prefix, "app:lock:");
    }
}
