//! A panic in a Rust handler, recorded as its job's failure (design §17).
//!
//! On Workers a panic aborts the invocation: the wasm instance is reset before the next event, so
//! nothing in the instance's memory survives it and nothing asynchronous can run after it. What
//! does survive is the isolate's JavaScript global object. So:
//! - while a Rust handler's future is polled, its job is noted as the one running ([`Noted`]);
//! - the panic hook ([`install`], edge only) appends that job, its attempt and the panic's message
//!   to `globalThis.__orderly_panicked`, synchronously, before the instance goes;
//! - the next queue invocation in the isolate takes the list ([`take`]) and records each panic as
//!   a failed attempt of its job ([`crate::consumer::Consumer::record_panics`]): its history says
//!   "the handler panicked: ...", it is retried with backoff or DEAD at its last attempt; the other
//!   jobs of every invocation that was live in the instance ([`Live`]) died with it, and their
//!   runs end at once (PENDING again, their attempt kept, as the reaper would after their leases).
//!
//! Best effort: when the next invocation runs in another isolate, the job's lease expires instead
//! and the reaper records "lease expired".

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};

/// A Rust handler's panic: the job that was running, its attempt, what the panic said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Panicked {
    /// The job whose handler panicked.
    pub job_id: String,
    /// The attempt it panicked in (the claimed row's `attempts`).
    pub attempt: u32,
    /// The panic's message.
    pub message: String,
    /// Every consumer invocation that was running in the instance: the panic ended them all
    /// (concurrent invocations of an isolate share its wasm instance).
    #[serde(default)]
    pub owners: Vec<String>,
}

thread_local! {
    /// The job whose handler is being polled right now: the one a panic comes from (a wasm
    /// instance is single-threaded, and one future is polled at a time).
    static RUNNING: RefCell<Option<(String, u32)>> = const { RefCell::new(None) };
}

thread_local! {
    /// The lease owners of the consumer invocations running in this instance.
    static LIVE: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// A consumer invocation, counted live in its instance while this is held.
pub struct Live(String);

impl Live {
    /// Counts the invocation `owner` live until dropped.
    pub fn new(owner: &str) -> Live {
        LIVE.with(|l| l.borrow_mut().push(owner.to_string()));
        Live(owner.to_string())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.with(|l| l.borrow_mut().retain(|o| *o != self.0));
    }
}

/// The invocations live in this instance.
pub fn live() -> Vec<String> {
    LIVE.with(|l| l.borrow().clone())
}

/// The job being polled now, if a Rust handler is.
pub fn running() -> Option<(String, u32)> {
    RUNNING.with(|r| r.borrow().clone())
}

/// A handler's future, with its job noted as running while it is polled.
pub struct Noted<F> {
    job: (String, u32),
    fut: Pin<Box<F>>,
}

impl<F: Future> Noted<F> {
    /// `fut`, run for attempt `attempt` of job `job_id`.
    pub fn new(job_id: &str, attempt: u32, fut: F) -> Self {
        Noted { job: (job_id.to_string(), attempt), fut: Box::pin(fut) }
    }
}

impl<F: Future> Future for Noted<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let before = RUNNING.with(|r| r.replace(Some(self.job.clone())));
        let out = self.fut.as_mut().poll(cx);
        RUNNING.with(|r| *r.borrow_mut() = before);
        out
    }
}

/// The panic hook's record, once per instance: chained before the hook already set (workers-rs
/// logs the panic and marks the instance for a reset).
#[cfg(target_arch = "wasm32")]
pub fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Some((job_id, attempt)) = running() {
                let message = match info.payload().downcast_ref::<&str>() {
                    Some(s) => s.to_string(),
                    None => info.payload().downcast_ref::<String>().cloned().unwrap_or_else(|| info.to_string()),
                };
                note(&Panicked { job_id, attempt, message, owners: live() });
            }
            before(info);
        }));
    });
}

/// The global list's name.
#[cfg(target_arch = "wasm32")]
const GLOBAL: &str = "__orderly_panicked";

/// The list kept on the global object, if there is one.
#[cfg(target_arch = "wasm32")]
fn list() -> Option<js_sys::Array> {
    use wasm_bindgen::JsCast;
    js_sys::Reflect::get(&js_sys::global(), &GLOBAL.into()).ok().and_then(|v| v.dyn_into::<js_sys::Array>().ok())
}

/// Appends `p` to the global list (synchronous: the hook runs as the instance goes).
#[cfg(target_arch = "wasm32")]
fn note(p: &Panicked) {
    let list = list().unwrap_or_default();
    if let Ok(text) = serde_json::to_string(p) {
        list.push(&wasm_bindgen::JsValue::from_str(&text));
    }
    let _ = js_sys::Reflect::set(&js_sys::global(), &GLOBAL.into(), &list);
}

/// Takes the panics noted in this isolate since the last call.
#[cfg(target_arch = "wasm32")]
pub fn take() -> Vec<Panicked> {
    let Some(list) = list() else { return Vec::new() };
    let _ = js_sys::Reflect::delete_property(&js_sys::global(), &GLOBAL.into());
    list.iter().filter_map(|v| v.as_string()).filter_map(|t| serde_json::from_str(&t).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_being_polled_is_noted_and_only_while_it_is() {
        assert_eq!(running(), None);
        let seen = futures::executor::block_on(Noted::new("j1", 3, async { running() }));
        assert_eq!(seen, Some(("j1".to_string(), 3)));
        assert_eq!(running(), None, "cleared once the poll returns");
        // Nested (a handler polling another noted future) restores the outer job.
        let outer = futures::executor::block_on(Noted::new("a", 1, async {
            Noted::new("b", 2, async {}).await;
            running()
        }));
        assert_eq!(outer, Some(("a".to_string(), 1)));
    }

    #[test]
    fn an_invocation_is_live_while_its_guard_is_held() {
        let a = Live::new("inv-a");
        {
            let _b = Live::new("inv-b");
            assert_eq!(live(), vec!["inv-a".to_string(), "inv-b".to_string()]);
        }
        assert_eq!(live(), vec!["inv-a".to_string()]);
        drop(a);
        assert!(live().is_empty());
    }
}
