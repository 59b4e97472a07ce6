//! Device limits are reported by legalization, before any kernel is built: a tensor over the
//! storage binding limit (forced small here with `WgpuBackend::with_max_binding`) makes the
//! node missing, with the node, its type and both sizes in the error and the dispatch report.

mod common;

use rlx_driver::{legalize, run_host};
use rlx_ir::{DType, Error, Graph, HostTensor, Shape, interp};
use rlx_wgpu::WgpuBackend;

fn exp_graph(n: usize) -> Graph {
    let mut g = Graph::new("exp");
    let x = g.input("x", Shape::new(&[n], DType::F32));
    let y = g.exp(x);
    g.set_outputs(vec![y]);
    g
}

#[test]
fn a_buffer_over_the_binding_limit_is_a_legalization_error() {
    if common::require_gpu() {
        return;
    }
    let backend = WgpuBackend::with_max_binding(1024);
    // 512 f32 = 2048 bytes, over the forced 1024.
    match legalize(&exp_graph(512), &backend) {
        Err(Error::Unsupported { backend, missing, report }) => {
            assert_eq!(backend, "wgpu");
            assert!(missing.contains("`exp` f32[512]"), "{missing}");
            assert!(missing.contains("2048 bytes") && missing.contains("limit of 1024 bytes"), "{missing}");
            assert!(report.contains("missing: exp") && report.contains("storage binding limit"), "{report}");
        }
        other => panic!("expected Unsupported, got {:?}", other.map(|_| ())),
    }
    // Compiling without legalization still refuses it, naming the node.
    match rlx_driver::compile_graph(&backend, &exp_graph(512)).map(|_| ()) {
        Err(Error::Unsupported { missing, .. }) => {
            assert!(missing.contains("node %0") && missing.contains("2048 bytes"), "{missing}")
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // Under the limit the same backend runs it.
    let g = exp_graph(128);
    let x = HostTensor::from_f64(&[128], DType::F32, &(0..128).map(|i| i as f64 / 64.0).collect::<Vec<_>>()).unwrap();
    let got = run_host(&backend, &g, &[("x", x.clone())]).unwrap();
    let want = interp::evaluate(&g, &[("x", x)]).unwrap();
    rlx_ir::testkit::compare(&got[0], &want[0]).unwrap();
}

#[test]
fn the_adapter_limits_are_read_and_f32_graphs_fit() {
    if common::require_gpu() {
        return;
    }
    let caps = WgpuBackend::new().caps().expect("caps");
    eprintln!("wgpu caps: {caps:?}");
    assert!(caps.max_binding >= 1 << 20, "{caps:?}");
    let (_, report) = legalize(&exp_graph(512), &WgpuBackend::new()).unwrap();
    assert!(report.is_complete());
}
