//! The seeded scheduler: single-threaded, simulated time, one random runnable task polled per step.
//!
//! Every port call of the code under test awaits a [`Pause`], so the scheduler can switch to
//! another invocation at every await point. A task is runnable when its wake time has come; when
//! none is, the clock jumps to the earliest wake time (time only moves when everyone waits).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use orderly::clock::{Clock, ManualClock};

/// SplitMix64: small, fast, and the same sequence for the same seed on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.f64() < p
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        lo + (self.next_u64() % ((hi - lo + 1) as u64)) as i64
    }
}

/// What the tasks share with the scheduler: the clock, the seeded randomness, and where a pending
/// task says when it wants to be polled again.
pub struct Sched {
    pub clock: Rc<ManualClock>,
    pub rng: RefCell<Rng>,
    wake_at: Cell<i64>,
}

impl Sched {
    pub fn new(seed: u64, start_ms: i64) -> Rc<Sched> {
        Rc::new(Sched {
            clock: Rc::new(ManualClock::new(start_ms)),
            rng: RefCell::new(Rng::new(seed)),
            wake_at: Cell::new(0),
        })
    }
    pub fn now(&self) -> i64 {
        self.clock.now_ms()
    }
    /// A pause of `ms` simulated milliseconds (0: just let others run first).
    pub fn pause(self: &Rc<Self>, ms: i64) -> Pause {
        Pause { sched: self.clone(), until: self.now() + ms, polled: false }
    }
    /// A pause of a random length in `lo..=hi` ms.
    pub fn jitter(self: &Rc<Self>, lo: i64, hi: i64) -> Pause {
        let ms = self.rng.borrow_mut().range(lo, hi);
        self.pause(ms)
    }
    pub fn chance(&self, p: f64) -> bool {
        self.rng.borrow_mut().chance(p)
    }
}

/// An await point: pending at least once, then until the clock reaches `until`.
pub struct Pause {
    sched: Rc<Sched>,
    until: i64,
    polled: bool,
}

impl Future for Pause {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.polled && self.sched.now() >= self.until {
            return Poll::Ready(());
        }
        self.polled = true;
        // The task may run again at the earliest of its pending pauses.
        self.sched.wake_at.set(self.sched.wake_at.get().min(self.until));
        // Combinators (FuturesUnordered) re-poll only what was woken: always wake, and let the
        // scheduler's clock decide when the task really runs.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// A task: a future and when it may next make progress.
pub struct Task<T> {
    pub fut: Pin<Box<dyn Future<Output = ()>>>,
    pub wake_at: i64,
    /// What the owner of the scheduler knows the task as (an invocation, the cron, ...).
    pub tag: T,
}

/// Polls `task` once. True when it finished.
pub fn poll_once<T>(sched: &Sched, task: &mut Task<T>) -> bool {
    sched.wake_at.set(i64::MAX);
    let mut cx = Context::from_waker(Waker::noop());
    match task.fut.as_mut().poll(&mut cx) {
        Poll::Ready(()) => true,
        Poll::Pending => {
            // Pending without a pause (a combinator yielding): runnable again at once.
            task.wake_at = match sched.wake_at.get() {
                i64::MAX => sched.now(),
                t => t,
            };
            false
        }
    }
}
