//! Ops that repeat, add or remove dims: broadcast_to, expand_dims, squeeze.

use crate::ops::rules;
use crate::ops::util::{broadcast_index_map, rand_f64};
use crate::shape::{normalize_axes, normalize_axis};
use crate::{DType, Dim, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// numpy `broadcast_to`: repeats size-1 axes (and adds leading axes) to reach `dims`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BroadcastTo {
    /// The target dims; the input's dims align with their tail.
    pub dims: Vec<usize>,
}

impl OpDef for BroadcastTo {
    fn name(&self) -> &'static str {
        "broadcast_to"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::DATA_MOVEMENT | OpTraits::LINEAR
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let d = ins[0].dims_fixed()?;
        if d.len() > self.dims.len() {
            return Err(format!(
                "cannot broadcast rank {} to {:?} of lower rank {}",
                d.len(),
                self.dims,
                self.dims.len()
            ));
        }
        let lead = self.dims.len() - d.len();
        for (i, &n) in d.iter().enumerate() {
            let t = self.dims[lead + i];
            if n != 1 && n != t {
                return Err(format!("cannot broadcast dim {n} (input axis {i}) to {t} in {:?}", self.dims));
            }
        }
        Ok(Shape::new(&self.dims, ins[0].dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let od = out.fixed_dims().unwrap_or_default();
        let map = broadcast_index_map(&od, &ins[0].dims());
        HostTensor::new(out.clone(), ins[0].data.gather(&map))
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let d = rules::dims(g, ins[0]);
        Some(vec![Some(rules::sum_to(g, ct, &d))])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], _batched: &[bool], size: usize) -> Option<NodeId> {
        let x = rules::lift(g, ins[0], self.dims.len());
        let mut d = vec![size];
        d.extend_from_slice(&self.dims);
        Some(g.broadcast_to(x, &d))
    }
    fn samples() -> Vec<Sample> {
        let x = HostTensor::from_f64(&[3, 1], DType::F32, &rand_f64(3, -1.0, 1.0, 11)).expect("sample");
        let v = HostTensor::from_f64(&[4], DType::F64, &rand_f64(4, -1.0, 1.0, 12)).expect("sample");
        let s = HostTensor::from_f64(&[], DType::F32, &[2.5]).expect("sample");
        let b = HostTensor::from_bool(&[1, 2], &[true, false]).expect("sample");
        let i = HostTensor::from_i64(&[2, 1, 3], DType::I32, &[1, 2, 3, 4, 5, 6]).expect("sample");
        let bt = |d: &[usize]| BroadcastTo { dims: d.to_vec() };
        vec![
            Sample::new("broadcast_to/f32/col", bt(&[2, 3, 4]), vec![x.clone()]),
            Sample::new("broadcast_to/f32/same", bt(&[3, 1]), vec![x]),
            Sample::new("broadcast_to/f64/row", bt(&[3, 4]), vec![v]),
            Sample::new("broadcast_to/scalar", bt(&[2, 2]), vec![s]),
            Sample::new("broadcast_to/bool", bt(&[3, 1, 2]), vec![b]),
            Sample::new("broadcast_to/i32/mid", bt(&[2, 2, 3]), vec![i]),
        ]
    }
}

/// Inserts a size-1 axis at `axis` of the output (numpy `expand_dims`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpandDims {
    /// Position in the output, in `-(rank+1)..=rank` (negative counts from the output's end).
    pub axis: i64,
}

impl OpDef for ExpandDims {
    fn name(&self) -> &'static str {
        "expand_dims"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::VIEW | OpTraits::LINEAR | OpTraits::DATA_MOVEMENT
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let a = normalize_axis(self.axis, ins[0].rank() + 1)?;
        let mut dims = ins[0].dims.clone();
        dims.insert(a, Dim::Fixed(1));
        Ok(Shape::with_dims(dims, ins[0].dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        HostTensor::new(out.clone(), ins[0].data.clone())
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let d = rules::dims(g, ins[0]);
        Some(vec![Some(g.reshape(ct, &d))])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], _batched: &[bool], _size: usize) -> Option<NodeId> {
        let r = rules::dims(g, ins[0]).len() - 1;
        Some(g.expand_dims(ins[0], rules::shift_axis(self.axis, r + 1)))
    }
    fn samples() -> Vec<Sample> {
        let x = HostTensor::from_f64(&[2, 3], DType::F32, &rand_f64(6, -1.0, 1.0, 13)).expect("sample");
        let y = HostTensor::from_f64(&[3], DType::F64, &rand_f64(3, -1.0, 1.0, 14)).expect("sample");
        let s = HostTensor::from_i64(&[], DType::I64, &[7]).expect("sample");
        let b = HostTensor::from_bool(&[2], &[false, true]).expect("sample");
        vec![
            Sample::new("expand_dims/f32/0", ExpandDims { axis: 0 }, vec![x.clone()]),
            Sample::new("expand_dims/f32/mid", ExpandDims { axis: 1 }, vec![x.clone()]),
            Sample::new("expand_dims/f32/end", ExpandDims { axis: -1 }, vec![x]),
            Sample::new("expand_dims/f64/-2", ExpandDims { axis: -2 }, vec![y]),
            Sample::new("expand_dims/i64/scalar", ExpandDims { axis: 0 }, vec![s]),
            Sample::new("expand_dims/bool", ExpandDims { axis: 1 }, vec![b]),
        ]
    }
}

/// Removes size-1 axes: the listed ones (each must be size 1), or every fixed size-1 axis when
/// the list is empty (symbolic dims are kept).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Squeeze {
    /// Axes to remove, possibly negative; empty = all size-1 axes.
    pub axes: Vec<i64>,
}

impl OpDef for Squeeze {
    fn name(&self) -> &'static str {
        "squeeze"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::VIEW | OpTraits::LINEAR | OpTraits::DATA_MOVEMENT
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let dims = &ins[0].dims;
        let axes = normalize_axes(&self.axes, dims.len())?;
        for &a in &axes {
            if dims[a] != Dim::Fixed(1) {
                return Err(format!("cannot squeeze axis {a}: its dim is {}, not 1", dims[a]));
            }
        }
        let keep = |i: usize, d: &Dim| {
            if self.axes.is_empty() { *d != Dim::Fixed(1) } else { !axes.contains(&i) }
        };
        let out: Vec<Dim> = dims.iter().enumerate().filter(|(i, d)| keep(*i, d)).map(|(_, d)| d.clone()).collect();
        Ok(Shape::with_dims(out, ins[0].dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        HostTensor::new(out.clone(), ins[0].data.clone())
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let d = rules::dims(g, ins[0]);
        Some(vec![Some(g.reshape(ct, &d))])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], _batched: &[bool], _size: usize) -> Option<NodeId> {
        // Name the squeezed axes explicitly: an empty list would also drop a batch of size 1.
        let d = rules::dims(g, ins[0]);
        let axes: Vec<i64> = if self.axes.is_empty() {
            (1..d.len()).filter(|&i| d[i] == 1).map(|i| i as i64).collect()
        } else {
            self.axes.iter().map(|&a| rules::shift_axis(a, d.len() - 1)).collect()
        };
        if axes.is_empty() {
            return Some(ins[0]);
        }
        Some(g.squeeze(ins[0], &axes))
    }
    fn samples() -> Vec<Sample> {
        let x = HostTensor::from_f64(&[1, 3, 1, 2], DType::F32, &rand_f64(6, -1.0, 1.0, 15)).expect("sample");
        let y = HostTensor::from_f64(&[2, 1], DType::F64, &rand_f64(2, -1.0, 1.0, 16)).expect("sample");
        let one = HostTensor::from_f64(&[1, 1], DType::F32, &[3.0]).expect("sample");
        let b = HostTensor::from_bool(&[1, 2], &[true, false]).expect("sample");
        let i = HostTensor::from_i64(&[3, 1], DType::I32, &[4, 5, 6]).expect("sample");
        let sq = |a: &[i64]| Squeeze { axes: a.to_vec() };
        vec![
            Sample::new("squeeze/f32/all", sq(&[]), vec![x.clone()]),
            Sample::new("squeeze/f32/one", sq(&[2]), vec![x.clone()]),
            Sample::new("squeeze/f32/neg", sq(&[0, -2]), vec![x]),
            Sample::new("squeeze/f64/last", sq(&[-1]), vec![y]),
            Sample::new("squeeze/to_scalar", sq(&[]), vec![one]),
            Sample::new("squeeze/bool", sq(&[0]), vec![b]),
            Sample::new("squeeze/i32", sq(&[1]), vec![i]),
        ]
    }
}

impl Graph {
    /// Broadcasts `x` to `dims`, numpy style.
    pub fn broadcast_to(&mut self, x: NodeId, dims: &[usize]) -> NodeId {
        self.add_node(BroadcastTo { dims: dims.to_vec() }, &[x])
    }
    /// Inserts a size-1 axis at `axis` (negative counts against the output rank).
    pub fn expand_dims(&mut self, x: NodeId, axis: i64) -> NodeId {
        self.add_node(ExpandDims { axis }, &[x])
    }
    /// Removes the size-1 `axes` (empty: every size-1 axis).
    pub fn squeeze(&mut self, x: NodeId, axes: &[i64]) -> NodeId {
        self.add_node(Squeeze { axes: axes.to_vec() }, &[x])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Data, Op, interp, testkit};

    fn run(op: impl Into<Op>, ins: Vec<HostTensor>) -> Result<HostTensor> {
        let (g, feeds) = testkit::sample_graph(&Sample::new("t", op, ins))?;
        let feeds: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        Ok(interp::evaluate(&g, &feeds)?.remove(0))
    }

    fn infer_err(op: impl Into<Op>, shape: Shape) -> String {
        let mut g = Graph::new("t");
        let x = g.input("x", shape);
        g.add_node(op, &[x]);
        g.check().unwrap_err().to_string()
    }

    #[test]
    fn broadcast_to_repeats() {
        let x = HostTensor::from_i64(&[2, 1], DType::I64, &[1, 2]).unwrap();
        let y = run(BroadcastTo { dims: vec![2, 2, 3] }, vec![x]).unwrap();
        assert_eq!(y.dims(), vec![2, 2, 3]);
        assert_eq!(y.data, Data::I(vec![1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2]));
        let e = infer_err(BroadcastTo { dims: vec![3] }, Shape::new(&[2], DType::F32));
        assert!(e.contains("cannot broadcast dim 2"), "{e}");
        let e = infer_err(BroadcastTo { dims: vec![2] }, Shape::new(&[1, 2], DType::F32));
        assert!(e.contains("lower rank"), "{e}");
    }

    #[test]
    fn expand_and_squeeze_dims() {
        let s = |d: &[usize]| Shape::new(d, DType::F32);
        let mut g = Graph::new("t");
        let x = g.input("x", s(&[2, 3]));
        let cases = [(0, vec![1, 2, 3]), (2, vec![2, 3, 1]), (-1, vec![2, 3, 1]), (-3, vec![1, 2, 3])];
        for (axis, want) in cases {
            let y = g.expand_dims(x, axis);
            assert_eq!(g.shape(y).unwrap(), &s(&want), "axis {axis}");
        }
        assert!(infer_err(ExpandDims { axis: 3 }, s(&[2, 3])).contains("out of range"));
        assert!(infer_err(ExpandDims { axis: -4 }, s(&[2, 3])).contains("out of range"));
        let z = g.input("z", s(&[1, 2, 1]));
        let a = g.squeeze(z, &[]);
        let b = g.squeeze(z, &[-1]);
        assert_eq!(g.shape(a).unwrap(), &s(&[2]));
        assert_eq!(g.shape(b).unwrap(), &s(&[1, 2]));
        g.check().unwrap();
        let e = infer_err(Squeeze { axes: vec![1] }, s(&[1, 2, 1]));
        assert!(e.contains("not 1"), "{e}");
        assert!(infer_err(Squeeze { axes: vec![0, -3] }, s(&[1, 2, 1])).contains("repeat"));
        assert!(infer_err(Squeeze { axes: vec![5] }, s(&[1])).contains("out of range"));
    }

    #[test]
    fn squeeze_keeps_symbolic_dims() {
        let sh = Shape::with_dims(vec![Dim::Sym("b".into()), Dim::Fixed(1)], DType::F32);
        let mut g = Graph::new("t");
        let x = g.input("x", sh);
        let y = g.squeeze(x, &[]);
        assert_eq!(g.shape(y).unwrap().to_string(), "f32[b]");
    }
}
