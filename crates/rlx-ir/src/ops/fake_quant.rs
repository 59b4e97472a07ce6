//! Fake quantization: round to an integer grid and back, in float. The gradient is the
//! straight-through estimator for `x` and the LSQ (learned step size) rule for the scale.

use crate::ops::rules;
use crate::ops::util::rand_f64;
use crate::shape::normalize_axis;
use crate::{DType, Data, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// `y = (clamp(round(x / s) + z, qmin, qmax) - z) * s`. Inputs: `x`, the scale `s` and the zero
/// point `z` (floats of one shape: `[]` per tensor, or `[dim]` per channel along `axis`). The grid
/// is `-2^(bits-1) ..= 2^(bits-1) - 1` when signed, else `0 ..= 2^bits - 1`. Rounding is the
/// `round` op's (half away from zero), so the decomposition matches the reference exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FakeQuant {
    /// Bits of the integer grid, 2..=16.
    pub bits: u8,
    /// Signed (symmetric int) or unsigned grid.
    pub signed: bool,
    /// The channel axis of per-channel scales; None for one scale per tensor.
    pub axis: Option<i64>,
    /// Narrow range: the grid drops its lowest code (`-(2^(bits-1) - 1) ..= 2^(bits-1) - 1`
    /// signed, symmetric like int8 weights in TFLite; `1 ..= 2^bits - 1` unsigned).
    #[serde(default)]
    pub narrow: bool,
    /// Multiplies the scale's LSQ gradient (the paper's `1 / sqrt(numel(x) / numel(s) * qmax)`);
    /// 0 stops it, for a scale computed from `x` (plain straight-through quantization).
    #[serde(default = "one")]
    pub grad_scale: f64,
}

fn one() -> f64 {
    1.0
}

/// Nodes of `FakeQuant::grid`: broadcast scale and zero point, `v = x / s`, `r = round(v)`,
/// `q = r + z`, and the grid bounds as scalars.
struct Grid {
    s: NodeId,
    z: NodeId,
    v: NodeId,
    r: NodeId,
    q: NodeId,
    lo: NodeId,
    hi: NodeId,
}

impl FakeQuant {
    /// A full-range grid with the plain LSQ gradient (grad_scale 1).
    pub fn new(bits: u8, signed: bool, axis: Option<i64>) -> Self {
        FakeQuant { bits, signed, axis, narrow: false, grad_scale: 1.0 }
    }

    /// The integer grid's bounds.
    pub fn range(&self) -> (f64, f64) {
        let b = self.bits as i32;
        let (lo, hi) =
            if self.signed { (-(2f64.powi(b - 1)), 2f64.powi(b - 1) - 1.0) } else { (0.0, 2f64.powi(b) - 1.0) };
        if self.narrow { (lo + 1.0, hi) } else { (lo, hi) }
    }

    /// The scale shape reshaped to broadcast against an input of rank `rank`.
    fn scale_dims(&self, rank: usize, channels: usize) -> Option<Vec<usize>> {
        let a = normalize_axis(self.axis?, rank).ok()?;
        let mut d = vec![1; rank];
        d[a] = channels;
        Some(d)
    }

    /// The estimator's pieces: masks `q >= qmin` and `q <= qmax` (the straight-through gradient of
    /// x passes where both hold) and the LSQ derivative of y by the scale, elementwise:
    /// `round(v) - v` inside the grid, `qmin - z` or `qmax - z` where clipped.
    fn ste_parts(&self, g: &mut Graph, ins: &[NodeId]) -> (NodeId, NodeId, NodeId) {
        let x = ins[0];
        let Grid { z, v, r, q, lo, hi, .. } = self.grid(g, ins);
        let above_lo = g.ge(q, lo);
        let below_hi = g.le(q, hi);
        let inside = g.sub(r, v);
        let xd = rules::dims(g, x);
        let lo_z = g.sub(lo, z);
        let lo_z = rules::broadcast_to(g, lo_z, &xd);
        let hi_z = g.sub(hi, z);
        let hi_z = rules::broadcast_to(g, hi_z, &xd);
        let ds = g.where_(above_lo, inside, lo_z);
        let ds = g.where_(below_hi, ds, hi_z);
        (above_lo, below_hi, ds)
    }

    /// `ds` times the grad scale (as is when it is 1).
    fn scaled(&self, g: &mut Graph, ds: NodeId) -> NodeId {
        if self.grad_scale == 1.0 {
            return ds;
        }
        let c = g.scalar(self.grad_scale, g.dtype(ds));
        g.mul(ds, c)
    }

    /// The unclipped grid value `q = round(x / s) + z` and its pieces, as graph nodes.
    fn grid(&self, g: &mut Graph, ins: &[NodeId]) -> Grid {
        let x = ins[0];
        let (s, z) = self.broadcastable(g, x, ins[1], ins[2]);
        let dt = g.dtype(x);
        let (lo, hi) = self.range();
        let v = g.div(x, s);
        let r = g.round(v);
        let q = g.add(r, z);
        let (lo, hi) = (g.scalar(lo, dt), g.scalar(hi, dt));
        Grid { s, z, v, r, q, lo, hi }
    }

    /// `s` and `z` as nodes broadcastable against `x`.
    fn broadcastable(&self, g: &mut Graph, x: NodeId, s: NodeId, z: NodeId) -> (NodeId, NodeId) {
        let rank = rules::dims(g, x).len();
        let ch = rules::dims(g, s).first().copied().unwrap_or(1);
        match self.scale_dims(rank, ch) {
            Some(d) => (g.reshape(s, &d), g.reshape(z, &d)),
            None => (s, z),
        }
    }
}

impl OpDef for FakeQuant {
    fn name(&self) -> &'static str {
        "fake_quant"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let (x, s, z) = (ins[0], ins[1], ins[2]);
        if !(2..=16).contains(&self.bits) {
            return Err(format!("bits must be 2..=16, got {}", self.bits));
        }
        if !(self.grad_scale.is_finite() && self.grad_scale >= 0.0) {
            return Err(format!("grad_scale must be finite and >= 0, got {}", self.grad_scale));
        }
        if !x.dtype.is_float() || s.dtype != x.dtype || z.dtype != x.dtype {
            return Err(format!("x, scale and zero point must share one float dtype, got {x}, {s}, {z}"));
        }
        if s != z {
            return Err(format!("scale {s} and zero point {z} must have one shape"));
        }
        match self.axis {
            None if s.rank() != 0 => Err(format!("a per-tensor scale must be a scalar, got {s}")),
            Some(a) => {
                let a = normalize_axis(a, x.rank())?;
                if s.rank() != 1 || s.dims[0] != x.dims[a] {
                    return Err(format!("a per-channel scale along axis {a} must be [{}], got {s}", x.dims[a]));
                }
                Ok(x.clone())
            }
            None => Ok(x.clone()),
        }
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let d = ins[0].dims();
        let (x, s, z) = (ins[0].to_f64_vec()?, ins[1].to_f64_vec()?, ins[2].to_f64_vec()?);
        let (lo, hi) = self.range();
        let (inner, ch) = match self.axis {
            Some(a) => {
                let a = normalize_axis(a, d.len()).map_err(|e| Error::eval("fake_quant", e))?;
                (d[a + 1..].iter().product::<usize>(), d[a])
            }
            None => (1, 1),
        };
        let y = x
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let c = (i / inner) % ch;
                let q = ((v / s[c]).round() + z[c]).clamp(lo, hi);
                (q - z[c]) * s[c]
            })
            .collect();
        HostTensor::new(out.clone(), Data::F(y))
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        let Grid { s, z, q, lo, hi, .. } = self.grid(g, ins);
        let q = g.maximum(q, lo);
        let q = g.minimum(q, hi);
        let q = g.sub(q, z);
        Some(g.mul(q, s))
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], tangents: &[Option<NodeId>], _out: NodeId) -> Option<NodeId> {
        let (above_lo, below_hi, ds) = self.ste_parts(g, ins);
        let mut terms = vec![];
        if let Some(tx) = tangents[0] {
            let zero = rules::zeros_like(g, tx);
            let pass = g.where_(above_lo, tx, zero);
            terms.push(g.where_(below_hi, pass, zero));
        }
        if let Some(ts) = tangents[1].filter(|_| self.grad_scale != 0.0) {
            let (ts, _) = self.broadcastable(g, ins[0], ts, ts);
            let ds = self.scaled(g, ds);
            terms.push(g.mul(ds, ts));
        }
        let first = *terms.first()?;
        Some(terms[1..].iter().fold(first, |acc, &t| g.add(acc, t)))
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let (x, s0) = (ins[0], ins[1]);
        let (above_lo, below_hi, ds) = self.ste_parts(g, ins);
        let zero = rules::zeros_like(g, ct);
        let pass = g.where_(above_lo, ct, zero);
        let dx = g.where_(below_hi, pass, zero);
        if self.grad_scale == 0.0 {
            return Some(vec![Some(dx), None, None]);
        }
        let ds = self.scaled(g, ds);
        let ds = g.mul(ds, ct);
        let ds = match self.axis.and_then(|a| normalize_axis(a, rules::dims(g, x).len()).ok()) {
            Some(a) => {
                let rank = rules::dims(g, x).len();
                let axes: Vec<i64> = (0..rank).filter(|&i| i != a).map(|i| i as i64).collect();
                g.sum(ds, &axes, false)
            }
            None => rules::sum_to(g, ds, &rules::dims(g, s0)),
        };
        Some(vec![Some(dx), Some(ds), None])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        if batched[1] || batched[2] {
            return None;
        }
        let r = rules::dims(g, ins[0]).len() - 1;
        let op = FakeQuant { axis: self.axis.map(|a| rules::shift_axis(a, r)), ..self.clone() };
        Some(g.add_node(op, ins))
    }
    fn tolerance(&self) -> Option<(f64, f64)> {
        // A value on a rounding tie may land on either neighbour after float division.
        Some((1e-5, 1e-5))
    }
    fn samples() -> Vec<Sample> {
        let x = HostTensor::from_f64(&[3, 4], DType::F32, &rand_f64(12, -2.0, 2.0, 101)).expect("sample");
        let s = HostTensor::from_f64(&[], DType::F32, &[0.05]).expect("sample");
        let z = HostTensor::from_f64(&[], DType::F32, &[0.0]).expect("sample");
        let sc = HostTensor::from_f64(&[4], DType::F32, &[0.01, 0.1, 0.02, 0.3]).expect("sample");
        let zc = HostTensor::from_f64(&[4], DType::F32, &[0.0, 3.0, -1.0, 0.0]).expect("sample");
        let zu = HostTensor::from_f64(&[], DType::F32, &[7.0]).expect("sample");
        let fq = |bits, signed, axis| FakeQuant::new(bits, signed, axis);
        let narrow = FakeQuant { narrow: true, grad_scale: 0.25, ..fq(8, true, Some(-1)) };
        vec![
            Sample::new("fake_quant/int8/tensor", fq(8, true, None), vec![x.clone(), s.clone(), z]),
            Sample::new("fake_quant/int8/narrow", narrow, vec![x.clone(), sc.clone(), zc.clone()]),
            Sample::new("fake_quant/int4/channel", fq(4, true, Some(-1)), vec![x.clone(), sc, zc]),
            Sample::new("fake_quant/uint4/zero_point", fq(4, false, None), vec![x, s, zu]),
        ]
    }
}

impl Graph {
    /// Fake-quantizes `x` with `scale` and `zero_point` (see `FakeQuant`).
    pub fn fake_quant(
        &mut self,
        x: NodeId,
        scale: NodeId,
        zero_point: NodeId,
        bits: u8,
        signed: bool,
        axis: Option<i64>,
    ) -> NodeId {
        self.add_node(FakeQuant::new(bits, signed, axis), &[x, scale, zero_point])
    }

    /// Fake-quantizes `x` with every attribute given (narrow range, LSQ grad scale).
    pub fn fake_quant_with(&mut self, x: NodeId, scale: NodeId, zero_point: NodeId, op: FakeQuant) -> NodeId {
        self.add_node(op, &[x, scale, zero_point])
    }
}
