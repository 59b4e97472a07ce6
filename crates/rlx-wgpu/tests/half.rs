//! Ops whose wgpu kernels take f16 (with shader-f16) and bf16 (emulated) beyond what the op
//! samples cover: cumsum, rope and scatter_add, against the reference interpreter in each dtype.

mod common;

use rlx_driver::{legalize, run_host};
use rlx_ir::ops::util::rand_f64;
use rlx_ir::testkit::compare;
use rlx_ir::{DType, Graph, HostTensor, Shape, interp};
use rlx_wgpu::WgpuBackend;

/// Builds a graph of data `x` (of `dt`) and i32 indices, runs it on wgpu and on the reference.
fn check(
    dt: DType,
    name: &str,
    dims: &[usize],
    idx: &[i64],
    f: impl Fn(&mut Graph, rlx_ir::NodeId, rlx_ir::NodeId) -> rlx_ir::NodeId,
) {
    let mut g = Graph::new(name);
    let x = g.input("x", Shape::new(dims, dt));
    let i = g.input("i", Shape::new(&[idx.len()], DType::I32));
    let y = f(&mut g, x, i);
    g.set_outputs(vec![y]);
    g.check().unwrap();
    let n: usize = dims.iter().product();
    let xs = HostTensor::from_f64(dims, dt, &rand_f64(n, -2.0, 2.0, 7)).unwrap();
    let is = HostTensor::from_i64(&[idx.len()], DType::I32, idx).unwrap();
    let feeds = [("x", xs), ("i", is)];
    // The op's own kernel runs (not its decomposition).
    let (_, report) = legalize(&g, &WgpuBackend::new()).unwrap();
    assert_eq!(report.ops[name].native, 1, "{name} {dt}: {report}");
    let want = interp::evaluate(&g, &feeds).unwrap();
    let got = run_host(&WgpuBackend::new(), &g, &feeds).unwrap_or_else(|e| panic!("{name} {dt}: {e}"));
    compare(&got[0], &want[0]).unwrap_or_else(|e| panic!("{name} {dt}: {e}"));
}

#[test]
fn cumsum_rope_scatter_add_in_half_precision() {
    if common::require_gpu() {
        return;
    }
    let mut dts = vec![DType::BF16];
    if rlx_wgpu::gpu::has_f16() {
        dts.push(DType::F16);
    }
    for dt in dts {
        check(dt, "cumsum", &[2, 5, 3], &[0], |g, x, _| g.cumsum_with(x, 1, true, false));
        check(dt, "rope", &[1, 2, 3, 8], &[0, 5, 9], |g, x, p| g.rope(x, p, 10000.0));
        check(dt, "scatter_add", &[4, 3], &[3, 0, 3], |g, x, i| {
            let u = g.slice_axis(x, 0, 0, 3);
            g.scatter_add(x, i, u, 0)
        });
    }
}
