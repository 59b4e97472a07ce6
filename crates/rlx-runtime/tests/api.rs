//! The public API end to end: the quickstart, typed runs, and every bad-input error.

use rlx_driver::Device;
use rlx_ir::{DType, Dim, Error, Graph, HostTensor, Shape};
use rlx_runtime::Session;

fn mlp() -> Graph {
    let mut g = Graph::new("mlp");
    let x = g.input("x", Shape::new(&[1, 4], DType::F32));
    let w = g.param("w", Shape::new(&[4, 2], DType::F32));
    let y = g.matmul(x, w);
    g.set_outputs(vec![y]);
    g
}

#[test]
fn quickstart() {
    let mut c = Session::new(Device::Cpu).compile(mlp()).unwrap();
    c.set_param("w", &[1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]).unwrap();
    let out = c.run(&[("x", &[1.0, 2.0, 3.0, 4.0])]).unwrap();
    assert_eq!(out, vec![vec![4.0, 6.0]]);
}

#[test]
fn f64_graph_computes_in_f64() {
    let mut g = Graph::new("f64");
    let x = g.input("x", Shape::new(&[3], DType::F64));
    let e = g.exp(x);
    let y = g.sum(e, &[0], false);
    g.set_outputs(vec![y]);
    let mut c = Session::new(Device::Cpu).compile(g).unwrap();
    let xs = [0.1f64, 1e-12, -0.3];
    let bytes: Vec<u8> = xs.iter().flat_map(|v| v.to_le_bytes()).collect();
    let out = c.run_typed(&[("x", &bytes, DType::F64)]).unwrap();
    assert_eq!(out[0].1, DType::F64);
    let got = f64::from_le_bytes(out[0].0[..8].try_into().unwrap());
    let want: f64 = xs.iter().map(|v| v.exp()).sum();
    assert!((got - want).abs() < 1e-15, "{got} vs {want}");
    // f32 arithmetic could not resolve 1e-12 next to 1.
    assert_ne!(got as f32 as f64, got);
}

#[test]
fn params_persist_across_runs_and_typed_params_work() {
    let mut c = Session::new(Device::Cpu).compile(mlp()).unwrap();
    let w: Vec<u8> = [1.0f32, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    c.set_param_typed("w", &w, DType::F32).unwrap();
    for _ in 0..3 {
        assert_eq!(c.run(&[("x", &[1.0, 1.0, 1.0, 1.0])]).unwrap(), vec![vec![2.0, 2.0]]);
    }
    let t = HostTensor::from_f32(&[1, 4], &[0.0, 0.0, 1.0, 0.0]).unwrap();
    assert_eq!(c.run_tensors(&[("x", &t)]).unwrap()[0].to_f32_vec().unwrap(), vec![1.0, 0.0]);
}

#[test]
fn bad_names_lengths_dtypes_and_unset_params_are_errors() {
    let mut c = Session::new(Device::Cpu).compile(mlp()).unwrap();
    let e = c.run(&[("x", &[1.0, 2.0, 3.0, 4.0])]).unwrap_err();
    assert!(matches!(&e, Error::ParamNotSet { name, .. } if name == "w"), "{e}");
    assert!(matches!(c.set_param("nope", &[0.0]), Err(Error::UnknownName { kind: "param", .. })));
    let e = c.set_param("w", &[1.0; 7]).unwrap_err();
    assert!(matches!(&e, Error::DataLength { expected: 8, got: 7, .. }), "{e}");
    let e = c.set_param_typed("w", &[0u8; 64], DType::F64).unwrap_err();
    assert!(matches!(&e, Error::DTypeMismatch { expected: DType::F32, got: DType::F64, .. }), "{e}");
    c.set_param("w", &[0.0; 8]).unwrap();
    let e = c.run(&[("y", &[1.0; 4])]).unwrap_err();
    assert!(matches!(&e, Error::UnknownName { kind: "input", .. }), "{e}");
    assert!(e.to_string().contains("x: f32[1,4]"), "{e}");
    assert!(matches!(c.run(&[]), Err(Error::MissingInput { .. })));
    let e = c.run(&[("x", &[1.0; 3])]).unwrap_err();
    assert!(matches!(&e, Error::DataLength { expected: 4, got: 3, .. }), "{e}");
    assert!(c.run(&[("x", &[1.0; 4]), ("x", &[1.0; 4])]).is_err());
    let e = c.run_typed(&[("x", &[0u8; 16], DType::I32)]).unwrap_err();
    assert!(matches!(&e, Error::DTypeMismatch { .. }), "{e}");
}

#[test]
fn builder_shape_errors_reach_compile_with_op_node_and_shapes() {
    let mut g = Graph::new("bad");
    let a = g.input("a", Shape::new(&[2, 3], DType::F32));
    let b = g.input("b", Shape::new(&[4, 5], DType::F32));
    let y = g.matmul(a, b);
    g.set_outputs(vec![y]);
    let e = Session::new(Device::Cpu).compile(g).err().expect("must fail");
    let msg = e.to_string();
    assert!(
        msg.contains("matmul") && msg.contains("%2") && msg.contains("f32[2,3]") && msg.contains("f32[4,5]"),
        "{msg}"
    );
}

#[test]
fn foreign_node_ids_and_missing_outputs_are_errors() {
    let mut g = Graph::new("g");
    let x = g.input("x", Shape::new(&[2], DType::F32));
    let y = g.add(x, rlx_ir::NodeId(99));
    g.set_outputs(vec![y]);
    assert!(matches!(g.verify(), Err(Error::BadNodeId { node: 99, .. })));
    let mut h = Graph::new("h");
    h.input("x", Shape::new(&[2], DType::F32));
    assert!(Session::new(Device::Cpu).compile(h).is_err());
    let mut d = Graph::new("dup");
    d.input("x", Shape::new(&[2], DType::F32));
    let x2 = d.input("x", Shape::new(&[2], DType::F32));
    d.set_outputs(vec![x2]);
    assert!(d.verify().is_err());
}

#[test]
fn dynamic_dims_must_be_bound_before_compile() {
    let mut g = Graph::new("dyn");
    let x = g.input("x", Shape::with_dims(vec![Dim::Sym("batch".into()), Dim::Fixed(3)], DType::F32));
    let y = g.softmax(x, -1);
    g.set_outputs(vec![y]);
    assert_eq!(g.shape(y).unwrap().to_string(), "f32[batch,3]");
    let e = Session::new(Device::Cpu).compile(g.clone()).err().expect("unbound");
    assert!(matches!(&e, Error::UnboundDim { symbol, .. } if symbol == "batch"), "{e}");
    let bound = g.bind_dims(&[("batch", 2)]).unwrap();
    let mut c = Session::new(Device::Cpu).compile(bound).unwrap();
    let out = c.run(&[("x", &[0.0, 0.0, 0.0, 1.0, 1.0, 1.0])]).unwrap();
    assert!(out[0].iter().all(|v| (v - 1.0 / 3.0).abs() < 1e-6));
}

#[test]
fn unavailable_device_is_an_error_and_report_shows_decompositions() {
    assert!(matches!(Session::new(Device::Cuda).compile(mlp()), Err(Error::DeviceUnavailable { .. })));
    // fake_quant has no CPU kernel: it runs as its decomposition (div, round, clamp, mul).
    let mut g = Graph::new("fq");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let s = g.scalar(0.1, DType::F32);
    let z = g.scalar(0.0, DType::F32);
    let y = g.fake_quant(x, s, z, 8, true, None);
    g.set_outputs(vec![y]);
    let report = Session::new(Device::Cpu).dispatch_report(&g).unwrap();
    assert_eq!(report.ops["fake_quant"].decomposed, 1);
    assert!(report.ops["round"].native >= 1);
    assert!(report.to_string().contains("fake_quant"));
}

/// `run` reads f32 inputs in place and converts the others (here f16 and i32), and returns f32
/// outputs as written and the others converted: the same values `run_tensors` gives.
#[test]
fn run_converts_only_what_is_not_f32() {
    let mut g = Graph::new("mixed");
    let a = g.input("a", Shape::new(&[2, 3], DType::F32));
    let h = g.input("h", Shape::new(&[2, 3], DType::F16));
    let i = g.input("i", Shape::new(&[2, 3], DType::I32));
    let w = g.param("w", Shape::new(&[2, 3], DType::F16));
    let hf = g.cast(h, DType::F32);
    let wf = g.cast(w, DType::F32);
    let s = g.add(a, hf);
    let s = g.mul(s, wf);
    let sh = g.cast(s, DType::F16);
    let ii = g.add(i, i);
    g.set_outputs(vec![s, sh, ii]);
    let mut c = Session::new(Device::Cpu).compile(g).unwrap();
    c.set_param("w", &[1.0, 0.5, 2.0, -1.0, 0.1, 3.0]).unwrap();
    let (av, hv, iv) =
        ([1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [0.1f32, 0.2, 0.3, -0.4, 0.5, 0.6], [1.0f32, -2.0, 3.0, 4.0, 5.0, 7.9]);
    let out = c.run(&[("a", &av), ("h", &hv), ("i", &iv)]).unwrap();
    let t = |d: DType, v: &[f32]| HostTensor::from_f32(&[2, 3], v).unwrap().cast(d);
    let (at, ht, it) = (t(DType::F32, &av), t(DType::F16, &hv), t(DType::I32, &iv));
    let want = c.run_tensors(&[("a", &at), ("h", &ht), ("i", &it)]).unwrap();
    for (o, w) in out.iter().zip(&want) {
        assert_eq!(o, &w.to_f32_vec().unwrap());
    }
    // Spot values: f16 rounding of h, and the i32 input truncated (7.9 -> 7) then doubled.
    assert_eq!(out[2], vec![2.0, -4.0, 6.0, 8.0, 10.0, 14.0]);
    let h0 = HostTensor::from_f32(&[1], &[0.1]).unwrap().cast(DType::F16).to_f32_vec().unwrap()[0];
    assert_ne!(h0, 0.1);
    assert_eq!(out[0][0], 1.0 + h0);
}
