//! Pinning the pool's workers to CPUs of the affinity mask, one each, away from the caller.
//!
//! Unpinned, Linux on KVM often queued a worker woken after idle behind the caller on the
//! caller's CPU (an idle vCPU reads as preempted), and the job ran on one core until the next
//! time slice (`examples/pool_probe.rs` shows it). Pinned, a caller that moves onto a worker's CPU
//! (after other processes ran, say) would share it with that worker for as long as neither looks
//! overloaded, so `follow_caller` moves the worker off the caller's CPU before each job.
//! `RLX_PIN_THREADS=0` turns pinning off.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// The pinned workers and the mask they were pinned within.
pub(super) struct Pins {
    mask: Vec<usize>,
    workers: Vec<Pinned>,
}

/// One worker: its thread id (0 until it has started) and the CPU it is pinned to.
struct Pinned {
    tid: AtomicI32,
    cpu: AtomicUsize,
}

impl Pins {
    /// Pins for `workers` workers, or None where pinning is off (`RLX_PIN_THREADS=0`), the
    /// mask has fewer CPUs than threads (workers plus the caller), or the platform has no
    /// affinity calls.
    pub(super) fn new(workers: usize) -> Option<Pins> {
        let (mask, cpus) = worker_cpus(workers)?;
        let workers = cpus.into_iter().map(|c| Pinned { tid: AtomicI32::new(0), cpu: AtomicUsize::new(c) }).collect();
        Some(Pins { mask, workers })
    }

    /// Called on worker `i` (0-based) as it starts: records its thread id and pins it.
    pub(super) fn start(&self, i: usize) {
        let Some(w) = self.workers.get(i) else { return };
        let tid = current_tid();
        if set_affinity(tid, w.cpu.load(Ordering::Acquire)) {
            w.tid.store(tid, Ordering::Release);
        }
    }

    /// Moves the worker pinned to the caller's CPU, if any, to a CPU of the mask that neither
    /// the caller nor another worker holds. Callers hold the pool's turn lock.
    pub(super) fn follow_caller(&self) {
        let Some(here) = current_cpu() else { return };
        let Some(w) = self.workers.iter().find(|w| w.cpu.load(Ordering::Acquire) == here) else { return };
        let tid = w.tid.load(Ordering::Acquire);
        let held = |c: usize| c == here || self.workers.iter().any(|o| o.cpu.load(Ordering::Acquire) == c);
        if let Some(&free) = self.mask.iter().find(|&&c| !held(c))
            && tid != 0
            && set_affinity(tid, free)
        {
            w.cpu.store(free, Ordering::Release);
        }
    }
}

/// The affinity mask and the CPUs to pin `workers` workers to: those of the mask other than
/// the one the calling thread runs on. None as for `Pins::new`.
fn worker_cpus(workers: usize) -> Option<(Vec<usize>, Vec<usize>)> {
    if workers == 0 || !rlx_driver::config().cpu.pin_threads {
        return None;
    }
    let mask = affinity()?;
    if mask.len() < workers + 1 {
        return None;
    }
    let here = current_cpu();
    let mut cpus: Vec<usize> = mask.iter().copied().filter(|&c| Some(c) != here).collect();
    cpus.truncate(workers);
    (cpus.len() == workers).then_some((mask, cpus))
}

/// The CPUs of this thread's affinity mask.
#[cfg(target_os = "linux")]
fn affinity() -> Option<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return None;
    }
    // SAFETY: CPU_ISSET reads the set within CPU_SETSIZE.
    Some((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// The CPU this thread runs on now.
#[cfg(target_os = "linux")]
fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}

#[cfg(target_os = "linux")]
fn current_tid() -> i32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// Restricts thread `tid` to `cpu`; whether the kernel agreed.
#[cfg(target_os = "linux")]
fn set_affinity(tid: i32, cpu: usize) -> bool {
    // SAFETY: cpu_set_t is plain data.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` came from the affinity mask, below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn affinity() -> Option<Vec<usize>> {
    None
}

#[cfg(not(target_os = "linux"))]
fn current_cpu() -> Option<usize> {
    None
}

#[cfg(not(target_os = "linux"))]
fn current_tid() -> i32 {
    0
}

#[cfg(not(target_os = "linux"))]
fn set_affinity(_tid: i32, _cpu: usize) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_pin_to_distinct_cpus_of_the_mask_and_never_oversubscribe() {
        let Some(mask) = affinity() else { return };
        if let Some((m, cpus)) = worker_cpus(mask.len() - 1) {
            assert_eq!(m, mask);
            assert_eq!(cpus.len(), mask.len() - 1);
            assert!(cpus.iter().all(|c| mask.contains(c)), "{cpus:?} outside {mask:?}");
            let mut unique = cpus.clone();
            unique.dedup();
            assert_eq!(unique, cpus, "CPUs listed twice");
        }
        // As many workers as CPUs (plus the caller): left unpinned.
        assert!(worker_cpus(mask.len()).is_none());
        assert!(worker_cpus(0).is_none());
    }

    #[test]
    fn a_worker_on_the_callers_cpu_moves_to_a_free_one() {
        let Some(mask) = affinity() else { return };
        let (Some(here), true) = (current_cpu(), mask.len() >= 2) else { return };
        // A thread pinned to the caller's CPU, as a pool worker the caller moved onto.
        let pins =
            Pins { mask: mask.clone(), workers: vec![Pinned { tid: AtomicI32::new(0), cpu: AtomicUsize::new(here) }] };
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            tx.send(current_tid()).unwrap();
            stop_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        assert!(set_affinity(tid, here));
        pins.workers[0].tid.store(tid, Ordering::Release);
        // The caller may itself migrate between the reads: only check when it stayed put.
        pins.follow_caller();
        let moved = pins.workers[0].cpu.load(Ordering::Acquire);
        if current_cpu() == Some(here) {
            assert_ne!(moved, here, "the worker still shares the caller's CPU");
            assert!(mask.contains(&moved));
        }
        stop_tx.send(()).unwrap();
        worker.join().unwrap();
    }
}
