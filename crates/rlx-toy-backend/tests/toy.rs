//! The toy backend through public API only: legalize decomposes what it lacks or reports it
//! missing, the dispatch report counts both, and a compiled graph runs and matches the
//! reference interpreter.

use rlx::driver::{Backend, legalize};
use rlx::ir::ops::{BinaryKind, Instr, UnaryKind};
use rlx::ir::{DType, Error, Graph, HostTensor, Shape, interp};
use rlx::prelude::Device;
use rlx::runtime::Session;
use rlx_toy_backend::ToyBackend;
use std::sync::Arc;

fn session() -> Session {
    // The toy runs on the host; `Device::Cpu` is only what the session reports.
    Session::with_backend(Device::Cpu, Arc::new(ToyBackend::new()))
}

/// relu(x @ w + b) * 0.5 + x2, the tail written as one `fused` region the toy has no kernel
/// for: legalize must expand it into add / mul / relu.
fn mlp() -> Graph {
    let mut g = Graph::new("toy_mlp");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let x2 = g.input("x2", Shape::new(&[2, 4], DType::F32));
    let w = g.param("w", Shape::new(&[3, 4], DType::F32));
    let b = g.param("b", Shape::new(&[2, 4], DType::F32));
    let h = g.matmul(x, w);
    let program = vec![
        Instr::Input(0),
        Instr::Input(1),
        Instr::Binary(BinaryKind::Add, 0, 1),
        Instr::Unary(UnaryKind::Relu, 2),
        Instr::Const(0.5),
        Instr::Binary(BinaryKind::Mul, 3, 4),
        Instr::Input(2),
        Instr::Binary(BinaryKind::Add, 5, 6),
    ];
    let y = g.fused(program, &[h, b, x2]);
    g.set_outputs(vec![y]);
    g
}

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7 + seed * 3) % 11) as f32 / 4.0 - 1.25).collect()
}

#[test]
fn legalize_decomposes_what_the_toy_lacks() {
    let toy = ToyBackend::new();
    let (legal, report) = legalize(&mlp(), &toy).expect("fused decomposes into add, mul, relu");
    assert!(report.is_complete(), "{report}");
    assert_eq!(report.backend, "toy");
    assert_eq!(report.ops["fused"].decomposed, 1, "{report}");
    assert_eq!(report.ops["add"].native, 2, "{report}");
    assert_eq!(report.ops["mul"].native, 1, "{report}");
    assert_eq!(report.ops["relu"].native, 1, "{report}");
    assert_eq!(report.ops["matmul"].native, 1, "{report}");
    assert!(legal.nodes().iter().all(|n| n.op.def().name() != "fused"));
    // The session's dispatch report is the same legalization, reached through the runtime.
    assert_eq!(session().dispatch_report(&mlp()).unwrap(), report);
}

#[test]
fn what_cannot_be_decomposed_is_reported_missing() {
    let mut g = Graph::new("toy_softmax");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let y = g.softmax(x, -1);
    g.set_outputs(vec![y]);
    // softmax decomposes into reductions, exp and div, which the toy lacks.
    let err = session().compile(g.clone()).err().expect("the toy has no exp");
    let Error::Unsupported { backend, missing, report } = &err else { panic!("expected Unsupported, got {err}") };
    assert_eq!(backend, "toy");
    assert!(missing.contains("`exp`"), "{missing}");
    assert!(report.contains("dispatch report for backend `toy`"), "{report}");
    assert!(session().dispatch_report(&g).is_err());

    // A node over the toy's shapes names the reason its `missing_reason` gives.
    let mut g = Graph::new("toy_batched");
    let a = g.input("a", Shape::new(&[2, 2, 3], DType::F32));
    let b = g.input("b", Shape::new(&[2, 3, 2], DType::F32));
    let y = g.matmul(a, b);
    g.set_outputs(vec![y]);
    let err = session().compile(g).err().expect("batched matmul is missing");
    assert!(err.to_string().contains("2-D operands"), "{err}");
}

#[test]
fn compiled_graph_matches_the_reference() {
    let g = mlp();
    let mut c = session().compile(g.clone()).expect("compiles on the toy");
    let (w, b) = (values(12, 1), values(8, 2));
    c.set_param("w", &w).unwrap();
    c.set_param("b", &b).unwrap();
    for seed in 0..3 {
        let (x, x2) = (values(6, seed + 3), values(8, seed + 5));
        let got = c.run(&[("x", &x), ("x2", &x2)]).unwrap();
        let t = |d: &[usize], v: &[f32]| HostTensor::from_f32(d, v).unwrap();
        let feeds = [("x", t(&[2, 3], &x)), ("x2", t(&[2, 4], &x2)), ("w", t(&[3, 4], &w)), ("b", t(&[2, 4], &b))];
        let want = interp::evaluate(&g, &feeds).unwrap()[0].to_f64_vec().unwrap();
        assert_eq!(got[0].len(), want.len());
        for (a, e) in got[0].iter().zip(&want) {
            assert!((*a as f64 - e).abs() <= 1e-6 * (1.0 + e.abs()), "toy {a} vs reference {e}");
        }
    }
    assert_eq!(session().backend().unwrap().name(), "toy");
}

#[test]
fn the_toy_states_the_conservative_capabilities() {
    let caps = ToyBackend::new().capabilities();
    assert_eq!(caps, rlx::driver::Capabilities::default());
    assert!(!caps.matmul_transpose_flags);
}

#[test]
fn a_backend_compile_failure_carries_the_dispatch_report() {
    // The toy keeps no state across runs: a graph with a state update fails in its compile,
    // and the error names the backend and graph and carries the report of what was dispatched.
    let mut g = Graph::new("toy_state");
    let x = g.input("x", Shape::new(&[4], DType::F32));
    let acc = g.param("acc", Shape::new(&[4], DType::F32));
    let next = g.add(acc, x);
    g.update_param(acc, next);
    g.set_outputs(vec![next]);
    match session().compile(g) {
        Err(Error::Compile { backend, graph, source, report }) => {
            assert_eq!((backend.as_str(), graph.as_str()), ("toy", "toy_state"));
            assert!(source.to_string().contains("param updates"), "{source}");
            assert!(report.contains("dispatch report for backend `toy`") && report.contains("add"), "{report}");
        }
        other => panic!("expected Error::Compile, got {:?}", other.map(|_| ())),
    }
}
