//! A quick timing of the batched solve kernel through the CPU backend (`rlx_driver::run_host`,
//! which compiles the graph on each call): `solve_timing [N [BATCH [REPS]]]`. The side-by-side
//! comparison with numpy is `rlx-bench linalg`; this is for a machine without rlx-bench built.

use rlx_ir::{DType, Graph, HostTensor, Shape};
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (n, bs, reps) =
        (args.first().copied().unwrap_or(1024), args.get(1).copied().unwrap_or(4), args.get(2).copied().unwrap_or(3));
    rlx_linalg::register().expect("register");
    let mut g = Graph::new("solve");
    let a = g.input("a", Shape::new(&[bs, n, n], DType::F64));
    let b = g.input("b", Shape::new(&[bs, n, 1], DType::F64));
    let x = rlx_linalg::solve(&mut g, a, b);
    g.set_outputs(vec![x]);
    let val = |i: usize| ((i as u32).wrapping_mul(2_654_435_761) >> 8) as f64 / 16_777_216.0;
    let av: Vec<f64> = (0..bs * n * n).map(|i| val(i) + if (i / n) % n == i % n { n as f64 } else { 0.0 }).collect();
    let bv: Vec<f64> = (0..bs * n).map(|i| val(i + 7)).collect();
    let feeds = [
        ("a", HostTensor::from_f64(&[bs, n, n], DType::F64, &av).expect("a")),
        ("b", HostTensor::from_f64(&[bs, n, 1], DType::F64, &bv).expect("b")),
    ];
    let cpu = rlx_cpu::CpuBackend::new();
    let mut ms = vec![];
    for _ in 0..reps {
        let t = Instant::now();
        rlx_driver::run_host(&cpu, &g, &feeds).expect("run");
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    println!("rlx solve {bs} x {n}x{n} f64: median {:.1} ms over {reps} (incl. compile and host copies)", ms[reps / 2]);
}
