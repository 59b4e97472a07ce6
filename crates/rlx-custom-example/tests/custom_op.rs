//! The custom op goes through the same suites as built-in ops once registered: conformance on
//! the CPU backend, finite-difference gradients, vmap against a loop; plus the registry's
//! behaviour (text and JSON round trips, name clashes, kernel-or-decomposition-or-error).

use rlx_autodiff::check::{finite_differences, vmap_against_loop, vmap_patterns};
use rlx_cpu::CpuBackend;
use rlx_custom_example::{ScaledSoftplus, register};
use rlx_ir::custom::{CustomOpDef, RegistryError};
use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Error, Graph, HostTensor, Op, OpDef, Result, Sample, Shape, op::Arity, testkit};
use serde::{Deserialize, Serialize};

fn run(g: &Graph, feeds: &[(&str, HostTensor)]) -> Result<Vec<HostTensor>> {
    rlx_driver::run_host(&CpuBackend::new(), g, feeds)
}

fn custom_samples() -> Vec<Sample> {
    Op::all_samples().into_iter().filter(|s| matches!(s.op, Op::Custom(_))).collect()
}

#[test]
fn registered_op_passes_the_conformance_suite() {
    register().unwrap();
    let report = testkit::run_conformance(run);
    let ours = report.passed.iter().filter(|l| l.starts_with("scaled_softplus/")).count();
    assert_eq!(ours, 3, "the custom samples ran: {:?}", report.failed);
    report.assert_all_pass();
}

#[test]
fn registered_op_passes_the_gradient_and_vmap_checks() {
    register().unwrap();
    let samples = custom_samples();
    assert!(samples.iter().any(|s| s.label.starts_with("scaled_softplus/")));
    for s in &samples {
        assert_eq!(finite_differences(s, true), Ok(true), "{}", s.label);
        for p in vmap_patterns(s.inputs.len()) {
            vmap_against_loop(s, &p, Some(&run)).unwrap_or_else(|e| panic!("{}: {e}", s.label));
        }
    }
}

fn graph(dt: DType) -> Graph {
    let mut g = Graph::new("sp");
    let x = g.input("x", Shape::new(&[2, 3], dt));
    let y = g.custom(ScaledSoftplus { beta: 2.5 }, &[x]);
    let z = g.exp(y);
    g.set_outputs(vec![z]);
    g
}

#[test]
fn text_and_json_round_trip_through_the_registry() {
    register().unwrap();
    let g = graph(DType::F32);
    let text = g.to_text();
    assert!(text.contains("%1 = scaled_softplus(%0) {\"beta\":2.5} : f32[2,3]"), "{text}");
    assert_eq!(Graph::from_text(&text).unwrap(), g);
    assert_eq!(Graph::from_json(&g.to_json()).unwrap(), g);
    // Bad attributes and unknown names are parse errors that say so.
    let bad = text.replace("{\"beta\":2.5}", "{\"gamma\":1}");
    let e = Graph::from_text(&bad).unwrap_err().to_string();
    assert!(e.contains("scaled_softplus") && e.contains("beta"), "{e}");
    let unknown = text.replace("scaled_softplus", "never_registered");
    assert!(Graph::from_text(&unknown).unwrap_err().to_string().contains("unknown op `never_registered`"));
    let json = g.to_json().replace("scaled_softplus", "never_registered");
    assert!(
        Graph::from_json(&json).unwrap_err().to_string().contains("custom op `never_registered` is not registered")
    );
}

/// Ops with a reference only: 0 and 1 claim taken names (a custom op's, a built-in's); 2 has
/// neither kernel nor decomposition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Impostor<const K: u8> {}

impl<const K: u8> OpDef for Impostor<K> {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        Ok(ins[0].clone())
    }
    fn reference(&self, ins: &[&HostTensor], _out: &Shape) -> Result<HostTensor> {
        Ok(ins[0].clone())
    }
    fn samples() -> Vec<Sample> {
        vec![]
    }
}

impl<const K: u8> CustomOpDef for Impostor<K> {
    const NAME: &'static str = ["scaled_softplus", "fft", "opaque"][K as usize];
}

#[test]
fn name_clashes_are_typed_errors() {
    register().unwrap();
    // Registering the same type again is fine.
    register().unwrap();
    match rlx_ir::custom::register::<Impostor<0>>() {
        Err(RegistryError::NameClash { name, taken_by, .. }) => {
            assert_eq!(name, "scaled_softplus");
            assert!(taken_by.contains("ScaledSoftplus"), "{taken_by}");
        }
        other => panic!("expected a clash, got {other:?}"),
    }
    match rlx_ir::custom::register::<Impostor<1>>() {
        Err(RegistryError::NameClash { taken_by, .. }) => assert_eq!(taken_by, "the built-in op"),
        other => panic!("expected a clash with the built-in fft, got {other:?}"),
    }
    fn other_kernel(ctx: &rlx_cpu::kernels::KernelCtx<'_>) -> Result<rlx_cpu::kernels::Kernel> {
        Err(rlx_cpu::kernels::unsupported(ctx))
    }
    let e = rlx_cpu::custom::register_kernel("scaled_softplus", &[DType::F32], other_kernel).unwrap_err();
    assert!(e.to_string().contains("already registered for f32"), "{e}");
}

#[test]
fn kernel_else_decomposition_else_unsupported() {
    register().unwrap();
    let cpu = CpuBackend::new();
    // f32 has the registered kernel; f64 runs the decomposition.
    for (dt, native, decomposed) in [(DType::F32, 1, 0), (DType::F64, 0, 1)] {
        let (_, report) = rlx_driver::legalize(&graph(dt), &cpu).unwrap();
        let d = &report.ops["scaled_softplus"];
        assert_eq!((d.native, d.decomposed), (native, decomposed), "{dt}: {report}");
        let x = HostTensor::from_f64(&[2, 3], dt, &rand_f64(6, -2.0, 2.0, 3)).unwrap();
        let got = run(&graph(dt), &[("x", x.clone())]).unwrap();
        let want = rlx_ir::interp::evaluate(&graph(dt), &[("x", x)]).unwrap();
        testkit::compare(&got[0], &want[0]).unwrap();
    }
    // An op with neither: the error names it.
    let mut g = Graph::new("opaque");
    let x = g.input("x", Shape::new(&[2], DType::F32));
    let y = g.custom(Impostor::<2> {}, &[x]);
    g.set_outputs(vec![y]);
    let e = rlx_driver::legalize(&g, &cpu).unwrap_err();
    assert!(matches!(&e, Error::Unsupported { missing, .. } if missing.contains("`opaque`")), "{e}");
}
