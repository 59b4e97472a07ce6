//! A cache-line ping-pong between two threads: ~55-75 ns per one-way hop when the host places
//! the two vCPUs close, ~320-380 ns when far (2-thread results then get 20-50% worse).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Nanoseconds per one-way hop, median of a few short bursts.
pub fn pingpong_ns() -> f64 {
    let flag = Arc::new(AtomicU64::new(0));
    let rounds = 20_000u64;
    let f2 = flag.clone();
    let other = std::thread::spawn(move || {
        for i in 0..rounds {
            while f2.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            f2.store(2 * i + 2, Ordering::Release);
        }
    });
    let t = Instant::now();
    for i in 0..rounds {
        flag.store(2 * i + 1, Ordering::Release);
        while flag.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
    }
    let ns = t.elapsed().as_secs_f64() * 1e9 / (2 * rounds) as f64;
    let _ = other.join();
    ns
}

/// The 1-minute load average, from /proc/loadavg (NaN when unreadable).
pub fn load_avg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

pub use rlx_cpu::peak::fma_peak_gflops;
