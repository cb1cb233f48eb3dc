//! A simulated clock for the deterministic tests of the sans-IO components: it starts at
//! one real instant (taken here, outside the components, which never read the clock) and
//! only moves when a test advances it.

use std::time::{Duration, Instant};

/// Virtual time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    now: Instant,
}

impl Clock {
    /// A clock at an arbitrary starting instant.
    pub fn new() -> Clock {
        Clock {
            now: Instant::now(),
        }
    }

    /// The current virtual instant.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Moves time forward by `d` and returns the new instant.
    pub fn advance(&mut self, d: Duration) -> Instant {
        self.now += d;
        self.now
    }

    /// Moves time to `t` if it is later.
    pub fn advance_to(&mut self, t: Instant) -> Instant {
        self.now = self.now.max(t);
        self.now
    }
}
