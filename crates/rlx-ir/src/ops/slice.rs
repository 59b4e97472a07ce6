//! Strided slice and concatenation along an axis.

use crate::ops::rules;
use crate::ops::util::{rand_f64, same_dtype, unravel};
use crate::shape::{normalize_axis, strides};
use crate::{DType, Data, Dim, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// A full-rank strided slice (like `jax.lax.slice`): axis i keeps `starts[i]..ends[i]` stepping
/// by `steps[i]`. Needs `start <= end <= dim` and `step >= 1`; ends are not clamped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slice {
    /// First index per axis.
    pub starts: Vec<usize>,
    /// One past the last index per axis.
    pub ends: Vec<usize>,
    /// Step per axis (at least 1).
    pub steps: Vec<usize>,
}

impl OpDef for Slice {
    fn name(&self) -> &'static str {
        "slice"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::DATA_MOVEMENT | OpTraits::LINEAR
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let d = ins[0].dims_fixed()?;
        let r = d.len();
        for (what, v) in [("starts", &self.starts), ("ends", &self.ends), ("steps", &self.steps)] {
            if v.len() != r {
                return Err(format!("{what} has {} entries, input rank is {r}", v.len()));
            }
        }
        let mut out = Vec::with_capacity(r);
        for (i, &dim) in d.iter().enumerate() {
            let (s, e, st) = (self.starts[i], self.ends[i], self.steps[i]);
            if st == 0 {
                return Err(format!("step on axis {i} is 0; steps must be >= 1"));
            }
            if s > e || e > dim {
                return Err(format!("axis {i}: slice {s}..{e} does not fit dim {dim} (need start <= end <= dim)"));
            }
            out.push((e - s).div_ceil(st));
        }
        Ok(Shape::new(&out, ins[0].dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let is = strides(&ins[0].dims());
        let od = out.fixed_dims().unwrap_or_default();
        let n: usize = od.iter().product();
        let map: Vec<usize> = (0..n)
            .map(|f| {
                unravel(f, &od).iter().enumerate().map(|(i, &x)| (self.starts[i] + x * self.steps[i]) * is[i]).sum()
            })
            .collect();
        HostTensor::new(out.clone(), ins[0].data.gather(&map))
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        // The transpose scatters back axis by axis: positions start + i * step, zeros elsewhere.
        let xd = rules::dims(g, ins[0]);
        let mut cur = ct;
        for (a, &full) in xd.iter().enumerate() {
            let cd = rules::dims(g, cur);
            if cd[a] == full {
                continue;
            }
            let mut td = cd.clone();
            td[a] = full;
            let z = g.full(Shape::new(&td, g.dtype(ct)), 0.0);
            let idx = g.arange(self.starts[a] as f64, self.steps[a] as f64, cd[a], DType::I64);
            cur = g.scatter_add(z, idx, cur, a as i64);
        }
        Some(vec![Some(cur)])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], _batched: &[bool], size: usize) -> Option<NodeId> {
        let cat = |h: usize, v: &[usize]| std::iter::once(h).chain(v.iter().copied()).collect::<Vec<_>>();
        Some(g.slice(ins[0], &cat(0, &self.starts), &cat(size, &self.ends), &cat(1, &self.steps)))
    }
    fn samples() -> Vec<Sample> {
        let x = HostTensor::from_f64(&[4, 6], DType::F32, &rand_f64(24, -1.0, 1.0, 21)).expect("sample");
        let y = HostTensor::from_f64(&[3, 5, 2], DType::F64, &rand_f64(30, -1.0, 1.0, 22)).expect("sample");
        let i = HostTensor::from_i64(&[7], DType::I32, &[0, 1, 2, 3, 4, 5, 6]).expect("sample");
        let b = HostTensor::from_bool(&[2, 3], &[true, false, true, false, true, true]).expect("sample");
        let sl =
            |s: &[usize], e: &[usize], st: &[usize]| Slice { starts: s.to_vec(), ends: e.to_vec(), steps: st.to_vec() };
        vec![
            Sample::new("slice/f32/block", sl(&[1, 2], &[3, 6], &[1, 1]), vec![x.clone()]),
            Sample::new("slice/f32/strided", sl(&[0, 1], &[4, 6], &[2, 3]), vec![x.clone()]),
            Sample::new("slice/f32/empty", sl(&[2, 0], &[2, 6], &[1, 1]), vec![x]),
            Sample::new("slice/f64/3d", sl(&[1, 0, 1], &[3, 5, 2], &[1, 2, 1]), vec![y]),
            Sample::new("slice/i32/step3", sl(&[1], &[7], &[3]), vec![i]),
            Sample::new("slice/bool", sl(&[0, 1], &[2, 3], &[1, 1]), vec![b]),
        ]
    }
}

/// Concatenates inputs along `axis`; all share the dtype and every other dim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Concat {
    /// The axis, possibly negative.
    pub axis: i64,
}

impl OpDef for Concat {
    fn name(&self) -> &'static str {
        "concat"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::DATA_MOVEMENT | OpTraits::LINEAR
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let dt = same_dtype(ins)?;
        let r = ins[0].rank();
        let a = normalize_axis(self.axis, r)?;
        let mut total = 0usize;
        for (k, s) in ins.iter().enumerate() {
            if s.rank() != r {
                return Err(format!("input {k} has rank {}, input 0 has rank {r}", s.rank()));
            }
            for i in (0..r).filter(|&i| i != a) {
                if s.dims[i] != ins[0].dims[i] {
                    return Err(format!(
                        "input {k} has dim {} on axis {i}, input 0 has {} (only axis {a} may differ)",
                        s.dims[i], ins[0].dims[i]
                    ));
                }
            }
            match s.dims[a] {
                Dim::Fixed(n) => total += n,
                Dim::Sym(ref sym) => {
                    return Err(format!("input {k} has symbolic dim {sym} on the concat axis {a}"));
                }
            }
        }
        let mut dims = ins[0].dims.clone();
        dims[a] = Dim::Fixed(total);
        Ok(Shape::with_dims(dims, dt))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let od = out.fixed_dims().unwrap_or_default();
        let a = normalize_axis(self.axis, od.len()).map_err(|e| Error::eval("concat", e))?;
        // Per input: where it starts along the axis, and where its data starts in the joined data.
        let (mut axis_start, mut base) = (vec![], vec![]);
        let (mut pos, mut off) = (0usize, 0usize);
        for t in ins {
            axis_start.push(pos);
            base.push(off);
            pos += t.dims()[a];
            off += t.numel();
        }
        let n: usize = od.iter().product();
        let map: Vec<usize> = (0..n)
            .map(|f| {
                let mut idx = unravel(f, &od);
                let k = axis_start.partition_point(|&s| s <= idx[a]) - 1;
                idx[a] -= axis_start[k];
                let is = strides(&ins[k].dims());
                base[k] + idx.iter().zip(&is).map(|(x, s)| x * s).sum::<usize>()
            })
            .collect();
        let parts: Vec<&Data> = ins.iter().map(|t| &t.data).collect();
        let joined = Data::concat(&parts).ok_or_else(|| Error::eval("concat", "inputs differ in class"))?;
        HostTensor::new(out.clone(), joined.gather(&map))
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let r = rules::dims(g, ct).len();
        let a = normalize_axis(self.axis, r).ok()?;
        let mut start = 0;
        let mut v = vec![];
        for &x in ins {
            let n = rules::dims(g, x)[a];
            v.push(Some(g.slice_axis(ct, a as i64, start, start + n)));
            start += n;
        }
        Some(v)
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], size: usize) -> Option<NodeId> {
        let r = rules::dims(g, ins[0]).len() - usize::from(batched[0]);
        let xs: Vec<NodeId> =
            ins.iter().zip(batched).map(|(&x, &b)| if b { x } else { rules::add_batch(g, x, size) }).collect();
        Some(g.concat(&xs, rules::shift_axis(self.axis, r)))
    }
    fn samples() -> Vec<Sample> {
        let f = |d: &[usize], dt, seed| {
            HostTensor::from_f64(d, dt, &rand_f64(d.iter().product(), -1.0, 1.0, seed)).expect("sample")
        };
        let a = f(&[2, 3], DType::F32, 31);
        let b = f(&[2, 1], DType::F32, 32);
        let c = f(&[2, 2], DType::F32, 33);
        let d = f(&[1, 3], DType::F32, 34);
        let e = f(&[2, 0], DType::F32, 35);
        let p = f(&[2, 1, 3], DType::F64, 36);
        let q = f(&[2, 2, 3], DType::F64, 37);
        let i = HostTensor::from_i64(&[3], DType::I64, &[1, 2, 3]).expect("sample");
        let j = HostTensor::from_i64(&[2], DType::I64, &[-4, 5]).expect("sample");
        let t = HostTensor::from_bool(&[1, 2], &[true, false]).expect("sample");
        let u = HostTensor::from_bool(&[1, 2], &[false, false]).expect("sample");
        vec![
            Sample::new("concat/f32/last3", Concat { axis: -1 }, vec![a.clone(), b, c]),
            Sample::new("concat/f32/rows", Concat { axis: 0 }, vec![a.clone(), d]),
            Sample::new("concat/f32/empty", Concat { axis: 1 }, vec![e, a.clone()]),
            Sample::new("concat/f32/one", Concat { axis: 0 }, vec![a]),
            Sample::new("concat/f64/mid", Concat { axis: 1 }, vec![p, q]),
            Sample::new("concat/i64", Concat { axis: 0 }, vec![i, j]),
            Sample::new("concat/bool", Concat { axis: -2 }, vec![t, u]),
        ]
    }
}

impl Graph {
    /// Strided slice of every axis (`starts..ends` by `steps`).
    pub fn slice(&mut self, x: NodeId, starts: &[usize], ends: &[usize], steps: &[usize]) -> NodeId {
        self.add_node(Slice { starts: starts.to_vec(), ends: ends.to_vec(), steps: steps.to_vec() }, &[x])
    }
    /// `start..end` (step 1) on one axis, other axes whole.
    pub fn slice_axis(&mut self, x: NodeId, axis: i64, start: usize, end: usize) -> NodeId {
        let dims: Vec<Dim> = self.shape(x).map(|s| s.dims.clone()).unwrap_or_default();
        let mut ends: Vec<usize> = dims.iter().map(|d| d.fixed().unwrap_or(0)).collect();
        let mut starts = vec![0; dims.len()];
        match normalize_axis(axis, dims.len()) {
            Ok(a) => {
                starts[a] = start;
                ends[a] = end;
            }
            Err(reason) => {
                // Record the clear error; the slice below then fails too but is reported second.
                // (A bad node id is reported by the slice itself.)
                if let Some(s) = self.shape(x).cloned() {
                    self.record(Error::Infer {
                        op: "slice".into(),
                        node: self.len() as u32,
                        inputs: vec![s],
                        reason: format!("slice_axis: {reason}"),
                    });
                }
                starts.clear();
            }
        }
        let steps = vec![1; ends.len()];
        self.slice(x, &starts, &ends, &steps)
    }
    /// Concatenates `xs` along `axis`.
    pub fn concat(&mut self, xs: &[NodeId], axis: i64) -> NodeId {
        self.add_node(Concat { axis }, xs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Op, interp, testkit};

    fn run(op: impl Into<Op>, ins: Vec<HostTensor>) -> Result<HostTensor> {
        let (g, feeds) = testkit::sample_graph(&Sample::new("t", op, ins))?;
        let feeds: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        Ok(interp::evaluate(&g, &feeds)?.remove(0))
    }

    fn ints(d: &[usize], v: &[i64]) -> HostTensor {
        HostTensor::from_i64(d, DType::I64, v).unwrap()
    }

    #[test]
    fn slice_strided() {
        let x = ints(&[3, 4], &(0..12).collect::<Vec<_>>());
        let op = Slice { starts: vec![0, 1], ends: vec![3, 4], steps: vec![2, 2] };
        let y = run(op, vec![x]).unwrap();
        assert_eq!(y, ints(&[2, 2], &[1, 3, 9, 11]));
    }

    #[test]
    fn slice_errors() {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[3, 4], DType::F32));
        let check = |g: &mut Graph, s: &[usize], e: &[usize], st: &[usize], want: &str| {
            let mut g2 = g.clone();
            g2.slice(x, s, e, st);
            let err = g2.check().unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        };
        check(&mut g, &[0], &[3], &[1], "starts has 1 entries");
        check(&mut g, &[0, 0], &[3, 5], &[1, 1], "does not fit dim 4");
        check(&mut g, &[2, 0], &[1, 4], &[1, 1], "does not fit dim 3");
        check(&mut g, &[0, 0], &[3, 4], &[1, 0], "steps must be >= 1");
        let y = g.slice_axis(x, -1, 1, 3);
        assert_eq!(g.shape(y).unwrap(), &Shape::new(&[3, 2], DType::F32));
        g.check().unwrap();
        g.slice_axis(x, 2, 0, 1);
        let err = g.check().unwrap_err().to_string();
        assert!(err.contains("slice_axis: axis 2 is out of range"), "{err}");
    }

    #[test]
    fn concat_three_inputs() {
        let a = ints(&[2, 1], &[1, 2]);
        let b = ints(&[2, 2], &[3, 4, 5, 6]);
        let c = ints(&[2, 1], &[7, 8]);
        let y = run(Concat { axis: -1 }, vec![a, b, c]).unwrap();
        assert_eq!(y, ints(&[2, 4], &[1, 3, 4, 7, 2, 5, 6, 8]));
    }

    #[test]
    fn concat_errors() {
        let mut g = Graph::new("t");
        let a = g.input("a", Shape::new(&[2, 3], DType::F32));
        let b = g.input("b", Shape::new(&[3, 3], DType::F32));
        let c = g.input("c", Shape::new(&[2, 3], DType::F64));
        let d = g.input("d", Shape::new(&[2], DType::F32));
        let ok = g.concat(&[a, b], 0);
        assert_eq!(g.shape(ok).unwrap(), &Shape::new(&[5, 3], DType::F32));
        g.check().unwrap();
        for (xs, axis, want) in [
            (vec![a, b], 1, "only axis 1 may differ"),
            (vec![a, c], 0, "share one dtype"),
            (vec![a, d], 0, "rank 1"),
            (vec![a], 2, "out of range"),
            (vec![], 0, "takes at least 1"),
        ] {
            let mut g2 = g.clone();
            g2.concat(&xs, axis);
            let err = g2.check().unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }
}
