//! rlx-linalg's ops: the conformance suite and the gradient / vmap checks over their samples (as
//! built-in ops get), values against numpy and gradients against JAX (fixtures written by
//! tools/linalg_fixtures.py), and the errors for inputs without an answer.

use rlx_autodiff::check::{finite_differences, vmap_against_loop, vmap_patterns};
use rlx_cpu::CpuBackend;
use rlx_ir::{DType, Error, Graph, HostTensor, NodeId, Op, Result, Sample, Shape, testkit};
use serde_json::Value;

fn run(g: &Graph, feeds: &[(&str, HostTensor)]) -> Result<Vec<HostTensor>> {
    rlx_driver::run_host(&CpuBackend::new(), g, feeds)
}

fn ours() -> Vec<Sample> {
    Op::all_samples().into_iter().filter(|s| s.label.starts_with("linalg_")).collect()
}

#[test]
fn ops_pass_the_conformance_suite() {
    rlx_linalg::register().unwrap();
    let report = testkit::run_conformance(run);
    let n = report.passed.iter().filter(|l| l.starts_with("linalg_")).count();
    assert_eq!(n, ours().len(), "every linalg sample ran: {:?}", report.failed);
    assert!(n >= 30, "{n} samples");
    report.assert_all_pass();
}

#[test]
fn ops_pass_the_gradient_and_vmap_checks() {
    rlx_linalg::register().unwrap();
    for s in &ours() {
        assert_eq!(finite_differences(s, true), Ok(true), "{}", s.label);
        for p in vmap_patterns(s.inputs.len()) {
            vmap_against_loop(s, &p, Some(&run)).unwrap_or_else(|e| panic!("{}: {e}", s.label));
        }
    }
}

fn tensor(v: &Value) -> HostTensor {
    let dims: Vec<usize> = v["dims"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
    let data: Vec<f64> = v["data"].as_array().unwrap().iter().map(|d| d.as_f64().unwrap()).collect();
    HostTensor::from_f64(&dims, DType::F64, &data).unwrap()
}

fn apply(g: &mut Graph, op: &str, xs: &[NodeId]) -> NodeId {
    match op {
        "solve" => rlx_linalg::solve(g, xs[0], xs[1]),
        "cholesky" => rlx_linalg::cholesky(g, xs[0]),
        "inv" => rlx_linalg::inv(g, xs[0]),
        "det" => rlx_linalg::det(g, xs[0]),
        "slogdet_sign" => rlx_linalg::slogdet(g, xs[0]).0,
        "slogdet_logabsdet" => rlx_linalg::slogdet(g, xs[0]).1,
        "qr_q" => rlx_linalg::qr(g, xs[0]).0,
        "qr_r" => rlx_linalg::qr(g, xs[0]).1,
        "eigh_values" => rlx_linalg::eigh(g, xs[0]).0,
        "eigh_vectors" => rlx_linalg::eigh(g, xs[0]).1,
        "svd_u" => rlx_linalg::svd(g, xs[0]).0,
        "svd_s" => rlx_linalg::svd(g, xs[0]).1,
        "svd_vt" => rlx_linalg::svd(g, xs[0]).2,
        "lstsq" => rlx_linalg::lstsq(g, xs[0], xs[1]).unwrap(),
        _ => panic!("unknown fixture op {op}"),
    }
}

/// `max |got - want| <= tol * (1 + max |want|)`.
fn close(what: &str, got: &HostTensor, want: &HostTensor, tol: f64) {
    assert_eq!(got.dims(), want.dims(), "{what}: dims");
    let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    let scale = 1.0 + w.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let err = g.iter().zip(&w).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= tol * scale, "{what}: max error {err:e} (scale {scale}): got {g:?}, want {w:?}");
}

#[test]
fn values_match_numpy_and_gradients_match_jax() {
    rlx_linalg::register().unwrap();
    let fx: Value = serde_json::from_str(include_str!("fixtures/linalg.json")).unwrap();
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 35);
    for (i, c) in cases.iter().enumerate() {
        let op = c["op"].as_str().unwrap();
        let what = format!("case {i} ({op})");
        let ins: Vec<HostTensor> = c["inputs"].as_array().unwrap().iter().map(tensor).collect();
        let mut g = Graph::new("fixture");
        let xs: Vec<NodeId> = ins.iter().enumerate().map(|(j, t)| g.input(&format!("x{j}"), t.shape.clone())).collect();
        let y = apply(&mut g, op, &xs);
        let w = g.constant(tensor(&c["weight"]));
        let p = g.mul(y, w);
        let loss = g.sum_all(p);
        g.set_outputs(vec![y]);
        let names: Vec<String> = (0..ins.len()).map(|j| format!("x{j}")).collect();
        let feeds: Vec<(&str, HostTensor)> = names.iter().map(String::as_str).zip(ins.iter().cloned()).collect();
        // The CPU kernel and the reference evaluation, both against numpy.
        let want = tensor(&c["output"]);
        close(&format!("{what} cpu"), &run(&g, &feeds).unwrap()[0], &want, 1e-12);
        close(&format!("{what} reference"), &rlx_ir::interp::evaluate(&g, &feeds).unwrap()[0], &want, 1e-12);
        g.set_outputs(vec![loss]);
        let gg = rlx_autodiff::grad(&g, &xs).unwrap();
        let got = run(&gg, &feeds).unwrap();
        for (j, gw) in c["grads"].as_array().unwrap().iter().enumerate() {
            close(&format!("{what} grad {j}"), &got[j], &tensor(gw), 1e-10);
        }
    }
}

fn one_op(dims: &[usize], f: impl Fn(&mut Graph, NodeId) -> NodeId) -> Graph {
    let mut g = Graph::new("one");
    let a = g.input("a", Shape::new(dims, DType::F64));
    let y = f(&mut g, a);
    g.set_outputs(vec![y]);
    g
}

fn eval_err(g: &Graph, a: &HostTensor) -> String {
    let e = run(g, &[("a", a.clone())]).unwrap_err();
    assert!(matches!(e, Error::Eval { .. }), "{e:?}");
    let r = rlx_ir::interp::evaluate(g, &[("a", a.clone())]).unwrap_err();
    assert_eq!(r.to_string(), e.to_string(), "the reference reports the same error");
    e.to_string()
}

#[test]
fn inputs_without_an_answer_are_typed_errors_or_numpy_values() {
    rlx_linalg::register().unwrap();
    // Item 1 of the batch is singular (rank 1), item 0 is the identity.
    let a = HostTensor::from_f64(&[2, 2, 2], DType::F64, &[1.0, 0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0]).unwrap();
    let e = eval_err(&one_op(&[2, 2, 2], rlx_linalg::inv), &a);
    assert!(e.contains("linalg_inv") && e.contains("batch item 1") && e.contains("singular"), "{e}");
    let g = one_op(&[2, 2, 2], |g, a| {
        let b = g.scalar(1.0, DType::F64);
        let b = g.broadcast_to(b, &[2]);
        rlx_linalg::solve(g, a, b)
    });
    let e = eval_err(&g, &a);
    assert!(e.contains("linalg_solve") && e.contains("batch item 1"), "{e}");
    // Not positive definite: the error names the pivot.
    let e = eval_err(&one_op(&[2, 2, 2], rlx_linalg::cholesky), &a);
    assert!(e.contains("linalg_cholesky") && e.contains("not positive definite"), "{e}");
    // det and slogdet answer as numpy: 0 and (0, -inf).
    let d = run(&one_op(&[2, 2, 2], rlx_linalg::det), &[("a", a.clone())]).unwrap();
    assert_eq!(d[0].to_f64_vec().unwrap(), vec![1.0, 0.0]);
    let mut g = Graph::new("slogdet");
    let x = g.input("a", Shape::new(&[2, 2, 2], DType::F64));
    let (s, l) = rlx_linalg::slogdet(&mut g, x);
    g.set_outputs(vec![s, l]);
    let r = run(&g, &[("a", a)]).unwrap();
    assert_eq!(r[0].to_f64_vec().unwrap(), vec![1.0, 0.0]);
    assert_eq!(r[1].to_f64_vec().unwrap(), vec![0.0, f64::NEG_INFINITY]);
}

#[test]
fn bad_shapes_are_typed_errors_naming_the_op() {
    rlx_linalg::register().unwrap();
    let mut g = Graph::new("bad");
    let a = g.input("a", Shape::new(&[2, 3, 4], DType::F64));
    let b = g.input("b", Shape::new(&[3], DType::F64));
    rlx_linalg::solve(&mut g, a, b);
    let e = g.check().unwrap_err().to_string();
    assert!(e.contains("linalg_solve") && e.contains("[..., n, n]"), "{e}");
    let mut g = Graph::new("bad");
    let a = g.input("a", Shape::new(&[3, 3], DType::F64));
    let b = g.input("b", Shape::new(&[2, 4], DType::F64));
    rlx_linalg::solve(&mut g, a, b);
    assert!(g.check().unwrap_err().to_string().contains("does not match"));
    let mut g = Graph::new("bad");
    let a = g.input("a", Shape::new(&[3, 3], DType::I32));
    rlx_linalg::det(&mut g, a);
    assert!(g.check().unwrap_err().to_string().contains("needs f32 or f64"));
    let mut g = Graph::new("bad");
    let a = g.input("a", Shape::new(&[3, 4], DType::F64));
    rlx_linalg::eigh(&mut g, a);
    let e = g.check().unwrap_err().to_string();
    assert!(e.contains("linalg_eigh") && e.contains("[..., n, n]"), "{e}");
    let mut g = Graph::new("bad");
    let a = g.input("a", Shape::new(&[4], DType::F64));
    rlx_linalg::qr(&mut g, a);
    assert!(g.check().unwrap_err().to_string().contains("linalg_qr"));
}

#[test]
fn numpy_2_vector_rule_and_text_round_trip() {
    rlx_linalg::register().unwrap();
    let mut g = Graph::new("rule");
    let a = g.input("a", Shape::new(&[5, 3, 3], DType::F32));
    // 1-D b is a vector; 2-D b is a matrix, even when its first dim equals the batch.
    let v = g.input("v", Shape::new(&[3], DType::F32));
    let m = g.input("m", Shape::new(&[3, 5], DType::F32));
    let xv = rlx_linalg::solve(&mut g, a, v);
    let xm = rlx_linalg::solve(&mut g, a, m);
    let (s, l) = rlx_linalg::slogdet(&mut g, a);
    let w = g.input("w", Shape::new(&[2, 5, 3], DType::F32));
    let (q, r) = rlx_linalg::qr(&mut g, w);
    let (u, sv, vt) = rlx_linalg::svd(&mut g, w);
    let (ev, evec) = rlx_linalg::eigh(&mut g, a);
    assert_eq!(g.shape(q).unwrap().fixed_dims(), Some(vec![2, 5, 3]));
    assert_eq!(g.shape(r).unwrap().fixed_dims(), Some(vec![2, 3, 3]));
    assert_eq!(g.shape(sv).unwrap().fixed_dims(), Some(vec![2, 3]));
    assert_eq!(g.shape(vt).unwrap().fixed_dims(), Some(vec![2, 3, 3]));
    assert_eq!(g.shape(ev).unwrap().fixed_dims(), Some(vec![5, 3]));
    assert_eq!(g.shape(xv).unwrap().fixed_dims(), Some(vec![5, 3]));
    assert_eq!(g.shape(xm).unwrap().fixed_dims(), Some(vec![5, 3, 5]));
    g.set_outputs(vec![xv, xm, s, l, q, r, u, sv, vt, ev, evec]);
    let text = g.to_text();
    assert!(text.contains("linalg_slogdet(%0) {\"part\":\"sign\"}"), "{text}");
    assert!(text.contains("{\"part\":\"r\"}") && text.contains("{\"part\":\"vt\"}"), "{text}");
    assert!(text.contains("{\"part\":\"vectors\"}"), "{text}");
    assert_eq!(Graph::from_text(&text).unwrap(), g);
    assert_eq!(Graph::from_json(&g.to_json()).unwrap(), g);
}

#[test]
fn lstsq_rejects_batched_inputs() {
    let mut g = Graph::new("lstsq");
    let b = g.input("b", Shape::new(&[3], DType::F64));
    let a = g.input("a2", Shape::new(&[2, 5, 3], DType::F64));
    let e = rlx_linalg::lstsq(&mut g, a, b).unwrap_err().to_string();
    assert!(e.contains("linalg_lstsq") && e.contains("[m, n]"), "{e}");
}
