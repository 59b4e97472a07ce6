//! f32 GEMM GFLOP/s: RLX's packed GEMM against matrixmultiply, interleaved in one run.
//! `cargo run --release -p rlx-cpu --example gemm_bench -- 1024 [reps]`, or shapes
//! `-- 128x384x384 128x384x1536 [reps]` (m x k x n). `RLX_BENCH_PEER=0` skips matrixmultiply in the
//! shape runs (its threads then do not share the cores with RLX's); `RLX_BENCH_COLD=1` rotates
//! over copies of the packed B that spill the L3, so B streams from DRAM as a model's weights do.

use rlx_cpu::gemm::{BSrc, GemmElem, Kernel, MatMut, MatRef, gemm, gemm_src, pack_b_full, packed_b_len};
use std::time::Instant;

/// Seconds on a clock: wall time, or this thread's CPU time with `RLX_BENCH_CPU=1` (for
/// one-thread runs on a loaded machine: time spent descheduled does not count).
struct Clock(Instant, f64);

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

unsafe extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

fn thread_cpu() -> f64 {
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: CLOCK_THREAD_CPUTIME_ID (3) on Linux; ts is a valid out pointer.
    unsafe { clock_gettime(3, &mut ts) };
    ts.sec as f64 + ts.nsec as f64 * 1e-9
}

fn use_cpu() -> bool {
    std::env::var("RLX_BENCH_CPU").is_ok_and(|v| v == "1")
}

impl Clock {
    fn now() -> Self {
        Clock(Instant::now(), if use_cpu() { thread_cpu() } else { 0.0 })
    }
    fn elapsed(&self) -> std::time::Duration {
        if use_cpu() { std::time::Duration::from_secs_f64(thread_cpu() - self.1) } else { self.0.elapsed() }
    }
}

/// Whether shape runs read B from DRAM (`RLX_BENCH_COLD=1`).
fn cold() -> bool {
    std::env::var("RLX_BENCH_COLD").is_ok_and(|v| v == "1")
}

/// Whether shape runs interleave matrixmultiply (`RLX_BENCH_PEER=0`: no).
fn with_peer() -> bool {
    std::env::var("RLX_BENCH_PEER").map_or(true, |v| v != "0")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let shapes: Vec<Vec<usize>> =
        raw.iter().filter(|a| a.contains('x')).map(|a| a.split('x').filter_map(|d| d.parse().ok()).collect()).collect();
    let args: Vec<usize> = raw.iter().filter_map(|a| a.parse().ok()).collect();
    println!("threads: {}", rlx_cpu::threads::num_threads());
    if raw.first().map(String::as_str) == Some("kernels") {
        return kernels(args.first().copied().unwrap_or(256));
    }
    if raw.first().map(String::as_str) == Some("f64") {
        let reps = args.get(1).copied().unwrap_or(7);
        for &n in args.first().map_or(&[256, 512, 1024][..], std::slice::from_ref) {
            square_f64(n, reps);
        }
        return;
    }
    if !shapes.is_empty() {
        let reps = args.first().copied().unwrap_or(50);
        for s in shapes.iter().filter(|s| s.len() == 3) {
            shape(s[0], s[1], s[2], reps);
        }
        return;
    }
    let sizes = if args.is_empty() { vec![256, 512, 1024] } else { vec![args[0]] };
    let reps = args.get(1).copied().unwrap_or(7);
    println!("gemv 1x4096x4096 f32: {:.1} GB/s of B streamed", gemv_bandwidth(4096, 4096, reps));
    for n in sizes {
        let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 * 0.1).collect();
        let b: Vec<f32> = (0..n * n).map(|i| (i % 5) as f32 * 0.1).collect();
        let mut c = vec![0f32; n * n];
        let flops = 2.0 * (n as f64).powi(3);
        let (mut ours, mut mm) = (vec![], vec![]);
        for _ in 0..reps {
            let t = Clock::now();
            unsafe {
                gemm(
                    n,
                    n,
                    n,
                    MatRef { ptr: a.as_ptr(), rs: n as isize, cs: 1 },
                    MatRef { ptr: b.as_ptr(), rs: n as isize, cs: 1 },
                    MatMut { ptr: c.as_mut_ptr(), rs: n as isize },
                )
            };
            ours.push(flops / t.elapsed().as_secs_f64() / 1e9);
            let t = Clock::now();
            unsafe {
                matrixmultiply::sgemm(
                    n,
                    n,
                    n,
                    1.0,
                    a.as_ptr(),
                    n as isize,
                    1,
                    b.as_ptr(),
                    n as isize,
                    1,
                    0.0,
                    c.as_mut_ptr(),
                    n as isize,
                    1,
                )
            };
            mm.push(flops / t.elapsed().as_secs_f64() / 1e9);
        }
        let best = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
        let (bo, bm) = (best(&ours), best(&mm));
        let (o, m) = (median(ours), median(mm));
        println!(
            "{n:>5}^3  rlx {o:7.1} GFLOP/s  matrixmultiply {m:7.1} GFLOP/s  ratio {:.2}  (best {bo:.1} / {bm:.1})",
            o / m
        );
    }
}

/// Matrix-vector (decode) bandwidth: 1 x k times k x n, B streamed once.
fn gemv_bandwidth(k: usize, n: usize, reps: usize) -> f64 {
    let a = vec![0.5f32; k];
    let b = vec![0.25f32; k * n];
    let mut c = vec![0f32; n];
    let mut v = vec![];
    for _ in 0..reps {
        let t = Clock::now();
        unsafe {
            gemm(
                1,
                n,
                k,
                MatRef { ptr: a.as_ptr(), rs: k as isize, cs: 1 },
                MatRef { ptr: b.as_ptr(), rs: n as isize, cs: 1 },
                MatMut { ptr: c.as_mut_ptr(), rs: n as isize },
            )
        };
        v.push((k * n * 4) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    median(v)
}

/// One m x k x n shape (row-major operands, B packed ahead of time as a weight is):
/// RLX against matrixmultiply, microseconds and GFLOP/s.
fn shape(m: usize, k: usize, n: usize, reps: usize) {
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
    let mut c = vec![0f32; m * n];
    let bv = MatRef { ptr: b.as_ptr(), rs: n as isize, cs: 1 };
    // Enough packed copies of B to spill the L3 with `RLX_BENCH_COLD=1`, read in turn: each call
    // streams its B from DRAM, as a model's weights are.
    let copies = if cold() { (64usize << 20).div_ceil(k * n * 4).max(1) } else { 1 };
    let copies: Vec<Vec<f32>> = (0..copies)
        .map(|_| {
            let mut packed = vec![0f32; packed_b_len::<f32>(k, n)];
            // SAFETY: the view covers k x n; the buffer has the packed size.
            unsafe { pack_b_full(k, n, bv, &mut packed) };
            packed
        })
        .collect();
    let flops = 2.0 * (m * k * n) as f64;
    let (mut ours, mut mm) = (vec![], vec![]);
    for rep in 0..reps {
        let packed = &copies[rep % copies.len()];
        let t = Clock::now();
        unsafe {
            gemm_src(
                m,
                n,
                k,
                MatRef { ptr: a.as_ptr(), rs: k as isize, cs: 1 },
                BSrc::Packed(bv, packed.as_ptr()),
                MatMut { ptr: c.as_mut_ptr(), rs: n as isize },
                None,
            )
        };
        ours.push(t.elapsed().as_secs_f64());
        if !with_peer() {
            mm.push(f64::NAN);
            continue;
        }
        let t = Clock::now();
        unsafe {
            matrixmultiply::sgemm(
                m,
                k,
                n,
                1.0,
                a.as_ptr(),
                k as isize,
                1,
                b.as_ptr(),
                n as isize,
                1,
                0.0,
                c.as_mut_ptr(),
                n as isize,
                1,
            )
        };
        mm.push(t.elapsed().as_secs_f64());
    }
    let best = |v: &[f64]| v.iter().cloned().fold(f64::INFINITY, f64::min);
    let (bo, bx) = (best(&ours), best(&mm));
    let (o, x) = (median(ours), median(mm));
    println!(
        "{m}x{k}x{n}  rlx {:8.1} us {:6.1} GFLOP/s  matrixmultiply {:8.1} us {:6.1} GFLOP/s  ratio {:.2}  (best {:.1} / {:.1})",
        o * 1e6,
        flops / o / 1e9,
        x * 1e6,
        flops / x / 1e9,
        x / o,
        flops / bo / 1e9,
        flops / bx / 1e9
    );
}

/// In-cache throughput of every micro-kernel (one thread): one packed A panel and one B
/// micro-panel of depth `kc`, the tile recomputed many times; the best of several batches.
fn kernels(kc: usize) {
    fn one<T: GemmElem + From<f32>>(kern: &Kernel<T>, kc: usize) {
        let a: Vec<T> = (0..kern.mr * kc).map(|i| T::from((i % 7) as f32 * 0.1)).collect();
        let b: Vec<T> = (0..kern.nr * kc).map(|i| T::from((i % 5) as f32 * 0.1)).collect();
        let mut c = vec![T::default(); kern.mr * kern.nr];
        let ap = MatRef { ptr: a.as_ptr(), rs: 1, cs: kern.mr as isize };
        let calls = (1usize << 26) / (kern.mr * kern.nr * kc);
        let mut best = f64::INFINITY;
        for _ in 0..15 {
            let t = Clock::now();
            for _ in 0..calls {
                // SAFETY: the panels hold mr x kc and kc x nr elements, C the whole tile.
                unsafe { (kern.micro)(kc, ap, b.as_ptr(), c.as_mut_ptr(), kern.nr as isize, kern.mr, kern.nr, false) };
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        let flops = 2.0 * (kern.mr * kern.nr * kc * calls) as f64;
        println!("{:<16} {}x{} kc {kc}: {:6.1} GFLOP/s", kern.name, kern.mr, kern.nr, flops / best / 1e9);
    }
    for k in f32::kernels() {
        one(&k, kc);
    }
    for k in f64::kernels() {
        one(&k, kc);
    }
}

/// f64 n x n x n: RLX against matrixmultiply's dgemm.
fn square_f64(n: usize, reps: usize) {
    let a: Vec<f64> = (0..n * n).map(|i| (i % 7) as f64 * 0.1).collect();
    let b: Vec<f64> = (0..n * n).map(|i| (i % 5) as f64 * 0.1).collect();
    let mut c = vec![0f64; n * n];
    let flops = 2.0 * (n as f64).powi(3);
    let (mut ours, mut mm) = (vec![], vec![]);
    for _ in 0..reps {
        let t = Clock::now();
        let (av, bv) =
            (MatRef { ptr: a.as_ptr(), rs: n as isize, cs: 1 }, MatRef { ptr: b.as_ptr(), rs: n as isize, cs: 1 });
        // SAFETY: the buffers hold n*n elements each and do not alias.
        unsafe { gemm(n, n, n, av, bv, MatMut { ptr: c.as_mut_ptr(), rs: n as isize }) };
        ours.push(flops / t.elapsed().as_secs_f64() / 1e9);
        let t = Clock::now();
        let ni = n as isize;
        // SAFETY: as above.
        unsafe {
            matrixmultiply::dgemm(n, n, n, 1.0, a.as_ptr(), ni, 1, b.as_ptr(), ni, 1, 0.0, c.as_mut_ptr(), ni, 1)
        };
        mm.push(flops / t.elapsed().as_secs_f64() / 1e9);
    }
    let best = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    let (bo, bm) = (best(&ours), best(&mm));
    let (o, m) = (median(ours), median(mm));
    println!(
        "f64 {n:>5}^3  rlx {o:7.1} GFLOP/s  matrixmultiply {m:7.1} GFLOP/s  ratio {:.2}  (best {bo:.1} / {bm:.1})",
        o / m
    );
}
