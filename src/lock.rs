//! The per-key ordering lock in Workers KV, and an in-memory KV that really stores and expires.
//!
//! Best-effort, and honest about it: KV has no compare-and-swap and is eventually consistent, so
//! get-then-put narrows races but cannot close them. The lock's value is an owner token naming the
//! job holding it; release deletes only a lock whose value is still ours (Fedify deletes
//! unconditionally). Strict ordering under concurrent consumers belongs to the ledger (design §3b).
//! Must not: decide ack/retry (the consumer does), or touch D1.

use std::rc::Rc;
#[cfg(any(test, feature = "testing"))]
use std::{
    cell::{Cell, RefCell},
    collections::HashMap,
};

#[cfg(any(test, feature = "testing"))]
use crate::clock::Clock;
use crate::error::InfraError;

/// The KV operations the lock needs.
#[allow(async_fn_in_trait)]
pub trait Kv {
    /// The value of `key`, if present and not expired.
    async fn get(&self, key: &str) -> Result<Option<String>, InfraError>;
    /// Writes `key` with an expiry `ttl_seconds` from now (>= 60 on real KV).
    async fn put(&self, key: &str, value: &str, ttl_seconds: u32) -> Result<(), InfraError>;
    /// Removes `key`.
    async fn delete(&self, key: &str) -> Result<(), InfraError>;
}

/// The KV key of an ordering key's lock.
pub fn lock_key(prefix: &str, ordering_key: &str) -> String {
    format!("{prefix}{ordering_key}")
}

/// The lock value naming `job_id` as holder. Prefixed so a lock written by another program is
/// never mistaken for one of ours.
pub fn owner_token(job_id: &str) -> String {
    format!("orderly:{job_id}")
}

/// The job an owner token names, if the value is one of ours.
pub fn token_job(value: &str) -> Option<&str> {
    value.strip_prefix("orderly:").filter(|id| !id.is_empty())
}

/// What `acquire` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// The lock is ours, with this token: the group's first job's, or, when the lock already
    /// named one of the group's jobs, that job's. That job holds the key because it comes next
    /// (it failed, or its invocation died, while the key's later jobs waited), so it runs first,
    /// whatever order its message was sent in (a job sent again after a failure or a panic is
    /// younger on the queue than the jobs it holds back).
    Taken { token: String },
    /// Another job holds it; the value says who.
    Held { holder: String },
}

/// Takes the lock for a group whose jobs are `group_job_ids` (in run order). A lock naming one of
/// the group's own jobs is the group's (a failed job holding its key, coming back): it is taken
/// over, still in that job's name, which must run first (see [`Acquired::Taken`]).
pub async fn acquire<K: Kv>(
    kv: &K,
    key: &str,
    group_job_ids: &[&str],
    ttl_seconds: u32,
) -> Result<Acquired, InfraError> {
    take(kv, key, group_job_ids, ttl_seconds, None).await
}

/// Takes the lock unless another job holds it; a lock naming one of the group's jobs, or holding
/// `stale`, counts as free.
async fn take<K: Kv>(
    kv: &K,
    key: &str,
    group_job_ids: &[&str],
    ttl_seconds: u32,
    stale: Option<&str>,
) -> Result<Acquired, InfraError> {
    let Some(first) = group_job_ids.first() else {
        return Err(InfraError::new("KV", "a lock was asked for an empty group"));
    };
    let mut token = owner_token(first);
    if let Some(holder) = kv.get(key).await? {
        let ours = group_job_ids.iter().any(|id| owner_token(id) == holder);
        if ours {
            token = holder;
        } else if stale != Some(holder.as_str()) {
            return Ok(Acquired::Held { holder });
        }
    }
    kv.put(key, &token, ttl_seconds).await?;
    Ok(Acquired::Taken { token })
}

/// Takes over a lock whose holder is known to be finished (the ledger says DONE or DEAD), if it
/// still holds `stale`: a job that finished without its release (an operator cancelled it while
/// it held its key for a retry, the reaper made it DEAD) must not keep its key's jobs waiting.
/// Best-effort like `acquire`: a newer value found in its place is left alone.
pub async fn take_over<K: Kv>(
    kv: &K,
    key: &str,
    stale: &str,
    group_job_ids: &[&str],
    ttl_seconds: u32,
) -> Result<Acquired, InfraError> {
    take(kv, key, group_job_ids, ttl_seconds, Some(stale)).await
}

/// What `release` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The lock was ours and is deleted.
    Deleted,
    /// Someone else holds it now; it is left alone.
    NotOurs,
    /// It had already expired or been deleted.
    Absent,
}

/// Deletes the lock only if it still holds `token`.
pub async fn release<K: Kv>(kv: &K, key: &str, token: &str) -> Result<Released, InfraError> {
    match kv.get(key).await? {
        None => Ok(Released::Absent),
        Some(v) if v == token => {
            kv.delete(key).await?;
            Ok(Released::Deleted)
        }
        Some(_) => Ok(Released::NotOurs),
    }
}

/// Extends our lock's TTL (a long group must not lose it mid-run).
pub async fn refresh<K: Kv>(kv: &K, key: &str, token: &str, ttl_seconds: u32) -> Result<(), InfraError> {
    kv.put(key, token, ttl_seconds).await
}

/// Keeps the key held in `job_id`'s name for `ttl_seconds`: a failed job holding its key until its
/// retry comes back, so nothing behind it overtakes it.
pub async fn hold<K: Kv>(kv: &K, key: &str, job_id: &str, ttl_seconds: u32) -> Result<(), InfraError> {
    kv.put(key, &owner_token(job_id), ttl_seconds).await
}

#[cfg(any(test, feature = "testing"))]
/// An in-memory KV with real expiry, for tests and the benchmark's model. Counts operations and
/// can be switched into an outage.
pub struct MemoryKv<C: Clock> {
    clock: C,
    entries: RefCell<HashMap<String, (String, i64)>>,
    /// get/put/delete calls so far.
    pub ops: Cell<u64>,
    /// When set, every call fails as an outage would.
    pub down: Cell<bool>,
}

#[cfg(any(test, feature = "testing"))]
impl<C: Clock> MemoryKv<C> {
    /// An empty store on `clock`.
    pub fn new(clock: C) -> Self {
        MemoryKv { clock, entries: RefCell::default(), ops: Cell::new(0), down: Cell::new(false) }
    }

    /// Reads a value without counting it as an operation (for assertions).
    pub fn peek(&self, key: &str) -> Option<String> {
        let now = self.clock.now_ms();
        self.entries.borrow().get(key).filter(|(_, exp)| *exp > now).map(|(v, _)| v.clone())
    }

    fn op(&self) -> Result<i64, InfraError> {
        self.ops.set(self.ops.get() + 1);
        if self.down.get() {
            return Err(InfraError::new("KV", "simulated outage"));
        }
        Ok(self.clock.now_ms())
    }
}

#[cfg(any(test, feature = "testing"))]
impl<C: Clock> Kv for MemoryKv<C> {
    async fn get(&self, key: &str) -> Result<Option<String>, InfraError> {
        let now = self.op()?;
        let mut entries = self.entries.borrow_mut();
        match entries.get(key) {
            Some((_, exp)) if *exp <= now => {
                entries.remove(key);
                Ok(None)
            }
            Some((v, _)) => Ok(Some(v.clone())),
            None => Ok(None),
        }
    }

    async fn put(&self, key: &str, value: &str, ttl_seconds: u32) -> Result<(), InfraError> {
        let now = self.op()?;
        if ttl_seconds < crate::config::MIN_LOCK_TTL_SECONDS {
            // Real KV refuses this; so does the fake, so a too-short TTL is caught natively.
            return Err(InfraError::new("KV", format!("expirationTtl {ttl_seconds} is below 60")));
        }
        let expires = now + i64::from(ttl_seconds) * 1000;
        self.entries.borrow_mut().insert(key.to_string(), (value.to_string(), expires));
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), InfraError> {
        self.op()?;
        self.entries.borrow_mut().remove(key);
        Ok(())
    }
}

impl<K: Kv> Kv for Rc<K> {
    async fn get(&self, key: &str) -> Result<Option<String>, InfraError> {
        (**self).get(key).await
    }
    async fn put(&self, key: &str, value: &str, ttl_seconds: u32) -> Result<(), InfraError> {
        (**self).put(key, value, ttl_seconds).await
    }
    async fn delete(&self, key: &str) -> Result<(), InfraError> {
        (**self).delete(key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use futures::executor::block_on;

    fn kv() -> (Rc<ManualClock>, MemoryKv<Rc<ManualClock>>) {
        let clock = Rc::new(ManualClock::new(1_000_000));
        (clock.clone(), MemoryKv::new(clock))
    }

    #[test]
    fn a_lock_written_by_one_call_is_read_back_by_the_next() {
        let (_, kv) = kv();
        let key = lock_key("__fedify_ordering_", "actor");
        assert_eq!(key, "__fedify_ordering_actor");
        let first = block_on(acquire(&kv, &key, &["j1"], 60)).unwrap();
        assert_eq!(first, Acquired::Taken { token: "orderly:j1".into() });
        assert_eq!(kv.peek(&key).as_deref(), Some("orderly:j1"));
        let second = block_on(acquire(&kv, &key, &["j2"], 60)).unwrap();
        assert_eq!(second, Acquired::Held { holder: "orderly:j1".into() });
    }

    #[test]
    fn a_lock_expires_after_its_ttl() {
        let (clock, kv) = kv();
        block_on(acquire(&kv, "k", &["j1"], 60)).unwrap();
        clock.advance_ms(59_999);
        assert!(matches!(block_on(acquire(&kv, "k", &["j2"], 60)).unwrap(), Acquired::Held { .. }));
        clock.advance_ms(1);
        assert_eq!(block_on(acquire(&kv, "k", &["j2"], 60)).unwrap(), Acquired::Taken { token: "orderly:j2".into() });
    }

    #[test]
    fn release_keeps_a_lock_taken_over_by_another_job() {
        let (_, kv) = kv();
        block_on(acquire(&kv, "k", &["j1"], 60)).unwrap();
        block_on(kv.put("k", "orderly:other", 60)).unwrap();
        assert_eq!(block_on(release(&kv, "k", "orderly:j1")).unwrap(), Released::NotOurs);
        assert_eq!(kv.peek("k").as_deref(), Some("orderly:other"));
    }

    #[test]
    fn release_deletes_our_own_lock() {
        let (_, kv) = kv();
        let Acquired::Taken { token } = block_on(acquire(&kv, "k", &["j1"], 60)).unwrap() else { panic!() };
        assert_eq!(block_on(release(&kv, "k", &token)).unwrap(), Released::Deleted);
        assert_eq!(kv.peek("k"), None);
        assert_eq!(block_on(release(&kv, "k", &token)).unwrap(), Released::Absent);
    }

    #[test]
    fn a_foreign_lock_value_is_held_not_ours() {
        // Fedify writes its own value; it must never be read as one of our jobs.
        let (_, kv) = kv();
        block_on(kv.put("k", "j1", 60)).unwrap();
        assert_eq!(block_on(acquire(&kv, "k", &["j1"], 60)).unwrap(), Acquired::Held { holder: "j1".into() });
    }

    #[test]
    fn a_group_takes_over_a_lock_held_by_one_of_its_own_jobs() {
        let (_, kv) = kv();
        block_on(kv.put("k", &owner_token("failed"), 600)).unwrap();
        let got = block_on(acquire(&kv, "k", &["failed", "next"], 60)).unwrap();
        assert_eq!(got, Acquired::Taken { token: "orderly:failed".into() });
        assert!(matches!(block_on(acquire(&kv, "k", &["next"], 60)).unwrap(), Acquired::Held { .. }));
    }

    #[test]
    fn the_fake_refuses_ttls_real_kv_refuses_and_fails_when_down() {
        let (_, kv) = kv();
        assert!(block_on(kv.put("k", "v", 59)).is_err());
        kv.down.set(true);
        assert!(block_on(kv.get("k")).is_err());
        assert_eq!(kv.ops.get(), 2);
    }
}
