//! Running a graph both ways with named feeds (inputs and params): the reference interpreter
//! and the CPU through `Session`, for the loop tests.

use rlx_driver::Device;
use rlx_ir::{DType, Graph, HostTensor, Shape, interp};
use rlx_runtime::Session;

/// Feeds by name; each run takes those the graph has.
pub type Feeds = Vec<(String, HostTensor)>;

/// An f64 tensor.
pub fn f64s(d: &[usize], v: &[f64]) -> HostTensor {
    HostTensor::from_f64(d, DType::F64, v).unwrap()
}

/// A tensor's values as f64.
pub fn vals(t: &HostTensor) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

/// The feeds `g` has an input or param for.
pub fn named<'a>(g: &Graph, feeds: &'a Feeds) -> Vec<(&'a str, HostTensor)> {
    let names: Vec<&str> = g.inputs().into_iter().chain(g.params()).map(|(_, n)| n).collect();
    feeds.iter().filter(|(n, _)| names.contains(&n.as_str())).map(|(n, t)| (n.as_str(), t.clone())).collect()
}

/// Runs `g` on the reference interpreter.
pub fn eval(g: &Graph, feeds: &Feeds) -> Vec<HostTensor> {
    interp::evaluate(g, &named(g, feeds)).unwrap_or_else(|e| panic!("{}: {e}", g.name()))
}

/// Compiles `g` for the CPU through `Session` and runs it once.
pub fn cpu(g: &Graph, feeds: &Feeds) -> Vec<HostTensor> {
    let mut c = Session::new(Device::Cpu).compile(g.clone()).unwrap_or_else(|e| panic!("{}: {e}", g.name()));
    let params: Vec<String> = c.params().iter().map(|(n, _)| n.clone()).collect();
    let mut ins = vec![];
    for (n, t) in named(g, feeds) {
        if params.iter().any(|p| p == n) {
            c.set_param_tensor(n, &t).unwrap();
        } else {
            ins.push((n, t));
        }
    }
    let refs: Vec<(&str, &HostTensor)> = ins.iter().map(|(n, t)| (*n, t)).collect();
    c.run_tensors(&refs).unwrap_or_else(|e| panic!("{} on cpu: {e}", g.name()))
}

/// Asserts `max |got - want| <= tol * max |want|`.
pub fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(1e-300f64, |m, x| m.max(x.abs()));
    let err = got.iter().zip(want).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= tol * scale, "{what}: max error {err:e} vs scale {scale:e} (tol {tol:e})");
}

/// The RNN step `h <- tanh(x wx + h wh + b)` as a scan body (f64, batch `n`, input `d`, hidden
/// `h`): inputs h, x, wx, wh, b; outputs the new carry and the same as the stacked output.
pub fn rnn_step(n: usize, d: usize, h: usize) -> Graph {
    let s = |dims: &[usize]| Shape::new(dims, DType::F64);
    let mut body = Graph::new("step");
    let hh = body.input("h", s(&[n, h]));
    let x = body.input("x", s(&[n, d]));
    let wx = body.input("wx", s(&[d, h]));
    let wh = body.input("wh", s(&[h, h]));
    let b = body.input("b", s(&[h]));
    let a = body.matmul(x, wx);
    let r = body.matmul(hh, wh);
    let z = body.add(a, r);
    let z = body.add(z, b);
    let hn = body.tanh(z);
    body.set_outputs(vec![hn, hn]);
    body
}

/// Two carries (one integer), two sequences, a const, `reverse` as given: every result used.
pub fn multi_scan(t: usize, reverse: bool) -> Graph {
    let s = |d: &[usize]| Shape::new(d, DType::F64);
    let mut b = Graph::new("body");
    let h = b.input("h", s(&[3]));
    let k = b.input("k", Shape::new(&[], DType::I64));
    let x = b.input("x", s(&[3]));
    let u = b.input("u", s(&[]));
    let w = b.input("w", s(&[3]));
    let a = b.mul(h, w);
    let a = b.add(a, x);
    let su = b.sin(u);
    let a = b.mul(a, su);
    let hn = b.tanh(a);
    let one = b.constant(HostTensor::from_i64(&[], DType::I64, &[1]).unwrap());
    let kn = b.add(k, one);
    let y = b.mul(hn, x);
    b.set_outputs(vec![hn, kn, y]);
    let mut g = Graph::new("multi");
    let h0 = g.input("h0", s(&[3]));
    let k0 = g.constant(HostTensor::from_i64(&[], DType::I64, &[0]).unwrap());
    let xs = g.input("xs", s(&[t, 3]));
    let us = g.input("us", s(&[t]));
    let w = g.param("w", s(&[3]));
    let (c, y) = g.scan_n(b, &[h0, k0], &[xs, us], &[w], reverse);
    let kf = g.cast_to(c[1], DType::F64);
    let l1 = g.sum_all(c[0]);
    let l2 = g.square(y[0]);
    let l2 = g.sum_all(l2);
    let l = g.add(l1, l2);
    let l = g.mul(l, kf);
    g.set_outputs(vec![l]);
    g
}
