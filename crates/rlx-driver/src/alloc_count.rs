//! A global allocator that counts heap allocations, on every thread, while `count` runs: the
//! zero-allocation tests install it and count warm runs of compiled graphs.
//!
//! ```
//! use rlx_driver::alloc_count::{CountingAllocator, count};
//!
//! #[global_allocator]
//! static ALLOC: CountingAllocator = CountingAllocator;
//!
//! let mut v: Vec<u8> = Vec::with_capacity(16);
//! assert_eq!(count(|| v.push(1)), 0);
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static COUNTING: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting allocations (and reallocations) while `count` runs. Install
/// it with `#[global_allocator]`.
pub struct CountingAllocator;

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::SeqCst) {
            ALLOCS.fetch_add(1, Ordering::SeqCst);
        }
        // SAFETY: forwarded.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Heap allocations made on any thread while `f` runs. Panics when `CountingAllocator` is not
/// the global allocator (every count would read 0). Counts of two overlapping calls mix: run
/// them one at a time (a test binary with `harness = false`, whose main runs alone).
pub fn count(f: impl FnOnce()) -> usize {
    let before = ALLOCS.load(Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    // One allocation of our own, to prove the counter is installed.
    drop(std::hint::black_box(Box::new(0u64)));
    f();
    COUNTING.store(false, Ordering::SeqCst);
    let n = ALLOCS.load(Ordering::SeqCst) - before;
    assert!(n >= 1, "alloc_count::count needs CountingAllocator as the #[global_allocator]");
    n - 1
}
