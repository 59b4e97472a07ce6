//! Packing buffers, one pair (A, B) per pool thread, grown on first use and never shrunk.
//!
//! Which thread runs which task of a job is decided at run time, so a worker that took no task
//! of some product during the warm-up runs would grow its buffers on a later run. `spread`
//! (called after each run of a compiled graph) grows every slot to the longest any slot reached,
//! so warm runs allocate nothing whichever thread takes which task.

use crate::threads;
use std::cell::RefCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Pool slots with buffers of their own (`threads::slot()`, from 1; taken modulo this).
pub(crate) const SLOTS: usize = 64;

/// Packing buffers of a thread outside the pool (slot 0): callers on different threads never
/// share, or wait on, each other's buffers.
pub(crate) type LocalBufs<T> = std::thread::LocalKey<RefCell<(Vec<T>, Vec<T>)>>;

/// The pool threads' packing buffers, and the longest length any slot's A and B reached.
pub(crate) struct PackSlots<T> {
    bufs: [Mutex<(Vec<T>, Vec<T>)>; SLOTS],
    longest: [AtomicUsize; 2],
    /// Whether every slot has been grown to `longest` since it last rose.
    even: AtomicBool,
}

impl<T: Clone + Default> PackSlots<T> {
    /// Empty buffers (for a static).
    pub(crate) const fn new() -> Self {
        PackSlots {
            bufs: [const { Mutex::new((Vec::new(), Vec::new())) }; SLOTS],
            longest: [AtomicUsize::new(0), AtomicUsize::new(0)],
            even: AtomicBool::new(true),
        }
    }

    /// Runs `f` with the buffers of pool slot `slot`, or with this thread's own (`local`) when it
    /// is not a pool worker (slot 0). Two user threads multiplying at once serialized on one
    /// shared slot before: two 512 x 1024 x 1024 products on two threads ran at one thread's speed.
    pub(crate) fn with<R>(
        &self,
        local: &'static LocalBufs<T>,
        slot: usize,
        f: impl FnOnce(&mut Vec<T>, &mut Vec<T>) -> R,
    ) -> R {
        if slot == 0 {
            return local.with(|l| match l.try_borrow_mut() {
                Ok(mut g) => {
                    let (pa, pb) = &mut *g;
                    let r = f(pa, pb);
                    self.note(pa.len(), pb.len());
                    r
                }
                // A nested product on this thread (an epilogue that multiplies): buffers of its own.
                Err(_) => f(&mut Vec::new(), &mut Vec::new()),
            });
        }
        let mut b = self.bufs[slot % SLOTS].lock().unwrap_or_else(|e| e.into_inner());
        let (pa, pb) = &mut *b;
        let r = f(pa, pb);
        self.note(pa.len(), pb.len());
        r
    }

    /// Records the lengths a slot's buffers have now.
    fn note(&self, a: usize, b: usize) {
        for (longest, len) in self.longest.iter().zip([a, b]) {
            if len > longest.load(Ordering::Relaxed) {
                longest.fetch_max(len, Ordering::AcqRel);
                self.even.store(false, Ordering::Release);
            }
        }
    }

    /// Grows the buffers of every pool slot and of this thread (`local`) to the longest any slot
    /// has reached; nothing to do (two atomic reads) when no slot grew since the last call.
    pub(crate) fn spread(&self, local: &'static LocalBufs<T>) {
        if self.even.swap(true, Ordering::AcqRel) {
            return;
        }
        let (la, lb) = (self.longest[0].load(Ordering::Acquire), self.longest[1].load(Ordering::Acquire));
        self.grow_all(local, la, lb);
    }

    /// Grows the A and B buffers of every pool slot and of this thread (`local`) to at least
    /// `la` and `lb` elements: ahead of a job whose tasks need them, or to even them out.
    pub(crate) fn grow_all(&self, local: &'static LocalBufs<T>, la: usize, lb: usize) {
        let grow = |a: &mut Vec<T>, b: &mut Vec<T>| {
            for (v, len) in [(a, la), (b, lb)] {
                if v.len() < len {
                    rlx_driver::huge_pages::grow(v, len, T::default());
                }
            }
        };
        for s in 1..threads::num_threads().min(SLOTS) {
            let mut g = self.bufs[s].lock().unwrap_or_else(|e| e.into_inner());
            let (pa, pb) = &mut *g;
            grow(pa, pb);
        }
        local.with(|l| {
            if let Ok(mut g) = l.try_borrow_mut() {
                let (pa, pb) = &mut *g;
                grow(pa, pb);
            }
        });
    }

    /// The lengths of slot `slot`'s buffers (tests).
    #[cfg(test)]
    pub(crate) fn lens(&self, slot: usize) -> (usize, usize) {
        let g = self.bufs[slot % SLOTS].lock().unwrap_or_else(|e| e.into_inner());
        (g.0.len(), g.1.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static LOCAL: RefCell<(Vec<u32>, Vec<u32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    }

    #[test]
    fn spread_grows_every_slot_to_the_longest_once() {
        static SLOTS_U32: PackSlots<u32> = PackSlots::new();
        let last = threads::num_threads().min(SLOTS) - 1;
        SLOTS_U32.with(&LOCAL, last.max(1), |a, b| {
            a.resize(100, 0);
            b.resize(7, 0);
        });
        SLOTS_U32.with(&LOCAL, 0, |a, _| a.resize(30, 0));
        SLOTS_U32.spread(&LOCAL);
        for s in 1..=last {
            assert_eq!(SLOTS_U32.lens(s), (100, 7), "slot {s}");
        }
        LOCAL.with_borrow(|(a, b)| assert_eq!((a.len(), b.len()), (100, 7)));
        // Nothing grew since: the next spread returns at once, the flag already set.
        assert!(SLOTS_U32.even.load(Ordering::Acquire));
        SLOTS_U32.spread(&LOCAL);
    }
}
