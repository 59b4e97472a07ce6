//! Every op's samples through every transform: jvp and vjp against central finite differences
//! in f64, second order (hvp) where the op is smooth, and vmap against a loop over the batch on
//! the reference interpreter and on the CPU backend.

mod common;

use common::*;
use rlx_autodiff::{grad, hvp, jvp, vmap};
use rlx_ir::{DType, Graph, HostTensor, Op, Sample, testkit};

/// Ops whose derivative jumps (second order is checked only elsewhere).
const NON_SMOOTH: &[&str] =
    &["abs", "relu", "floor", "round", "sign", "maximum", "minimum", "max", "min", "max_pool2d", "top_k"];

/// Ops whose gradient is an estimator by design (tested against its formula in `estimators.rs`).
const ESTIMATED: &[&str] = &["fake_quant"];

fn float_samples() -> Vec<Sample> {
    Op::all_samples()
        .into_iter()
        .filter(|s| !s.inputs.is_empty() && !ESTIMATED.contains(&s.op.def().name()))
        .map(|s| to_f64(&s))
        .collect()
}

/// The f64 sample graph, the float input names, and the feeds; None when the output is not f64.
fn setup(s: &Sample) -> Option<(Graph, Vec<String>, Feeds)> {
    let (g, feeds) = testkit::sample_graph(s).ok()?;
    let y = g.outputs()[0];
    if g.dtype(y) != DType::F64 || s.op.def().traits().contains(rlx_ir::OpTraits::NON_DIFFERENTIABLE) {
        return None;
    }
    let names: Vec<String> =
        feeds.iter().filter(|(_, t)| t.dtype() == DType::F64 && t.numel() > 0).map(|(n, _)| n.clone()).collect();
    if names.is_empty() {
        return None;
    }
    Some((g, names, feeds))
}

/// `sum(y * w)` for a fixed random `w`: a scalar loss exercising every output element.
fn loss_graph(g: &Graph) -> Graph {
    let mut l = g.clone();
    let y = l.outputs()[0];
    let w = rand_like(&HostTensor::zeros(l.shape(y).unwrap()).unwrap(), 99);
    let w = l.constant(w);
    let p = l.mul(y, w);
    let s = l.sum_all(p);
    l.set_outputs(vec![s]);
    l
}

fn with(feeds: &Feeds, name: &str, t: HostTensor) -> Feeds {
    feeds.iter().map(|(n, v)| (n.clone(), if n == name { t.clone() } else { v.clone() })).collect()
}

fn check_sample(s: &Sample) -> Result<bool, String> {
    let Some((g, names, feeds)) = setup(s) else { return Ok(false) };
    let h = 1e-6;
    let dirs: Vec<HostTensor> = names
        .iter()
        .enumerate()
        .map(|(i, n)| rand_like(&feeds.iter().find(|(m, _)| m == n).unwrap().1, 7 + i as u64))
        .collect();
    let shifted = |sign: f64, scale: f64| -> Feeds {
        let mut f = feeds.clone();
        for (n, d) in names.iter().zip(&dirs) {
            let x = f.iter().find(|(m, _)| m == n).unwrap().1.clone();
            f = with(&f, n, axpy(&x, sign * scale, d));
        }
        f
    };
    // Forward mode: the tangent output against (f(x + h d) - f(x - h d)) / 2h.
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let jg = jvp(&g, &refs).map_err(|e| format!("jvp: {e}"))?;
    let mut jf = feeds.clone();
    for (n, d) in names.iter().zip(&dirs) {
        jf.push((format!("tangent_{n}"), d.clone()));
    }
    let tan = vals(&eval(&jg, &jf)[1]);
    // At a tie the top-k values are not differentiable: finite differences are meaningless there.
    if s.label == "top_k/values/f32/1d" {
        return Ok(false);
    }
    let (yp, ym) = (vals(&eval(&g, &shifted(1.0, h))[0]), vals(&eval(&g, &shifted(-1.0, h))[0]));
    let fd: Vec<f64> = yp.iter().zip(&ym).map(|(a, b)| (a - b) / (2.0 * h)).collect();
    close(&tan, &fd, 1e-6).map_err(|e| format!("jvp vs finite differences: {e}"))?;
    // Reverse mode: <grad L, d> against the directional difference of L.
    let l = loss_graph(&g);
    let ids: Vec<_> = names.iter().map(|n| rlx_autodiff::leaf(&l, n).unwrap()).collect();
    let gg = grad(&l, &ids).map_err(|e| format!("grad: {e}"))?;
    let grads = eval(&gg, &feeds);
    let dd: f64 = grads.iter().zip(&dirs).map(|(gr, d)| dot(&vals(gr), &vals(d))).sum();
    let lp = vals(&eval(&l, &shifted(1.0, h))[0])[0];
    let lm = vals(&eval(&l, &shifted(-1.0, h))[0])[0];
    close(&[dd], &[(lp - lm) / (2.0 * h)], 1e-6).map_err(|e| format!("vjp vs finite differences: {e}"))?;
    // Second order: hvp against the difference of gradients.
    if !NON_SMOOTH.contains(&s.op.def().name()) {
        let hg = hvp(&l, &refs).map_err(|e| format!("hvp: {e}"))?;
        let out = eval(&hg, &jf);
        let k = names.len();
        let h2 = 1e-6;
        let (gp, gm) = (eval(&gg, &shifted(1.0, h2)), eval(&gg, &shifted(-1.0, h2)));
        for i in 0..k {
            let fd: Vec<f64> = vals(&gp[i]).iter().zip(vals(&gm[i])).map(|(a, b)| (a - b) / (2.0 * h2)).collect();
            close(&vals(&out[1 + k + i]), &fd, 1e-6).map_err(|e| format!("hvp[{i}] vs finite differences: {e}"))?;
        }
    }
    Ok(true)
}

#[test]
fn jvp_vjp_and_hvp_match_finite_differences_for_every_sample() {
    let (mut checked, mut failed) = (0, vec![]);
    for s in float_samples() {
        match check_sample(&s) {
            Ok(true) => checked += 1,
            Ok(false) => {}
            Err(e) => failed.push(format!("{}: {e}", s.label)),
        }
    }
    eprintln!("finite differences: {checked} samples checked");
    assert!(failed.is_empty(), "{} failures:\n{}", failed.len(), failed.join("\n"));
    assert!(checked > 150, "only {checked} samples were checked");
}

/// A stack of `b` variants of `t` along a new leading axis (floats perturbed, others repeated).
fn stack(t: &HostTensor, b: usize, seed: u64) -> HostTensor {
    let mut v = vec![];
    for k in 0..b {
        if t.dtype().is_float() {
            let noise = rand_like(t, seed + k as u64);
            v.extend(vals(t).iter().zip(vals(&noise)).map(|(x, n)| x + 0.25 * k as f64 * n));
        } else {
            v.extend(t.to_f64_vec().unwrap());
        }
    }
    let mut d = vec![b];
    d.extend(t.dims());
    HostTensor::from_f64(&d, DType::F64, &v).unwrap().cast(t.dtype())
}

/// Example `k` of a batched tensor.
fn example(t: &HostTensor, k: usize) -> HostTensor {
    let d = t.dims();
    let n: usize = d[1..].iter().product();
    let idx: Vec<usize> = (k * n..(k + 1) * n).collect();
    HostTensor::new(rlx_ir::Shape::new(&d[1..], t.dtype()), t.data.gather(&idx)).unwrap()
}

fn check_vmap(s: &Sample, cpu: &rlx_cpu::CpuBackend, which: &[usize]) -> Result<(), String> {
    let (g, feeds) = testkit::sample_graph(s).map_err(|e| e.to_string())?;
    let b = 3;
    let names: Vec<String> = which.iter().map(|&i| format!("in{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let v = vmap(&g, &refs, b).map_err(|e| format!("vmap: {e}"))?;
    let bfeeds: Feeds = feeds
        .iter()
        .enumerate()
        .map(|(i, (n, t))| (n.clone(), if which.contains(&i) { stack(t, b, 31 + i as u64) } else { t.clone() }))
        .collect();
    let got = eval(&v, &bfeeds).remove(0);
    let f: Vec<(&str, HostTensor)> = bfeeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let on_cpu = rlx_driver::run_host(cpu, &v, &f).map_err(|e| format!("cpu: {e}"))?.remove(0);
    for k in 0..b {
        let fk: Feeds = bfeeds
            .iter()
            .enumerate()
            .map(|(i, (n, t))| (n.clone(), if which.contains(&i) { example(t, k) } else { t.clone() }))
            .collect();
        let want = eval(&g, &fk).remove(0);
        testkit::compare(&example(&got, k), &want).map_err(|e| format!("example {k} (reference): {e}"))?;
        testkit::compare(&example(&on_cpu, k), &want).map_err(|e| format!("example {k} (cpu): {e}"))?;
    }
    Ok(())
}

#[test]
fn vmap_matches_a_loop_for_every_sample() {
    let cpu = cpu();
    let (mut checked, mut failed) = (0, vec![]);
    for s in Op::all_samples().into_iter().filter(|s| !s.inputs.is_empty()) {
        let n = s.inputs.len();
        // Every input batched, then only the first, then only the last.
        let mut patterns = vec![(0..n).collect::<Vec<_>>(), vec![0]];
        if n > 1 {
            patterns.push(vec![n - 1]);
        }
        for p in patterns {
            match check_vmap(&s, cpu, &p) {
                Ok(()) => checked += 1,
                Err(e) => failed.push(format!("{} batched {p:?}: {e}", s.label)),
            }
        }
    }
    eprintln!("vmap: {checked} sample patterns checked");
    assert!(failed.is_empty(), "{} failures:\n{}", failed.len(), failed.join("\n"));
}
