//! Every op's samples through every transform: jvp and vjp against central finite differences
//! in f64, second order (hvp) where the op is smooth, and vmap against a loop over the batch on
//! the reference interpreter and on the CPU backend.

mod common;

use common::*;
use rlx_autodiff::{grad, hvp, jvp};
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
    let gg = match grad(&l, &ids) {
        // Forward-mode-only ops (while_loop, as in JAX) refuse reverse mode, saying so: their
        // forward mode is checked above.
        Err(rlx_ir::Error::Transform { transform: "vjp", reason, .. }) if reason.contains("forward-mode only") => {
            return Ok(true);
        }
        r => r.map_err(|e| format!("grad: {e}"))?,
    };
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

#[test]
fn vmap_matches_a_loop_for_every_sample() {
    let cpu = cpu();
    let (mut checked, mut failed) = (0, vec![]);
    for s in Op::all_samples().into_iter().filter(|s| !s.inputs.is_empty()) {
        // Every input batched, then only the first, then only the last; on the reference and the CPU.
        for p in rlx_autodiff::check::vmap_patterns(s.inputs.len()) {
            match rlx_autodiff::check::vmap_against_loop(&s, &p, Some(&|g, f| rlx_driver::run_host(cpu, g, f))) {
                Ok(()) => checked += 1,
                Err(e) => failed.push(format!("{} batched {p:?}: {e}", s.label)),
            }
        }
    }
    eprintln!("vmap: {checked} sample patterns checked");
    assert!(failed.is_empty(), "{} failures:\n{}", failed.len(), failed.join("\n"));
}
