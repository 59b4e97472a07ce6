//! The FFT family against numpy (`tools/fft_fixtures.py`, float64 values): the reference
//! interpreter, the CPU kernels (rustfft / realfft) and the DFT-as-matmul decomposition a
//! backend without an FFT kernel gets, within 1e-12 (f64) and 1e-5 (f32) of numpy, relative to
//! the largest output magnitude (at least 1).

use rlx_cpu::CpuBackend;
use rlx_driver::{Backend, CompileRequest, Executable};
use rlx_ir::ops::FftNorm;
use rlx_ir::{DType, Error, Graph, HostTensor, Node, Op, Result, Shape, interp};
use serde_json::Value;

struct Case {
    label: String,
    op: String,
    n: Option<Vec<usize>>,
    /// numpy's `axis` (one) or `axes` (fft2 / ifft2), when not the default.
    axis: Option<Vec<i64>>,
    norm: FftNorm,
    x: (Vec<usize>, Vec<f64>),
    y: (Vec<usize>, Vec<f64>),
}

fn tensor(v: &Value) -> (Vec<usize>, Vec<f64>) {
    let shape = v["shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
    let data = v["data"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    (shape, data)
}

fn cases() -> Vec<Case> {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fft_numpy.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            label: c["label"].as_str().unwrap().into(),
            op: c["op"].as_str().unwrap().into(),
            n: match &c["n"] {
                Value::Null => None,
                Value::Array(a) => Some(a.iter().map(|x| x.as_u64().unwrap() as usize).collect()),
                v => Some(vec![v.as_u64().unwrap() as usize]),
            },
            axis: match &c["axis"] {
                Value::Null => None,
                Value::Array(a) => Some(a.iter().map(|x| x.as_i64().unwrap()).collect()),
                v => Some(vec![v.as_i64().unwrap()]),
            },
            norm: FftNorm::from_name(c["norm"].as_str().unwrap()).unwrap(),
            x: tensor(&c["x"]),
            y: tensor(&c["y"]),
        })
        .collect()
}

/// The case as a graph built with the numpy-like builders.
fn graph(c: &Case, dt: DType) -> Graph {
    let mut g = Graph::new(c.label.clone());
    let x = g.input("x", Shape::new(&c.x.0, dt));
    let n = c.n.as_ref().map(|v| v[0]);
    let s = c.n.as_ref().and_then(|v| (v.len() == 2).then(|| [v[0], v[1]]));
    let y = match (c.op.as_str(), c.axis.as_deref()) {
        ("fft", Some(a)) => g.fft_axis(x, n, a[0], c.norm),
        ("ifft", Some(a)) => g.ifft_axis(x, n, a[0], c.norm),
        ("rfft", Some(a)) => g.rfft_axis(x, n, a[0], c.norm),
        ("irfft", Some(a)) => g.irfft_axis(x, n, a[0], c.norm),
        ("fft2", Some(a)) => g.fft2_axes(x, s, [a[0], a[1]], c.norm),
        ("ifft2", Some(a)) => g.ifft2_axes(x, s, [a[0], a[1]], c.norm),
        (op, _) => match op {
            "fft" => g.fft(x, n, c.norm),
            "ifft" => g.ifft(x, n, c.norm),
            "rfft" => g.rfft(x, n, c.norm),
            "irfft" => g.irfft(x, n, c.norm),
            "fft2" => g.fft2(x, s, c.norm),
            "ifft2" => g.ifft2(x, s, c.norm),
            "stft" | "istft" => {
                let v = c.n.as_ref().unwrap();
                let w = g.hann_window(v[0], dt);
                if c.op == "stft" { g.stft(x, v[0], v[1], w, c.norm) } else { g.istft(x, v[0], v[1], w, c.norm) }
            }
            op => panic!("unknown op {op}"),
        },
    };
    g.set_outputs(vec![y]);
    g.verify().unwrap_or_else(|e| panic!("{}: {e}", c.label));
    g
}

/// Max |got - want| over max(1, max |want|).
fn err(got: &HostTensor, want: &[f64]) -> f64 {
    let got = got.to_f64_vec().unwrap();
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    got.iter().zip(want).fold(0.0f64, |m, (a, b)| m.max((a - b).abs())) / scale
}

/// Runs a graph on named inputs: the reference interpreter or a backend.
type Runner<'a> = &'a dyn Fn(&Graph, &[(&str, HostTensor)]) -> Result<Vec<HostTensor>>;

fn check(what: &str, run: Runner<'_>) -> usize {
    let mut checked = 0;
    let mut failed = vec![];
    for c in cases() {
        for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-5)] {
            let g = graph(&c, dt);
            let x = HostTensor::from_f64(&c.x.0, dt, &c.x.1).unwrap();
            let y = match run(&g, &[("x", x)]) {
                Ok(mut y) => y.remove(0),
                Err(e) => {
                    failed.push(format!("{} {dt}: {e}", c.label));
                    continue;
                }
            };
            assert_eq!(y.dims(), c.y.0, "{} {dt}: shape", c.label);
            let e = err(&y, &c.y.1);
            if e > tol {
                failed.push(format!("{} {dt}: error {e:.3e} > {tol:e}", c.label));
            }
            checked += 1;
        }
    }
    assert!(failed.is_empty(), "{what}: {} failures:\n{}", failed.len(), failed.join("\n"));
    checked
}

#[test]
fn reference_matches_numpy() {
    let n = check("reference", &|g, f| interp::evaluate(g, f));
    assert_eq!(n, 2 * cases().len());
}

#[test]
fn cpu_kernels_match_numpy() {
    let cpu = CpuBackend::new();
    let n = check("cpu", &|g, f| rlx_driver::run_host(&cpu, g, f));
    assert_eq!(n, 2 * cases().len());
}

/// The CPU backend without its FFT kernel: what a backend that lacks one gets.
struct NoFft(CpuBackend);

impl Backend for NoFft {
    fn name(&self) -> &'static str {
        "cpu-without-fft"
    }
    fn supports(&self, node: &Node, inputs: &[&Shape]) -> bool {
        !matches!(node.op, Op::Fft(_)) && self.0.supports(node, inputs)
    }
    fn compile(&self, req: &CompileRequest<'_>) -> Result<Box<dyn Executable>> {
        self.0.compile(req)
    }
}

#[test]
fn decomposition_matches_numpy_and_past_its_bound_is_a_typed_error() {
    let b = NoFft(CpuBackend::new());
    let n = check("decomposed", &|g, f| {
        let (_, report) = rlx_driver::legalize(g, &b)?;
        assert!(report.ops.iter().all(|(op, d)| !op.contains("fft") || d.native == 0), "{report}");
        rlx_driver::run_host(&b, g, f)
    });
    assert_eq!(n, 2 * cases().len());
    // 2^12 complex points: the dense DFT would be 2^26 entries.
    let mut g = Graph::new("big");
    let x = g.input("x", Shape::new(&[4096, 2], DType::F32));
    let y = g.fft(x, None, FftNorm::Backward);
    g.set_outputs(vec![y]);
    let e = rlx_driver::legalize(&g, &b).unwrap_err();
    assert!(matches!(&e, Error::Unsupported { missing, .. } if missing.contains("`fft`")), "{e}");
}

#[test]
fn large_and_batched_transforms_match_the_reference() {
    // Many lanes (split across threads) and one long lane, against the naive f64 DFT.
    let cpu = CpuBackend::new();
    for (dims, n) in [(vec![64, 512], 512), (vec![1, 1 << 12], 1 << 12), (vec![3, 1000], 1000)] {
        let v = rlx_ir::ops::util::rand_f64(dims.iter().product(), -1.0, 1.0, 5);
        let x = HostTensor::from_f64(&dims, DType::F64, &v).unwrap();
        let mut g = Graph::new("rfft");
        let xi = g.input("x", x.shape.clone());
        let f = g.rfft(xi, None, FftNorm::Ortho);
        let y = g.irfft(f, Some(n), FftNorm::Ortho);
        g.set_outputs(vec![f, y]);
        let got = rlx_driver::run_host(&cpu, &g, &[("x", x.clone())]).unwrap();
        let want = interp::evaluate(&g, &[("x", x.clone())]).unwrap();
        assert!(err(&got[0], &want[0].to_f64_vec().unwrap()) < 1e-12, "{dims:?}");
        // irfft(rfft(x)) = x.
        assert!(err(&got[1], &v) < 1e-12, "{dims:?} round trip");
    }
}

#[test]
fn bad_lengths_are_inference_errors() {
    let mut g = Graph::new("bad");
    let x = g.input("x", Shape::new(&[4, 3], DType::F32));
    g.fft(x, None, FftNorm::Backward);
    let e = g.check().unwrap_err().to_string();
    assert!(e.contains("op `fft`") && e.contains("[.., 4, 2]"), "{e}");
    let mut g = Graph::new("bad");
    let x = g.input("x", Shape::new(&[4], DType::I32));
    g.rfft(x, None, FftNorm::Backward);
    assert!(g.check().unwrap_err().to_string().contains("needs f32 or f64"));
    let mut g = Graph::new("bad");
    let x = g.input("x", Shape::new(&[1, 2], DType::F32));
    g.irfft(x, None, FftNorm::Backward);
    assert!(g.check().unwrap_err().to_string().contains("n must be at least 1"));
}

#[test]
fn an_axis_out_of_range_is_an_inference_error() {
    let mut g = Graph::new("bad");
    let x = g.input("x", Shape::new(&[4, 3, 2], DType::F32));
    g.fft_axis(x, None, 2, FftNorm::Backward);
    let e = g.check().unwrap_err().to_string();
    assert!(e.contains("op `fft`") && e.contains("axis 2 is out of range for 2 axes"), "{e}");
    let mut g = Graph::new("bad");
    let x = g.input("x", Shape::new(&[4, 3], DType::F32));
    g.rfft_axis(x, None, -3, FftNorm::Backward);
    assert!(g.check().unwrap_err().to_string().contains("axis -3 is out of range for 2 axes"));
}
