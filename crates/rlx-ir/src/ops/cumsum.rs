//! Cumulative sum along one axis (inclusive or exclusive, forward or reverse).

use crate::ops::util::{rand_f64, rand_i64, unary_dtype_check};
use crate::shape::normalize_axis;
use crate::{DType, Data, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// Running sum along `axis`. `reverse` sums from the end; `exclusive` leaves out the element
/// itself (the first output is 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cumsum {
    /// The axis, possibly negative.
    pub axis: i64,
    /// Accumulate from the last element backwards.
    pub reverse: bool,
    /// Exclude the current element.
    pub exclusive: bool,
}

impl Cumsum {
    /// Scans every lane along axis `a` of `dims`, calling `step(flat_index)` in scan order, with a
    /// reset before each lane.
    fn scan(&self, dims: &[usize], a: usize, mut reset: impl FnMut(), mut step: impl FnMut(usize)) {
        let n = dims[a];
        let inner: usize = dims[a + 1..].iter().product();
        let outer: usize = dims[..a].iter().product();
        for o in 0..outer {
            for i in 0..inner {
                reset();
                for k in 0..n {
                    let k = if self.reverse { n - 1 - k } else { k };
                    step((o * n + k) * inner + i);
                }
            }
        }
    }
}

impl OpDef for Cumsum {
    fn name(&self) -> &'static str {
        "cumsum"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::LINEAR
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        unary_dtype_check(ins[0].dtype, true)?;
        normalize_axis(self.axis, ins[0].rank())?;
        Ok(ins[0].clone())
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let dims = ins[0].dims();
        let a = normalize_axis(self.axis, dims.len()).map_err(|e| Error::eval("cumsum", e))?;
        let ex = self.exclusive;
        let data = match &ins[0].data {
            Data::F(v) => {
                let mut o = vec![0.0; v.len()];
                let acc = std::cell::Cell::new(0.0);
                self.scan(
                    &dims,
                    a,
                    || acc.set(0.0),
                    |f| {
                        let s = acc.get() + v[f];
                        o[f] = if ex { acc.get() } else { s };
                        acc.set(s);
                    },
                );
                Data::F(o)
            }
            Data::I(v) => {
                let mut o = vec![0i64; v.len()];
                let acc = std::cell::Cell::new(0i64);
                self.scan(
                    &dims,
                    a,
                    || acc.set(0),
                    |f| {
                        let s = acc.get().wrapping_add(v[f]);
                        o[f] = if ex { acc.get() } else { s };
                        acc.set(s);
                    },
                );
                Data::I(o)
            }
            _ => return Err(Error::eval("cumsum", "unsupported dtype")),
        };
        HostTensor::new(out.clone(), data)
    }
    fn vjp(&self, g: &mut Graph, _ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        // The transpose of a forward scan is the same scan run backward.
        Some(vec![Some(g.cumsum_with(ct, self.axis, !self.reverse, self.exclusive))])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], _batched: &[bool], _size: usize) -> Option<NodeId> {
        let r = crate::ops::rules::dims(g, ins[0]).len() - 1;
        Some(g.cumsum_with(ins[0], crate::ops::rules::shift_axis(self.axis, r), self.reverse, self.exclusive))
    }
    fn samples() -> Vec<Sample> {
        let x = HostTensor::from_f64(&[3, 4], DType::F32, &rand_f64(12, -1.0, 1.0, 61)).expect("sample");
        let y = HostTensor::from_f64(&[2, 3, 2], DType::F64, &rand_f64(12, -1.0, 1.0, 62)).expect("sample");
        let i = HostTensor::from_i64(&[2, 5], DType::I32, &rand_i64(10, -9, 9, 63)).expect("sample");
        let e = HostTensor::from_f64(&[0, 3], DType::F32, &[]).expect("sample");
        let cs = |axis, reverse, exclusive| Cumsum { axis, reverse, exclusive };
        vec![
            Sample::new("cumsum/f32/last", cs(-1, false, false), vec![x.clone()]),
            Sample::new("cumsum/f32/0/rev", cs(0, true, false), vec![x.clone()]),
            Sample::new("cumsum/f32/excl", cs(1, false, true), vec![x]),
            Sample::new("cumsum/f64/mid/rev_excl", cs(-2, true, true), vec![y.clone()]),
            Sample::new("cumsum/f64/0", cs(0, false, false), vec![y]),
            Sample::new("cumsum/i32", cs(1, false, false), vec![i.clone()]),
            Sample::new("cumsum/i32/rev_excl", cs(-1, true, true), vec![i]),
            Sample::new("cumsum/f32/empty", cs(0, false, false), vec![e]),
        ]
    }
}

impl Graph {
    /// Inclusive forward cumulative sum along `axis`.
    pub fn cumsum(&mut self, x: NodeId, axis: i64) -> NodeId {
        self.cumsum_with(x, axis, false, false)
    }
    /// Cumulative sum along `axis`, optionally from the end and/or excluding each element.
    pub fn cumsum_with(&mut self, x: NodeId, axis: i64, reverse: bool, exclusive: bool) -> NodeId {
        self.add_node(Cumsum { axis, reverse, exclusive }, &[x])
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

    #[test]
    fn cumsum_modes() {
        let x = HostTensor::from_i64(&[2, 3], DType::I64, &[1, 2, 3, 4, 5, 6]).unwrap();
        let cases: [(i64, bool, bool, [i64; 6]); 5] = [
            (1, false, false, [1, 3, 6, 4, 9, 15]),
            (-1, false, true, [0, 1, 3, 0, 4, 9]),
            (1, true, false, [6, 5, 3, 15, 11, 6]),
            (1, true, true, [5, 3, 0, 11, 6, 0]),
            (0, false, false, [1, 2, 3, 5, 7, 9]),
        ];
        for (axis, reverse, exclusive, want) in cases {
            let op = Cumsum { axis, reverse, exclusive };
            let y = run(op, vec![x.clone()]).unwrap();
            assert_eq!(y.data, Data::I(want.to_vec()), "{axis} {reverse} {exclusive}");
        }
        let f = HostTensor::from_f32(&[3], &[0.5, 1.0, 2.0]).unwrap();
        let y = run(Cumsum { axis: 0, reverse: true, exclusive: false }, vec![f]).unwrap();
        assert_eq!(y.data, Data::F(vec![3.5, 3.0, 2.0]));
    }

    #[test]
    fn cumsum_infer_errors() {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[2, 3], DType::F32));
        let b = g.input("b", Shape::new(&[2], DType::Bool));
        let y = g.cumsum(x, -2);
        assert_eq!(g.shape(y).unwrap(), &Shape::new(&[2, 3], DType::F32));
        g.check().unwrap();
        let mut g2 = g.clone();
        g2.cumsum(x, 2);
        assert!(g2.check().unwrap_err().to_string().contains("out of range"));
        g.cumsum(b, 0);
        assert!(g.check().unwrap_err().to_string().contains("not supported"));
    }
}
