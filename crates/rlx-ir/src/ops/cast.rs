//! `cast` (dtype conversion) and `where` (elementwise select).

use crate::ops::rules;
use crate::ops::util::{broadcast_index_map, rand_f64};
use crate::shape::broadcast_dims;
use crate::{DType, Data, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// Converts elements to another dtype (float to int truncates toward zero and saturates).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cast {
    /// Target dtype.
    pub to: DType,
}

impl OpDef for Cast {
    fn name(&self) -> &'static str {
        "cast"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::ELEMENTWISE
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        Ok(ins[0].with_dtype(self.to))
    }
    fn reference(&self, ins: &[&HostTensor], _out: &Shape) -> Result<HostTensor> {
        Ok(ins[0].cast(self.to))
    }
    fn jvp(&self, g: &mut Graph, _ins: &[NodeId], t: &[Option<NodeId>], out: NodeId) -> Option<NodeId> {
        // Float to float carries the tangent; an integer or bool output has a zero tangent.
        if self.to.is_float() { Some(g.cast(t[0]?, self.to)) } else { Some(rules::zeros_like(g, out)) }
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let from = g.dtype(ins[0]);
        Some(vec![(from.is_float() && self.to.is_float()).then(|| g.cast(ct, from))])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        rules::elementwise_batch(g, self.clone().into(), ins, batched)
    }
    fn samples() -> Vec<Sample> {
        let f = HostTensor::from_f64(&[6], DType::F32, &[-2.7, -0.5, 0.0, 0.49, 1.5, 300.25]).expect("sample");
        let i = HostTensor::from_i64(&[4], DType::I32, &[-3, 0, 1, 70000]).expect("sample");
        let b = HostTensor::from_bool(&[3], &[true, false, true]).expect("sample");
        let mut out = vec![];
        for to in [DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8, DType::Bool] {
            out.push(Sample::new(format!("cast/f32->{to}"), Cast { to }, vec![f.clone()]));
        }
        for to in [DType::F32, DType::I8, DType::F64, DType::Bool] {
            out.push(Sample::new(format!("cast/i32->{to}"), Cast { to }, vec![i.clone()]));
        }
        out.push(Sample::new("cast/bool->f32", Cast { to: DType::F32 }, vec![b]));
        out
    }
}

/// `where(cond, a, b)`: a where cond is true, else b; all three broadcast.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Where {}

impl OpDef for Where {
    fn name(&self) -> &'static str {
        "where"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::ELEMENTWISE | OpTraits::BROADCAST
    }
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        if ins[0].dtype != DType::Bool {
            return Err(format!("condition must be bool, got {}", ins[0].dtype));
        }
        if ins[1].dtype != ins[2].dtype {
            return Err(format!("branches must share a dtype, got {} and {}", ins[1].dtype, ins[2].dtype));
        }
        let d = broadcast_dims(&broadcast_dims(&ins[0].dims, &ins[1].dims)?, &ins[2].dims)?;
        Ok(Shape::with_dims(d, ins[1].dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let od = out.fixed_dims().unwrap_or_default();
        let ic = broadcast_index_map(&od, &ins[0].dims());
        let ia = broadcast_index_map(&od, &ins[1].dims());
        let ib = broadcast_index_map(&od, &ins[2].dims());
        let Data::B(c) = &ins[0].data else {
            return Err(Error::eval("where", "condition is not bool"));
        };
        // Pick the source flat index per element, then gather from a concatenation of a and b.
        let na = ins[1].numel();
        let pick: Vec<usize> = (0..ic.len()).map(|i| if c[ic[i]] { ia[i] } else { na + ib[i] }).collect();
        let both =
            Data::concat(&[&ins[1].data, &ins[2].data]).ok_or_else(|| Error::eval("where", "branch classes differ"))?;
        HostTensor::new(out.clone(), both.gather(&pick))
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], out: NodeId) -> Option<NodeId> {
        let (a, b) = (rules::or_zeros(g, t[1], ins[1]), rules::or_zeros(g, t[2], ins[2]));
        let y = g.where_(ins[0], a, b);
        let od = rules::dims(g, out);
        Some(rules::broadcast_to(g, y, &od))
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let z = rules::zeros_like(g, ct);
        let (ta, tb) = (g.where_(ins[0], ct, z), g.where_(ins[0], z, ct));
        let (ad, bd) = (rules::dims(g, ins[1]), rules::dims(g, ins[2]));
        Some(vec![None, Some(rules::sum_to(g, ta, &ad)), Some(rules::sum_to(g, tb, &bd))])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        rules::elementwise_batch(g, self.clone().into(), ins, batched)
    }
    fn samples() -> Vec<Sample> {
        let c = HostTensor::from_bool(&[2, 3], &[true, false, true, false, false, true]).expect("sample");
        let a = HostTensor::from_f64(&[2, 3], DType::F32, &rand_f64(6, -1.0, 1.0, 1)).expect("sample");
        let b = HostTensor::from_f64(&[3], DType::F32, &rand_f64(3, -1.0, 1.0, 2)).expect("sample");
        let c2 = HostTensor::from_bool(&[2, 1], &[true, false]).expect("sample");
        let ia = HostTensor::from_i64(&[1, 3], DType::I64, &[1, 2, 3]).expect("sample");
        let ib = HostTensor::from_i64(&[], DType::I64, &[-1]).expect("sample");
        vec![Sample::new("where/f32", Where {}, vec![c, a, b]), Sample::new("where/i64", Where {}, vec![c2, ia, ib])]
    }
}

impl Graph {
    /// Converts to `to`.
    pub fn cast(&mut self, x: NodeId, to: DType) -> NodeId {
        self.add_node(Cast { to }, &[x])
    }

    /// Selects `a` where `cond` is true, else `b` (dtypes of a and b are promoted).
    pub fn where_(&mut self, cond: NodeId, a: NodeId, b: NodeId) -> NodeId {
        let to = DType::promote(self.dtype(a), self.dtype(b));
        let (a, b) = (self.cast_to(a, to), self.cast_to(b, to));
        self.add_node(Where {}, &[cond, a, b])
    }
}
