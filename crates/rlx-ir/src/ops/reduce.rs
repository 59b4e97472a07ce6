//! Reductions over axes (sum, mean, max, min, prod) and argmax.

use crate::ops::rules;
use crate::ops::util::{rand_f64, rand_i64, unravel};
use crate::shape::{normalize_axes, normalize_axis, strides};
use crate::{
    DType, DTypeClass, Data, Dim, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity,
};
use serde::{Deserialize, Serialize};

/// Which reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceKind {
    /// Sum.
    Sum,
    /// Arithmetic mean (floats only).
    Mean,
    /// Maximum (NaN propagates).
    Max,
    /// Minimum (NaN propagates).
    Min,
    /// Product.
    Prod,
}

impl ReduceKind {
    /// Every member.
    pub const ALL: &'static [ReduceKind] =
        &[ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max, ReduceKind::Min, ReduceKind::Prod];
    /// The op name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceKind::Sum => "sum",
            ReduceKind::Mean => "mean",
            ReduceKind::Max => "max",
            ReduceKind::Min => "min",
            ReduceKind::Prod => "prod",
        }
    }
    /// The identity element.
    pub fn init(self) -> f64 {
        match self {
            ReduceKind::Sum | ReduceKind::Mean => 0.0,
            ReduceKind::Max => f64::NEG_INFINITY,
            ReduceKind::Min => f64::INFINITY,
            ReduceKind::Prod => 1.0,
        }
    }
    /// Folds one value into the accumulator.
    pub fn combine(self, acc: f64, x: f64) -> f64 {
        match self {
            ReduceKind::Sum | ReduceKind::Mean => acc + x,
            ReduceKind::Max => {
                if x.is_nan() || acc.is_nan() {
                    f64::NAN
                } else {
                    acc.max(x)
                }
            }
            ReduceKind::Min => {
                if x.is_nan() || acc.is_nan() {
                    f64::NAN
                } else {
                    acc.min(x)
                }
            }
            ReduceKind::Prod => acc * x,
        }
    }
}

/// Output dims of reducing `axes` (normalized) of `dims`.
pub fn reduced_dims(dims: &[Dim], axes: &[usize], keep_dims: bool) -> Vec<Dim> {
    let mut out = vec![];
    for (i, d) in dims.iter().enumerate() {
        if axes.contains(&i) {
            if keep_dims {
                out.push(Dim::Fixed(1));
            }
        } else {
            out.push(d.clone());
        }
    }
    out
}

/// For each input element, the flat output index it reduces into.
pub fn reduce_index_map(in_dims: &[usize], axes: &[usize]) -> Vec<usize> {
    let kept: Vec<usize> = in_dims.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
    let ks = strides(&kept);
    let n: usize = in_dims.iter().product();
    (0..n)
        .map(|f| {
            let idx = unravel(f, in_dims);
            idx.iter().enumerate().map(|(i, &x)| if axes.contains(&i) { 0 } else { x * ks[i] }).sum()
        })
        .collect()
}

/// A reduction over `axes`. An empty axis list reduces nothing (numpy's `axis=()`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reduce {
    /// Which reduction.
    pub kind: ReduceKind,
    /// Axes, possibly negative.
    pub axes: Vec<i64>,
    /// Keep reduced axes as size 1.
    pub keep_dims: bool,
}

impl OpDef for Reduce {
    fn name(&self) -> &'static str {
        self.kind.name()
    }
    fn traits(&self) -> OpTraits {
        let t = OpTraits::REDUCTION;
        if matches!(self.kind, ReduceKind::Sum | ReduceKind::Mean) { t | OpTraits::LINEAR } else { t }
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let dt = ins[0].dtype;
        let ok = match dt.class() {
            DTypeClass::Float => true,
            DTypeClass::Int => self.kind != ReduceKind::Mean,
            _ => false,
        };
        if !ok {
            return Err(format!("dtype {dt} is not supported"));
        }
        let axes = normalize_axes(&self.axes, ins[0].rank())?;
        Ok(Shape::with_dims(reduced_dims(&ins[0].dims, &axes, self.keep_dims), dt))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let dims = ins[0].dims();
        let axes = normalize_axes(&self.axes, dims.len()).map_err(|e| Error::eval(self.name(), e))?;
        let map = reduce_index_map(&dims, &axes);
        let n_out = out.numel().unwrap_or(0);
        let count: usize = axes.iter().map(|&a| dims[a]).product();
        let data = match &ins[0].data {
            Data::F(v) => {
                let mut acc = vec![self.kind.init(); n_out];
                for (i, &x) in v.iter().enumerate() {
                    acc[map[i]] = self.kind.combine(acc[map[i]], x);
                }
                if self.kind == ReduceKind::Mean {
                    acc.iter_mut().for_each(|a| *a /= count as f64);
                }
                Data::F(acc)
            }
            Data::I(v) => {
                let (lo, hi) = out.dtype.int_range().unwrap_or((i64::MIN, i64::MAX));
                let init = match self.kind {
                    ReduceKind::Max => lo,
                    ReduceKind::Min => hi,
                    ReduceKind::Prod => 1,
                    _ => 0,
                };
                let mut acc = vec![init; n_out];
                for (i, &x) in v.iter().enumerate() {
                    let a = &mut acc[map[i]];
                    *a = match self.kind {
                        ReduceKind::Max => (*a).max(x),
                        ReduceKind::Min => (*a).min(x),
                        ReduceKind::Prod => a.wrapping_mul(x),
                        _ => a.wrapping_add(x),
                    };
                }
                Data::I(acc)
            }
            _ => return Err(Error::eval(self.name(), "unsupported dtype")),
        };
        HostTensor::new(out.clone(), data)
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], out: NodeId) -> Option<NodeId> {
        let (x, t) = (ins[0], t[0]?);
        match self.kind {
            ReduceKind::Sum | ReduceKind::Mean => Some(g.reduce(self.kind, t, &self.axes, self.keep_dims)),
            ReduceKind::Max | ReduceKind::Min => {
                let w = self.arg_weights(g, x, out)?;
                let tw = g.mul(t, w);
                Some(g.sum(tw, &self.axes, self.keep_dims))
            }
            ReduceKind::Prod => {
                let q = g.div(t, x);
                let s = g.sum(q, &self.axes, self.keep_dims);
                Some(g.mul(s, out))
            }
        }
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let x = ins[0];
        let xd = rules::dims(g, x);
        let ctb = self.expand(g, ct, &xd)?;
        let d = match self.kind {
            ReduceKind::Sum => ctb,
            ReduceKind::Mean => {
                let axes = normalize_axes(&self.axes, xd.len()).ok()?;
                let n: usize = axes.iter().map(|&a| xd[a]).product();
                let inv = g.scalar(1.0 / n as f64, g.dtype(x));
                g.mul(ctb, inv)
            }
            ReduceKind::Max | ReduceKind::Min => {
                let w = self.arg_weights(g, x, out)?;
                g.mul(ctb, w)
            }
            ReduceKind::Prod => {
                let y = self.expand(g, out, &xd)?;
                let q = g.div(y, x);
                g.mul(ctb, q)
            }
        };
        Some(vec![Some(d)])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], _batched: &[bool], _size: usize) -> Option<NodeId> {
        let r = rules::dims(g, ins[0]).len() - 1;
        let axes: Vec<i64> = self.axes.iter().map(|&a| rules::shift_axis(a, r)).collect();
        Some(g.reduce(self.kind, ins[0], &axes, self.keep_dims))
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        for &kind in ReduceKind::ALL {
            let (lo, hi) = if kind == ReduceKind::Prod { (0.5, 1.5) } else { (-2.0, 2.0) };
            let x = |dt| HostTensor::from_f64(&[2, 3, 4], dt, &rand_f64(24, lo, hi, 9)).expect("sample");
            let cases: [(&[i64], bool, DType); 5] = [
                (&[-1], false, DType::F32),
                (&[0, 2], true, DType::F32),
                (&[0, 1, 2], false, DType::F64),
                (&[1], true, DType::BF16),
                (&[], false, DType::F32),
            ];
            for (axes, keep_dims, dt) in cases {
                let op = Reduce { kind, axes: axes.to_vec(), keep_dims };
                out.push(Sample::new(format!("{}/{dt}{axes:?}{keep_dims}", kind.name()), op, vec![x(dt)]));
            }
            if kind != ReduceKind::Mean {
                let xi = HostTensor::from_i64(&[3, 4], DType::I32, &rand_i64(12, -5, 6, 3)).expect("sample");
                let op = Reduce { kind, axes: vec![1], keep_dims: false };
                out.push(Sample::new(format!("{}/i32", kind.name()), op, vec![xi]));
            }
        }
        out
    }
}

impl Reduce {
    /// A reduced node broadcast back to the input dims `xd`.
    fn expand(&self, g: &mut Graph, y: NodeId, xd: &[usize]) -> Option<NodeId> {
        let axes = normalize_axes(&self.axes, xd.len()).ok()?;
        let kd: Vec<usize> = xd.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
        let y = if self.keep_dims { y } else { g.reshape(y, &kd) };
        Some(rules::broadcast_to(g, y, xd))
    }

    /// For max/min: 1/count at the positions that attain the extremum (ties share), else 0.
    fn arg_weights(&self, g: &mut Graph, x: NodeId, out: NodeId) -> Option<NodeId> {
        let xd = rules::dims(g, x);
        let y = self.expand(g, out, &xd)?;
        let hit = g.eq(x, y);
        let m = g.cast(hit, g.dtype(x));
        let n = g.sum(m, &self.axes, true);
        Some(g.div(m, n))
    }
}

/// Index of the largest element along one axis (first on ties; NaN counts as largest); i64 output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArgMax {
    /// The axis, possibly negative.
    pub axis: i64,
    /// Keep the axis as size 1.
    pub keep_dims: bool,
}

impl OpDef for ArgMax {
    fn name(&self) -> &'static str {
        "argmax"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::REDUCTION | OpTraits::NON_DIFFERENTIABLE
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        if !(ins[0].dtype.is_float() || ins[0].dtype.is_int()) {
            return Err(format!("dtype {} is not supported", ins[0].dtype));
        }
        let a = normalize_axis(self.axis, ins[0].rank())?;
        Ok(Shape::with_dims(reduced_dims(&ins[0].dims, &[a], self.keep_dims), DType::I64))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let dims = ins[0].dims();
        let a = normalize_axis(self.axis, dims.len()).map_err(|e| Error::eval("argmax", e))?;
        let v = ins[0].to_f64_vec()?;
        let map = reduce_index_map(&dims, &[a]);
        let n_out = out.numel().unwrap_or(0);
        let (mut best, mut idx) = (vec![f64::NEG_INFINITY; n_out], vec![-1i64; n_out]);
        for (i, &x) in v.iter().enumerate() {
            let o = map[i];
            let pos = unravel(i, &dims)[a] as i64;
            let better = idx[o] < 0 || (!best[o].is_nan() && (x.is_nan() || x > best[o]));
            if better {
                best[o] = x;
                idx[o] = pos;
            }
        }
        HostTensor::new(out.clone(), Data::I(idx))
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], _batched: &[bool], _size: usize) -> Option<NodeId> {
        let r = rules::dims(g, ins[0]).len() - 1;
        Some(g.argmax(ins[0], rules::shift_axis(self.axis, r), self.keep_dims))
    }
    fn samples() -> Vec<Sample> {
        let x = HostTensor::from_f64(&[3, 4], DType::F32, &rand_f64(12, -2.0, 2.0, 4)).expect("sample");
        let ties = HostTensor::from_i64(&[2, 3], DType::I32, &[1, 5, 5, 7, 7, 0]).expect("sample");
        vec![
            Sample::new("argmax/f32/-1", ArgMax { axis: -1, keep_dims: false }, vec![x.clone()]),
            Sample::new("argmax/f32/0k", ArgMax { axis: 0, keep_dims: true }, vec![x]),
            Sample::new("argmax/i32/ties", ArgMax { axis: 1, keep_dims: false }, vec![ties]),
        ]
    }
}

impl Graph {
    /// Reduces with `kind` over `axes`.
    pub fn reduce(&mut self, kind: ReduceKind, x: NodeId, axes: &[i64], keep_dims: bool) -> NodeId {
        self.add_node(Reduce { kind, axes: axes.to_vec(), keep_dims }, &[x])
    }
    /// Sum over `axes`.
    pub fn sum(&mut self, x: NodeId, axes: &[i64], keep_dims: bool) -> NodeId {
        self.reduce(ReduceKind::Sum, x, axes, keep_dims)
    }
    /// Sum over every axis.
    pub fn sum_all(&mut self, x: NodeId) -> NodeId {
        let axes: Vec<i64> = (0..self.shape(x).map_or(0, |s| s.rank()) as i64).collect();
        self.reduce(ReduceKind::Sum, x, &axes, false)
    }
    /// Mean over `axes`.
    pub fn mean(&mut self, x: NodeId, axes: &[i64], keep_dims: bool) -> NodeId {
        self.reduce(ReduceKind::Mean, x, axes, keep_dims)
    }
    /// Max over `axes`.
    pub fn max(&mut self, x: NodeId, axes: &[i64], keep_dims: bool) -> NodeId {
        self.reduce(ReduceKind::Max, x, axes, keep_dims)
    }
    /// Min over `axes`.
    pub fn min(&mut self, x: NodeId, axes: &[i64], keep_dims: bool) -> NodeId {
        self.reduce(ReduceKind::Min, x, axes, keep_dims)
    }
    /// Product over `axes`.
    pub fn prod(&mut self, x: NodeId, axes: &[i64], keep_dims: bool) -> NodeId {
        self.reduce(ReduceKind::Prod, x, axes, keep_dims)
    }
    /// Index of the maximum along `axis` (i64).
    pub fn argmax(&mut self, x: NodeId, axis: i64, keep_dims: bool) -> NodeId {
        self.add_node(ArgMax { axis, keep_dims }, &[x])
    }
}
