//! RLX's side of the selective_scan benchmark (numpy's and JAX's: tools/selective_scan_bench.py,
//! same shapes): mamba's full form (softplus, delta_bias, D, z) in f32 on the CPU, the median
//! run of the forward (`sum(y * w)`) and of the forward and backward (that loss and the
//! gradients of every operand), with the native kernels (`selective_scan`,
//! `selective_scan_grad`) and with the op's decomposition (a `scan` over L, differentiated
//! through the scan's rules), which is what a backend without the kernels runs.
//!
//! Run: `cargo run --release -p rlx-autodiff --example selective_scan_bench [B] [D] [N] [L] [REPS]`

use rlx_autodiff::{grad_with_loss, leaf};
use rlx_driver::Device;
use rlx_ir::ops::SelectiveScan;
use rlx_ir::ops::selective_scan::{ScanDims, sample_inputs};
use rlx_ir::{DType, Graph, HostTensor, NodeId, OpDef, Shape};
use rlx_runtime::{Session, clear_memory_cache};
use std::time::Instant;

const NAMES: [&str; 8] = ["u", "delta", "A", "B", "C", "D", "z", "delta_bias"];

/// `sum(selective_scan(...) * w)`; `decomposed` builds the op's decomposition in its place.
fn loss(op: &SelectiveScan, ins: &[HostTensor], decomposed: bool) -> Graph {
    let mut g = Graph::new("selective_scan");
    let ids: Vec<NodeId> = ins.iter().zip(NAMES).map(|(t, n)| g.input(n, t.shape.clone())).collect();
    let y = if decomposed {
        op.decompose(&mut g, &ids).expect("decomposition")
    } else {
        g.selective_scan(op.clone(), &ids)
    };
    let w = g.input("w", Shape::new(&ins[0].dims(), DType::F32));
    let p = g.mul(y, w);
    let l = g.sum_all(p);
    g.set_outputs(vec![l]);
    g
}

fn bench(g: &Graph, feeds: &[(&str, HostTensor)], reps: usize) -> f64 {
    clear_memory_cache();
    let session = Session::new(Device::Cpu);
    let mut c = session.compile(g.clone()).expect("compile");
    // Bytes made once, as JAX's arrays are placed once: the runs time the graph, not conversions.
    let bytes: Vec<(&str, Vec<u8>, DType)> = feeds
        .iter()
        .filter(|(n, _)| c.inputs().iter().any(|(i, _)| i == n))
        .map(|(n, t)| (*n, t.to_bytes(), t.dtype()))
        .collect();
    let ins: Vec<(&str, &[u8], DType)> = bytes.iter().map(|(n, b, d)| (*n, b.as_slice(), *d)).collect();
    c.run_typed(&ins).expect("run");
    let mut runs: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            c.run_typed(&ins).expect("run");
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    // Under RLX_PROFILE=1: the kernels of this graph's runs (the CPU backend's table is global).
    let report = session.profile_report();
    if !report.is_empty() {
        eprint!("{}: {report}", g.name());
        session.reset_profile();
    }
    runs[runs.len() / 2]
}

fn main() {
    let a: Vec<usize> = std::env::args().skip(1).map(|s| s.parse().expect("a number")).collect();
    let at = |i: usize, d: usize| a.get(i).copied().unwrap_or(d);
    let (b, d, n, l, reps) = (at(0, 2), at(1, 64), at(2, 16), at(3, 256), at(4, 10));
    let op = SelectiveScan { delta_softplus: true, has_d: true, has_z: true, has_bias: true };
    let ins = sample_inputs(&op, DType::F32, ScanDims { b, d, n, l }, 1);
    let w =
        HostTensor::from_f64(&[b, d, l], DType::F32, &rlx_ir::ops::util::rand_f64(b * d * l, -1.0, 1.0, 9)).expect("w");
    let mut feeds: Vec<(&str, HostTensor)> = NAMES.iter().copied().zip(ins.iter().cloned()).collect();
    feeds.push(("w", w));
    let mut out = vec![];
    for (label, decomposed) in [("native", false), ("decomposed", true)] {
        let g = loss(&op, &ins, decomposed);
        let wrt: Vec<NodeId> = NAMES.iter().map(|p| leaf(&g, p).expect("leaf")).collect();
        let gr = grad_with_loss(&g, &wrt).expect("grad");
        let f = bench(&g, &feeds, reps);
        let fb = bench(&gr, &feeds, reps);
        out.push(format!("\"{label}_forward_ms\":{f:.3},\"{label}_fwd_bwd_ms\":{fb:.3}"));
    }
    println!("{{\"rlx\":\"cpu\",\"B\":{b},\"D\":{d},\"N\":{n},\"L\":{l},{}}}", out.join(","));
}
