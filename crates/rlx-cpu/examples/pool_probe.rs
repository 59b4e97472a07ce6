//! Where the pool's tasks run after the process has been idle: sleeps, then runs back-to-back
//! jobs of busy-work tasks and prints, per job, how many tasks each thread took and on which CPU.
//!
//! `cargo run --release -p rlx-cpu --example pool_probe -- [IDLE_MS] [JOBS] [TASK_US] [ROUNDS]
//! [MOVE]`; with MOVE = 1 the caller moves itself onto the CPU the worker last ran on before each
//! round (as a scheduler may move it while other processes run), then frees its mask again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn cpu() -> usize {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_getcpu takes no arguments and only reads the calling thread's state.
        let c = unsafe { libc::sched_getcpu() };
        if c >= 0 {
            return c as usize;
        }
    }
    usize::MAX
}

/// Moves this thread onto `cpu`, then lets it run anywhere again (it stays until the scheduler
/// moves it).
fn move_onto(cpu: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: plain cpu_set_t values of the size passed; `cpu` is below CPU_SETSIZE.
    unsafe {
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        let mut all: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut all);
        libc::CPU_SET(cpu, &mut one);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &all);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cpu;
}

fn spin_for(us: u64) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_micros(us) {
        std::hint::spin_loop();
    }
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let arg = |i: usize, default: u64| args.get(i).copied().unwrap_or(default);
    let (idle_ms, jobs, task_us, rounds, move_caller) = (arg(0, 200), arg(1, 12), arg(2, 50), arg(3, 3), arg(4, 0));
    let threads = rlx_cpu::threads::num_threads();
    rlx_cpu::threads::start();
    const SLOTS: usize = 8;
    let taken: Vec<AtomicUsize> = (0..SLOTS).map(|_| AtomicUsize::new(0)).collect();
    let cpus: Vec<AtomicUsize> = (0..SLOTS).map(|_| AtomicUsize::new(usize::MAX)).collect();
    println!("{threads} threads; idle {idle_ms} ms, then {jobs} jobs of 8 tasks x {task_us} us");
    for round in 0..rounds {
        std::thread::sleep(Duration::from_millis(idle_ms));
        let worker_cpu = cpus[1].load(Ordering::Relaxed);
        if move_caller == 1 && worker_cpu != usize::MAX {
            move_onto(worker_cpu);
        }
        for job in 0..jobs {
            taken.iter().for_each(|t| t.store(0, Ordering::Relaxed));
            let start = Instant::now();
            rlx_cpu::threads::parallel_for(8, &|_| {
                let s = rlx_cpu::threads::slot().min(SLOTS - 1);
                taken[s].fetch_add(1, Ordering::Relaxed);
                cpus[s].store(cpu(), Ordering::Relaxed);
                spin_for(task_us);
            });
            let us = start.elapsed().as_micros();
            let split: Vec<String> = (0..threads.min(SLOTS))
                .map(|s| {
                    format!(
                        "slot {s}: {} on cpu {}",
                        taken[s].load(Ordering::Relaxed),
                        cpus[s].load(Ordering::Relaxed) as isize
                    )
                })
                .collect();
            println!("round {round} job {job:2}: {us:5} us  {}", split.join(", "));
        }
    }
}
