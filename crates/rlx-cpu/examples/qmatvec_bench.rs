//! Q4_K matrix-vector (decode) bandwidth through the compiled `qmatmul` kernel, against a plain
//! multi-threaded read of the same number of bytes measured in the same run.
//! `RLX_NUM_THREADS=2 cargo run --release -p rlx-cpu --example qmatvec_bench -- [reps] [m]`
//!
//! Weights are spread over enough copies (about 256 MiB) that they stream from DRAM, not L3.

use rlx_cpu::threads::{num_threads, parallel_for};
use rlx_driver::{Backend, Executable};
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
    let mut exe = cpu.compile(&legal).unwrap();
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

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let reps = args.first().copied().unwrap_or(9);
    let m = args.get(1).copied().unwrap_or(1);
    let cpu = rlx_cpu::CpuBackend::new();
    let isa = std::env::var("RLX_QUANT_ISA").unwrap_or_else(|_| "best".into());
    println!("threads: {}  m: {m}  reps: {reps} (median)  isa: {isa}", num_threads());
    let buf: Vec<u64> = (0..(256usize << 20) / 8).map(|i| i as u64).collect();
    let peer = read_bandwidth(&buf, reps);
    drop(buf);
    println!("plain parallel read of 256 MiB: {peer:.1} GB/s");
    for (n, k) in [(4096usize, 4096usize), (11008, 4096), (4096, 11008)] {
        let s = QuantScheme::Q4_K;
        let bytes = n * s.row_bytes(k).unwrap();
        let copies = (256usize << 20).div_ceil(bytes);
        // Quantized once; each copy has its own bytes in its own arena.
        let vals: Vec<f32> =
            (0..n * k).map(|i| ((i as u32).wrapping_mul(2654435761) >> 8) as f32 / 16777216.0 - 0.5).collect();
        let packed = s.quantize_rows(&vals, k).unwrap();
        let mut exes: Vec<_> = (0..copies).map(|_| build(&cpu, s, m, n, k, &packed)).collect();
        let x: Vec<u8> = (0..m * k).flat_map(|i| ((i as f32 * 0.37).sin()).to_le_bytes()).collect();
        let mut y = vec![0u8; m * n * 4];
        let mut v = vec![];
        for r in 0..=reps {
            let t = Instant::now();
            for e in exes.iter_mut() {
                e.run(&[&x], &mut [&mut y]).unwrap();
            }
            if r > 0 {
                v.push((bytes * copies) as f64 / t.elapsed().as_secs_f64() / 1e9);
            }
        }
        let gbs = median(v);
        let check = HostTensor::from_bytes(Shape::new(&[m, n], DType::F32), &y).unwrap().to_f64_vec().unwrap();
        assert!(check.iter().all(|v| v.is_finite()));
        println!(
            "Q4_K {n}x{k} ({:.1} MB x {copies}): {gbs:5.1} GB/s of weights, {:.0}% of the plain read; {:.1} GFLOP/s",
            bytes as f64 / 1e6,
            100.0 * gbs / peer,
            gbs * 2.0 * (m * n * k) as f64 / bytes as f64
        );
    }
}
