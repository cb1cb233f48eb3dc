//! Exponential backoff with jitter, for every retry path (reconnects, metadata refreshes,
//! partition errors, offset lookups, coordinator discovery).
//!
//! The jitter comes from a [`Jitter`] source that the caller injects: the I/O thread seeds
//! one from the clock, tests use a fixed seed, so retry timing is reproducible in tests.
//!
//! Invariants:
//! 1. Every delay is at least [`MIN_DELAY`], whatever the configuration says: a setting of 0
//!    (`reconnect.backoff.ms=0`, `retry.backoff.ms=0`) can never turn a retry path into a
//!    busy loop.
//! 2. Delays grow by doubling from `initial` and never exceed `max` (plus jitter); the
//!    failure count saturates, so nothing overflows however long a fault lasts.
//! 3. Jitter stays within ±20 % of the base delay.

use std::time::Duration;

/// The shortest delay any retry waits.
pub(crate) const MIN_DELAY: Duration = Duration::from_millis(10);

/// A source of jitter: 32 random bits at a time.
pub(crate) trait Jitter {
    /// The next random word.
    fn next_u32(&mut self) -> u32;
}

/// A small deterministic generator (xorshift32); seeded from the clock by the I/O thread
/// and with a fixed seed in tests.
#[derive(Debug, Clone)]
pub(crate) struct XorShift(u32);

impl XorShift {
    /// A generator from `seed` (0 is replaced by a fixed non-zero value).
    pub fn new(seed: u32) -> XorShift {
        XorShift(if seed == 0 { 0x9E37_79B9 } else { seed })
    }
}

impl Jitter for XorShift {
    fn next_u32(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        x
    }
}

/// A backoff policy: the first delay and the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
}

impl Backoff {
    /// A policy doubling from `initial` up to `max` (both raised to [`MIN_DELAY`]).
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        let initial = initial.max(MIN_DELAY);
        Backoff {
            initial,
            max: max.max(initial),
        }
    }

    /// The delay before attempt number `failures + 1`, after `failures` consecutive
    /// failures (1 for the first retry), with ±20 % jitter.
    pub fn delay(&self, failures: u32, jitter: &mut dyn Jitter) -> Duration {
        let doublings = failures.saturating_sub(1).min(20);
        let base = self.initial.saturating_mul(1 << doublings).min(self.max);
        // 0.8 .. 1.2 of the base, in steps of 1/1000.
        let permille = 800 + jitter.next_u32() % 401;
        (base.saturating_mul(permille) / 1000).max(MIN_DELAY)
    }
}

/// A retry schedule for one thing that can fail repeatedly: counts consecutive failures and
/// says when the next attempt may go out.
#[derive(Debug, Clone, Default)]
pub(crate) struct Retry {
    failures: u32,
}

impl Retry {
    /// Records a failure and returns the delay before the next attempt.
    pub fn failed(&mut self, policy: &Backoff, jitter: &mut dyn Jitter) -> Duration {
        self.failures = self.failures.saturating_add(1);
        policy.delay(self.failures, jitter)
    }

    /// Records a success: the next failure starts from the initial delay again.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_with_bounded_jitter() {
        let b = Backoff::new(Duration::from_millis(50), Duration::from_millis(1000));
        let mut j = XorShift::new(7);
        for f in 1..40 {
            let d = b.delay(f, &mut j);
            let base = (Duration::from_millis(50) * (1 << (f - 1).min(20)))
                .min(Duration::from_millis(1000));
            assert!(
                d >= base.mul_f64(0.8) && d <= base.mul_f64(1.2),
                "{f}: {d:?}"
            );
        }
    }

    #[test]
    fn a_zero_setting_still_waits() {
        let b = Backoff::new(Duration::ZERO, Duration::ZERO);
        let mut j = XorShift::new(1);
        for f in 0..100 {
            assert!(b.delay(f, &mut j) >= MIN_DELAY);
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_delays() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let (mut a, mut c) = (XorShift::new(42), XorShift::new(42));
        let x: Vec<Duration> = (1..10).map(|f| b.delay(f, &mut a)).collect();
        let y: Vec<Duration> = (1..10).map(|f| b.delay(f, &mut c)).collect();
        assert_eq!(x, y);
    }

    #[test]
    fn retry_counts_failures_and_resets_on_success() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        let mut j = XorShift::new(3);
        let mut r = Retry::default();
        let first = r.failed(&b, &mut j);
        r.failed(&b, &mut j);
        let third = r.failed(&b, &mut j);
        assert!(third > first);
        assert_eq!(r.failures(), 3);
        r.succeeded();
        assert!(r.failed(&b, &mut j) <= Duration::from_millis(120));
    }
}
