//! The checks every op's samples go through, public so that a crate defining its own ops
//! (`rlx_ir::custom`) runs the same ones: forward and reverse mode (and second order) against
//! central finite differences in f64, and vmap against a loop over the batch on the reference
//! interpreter and optionally a backend.

use crate::{grad, hvp, jvp, vmap};
use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Data, Graph, HostTensor, OpTraits, Result, Sample, Shape, interp, testkit};

/// Named feeds.
type Feeds = Vec<(String, HostTensor)>;

/// A backend runner (as `rlx_driver::run_host` partially applied).
pub type Runner<'a> = &'a dyn Fn(&Graph, &[(&str, HostTensor)]) -> Result<Vec<HostTensor>>;

fn eval(g: &Graph, feeds: &Feeds) -> std::result::Result<Vec<HostTensor>, String> {
    let f: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    interp::evaluate(g, &f).map_err(|e| format!("evaluating {}: {e}", g.name()))
}

fn vals(t: &HostTensor) -> Vec<f64> {
    match &t.data {
        Data::F(v) => v.clone(),
        _ => t.to_f64_vec().unwrap_or_default(),
    }
}

fn rand_like(t: &HostTensor, seed: u64) -> HostTensor {
    HostTensor::from_f64(&t.dims(), DType::F64, &rand_f64(t.numel(), -1.0, 1.0, seed)).expect("f64 tensor")
}

fn axpy(x: &HostTensor, h: f64, d: &HostTensor) -> HostTensor {
    let v: Vec<f64> = vals(x).iter().zip(vals(d)).map(|(a, b)| a + h * b).collect();
    HostTensor::from_f64(&x.dims(), x.dtype(), &v).expect("same shape")
}

/// Max of |a - b| relative to `1 + max |b|` within `tol`, or the first mismatch.
fn close(a: &[f64], b: &[f64], tol: f64) -> std::result::Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("lengths differ: {} vs {}", a.len(), b.len()));
    }
    let scale = 1.0 + b.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if (x - y).abs() > tol * scale || x.is_nan() != y.is_nan() {
            return Err(format!("element {i}: {x} vs {y} (tol {tol} x {scale})"));
        }
    }
    Ok(())
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The sample with every float input widened to f64.
pub fn to_f64(s: &Sample) -> Sample {
    let inputs = s.inputs.iter().map(|t| if t.dtype().is_float() { t.cast(DType::F64) } else { t.clone() }).collect();
    Sample { label: s.label.clone(), op: s.op.clone(), inputs }
}

fn with(feeds: &Feeds, name: &str, t: HostTensor) -> Feeds {
    feeds.iter().map(|(n, v)| (n.clone(), if n == name { t.clone() } else { v.clone() })).collect()
}

/// `sum(y * w)` for a fixed random `w`: a scalar loss exercising every output element.
fn loss_graph(g: &Graph) -> std::result::Result<Graph, String> {
    let mut l = g.clone();
    let y = l.outputs()[0];
    let zeros = HostTensor::zeros(l.shape(y).ok_or("no output")?).map_err(|e| e.to_string())?;
    let w = l.constant(rand_like(&zeros, 99).cast(l.dtype(y)));
    let p = l.mul(y, w);
    let s = l.sum_all(p);
    l.set_outputs(vec![s]);
    Ok(l)
}

/// jvp and vjp (and, with `second_order`, hvp) of the sample's op, widened to f64, against
/// central finite differences. Ok(false) when the sample has nothing differentiable (no f64
/// output, a non-differentiable op, no non-empty float input).
pub fn finite_differences(s: &Sample, second_order: bool) -> std::result::Result<bool, String> {
    let s = to_f64(s);
    let (g, feeds) = testkit::sample_graph(&s).map_err(|e| format!("building: {e}"))?;
    let y = g.outputs()[0];
    if g.dtype(y) != DType::F64 || s.op.def().traits().contains(OpTraits::NON_DIFFERENTIABLE) {
        return Ok(false);
    }
    let names: Vec<String> =
        feeds.iter().filter(|(_, t)| t.dtype() == DType::F64 && t.numel() > 0).map(|(n, _)| n.clone()).collect();
    if names.is_empty() {
        return Ok(false);
    }
    let h = 1e-6;
    let dirs: Vec<HostTensor> = names
        .iter()
        .enumerate()
        .map(|(i, n)| rand_like(&feeds.iter().find(|(m, _)| m == n).expect("named").1, 7 + i as u64))
        .collect();
    let shifted = |sign: f64, scale: f64| -> Feeds {
        let mut f = feeds.clone();
        for (n, d) in names.iter().zip(&dirs) {
            let x = f.iter().find(|(m, _)| m == n).expect("named").1.clone();
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
    let tan = vals(&eval(&jg, &jf)?[1]);
    let (yp, ym) = (vals(&eval(&g, &shifted(1.0, h))?[0]), vals(&eval(&g, &shifted(-1.0, h))?[0]));
    let fd: Vec<f64> = yp.iter().zip(&ym).map(|(a, b)| (a - b) / (2.0 * h)).collect();
    close(&tan, &fd, 1e-6).map_err(|e| format!("jvp vs finite differences: {e}"))?;
    // Reverse mode: <grad L, d> against the directional difference of L.
    let l = loss_graph(&g)?;
    let ids: Vec<_> = names.iter().map(|n| crate::leaf(&l, n)).collect::<Result<_>>().map_err(|e| e.to_string())?;
    let gg = grad(&l, &ids).map_err(|e| format!("grad: {e}"))?;
    let grads = eval(&gg, &feeds)?;
    let dd: f64 = grads.iter().zip(&dirs).map(|(gr, d)| dot(&vals(gr), &vals(d))).sum();
    let lp = vals(&eval(&l, &shifted(1.0, h))?[0])[0];
    let lm = vals(&eval(&l, &shifted(-1.0, h))?[0])[0];
    close(&[dd], &[(lp - lm) / (2.0 * h)], 1e-6).map_err(|e| format!("vjp vs finite differences: {e}"))?;
    if second_order {
        // hvp against the difference of gradients.
        let hg = hvp(&l, &refs).map_err(|e| format!("hvp: {e}"))?;
        let out = eval(&hg, &jf)?;
        let k = names.len();
        let (gp, gm) = (eval(&gg, &shifted(1.0, h))?, eval(&gg, &shifted(-1.0, h))?);
        for i in 0..k {
            let fd: Vec<f64> = vals(&gp[i]).iter().zip(vals(&gm[i])).map(|(a, b)| (a - b) / (2.0 * h)).collect();
            close(&vals(&out[1 + k + i]), &fd, 1e-6).map_err(|e| format!("hvp[{i}] vs finite differences: {e}"))?;
        }
    }
    Ok(true)
}

/// A stack of `b` variants of `t` along a new leading axis (floats perturbed, others repeated).
fn stack(t: &HostTensor, b: usize, seed: u64) -> HostTensor {
    let mut v = vec![];
    for k in 0..b {
        if t.dtype().is_float() {
            let noise = rand_like(t, seed + k as u64);
            v.extend(vals(t).iter().zip(vals(&noise)).map(|(x, n)| x + 0.25 * k as f64 * n));
        } else {
            v.extend(t.to_f64_vec().unwrap_or_default());
        }
    }
    let mut d = vec![b];
    d.extend(t.dims());
    HostTensor::from_f64(&d, DType::F64, &v).expect("stacked").cast(t.dtype())
}

/// Example `k` of a batched tensor.
fn example(t: &HostTensor, k: usize) -> HostTensor {
    let d = t.dims();
    let n: usize = d[1..].iter().product();
    let idx: Vec<usize> = (k * n..(k + 1) * n).collect();
    HostTensor::new(Shape::new(&d[1..], t.dtype()), t.data.gather(&idx)).expect("one example")
}

/// vmap of the sample's op over a batch of 3 on inputs `which`, against the op applied to each
/// example: on the reference interpreter, and on `backend` when given.
pub fn vmap_against_loop(s: &Sample, which: &[usize], backend: Option<Runner<'_>>) -> std::result::Result<(), String> {
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
    let got = eval(&v, &bfeeds)?.remove(0);
    let f: Vec<(&str, HostTensor)> = bfeeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let on_backend = match backend {
        Some(run) => Some(run(&v, &f).map_err(|e| format!("backend: {e}"))?.remove(0)),
        None => None,
    };
    for k in 0..b {
        let fk: Feeds = bfeeds
            .iter()
            .enumerate()
            .map(|(i, (n, t))| (n.clone(), if which.contains(&i) { example(t, k) } else { t.clone() }))
            .collect();
        let want = eval(&g, &fk)?.remove(0);
        testkit::compare(&example(&got, k), &want).map_err(|e| format!("example {k} (reference): {e}"))?;
        if let Some(o) = &on_backend {
            testkit::compare(&example(o, k), &want).map_err(|e| format!("example {k} (backend): {e}"))?;
        }
    }
    Ok(())
}

/// The batching patterns the suite checks for an op of `n` inputs: every input, the first, the last.
pub fn vmap_patterns(n: usize) -> Vec<Vec<usize>> {
    let mut p = vec![(0..n).collect::<Vec<_>>(), vec![0]];
    if n > 1 {
        p.push(vec![n - 1]);
    }
    p
}
