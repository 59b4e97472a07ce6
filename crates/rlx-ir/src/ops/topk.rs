//! top_k along the last axis (like `jax.lax.top_k`). A node has one output, so values and
//! indices are two nodes that differ in the `output` attribute.

use crate::ops::rules;
use crate::ops::util::{rand_f64, rand_i64};
use crate::{
    DType, DTypeClass, Data, Dim, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity,
};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// Which result of top_k a node gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TopKOutput {
    /// The k largest values, largest first (input dtype).
    Values,
    /// Their positions along the last axis (i64).
    Indices,
}

/// The `k` largest elements along the last axis, largest first; ties go to the lower index and
/// NaN counts as the largest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopK {
    /// How many to keep (at most the last dim).
    pub k: usize,
    /// Values or indices.
    pub output: TopKOutput,
}

/// Descending order with NaN first; equal values keep their order under a stable sort.
fn desc_f64(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        _ => b.partial_cmp(&a).unwrap_or(Ordering::Equal),
    }
}

impl TopK {
    /// Flat positions in x of the selected elements (1-D, i64) and the output dims.
    fn flat_indices(&self, g: &mut Graph, x: NodeId) -> Option<(NodeId, Vec<usize>)> {
        let xd = rules::dims(g, x);
        let n = *xd.last()?;
        let rows: usize = xd[..xd.len() - 1].iter().product();
        let idx = g.add_node(TopK { k: self.k, output: TopKOutput::Indices }, &[x]);
        let off = g.arange(0.0, n as f64, rows, DType::I64);
        let off = g.reshape(off, &[rows, 1]);
        let i2 = g.reshape(idx, &[rows, self.k]);
        let fi = g.add(i2, off);
        let mut od = xd.clone();
        *od.last_mut()? = self.k;
        Some((g.reshape(fi, &[rows * self.k]), od))
    }
}

impl OpDef for TopK {
    fn name(&self) -> &'static str {
        "top_k"
    }
    fn traits(&self) -> OpTraits {
        match self.output {
            TopKOutput::Values => OpTraits::empty(),
            TopKOutput::Indices => OpTraits::NON_DIFFERENTIABLE,
        }
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let x = ins[0];
        if !matches!(x.dtype.class(), DTypeClass::Float | DTypeClass::Int) {
            return Err(format!("dtype {} is not supported", x.dtype));
        }
        let Some(last) = x.dims.last() else {
            return Err("needs rank >= 1, got a scalar".into());
        };
        let Dim::Fixed(n) = *last else {
            return Err(format!("the last dim must be static, got {last}"));
        };
        if self.k > n {
            return Err(format!("k = {} exceeds the last dim {n}", self.k));
        }
        let mut dims = x.dims.clone();
        let r = dims.len();
        dims[r - 1] = Dim::Fixed(self.k);
        let dt = match self.output {
            TopKOutput::Values => x.dtype,
            TopKOutput::Indices => DType::I64,
        };
        Ok(Shape::with_dims(dims, dt))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let x = ins[0];
        let n = x.dims().last().copied().unwrap_or(0);
        let rows = x.numel().checked_div(n).unwrap_or(0);
        let (mut pos, mut flat) = (vec![], vec![]);
        for r in 0..rows {
            let mut order: Vec<usize> = (0..n).collect();
            let base = r * n;
            // Stable sort: equal values keep the lower index first.
            match &x.data {
                Data::F(v) => order.sort_by(|&i, &j| desc_f64(v[base + i], v[base + j])),
                Data::I(v) => order.sort_by(|&i, &j| v[base + j].cmp(&v[base + i])),
                _ => return Err(Error::eval("top_k", "unsupported dtype")),
            }
            for &i in &order[..self.k] {
                pos.push(i as i64);
                flat.push(base + i);
            }
        }
        let data = match self.output {
            TopKOutput::Values => x.data.gather(&flat),
            TopKOutput::Indices => Data::I(pos),
        };
        HostTensor::new(out.clone(), data)
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], _out: NodeId) -> Option<NodeId> {
        let (flat, od) = self.flat_indices(g, ins[0])?;
        let xd = rules::dims(g, ins[0]);
        let tf = g.reshape(t[0]?, &[xd.iter().product()]);
        let y = g.gather(tf, flat, 0);
        Some(g.reshape(y, &od))
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let (flat, _) = self.flat_indices(g, ins[0])?;
        let xd = rules::dims(g, ins[0]);
        let z = g.full(Shape::new(&[xd.iter().product()], g.dtype(ct)), 0.0);
        let n = rules::dims(g, flat).iter().product();
        let cf = g.reshape(ct, &[n]);
        let s = g.scatter_add(z, flat, cf, 0);
        Some(vec![Some(g.reshape(s, &xd))])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], _batched: &[bool], _size: usize) -> Option<NodeId> {
        Some(g.add_node(self.clone(), &[ins[0]]))
    }
    fn samples() -> Vec<Sample> {
        let x = HostTensor::from_f64(&[3, 6], DType::F32, &rand_f64(18, -1.0, 1.0, 71)).expect("sample");
        let y = HostTensor::from_f64(&[2, 2, 5], DType::F64, &rand_f64(20, -1.0, 1.0, 72)).expect("sample");
        let ties = HostTensor::from_i64(&[2, 5], DType::I32, &[3, 7, 7, 1, 7, 2, 2, 2, 2, 2]).expect("sample");
        let ri = HostTensor::from_i64(&[4, 3], DType::I64, &rand_i64(12, -50, 50, 73)).expect("sample");
        let v = HostTensor::from_f32(&[4], &[1.0, 4.0, 4.0, -2.0]).expect("sample");
        let mut out = vec![];
        for output in [TopKOutput::Values, TopKOutput::Indices] {
            let tag = match output {
                TopKOutput::Values => "values",
                TopKOutput::Indices => "indices",
            };
            let cases = [
                ("f32", 3, x.clone()),
                ("f32/all", 6, x.clone()),
                ("f64/3d", 2, y.clone()),
                ("i32/ties", 3, ties.clone()),
                ("i64", 1, ri.clone()),
                ("f32/1d", 2, v.clone()),
                ("f32/k0", 0, v.clone()),
            ];
            for (label, k, t) in cases {
                out.push(Sample::new(format!("top_k/{tag}/{label}"), TopK { k, output }, vec![t]));
            }
        }
        out
    }
}

impl Graph {
    /// The `k` largest elements along the last axis: (values, i64 indices).
    pub fn topk(&mut self, x: NodeId, k: usize) -> (NodeId, NodeId) {
        let v = self.add_node(TopK { k, output: TopKOutput::Values }, &[x]);
        let i = self.add_node(TopK { k, output: TopKOutput::Indices }, &[x]);
        (v, i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp;

    #[test]
    fn topk_ties_take_lower_index() {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[2, 4], DType::F32));
        let (v, i) = g.topk(x, 3);
        g.set_outputs(vec![v, i]);
        let xv = HostTensor::from_f32(&[2, 4], &[1.0, 5.0, 5.0, 3.0, f32::NAN, 0.0, 9.0, 0.0]).unwrap();
        let out = interp::evaluate(&g, &[("x", xv)]).unwrap();
        assert_eq!(out[1].data, Data::I(vec![1, 2, 3, 0, 2, 1]));
        assert_eq!(out[1].dtype(), DType::I64);
        let Data::F(vals) = &out[0].data else { panic!("float output") };
        assert_eq!(&vals[..3], &[5.0, 5.0, 3.0]);
        assert!(vals[3].is_nan());
        assert_eq!(&vals[4..], &[9.0, 0.0]);
    }

    #[test]
    fn topk_infer_errors() {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[2, 4], DType::F32));
        let s = g.input("s", Shape::scalar(DType::F32));
        let b = g.input("b", Shape::new(&[3], DType::Bool));
        let (v, i) = g.topk(x, 4);
        assert_eq!(g.shape(v).unwrap(), &Shape::new(&[2, 4], DType::F32));
        assert_eq!(g.shape(i).unwrap(), &Shape::new(&[2, 4], DType::I64));
        g.check().unwrap();
        for (x, k, want) in [(x, 5, "exceeds the last dim 4"), (s, 1, "rank >= 1"), (b, 1, "not supported")] {
            let mut g2 = g.clone();
            g2.topk(x, k);
            let err = g2.check().unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }
}
