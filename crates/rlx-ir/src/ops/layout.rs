//! reshape and transpose.

use crate::ops::rules;
use crate::ops::util::{rand_f64, unravel};
use crate::shape::strides;
use crate::{DType, Dim, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// Same elements, new dims (row-major); element counts must match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reshape {
    /// The new dims.
    pub dims: Vec<usize>,
}

impl OpDef for Reshape {
    fn name(&self) -> &'static str {
        "reshape"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::VIEW | OpTraits::LINEAR | OpTraits::DATA_MOVEMENT
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let have = ins[0].dims_fixed()?.iter().product::<usize>();
        let want = self.dims.iter().product::<usize>();
        if have != want {
            return Err(format!("cannot reshape {have} elements into {:?} ({want} elements)", self.dims));
        }
        Ok(Shape::new(&self.dims, ins[0].dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        HostTensor::new(out.clone(), ins[0].data.clone())
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let d = rules::dims(g, ins[0]);
        Some(vec![Some(g.reshape(ct, &d))])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], _batched: &[bool], size: usize) -> Option<NodeId> {
        let mut d = vec![size];
        d.extend_from_slice(&self.dims);
        Some(g.reshape(ins[0], &d))
    }
    fn samples() -> Vec<Sample> {
        let x = HostTensor::from_f64(&[2, 3, 4], DType::F32, &rand_f64(24, -1.0, 1.0, 1)).expect("sample");
        let i = HostTensor::from_i64(&[6], DType::I64, &[1, 2, 3, 4, 5, 6]).expect("sample");
        vec![
            Sample::new("reshape/f32", Reshape { dims: vec![4, 6] }, vec![x.clone()]),
            Sample::new("reshape/flat", Reshape { dims: vec![24] }, vec![x]),
            Sample::new("reshape/i64", Reshape { dims: vec![3, 1, 2] }, vec![i]),
        ]
    }
}

/// Permutes axes: output axis i is input axis `perm[i]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transpose {
    /// The permutation.
    pub perm: Vec<usize>,
}

impl OpDef for Transpose {
    fn name(&self) -> &'static str {
        "transpose"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::LINEAR | OpTraits::DATA_MOVEMENT
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let r = ins[0].rank();
        let mut seen = vec![false; r];
        if self.perm.len() != r || self.perm.iter().any(|&p| p >= r || std::mem::replace(&mut seen[p], true)) {
            return Err(format!("{:?} is not a permutation of {r} axes", self.perm));
        }
        let dims: Vec<Dim> = self.perm.iter().map(|&p| ins[0].dims[p].clone()).collect();
        Ok(Shape::with_dims(dims, ins[0].dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let id = ins[0].dims();
        let od = out.fixed_dims().unwrap_or_default();
        let is = strides(&id);
        let n: usize = od.iter().product();
        let idx: Vec<usize> =
            (0..n).map(|f| unravel(f, &od).iter().enumerate().map(|(i, &x)| x * is[self.perm[i]]).sum()).collect();
        HostTensor::new(out.clone(), ins[0].data.gather(&idx))
    }
    fn vjp(&self, g: &mut Graph, _ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let mut inv = vec![0; self.perm.len()];
        for (i, &p) in self.perm.iter().enumerate() {
            inv[p] = i;
        }
        Some(vec![Some(g.transpose(ct, &inv))])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], _batched: &[bool], _size: usize) -> Option<NodeId> {
        let mut perm = vec![0];
        perm.extend(self.perm.iter().map(|&p| p + 1));
        Some(g.transpose(ins[0], &perm))
    }
    fn samples() -> Vec<Sample> {
        let x = HostTensor::from_f64(&[2, 3, 4], DType::F32, &rand_f64(24, -1.0, 1.0, 2)).expect("sample");
        let m = HostTensor::from_f64(&[3, 5], DType::F64, &rand_f64(15, -1.0, 1.0, 3)).expect("sample");
        let b = HostTensor::from_bool(&[2, 2], &[true, false, false, true]).expect("sample");
        vec![
            Sample::new("transpose/2d", Transpose { perm: vec![1, 0] }, vec![m]),
            Sample::new("transpose/3d", Transpose { perm: vec![2, 0, 1] }, vec![x]),
            Sample::new("transpose/bool", Transpose { perm: vec![1, 0] }, vec![b]),
        ]
    }
}

impl Graph {
    /// Reshapes to `dims`.
    pub fn reshape(&mut self, x: NodeId, dims: &[usize]) -> NodeId {
        self.add_node(Reshape { dims: dims.to_vec() }, &[x])
    }
    /// Permutes axes.
    pub fn transpose(&mut self, x: NodeId, perm: &[usize]) -> NodeId {
        self.add_node(Transpose { perm: perm.to_vec() }, &[x])
    }
}
