//! Transforms against JAX (tools/jax_transforms.py, float64): loss, grads, jvp and hvp of an MLP,
//! a transformer block, softmax cross-entropy and an RNN, plus vmapped per-example values.
//! RLX in f64 must agree within 1e-9 (relative to the largest value); in f32 within 1e-4,
//! on the reference interpreter and on the CPU backend.

mod common;

use rlx_autodiff::{grad, grad_with_loss, hvp, jvp, leaf, vmap};
use rlx_ir::ops::{Attention, LayerNorm};
use rlx_ir::{DType, Graph, HostTensor, MaskKind, NodeId, Shape, interp};
use serde_json::Value;

struct Fixture(Value);

impl Fixture {
    fn load(name: &str) -> Fixture {
        let p = format!("{}/tests/fixtures/jax_{name}.json", env!("CARGO_MANIFEST_DIR"));
        Fixture(serde_json::from_str(&std::fs::read_to_string(&p).expect("fixture")).expect("json"))
    }
    fn get(&self, group: &str, name: &str) -> (Vec<usize>, Vec<f64>) {
        let v = &self.0[group][name];
        assert!(!v.is_null(), "fixture has no {group}.{name}");
        let shape = v["shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
        let data = v["data"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        (shape, data)
    }
    fn names(&self, group: &str) -> Vec<String> {
        self.0[group].as_object().unwrap().keys().cloned().collect()
    }
    fn tensor(&self, group: &str, name: &str, dt: DType) -> HostTensor {
        let (s, d) = self.get(group, name);
        if name == "labels" {
            return HostTensor::from_i64(&s, DType::I64, &d.iter().map(|&x| x as i64).collect::<Vec<_>>()).unwrap();
        }
        HostTensor::from_f64(&s, dt, &d).unwrap()
    }
    /// Inputs, params and tangents, as feeds of dtype `dt`.
    fn feeds(&self, dt: DType) -> Vec<(String, HostTensor)> {
        let mut f = vec![];
        for group in ["inputs", "params", "tangents"] {
            for n in self.names(group) {
                f.push((n.clone(), self.tensor(group, &n, dt)));
            }
        }
        f
    }
}

fn tol(dt: DType) -> f64 {
    if dt == DType::F64 { 1e-9 } else { 1e-4 }
}

/// Runs `g` on the interpreter and (for f32) on the CPU backend; feeds are matched by name.
fn run(g: &Graph, feeds: &[(String, HostTensor)], dt: DType) -> Vec<Vec<HostTensor>> {
    let names: Vec<&str> = g.inputs().into_iter().chain(g.params()).map(|(_, n)| n).collect();
    let f: Vec<(&str, HostTensor)> =
        feeds.iter().filter(|(n, _)| names.contains(&n.as_str())).map(|(n, t)| (n.as_str(), t.clone())).collect();
    let mut outs = vec![interp::evaluate(g, &f).unwrap_or_else(|e| panic!("{}: {e}", g.name()))];
    if dt == DType::F32 {
        outs.push(rlx_driver::run_host(common::cpu(), g, &f).unwrap_or_else(|e| panic!("{} on cpu: {e}", g.name())));
    }
    outs
}

fn assert_close(what: &str, got: &HostTensor, want: &(Vec<usize>, Vec<f64>), tol: f64) {
    assert_eq!(got.dims(), want.0, "{what}: shape");
    let g = got.to_f64_vec().unwrap();
    let scale = want.1.iter().fold(1e-300f64, |m, x| m.max(x.abs()));
    let err = g.iter().zip(&want.1).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= tol * scale, "{what}: max error {err:e} vs scale {scale:e} (tol {tol:e})");
}

/// Checks loss, grads, jvp of the loss and hvp against the fixture for a loss graph.
fn check_standard(name: &str, build: fn(DType) -> Graph) {
    let fx = Fixture::load(name);
    for dt in [DType::F64, DType::F32] {
        let g = build(dt);
        let feeds = fx.feeds(dt);
        let params: Vec<String> = fx.names("params");
        let ids: Vec<NodeId> = params.iter().map(|p| leaf(&g, p).unwrap()).collect();
        let tnames: Vec<String> =
            fx.names("tangents").iter().filter_map(|t| t.strip_prefix("tangent_").map(String::from)).collect();
        let tnames: Vec<&str> = tnames.iter().map(String::as_str).filter(|n| params.iter().any(|p| p == n)).collect();
        let gw = grad_with_loss(&g, &ids).unwrap();
        for outs in run(&gw, &feeds, dt) {
            assert_close(&format!("{name}/{dt} loss"), &outs[0], &fx.get("results", "loss"), tol(dt));
            for (i, p) in params.iter().enumerate() {
                let want = fx.get("results", &format!("grad_{p}"));
                assert_close(&format!("{name}/{dt} grad {p}"), &outs[1 + i], &want, tol(dt));
            }
        }
        let j = jvp(&g, &tnames).unwrap();
        for outs in run(&j, &feeds, dt) {
            assert_close(&format!("{name}/{dt} jvp"), &outs[1], &fx.get("results", "jvp_loss"), tol(dt));
        }
        let h = hvp(&g, &tnames).unwrap();
        let k = tnames.len();
        for outs in run(&h, &feeds, dt) {
            for (i, p) in tnames.iter().enumerate() {
                let want = fx.get("results", &format!("hvp_{p}"));
                assert_close(&format!("{name}/{dt} hvp {p}"), &outs[1 + k + i], &want, tol(dt));
            }
        }
    }
}

fn mlp_net(g: &mut Graph, x: NodeId, dt: DType) -> NodeId {
    let w1 = g.param("w1", Shape::new(&[3, 5], dt));
    let b1 = g.param("b1", Shape::new(&[5], dt));
    let w2 = g.param("w2", Shape::new(&[5, 2], dt));
    let b2 = g.param("b2", Shape::new(&[2], dt));
    let h = g.matmul(x, w1);
    let h = g.add(h, b1);
    let h = g.tanh(h);
    let y = g.matmul(h, w2);
    g.add(y, b2)
}

fn mlp(dt: DType) -> Graph {
    let mut g = Graph::new("mlp");
    let x = g.input("x", Shape::new(&[4, 3], dt));
    let t = g.input("target", Shape::new(&[4, 2], dt));
    let y = mlp_net(&mut g, x, dt);
    let d = g.sub(y, t);
    let sq = g.square(d);
    let l = g.mean(sq, &[0, 1], false);
    g.set_outputs(vec![l]);
    g
}

#[test]
fn mlp_matches_jax() {
    check_standard("mlp", mlp);
}

#[test]
fn per_example_gradients_match_jax() {
    // vmap of grad: the per-example gradient of w1 for each row of x.
    let fx = Fixture::load("mlp");
    for dt in [DType::F64, DType::F32] {
        let mut g = Graph::new("mlp_one");
        let x = g.input("x", Shape::new(&[3], dt));
        let t = g.input("target", Shape::new(&[2], dt));
        let x2 = g.reshape(x, &[1, 3]);
        let y = mlp_net(&mut g, x2, dt);
        let t2 = g.reshape(t, &[1, 2]);
        let d = g.sub(y, t2);
        let sq = g.square(d);
        let l = g.sum_all(sq);
        g.set_outputs(vec![l]);
        let w1 = leaf(&g, "w1").unwrap();
        let per = vmap(&grad(&g, &[w1]).unwrap(), &["x", "target"], 4).unwrap();
        for outs in run(&per, &fx.feeds(dt), dt) {
            assert_close(&format!("per-example/{dt}"), &outs[0], &fx.get("results", "per_example_grad_w1"), tol(dt));
        }
    }
}

fn layer_norm(g: &mut Graph, x: NodeId, gamma: &str, beta: &str, d: usize, dt: DType) -> NodeId {
    let gm = g.param(gamma, Shape::new(&[d], dt));
    let bt = g.param(beta, Shape::new(&[d], dt));
    g.add_node(LayerNorm { eps: 1e-5 }, &[x, gm, bt])
}

fn transformer_block(g: &mut Graph, x: NodeId, dt: DType) -> NodeId {
    let (b, s, d, h) = (2, 4, 8, 2);
    let dh = d / h;
    let w = |g: &mut Graph, n: &str, r: usize, c: usize| g.param(n, Shape::new(&[r, c], dt));
    let a = layer_norm(g, x, "g1", "be1", d, dt);
    let heads = |g: &mut Graph, name: &str| {
        let wq = w(g, name, d, d);
        let q = g.matmul(a, wq);
        let q = g.reshape(q, &[b, s, h, dh]);
        g.transpose(q, &[0, 2, 1, 3])
    };
    let (q, k, v) = (heads(g, "wq"), heads(g, "wk"), heads(g, "wv"));
    let o = g.add_node(Attention::new(MaskKind::Causal, 1.0 / (dh as f64).sqrt()), &[q, k, v]);
    let o = g.transpose(o, &[0, 2, 1, 3]);
    let o = g.reshape(o, &[b, s, d]);
    let wo = w(g, "wo", d, d);
    let o = g.matmul(o, wo);
    let x = g.add(x, o);
    let m = layer_norm(g, x, "g2", "be2", d, dt);
    let up = w(g, "w_up", d, 2 * d);
    let u = g.matmul(m, up);
    let u = g.gelu(u);
    let down = w(g, "w_down", 2 * d, d);
    let u = g.matmul(u, down);
    g.add(x, u)
}

fn transformer(dt: DType) -> Graph {
    let mut g = Graph::new("transformer");
    let x = g.input("x", Shape::new(&[2, 4, 8], dt));
    let p = g.input("proj", Shape::new(&[2, 4, 8], dt));
    let y = transformer_block(&mut g, x, dt);
    let yp = g.mul(y, p);
    let l = g.sum_all(yp);
    g.set_outputs(vec![l]);
    g
}

#[test]
fn transformer_block_matches_jax() {
    check_standard("transformer", transformer);
    // Forward mode through the block with respect to its input.
    let fx = Fixture::load("transformer");
    for dt in [DType::F64, DType::F32] {
        let mut g = Graph::new("block");
        let x = g.input("x", Shape::new(&[2, 4, 8], dt));
        let y = transformer_block(&mut g, x, dt);
        g.set_outputs(vec![y]);
        let j = jvp(&g, &["x"]).unwrap();
        let mut feeds = fx.feeds(dt);
        feeds.push(("tangent_x".into(), fx.tensor("results", "tangent_x", dt)));
        for outs in run(&j, &feeds, dt) {
            assert_close(&format!("block/{dt} out"), &outs[0], &fx.get("results", "out"), tol(dt));
            assert_close(&format!("block/{dt} jvp"), &outs[1], &fx.get("results", "jvp_out"), tol(dt));
        }
    }
}

/// `-log_softmax(logits)[label]` per row, as `[rows]`.
fn nll_rows(g: &mut Graph, logits: NodeId, labels: NodeId, rows: usize, c: usize) -> NodeId {
    let ls = g.log_softmax(logits, -1);
    let lab = g.reshape(labels, &[rows, 1]);
    let cls = g.arange(0.0, 1.0, c, DType::I64);
    let cls = g.reshape(cls, &[1, c]);
    let hit = g.eq(lab, cls);
    let onehot = g.cast(hit, g.dtype(logits));
    let picked = g.mul(ls, onehot);
    let s = g.sum(picked, &[-1], false);
    g.neg(s)
}

fn cross_entropy(dt: DType) -> Graph {
    let mut g = Graph::new("cross_entropy");
    let x = g.input("x", Shape::new(&[5, 3], dt));
    let labels = g.input("labels", Shape::new(&[5], DType::I64));
    let w = g.param("w", Shape::new(&[3, 4], dt));
    let bias = g.param("bias", Shape::new(&[4], dt));
    let z = g.matmul(x, w);
    let z = g.add(z, bias);
    let nll = nll_rows(&mut g, z, labels, 5, 4);
    let l = g.mean(nll, &[0], false);
    g.set_outputs(vec![l]);
    g
}

#[test]
fn cross_entropy_matches_jax() {
    check_standard("cross_entropy", cross_entropy);
    let fx = Fixture::load("cross_entropy");
    for dt in [DType::F64, DType::F32] {
        let mut g = Graph::new("ce_one");
        let x = g.input("x", Shape::new(&[3], dt));
        let labels = g.input("labels", Shape::scalar(DType::I64));
        let w = g.param("w", Shape::new(&[3, 4], dt));
        let bias = g.param("bias", Shape::new(&[4], dt));
        let x2 = g.reshape(x, &[1, 3]);
        let z = g.matmul(x2, w);
        let z = g.add(z, bias);
        let nll = nll_rows(&mut g, z, labels, 1, 4);
        let l = g.reshape(nll, &[]);
        g.set_outputs(vec![l]);
        let per = vmap(&g, &["x", "labels"], 5).unwrap();
        for outs in run(&per, &fx.feeds(dt), dt) {
            assert_close(&format!("ce per-example/{dt}"), &outs[0], &fx.get("results", "per_example_loss"), tol(dt));
        }
    }
}

fn rnn(dt: DType) -> Graph {
    let (t, n, d, hd) = (5, 2, 3, 4);
    let mut g = Graph::new("rnn");
    let xs = g.input("xs", Shape::new(&[t, n, d], dt));
    let mut h = g.input("h0", Shape::new(&[n, hd], dt));
    let wx = g.param("wx", Shape::new(&[d, hd], dt));
    let wh = g.param("wh", Shape::new(&[hd, hd], dt));
    let b = g.param("b", Shape::new(&[hd], dt));
    let mut acc = None;
    for i in 0..t {
        let x = g.slice_axis(xs, 0, i, i + 1);
        let x = g.reshape(x, &[n, d]);
        let a = g.matmul(x, wx);
        let r = g.matmul(h, wh);
        let s = g.add(a, r);
        let s = g.add(s, b);
        h = g.tanh(s);
        let sq = g.square(h);
        let e = g.sum_all(sq);
        acc = Some(match acc {
            Some(p) => g.add(p, e),
            None => e,
        });
    }
    let last = g.sum_all(h);
    let l = g.add(acc.unwrap(), last);
    g.set_outputs(vec![l]);
    g
}

#[test]
fn rnn_matches_jax() {
    check_standard("rnn", rnn);
}

/// The same RNN as one `scan` op whose body closes over the weights (passed as consts).
fn rnn_scan(dt: DType) -> Graph {
    let (t, n, d, hd) = (5, 2, 3, 4);
    let mut body = Graph::new("step");
    let h = body.input("h", Shape::new(&[n, hd], dt));
    let x = body.input("x", Shape::new(&[n, d], dt));
    let wx = body.input("wx", Shape::new(&[d, hd], dt));
    let wh = body.input("wh", Shape::new(&[hd, hd], dt));
    let b = body.input("b", Shape::new(&[hd], dt));
    let a = body.matmul(x, wx);
    let r = body.matmul(h, wh);
    let s = body.add(a, r);
    let s = body.add(s, b);
    let hn = body.tanh(s);
    body.set_outputs(vec![hn, hn]);
    let mut g = Graph::new("rnn_scan");
    let xs = g.input("xs", Shape::new(&[t, n, d], dt));
    let h0 = g.input("h0", Shape::new(&[n, hd], dt));
    let wx = g.param("wx", Shape::new(&[d, hd], dt));
    let wh = g.param("wh", Shape::new(&[hd, hd], dt));
    let b = g.param("b", Shape::new(&[hd], dt));
    let (last, hs) = g.scan(body, h0, xs, &[wx, wh, b]);
    let sq = g.square(hs);
    let e = g.sum_all(sq);
    let l = g.sum_all(last);
    let l = g.add(e, l);
    g.set_outputs(vec![l]);
    g
}

#[test]
fn scan_rnn_matches_jax() {
    check_standard("rnn", rnn_scan);
}
