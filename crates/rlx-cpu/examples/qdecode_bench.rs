//! Decode (m = 1) quantized matvec at a Llama-shaped model's shapes (hidden 2048, ffn 5632, kv
//! 512, vocab 32000: /tmp/bench-llama-q4_k_m.gguf), GB/s of weights streamed from DRAM: the
//! repacked kernel (default) against the row path on the original layout (`RLX_QUANT_REPACK=0`)
//! and a plain read of the same bytes, alternating in the same run.
//! `RLX_NUM_THREADS=1 cargo run --release -p rlx-cpu --example qdecode_bench -- [reps] [Q4_K Q6_K ...]`
//! `QBENCH_MIB=4`: weights small enough to stay in cache (the kernel's compute alone);
//! `QBENCH_SHAPE=2048x5632`: one shape only; `QBENCH_BEST=1`: the best rep instead of the median;
//! `QBENCH_M=128`: prefill, 128 activation rows (the batched kernels; GMAC/s instead of GB/s).

use rlx_cpu::threads::{num_threads, parallel_for};
use rlx_driver::Executable;
use rlx_ir::{DType, Graph, QuantScheme, Shape};
use std::time::Instant;

/// The median of `v`, or its best (`QBENCH_BEST=1`: on a loaded machine, the runs nobody preempted).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if std::env::var("QBENCH_BEST").is_ok() { v[v.len() - 1] } else { v[v.len() / 2] }
}

/// One compiled `x[m, k] @ dequant(w[n, k])^T` over its own copy of the packed weights.
fn build(
    cpu: &rlx_cpu::CpuBackend,
    s: QuantScheme,
    (m, n, k): (usize, usize, usize),
    packed: &[u8],
) -> Box<dyn Executable> {
    let mut g = Graph::new("qdecode");
    let x = g.input("x", Shape::new(&[m, k], DType::F32));
    let w = g.param("w", Shape::new(&[n, s.row_bytes(k).unwrap()], DType::U8));
    let y = g.qmatmul(x, w, s, k);
    g.set_outputs(vec![y]);
    let (legal, _) = rlx_driver::legalize(&g, cpu).unwrap();
    let mut exe = rlx_driver::compile_graph(cpu, &legal).unwrap();
    exe.set_param(0, packed).unwrap();
    exe
}

/// Seconds to read `bufs` once, each split over the pool's threads in contiguous chunks.
fn read_once(bufs: &[Vec<u64>]) -> f64 {
    let t = Instant::now();
    let parts = num_threads();
    for b in bufs {
        let per = b.len() / parts;
        let sums: Vec<std::sync::atomic::AtomicU64> = (0..parts).map(|_| Default::default()).collect();
        parallel_for(parts, &|c| {
            let s = b[c * per..(c + 1) * per].iter().fold(0u64, |a, &x| a.wrapping_add(x));
            sums[c].store(s, std::sync::atomic::Ordering::Relaxed);
        });
    }
    t.elapsed().as_secs_f64()
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let reps = argv.iter().find_map(|a| a.parse::<usize>().ok()).unwrap_or(9);
    let names: Vec<&str> = argv.iter().filter(|a| a.parse::<usize>().is_err()).map(|a| a.as_str()).collect();
    let schemes: Vec<QuantScheme> = if names.is_empty() {
        vec![QuantScheme::Q4_K, QuantScheme::Q6_K]
    } else {
        names.iter().map(|n| QuantScheme::from_name(n).unwrap_or_else(|e| panic!("{n}: {e}"))).collect()
    };
    let mib = std::env::var("QBENCH_MIB").ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(256);
    let m = std::env::var("QBENCH_M").ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(1).max(1);
    let cpu = rlx_cpu::CpuBackend::new();
    println!("threads: {}  reps: {reps} (median)  weights streamed per rep: ~{mib} MiB", num_threads());
    let shapes = [(2048usize, 2048usize), (512, 2048), (5632, 2048), (2048, 5632), (32000, 2048)];
    // `QBENCH_SHAPE=2048x5632`: that shape only.
    let only = std::env::var("QBENCH_SHAPE").ok();
    for s in schemes {
        for (n, k) in shapes {
            if only.as_ref().is_some_and(|o| *o != format!("{n}x{k}")) {
                continue;
            }
            let bytes = n * s.row_bytes(k).unwrap();
            let copies = (mib << 20).div_ceil(bytes);
            let vals: Vec<f32> =
                (0..n * k).map(|i| ((i as u32).wrapping_mul(2654435761) >> 8) as f32 / 16777216.0 - 0.5).collect();
            let packed = s.quantize_rows(&vals, k).unwrap();
            let mut new: Vec<_> = (0..copies).map(|_| build(&cpu, s, (m, n, k), &packed)).collect();
            // SAFETY: single-threaded here; the kernel reads the knob while compiling.
            unsafe { std::env::set_var("RLX_QUANT_REPACK", "0") };
            let mut old: Vec<_> = (0..copies).map(|_| build(&cpu, s, (m, n, k), &packed)).collect();
            // SAFETY: as above.
            unsafe { std::env::remove_var("RLX_QUANT_REPACK") };
            let plain: Vec<Vec<u64>> = (0..copies).map(|c| vec![c as u64; bytes / 8]).collect();
            let x: Vec<u8> = (0..m * k).flat_map(|i| ((i as f32 * 0.37).sin()).to_le_bytes()).collect();
            let (mut y, mut y0) = (vec![0u8; m * n * 4], vec![0u8; m * n * 4]);
            let (mut v, mut v0, mut vr) = (vec![], vec![], vec![]);
            // Two untimed rounds (the repacked copy is made on the first run of a param version).
            let mut repack_secs = 0.0;
            for r in 0..reps + 2 {
                for (i, (set, out, times)) in
                    [(&mut new, &mut y, &mut v), (&mut old, &mut y0, &mut v0)].into_iter().enumerate()
                {
                    let t = Instant::now();
                    for e in set.iter_mut() {
                        e.run(&[&x], &mut [&mut *out]).unwrap();
                    }
                    if r >= 2 {
                        times.push((bytes * copies) as f64 / t.elapsed().as_secs_f64() / 1e9);
                    } else if r == 0 && i == 0 {
                        repack_secs = t.elapsed().as_secs_f64();
                    }
                }
                let secs = read_once(&plain);
                if r >= 2 {
                    vr.push((bytes * copies) as f64 / secs / 1e9);
                }
            }
            let (gbs, base, read) = (median(v), median(v0), median(vr));
            if m > 1 {
                // The file-layout batched kernel sums in another float order: close, not equal.
                let macs = |gb: f64| gb * 1e9 / bytes as f64 * (m * n * k) as f64 / 1e9;
                println!(
                    "{s} {n:5}x{k:<5} m={m}: repacked {:6.1} GMAC/s | file layout {:6.1} GMAC/s | {:.2}x",
                    macs(gbs),
                    macs(base),
                    gbs / base
                );
                continue;
            }
            assert_eq!(y, y0, "{s} {n}x{k}: the repacked and row paths must agree bit for bit");
            // The run that repacks, less one run's matvec: the one-time cost per MB of weights.
            let repack_ms = (repack_secs - (bytes * copies) as f64 / gbs / 1e9) * 1e3 / (bytes * copies) as f64 * 1e6;
            println!("{s} {n:5}x{k:<5}: repacking took {repack_ms:.2} ms per MB of weights");
            println!(
                "{s} {n:5}x{k:<5} ({:5.1} MB x {copies:3}): repacked {gbs:5.1} GB/s ({:3.0}% of read) | rows {base:5.1} GB/s | read {read:5.1} GB/s | {:.2}x",
                bytes as f64 / 1e6,
                100.0 * gbs / read,
                gbs / base
            );
        }
    }
}
