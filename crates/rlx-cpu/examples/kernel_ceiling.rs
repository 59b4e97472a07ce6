//! The ceiling of the f32 GEMM's k loop on this core, against register-only FMAs timed in the
//! same round: the 12 x 32 step (2 B vectors, 12 A broadcasts, 24 FMAs) on data that never
//! leaves L1, the same step with the broadcasts replaced by integer loads that feed nothing, with
//! the A loads left out (B only), and with 12 seven-byte NOPs in their place. If the broadcast and
//! integer-load rows sit at the same fraction, the loss is the load count, not the data or the
//! memory hierarchy; NOPs tell the front end apart. x86-64 with AVX-512 only.
//!
//! `cargo run --release -p rlx-cpu --example kernel_ceiling -- [rounds]`

#[cfg(target_arch = "x86_64")]
fn main() {
    ceiling::main()
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("kernel_ceiling measures x86-64 AVX-512 loops");
}

#[cfg(target_arch = "x86_64")]
mod ceiling {
    use rlx_cpu::peak::fma_peak_gflops;
    use std::arch::asm;
    use std::time::Instant;

    /// One 12 x 32 k step: B's two vectors at `{b}`, then for each of the 12 rows an A load of
    /// kind `$kind` and the row's two FMAs.
    macro_rules! step {
        ($kind:ident, $s:literal) => {
            concat!(
                "vmovups zmm0, [{b} + 128 * ", $s, "]\n",
                "vmovups zmm1, [{b} + 128 * ", $s, " + 64]\n",
                step!(@row $kind, concat!("48 * ", $s, " + 0"), 2, 8, 9),
                step!(@row $kind, concat!("48 * ", $s, " + 4"), 3, 10, 11),
                step!(@row $kind, concat!("48 * ", $s, " + 8"), 4, 12, 13),
                step!(@row $kind, concat!("48 * ", $s, " + 12"), 5, 14, 15),
                step!(@row $kind, concat!("48 * ", $s, " + 16"), 6, 16, 17),
                step!(@row $kind, concat!("48 * ", $s, " + 20"), 7, 18, 19),
                step!(@row $kind, concat!("48 * ", $s, " + 24"), 2, 20, 21),
                step!(@row $kind, concat!("48 * ", $s, " + 28"), 3, 22, 23),
                step!(@row $kind, concat!("48 * ", $s, " + 32"), 4, 24, 25),
                step!(@row $kind, concat!("48 * ", $s, " + 36"), 5, 26, 27),
                step!(@row $kind, concat!("48 * ", $s, " + 40"), 6, 28, 29),
                step!(@row $kind, concat!("48 * ", $s, " + 44"), 7, 30, 31),
            )
        };
        (@row $kind:ident, $off:expr, $r:literal, $c0:literal, $c1:literal) => {
            concat!(
                step!(@load $kind, $off, $r),
                "vfmadd231ps zmm", $c0, ", zmm", $r, ", zmm0\n",
                "vfmadd231ps zmm", $c1, ", zmm", $r, ", zmm1\n",
            )
        };
        (@load broadcast, $off:expr, $r:literal) => { concat!("vbroadcastss zmm", $r, ", dword ptr [{a} + ", $off, "]\n") };
        (@load int, $off:expr, $r:literal) => { concat!("mov r8d, dword ptr [{a} + ", $off, "]\n") };
        (@load none, $off:expr, $r:literal) => { "" };
        (@load nop, $off:expr, $r:literal) => { ".byte 0x0f, 0x1f, 0x80, 0, 0, 0, 0\n" };
    }

    /// A loop of `passes` x 4 steps of kind `$kind`; clobbers r8 and every zmm register.
    macro_rules! step_loop {
        ($name:ident, $kind:ident) => {
            #[target_feature(enable = "avx512f")]
            unsafe fn $name(passes: u64, a: *const f32, b: *const f32) {
                // SAFETY: `a` and `b` point at 192 and 512 readable bytes; r8 and zmm are clobbered.
                unsafe {
                    asm!(
                        "/* {a} */",
                        "2:", step!($kind, "0"), step!($kind, "1"), step!($kind, "2"), step!($kind, "3"), "dec {n}", "jnz 2b",
                        n = inout(reg) passes => _, a = in(reg) a, b = in(reg) b, out("r8") _,
                        out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _, out("zmm4") _,
                        out("zmm5") _, out("zmm6") _, out("zmm7") _, out("zmm8") _, out("zmm9") _,
                        out("zmm10") _, out("zmm11") _, out("zmm12") _, out("zmm13") _, out("zmm14") _,
                        out("zmm15") _, out("zmm16") _, out("zmm17") _, out("zmm18") _, out("zmm19") _,
                        out("zmm20") _, out("zmm21") _, out("zmm22") _, out("zmm23") _, out("zmm24") _,
                        out("zmm25") _, out("zmm26") _, out("zmm27") _, out("zmm28") _, out("zmm29") _,
                        out("zmm30") _, out("zmm31") _,
                        options(nostack, readonly),
                    )
                }
            }
        };
    }

    step_loop!(broadcasts, broadcast);
    step_loop!(int_loads, int);
    step_loop!(b_only, none);
    step_loop!(nops, nop);

    /// A timed loop: passes, A, B.
    type StepLoop = unsafe fn(u64, *const f32, *const f32);

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    pub fn main() {
        assert!(is_x86_feature_detected!("avx512f"), "kernel_ceiling needs AVX-512F");
        let rounds = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(9);
        let data: Vec<f32> = (0..256).map(|i| 0.5 + i as f32 * 0.01).collect();
        let loops: [(&str, StepLoop); 4] =
            [("broadcasts", broadcasts), ("int loads", int_loads), ("B only", b_only), ("NOPs", nops)];
        let passes = 5_000_000u64;
        let mut rows = Vec::new();
        for _ in 0..rounds {
            let peak = fma_peak_gflops(1);
            let row: Vec<f64> = loops
                .iter()
                .map(|(_, f)| {
                    let t = Instant::now();
                    // SAFETY: the loops read 192 bytes from `a` and 512 from `b`, inside `data`.
                    unsafe { f(passes, data.as_ptr(), data.as_ptr().add(64)) };
                    let flops = passes as f64 * 4.0 * 24.0 * 32.0;
                    flops / t.elapsed().as_secs_f64() / 1e9 / peak
                })
                .collect();
            let cells: Vec<String> =
                loops.iter().zip(&row).map(|((n, _), v)| format!("{n} {:.1}%", 100.0 * v)).collect();
            println!("peak {peak:6.1}  {}", cells.join("  "));
            rows.push(row);
        }
        let cells: Vec<String> = (0..loops.len())
            .map(|i| format!("{} {:.1}%", loops[i].0, 100.0 * median(rows.iter().map(|r| r[i]).collect())))
            .collect();
        println!("median of {rounds}: {}", cells.join("  "));
    }
}
