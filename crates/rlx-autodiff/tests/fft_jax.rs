//! FFT gradients against JAX (`tools/fft_fixtures.py`, float64): `grad(sum(w * f(x)))` for
//! fft / ifft / rfft / irfft / fft2 / ifft2 with numpy's `n`, `norm` and `axis` / `axes`, complex values as a
//! trailing pair axis. The rules are JAX's transposes (the 1-2-1 mask for rfft / irfft); RLX
//! must agree within 1e-9 in f64 on the reference interpreter and on the CPU, 1e-4 in f32.

mod common;

use rlx_autodiff::grad;
use rlx_ir::ops::FftNorm;
use rlx_ir::{DType, Graph, HostTensor, Shape, interp};
use serde_json::Value;

fn tensor(v: &Value) -> (Vec<usize>, Vec<f64>) {
    let shape = v["shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
    let data = v["data"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    (shape, data)
}

/// `sum(w * f(x))` and its gradient with respect to x.
fn grad_graph(c: &Value, dt: DType) -> Graph {
    let (xs, _) = tensor(&c["x"]);
    let (ws, wv) = tensor(&c["w"]);
    let norm = FftNorm::from_name(c["norm"].as_str().unwrap()).unwrap();
    let n: Option<Vec<usize>> = match &c["n"] {
        Value::Null => None,
        Value::Array(a) => Some(a.iter().map(|x| x.as_u64().unwrap() as usize).collect()),
        v => Some(vec![v.as_u64().unwrap() as usize]),
    };
    let (n1, s) = (n.as_ref().map(|v| v[0]), n.as_ref().and_then(|v| (v.len() == 2).then(|| [v[0], v[1]])));
    let mut g = Graph::new(c["label"].as_str().unwrap());
    let x = g.input("x", Shape::new(&xs, dt));
    let axis: Option<Vec<i64>> = match &c["axis"] {
        Value::Null => None,
        Value::Array(a) => Some(a.iter().map(|x| x.as_i64().unwrap()).collect()),
        v => Some(vec![v.as_i64().unwrap()]),
    };
    let y = match (c["op"].as_str().unwrap(), axis) {
        ("fft", Some(a)) => g.fft_axis(x, n1, a[0], norm),
        ("ifft", Some(a)) => g.ifft_axis(x, n1, a[0], norm),
        ("rfft", Some(a)) => g.rfft_axis(x, n1, a[0], norm),
        ("irfft", Some(a)) => g.irfft_axis(x, n1, a[0], norm),
        ("fft2", Some(a)) => g.fft2_axes(x, s, [a[0], a[1]], norm),
        ("ifft2", Some(a)) => g.ifft2_axes(x, s, [a[0], a[1]], norm),
        (op, _) => match op {
            "fft" => g.fft(x, n1, norm),
            "ifft" => g.ifft(x, n1, norm),
            "rfft" => g.rfft(x, n1, norm),
            "irfft" => g.irfft(x, n1, norm),
            "fft2" => g.fft2(x, s, norm),
            "ifft2" => g.ifft2(x, s, norm),
            "stft" | "istft" => {
                let v = n.as_ref().unwrap();
                let w = g.hann_window(v[0], dt);
                if c["op"] == "stft" { g.stft(x, v[0], v[1], w, norm) } else { g.istft(x, v[0], v[1], w, norm) }
            }
            op => panic!("unknown op {op}"),
        },
    };
    let w = g.constant(HostTensor::from_f64(&ws, dt, &wv).unwrap());
    let p = g.mul(y, w);
    let l = g.sum_all(p);
    g.set_outputs(vec![l]);
    grad(&g, &[x]).unwrap()
}

#[test]
fn fft_gradients_match_jax() {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jax_fft.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    let mut failed = vec![];
    for c in cases {
        let (xs, xv) = tensor(&c["x"]);
        let (_, want) = tensor(&c["grad"]);
        for (dt, tol) in [(DType::F64, 1e-9), (DType::F32, 1e-4)] {
            let g = grad_graph(c, dt);
            let feeds = vec![("x", HostTensor::from_f64(&xs, dt, &xv).unwrap())];
            let on_ref = interp::evaluate(&g, &feeds).unwrap().remove(0);
            let on_cpu = rlx_driver::run_host(common::cpu(), &g, &feeds).unwrap().remove(0);
            for (what, got) in [("reference", on_ref), ("cpu", on_cpu)] {
                if let Err(e) = common::close(&common::vals(&got), &want, tol) {
                    failed.push(format!("{} {dt} {what}: {e}", c["label"]));
                }
            }
        }
    }
    assert!(cases.len() >= 15, "{} cases", cases.len());
    assert!(failed.is_empty(), "{} failures:\n{}", failed.len(), failed.join("\n"));
}
