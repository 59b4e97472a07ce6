//! `cond`: one of two bodies, chosen by a bool scalar.

use super::{check_body, inline, run_body};
use crate::ops::rules::dims;
use crate::ops::util::rand_f64;
use crate::{DType, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// `if pred { then_body(operands) } else { else_body(operands) }`; `pred` is a bool scalar (or,
/// under vmap, broadcastable: the decomposition selects elementwise). Both bodies take the
/// operands and give one output of the same type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cond {
    /// The branch taken when the predicate is true.
    pub then_body: Box<Graph>,
    /// The branch taken when it is false.
    pub else_body: Box<Graph>,
}

impl OpDef for Cond {
    fn name(&self) -> &'static str {
        "cond"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        if ins[0].dtype != DType::Bool || ins[0].numel() != Some(1) {
            return Err(format!("the predicate must be a bool scalar, got {}", ins[0]));
        }
        let a = check_body(&self.then_body, "then", &ins[1..], 1)?.remove(0);
        let b = check_body(&self.else_body, "else", &ins[1..], 1)?.remove(0);
        if a != b {
            return Err(format!("the branches give different types: {a} and {b}"));
        }
        Ok(a)
    }
    fn reference(&self, ins: &[&HostTensor], _out: &Shape) -> Result<HostTensor> {
        let take = matches!(&ins[0].data, crate::Data::B(v) if v.first() == Some(&true));
        let body = if take { &self.then_body } else { &self.else_body };
        Ok(run_body("cond", body, &ins[1..])?.remove(0))
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        // Both branches, then a select: gradients flow only into the taken branch's values.
        let a = inline(g, &self.then_body, &ins[1..])?[0];
        let b = inline(g, &self.else_body, &ins[1..])?[0];
        let p = if dims(g, ins[0]).len() > dims(g, a).len() { g.reshape(ins[0], &[]) } else { ins[0] };
        Some(g.where_(p, a, b))
    }
    fn nested(&self) -> Option<&dyn super::NestedRules> {
        Some(self)
    }
    fn samples() -> Vec<Sample> {
        let x = HostTensor::from_f64(&[4], DType::F64, &rand_f64(4, 0.2, 2.0, 83)).expect("sample");
        let mut out = vec![];
        for p in [true, false] {
            let pred = HostTensor::from_bool(&[], &[p]).expect("sample");
            out.push(Sample::new(format!("cond/{p}"), cond_sample(DType::F64), vec![pred, x.clone()]));
        }
        out
    }
}

fn cond_sample(dt: DType) -> Cond {
    let s = Shape::new(&[4], dt);
    let mut a = Graph::new("then");
    let x = a.input("x", s.clone());
    let y = a.sin(x);
    a.set_outputs(vec![y]);
    let mut b = Graph::new("else");
    let x = b.input("x", s);
    let y = b.mul(x, x);
    b.set_outputs(vec![y]);
    Cond { then_body: Box::new(a), else_body: Box::new(b) }
}

/// `body` with only output `k` (the branch bodies of a cond that gives one result).
fn only_output(body: &Graph, k: usize) -> Graph {
    let mut b = body.clone();
    let o = b.outputs()[k];
    b.set_outputs(vec![o]);
    b
}

/// Derivatives and batching that keep `cond` a branch, as JAX does: only the taken branch's
/// derivative runs, so a branch that would give NaN or inf where it is not taken cannot leak
/// into the gradient (the select of the decomposition multiplies its cotangent by zero, and
/// `NaN * 0` is NaN).
impl super::NestedRules for Cond {
    fn jvp_nested(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        tangents: &[Option<NodeId>],
        _out: NodeId,
        tx: &dyn super::Transforms,
    ) -> Option<Result<NodeId>> {
        // Body input k is operand k + 1 of the node.
        let wrt: Vec<usize> =
            (0..ins.len() - 1).filter(|&k| tangents[k + 1].is_some() && g.dtype(ins[k + 1]).is_float()).collect();
        let run = |g: &mut Graph| -> Result<NodeId> {
            // The JVP bodies: inputs [operands.., tangents..], outputs [y, ty]; keep ty.
            let a = only_output(&tx.jvp(&self.then_body, &wrt)?, 1);
            let b = only_output(&tx.jvp(&self.else_body, &wrt)?, 1);
            let mut args = ins.to_vec();
            args.extend(wrt.iter().map(|&k| tangents[k + 1].expect("a tangent")));
            g.try_add(Cond { then_body: Box::new(a), else_body: Box::new(b) }, &args)
        };
        Some(run(g))
    }
    fn vjp_nested(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        _out: NodeId,
        cotangent: NodeId,
        tx: &dyn super::Transforms,
    ) -> Option<Result<Vec<Option<NodeId>>>> {
        let wrt: Vec<usize> = (0..ins.len() - 1).filter(|&k| g.dtype(ins[k + 1]).is_float()).collect();
        let run = |g: &mut Graph| -> Result<Vec<Option<NodeId>>> {
            // The VJP bodies: inputs [operands.., cotangent], outputs [y, cotangent per wrt]; one
            // cond per operand's cotangent (a cond gives one result).
            let (va, vb) = (tx.vjp(&self.then_body, &wrt)?, tx.vjp(&self.else_body, &wrt)?);
            let mut args = ins.to_vec();
            args.push(cotangent);
            let mut out = vec![None; ins.len()];
            for (j, &k) in wrt.iter().enumerate() {
                let c =
                    Cond { then_body: Box::new(only_output(&va, 1 + j)), else_body: Box::new(only_output(&vb, 1 + j)) };
                out[k + 1] = Some(g.try_add(c, &args)?);
            }
            Ok(out)
        };
        Some(run(g))
    }
    fn batch_nested(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        batched: &[bool],
        size: usize,
        tx: &dyn super::Transforms,
    ) -> Option<Result<NodeId>> {
        // A batched predicate picks per element: the decomposition's select.
        if batched[0] {
            return None;
        }
        let wrt: Vec<usize> = (0..ins.len() - 1).filter(|&k| batched[k + 1]).collect();
        let run = |g: &mut Graph| -> Result<NodeId> {
            let a = super::inputs_as(&tx.vmap(&self.then_body, &wrt, size)?, &self.then_body);
            let b = super::inputs_as(&tx.vmap(&self.else_body, &wrt, size)?, &self.else_body);
            g.try_add(Cond { then_body: Box::new(a), else_body: Box::new(b) }, ins)
        };
        Some(run(g))
    }
}
