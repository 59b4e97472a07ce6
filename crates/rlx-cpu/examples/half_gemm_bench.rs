//! f16/bf16 GEMM GFLOP/s (f32 sums) against RLX's f32 GEMM, interleaved in one run, medians.
//! `cargo run --release -p rlx-cpu --example half_gemm_bench -- [m x k x n ...] [reps]`
//! (default 1024x1024x1024 and the decode shape 1x4096x4096).

use half::{bf16, f16};
use rlx_cpu::gemm::half::{HalfElem, gemm as hgemm, gemm_src, pack_b_full, packed_b_len};
use rlx_cpu::gemm::{MatMut, MatRef, gemm};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Seconds of one half-precision product of row-major operands.
fn time_half<H: HalfElem>(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], c: &mut [H]) -> f64 {
    let (ah, bh): (Vec<H>, Vec<H>) =
        (a.iter().map(|&x| H::from_f32(x)).collect(), b.iter().map(|&x| H::from_f32(x)).collect());
    let t = Instant::now();
    unsafe {
        hgemm(
            m,
            n,
            k,
            MatRef { ptr: ah.as_ptr(), rs: k as isize, cs: 1 },
            MatRef { ptr: bh.as_ptr(), rs: n as isize, cs: 1 },
            MatMut { ptr: c.as_mut_ptr(), rs: n as isize },
        )
    };
    t.elapsed().as_secs_f64()
}

/// Seconds of one bf16 product with B packed ahead of time (as weights are).
fn time_bf16_packed(m: usize, k: usize, n: usize, ah: &[bf16], bh: &[bf16], packed: &[f32], c: &mut [bf16]) -> f64 {
    let t = Instant::now();
    unsafe {
        gemm_src(
            m,
            n,
            k,
            MatRef { ptr: ah.as_ptr(), rs: k as isize, cs: 1 },
            MatRef { ptr: bh.as_ptr(), rs: n as isize, cs: 1 },
            Some(packed.as_ptr()),
            MatMut { ptr: c.as_mut_ptr(), rs: n as isize },
            true,
        )
    };
    t.elapsed().as_secs_f64()
}

fn shape(m: usize, k: usize, n: usize, reps: usize) {
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1 - 0.2).collect();
    let (mut c32, mut c16, mut cb16) = (vec![0f32; m * n], vec![f16::ZERO; m * n], vec![bf16::ZERO; m * n]);
    let flops = 2.0 * (m * k * n) as f64;
    let (mut t32, mut t16, mut tb16, mut tbp) = (vec![], vec![], vec![], vec![]);
    let (ah, bh): (Vec<bf16>, Vec<bf16>) =
        (a.iter().map(|&x| bf16::from_f32(x)).collect(), b.iter().map(|&x| bf16::from_f32(x)).collect());
    // From a 64-byte boundary, as the runtime's packed weights are (AMX repacks a B off one).
    let mut store = vec![0f32; packed_b_len(k, n) + 16];
    let skip = store.as_ptr().align_offset(64);
    let packed = &mut store[skip..skip + packed_b_len(k, n)];
    unsafe { pack_b_full(k, n, MatRef { ptr: bh.as_ptr(), rs: n as isize, cs: 1 }, packed) };
    for _ in 0..reps {
        let t = Instant::now();
        unsafe {
            gemm(
                m,
                n,
                k,
                MatRef { ptr: a.as_ptr(), rs: k as isize, cs: 1 },
                MatRef { ptr: b.as_ptr(), rs: n as isize, cs: 1 },
                MatMut { ptr: c32.as_mut_ptr(), rs: n as isize },
            )
        };
        t32.push(t.elapsed().as_secs_f64());
        t16.push(time_half(m, k, n, &a, &b, &mut c16));
        tb16.push(time_half(m, k, n, &a, &b, &mut cb16));
        tbp.push(time_bf16_packed(m, k, n, &ah, &bh, packed, &mut cb16));
    }
    let (x, y, z, w) = (median(t32), median(t16), median(tb16), median(tbp));
    let g = |s: f64| flops / s / 1e9;
    println!(
        "{m}x{k}x{n}  f32 {:7.1} GFLOP/s  f16 {:7.1} ({:.2}x f32)  bf16 {:7.1} ({:.2}x f32)  bf16 packed B {:7.1}",
        g(x),
        g(y),
        x / y,
        g(z),
        x / z,
        g(w)
    );
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut shapes: Vec<Vec<usize>> =
        raw.iter().filter(|a| a.contains('x')).map(|a| a.split('x').filter_map(|d| d.parse().ok()).collect()).collect();
    let reps = raw.iter().filter(|a| !a.contains('x')).find_map(|a| a.parse().ok()).unwrap_or(11);
    if shapes.is_empty() {
        shapes = vec![vec![1024, 1024, 1024], vec![1, 4096, 4096]];
    }
    println!("threads: {}", rlx_cpu::threads::num_threads());
    for s in shapes.iter().filter(|s| s.len() == 3) {
        shape(s[0], s[1], s[2], reps);
    }
}
