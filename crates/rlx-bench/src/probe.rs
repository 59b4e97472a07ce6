//! A cache-line ping-pong between two threads: ~55-75 ns per one-way hop when the host places
//! the two vCPUs close, ~320-380 ns when far (2-thread results then get 20-50% worse).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Nanoseconds per one-way hop, median of a few short bursts; NaN when this process may run on
/// one CPU only (two spinning threads on one CPU hand over once per scheduler tick).
pub fn pingpong_ns() -> f64 {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return f64::NAN;
    }
    let flag = Arc::new(AtomicU64::new(0));
    let rounds = 20_000u64;
    let f2 = flag.clone();
    let other = std::thread::spawn(move || {
        for i in 0..rounds {
            wait_for(&f2, 2 * i + 1);
            f2.store(2 * i + 2, Ordering::Release);
        }
    });
    let t = Instant::now();
    for i in 0..rounds {
        flag.store(2 * i + 1, Ordering::Release);
        wait_for(&flag, 2 * i + 2);
    }
    let ns = t.elapsed().as_secs_f64() * 1e9 / (2 * rounds) as f64;
    let _ = other.join();
    ns
}

/// Spins until `flag` holds `value`, yielding the CPU after every 4096 spins (so a partner
/// descheduled on the same CPU gets to run).
fn wait_for(flag: &AtomicU64, value: u64) {
    let mut spins = 0u32;
    while flag.load(Ordering::Acquire) != value {
        spins += 1;
        if spins.is_multiple_of(4096) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The 1-minute load average, from /proc/loadavg (NaN when unreadable).
pub fn load_avg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

pub use rlx_cpu::peak::fma_peak_gflops;
