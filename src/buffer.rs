//! Memory the consumer holds for the application: one byte budget (`fetch.buffer.bytes`)
//! shared by the I/O thread (which charges it) and the application (whose dropped records
//! give it back), and a small pool of recycled frame buffers.
//!
//! Invariants:
//! 1. Everything fetched and held for the application is charged to the one [`Budget`]:
//!    response frames, decompressed batches, record indexes, and spare pooled buffers. Only
//!    the I/O thread charges; it charges beyond the cap only for a response it already
//!    received ([`Budget::charge`]), everything else goes through [`Budget::try_charge`].
//! 2. A [`Charge`] gives its bytes back when dropped, on whatever thread drops it. Only
//!    memory given back from outside the fetch path ([`Budget::memory_returned`]: records
//!    the application held were dropped, or spare buffers were dropped to make room) counts
//!    as a release and wakes the I/O thread when it had stopped fetching for lack of room;
//!    the I/O thread freeing what it charged for a response (a frame nothing kept, a spare
//!    it took) does neither, so a partition that waits for room is never refetched in a
//!    loop while the application holds the memory.
//! 3. The pool keeps at most [`POOL_SIZE`] buffers, each no larger than
//!    [`POOL_MAX_BUFFER`]; a larger buffer is freed when its frame is dropped, so one huge
//!    response does not stay allocated forever. It keeps a spare only while at least half
//!    the budget stays free, and gives all of them up when the I/O thread waits for room
//!    ([`Pool::yield_to_starved`]), so spare buffers can never keep the I/O thread from
//!    fetching, nor a batch that fits the budget from being decoded.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

/// How many spare buffers the pool keeps; more are freed.
pub(crate) const POOL_SIZE: usize = 2;

/// Frames smaller than this are not worth a recycled buffer.
const SMALL_FRAME: usize = 64 * 1024;

/// The largest buffer the pool keeps.
pub(crate) const POOL_MAX_BUFFER: usize = 16 * 1024 * 1024;

/// The prefetch byte budget.
pub(crate) struct Budget {
    cap: usize,
    used: AtomicUsize,
    /// Set by the I/O thread when it stopped fetching for lack of room.
    starved: AtomicBool,
    /// Counts the application's releases, so the I/O thread can tell whether it freed
    /// memory since.
    releases: AtomicU64,
    wake: Box<dyn Fn() + Send + Sync>,
}

impl Budget {
    /// A budget of `cap` bytes; `wake` is called (from the thread that frees bytes) when the
    /// I/O thread was waiting for room.
    pub fn new(cap: usize, wake: Box<dyn Fn() + Send + Sync>) -> Arc<Budget> {
        Arc::new(Budget {
            cap,
            used: AtomicUsize::new(0),
            starved: AtomicBool::new(false),
            releases: AtomicU64::new(0),
            wake,
        })
    }

    /// The configured cap.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Bytes currently charged.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// Bytes that may still be charged. Only grows behind the I/O thread's back.
    pub fn room(&self) -> usize {
        self.cap.saturating_sub(self.used())
    }

    /// How many times the application gave memory back so far.
    pub fn releases(&self) -> u64 {
        self.releases.load(Ordering::Acquire)
    }

    /// Whether the I/O thread is waiting for room.
    pub fn is_starved(&self) -> bool {
        self.starved.load(Ordering::Acquire)
    }

    /// Charges `n` bytes unconditionally (a response already received).
    pub fn charge(self: &Arc<Self>, n: usize) -> Charge {
        self.used.fetch_add(n, Ordering::AcqRel);
        Charge {
            budget: Arc::clone(self),
            n,
        }
    }

    /// Charges `n` bytes if they fit under the cap.
    pub fn try_charge(self: &Arc<Self>, n: usize) -> Option<Charge> {
        let mut used = self.used();
        loop {
            let next = used.checked_add(n).filter(|x| *x <= self.cap)?;
            match self
                .used
                .compare_exchange_weak(used, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    return Some(Charge {
                        budget: Arc::clone(self),
                        n,
                    })
                }
                Err(now) => used = now,
            }
        }
    }

    /// The I/O thread found no room: the next release wakes it. Returns whether there is
    /// still no room (a release may have raced with this call).
    pub fn starve(&self) -> bool {
        self.starved.store(true, Ordering::Release);
        if self.room() > 0 {
            self.starved.store(false, Ordering::Release);
            return false;
        }
        true
    }

    /// The I/O thread waits for any memory to be freed: the next release wakes it.
    pub fn wake_on_release(&self) {
        self.starved.store(true, Ordering::Release);
    }

    /// Memory was given back from outside the fetch path (records the application held
    /// were dropped, and their charges with them; or spare buffers were dropped to make
    /// room): counts as a release, and wakes the I/O thread if it waits for room.
    pub fn memory_returned(&self) {
        self.releases.fetch_add(1, Ordering::AcqRel);
        if self.starved.swap(false, Ordering::AcqRel) {
            (self.wake)();
        }
    }

    fn release(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("cap", &self.cap)
            .field("used", &self.used())
            .field("starved", &self.is_starved())
            .finish()
    }
}

/// Bytes charged to a [`Budget`], given back on drop.
#[derive(Debug)]
pub(crate) struct Charge {
    budget: Arc<Budget>,
    n: usize,
}

impl Charge {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.n
    }

    /// The budget charged.
    pub fn budget(&self) -> &Arc<Budget> {
        &self.budget
    }

    /// Charges `more` bytes to this charge if they fit under the cap.
    pub fn try_grow(&mut self, more: usize) -> bool {
        match self.budget.try_charge(more) {
            Some(mut c) => {
                self.n += more;
                c.n = 0;
                true
            }
            None => false,
        }
    }

    /// Charges `more` bytes unconditionally.
    pub fn grow(&mut self, more: usize) {
        self.budget.used.fetch_add(more, Ordering::AcqRel);
        self.n += more;
    }

    /// Gives `less` bytes back now.
    pub fn shrink(&mut self, less: usize) {
        let less = less.min(self.n);
        self.n -= less;
        self.budget.release(less);
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(self.n);
    }
}

/// A complete response frame (without its size prefix).
pub(crate) struct FrameBuf {
    data: Vec<u8>,
    len: usize,
    recycle: Option<Pool>,
}

impl FrameBuf {
    /// A frame that is not recycled.
    #[cfg(test)]
    pub fn from_vec(data: Vec<u8>) -> FrameBuf {
        FrameBuf {
            len: data.len(),
            data,
            recycle: None,
        }
    }

    /// The memory this frame holds.
    pub fn capacity(&self) -> usize {
        self.data.capacity()
    }
}

impl Deref for FrameBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.data[..self.len]
    }
}

impl Drop for FrameBuf {
    fn drop(&mut self) {
        if let Some(pool) = &self.recycle {
            pool.give(std::mem::take(&mut self.data));
        }
    }
}

/// Spare frame buffers, shared by the I/O thread (takes) and whoever drops frames (gives).
/// Spare buffers are charged to the budget while they wait.
#[derive(Clone)]
pub(crate) struct Pool {
    tx: Sender<(Vec<u8>, Charge)>,
    rx: Receiver<(Vec<u8>, Charge)>,
    budget: Arc<Budget>,
}

impl Pool {
    /// An empty pool whose spare buffers count against `budget`.
    pub fn new(budget: Arc<Budget>) -> Pool {
        let (tx, rx) = crossbeam_channel::bounded(POOL_SIZE);
        Pool { tx, rx, budget }
    }

    /// A buffer for a frame of `len` bytes (its contents are garbage, its length is what
    /// it had): a spare one if it is not much larger than
    /// needed (a frame's memory is charged by capacity), else an empty one. Small frames
    /// never take a spare buffer.
    pub fn take_for(&self, len: usize) -> Vec<u8> {
        if len < SMALL_FRAME {
            return Vec::new();
        }
        match self.rx.try_recv() {
            Ok((b, _charge)) if b.capacity() <= len.saturating_mul(2) => b,
            _ => Vec::new(),
        }
    }

    /// Wraps the first `len` bytes of `data` as a frame that returns to this pool.
    pub fn frame(&self, data: Vec<u8>, len: usize) -> FrameBuf {
        debug_assert!(len <= data.len());
        FrameBuf {
            data,
            len,
            recycle: Some(self.clone()),
        }
    }

    /// When the I/O thread waits for room, frees the spare buffers; if nothing else is held
    /// then, counts that as memory given back, so the batch that did not fit is tried again
    /// (with the application holding memory, its release does that).
    pub fn yield_to_starved(&self) {
        if !self.budget.is_starved() || self.rx.is_empty() {
            return;
        }
        while let Ok(spare) = self.rx.try_recv() {
            drop(spare);
        }
        if self.budget.used() == 0 {
            self.budget.memory_returned();
        }
    }

    /// Keeps `buf` as a spare if it is worth it and the budget keeps at least half its
    /// room free afterwards (so spares can never stop the fetching), else frees it.
    fn give(&self, buf: Vec<u8>) {
        let n = buf.capacity();
        if !(SMALL_FRAME..=POOL_MAX_BUFFER).contains(&n) || self.tx.is_full() {
            return;
        }
        if self.budget.room() < n.saturating_add(self.budget.cap() / 2) {
            return;
        }
        if let Some(charge) = self.budget.try_charge(n) {
            let _ = self.tx.try_send((buf, charge));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(cap: usize) -> Arc<Budget> {
        Budget::new(cap, Box::new(|| {}))
    }

    const N: usize = SMALL_FRAME;

    #[test]
    fn dropped_frames_come_back_without_shrinking() {
        let pool = Pool::new(budget(1 << 30));
        let f = pool.frame(vec![7; N], 10);
        assert_eq!(&f[..], &[7; 10]);
        drop(f);
        let back = pool.take_for(N);
        assert_eq!(back.len(), N, "the whole initialized buffer is reused");
        assert!(pool.take_for(N).is_empty());
        drop(pool.frame(vec![7; N], 10));
        assert!(pool.take_for(10).is_empty(), "small frames get no spare");
        assert!(pool.take_for(N / 2 - 1).is_empty(), "nor much smaller ones");
    }

    #[test]
    fn the_pool_is_bounded_in_count_and_size_and_charged() {
        let b = budget(1 << 30);
        let pool = Pool::new(Arc::clone(&b));
        for _ in 0..POOL_SIZE + 3 {
            drop(pool.frame(vec![0; N], 8));
        }
        assert_eq!(b.used(), POOL_SIZE * N, "spare buffers are charged");
        let mut n = 0;
        while !pool.take_for(N).is_empty() {
            n += 1;
        }
        assert_eq!(n, POOL_SIZE);
        assert_eq!(b.used(), 0);
        drop(pool.frame(vec![0; POOL_MAX_BUFFER + 1], 1));
        assert!(
            pool.take_for(POOL_MAX_BUFFER).is_empty(),
            "a huge buffer is freed, not kept"
        );
        drop(pool.frame(vec![0; 100], 1));
        assert_eq!(b.used(), 0, "a tiny buffer is freed, not kept");
    }

    #[test]
    fn spares_give_way_when_the_io_thread_waits_for_room() {
        let b = budget(4 * N);
        let pool = Pool::new(Arc::clone(&b));
        drop(pool.frame(vec![0; N], 1));
        assert_eq!(b.used(), N);
        pool.yield_to_starved();
        assert_eq!(b.used(), N, "not waiting for room: the spare stays");
        b.wake_on_release();
        let held = b.try_charge(N).expect("fits");
        pool.yield_to_starved();
        assert_eq!(b.used(), N, "the spare is gone");
        assert_eq!(
            b.releases(),
            0,
            "the application still holds memory: it will release"
        );
        drop(held);
        drop(pool.frame(vec![0; N], 1));
        b.wake_on_release();
        pool.yield_to_starved();
        assert_eq!(b.used(), 0);
        assert_eq!(b.releases(), 1, "nothing else held: counts as a release");
        assert!(!b.is_starved());
    }

    #[test]
    fn spares_never_take_more_than_half_the_budget() {
        let b = budget(3 * N);
        let pool = Pool::new(Arc::clone(&b));
        drop(pool.frame(vec![0; N], 1));
        assert_eq!(b.used(), N);
        drop(pool.frame(vec![0; N], 1));
        assert_eq!(
            b.used(),
            N,
            "a second spare would leave less than half free"
        );
    }

    #[test]
    fn charges_respect_the_cap_and_only_the_application_giving_back_wakes_a_starved_thread() {
        let woken = Arc::new(AtomicUsize::new(0));
        let w = Arc::clone(&woken);
        let b = Budget::new(
            100,
            Box::new(move || {
                w.fetch_add(1, Ordering::SeqCst);
            }),
        );
        let a = b.try_charge(60).expect("fits");
        assert!(b.try_charge(50).is_none());
        let mut c = b.try_charge(40).expect("fits exactly");
        assert!(!c.try_grow(1));
        assert_eq!(b.room(), 0);
        assert!(b.starve());
        drop(a);
        assert_eq!(b.room(), 60);
        assert_eq!(
            woken.load(Ordering::SeqCst),
            0,
            "the I/O thread's own frees"
        );
        assert_eq!(b.releases(), 0);
        assert!(b.is_starved());
        b.memory_returned();
        assert_eq!(woken.load(Ordering::SeqCst), 1);
        assert_eq!(b.releases(), 1);
        assert!(!b.is_starved());
        c.grow(200);
        assert_eq!(b.used(), 240, "a received response may overshoot");
        c.shrink(200);
        drop(c);
        assert_eq!(b.used(), 0);
        b.memory_returned();
        assert_eq!(woken.load(Ordering::SeqCst), 1, "not starved: no wake");
    }
}
