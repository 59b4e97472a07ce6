//! The f32 FMA peak of the threads a product runs on, measured now: the clocks of a shared host
//! move by 10% or more, so "% of peak" needs the peak from the same run (`rlx-bench matmul`,
//! the `tile_probe` and `kernel_ceiling` examples).

#[cfg(target_arch = "x86_64")]
use std::time::Instant;

/// Timed bursts per thread in `fma_peak_gflops`.
#[cfg(target_arch = "x86_64")]
const BURSTS: usize = 4;

/// The f32 FMA peak of `threads` threads in GFLOP/s, measured now (turbo clocks move it on a
/// shared host, so "% of peak" needs it in the same run): each thread runs
/// independent register-only FMAs (AVX-512 where the CPU has it, else AVX2) in `BURSTS` bursts
/// of about 2 ms, all threads at once; the peak sums each thread's fastest burst (another
/// tenant's work can only slow a burst, so the fastest is the best estimate of the peak).
/// NaN off x86-64 or without FMA.
pub fn fma_peak_gflops(threads: usize) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        let wide = is_x86_feature_detected!("avx512f");
        let fma = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
        if !wide && !fma {
            return f64::NAN;
        }
        // FMAs per loop pass, lanes per FMA.
        let (per_pass, lanes) = (12.0, if wide { 16.0 } else { 8.0 });
        let passes = 1_000_000u64;
        let flops = passes as f64 * per_pass * lanes * 2.0;
        std::thread::scope(|s| {
            let runs: Vec<_> = (0..threads.max(1))
                .map(|_| {
                    s.spawn(move || {
                        let burst = || {
                            let t = Instant::now();
                            // SAFETY: the CPU has the features checked above.
                            unsafe { if wide { fma_loop_512(passes) } else { fma_loop_256(passes) } };
                            t.elapsed().as_secs_f64()
                        };
                        (0..BURSTS).map(|_| burst()).fold(f64::INFINITY, f64::min)
                    })
                })
                .collect();
            runs.into_iter().map(|r| flops / r.join().unwrap_or(f64::INFINITY) / 1e9).sum()
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = threads;
        f64::NAN
    }
}

/// `passes` x 12 independent zmm FMAs (12 chains: enough to cover the latency of two units).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_loop_512(passes: u64) {
    // SAFETY: register-only arithmetic on clobbered registers.
    unsafe {
        std::arch::asm!(
            "vxorps zmm0, zmm0, zmm0",
            "2:",
            "vfmadd231ps zmm1, zmm0, zmm0", "vfmadd231ps zmm2, zmm0, zmm0", "vfmadd231ps zmm3, zmm0, zmm0",
            "vfmadd231ps zmm4, zmm0, zmm0", "vfmadd231ps zmm5, zmm0, zmm0", "vfmadd231ps zmm6, zmm0, zmm0",
            "vfmadd231ps zmm7, zmm0, zmm0", "vfmadd231ps zmm8, zmm0, zmm0", "vfmadd231ps zmm9, zmm0, zmm0",
            "vfmadd231ps zmm10, zmm0, zmm0", "vfmadd231ps zmm11, zmm0, zmm0", "vfmadd231ps zmm12, zmm0, zmm0",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) passes => _,
            out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _, out("zmm4") _, out("zmm5") _,
            out("zmm6") _, out("zmm7") _, out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
            out("zmm12") _,
            options(nostack, nomem),
        );
    }
}

/// `fma_loop_512` on ymm registers (AVX2 + FMA).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_loop_256(passes: u64) {
    // SAFETY: register-only arithmetic on clobbered registers.
    unsafe {
        std::arch::asm!(
            "vxorps ymm0, ymm0, ymm0",
            "2:",
            "vfmadd231ps ymm1, ymm0, ymm0", "vfmadd231ps ymm2, ymm0, ymm0", "vfmadd231ps ymm3, ymm0, ymm0",
            "vfmadd231ps ymm4, ymm0, ymm0", "vfmadd231ps ymm5, ymm0, ymm0", "vfmadd231ps ymm6, ymm0, ymm0",
            "vfmadd231ps ymm7, ymm0, ymm0", "vfmadd231ps ymm8, ymm0, ymm0", "vfmadd231ps ymm9, ymm0, ymm0",
            "vfmadd231ps ymm10, ymm0, ymm0", "vfmadd231ps ymm11, ymm0, ymm0", "vfmadd231ps ymm12, ymm0, ymm0",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) passes => _,
            out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _, out("ymm4") _, out("ymm5") _,
            out("ymm6") _, out("ymm7") _, out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _,
            out("ymm12") _,
            options(nostack, nomem),
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_peak_is_positive_where_measured_and_nan_elsewhere() {
        let p = super::fma_peak_gflops(1);
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            assert!(p.is_finite() && p > 0.0, "{p}");
            return;
        }
        assert!(p.is_nan(), "{p}");
    }
}
