//! f32 GEMM GFLOP/s: RLX's packed GEMM against matrixmultiply, interleaved in one run.
//! `cargo run --release -p rlx-cpu --example gemm_bench -- 1024 [reps]`, or shapes
//! `-- 128x384x384 128x384x1536 [reps]` (m x k x n).

use rlx_cpu::gemm::{MatMut, MatRef, gemm};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let shapes: Vec<Vec<usize>> =
        raw.iter().filter(|a| a.contains('x')).map(|a| a.split('x').filter_map(|d| d.parse().ok()).collect()).collect();
    let args: Vec<usize> = raw.iter().filter_map(|a| a.parse().ok()).collect();
    println!("threads: {}", rlx_cpu::threads::num_threads());
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
            let t = Instant::now();
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
            let t = Instant::now();
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
        let (o, m) = (median(ours), median(mm));
        println!("{n:>5}^3  rlx {o:7.1} GFLOP/s  matrixmultiply {m:7.1} GFLOP/s  ratio {:.2}", o / m);
    }
}

/// Matrix-vector (decode) bandwidth: 1 x k times k x n, B streamed once.
fn gemv_bandwidth(k: usize, n: usize, reps: usize) -> f64 {
    let a = vec![0.5f32; k];
    let b = vec![0.25f32; k * n];
    let mut c = vec![0f32; n];
    let mut v = vec![];
    for _ in 0..reps {
        let t = Instant::now();
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

/// One m x k x n shape (row-major operands): RLX against matrixmultiply, microseconds and GFLOP/s.
fn shape(m: usize, k: usize, n: usize, reps: usize) {
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
    let mut c = vec![0f32; m * n];
    let flops = 2.0 * (m * k * n) as f64;
    let (mut ours, mut mm) = (vec![], vec![]);
    for _ in 0..reps {
        let t = Instant::now();
        unsafe {
            gemm(
                m,
                n,
                k,
                MatRef { ptr: a.as_ptr(), rs: k as isize, cs: 1 },
                MatRef { ptr: b.as_ptr(), rs: n as isize, cs: 1 },
                MatMut { ptr: c.as_mut_ptr(), rs: n as isize },
            )
        };
        ours.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
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
    let (o, x) = (median(ours), median(mm));
    println!(
        "{m}x{k}x{n}  rlx {:8.1} us {:6.1} GFLOP/s  matrixmultiply {:8.1} us {:6.1} GFLOP/s  ratio {:.2}",
        o * 1e6,
        flops / o / 1e9,
        x * 1e6,
        flops / x / 1e9,
        x / o
    );
}
