//! Quantized matmul through the compiled `qmatmul` kernel: decode (m = 1) bandwidth against a
//! plain multi-threaded read measured in the same run, and prefill (m > 1) GFLOP/s; each against
//! the kernel it replaced (one weight row per pass / row dots per activation row), alternating.
//! `RLX_NUM_THREADS=2 cargo run --release -p rlx-cpu --example qmatvec_bench -- [reps] [m] [Q4_K Q6_K ...]`
//!
//! Decode weights are spread over enough copies (about 256 MiB) that they stream from DRAM.

use rlx_cpu::threads::{num_threads, parallel_for};
use rlx_driver::Executable;
use rlx_ir::{DType, Graph, HostTensor, QuantScheme, Shape};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// One compiled `x[m, k] @ dequant(w[n, k])^T` with its own packed weights.
fn build(
    cpu: &rlx_cpu::CpuBackend,
    s: QuantScheme,
    m: usize,
    n: usize,
    k: usize,
    packed: &[u8],
) -> Box<dyn Executable> {
    let mut g = Graph::new("qmatvec");
    let x = g.input("x", Shape::new(&[m, k], DType::F32));
    let w = g.param("w", Shape::new(&[n, s.row_bytes(k).unwrap()], DType::U8));
    let y = g.qmatmul(x, w, s, k);
    g.set_outputs(vec![y]);
    let (legal, _) = rlx_driver::legalize(&g, cpu).unwrap();
    let mut exe = rlx_driver::compile_graph(cpu, &legal).unwrap();
    exe.set_param(0, packed).unwrap();
    exe
}

/// GB/s of a read of `buf` split over the pool's threads (the peer: what DRAM gives here).
fn read_bandwidth(buf: &[u64], reps: usize) -> f64 {
    let chunks = num_threads() * 8;
    let per = buf.len() / chunks;
    let sums: Vec<std::sync::atomic::AtomicU64> = (0..chunks).map(|_| Default::default()).collect();
    let mut v = vec![];
    for _ in 0..reps {
        let t = Instant::now();
        parallel_for(chunks, &|c| {
            let s = buf[c * per..(c + 1) * per].iter().fold(0u64, |a, &x| a.wrapping_add(x));
            sums[c].store(s, std::sync::atomic::Ordering::Relaxed);
        });
        v.push((per * chunks * 8) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    median(v)
}

/// The bench's schemes by name.
fn scheme(name: &str) -> QuantScheme {
    QuantScheme::from_name(name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<usize> = argv.iter().filter_map(|a| a.parse().ok()).collect();
    // `NxK` arguments replace the default weight shapes (n rows of k values).
    let custom: Vec<(usize, usize)> = argv
        .iter()
        .filter_map(|a| a.split_once('x').and_then(|(n, k)| Some((n.parse().ok()?, k.parse().ok()?))))
        .collect();
    let names: Vec<&str> =
        argv.iter().filter(|a| a.parse::<usize>().is_err() && !a.contains('x')).map(|a| a.as_str()).collect();
    let schemes: Vec<QuantScheme> =
        if names.is_empty() { vec![QuantScheme::Q4_K] } else { names.iter().map(|n| scheme(n)).collect() };
    let reps = args.first().copied().unwrap_or(9);
    let m = args.get(1).copied().unwrap_or(1);
    let cpu = rlx_cpu::CpuBackend::new();
    let isa = std::env::var("RLX_QUANT_ISA").unwrap_or_else(|_| "best".into());
    // The new kernel against the one it replaces, alternating in the same run.
    // `QBENCH_BASE=RLX_QUANT_AMX`: prefill on AMX against the int8 kernels instead.
    let amx_base = std::env::var("QBENCH_BASE").is_ok_and(|v| v == "RLX_QUANT_AMX");
    let (knob, base) = match (m, amx_base) {
        (1, _) => ("RLX_QUANT_BLOCKS", "one block per step"),
        (_, true) => ("RLX_QUANT_AMX", "int8 kernels"),
        _ => ("RLX_QUANT_GEMM", "row dots"),
    };
    // Decode: the default kernels against one block per step (`QBENCH_FOUR=1`: four blocks per step for all).
    let four = std::env::var("QBENCH_FOUR").is_ok();
    println!("threads: {}  m: {m}  reps: {reps} (median)  isa: {isa}  baseline: {base} ({knob})", num_threads());
    let buf: Vec<u64> = (0..(256usize << 20) / 8).map(|i| i as u64).collect();
    let peer = read_bandwidth(&buf, reps);
    drop(buf);
    println!("plain parallel read of 256 MiB: {peer:.1} GB/s");
    let mut shapes = vec![(4096usize, 4096usize), (11008, 4096), (4096, 11008), (1024, 1024), (2048, 1024)];
    if !custom.is_empty() {
        shapes = custom;
    }
    for s in schemes {
        for &(n, k) in &shapes {
            let bytes = n * s.row_bytes(k).unwrap();
            // Decode streams 256 MiB of copies from DRAM; prefill reuses weights, 64 MiB is enough.
            // `QBENCH_MIB` overrides it (a few MiB: weights stay in cache, the kernel's compute alone).
            let mib = std::env::var("QBENCH_MIB").ok().and_then(|v| v.parse::<usize>().ok());
            let total = mib.unwrap_or(if m == 1 { 256 } else { 64 }) << 20;
            let copies = total.div_ceil(bytes);
            // Quantized once; each copy has its own bytes in its own arena.
            let vals: Vec<f32> =
                (0..n * k).map(|i| ((i as u32).wrapping_mul(2654435761) >> 8) as f32 / 16777216.0 - 0.5).collect();
            let packed = s.quantize_rows(&vals, k).unwrap();
            if four {
                // SAFETY: single-threaded here; the kernels read the knob while compiling.
                unsafe { std::env::set_var("RLX_QUANT_BLOCKS", "4") };
            }
            let mut exes: Vec<_> = (0..copies).map(|_| build(&cpu, s, m, n, k, &packed)).collect();
            // SAFETY: single-threaded here; the kernels read the knob while compiling.
            unsafe { std::env::set_var(knob, if m == 1 { "1" } else { "0" }) };
            let mut olds: Vec<_> = (0..copies).map(|_| build(&cpu, s, m, n, k, &packed)).collect();
            // SAFETY: as above.
            unsafe { std::env::remove_var(knob) };
            let x: Vec<u8> = (0..m * k).flat_map(|i| ((i as f32 * 0.37).sin()).to_le_bytes()).collect();
            let (mut y, mut y0) = (vec![0u8; m * n * 4], vec![0u8; m * n * 4]);
            let (mut v, mut v0) = (vec![], vec![]);
            for r in 0..=reps {
                for (set, out, times) in [(&mut exes, &mut y, &mut v), (&mut olds, &mut y0, &mut v0)] {
                    let t = Instant::now();
                    for e in set.iter_mut() {
                        e.run(&[&x], &mut [&mut *out]).unwrap();
                    }
                    if r > 0 {
                        times.push((bytes * copies) as f64 / t.elapsed().as_secs_f64() / 1e9);
                    }
                }
            }
            let (gbs, old) = (median(v), median(v0));
            let f =
                |b: &[u8]| HostTensor::from_bytes(Shape::new(&[m, n], DType::F32), b).unwrap().to_f64_vec().unwrap();
            let (a, b) = (f(&y), f(&y0));
            let scale = b.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-30);
            let diff = a.iter().zip(&b).fold(0f64, |m, (p, q)| m.max((p - q).abs())) / scale;
            // bf16 activations (AMX) against Q8_K ones: both a few hundredths off at the largest output.
            let tol = if amx_base { 5e-2 } else { 1e-3 };
            assert!(diff < tol, "new and old kernels disagree: {diff}");
            let gf = |g: f64| g * 2.0 * (m * n * k) as f64 / bytes as f64;
            println!(
                "{s} {n}x{k} ({:.1} MB x {copies}): {gbs:5.1} GB/s ({:.0}% of read), {:6.1} GFLOP/s | baseline {old:5.1} GB/s, {:6.1} GFLOP/s | {:.2}x",
                bytes as f64 / 1e6,
                100.0 * gbs / peer,
                gf(gbs),
                gf(old),
                gbs / old
            );
        }
    }
}
