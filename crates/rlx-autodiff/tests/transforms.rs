//! Higher order, Jacobians, composition of transforms and error cases.

mod common;

use common::*;
use rlx_autodiff::{grad, grad_with_loss, jacfwd, jacrev, jvp, leaf, vjp, vmap};
use rlx_ir::{DType, Error, Graph, HostTensor, Shape};

fn scalar(v: f64) -> HostTensor {
    HostTensor::from_f64(&[], DType::F64, &[v]).unwrap()
}

#[test]
fn grad_of_grad_to_order_four() {
    // f = exp(x) sin(x); its derivatives in closed form.
    let mut g = Graph::new("f");
    let x = g.input("x", Shape::scalar(DType::F64));
    let (e, s) = (g.exp(x), g.sin(x));
    let y = g.mul(e, s);
    g.set_outputs(vec![y]);
    let x0: f64 = 0.7;
    let (ex, sn, cs) = (x0.exp(), x0.sin(), x0.cos());
    let want = [ex * (sn + cs), 2.0 * ex * cs, 2.0 * ex * (cs - sn), -4.0 * ex * sn];
    let mut cur = g;
    for (order, w) in want.iter().enumerate() {
        cur = grad(&cur, &[x]).unwrap();
        let got = vals(&eval(&cur, &vec![("x".into(), scalar(x0))])[0])[0];
        assert!((got - w).abs() < 1e-12 * w.abs().max(1.0), "order {}: {got} vs {w}", order + 1);
    }
}

fn softmax_layer() -> Graph {
    let mut g = Graph::new("layer");
    let x = g.input("x", Shape::new(&[2, 3], DType::F64));
    let w = g.param("w", Shape::new(&[3, 4], DType::F64));
    let z = g.matmul(x, w);
    let y = g.softmax(z, -1);
    g.set_outputs(vec![y]);
    g
}

fn layer_feeds() -> Feeds {
    let t = |d: &[usize], s| rand_like(&HostTensor::zeros(&Shape::new(d, DType::F64)).unwrap(), s);
    vec![("x".into(), t(&[2, 3], 1)), ("w".into(), t(&[3, 4], 2))]
}

#[test]
fn jacfwd_and_jacrev_agree_with_finite_differences() {
    let g = softmax_layer();
    let feeds = layer_feeds();
    for wrt in ["x", "w"] {
        let jf = eval(&jacfwd(&g, wrt).unwrap(), &feeds).remove(0);
        let jr = eval(&jacrev(&g, wrt).unwrap(), &feeds).remove(0);
        let in_d = feeds.iter().find(|(n, _)| n == wrt).unwrap().1.dims();
        let mut want_d = vec![2, 4];
        want_d.extend(&in_d);
        assert_eq!(jf.dims(), want_d);
        assert_eq!(jr.dims(), want_d);
        close(&vals(&jf), &vals(&jr), 1e-12).unwrap();
        // Column j of the Jacobian is the finite difference along basis vector j.
        let x = feeds.iter().find(|(n, _)| n == wrt).unwrap().1.clone();
        let n = x.numel();
        let h = 1e-6;
        for j in 0..n {
            let mut e = vec![0.0; n];
            e[j] = 1.0;
            let d = HostTensor::from_f64(&in_d, DType::F64, &e).unwrap();
            let at = |s: f64| {
                let f: Feeds = feeds
                    .iter()
                    .map(|(m, t)| (m.clone(), if m == wrt { axpy(&x, s * h, &d) } else { t.clone() }))
                    .collect();
                vals(&eval(&g, &f)[0])
            };
            let (p, m) = (at(1.0), at(-1.0));
            let col: Vec<f64> = (0..8).map(|i| vals(&jf)[i * n + j]).collect();
            let fd: Vec<f64> = p.iter().zip(&m).map(|(a, b)| (a - b) / (2.0 * h)).collect();
            close(&col, &fd, 1e-7).unwrap();
        }
    }
}

#[test]
fn grad_of_vmap_equals_sum_of_per_example_grads() {
    // Per-example loss sum(softmax(x w)^2), vmapped over a batch of 3 rows of x, then summed.
    let mut g = Graph::new("one");
    let x = g.input("x", Shape::new(&[2, 3], DType::F64));
    let w = g.param("w", Shape::new(&[3, 4], DType::F64));
    let z = g.matmul(x, w);
    let y = g.softmax(z, -1);
    let sq = g.square(y);
    let l = g.sum_all(sq);
    g.set_outputs(vec![l]);
    let mut v = vmap(&g, &["x"], 3).unwrap();
    let per = v.outputs()[0];
    let total = v.sum_all(per);
    v.set_outputs(vec![total]);
    let wv = leaf(&v, "w").unwrap();
    let gv = grad(&v, &[wv]).unwrap();
    let xs = rand_like(&HostTensor::zeros(&Shape::new(&[3, 2, 3], DType::F64)).unwrap(), 5);
    let wt = layer_feeds()[1].1.clone();
    let got = vals(&eval(&gv, &vec![("x".into(), xs.clone()), ("w".into(), wt.clone())])[0]);
    // The same through vmap of grad (per-example gradients), summed here.
    let wg = leaf(&g, "w").unwrap();
    let pg = vmap(&grad(&g, &[wg]).unwrap(), &["x"], 3).unwrap();
    let per_ex = vals(&eval(&pg, &vec![("x".into(), xs), ("w".into(), wt)])[0]);
    let summed: Vec<f64> = (0..12).map(|j| (0..3).map(|b| per_ex[b * 12 + j]).sum()).collect();
    close(&got, &summed, 1e-12).unwrap();
}

#[test]
fn vjp_and_jvp_are_adjoint() {
    // <u, J v> == <J^T u, v> for the softmax layer.
    let g = softmax_layer();
    let feeds = layer_feeds();
    let v = rand_like(&feeds[0].1, 11);
    let u = rand_like(&HostTensor::zeros(&Shape::new(&[2, 4], DType::F64)).unwrap(), 12);
    let mut jf = feeds.clone();
    jf.push(("tangent_x".into(), v.clone()));
    let jv = vals(&eval(&jvp(&g, &["x"]).unwrap(), &jf)[1]);
    let mut vf = feeds.clone();
    vf.push(("cotangent_0".into(), u.clone()));
    let x = leaf(&g, "x").unwrap();
    let jtu = vals(&eval(&vjp(&g, &[x]).unwrap(), &vf)[1]);
    close(&[dot(&vals(&u), &jv)], &[dot(&jtu, &vals(&v))], 1e-12).unwrap();
}

#[test]
fn errors_name_the_problem() {
    let g = softmax_layer();
    let x = leaf(&g, "x").unwrap();
    // Not a scalar loss.
    let e = grad_with_loss(&g, &[x]).unwrap_err().to_string();
    assert!(e.contains("scalar float loss"), "{e}");
    // Unknown names.
    let e = jvp(&g, &["nope"]).unwrap_err();
    assert!(matches!(e, Error::UnknownName { .. }), "{e}");
    // Params are shared under vmap.
    let e = vmap(&g, &["w"], 2).unwrap_err().to_string();
    assert!(e.contains("params are shared"), "{e}");
    // Integer inputs are not differentiable.
    let mut h = Graph::new("int");
    let i = h.input("i", Shape::new(&[3], DType::I64));
    let f = h.cast(i, DType::F64);
    let s = h.sum_all(f);
    h.set_outputs(vec![s]);
    let e = grad(&h, &[i]).unwrap_err().to_string();
    assert!(e.contains("only floats are differentiable"), "{e}");
}

#[test]
fn non_differentiable_ops_give_zero_tangents() {
    let mut g = Graph::new("nd");
    let x = g.input("x", Shape::new(&[4], DType::F64));
    let a = g.argmax(x, 0, false);
    let fl = g.floor(x);
    let af = g.cast(a, DType::F64);
    let y = g.add(fl, af);
    let l = g.sum_all(y);
    g.set_outputs(vec![l]);
    let gr = grad(&g, &[x]).unwrap();
    let xv = HostTensor::from_f64(&[4], DType::F64, &[0.3, 2.5, -1.2, 1.7]).unwrap();
    assert_eq!(vals(&eval(&gr, &vec![("x".into(), xv)])[0]), vec![0.0; 4]);
}

#[test]
fn custom_rules_are_used_instead_of_the_body() {
    use rlx_ir::ops::CustomFn;
    // body: x^2; deliberately "wrong" rules (jvp: 10 t, vjp: 3 ct) show which path ran.
    let s = Shape::new(&[2], DType::F64);
    let unary = |name: &str, ins: usize, f: &dyn Fn(&mut Graph, &[rlx_ir::NodeId]) -> rlx_ir::NodeId| {
        let mut b = Graph::new(name);
        let xs: Vec<_> = (0..ins).map(|i| b.input(&format!("a{i}"), s.clone())).collect();
        let y = f(&mut b, &xs);
        b.set_outputs(vec![y]);
        Box::new(b)
    };
    let body = unary("sq", 1, &|b, x| b.square(x[0]));
    let jvp_body = unary("sq_jvp", 2, &|b, x| {
        let k = b.scalar(10.0, DType::F64);
        b.mul(x[1], k)
    });
    let vjp_body = unary("sq_vjp", 2, &|b, x| {
        let k = b.scalar(3.0, DType::F64);
        b.mul(x[1], k)
    });
    let mut g = Graph::new("g");
    let x = g.input("x", s.clone());
    let f = CustomFn { name: "sq".into(), body: body.clone(), jvp_body: Some(jvp_body), vjp_body: Some(vjp_body) };
    let y = g.custom_fn(f, &[x]);
    let l = g.sum_all(y);
    g.set_outputs(vec![l]);
    let xv = HostTensor::from_f64(&[2], DType::F64, &[1.0, 2.0]).unwrap();
    let feeds: Feeds = vec![("x".into(), xv.clone())];
    assert_eq!(vals(&eval(&g, &feeds)[0]), vec![5.0]);
    assert_eq!(vals(&eval(&grad(&g, &[x]).unwrap(), &feeds)[0]), vec![3.0, 3.0]);
    let mut jf = feeds.clone();
    jf.push(("tangent_x".into(), HostTensor::from_f64(&[2], DType::F64, &[1.0, 1.0]).unwrap()));
    assert_eq!(vals(&eval(&jvp(&g, &["x"]).unwrap(), &jf)[1]), vec![20.0]);
    // Without rules, the body is differentiated: 2x.
    let mut h = Graph::new("h");
    let x = h.input("x", s);
    let f = CustomFn { name: "sq".into(), body, jvp_body: None, vjp_body: None };
    let y = h.custom_fn(f, &[x]);
    let l = h.sum_all(y);
    h.set_outputs(vec![l]);
    assert_eq!(vals(&eval(&grad(&h, &[x]).unwrap(), &feeds)[0]), vec![2.0, 4.0]);
}

#[test]
fn every_op_has_every_rule() {
    // The generated coverage table: no op lacks a jvp, vjp or batching path.
    let table = rlx_autodiff::coverage_table();
    eprintln!("{table}");
    for (op, c) in rlx_autodiff::coverage() {
        for (t, v) in [("jvp", &c.jvp), ("vjp", &c.vjp), ("vmap", &c.vmap)] {
            assert!(!v.contains("missing") && !v.contains("error"), "{op} {t}: {v}");
            // Only while_loop refuses reverse mode (its trip count is data), as in JAX.
            assert!(!v.contains("forward-only") || (op == "while_loop" && t == "vjp"), "{op} {t}: {v}");
        }
    }
}

#[test]
fn while_loop_is_forward_mode_only_and_batches() {
    // while x.sum() < 3: x *= 2, from [0.3, 0.5]: two doublings, so d sum(x_final) / dx = 4.
    let mut c = Graph::new("c");
    let cx = c.input("x", Shape::new(&[2], DType::F64));
    let t = c.sum_all(cx);
    let three = c.scalar(3.0, DType::F64);
    let p = c.lt(t, three);
    c.set_outputs(vec![p]);
    let mut b = Graph::new("b");
    let bx = b.input("x", Shape::new(&[2], DType::F64));
    let y = b.add(bx, bx);
    b.set_outputs(vec![y]);
    let mut g = Graph::new("w");
    let x = g.input("x", Shape::new(&[2], DType::F64));
    let y = g.while_loop(c, b, x, &[], 10);
    let l = g.sum_all(y);
    g.set_outputs(vec![l]);
    let feeds: Feeds = vec![("x".into(), HostTensor::from_f64(&[2], DType::F64, &[0.3, 0.5]).unwrap())];
    assert_eq!(vals(&eval(&g, &feeds)[0]), vec![3.2]);
    // Forward mode differentiates the iterations taken; reverse mode is refused, as in JAX.
    let mut tf = feeds.clone();
    tf.push(("tangent_x".into(), HostTensor::from_f64(&[2], DType::F64, &[1.0, 0.5]).unwrap()));
    assert_eq!(vals(&eval(&jvp(&g, &["x"]).unwrap(), &tf)[1]), vec![6.0]);
    let e = grad(&g, &[x]).unwrap_err();
    assert!(matches!(&e, Error::Transform { transform: "vjp", op, .. } if op == "while_loop"), "{e}");
    assert!(e.to_string().contains("forward-mode only"), "{e}");
    // vmap over a batch where examples take different trip counts.
    let v = vmap(&g, &["x"], 2).unwrap();
    let xs = HostTensor::from_f64(&[2, 2], DType::F64, &[0.3, 0.5, 2.0, 2.0]).unwrap();
    assert_eq!(vals(&eval(&v, &vec![("x".into(), xs)])[0]), vec![3.2, 4.0]);
}

#[test]
fn missing_rules_and_dynamic_dims_are_errors() {
    // An empty scan differentiates (its rules are scans too): zero steps, zero gradient.
    let mut body = Graph::new("b");
    let h = body.input("h", Shape::new(&[2], DType::F64));
    let x = body.input("x", Shape::new(&[2], DType::F64));
    let y = body.add(h, x);
    body.set_outputs(vec![y, y]);
    let mut g = Graph::new("empty_scan");
    let h0 = g.input("h0", Shape::new(&[2], DType::F64));
    let xs = g.input("xs", Shape::new(&[0, 2], DType::F64));
    let (_, ys) = g.scan(body, h0, xs, &[]);
    let l = g.sum_all(ys);
    g.set_outputs(vec![l]);
    let feeds: Feeds = vec![
        ("h0".into(), HostTensor::from_f64(&[2], DType::F64, &[1.0, 2.0]).unwrap()),
        ("xs".into(), HostTensor::from_f64(&[0, 2], DType::F64, &[]).unwrap()),
    ];
    assert_eq!(vals(&eval(&grad(&g, &[h0]).unwrap(), &feeds)[0]), vec![0.0, 0.0]);
    // A while_loop bounded past the unrolling limit differentiates forward as a loop, and never
    // in reverse: the transform names the op.
    let mut c = Graph::new("c");
    let cx = c.input("x", Shape::new(&[2], DType::F64));
    let t = c.sum_all(cx);
    let three = c.scalar(3.0, DType::F64);
    let p = c.lt(t, three);
    c.set_outputs(vec![p]);
    let mut b = Graph::new("b");
    let bx = b.input("x", Shape::new(&[2], DType::F64));
    let y = b.add(bx, bx);
    b.set_outputs(vec![y]);
    let mut g = Graph::new("unbounded");
    let x = g.input("x", Shape::new(&[2], DType::F64));
    let y = g.while_loop(c, b, x, &[], usize::MAX);
    let l = g.sum_all(y);
    g.set_outputs(vec![l]);
    let j = jvp(&g, &["x"]).unwrap();
    let feeds: Feeds = vec![
        ("x".into(), HostTensor::from_f64(&[2], DType::F64, &[0.25, 0.5]).unwrap()),
        ("tangent_x".into(), HostTensor::from_f64(&[2], DType::F64, &[1.0, 1.0]).unwrap()),
    ];
    // 0.75 doubles twice to reach 3: the value and the tangent scale by 4.
    let out = eval(&j, &feeds);
    assert_eq!((vals(&out[0]), vals(&out[1])), (vec![3.0], vec![8.0]));
    let e = grad(&g, &[x]).unwrap_err().to_string();
    assert!(e.contains("vjp: op `while_loop`") && e.contains("forward-mode only"), "{e}");
    // Dynamic dims must be bound first.
    let mut d = Graph::new("dyn");
    let x = d.input("x", Shape::with_dims(vec![rlx_ir::Dim::Sym("n".into())], DType::F64));
    let y = d.exp(x);
    d.set_outputs(vec![y]);
    for e in [jvp(&d, &["x"]).unwrap_err(), vmap(&d, &["x"], 2).unwrap_err()] {
        assert!(matches!(&e, Error::UnboundDim { symbol, .. } if symbol == "n"), "{e}");
    }
}
