//! `associative_scan` against `jax.lax.associative_scan` (tools/associative_scan_fixtures.py,
//! float64): a cumulative sum, a cumulative max and the linear recurrence, forward, reversed and
//! along axis 1, values and gradients within 1e-10, on the reference interpreter (the
//! sequential fold) and on the CPU (the log-depth decomposition, differentiated through it);
//! and in f32 at length 1000 against the sequential `scan`.

use rlx_autodiff::grad_with_loss;
use rlx_driver::Device;
use rlx_ir::ops::control::linear_recurrence_body;
use rlx_ir::{DType, Graph, HostTensor, NodeId, Shape, interp};
use rlx_runtime::Session;
use serde_json::Value;

fn tensor(v: &Value) -> HostTensor {
    let shape: Vec<usize> = v["shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
    let data: Vec<f64> = v["data"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    HostTensor::from_f64(&shape, DType::F64, &data).unwrap()
}

fn vals(t: &HostTensor) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    let err = got.iter().zip(want).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= tol * scale, "{what}: max error {err:e} vs scale {scale:e} (tol {tol:e})");
}

/// The combine body named by the fixture, on leaves of type `s`.
fn combine(name: &str, s: &Shape) -> Graph {
    if name == "linear" {
        return linear_recurrence_body(s, s);
    }
    let mut g = Graph::new(name);
    let (a, b) = (g.input("a", s.clone()), g.input("b", s.clone()));
    let c = if name == "add" { g.add(a, b) } else { g.maximum(a, b) };
    g.set_outputs(vec![c]);
    g
}

/// Runs `g` on the reference interpreter and on the CPU.
fn both(g: &Graph, feeds: &[(String, HostTensor)]) -> [Vec<HostTensor>; 2] {
    let named: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let r = interp::evaluate(g, &named).unwrap_or_else(|e| panic!("{}: {e}", g.name()));
    let mut c = Session::new(Device::Cpu).compile(g.clone()).unwrap_or_else(|e| panic!("{}: {e}", g.name()));
    let refs: Vec<(&str, &HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let d = c.run_tensors(&refs).unwrap_or_else(|e| panic!("{} on cpu: {e}", g.name()));
    [r, d]
}

#[test]
fn values_and_gradients_match_jax() {
    let p = format!("{}/tests/fixtures/jax_associative_scan.json", env!("CARGO_MANIFEST_DIR"));
    let fx: Value = serde_json::from_str(&std::fs::read_to_string(p).expect("fixture")).expect("json");
    let cases = fx["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 7);
    for c in cases {
        let name = c["name"].as_str().unwrap();
        let leaves: Vec<HostTensor> = c["leaves"].as_array().unwrap().iter().map(tensor).collect();
        let s = leaves[0].shape.clone();
        let (axis, reverse) = (c["axis"].as_i64().unwrap(), c["reverse"].as_bool().unwrap());
        let mut g = Graph::new(name);
        let ins: Vec<NodeId> = (0..leaves.len()).map(|i| g.input(&format!("x{i}"), s.clone())).collect();
        let rs = g.associative_scan(combine(c["combine"].as_str().unwrap(), &s), &ins, &[], axis, reverse);
        // The loss the fixture differentiates: sum over leaves of sum(w * result).
        let mut loss = None;
        for (r, w) in rs.iter().zip(c["weights"].as_array().unwrap()) {
            let w = g.constant(tensor(w));
            let p = g.mul(*r, w);
            let t = g.sum_all(p);
            loss = Some(loss.map_or(t, |l| g.add(l, t)));
        }
        let mut values = g.clone();
        values.set_outputs(rs.clone());
        g.set_outputs(vec![loss.unwrap()]);
        let feeds: Vec<(String, HostTensor)> =
            leaves.iter().enumerate().map(|(i, t)| (format!("x{i}"), t.clone())).collect();
        let gr = grad_with_loss(&g, &ins).unwrap_or_else(|e| panic!("{name}: grad: {e}"));
        for (how, (vs, gs)) in ["reference", "cpu"].iter().zip(both(&values, &feeds).iter().zip(&both(&gr, &feeds))) {
            for (i, want) in c["results"].as_array().unwrap().iter().enumerate() {
                assert_close(&format!("{name} {how} result {i}"), &vals(&vs[i]), &vals(&tensor(want)), 1e-10);
            }
            for (i, want) in c["grads"].as_array().unwrap().iter().enumerate() {
                assert_close(&format!("{name} {how} grad {i}"), &vals(&gs[1 + i]), &vals(&tensor(want)), 1e-10);
            }
        }
    }
}

/// `h_t = a_t h_{t-1} + b_t` of length `n` in f32 as the log-depth scan (the CPU runs its
/// decomposition) and as a sequential `scan` (a loop on the CPU): the same values within 1e-5.
#[test]
fn f32_length_1000_matches_the_sequential_scan() {
    let n = 1000;
    let a: Vec<f32> = (0..n * 2).map(|i| 0.9 + 0.1 * ((i as f32 * 0.37).sin() * 0.5 + 0.5)).collect();
    let b: Vec<f32> = (0..n * 2).map(|i| (i as f32 * 0.11).cos()).collect();
    let (ta, tb) = (HostTensor::from_f32(&[n, 2], &a).unwrap(), HostTensor::from_f32(&[n, 2], &b).unwrap());
    for reverse in [false, true] {
        let s = Shape::new(&[n, 2], DType::F32);
        let mut g = Graph::new("assoc");
        let (xa, xb) = (g.input("a", s.clone()), g.input("b", s.clone()));
        let rs = g.associative_scan(linear_recurrence_body(&s, &s), &[xa, xb], &[], 0, reverse);
        g.set_outputs(vec![rs[1]]);
        // The same recurrence as a loop: h = a_t h + b_t from h = 0, stacking every h.
        let e = Shape::new(&[2], DType::F32);
        let mut body = Graph::new("step");
        let (h, at, bt) = (body.input("h", e.clone()), body.input("a", e.clone()), body.input("b", e));
        let m = body.mul(at, h);
        let hn = body.add(m, bt);
        body.set_outputs(vec![hn, hn]);
        let mut q = Graph::new("sequential");
        let (qa, qb) = (q.input("a", s.clone()), q.input("b", s.clone()));
        let h0 = q.full(Shape::new(&[2], DType::F32), 0.0);
        let (_, ys) = q.scan_n(body, &[h0], &[qa, qb], &[], reverse);
        q.set_outputs(vec![ys[0]]);
        let feeds = vec![("a".to_string(), ta.clone()), ("b".to_string(), tb.clone())];
        let [_, got] = both(&g, &feeds);
        let [_, want] = both(&q, &feeds);
        let (got, want) = (vals(&got[0]), vals(&want[0]));
        let err = got.iter().zip(&want).fold(0.0f64, |m, (x, y)| m.max((x - y).abs() / y.abs().max(1.0)));
        println!("f32 length {n} reverse={reverse}: max relative difference {err:e}");
        assert!(err <= 1e-5, "reverse={reverse}: {err:e}");
    }
}

/// The decomposition's size grows with the log of the length (one level per doubling), not
/// the length.
#[test]
fn decomposition_is_log_depth() {
    let count = |n: usize| {
        let s = Shape::new(&[n, 2], DType::F64);
        let mut g = Graph::new("assoc");
        let (a, b) = (g.input("a", s.clone()), g.input("b", s.clone()));
        let rs = g.associative_scan(linear_recurrence_body(&s, &s), &[a, b], &[], 0, false);
        let op = g.nodes()[rs[1].index()].op.clone();
        let mut d = Graph::new("d");
        let (a, b) = (d.input("a", s.clone()), d.input("b", s));
        let out = op.def().decompose(&mut d, &[a, b]).expect("decomposes");
        d.set_outputs(vec![out]);
        d.check().unwrap();
        d.len()
    };
    let (c1, c2, c4) = (count(1024), count(2048), count(4096));
    println!("decomposed nodes: n=1024 {c1}, 2048 {c2}, 4096 {c4}");
    assert_eq!(c2 - c1, c4 - c2, "one level per doubling");
    assert!(c2 - c1 < 40, "a level costs {} nodes", c2 - c1);
}
