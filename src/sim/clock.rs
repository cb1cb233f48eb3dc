//! Virtual time for the simulation: a [`Clock`] that only moves when a test advances it,
//! and a byte budget that counts how often it woke the I/O thread ([`Wakes`]).
//!
//! Nothing here reads the real clock except [`Clock::new`], which takes one arbitrary
//! starting instant.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::buffer::Budget;

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

/// `n` milliseconds.
pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How often a budget woke the I/O thread (memory given back while it waited).
#[derive(Debug, Clone, Default)]
pub(crate) struct Wakes(Arc<AtomicUsize>);

impl Wakes {
    /// Wake-ups so far.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A byte budget of `cap` bytes that counts how often it woke the I/O thread.
pub(crate) fn budget(cap: usize) -> (Arc<Budget>, Wakes) {
    let wakes = Wakes::default();
    let w = Arc::clone(&wakes.0);
    let b = Budget::new(
        cap,
        Box::new(move || {
            w.fetch_add(1, Ordering::SeqCst);
        }),
    );
    (b, wakes)
}
