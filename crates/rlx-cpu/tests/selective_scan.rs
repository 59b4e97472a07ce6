//! `selective_scan` against a numpy transcription of mamba's `selective_scan_ref`
//! (`tools/selective_scan_fixtures.py`, float64): the reference interpreter, the native CPU
//! kernel and the scan decomposition a backend without the kernel gets, within 1e-12 (f64) and
//! 1e-4 (f32) of numpy, relative to the largest output magnitude (at least 1).

use rlx_cpu::CpuBackend;
use rlx_driver::{Backend, CompileRequest, Executable};
use rlx_ir::ops::selective_scan::{ScanDims, sample_inputs};
use rlx_ir::ops::{SelectiveScan, SelectiveScanGrad};
use rlx_ir::{DType, Graph, HostTensor, Node, Op, Result, Shape, interp};
use serde_json::Value;

struct Case {
    label: String,
    op: SelectiveScan,
    /// Operands in the op's order, as (shape, f64 values).
    ins: Vec<(Vec<usize>, Vec<f64>)>,
    y: (Vec<usize>, Vec<f64>),
}

fn tensor(v: &Value) -> (Vec<usize>, Vec<f64>) {
    let shape = v["shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
    let data = v["data"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    (shape, data)
}

fn cases() -> Vec<Case> {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/selective_scan_numpy.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let op = SelectiveScan {
                delta_softplus: c["delta_softplus"].as_bool().unwrap(),
                has_d: !c["D"].is_null(),
                has_z: !c["z"].is_null(),
                has_bias: !c["delta_bias"].is_null(),
            };
            let names = ["u", "delta", "A", "B", "C", "D", "z", "delta_bias"];
            let ins = names.iter().filter(|n| !c[**n].is_null()).map(|n| tensor(&c[*n])).collect();
            Case { label: c["label"].as_str().unwrap().into(), op, ins, y: tensor(&c["y"]) }
        })
        .collect()
}

fn graph(op: &SelectiveScan, shapes: &[Vec<usize>], dt: DType) -> Graph {
    let mut g = Graph::new("selective_scan");
    let ins: Vec<_> = shapes.iter().enumerate().map(|(i, s)| g.input(&format!("x{i}"), Shape::new(s, dt))).collect();
    let y = g.selective_scan(op.clone(), &ins);
    g.set_outputs(vec![y]);
    g.verify().unwrap();
    g
}

/// Max |got - want| over max(1, max |want|).
fn err(got: &HostTensor, want: &[f64]) -> f64 {
    let got = got.to_f64_vec().unwrap();
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    got.iter().zip(want).fold(0.0f64, |m, (a, b)| m.max((a - b).abs())) / scale
}

type Runner<'a> = &'a dyn Fn(&Graph, &[(&str, HostTensor)]) -> Result<Vec<HostTensor>>;

fn check(what: &str, run: Runner<'_>) -> usize {
    let (mut checked, mut failed) = (0, vec![]);
    for c in cases() {
        for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-4)] {
            let shapes: Vec<Vec<usize>> = c.ins.iter().map(|t| t.0.clone()).collect();
            let g = graph(&c.op, &shapes, dt);
            let names: Vec<String> = (0..c.ins.len()).map(|i| format!("x{i}")).collect();
            let feeds: Vec<(&str, HostTensor)> = c
                .ins
                .iter()
                .zip(&names)
                .map(|((s, v), n)| (n.as_str(), HostTensor::from_f64(s, dt, v).unwrap()))
                .collect();
            match run(&g, &feeds) {
                Ok(y) => {
                    assert_eq!(y[0].dims(), c.y.0, "{} {dt}: shape", c.label);
                    let e = err(&y[0], &c.y.1);
                    if e > tol {
                        failed.push(format!("{} {dt}: error {e:.3e} > {tol:e}", c.label));
                    }
                    checked += 1;
                }
                Err(e) => failed.push(format!("{} {dt}: {e}", c.label)),
            }
        }
    }
    assert!(failed.is_empty(), "{what}: {} failures:\n{}", failed.len(), failed.join("\n"));
    checked
}

#[test]
fn reference_matches_numpy() {
    assert_eq!(check("reference", &|g, f| interp::evaluate(g, f)), 2 * cases().len());
}

#[test]
fn cpu_kernel_matches_numpy() {
    let cpu = CpuBackend::new();
    assert_eq!(check("cpu", &|g, f| rlx_driver::run_host(&cpu, g, f)), 2 * cases().len());
}

/// The CPU backend without the selective_scan kernels: what a backend that lacks one gets.
struct NoKernel(CpuBackend);

impl Backend for NoKernel {
    fn name(&self) -> &'static str {
        "cpu-without-selective-scan"
    }
    fn supports(&self, node: &Node, inputs: &[&Shape]) -> bool {
        !matches!(node.op, Op::SelectiveScan(_) | Op::SelectiveScanGrad(_)) && self.0.supports(node, inputs)
    }
    fn compile(&self, req: &CompileRequest<'_>) -> Result<Box<dyn Executable>> {
        self.0.compile(req)
    }
}

#[test]
fn decomposition_matches_numpy() {
    let b = NoKernel(CpuBackend::new());
    let n = check("decomposed", &|g, f| {
        let (_, report) = rlx_driver::legalize(g, &b)?;
        assert!(report.ops.iter().all(|(op, d)| op != "selective_scan" || d.native == 0), "{report}");
        rlx_driver::run_host(&b, g, f)
    });
    assert_eq!(n, 2 * cases().len());
}

#[test]
fn kernel_matches_the_reference_across_threads() {
    // Enough rows and steps that the kernel splits them across the pool.
    let cpu = CpuBackend::new();
    let op = SelectiveScan { delta_softplus: true, has_d: true, has_z: true, has_bias: true };
    for dt in [DType::F64, DType::F32] {
        let ins = sample_inputs(&op, dt, ScanDims { b: 3, d: 24, n: 16, l: 100 }, 7);
        let shapes: Vec<Vec<usize>> = ins.iter().map(|t| t.dims()).collect();
        let g = graph(&op, &shapes, dt);
        let names: Vec<String> = (0..ins.len()).map(|i| format!("x{i}")).collect();
        let feeds: Vec<(&str, HostTensor)> = names.iter().map(|n| n.as_str()).zip(ins).collect();
        let got = rlx_driver::run_host(&cpu, &g, &feeds).unwrap();
        let want = interp::evaluate(&g, &feeds).unwrap();
        let tol = if dt == DType::F64 { 1e-12 } else { 1e-4 };
        let e = err(&got[0], &want[0].to_f64_vec().unwrap());
        assert!(e < tol, "{dt}: {e:e}");
    }
}

#[test]
fn bad_shapes_are_inference_errors() {
    let mut g = Graph::new("bad");
    let s = |d: &[usize]| Shape::new(d, DType::F32);
    let (u, dl, a) = (g.input("u", s(&[1, 2, 3])), g.input("dl", s(&[1, 2, 3])), g.input("a", s(&[2, 4])));
    let (bm, cm) = (g.input("b", s(&[1, 5, 3])), g.input("c", s(&[1, 4, 3])));
    g.selective_scan(SelectiveScan::default(), &[u, dl, a, bm, cm]);
    let e = g.check().unwrap_err().to_string();
    assert!(e.contains("selective_scan") && e.contains("B must be [1, 4, 3]"), "{e}");
    let mut g = Graph::new("bad");
    let (u, dl, a) = (g.input("u", s(&[1, 2, 3])), g.input("dl", s(&[1, 2, 3])), g.input("a", s(&[2, 4])));
    let (bm, cm) = (g.input("b", s(&[1, 4, 3])), g.input("c", s(&[1, 4, 3])));
    g.selective_scan(SelectiveScan { has_d: true, ..Default::default() }, &[u, dl, a, bm, cm]);
    let e = g.check().unwrap_err().to_string();
    assert!(e.contains("needs 6 operands"), "{e}");
}

fn grad_graph(op: &SelectiveScan, shapes: &[Vec<usize>], dt: DType) -> Graph {
    let mut g = Graph::new("selective_scan_grad");
    let ins: Vec<_> = shapes.iter().enumerate().map(|(i, s)| g.input(&format!("x{i}"), Shape::new(s, dt))).collect();
    let y = g.add_node(SelectiveScanGrad { scan: op.clone() }, &ins);
    g.set_outputs(vec![y]);
    g.verify().unwrap();
    g
}

/// The native backward and the decomposed one against the reference, for every combination of
/// the optional operands, at sizes that split rows across the pool.
#[test]
fn grad_kernel_and_decomposition_match_the_reference() {
    let cpu = CpuBackend::new();
    let nok = NoKernel(CpuBackend::new());
    let flags = [
        SelectiveScan { delta_softplus: true, has_d: true, has_z: true, has_bias: true },
        SelectiveScan::default(),
        SelectiveScan { has_z: true, ..Default::default() },
        SelectiveScan { has_d: true, has_bias: true, ..Default::default() },
    ];
    for (k, op) in flags.iter().enumerate() {
        for dt in [DType::F64, DType::F32] {
            let s = ScanDims { b: 2, d: 24, n: 8, l: 70 };
            let mut ins = sample_inputs(op, dt, s, 20 + k as u64);
            let n = s.b * s.d * s.l;
            let dy = rlx_ir::ops::util::rand_f64(n, -1.0, 1.0, 90 + k as u64);
            ins.push(HostTensor::from_f64(&[s.b, s.d, s.l], dt, &dy).unwrap());
            let shapes: Vec<Vec<usize>> = ins.iter().map(|t| t.dims()).collect();
            let g = grad_graph(op, &shapes, dt);
            let names: Vec<String> = (0..ins.len()).map(|i| format!("x{i}")).collect();
            let feeds: Vec<(&str, HostTensor)> = names.iter().map(|n| n.as_str()).zip(ins).collect();
            let want = interp::evaluate(&g, &feeds).unwrap()[0].to_f64_vec().unwrap();
            let tol = if dt == DType::F64 { 1e-11 } else { 1e-4 };
            let native = rlx_driver::run_host(&cpu, &g, &feeds).unwrap();
            assert!(err(&native[0], &want) < tol, "{op:?} {dt} native: {:e}", err(&native[0], &want));
            let (_, report) = rlx_driver::legalize(&g, &nok).unwrap();
            assert!(report.ops.iter().all(|(o, d)| o != "selective_scan_grad" || d.native == 0), "{report}");
            let dec = rlx_driver::run_host(&nok, &g, &feeds).unwrap();
            assert!(err(&dec[0], &want) < tol, "{op:?} {dt} decomposed: {:e}", err(&dec[0], &want));
        }
    }
}
