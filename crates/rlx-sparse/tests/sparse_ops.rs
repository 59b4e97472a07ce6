//! rlx-sparse's ops through the suites every op goes through (conformance on the CPU backend,
//! finite-difference gradients to second order, vmap against a loop), and against scipy / JAX
//! fixtures written by tools/sparse_fixtures.py.

use rlx_autodiff::check::{finite_differences, vmap_against_loop, vmap_patterns};
use rlx_cpu::CpuBackend;
use rlx_ir::{DType, Graph, HostTensor, Op, Result, Sample, Shape, testkit};
use rlx_sparse::{Csr, register};
use serde_json::Value;

fn run(g: &Graph, feeds: &[(&str, HostTensor)]) -> Result<Vec<HostTensor>> {
    rlx_driver::run_host(&CpuBackend::new(), g, feeds)
}

const OURS: [&str; 4] = ["csr_matmul/", "csr_sddmm/", "cg_solve/", "splu_solve/"];

fn ours(label: &str) -> bool {
    OURS.iter().any(|p| label.starts_with(p))
}

fn samples() -> Vec<Sample> {
    Op::all_samples().into_iter().filter(|s| matches!(s.op, Op::Custom(_)) && ours(&s.label)).collect()
}

#[test]
fn ops_pass_the_conformance_suite() {
    register().unwrap();
    let report = testkit::run_conformance(run);
    let n = report.passed.iter().filter(|l| ours(l)).count();
    assert_eq!(n, 11, "our samples ran: {:?}", report.failed);
    report.assert_all_pass();
}

#[test]
fn ops_pass_the_gradient_and_vmap_checks() {
    register().unwrap();
    let samples = samples();
    assert_eq!(samples.len(), 11);
    for s in &samples {
        assert_eq!(finite_differences(s, true), Ok(true), "{}", s.label);
        for p in vmap_patterns(s.inputs.len()) {
            vmap_against_loop(s, &p, Some(&run)).unwrap_or_else(|e| panic!("{}: {e}", s.label));
        }
    }
}

fn fixtures() -> Value {
    serde_json::from_str(include_str!("fixtures/sparse.json")).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn csr(v: &Value) -> Csr {
    let ints = |k: &str| v[k].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect::<Vec<_>>();
    let n = |k: &str| v[k].as_u64().unwrap() as usize;
    Csr::from_arrays(n("nrows"), n("ncols"), &ints("indptr"), &ints("indices"), &floats(&v["values"])).unwrap()
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tol * scale, "{what}[{i}]: {a} vs {b} (tol {tol} x {scale})");
    }
}

fn feeds_of(list: &[(String, HostTensor)]) -> Vec<(&str, HostTensor)> {
    list.iter().map(|(n, t)| (n.as_str(), t.clone())).collect()
}

fn vec_input(g: &mut Graph, name: &str, dims: &[usize]) -> rlx_ir::NodeId {
    g.input(name, Shape::new(dims, DType::F64))
}

#[test]
fn products_match_scipy() {
    register().unwrap();
    let f = &fixtures()["product"];
    let a = csr(&f["a"]);
    let (m, n, k) = (a.nrows, a.ncols, f["k"].as_u64().unwrap() as usize);
    let mut g = Graph::new("products");
    let an = a.inputs(&mut g, "A", DType::F64);
    let x = vec_input(&mut g, "x", &[n]);
    let xs = vec_input(&mut g, "xs", &[n, k]);
    let y = vec_input(&mut g, "y", &[m]);
    let outs =
        vec![rlx_sparse::spmv(&mut g, an, x), rlx_sparse::spmm(&mut g, an, xs), rlx_sparse::spmv_t(&mut g, an, y)];
    g.set_outputs(outs);
    let mut feeds = a.feeds("A", DType::F64);
    for (name, dims) in [("x", vec![n]), ("xs", vec![n, k]), ("y", vec![m])] {
        feeds.push((name.into(), HostTensor::from_f64(&dims, DType::F64, &floats(&f[name])).unwrap()));
    }
    let got = run(&g, &feeds_of(&feeds)).unwrap();
    for (i, key) in ["ax", "axs", "aty"].iter().enumerate() {
        close(&got[i].to_f64_vec().unwrap(), &floats(&f[*key]), 1e-12, key);
    }
    // The Rust-side type agrees too.
    close(&a.matvec(&floats(&f["x"])).unwrap(), &floats(&f["ax"]), 1e-12, "Csr::matvec");
}

/// `sum(w * solve(A, b))` and its gradients wrt A's values and b, on the CPU backend.
fn solve_and_grads(which: &str, a: &Csr, b: &[f64], w: &[f64]) -> Vec<Vec<f64>> {
    let n = a.nrows;
    let mut g = Graph::new(which);
    let an = a.inputs(&mut g, "A", DType::F64);
    let bn = vec_input(&mut g, "b", &[n]);
    let x = match which {
        "cg" => rlx_sparse::cg_solve(&mut g, an, bn, 1e-13, None),
        _ => rlx_sparse::splu_solve(&mut g, an, bn),
    };
    let wn = g.constant(HostTensor::from_f64(&[n], DType::F64, w).unwrap());
    let p = g.mul(x, wn);
    let l = g.sum_all(p);
    g.set_outputs(vec![l]);
    let gg = rlx_autodiff::grad(&g, &[an.values, bn]).unwrap();
    g.set_outputs(vec![x]);
    let mut feeds = a.feeds("A", DType::F64);
    feeds.push(("b".into(), HostTensor::from_f64(&[n], DType::F64, b).unwrap()));
    let xs = run(&g, &feeds_of(&feeds)).unwrap();
    let grads = run(&gg, &feeds_of(&feeds)).unwrap();
    let mut out = vec![xs[0].to_f64_vec().unwrap()];
    out.extend(grads.iter().map(|t| t.to_f64_vec().unwrap()));
    out
}

#[test]
fn cg_and_its_gradient_match_scipy_and_jax() {
    register().unwrap();
    let f = &fixtures()["cg"];
    let a = csr(&f["a"]);
    let (b, w) = (floats(&f["b"]), floats(&f["w"]));
    let got = solve_and_grads("cg", &a, &b, &w);
    close(&got[0], &floats(&f["x"]), 1e-9, "cg x vs scipy");
    close(&got[1], &floats(&f["grad_values"]), 1e-9, "d values vs jax");
    close(&got[2], &floats(&f["grad_b"]), 1e-9, "d b vs jax");
    // The Rust entry point: scipy needed this many iterations at the same rtol.
    let info = rlx_sparse::cg(&a, &b, 1e-12, 1000).unwrap();
    close(&info.x, &floats(&f["x"]), 1e-9, "rlx_sparse::cg");
    let scipy = f["scipy_iterations"].as_u64().unwrap() as usize;
    assert!(info.iterations.abs_diff(scipy) <= 2, "{} iterations, scipy {scipy}", info.iterations);
}

#[test]
fn splu_and_its_gradient_match_scipy_and_jax() {
    register().unwrap();
    let f = &fixtures()["lu"];
    let a = csr(&f["a"]);
    let (b, w) = (floats(&f["b"]), floats(&f["w"]));
    let got = solve_and_grads("lu", &a, &b, &w);
    close(&got[0], &floats(&f["x"]), 1e-11, "splu x vs scipy");
    close(&got[1], &floats(&f["grad_values"]), 1e-11, "d values vs jax");
    close(&got[2], &floats(&f["grad_b"]), 1e-11, "d b vs jax");
    close(&rlx_sparse::splu(&a, &b).unwrap(), &floats(&f["x"]), 1e-11, "rlx_sparse::splu");
}

#[test]
fn cg_reports_non_convergence_with_iterations_and_residual() {
    register().unwrap();
    let f = &fixtures()["cg"];
    let (a, b) = (csr(&f["a"]), floats(&f["b"]));
    match rlx_sparse::cg(&a, &b, 1e-12, 3) {
        Err(rlx_sparse::SparseError::NotConverged { iterations: 3, residual, .. }) => assert!(residual > 1e-12),
        other => panic!("expected NotConverged, got {other:?}"),
    }
    // In a graph, the kernel's error says the same.
    let mut g = Graph::new("cg3");
    let an = a.inputs(&mut g, "A", DType::F64);
    let bn = vec_input(&mut g, "b", &[a.nrows]);
    let x = rlx_sparse::cg_solve(&mut g, an, bn, 1e-12, Some(3));
    g.set_outputs(vec![x]);
    let mut feeds = a.feeds("A", DType::F64);
    feeds.push(("b".into(), HostTensor::from_f64(&[a.nrows], DType::F64, &b).unwrap()));
    let e = run(&g, &feeds_of(&feeds)).unwrap_err().to_string();
    assert!(e.contains("cg_solve") && e.contains("did not converge in 3 iterations"), "{e}");
}

#[test]
fn bad_patterns_and_singular_matrices_are_errors() {
    register().unwrap();
    let mut g = Graph::new("bad");
    let a = Csr::from_triplets(3, 3, &[(0, 0, 1.0), (1, 1, 1.0), (2, 2, 1.0)]).unwrap();
    let an = a.inputs(&mut g, "A", DType::F64);
    let x = vec_input(&mut g, "x", &[3]);
    let y = rlx_sparse::spmv(&mut g, an, x);
    g.set_outputs(vec![y]);
    let mut feeds = a.feeds("A", DType::F64);
    feeds[1].1 = HostTensor::from_i64(&[3], DType::I64, &[0, 7, 2]).unwrap();
    feeds.push(("x".into(), HostTensor::from_f64(&[3], DType::F64, &[1.0, 2.0, 3.0]).unwrap()));
    let e = run(&g, &feeds_of(&feeds)).unwrap_err().to_string();
    assert!(e.contains("csr_matmul") && e.contains("column index 7"), "{e}");
    let e = rlx_ir::interp::evaluate(&g, &feeds_of(&feeds)).unwrap_err().to_string();
    assert!(e.contains("column index 7"), "{e}");
    // Structurally singular: an empty row.
    let s = Csr::from_triplets(2, 2, &[(0, 0, 1.0), (0, 1, 1.0)]).unwrap();
    assert!(matches!(rlx_sparse::splu(&s, &[1.0, 1.0]), Err(rlx_sparse::SparseError::Singular { .. })));
    assert!(Csr::from_arrays(2, 2, &[0, 2, 1], &[0, 1], &[1.0, 1.0]).is_err());
    // Triplets at the same place sum, as scipy's tocsr does.
    let d = Csr::from_triplets(2, 2, &[(1, 0, 2.0), (0, 1, 1.0), (1, 0, 3.0)]).unwrap();
    assert_eq!(d.to_dense().unwrap(), vec![0.0, 1.0, 5.0, 0.0]);
}

#[test]
fn text_round_trips_through_the_registry() {
    register().unwrap();
    let a = Csr::from_triplets(2, 2, &[(0, 0, 2.0), (1, 1, 3.0)]).unwrap();
    let mut g = Graph::new("rt");
    let an = a.inputs(&mut g, "A", DType::F32);
    let b = g.input("b", Shape::new(&[2], DType::F32));
    let x = rlx_sparse::cg_solve(&mut g, an, b, 1e-6, Some(50));
    let y = rlx_sparse::splu_solve(&mut g, an, x);
    let z = rlx_sparse::spmv_t(&mut g, an, y);
    g.set_outputs(vec![z]);
    let text = g.to_text();
    assert!(text.contains("cg_solve(") && text.contains("\"maxiter\":50"), "{text}");
    assert_eq!(Graph::from_text(&text).unwrap(), g);
    assert_eq!(Graph::from_json(&g.to_json()).unwrap(), g);
}

/// A 5-point Laplacian on an `m x m` grid with a seeded perturbation of the values (so that A
/// and A^T differ), large enough that the kernels split rows over the pool.
fn grid(m: usize) -> Csr {
    let mut trip = vec![];
    for i in 0..m {
        for j in 0..m {
            let p = i * m + j;
            trip.push((p, p, 4.0 + (p % 5) as f64 * 0.1));
            for (di, dj) in [(-1i64, 0i64), (1, 0), (0, -1), (0, 1)] {
                let (a, b) = (i as i64 + di, j as i64 + dj);
                if (0..m as i64).contains(&a) && (0..m as i64).contains(&b) {
                    trip.push((p, a as usize * m + b as usize, -1.0 - (p % 3) as f64 * 0.01));
                }
            }
        }
    }
    Csr::from_triplets(m * m, m * m, &trip).unwrap()
}

#[test]
fn large_products_split_over_threads_match_the_dense_loop() {
    register().unwrap();
    let a = grid(100);
    let (n, k) = (a.nrows, 3);
    let dense = |x: &[f64], k: usize, t: bool| {
        let mut y = vec![0.0; n * k];
        for i in 0..n {
            for p in a.indptr[i]..a.indptr[i + 1] {
                let (r, c) = if t { (a.indices[p], i) } else { (i, a.indices[p]) };
                (0..k).for_each(|j| y[r * k + j] += a.values[p] * x[c * k + j]);
            }
        }
        y
    };
    let x: Vec<f64> = rlx_ir::ops::util::rand_f64(n * k, -1.0, 1.0, 5);
    for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-5)] {
        let mut g = Graph::new("big");
        let an = a.inputs(&mut g, "A", dt);
        let xv = g.input("x", Shape::new(&[n], dt));
        let xm = g.input("xm", Shape::new(&[n, k], dt));
        let outs = vec![
            rlx_sparse::spmv(&mut g, an, xv),
            rlx_sparse::spmm(&mut g, an, xm),
            rlx_sparse::spmv_t(&mut g, an, xm),
        ];
        g.set_outputs(outs);
        let mut feeds = a.feeds("A", dt);
        feeds.push(("x".into(), HostTensor::from_f64(&[n], dt, &x[..n]).unwrap()));
        feeds.push(("xm".into(), HostTensor::from_f64(&[n, k], dt, &x).unwrap()));
        let got = run(&g, &feeds_of(&feeds)).unwrap();
        close(&got[0].to_f64_vec().unwrap(), &dense(&x[..n], 1, false), tol, "spmv");
        close(&got[1].to_f64_vec().unwrap(), &dense(&x, k, false), tol, "spmm");
        close(&got[2].to_f64_vec().unwrap(), &dense(&x, k, true), tol, "spmv_t");
        // A bad column deep in the pattern is still the typed error naming the entry.
        let mut bad = a.feeds("A", dt);
        let mut idx: Vec<i64> = a.indices.iter().map(|&c| c as i64).collect();
        idx[10_000] = -2;
        bad[1].1 = HostTensor::from_i64(&[idx.len()], DType::I64, &idx).unwrap();
        bad.extend(feeds[3..].iter().cloned());
        let e = run(&g, &feeds_of(&bad)).unwrap_err().to_string();
        assert!(e.contains("column index -2 at entry 10000"), "{e}");
    }
}

#[test]
fn vmap_over_the_operand_is_one_product_and_one_solve() {
    register().unwrap();
    let a = grid(4);
    let n = a.nrows;
    let mut g = Graph::new("one");
    let an = a.inputs(&mut g, "A", DType::F64);
    let x = vec_input(&mut g, "x", &[n, 2]);
    let y = rlx_sparse::spmm(&mut g, an, x);
    let z = rlx_sparse::splu_solve(&mut g, an, y);
    g.set_outputs(vec![z]);
    let v = rlx_autodiff::vmap(&g, &["x"], 5).unwrap();
    let count = |name: &str| v.nodes().iter().filter(|nd| matches!(&nd.op, Op::Custom(c) if c.name() == name)).count();
    assert_eq!((count("csr_matmul"), count("splu_solve")), (1, 1), "{}", v.to_text());
}
