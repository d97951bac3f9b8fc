//! Time as a parameter: logic asks a [`Clock`] instead of reading the system time, so tests set it.

#[cfg(any(test, feature = "testing"))]
use std::cell::Cell;

/// Milliseconds since the Unix epoch.
pub trait Clock {
    /// The current time.
    fn now_ms(&self) -> i64;
}

/// A clock that moves only when told: for tests and fakes.
#[cfg(any(test, feature = "testing"))]
#[derive(Debug, Default)]
pub struct ManualClock(Cell<i64>);

#[cfg(any(test, feature = "testing"))]
impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        ManualClock(Cell::new(now_ms))
    }
    /// Moves the clock forward.
    pub fn advance_ms(&self, ms: i64) {
        self.0.set(self.0.get() + ms);
    }
}

#[cfg(any(test, feature = "testing"))]
impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.get()
    }
}

impl<C: Clock + ?Sized> Clock for std::rc::Rc<C> {
    fn now_ms(&self) -> i64 {
        (**self).now_ms()
    }
}
