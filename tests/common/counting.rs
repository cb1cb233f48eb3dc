//! A global allocator that counts the heap bytes live, for a test binary that measures
//! what a structure holds by what dropping it frees. A binary opts in with
//! `#[global_allocator] static ALLOCATOR: Counting = Counting;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// Live heap bytes (of a binary that installed [`Counting`]).
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// The system allocator, counting the bytes live.
pub struct Counting;

// SAFETY: every call goes to the system allocator with the caller's arguments unchanged;
// the counter is only arithmetic on the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as the caller promised for `layout`.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: as the caller promised for `ptr`, `layout` and `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// The heap bytes live now.
pub fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// The heap bytes `f` frees (negative if it allocates more than it frees).
pub fn freed_by(f: impl FnOnce()) -> isize {
    let before = live();
    f();
    before - live()
}
