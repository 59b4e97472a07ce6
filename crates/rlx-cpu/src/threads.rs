//! The CPU thread pool: one per process, shared by every compiled graph, so several graphs never
//! oversubscribe the cores. Its size respects the affinity mask and `RLX_NUM_THREADS`; each
//! worker is pinned to its own CPU of the mask, away from the caller's (`pin`,
//! `RLX_PIN_THREADS=0` turns it off).
//!
//! `parallel_for_dynamic` hands one job at a time to the workers through a mutex and condvars;
//! it allocates nothing per call, and concurrent callers take turns. `parallel_for` runs on it,
//! each thread starting on its own contiguous share of the tasks (`shares`). Workers and the caller spin
//! briefly (`Spin`: 50 us, growing to 2 ms while jobs keep arriving soon after a park) before
//! parking, so back-to-back jobs (one per kernel) skip the futex wake-up.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

mod pin;
mod shares;

pub use shares::parallel_for;

thread_local! {
    /// This thread's cap on the threads of its parallel loops (`with_thread_cap`).
    static CAP: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Threads the kernels on this thread split their work for and run on: the pool's, or fewer
/// inside `with_thread_cap`.
pub fn num_threads() -> usize {
    pool_threads().min(CAP.with(Cell::get))
}

/// Runs `f` with at most `cap` threads (the caller included) taking part in each parallel loop
/// it starts, and `num_threads()` saying so to the kernels it builds: how a graph compiled with
/// `CompileOptions::threads` leaves the rest of the pool to others. None runs `f` as it is.
pub fn with_thread_cap<R>(cap: Option<usize>, f: impl FnOnce() -> R) -> R {
    let Some(cap) = cap else { return f() };
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            CAP.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CAP.with(|c| c.replace(cap.max(1))));
    f()
}

/// Threads the pool has (with the caller): `RLX_NUM_THREADS` if set to a positive number, else
/// the CPUs this process may run on (the affinity mask and cgroup quota, via
/// `available_parallelism`). Read once per process (reading the configuration allocates).
pub fn pool_threads() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        rlx_driver::config().cpu.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    })
}

type Task = dyn Fn(usize) + Sync;

/// How long a worker polls for the next job, and the caller for the last task, before parking:
/// `RLX_SPIN_US` microseconds (0 parks at once, the better choice on a machine that runs more
/// threads than it has cores). Unset, workers start at `SPIN_BASE_US` and adapt (`Spin`).
fn spin_limit() -> std::time::Duration {
    std::time::Duration::from_micros(spin_setting().unwrap_or(SPIN_BASE_US))
}

/// `RLX_SPIN_US` when set (read once).
fn spin_setting() -> Option<u64> {
    static US: OnceLock<Option<u64>> = OnceLock::new();
    *US.get_or_init(|| rlx_driver::config().cpu.spin_us)
}

/// A worker's spin before parking, in microseconds, unless `RLX_SPIN_US` fixes it.
const SPIN_BASE_US: u64 = 50;
/// The longest a worker's spin grows to.
const SPIN_MAX_US: u64 = 2000;

/// A worker's spin budget: doubled (up to `SPIN_MAX_US`) each time the next job came within that
/// long of the worker parking, so that it would have been caught by spinning; halved (down to
/// `SPIN_BASE_US`) after a sleep ten times as long (the process idles). Decode leaves gaps on the
/// caller between some jobs that outlast a short fixed spin, and each park is paid by a futex
/// wake-up (session 18 in docs/benchmarks-history.md).
struct Spin {
    us: u64,
    adapts: bool,
}

impl Spin {
    fn new() -> Self {
        match spin_setting() {
            Some(us) => Spin { us, adapts: false },
            None => Spin { us: SPIN_BASE_US, adapts: true },
        }
    }

    /// After a park that lasted `slept`.
    fn parked_for(&mut self, slept: std::time::Duration) {
        if self.adapts {
            let slept = slept.as_micros();
            if slept < SPIN_MAX_US as u128 {
                self.us = (self.us * 2).min(SPIN_MAX_US);
            } else if slept > 10 * SPIN_MAX_US as u128 {
                self.us = (self.us / 2).max(SPIN_BASE_US);
            }
        }
    }
}

/// Polls `ready` for up to `spin_limit()`; returns whether it became true.
fn spin_until(ready: impl Fn() -> bool) -> bool {
    spin_until_for(spin_limit(), ready)
}

/// Polls `ready` for up to `limit`; returns whether it became true.
fn spin_until_for(limit: std::time::Duration, ready: impl Fn() -> bool) -> bool {
    if limit.is_zero() {
        return ready();
    }
    let start = std::time::Instant::now();
    loop {
        for _ in 0..32 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= limit {
            return ready();
        }
    }
}

struct Job {
    /// The task body; valid while the caller waits in `parallel_for`.
    f: *const Task,
    tasks: usize,
    generation: u64,
}

// SAFETY: the pointer is only dereferenced while the owning caller blocks on completion.
unsafe impl Send for Job {}

struct Pool {
    job: Mutex<Option<Job>>,
    wake: Condvar,
    /// The job's generation (high 32 bits) and the next unclaimed task (low 32 bits): a worker
    /// still finishing an older job can never claim a task of the current one.
    next: AtomicU64,
    /// The generation of the latest job posted (polled by spinning workers).
    posted: AtomicU64,
    done: AtomicUsize,
    finished: Mutex<u64>,
    finished_cv: Condvar,
    turn: Mutex<u64>,
    panicked: AtomicUsize,
    /// Workers spawned (fewer than asked where the OS refused a thread).
    workers: AtomicUsize,
    /// The workers' CPUs, where they are pinned.
    pins: Option<pin::Pins>,
}

static POOL: OnceLock<&'static Pool> = OnceLock::new();

thread_local! {
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
    static SLOT: Cell<usize> = const { Cell::new(0) };
}

/// Whether this thread is running a pool task now (nested `parallel_for` calls run inline).
pub fn in_pool_task() -> bool {
    IN_POOL.with(Cell::get)
}

/// This thread's index in the pool: 1.. for workers, 0 for any other thread. Kernels use it to
/// pick per-thread scratch (callers outside the pool share slot 0 and must lock it).
pub fn slot() -> usize {
    SLOT.with(Cell::get)
}

fn pool() -> &'static Pool {
    POOL.get_or_init(|| {
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            job: Mutex::new(None),
            wake: Condvar::new(),
            next: AtomicU64::new(0),
            posted: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            finished: Mutex::new(0),
            finished_cv: Condvar::new(),
            turn: Mutex::new(0),
            panicked: AtomicUsize::new(0),
            workers: AtomicUsize::new(0),
            pins: pin::Pins::new(pool_threads() - 1),
        }));
        for i in 1..pool_threads() {
            let spawned = std::thread::Builder::new().name(format!("rlx-cpu-{i}")).spawn(move || {
                SLOT.with(|c| c.set(i));
                if let Some(pins) = &pool.pins {
                    pins.start(i - 1);
                }
                worker(pool)
            });
            if spawned.is_err() {
                break;
            }
            pool.workers.fetch_add(1, Ordering::Release);
        }
        pool
    })
}

/// Claims and runs tasks of the current job until none are left.
fn run_tasks(p: &Pool, f: *const Task, tasks: usize, generation: u64) {
    let tag = (generation & 0xffff_ffff) << 32;
    loop {
        let v = p.next.load(Ordering::Acquire);
        let t = (v & 0xffff_ffff) as usize;
        if v & !0xffff_ffff != tag || t >= tasks {
            return;
        }
        if p.next.compare_exchange_weak(v, v + 1, Ordering::AcqRel, Ordering::Acquire).is_err() {
            continue;
        }
        // SAFETY: the caller of `parallel_for` keeps `f` alive until every task is done.
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { (*f)(t) })).is_ok();
        if !ok {
            p.panicked.fetch_add(1, Ordering::AcqRel);
        }
        if p.done.fetch_add(1, Ordering::AcqRel) + 1 == tasks {
            let mut fin = p.finished.lock().unwrap_or_else(|e| e.into_inner());
            *fin = generation;
            p.finished_cv.notify_all();
        }
    }
}

fn worker(p: &'static Pool) {
    IN_POOL.with(|c| c.set(true));
    let (mut seen, mut spin) = (0u64, Spin::new());
    loop {
        spin_until_for(std::time::Duration::from_micros(spin.us), || p.posted.load(Ordering::Acquire) != seen);
        let (f, tasks, generation) = {
            let mut job = p.job.lock().unwrap_or_else(|e| e.into_inner());
            let mut parked = None;
            let found = loop {
                match &*job {
                    Some(j) if j.generation != seen => break (j.f, j.tasks, j.generation),
                    _ => {
                        parked.get_or_insert_with(std::time::Instant::now);
                        job = p.wake.wait(job).unwrap_or_else(|e| e.into_inner());
                    }
                }
            };
            if let Some(t) = parked {
                spin.parked_for(t.elapsed());
            }
            found
        };
        seen = generation;
        run_tasks(p, f, tasks, generation);
    }
}

/// Starts the pool and lets every worker run once, so that later calls allocate nothing (a new
/// thread allocates while it starts). Called when the CPU backend is created.
pub fn start() {
    spin_limit();
    // Inside a pool task the tasks below would run inline, each waiting for the others.
    if pool_threads() > 1 && !in_pool_task() {
        let n = pool().workers.load(Ordering::Acquire) + 1;
        let seen: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        // Each task waits for the others, so that every worker takes one. On a loaded machine a
        // new thread may first run long after its spawn: wait up to START_WAIT (it was 50 ms),
        // yielding the CPU to it after the first millisecond.
        post(n, &|t| {
            seen[t].store(1, Ordering::Release);
            let start = std::time::Instant::now();
            while seen.iter().any(|s| s.load(Ordering::Acquire) == 0) && start.elapsed() < START_WAIT {
                if start.elapsed().as_micros() < 1000 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        });
    }
}

/// The longest `start` waits for every worker to take a task.
const START_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs `f(task)` for every task in `0..tasks` on the shared pool and the calling thread, tasks
/// claimed in order by whichever thread is free: for task lists whose sizes shrink toward the
/// end (`parallel_for` keeps each thread on its own share instead). Nested calls from inside a
/// task run inline.
pub fn parallel_for_dynamic(tasks: usize, f: &(impl Fn(usize) + Sync)) {
    let cap = num_threads();
    if tasks <= 1 || cap == 1 || IN_POOL.with(Cell::get) {
        (0..tasks).for_each(f);
        return;
    }
    if tasks > cap && cap < pool_threads() {
        // Under a cap: `cap` lanes, each claiming tasks in order, so no more threads take part.
        let next = AtomicUsize::new(0);
        return post(cap, &|_| {
            loop {
                let t = next.fetch_add(1, Ordering::Relaxed);
                if t >= tasks {
                    return;
                }
                f(t);
            }
        });
    }
    post(tasks, f)
}

/// Posts `tasks` as one job of the pool and takes part in it until every task is done.
fn post(tasks: usize, f: &(impl Fn(usize) + Sync)) {
    let p = pool();
    // One job at a time: concurrent callers wait for their turn.
    let mut turn = p.turn.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pins) = &p.pins {
        pins.follow_caller();
    }
    *turn += 1;
    let generation = *turn;
    let task: &(dyn Fn(usize) + Sync + '_) = f;
    // SAFETY: only the lifetime is erased; we block below until every task has finished.
    let ptr: *const Task = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync + '_), &'static Task>(task) };
    p.done.store(0, Ordering::Release);
    p.next.store((generation & 0xffff_ffff) << 32, Ordering::Release);
    p.panicked.store(0, Ordering::Release);
    {
        let mut job = p.job.lock().unwrap_or_else(|e| e.into_inner());
        *job = Some(Job { f: ptr, tasks, generation });
        p.posted.store(generation, Ordering::Release);
        p.wake.notify_all();
    }
    IN_POOL.with(|c| c.set(true));
    run_tasks(p, ptr, tasks, generation);
    IN_POOL.with(|c| c.set(false));
    if !spin_until(|| p.done.load(Ordering::Acquire) == tasks) {
        let mut fin = p.finished.lock().unwrap_or_else(|e| e.into_inner());
        while *fin != generation {
            fin = p.finished_cv.wait(fin).unwrap_or_else(|e| e.into_inner());
        }
    }
    drop(turn);
    assert_eq!(p.panicked.load(Ordering::Acquire), 0, "a parallel CPU task panicked");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spin_grows_while_jobs_come_soon_after_a_park_and_shrinks_when_idle() {
        use std::time::Duration;
        let mut s = Spin { us: SPIN_BASE_US, adapts: true };
        s.parked_for(Duration::from_micros(30));
        assert_eq!(s.us, 2 * SPIN_BASE_US);
        (0..10).for_each(|_| s.parked_for(Duration::from_micros(300)));
        assert_eq!(s.us, SPIN_MAX_US);
        // A sleep between the limit and ten times it leaves the spin as it is; longer halves it.
        s.parked_for(Duration::from_micros(5 * SPIN_MAX_US));
        assert_eq!(s.us, SPIN_MAX_US);
        (0..10).for_each(|_| s.parked_for(Duration::from_secs(1)));
        assert_eq!(s.us, SPIN_BASE_US);
        // `RLX_SPIN_US` fixes it.
        let mut fixed = Spin { us: 0, adapts: false };
        fixed.parked_for(Duration::from_micros(1));
        assert_eq!(fixed.us, 0);
    }

    #[test]
    fn a_thread_cap_limits_the_threads_of_a_loop() {
        start();
        let ids = Mutex::new(std::collections::HashSet::new());
        let record = |_| {
            ids.lock().unwrap().insert(std::thread::current().id());
            std::thread::sleep(std::time::Duration::from_micros(200));
        };
        with_thread_cap(Some(1), || {
            assert_eq!(num_threads(), 1);
            parallel_for_dynamic(64, &record);
            parallel_for(64, &record);
        });
        assert_eq!(ids.lock().unwrap().len(), 1, "one thread under a cap of 1");
        assert_eq!(num_threads(), pool_threads(), "the cap ends with its scope");
        if pool_threads() >= 3 {
            ids.lock().unwrap().clear();
            with_thread_cap(Some(2), || parallel_for_dynamic(256, &record));
            assert!(ids.lock().unwrap().len() <= 2);
        }
    }

    #[test]
    fn every_task_runs_once_even_from_several_callers() {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for round in 0..50 {
                        let hits: Vec<AtomicUsize> = (0..7).map(|_| AtomicUsize::new(0)).collect();
                        parallel_for(7, &|t| {
                            hits[t].fetch_add(round + 1, Ordering::Relaxed);
                        });
                        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == round + 1));
                    }
                })
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
    }

    #[test]
    fn concurrent_starts_and_back_to_back_jobs_do_not_hang() {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                std::thread::spawn(move || {
                    start();
                    for round in 0..2000 {
                        let sum = AtomicUsize::new(0);
                        parallel_for(2 + (round + i) % 3, &|t| {
                            sum.fetch_add(t + 1, Ordering::Relaxed);
                        });
                        let n = 2 + (round + i) % 3;
                        assert_eq!(sum.load(Ordering::Relaxed), n * (n + 1) / 2);
                    }
                })
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
    }
}
