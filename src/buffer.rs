//! Memory the consumer holds for the application: one byte budget (`fetch.buffer.bytes`)
//! shared by the I/O thread (which charges it) and the application (whose dropped records
//! give it back), and small pools of recycled buffers (response frames, decompressed
//! batches), so that steady fetching neither allocates nor zero-fills memory again.
//!
//! Invariants:
//! 1. Everything fetched and held for the application is charged to the one [`Budget`]:
//!    response frames, decompressed batches, record indexes, and spare pooled buffers. Only
//!    the I/O thread charges; it charges beyond the cap only for a response it already
//!    received ([`Budget::charge`]), everything else goes through [`Budget::try_charge`].
//! 2. A [`Charge`] gives its bytes back when dropped, on whatever thread drops it; when the
//!    I/O thread had stopped fetching for lack of room, giving back wakes it. Memory the
//!    application frees (a chunk it drops) is also counted on its own, once its bytes are
//!    back, for partitions that wait for exactly that ([`Budget::app_frees`]).
//! 3. A pool keeps at most its size in buffers ([`POOL_SIZE`] for frames), each no larger
//!    than [`POOL_MAX_BUFFER`] (a larger one is freed when dropped, so one huge response
//!    does not stay allocated forever), and all spares together take at most half the
//!    budget. Spares are charged like everything else but count as room for the next
//!    response, which reuses them, and the pools free their spares when the I/O thread
//!    waits for room: spare buffers never keep it from fetching.

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
    /// Counts the chunks the application dropped: memory the I/O thread gives back itself
    /// (an answer's frame, spare buffers) makes no batch that did not fit fit.
    app_frees: AtomicU64,
    /// Set by the I/O thread when a partition waits for the application to free memory.
    app_awaited: AtomicBool,
    /// Bytes charged for spare pooled buffers.
    spares: AtomicUsize,
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
            app_frees: AtomicU64::new(0),
            app_awaited: AtomicBool::new(false),
            spares: AtomicUsize::new(0),
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

    /// Room for the next response: free bytes plus the spare buffers the pool keeps, which
    /// a response reuses (its charge replaces theirs).
    pub fn room_for_response(&self) -> usize {
        self.room()
            .saturating_add(self.spares.load(Ordering::Acquire))
            .min(self.cap)
    }

    /// Whether the I/O thread is waiting for room (or for the application to free memory).
    pub fn is_starved(&self) -> bool {
        self.starved.load(Ordering::Acquire) || self.app_awaited.load(Ordering::Acquire)
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

    /// The I/O thread waits for any memory to be freed: the next release wakes it.
    pub fn wake_on_release(&self) {
        self.starved.store(true, Ordering::Release);
    }

    /// How many times the application freed memory (dropped a chunk) so far.
    pub fn app_frees(&self) -> u64 {
        self.app_frees.load(Ordering::Acquire)
    }

    /// The I/O thread waits for the application to free memory: its next free wakes it.
    pub fn wake_on_app_free(&self) {
        self.app_awaited.store(true, Ordering::Release);
    }

    /// The application freed memory (called once the bytes are given back).
    pub fn app_freed(&self) {
        self.app_frees.fetch_add(1, Ordering::AcqRel);
        if self.app_awaited.swap(false, Ordering::AcqRel) {
            (self.wake)();
        }
    }

    fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.used.fetch_sub(n, Ordering::AcqRel);
        if self.starved.swap(false, Ordering::AcqRel) {
            (self.wake)();
        }
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
    #[cfg(any(test, feature = "__fuzzing", feature = "__testing"))]
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
        Pool::with_size(budget, POOL_SIZE)
    }

    /// An empty pool keeping at most `n` spares.
    pub fn with_size(budget: Arc<Budget>, n: usize) -> Pool {
        let (tx, rx) = crossbeam_channel::bounded(n.max(1));
        Pool { tx, rx, budget }
    }

    /// Any spare buffer (its contents are garbage, its length is what it had: all of it
    /// initialized), or an empty one.
    pub fn take_any(&self) -> Vec<u8> {
        match self.rx.try_recv() {
            Ok((b, charge)) => {
                self.budget
                    .spares
                    .fetch_sub(charge.bytes(), Ordering::AcqRel);
                b
            }
            Err(_) => Vec::new(),
        }
    }

    /// Gives a buffer back (kept as a spare if it is worth it and fits the budget).
    pub fn put(&self, buf: Vec<u8>) {
        self.give(buf);
    }

    /// A buffer for a frame of `len` bytes (its contents are garbage, its length is what
    /// it had): a spare one if it is at most a quarter larger than needed (a frame is
    /// charged by its capacity), else an empty one. Small frames never take a spare.
    pub fn take_for(&self, len: usize) -> Vec<u8> {
        if len < SMALL_FRAME {
            return Vec::new();
        }
        match self.rx.try_recv() {
            Ok((b, charge)) => {
                self.budget
                    .spares
                    .fetch_sub(charge.bytes(), Ordering::AcqRel);
                drop(charge);
                // Not much larger than needed: a frame is charged by its capacity.
                if b.capacity() <= len.saturating_add(len / 4) {
                    b
                } else {
                    Vec::new()
                }
            }
            Err(_) => Vec::new(),
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

    /// Frees every spare buffer when the I/O thread waits for room: spares never keep it
    /// from fetching (freeing them gives their bytes back, which wakes it).
    pub fn reclaim_if_starved(&self) {
        if !self.budget.is_starved() {
            return;
        }
        let mut freed = false;
        while let Ok((_, charge)) = self.rx.try_recv() {
            self.budget
                .spares
                .fetch_sub(charge.bytes(), Ordering::AcqRel);
            freed = true;
        }
        if freed {
            // Not the fetcher's own memory: a batch waiting for room may fit now.
            self.budget.app_freed();
        }
    }

    /// Keeps `buf` as a spare if it is worth it and the budget has room for it, else
    /// frees it.
    fn give(&self, buf: Vec<u8>) {
        let n = buf.capacity();
        if !(SMALL_FRAME..=POOL_MAX_BUFFER).contains(&n)
            || self.tx.is_full()
            || self.budget.is_starved()
        {
            return;
        }
        // Spares take at most half the budget: the rest is for decoding.
        if self.budget.spares.load(Ordering::Acquire).saturating_add(n) > self.budget.cap / 2 {
            return;
        }
        if let Some(charge) = self.budget.try_charge(n) {
            self.budget.spares.fetch_add(n, Ordering::AcqRel);
            if let Err(e) = self.tx.try_send((buf, charge)) {
                let (_, charge) = e.into_inner();
                self.budget.spares.fetch_sub(n, Ordering::AcqRel);
                drop(charge);
            }
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
    fn spares_are_freed_when_the_io_thread_waits_for_room() {
        let b = budget(4 * N);
        let pool = Pool::new(Arc::clone(&b));
        drop(pool.frame(vec![0; N], 1));
        assert_eq!(b.used(), N);
        pool.reclaim_if_starved();
        assert_eq!(b.used(), N, "kept while nobody waits");
        b.wake_on_release();
        pool.reclaim_if_starved();
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn spares_stay_within_half_the_budget_and_count_as_room_for_the_next_response() {
        let b = budget(4 * N);
        let pool = Pool::with_size(Arc::clone(&b), 8);
        drop(pool.frame(vec![0; N], 1));
        drop(pool.frame(vec![0; N], 1));
        assert_eq!(b.used(), 2 * N, "both spares are charged");
        assert_eq!(b.room(), 2 * N);
        assert_eq!(
            b.room_for_response(),
            4 * N,
            "a response reuses the spares: their bytes are room for it"
        );
        drop(pool.frame(vec![0; N], 1));
        assert_eq!(
            b.used(),
            2 * N,
            "a third spare would take more than half: freed"
        );
        let taken = pool.take_for(N);
        assert_eq!(taken.len(), N);
        assert_eq!(b.used(), N, "a taken spare is no longer charged as one");
        assert_eq!(b.room_for_response(), 4 * N);
        let held = b.try_charge(3 * N).expect("fits");
        drop(pool.frame(taken, 1));
        assert_eq!(
            b.used(),
            4 * N,
            "a spare never takes the budget past its cap"
        );
        drop(held);
        assert_eq!(b.used(), N);
    }

    #[test]
    fn charges_respect_the_cap_and_release_wakes_a_starved_thread() {
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
        b.wake_on_release();
        assert!(b.is_starved());
        drop(a);
        assert_eq!(woken.load(Ordering::SeqCst), 1);
        assert!(!b.is_starved());
        c.grow(200);
        assert_eq!(b.used(), 240, "a received response may overshoot");
        c.shrink(200);
        drop(c);
        assert_eq!(b.used(), 0);
        assert_eq!(woken.load(Ordering::SeqCst), 1, "not starved: no wake");
    }
}
