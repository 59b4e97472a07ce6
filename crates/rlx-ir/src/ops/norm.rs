//! layer_norm and rms_norm over the last axis: composites built from reductions and elementwise ops.

use crate::ops::conv::infers;
use crate::ops::rules::{dims, sum_to};
use crate::ops::util::{rand_f64, require_float, same_dtype};
use crate::{DType, Data, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// `(x - mean) / sqrt(var + eps) * gamma + beta` over the last axis, with the population
/// (biased) variance as in PyTorch. Inputs: x `[..., n]`, gamma `[n]`, beta `[n]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerNorm {
    /// Added to the variance; finite and >= 0.
    pub eps: f64,
}

/// `x * rsqrt(mean(x^2) + eps) * gamma` over the last axis. Inputs: x `[..., n]`, gamma `[n]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RmsNorm {
    /// Added to the mean square; finite and >= 0.
    pub eps: f64,
}

/// Checks x and the per-feature vectors that follow it; returns x's type.
fn norm_infer(ins: &[&Shape], eps: f64) -> std::result::Result<Shape, String> {
    let x = ins[0];
    require_float(x.dtype)?;
    same_dtype(ins)?;
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(format!("eps must be finite and >= 0, got {eps}"));
    }
    let Some(last) = x.dims.last() else {
        return Err("x needs rank >= 1 (normalizes over the last axis)".into());
    };
    let names = ["gamma", "beta"];
    for (s, name) in ins[1..].iter().zip(names) {
        if s.dims.len() != 1 || &s.dims[0] != last {
            return Err(format!("{name} must have shape [{last}] (the last dim of x), got {s}"));
        }
    }
    Ok(x.clone())
}

/// Float data of a tensor, or an eval error naming the op.
fn floats<'a>(t: &'a HostTensor, op: &str) -> Result<&'a [f64]> {
    match &t.data {
        Data::F(v) => Ok(v),
        _ => Err(Error::eval(op, "needs float tensors")),
    }
}

/// Applies `f(lane, out_lane)` to every lane along the last axis.
fn per_row(x: &[f64], n: usize, mut f: impl FnMut(&[f64], &mut [f64])) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    if n > 0 {
        for (lane, o) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
            f(lane, o);
        }
    }
    out
}

impl OpDef for LayerNorm {
    fn name(&self) -> &'static str {
        "layer_norm"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE | OpTraits::NORMALIZATION
    }
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        norm_infer(ins, self.eps)
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let (x, gamma, beta) =
            (floats(ins[0], "layer_norm")?, floats(ins[1], "layer_norm")?, floats(ins[2], "layer_norm")?);
        let n = gamma.len();
        let y = per_row(x, n, |lane, o| {
            let mean = lane.iter().sum::<f64>() / n as f64;
            let var = lane.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
            let r = 1.0 / (var + self.eps).sqrt();
            for (((o, &v), &gm), &bt) in o.iter_mut().zip(lane).zip(gamma).zip(beta) {
                *o = (v - mean) * r * gm + bt;
            }
        });
        HostTensor::new(out.clone(), Data::F(y))
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        // Normalizes the last axis: a batched x works as is; batched gamma/beta go through decompose.
        if batched[1..].iter().any(|&b| b) {
            return None;
        }
        Some(g.add_node(self.clone(), ins))
    }
    /// The closed form (as PyTorch and XLA emit it): with `xh` the normalized x and
    /// `d = ct * gamma`, `dx = r * (d - mean(d) - xh * mean(d * xh))`. Per-row values stay
    /// `[..., 1]` and broadcast inside elementwise ops, so nothing `[..., n]` is materialized.
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let (x, gamma) = (ins[0], ins[1]);
        let dt = g.dtype(x);
        let n = *dims(g, gamma).first()?;
        let mean = g.mean(x, &[-1], true);
        let xc = g.sub(x, mean);
        let sq = g.mul(xc, xc);
        let var = g.mean(sq, &[-1], true);
        let e = g.scalar(self.eps, dt);
        let ve = g.add(var, e);
        let r = g.rsqrt(ve);
        let xh = g.mul(xc, r);
        let d = g.mul(ct, gamma);
        let md = g.mean(d, &[-1], true);
        let dxh = g.mul(d, xh);
        let mdx = g.mean(dxh, &[-1], true);
        let t = g.mul(xh, mdx);
        let u = g.sub(d, md);
        let u = g.sub(u, t);
        let dx = g.mul(u, r);
        let cg = g.mul(ct, xh);
        let dgamma = sum_to(g, cg, &[n]);
        let dbeta = sum_to(g, ct, &[n]);
        Some(vec![Some(dx), Some(dgamma), Some(dbeta)])
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        if !infers(self, g, ins) {
            return None;
        }
        let (x, gamma, beta) = (ins[0], ins[1], ins[2]);
        let eps = g.scalar(self.eps, g.dtype(x));
        let mean = g.mean(x, &[-1], true);
        let xc = g.sub(x, mean);
        let sq = g.mul(xc, xc);
        let var = g.mean(sq, &[-1], true);
        let ve = g.add(var, eps);
        let r = g.rsqrt(ve);
        let y = g.mul(xc, r);
        let y = g.mul(y, gamma);
        Some(g.add(y, beta))
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        let cases: [(&[usize], DType, f64, f64); 5] = [
            (&[2, 5], DType::F32, 1e-5, 0.0),
            (&[2, 3, 4], DType::F64, 1e-6, 0.0),
            (&[3, 7], DType::F32, 1e-5, 50.0),
            (&[4, 1], DType::F32, 1e-5, 0.0),
            (&[16], DType::F64, 0.0, -3.0),
        ];
        for (i, (dims, dt, eps, shift)) in cases.into_iter().enumerate() {
            let n = *dims.last().unwrap_or(&1);
            let seed = 20 + 3 * i as u64;
            out.push(Sample::new(
                format!("layer_norm/{dt}{dims:?}"),
                LayerNorm { eps },
                vec![
                    rt(dims, dt, shift - 2.0, shift + 2.0, seed),
                    rt(&[n], dt, 0.5, 1.5, seed + 1),
                    rt(&[n], dt, -0.5, 0.5, seed + 2),
                ],
            ));
        }
        // A constant row: the variance is 0 and eps keeps the output finite (it is beta).
        let x = HostTensor::from_f32(&[2, 3], &[2.0, 2.0, 2.0, -1.0, 0.0, 1.0]).expect("sample");
        let gm = HostTensor::from_f32(&[3], &[1.0, 2.0, 3.0]).expect("sample");
        let bt = HostTensor::from_f32(&[3], &[0.1, 0.2, 0.3]).expect("sample");
        out.push(Sample::new("layer_norm/constant_row", LayerNorm { eps: 1e-5 }, vec![x, gm, bt]));
        out
    }
}

impl OpDef for RmsNorm {
    fn name(&self) -> &'static str {
        "rms_norm"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE | OpTraits::NORMALIZATION
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        norm_infer(ins, self.eps)
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let (x, gamma) = (floats(ins[0], "rms_norm")?, floats(ins[1], "rms_norm")?);
        let n = gamma.len();
        let y = per_row(x, n, |lane, o| {
            let ms = lane.iter().map(|v| v * v).sum::<f64>() / n as f64;
            let r = 1.0 / (ms + self.eps).sqrt();
            for ((o, &v), &gm) in o.iter_mut().zip(lane).zip(gamma) {
                *o = v * r * gm;
            }
        });
        HostTensor::new(out.clone(), Data::F(y))
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        // Normalizes the last axis: a batched x works as is; batched gamma/beta go through decompose.
        if batched[1..].iter().any(|&b| b) {
            return None;
        }
        Some(g.add_node(self.clone(), ins))
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        if !infers(self, g, ins) {
            return None;
        }
        let (x, gamma) = (ins[0], ins[1]);
        let eps = g.scalar(self.eps, g.dtype(x));
        let sq = g.mul(x, x);
        let ms = g.mean(sq, &[-1], true);
        let me = g.add(ms, eps);
        let r = g.rsqrt(me);
        let y = g.mul(x, r);
        Some(g.mul(y, gamma))
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        let cases: [(&[usize], DType, f64); 4] = [
            (&[3, 8], DType::F32, 1e-6),
            (&[2, 2, 6], DType::F64, 1e-6),
            (&[1, 1], DType::F32, 1e-5),
            (&[5], DType::F64, 0.0),
        ];
        for (i, (dims, dt, eps)) in cases.into_iter().enumerate() {
            let n = *dims.last().unwrap_or(&1);
            let seed = 40 + 2 * i as u64;
            out.push(Sample::new(
                format!("rms_norm/{dt}{dims:?}"),
                RmsNorm { eps },
                vec![rt(dims, dt, -3.0, 3.0, seed), rt(&[n], dt, 0.5, 1.5, seed + 1)],
            ));
        }
        // An all-zero row stays zero thanks to eps.
        let x = HostTensor::from_f32(&[2, 3], &[0.0, 0.0, 0.0, 1.0, -2.0, 0.5]).expect("sample");
        let gm = HostTensor::from_f32(&[3], &[1.0, 0.5, 2.0]).expect("sample");
        out.push(Sample::new("rms_norm/zero_row", RmsNorm { eps: 1e-6 }, vec![x, gm]));
        out
    }
}

/// A random float tensor for samples.
pub(crate) fn rt(dims: &[usize], dt: DType, lo: f64, hi: f64, seed: u64) -> HostTensor {
    HostTensor::from_f64(dims, dt, &rand_f64(dims.iter().product(), lo, hi, seed)).expect("sample")
}

impl Graph {
    /// Layer normalization over the last axis: x `[..., n]`, gamma and beta `[n]`.
    pub fn layer_norm(&mut self, x: NodeId, gamma: NodeId, beta: NodeId, eps: f32) -> NodeId {
        self.add_node(LayerNorm { eps: eps as f64 }, &[x, gamma, beta])
    }
    /// RMS normalization over the last axis: x `[..., n]`, gamma `[n]`.
    pub fn rms_norm(&mut self, x: NodeId, gamma: NodeId, eps: f32) -> NodeId {
        self.add_node(RmsNorm { eps: eps as f64 }, &[x, gamma])
    }
}
