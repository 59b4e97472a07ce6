//! Loops run as loops: `scan`, `while_loop`, `cond` and `fori_loop` on the CPU backend through
//! `Session` (each body compiled once and run per trip), their derivatives as loops (a scan's
//! JVP is a forward scan, its VJP a reverse scan), checked against the reference interpreter,
//! against the transforms of the unrolled loop, and against JAX (tools/jax_loops.py, float64).

use rlx_autodiff::{grad, grad_with_loss, jvp, leaf};
use rlx_driver::Device;
use rlx_ir::{DType, Error, Graph, HostTensor, NodeId, Op, Shape};
use rlx_runtime::Session;
use serde_json::Value;

mod common;

use common::session::{Feeds, assert_close, cpu, eval, f64s, multi_scan, rnn_step, vals};

/// Nodes of `g` after the CPU pipeline, and how many of them are native loops.
fn compiled_nodes(g: &Graph) -> (usize, usize) {
    let r = Session::new(Device::Cpu).dispatch_report(g).unwrap();
    let total = r.ops.values().map(|d| d.native).sum();
    let loops = ["scan", "while_loop", "cond"].iter().filter_map(|n| r.ops.get(*n)).map(|d| d.native).sum();
    for n in ["scan", "while_loop", "cond"] {
        assert_eq!(r.ops.get(n).map_or(0, |d| d.decomposed), 0, "{n} was unrolled:\n{r}");
    }
    (total, loops)
}

/// `xs[t, n, d] = 0.8 sin(0.01 (t + 1)(d + 1) + 0.5 n)`, as in tools/jax_loops.py.
fn rnn_xs(t: usize, n: usize, d: usize) -> HostTensor {
    let mut v = Vec::with_capacity(t * n * d);
    for ti in 0..t {
        for ni in 0..n {
            for di in 0..d {
                v.push(0.8 * (0.01 * (ti as f64 + 1.0) * (di as f64 + 1.0) + 0.5 * ni as f64).sin());
            }
        }
    }
    f64s(&[t, n, d], &v)
}

/// `h <- tanh(x wx + h wh + b)` over `t` steps; loss `sum(hs^2) / t + sum(h_t)`.
fn rnn(t: usize) -> Graph {
    let (n, d, h) = (2, 3, 4);
    let s = |dims: &[usize]| Shape::new(dims, DType::F64);
    let body = rnn_step(n, d, h);
    let mut g = Graph::new(format!("rnn{t}"));
    let xs = g.input("xs", s(&[t, n, d]));
    let h0 = g.param("h0", s(&[n, h]));
    let wx = g.param("wx", s(&[d, h]));
    let wh = g.param("wh", s(&[h, h]));
    let b = g.param("b", s(&[h]));
    let (last, hs) = g.scan(body, h0, xs, &[wx, wh, b]);
    let sq = g.square(hs);
    let e = g.sum_all(sq);
    let k = g.scalar(1.0 / t as f64, DType::F64);
    let e = g.mul(e, k);
    let l = g.sum_all(last);
    let loss = g.add(e, l);
    g.set_outputs(vec![loss]);
    g
}

struct Fixture(Value);

impl Fixture {
    fn load() -> Fixture {
        let p = format!("{}/tests/fixtures/jax_loops.json", env!("CARGO_MANIFEST_DIR"));
        Fixture(serde_json::from_str(&std::fs::read_to_string(p).expect("fixture")).expect("json"))
    }
    fn get(&self, path: &[&str]) -> (Vec<usize>, Vec<f64>) {
        let v = path.iter().fold(&self.0, |v, k| &v[*k]);
        assert!(!v.is_null(), "fixture has no {path:?}");
        let shape = v["shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
        (shape, v["data"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect())
    }
    fn tensor(&self, path: &[&str]) -> HostTensor {
        let (s, d) = self.get(path);
        f64s(&s, &d)
    }
}

const RNN_PARAMS: [&str; 4] = ["h0", "wx", "wh", "b"];

fn rnn_feeds(fx: &Fixture, t: usize) -> Feeds {
    let mut f: Feeds = vec![("xs".into(), rnn_xs(t, 2, 3))];
    for p in RNN_PARAMS {
        f.push((p.into(), fx.tensor(&["rnn", "params", p])));
        f.push((format!("tangent_{p}"), fx.tensor(&["rnn", "tangents", p])));
    }
    f
}

/// A 1000-step RNN through `scan`: loss, gradients (reverse scan) and a JVP (forward scan) in
/// f64 against `jax.lax.scan`, within 1e-10, on the reference interpreter and on the CPU.
#[test]
fn rnn_1000_steps_matches_jax_scan() {
    let fx = Fixture::load();
    let g = rnn(1000);
    let feeds = rnn_feeds(&fx, 1000);
    let mut wrt: Vec<NodeId> = RNN_PARAMS.iter().map(|p| leaf(&g, p).unwrap()).collect();
    wrt.push(leaf(&g, "xs").unwrap());
    let gr = grad_with_loss(&g, &wrt).unwrap();
    let jv = jvp(&g, &RNN_PARAMS).unwrap();
    for (run, label) in [(eval as fn(&Graph, &Feeds) -> Vec<HostTensor>, "reference"), (cpu, "cpu")] {
        let out = run(&gr, &feeds);
        assert_close(&format!("{label} loss"), &vals(&out[0]), &fx.get(&["rnn", "results", "loss"]).1, 1e-10);
        for (k, p) in RNN_PARAMS.iter().enumerate() {
            let want = fx.get(&["rnn", "results", &format!("grad_{p}")]);
            assert_eq!(out[1 + k].dims(), want.0, "{label} grad_{p} shape");
            assert_close(&format!("{label} grad_{p}"), &vals(&out[1 + k]), &want.1, 1e-10);
        }
        let dot: f64 = vals(&out[5]).iter().zip(vals(&feeds[0].1)).map(|(a, b)| a * b).sum();
        assert_close(&format!("{label} grad_xs . xs"), &[dot], &fx.get(&["rnn", "results", "grad_xs_dot_xs"]).1, 1e-10);
        let out = run(&jv, &feeds);
        assert_close(&format!("{label} jvp"), &vals(&out[1]), &fx.get(&["rnn", "results", "jvp"]).1, 1e-10);
    }
}

/// Size, not time: the scan, its gradient and its JVP compile to graphs whose node count does not
/// depend on the trip count (10 or 10,000 steps), with every loop run natively.
#[test]
fn node_count_does_not_depend_on_the_trip_count() {
    let mut counts = vec![];
    for t in [10, 10_000] {
        let g = rnn(t);
        let wrt: Vec<NodeId> = RNN_PARAMS.iter().map(|p| leaf(&g, p).unwrap()).collect();
        let gr = grad(&g, &wrt).unwrap();
        let jv = jvp(&g, &RNN_PARAMS).unwrap();
        counts.push([compiled_nodes(&g), compiled_nodes(&gr), compiled_nodes(&jv)]);
    }
    assert_eq!(counts[0], counts[1]);
    let [(fwd, fl), (bwd, bl), (_, jl)] = counts[1];
    assert!(fl >= 1 && bl >= 2 && jl >= 1, "loops: forward {fl}, backward {bl}, jvp {jl}");
    assert!(fwd < 40 && bwd < 80, "forward {fwd} nodes, backward {bwd}");
    // The 10,000-step gradient runs, and agrees with the reference.
    let fx = Fixture::load();
    let g = rnn(10_000);
    let wrt: Vec<NodeId> = RNN_PARAMS.iter().map(|p| leaf(&g, p).unwrap()).collect();
    let gr = grad_with_loss(&g, &wrt).unwrap();
    let feeds = rnn_feeds(&fx, 10_000);
    let (a, b) = (cpu(&gr, &feeds), eval(&gr, &feeds));
    for (x, y) in a.iter().zip(&b) {
        assert_close("10k-step grad", &vals(x), &vals(y), 1e-12);
    }
}

#[test]
fn reverse_loop_reads_saved_residuals_instead_of_recomputing() {
    let g = rnn(50);
    let wrt: Vec<NodeId> = RNN_PARAMS.iter().map(|p| leaf(&g, p).unwrap()).collect();
    let gr = grad(&g, &wrt).unwrap();
    let rev: Vec<&rlx_ir::ops::control::Scan> = gr
        .nodes()
        .iter()
        .filter_map(|n| match &n.op {
            Op::Scan(s) if s.reverse => Some(s),
            _ => None,
        })
        .collect();
    assert!(!rev.is_empty(), "no reverse loop");
    for s in rev {
        let body = rlx_ir::ops::control::prune(&s.body);
        let count = |name: &str| body.nodes().iter().filter(|n| n.op.def().name() == name).count();
        // The step's tanh comes saved from the forward loop: no tanh, and only the backward's
        // four products (dz wh^T, dz wx^T, x^T dz, h^T dz), not the forward's two on top.
        assert_eq!(count("tanh"), 0, "the reverse body recomputes tanh");
        assert_eq!(count("matmul"), 4, "the reverse body's products");
    }
    // Values are unchanged: the 1000-step gradient test checks them against JAX.
}

/// Replaces every loop by its decomposition (the unrolled loop the transforms used to see).
fn unrolled(g: &Graph) -> Graph {
    let mut out = Graph::new(g.name());
    let mut map: Vec<NodeId> = vec![];
    for n in g.nodes() {
        let ins: Vec<NodeId> = n.inputs.iter().map(|x| map[x.index()]).collect();
        let id = match &n.op {
            Op::Scan(_) | Op::WhileLoop(_) => n.op.def().decompose(&mut out, &ins).expect("decomposes"),
            op => out.add_node(op.clone(), &ins),
        };
        map.push(id);
    }
    out.set_outputs(g.outputs().iter().map(|o| map[o.index()]).collect());
    out.verify().unwrap();
    out
}

fn multi_feeds() -> Feeds {
    let r = |n: usize, seed: u64| rlx_ir::ops::util::rand_f64(n, -1.0, 1.0, seed);
    vec![
        ("h0".into(), f64s(&[3], &r(3, 1))),
        ("xs".into(), f64s(&[6, 3], &r(18, 2))),
        ("us".into(), f64s(&[6], &r(6, 3))),
        ("w".into(), f64s(&[3], &r(3, 4))),
        ("tangent_h0".into(), f64s(&[3], &r(3, 5))),
        ("tangent_us".into(), f64s(&[6], &r(6, 6))),
        ("tangent_w".into(), f64s(&[3], &r(3, 7))),
    ]
}

/// The scan rules (forward scan, reverse scan) agree with the transforms of the unrolled loop,
/// on the reference and on the CPU, for a reversed scan with several carries and sequences.
#[test]
fn scan_rules_match_the_unrolled_loop() {
    let g = multi_scan(6, true);
    let u = unrolled(&g);
    let feeds = multi_feeds();
    let names = ["h0", "xs", "us", "w"];
    let ids = |g: &Graph| names.iter().map(|n| leaf(g, n).unwrap()).collect::<Vec<_>>();
    let (gr, gu) = (grad_with_loss(&g, &ids(&g)).unwrap(), grad_with_loss(&u, &ids(&u)).unwrap());
    let want = eval(&gu, &feeds);
    for got in [eval(&gr, &feeds), cpu(&gr, &feeds)] {
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("grad output {k}"), &vals(a), &vals(b), 1e-12);
        }
    }
    let t = ["h0", "us", "w"];
    let (jr, ju) = (jvp(&g, &t).unwrap(), jvp(&u, &t).unwrap());
    let want = eval(&ju, &feeds);
    for got in [eval(&jr, &feeds), cpu(&jr, &feeds)] {
        assert_close("jvp", &vals(&got[1]), &vals(&want[1]), 1e-12);
    }
    // Forward and reverse mode agree with each other too: <grad, t> = jvp.
    let gv = eval(&gr, &feeds);
    let dot: f64 = [(1, "tangent_h0"), (3, "tangent_us"), (4, "tangent_w")]
        .iter()
        .map(|(k, n)| {
            let tv = &feeds.iter().find(|(m, _)| m == n).unwrap().1;
            vals(&gv[*k]).iter().zip(vals(tv)).map(|(a, b)| a * b).sum::<f64>()
        })
        .sum();
    assert_close("<grad, t>", &[dot], &vals(&eval(&jr, &feeds)[1]), 1e-12);
}

/// Newton's method for sqrt(a) with a data-dependent trip count; the carry's last entry counts.
fn newton(max_trips: usize) -> Graph {
    let s = |d: &[usize]| Shape::new(d, DType::F64);
    let mut c = Graph::new("cond");
    let cx = c.input("c", s(&[5]));
    let ca = c.input("a", s(&[4]));
    let x = c.slice_axis(cx, 0, 0, 4);
    let x2 = c.mul(x, x);
    let r = c.sub(x2, ca);
    let r = c.abs(r);
    let m = c.max(r, &[0], false);
    let tol = c.scalar(1e-12, DType::F64);
    let go = c.gt(m, tol);
    c.set_outputs(vec![go]);
    let mut b = Graph::new("body");
    let bx = b.input("c", s(&[5]));
    let ba = b.input("a", s(&[4]));
    let x = b.slice_axis(bx, 0, 0, 4);
    let n = b.slice_axis(bx, 0, 4, 5);
    let x2 = b.mul(x, x);
    let r = b.sub(x2, ba);
    let two = b.scalar(2.0, DType::F64);
    let d = b.mul(x, two);
    let st = b.div(r, d);
    let xn = b.sub(x, st);
    let one = b.scalar(1.0, DType::F64);
    let nn = b.add(n, one);
    let out = b.concat(&[xn, nn], 0);
    b.set_outputs(vec![out]);
    let mut g = Graph::new("newton");
    let a = g.input("a", s(&[4]));
    let z = g.full(s(&[1]), 0.0);
    let init = g.concat(&[a, z], 0);
    let y = g.while_loop(c, b, init, &[a], max_trips);
    g.set_outputs(vec![y]);
    g
}

/// `while_loop` runs until its condition fails (a runaway bound far past any unrolling) on the
/// CPU, as the reference and JAX do; its JVP matches JAX's; reverse mode is a typed error.
#[test]
fn newton_while_loop_matches_jax() {
    let fx = Fixture::load();
    let feeds: Feeds =
        vec![("a".into(), fx.tensor(&["newton", "a"])), ("tangent_a".into(), fx.tensor(&["newton", "tangent_a"]))];
    let want = fx.get(&["newton", "out"]).1;
    let g = newton(usize::MAX);
    assert_eq!(compiled_nodes(&g).1, 1);
    for got in [eval(&g, &feeds), cpu(&g, &feeds)] {
        assert_close("newton", &vals(&got[0]), &want, 1e-10);
        assert_eq!(vals(&got[0])[4], want[4], "trip count");
    }
    assert!(want[4] >= 5.0, "a data-dependent trip count: {}", want[4]);
    // Forward mode is a loop too (carry and tangent stacked), with the same unbounded trip count
    // that no unrolling could hold; on the CPU it runs natively.
    let j = jvp(&newton(usize::MAX), &["a"]).unwrap();
    assert!(compiled_nodes(&j).1 >= 2, "the primal and the tangent loop run natively");
    for t in [eval(&j, &feeds), cpu(&j, &feeds)] {
        assert_close("newton jvp", &vals(&t[1]), &fx.get(&["newton", "jvp"]).1, 1e-10);
    }
    // The masked unrolling (a backend without loops, a small bound) agrees.
    let j = jvp(&newton(64), &["a"]).unwrap();
    assert_close("newton jvp, bounded", &vals(&eval(&j, &feeds)[1]), &fx.get(&["newton", "jvp"]).1, 1e-10);
    // Reverse mode is refused, naming the op and why.
    let mut l = newton(64);
    let y = l.outputs()[0];
    let s = l.sum_all(y);
    l.set_outputs(vec![s]);
    let a = leaf(&l, "a").unwrap();
    match grad(&l, &[a]) {
        Err(Error::Transform { transform: "vjp", op, reason, .. }) => {
            assert_eq!(op, "while_loop");
            assert!(reason.contains("forward-mode only"), "{reason}");
        }
        other => panic!("expected a vjp error, got {:?}", other.map(|_| ())),
    }
}

/// `cond` is a native branch on the CPU; `fori_loop` is a scan, differentiable both ways.
#[test]
fn cond_and_fori_loop_run_on_the_cpu() {
    let s = Shape::new(&[4], DType::F64);
    let mut a = Graph::new("then");
    let x = a.input("x", s.clone());
    let y = a.sin(x);
    a.set_outputs(vec![y]);
    let mut b = Graph::new("else");
    let x = b.input("x", s.clone());
    let y = b.mul(x, x);
    b.set_outputs(vec![y]);
    let mut g = Graph::new("cond");
    let p = g.input("p", Shape::new(&[], DType::Bool));
    let x = g.input("x", s.clone());
    let y = g.cond(p, a, b, &[x]);
    g.set_outputs(vec![y]);
    assert_eq!(compiled_nodes(&g).1, 1);
    let xv = f64s(&[4], &[0.1, -0.7, 1.3, 2.0]);
    for pv in [true, false] {
        let feeds: Feeds = vec![("p".into(), HostTensor::from_bool(&[], &[pv]).unwrap()), ("x".into(), xv.clone())];
        assert_close(&format!("cond {pv}"), &vals(&cpu(&g, &feeds)[0]), &vals(&eval(&g, &feeds)[0]), 0.0);
    }
    // x <- x * w + i for i in 0..5.
    let mut body = Graph::new("fori");
    let i = body.input("i", Shape::new(&[], DType::I64));
    let x = body.input("x", s.clone());
    let w = body.input("w", s.clone());
    let fi = body.cast_to(i, DType::F64);
    let xw = body.mul(x, w);
    let xn = body.add(xw, fi);
    body.set_outputs(vec![xn]);
    let mut g = Graph::new("fori");
    let x0 = g.input("x0", s.clone());
    let w = g.param("w", s.clone());
    let y = g.fori_loop(5, body, x0, &[w]);
    let l = g.sum_all(y);
    g.set_outputs(vec![l]);
    let feeds: Feeds = vec![("x0".into(), xv.clone()), ("w".into(), f64s(&[4], &[0.5, 1.1, -0.9, 0.3]))];
    let wid = leaf(&g, "w").unwrap();
    let gr = grad_with_loss(&g, &[wid]).unwrap();
    let gu = grad_with_loss(&unrolled(&g), &[wid]).unwrap();
    let want = eval(&gu, &feeds);
    for got in [eval(&gr, &feeds), cpu(&gr, &feeds)] {
        assert_close("fori value", &vals(&got[0]), &vals(&want[0]), 1e-12);
        assert_close("fori grad", &vals(&got[1]), &vals(&want[1]), 1e-12);
    }
}

/// Loops and their derivatives (scans with several carries, reversed, with a length) survive the
/// text and JSON forms: the sub-graphs print as their ops' attributes and parse back equal.
#[test]
fn loop_graphs_round_trip_through_text_and_json() {
    let g = multi_scan(6, true);
    let ids: Vec<NodeId> = ["h0", "xs", "us", "w"].iter().map(|n| leaf(&g, n).unwrap()).collect();
    for h in [grad_with_loss(&g, &ids).unwrap(), jvp(&g, &["h0", "w"]).unwrap(), newton(usize::MAX)] {
        let text = h.to_text();
        let back = Graph::from_text(&text).unwrap_or_else(|e| panic!("{}: {e}", h.name()));
        assert_eq!(back, h);
        assert_eq!(back.to_text(), text);
        assert_eq!(Graph::from_json(&h.to_json()).unwrap(), h);
    }
}

/// vmap of a scan is one scan of the batched body (no unrolling): it matches running each
/// example alone, on the reference and on the CPU.
#[test]
fn vmap_of_a_scan_is_a_scan() {
    let g = multi_scan(6, true);
    let v = rlx_autodiff::vmap(&g, &["h0", "us"], 3).unwrap();
    assert!(compiled_nodes(&v).1 >= 1);
    assert!(v.len() < 40, "{} nodes", v.len());
    let base = multi_feeds();
    let r = |n: usize, seed: u64| rlx_ir::ops::util::rand_f64(n, -1.0, 1.0, seed);
    let (h0s, uss) = (r(9, 11), r(18, 12));
    let mut feeds: Feeds = base.iter().filter(|(n, _)| n != "h0" && n != "us").cloned().collect();
    feeds.push(("h0".into(), f64s(&[3, 3], &h0s)));
    feeds.push(("us".into(), f64s(&[3, 6], &uss)));
    let mut want = vec![];
    for b in 0..3 {
        let mut f: Feeds = base.iter().filter(|(n, _)| n != "h0" && n != "us").cloned().collect();
        f.push(("h0".into(), f64s(&[3], &h0s[3 * b..3 * b + 3])));
        f.push(("us".into(), f64s(&[6], &uss[6 * b..6 * b + 6])));
        want.extend(vals(&eval(&g, &f)[0]));
    }
    for got in [eval(&v, &feeds), cpu(&v, &feeds)] {
        assert_close("vmap", &vals(&got[0]), &want, 1e-12);
    }
}

/// vmap of a `while_loop` is one loop that runs while any element's condition holds, each
/// element stopping at its own trip count (no unrolling, so no bound on the trips).
#[test]
fn vmap_of_a_while_loop_is_a_while_loop() {
    let g = newton(usize::MAX);
    let v = rlx_autodiff::vmap(&g, &["a"], 3).unwrap();
    assert!(compiled_nodes(&v).1 >= 1);
    // Targets far apart, so the rows need different numbers of Newton steps.
    let a = [2.0, 3.0, 5.0, 7.0, 1e-3, 0.5, 1e6, 9.0, 1.0, 1.0, 1.0, 1.0];
    let mut want = vec![];
    let mut trips = vec![];
    for b in 0..3 {
        let out = vals(&eval(&g, &vec![("a".into(), f64s(&[4], &a[4 * b..4 * b + 4]))])[0]);
        trips.push(out[4]);
        want.extend(out);
    }
    assert!(trips[0] != trips[1] && trips[1] != trips[2], "trip counts {trips:?}");
    let feeds: Feeds = vec![("a".into(), f64s(&[3, 4], &a))];
    for got in [eval(&v, &feeds), cpu(&v, &feeds)] {
        assert_close("vmap while", &vals(&got[0]), &want, 1e-12);
    }
}

/// `cond`'s derivatives are branches too: only the taken branch is differentiated, so `log` of
/// a negative input in the branch not taken leaves the gradient finite (a select would give
/// NaN * 0 = NaN), and vmap with an unbatched predicate stays one branch.
#[test]
fn cond_derivatives_and_vmap_take_one_branch() {
    let s = Shape::new(&[3], DType::F64);
    let mut a = Graph::new("then");
    let x = a.input("x", s.clone());
    let y = a.log(x);
    a.set_outputs(vec![y]);
    let mut b = Graph::new("else");
    let x = b.input("x", s.clone());
    let y = b.mul(x, x);
    b.set_outputs(vec![y]);
    let mut g = Graph::new("safe_log");
    let x = g.input("x", s.clone());
    let t = g.sum_all(x);
    let zero = g.scalar(0.0, DType::F64);
    let p = g.gt(t, zero);
    let y = g.cond(p, a, b, &[x]);
    let l = g.sum_all(y);
    g.set_outputs(vec![l]);
    let xid = leaf(&g, "x").unwrap();
    let gr = grad_with_loss(&g, &[xid]).unwrap();
    assert!(compiled_nodes(&gr).1 >= 2, "the forward and the backward branch run natively");
    for (xv, want) in [([-1.0, -2.0, 0.5], [-2.0, -4.0, 1.0]), ([1.0, 2.0, 0.5], [1.0, 0.5, 2.0])] {
        let feeds: Feeds = vec![("x".into(), f64s(&[3], &xv))];
        for got in [eval(&gr, &feeds), cpu(&gr, &feeds)] {
            assert_close("cond grad", &vals(&got[1]), &want, 1e-12);
        }
        let j = jvp(&g, &["x"]).unwrap();
        let mut f = feeds.clone();
        f.push(("tangent_x".into(), f64s(&[3], &[1.0, 1.0, 1.0])));
        assert_close("cond jvp", &vals(&eval(&j, &f)[1]), &[want.iter().sum()], 1e-12);
    }
    // vmap over the operand with the predicate fixed: one cond of batched branches.
    let mut h = Graph::new("branch");
    let p = h.input("p", Shape::new(&[], DType::Bool));
    let x = h.input("x", s.clone());
    let (mut a2, mut b2) = (Graph::new("then"), Graph::new("else"));
    let xa = a2.input("x", s.clone());
    let ya = a2.sin(xa);
    a2.set_outputs(vec![ya]);
    let xb = b2.input("x", s.clone());
    let yb = b2.exp(xb);
    b2.set_outputs(vec![yb]);
    let y = h.cond(p, a2, b2, &[x]);
    h.set_outputs(vec![y]);
    let v = rlx_autodiff::vmap(&h, &["x"], 2).unwrap();
    assert!(v.nodes().iter().any(|n| matches!(n.op, Op::Cond(_))), "still a branch");
    let xs = [0.1, 0.2, 0.3, -0.4, -0.5, -0.6];
    for pv in [true, false] {
        let feeds: Feeds =
            vec![("p".into(), HostTensor::from_bool(&[], &[pv]).unwrap()), ("x".into(), f64s(&[2, 3], &xs))];
        let want: Vec<f64> = xs.iter().map(|&x: &f64| if pv { x.sin() } else { x.exp() }).collect();
        for got in [eval(&v, &feeds), cpu(&v, &feeds)] {
            assert_close("vmap cond", &vals(&got[0]), &want, 1e-12);
        }
    }
}
