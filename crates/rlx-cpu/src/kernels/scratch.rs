//! Scratch buffers a kernel's parallel tasks borrow: one per concurrent caller (the pool's threads
//! and the calling thread), allocated when the kernel is built, so warm runs allocate nothing.

use std::sync::{Mutex, MutexGuard};

/// One buffer of `len` elements per concurrent caller; each task takes a free one.
pub(super) struct ScratchPool<T>(Vec<Mutex<Vec<T>>>);

impl<T: Clone> ScratchPool<T> {
    /// Buffers of `len` copies of `fill`, one per pool thread plus the caller.
    pub(super) fn new(len: usize, fill: T) -> Self {
        ScratchPool((0..crate::threads::num_threads() + 1).map(|_| Mutex::new(vec![fill.clone(); len])).collect())
    }

    /// A free buffer: there is one per concurrent caller, and a caller holds at most one at a time.
    pub(super) fn take(&self) -> MutexGuard<'_, Vec<T>> {
        self.0.iter().find_map(|m| m.try_lock().ok()).expect("more scratch buffers than concurrent callers")
    }
}
