//! `parallel_for`: tasks split into one contiguous share per pool thread, each thread
//! working through its own share first and then taking tasks from the back of the fullest other
//! share. A thread keeps the same rows of a product from call to call (its A rows and C block
//! stay in its own L2), yet a descheduled thread's tasks still go to the others.

use super::{in_pool_task, num_threads, parallel_for_dynamic, slot};
use std::sync::atomic::{AtomicU64, Ordering};

/// Most shares (threads past this share with others).
const MAX_SHARES: usize = 64;

/// A share's next task (low 32 bits) and its end (high 32 bits).
fn pack(front: usize, back: usize) -> u64 {
    ((back as u64) << 32) | front as u64
}

fn unpack(v: u64) -> (usize, usize) {
    ((v & 0xffff_ffff) as usize, (v >> 32) as usize)
}

/// Claims the next task of `share` from its front (its owner) or its back (another thread), if
/// any is left.
fn take(share: &AtomicU64, from_back: bool) -> Option<usize> {
    let mut v = share.load(Ordering::Acquire);
    loop {
        let (front, back) = unpack(v);
        if front >= back {
            return None;
        }
        let (rest, task) = if from_back { (pack(front, back - 1), back - 1) } else { (pack(front + 1, back), front) };
        match share.compare_exchange_weak(v, rest, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(task),
            Err(now) => v = now,
        }
    }
}

/// Runs `f(task)` for every task in `0..tasks` on the pool: the thread in slot s starts on share
/// s (tasks `s * tasks / n ..`), so consecutive tasks run on one thread and a thread gets the
/// same share on every call; a thread done with its share takes the fullest share's last tasks.
/// Nested calls from inside a task run inline, in order.
pub fn parallel_for(tasks: usize, f: &(impl Fn(usize) + Sync)) {
    let n = num_threads().min(tasks).min(MAX_SHARES);
    if n <= 1 || in_pool_task() {
        return (0..tasks).for_each(f);
    }
    if tasks > u32::MAX as usize {
        // Past what a share's 32-bit bounds hold: claimed in order instead.
        return parallel_for_dynamic(tasks, f);
    }
    let shares: [AtomicU64; MAX_SHARES] = std::array::from_fn(|s| {
        if s < n { AtomicU64::new(pack(s * tasks / n, (s + 1) * tasks / n)) } else { AtomicU64::new(0) }
    });
    let shares = &shares[..n];
    parallel_for_dynamic(n, &|_| {
        let home = &shares[slot() % n];
        loop {
            if let Some(t) = take(home, false) {
                f(t);
                continue;
            }
            // The share with the most tasks left, from its back (its owner works from the front).
            let fullest = shares.iter().max_by_key(|s| {
                let (front, back) = unpack(s.load(Ordering::Acquire));
                back.saturating_sub(front)
            });
            match fullest.and_then(|s| take(s, true)) {
                Some(t) => f(t),
                None => return,
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn every_task_runs_once() {
        for tasks in [0, 1, 2, 3, 7, 26, 100] {
            let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            parallel_for(tasks, &|t| {
                hits[t].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "{tasks} tasks");
        }
    }

    #[test]
    fn a_share_is_taken_from_the_front_by_its_owner_and_from_the_back_by_others() {
        let share = AtomicU64::new(pack(2, 6));
        assert_eq!(take(&share, false), Some(2));
        assert_eq!(take(&share, true), Some(5));
        assert_eq!(take(&share, false), Some(3));
        assert_eq!(take(&share, true), Some(4));
        assert_eq!((take(&share, false), take(&share, true)), (None, None));
    }

    #[test]
    fn a_slow_threads_share_is_taken_by_the_others() {
        // The thread that starts share 0 blocks in its first task until another thread has run
        // one of share 0's later tasks (or 5 s pass): the others must take them from its back.
        // Only when no other thread joined the job at all is there nothing to check.
        let ran_on: Vec<AtomicUsize> = (0..40).map(|_| AtomicUsize::new(usize::MAX)).collect();
        let share0 = 40 / num_threads().min(40);
        parallel_for(40, &|t| {
            if t == 0 && num_threads() > 1 {
                let start = std::time::Instant::now();
                let stolen =
                    || ran_on[1..share0].iter().any(|s| ![usize::MAX, slot()].contains(&s.load(Ordering::Acquire)));
                while !stolen() && start.elapsed() < std::time::Duration::from_secs(5) {
                    std::thread::yield_now();
                }
            }
            ran_on[t].store(slot(), Ordering::Release);
        });
        let slots: Vec<usize> = ran_on.iter().map(|s| s.load(Ordering::Relaxed)).collect();
        assert!(slots.iter().all(|&s| s != usize::MAX));
        let others_ran = slots.iter().any(|&s| s != slots[0]);
        assert!(!others_ran || slots[1..share0].iter().any(|&s| s != slots[0]), "{slots:?}");
    }
}
