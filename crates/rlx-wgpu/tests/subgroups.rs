//! Row reductions, softmax, norms and the quantized matrix-vector kernel with subgroup
//! operations (where the adapter has them; lavapipe does, with subgroups of 8) and with the
//! shared-memory path forced (`rlx_wgpu::gpu::set_subgroups(false)`), both against the
//! reference interpreter. One test, so the switch never flips under another test's compile.

mod common;

use common::require_gpu;
use rlx_driver::run_host;
use rlx_ir::ops::quant::packed;
use rlx_ir::ops::util::rand_f64;
use rlx_ir::quant::QuantScheme;
use rlx_ir::testkit::compare_within;
use rlx_ir::{DType, Graph, HostTensor, Shape, interp};
use rlx_wgpu::WgpuBackend;

/// A graph of every kernel with a workgroup combine step, and its feeds.
fn graph() -> (Graph, Vec<(&'static str, HostTensor)>) {
    let (rows, n, k) = (3, 1000, 256);
    let mut xs = rand_f64(rows * n, -4.0, 4.0, 1);
    xs[n + 17] = f64::NAN;
    let x = HostTensor::from_f64(&[rows, n], DType::F32, &xs).expect("x");
    let gamma = HostTensor::from_f64(&[n], DType::F32, &rand_f64(n, 0.5, 1.5, 2)).expect("gamma");
    let beta = HostTensor::from_f64(&[n], DType::F32, &rand_f64(n, -1.0, 1.0, 3)).expect("beta");
    let ints: Vec<i64> = (0..rows * n).map(|i| (i as i64 * 7919) % 2001 - 1000).collect();
    let xi = HostTensor::from_i64(&[rows, n], DType::I32, &ints).expect("ints");
    let q = HostTensor::from_f64(&[3, k], DType::F32, &rand_f64(3 * k, -1.0, 1.0, 4)).expect("q");
    let w = packed(QuantScheme::Q4_K, &[21], k, 5);

    let mut g = Graph::new("combines");
    let (xn, gn, bn) = (
        g.input("x", Shape::new(&[rows, n], DType::F32)),
        g.param("gamma", gamma.shape.clone()),
        g.param("beta", beta.shape.clone()),
    );
    let (xin, qn, wn) = (g.input("xi", xi.shape.clone()), g.input("q", q.shape.clone()), g.param("w", w.shape.clone()));
    let outs = vec![
        g.sum(xn, &[1], false),
        g.max(xn, &[1], true),
        g.min(xn, &[0, 1], false),
        g.softmax(xn, -1),
        g.layer_norm(xn, gn, bn, 1e-5),
        g.rms_norm(xn, gn, 1e-6),
        g.sum(xin, &[1], false),
        g.qmatmul(qn, wn, QuantScheme::Q4_K, k),
    ];
    g.set_outputs(outs);
    (g, vec![("x", x), ("gamma", gamma), ("beta", beta), ("xi", xi), ("q", q), ("w", w)])
}

#[test]
fn subgroup_and_shared_memory_combines_match_the_reference() {
    if require_gpu() {
        return;
    }
    let (g, feeds) = graph();
    let want = interp::evaluate(&g, &feeds).expect("reference");
    let have = rlx_wgpu::gpu::has_subgroups();
    let info = WgpuBackend::adapter_info().expect("adapter");
    eprintln!("subgroups: {have} (sizes {}..={})", info.subgroup_min_size, info.subgroup_max_size);
    let mut paths = vec![false];
    if have {
        paths.push(true);
    }
    for on in paths {
        rlx_wgpu::gpu::set_subgroups(on);
        assert_eq!(rlx_wgpu::kernels::subgroups(), on);
        let got = run_host(&WgpuBackend::new(), &g, &feeds).expect("wgpu run");
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            compare_within(a, b, Some((1e-4, 1e-4)))
                .unwrap_or_else(|e| panic!("output {i} with subgroups {}: {e}", if on { "on" } else { "off" }));
        }
    }
    rlx_wgpu::gpu::set_subgroups(true);
}
