//! `while_loop`: a loop with a data-dependent trip count.

use super::{check_body, inline, run_body};
use crate::ops::rules::dims;
use crate::{DType, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// `while cond(carry, consts...) { carry = body(carry, consts...) }`, at most `max_trips` times
/// (then it stops: the documented bound on a runaway loop, the same in the reference and on
/// every backend). Inputs: `[init, consts...]`. Forward-mode only, as in JAX: reverse mode is a
/// `Transform` error (use `scan` or `fori_loop`, whose trip count is static).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhileLoop {
    /// (carry, consts...) -> bool scalar.
    pub cond: Box<Graph>,
    /// (carry, consts...) -> carry.
    pub body: Box<Graph>,
    /// The most iterations run. Backends that run loops stop there; the decomposition (for
    /// backends that cannot) unrolls this many masked steps, up to `UNROLL_LIMIT`.
    pub max_trips: usize,
}

impl WhileLoop {
    /// The most masked steps `decompose` unrolls: a larger `max_trips` (a bound against
    /// runaway loops rather than a trip count) needs a backend that runs loops.
    pub const UNROLL_LIMIT: usize = 4096;
}

impl OpDef for WhileLoop {
    fn name(&self) -> &'static str {
        "while_loop"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let c = check_body(&self.cond, "cond", ins, 1)?.remove(0);
        if c.dtype != DType::Bool || c.numel() != Some(1) {
            return Err(format!("the cond body must give a bool scalar, got {c}"));
        }
        let b = check_body(&self.body, "while", ins, 1)?.remove(0);
        if &b != ins[0] {
            return Err(format!("the body gives {b}, the carry is {}", ins[0]));
        }
        Ok(b)
    }
    fn reference(&self, ins: &[&HostTensor], _out: &Shape) -> Result<HostTensor> {
        let mut carry = ins[0].clone();
        for _ in 0..self.max_trips {
            let mut args = vec![&carry];
            args.extend_from_slice(&ins[1..]);
            let go = run_body("while_loop", &self.cond, &args)?.remove(0);
            if !matches!(&go.data, crate::Data::B(v) if v.first() == Some(&true)) {
                break;
            }
            carry = run_body("while_loop", &self.body, &args)?.remove(0);
        }
        Ok(carry)
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        // Masked unrolling: once the condition fails, the carry stops changing.
        if self.max_trips > Self::UNROLL_LIMIT {
            return None;
        }
        let mut carry = ins[0];
        let mut active: Option<NodeId> = None;
        let no = g.constant(HostTensor::from_bool(&[], &[false]).ok()?);
        for _ in 0..self.max_trips {
            let mut args = vec![carry];
            args.extend_from_slice(&ins[1..]);
            let c = inline(g, &self.cond, &args)?[0];
            let c = if dims(g, c).is_empty() { c } else { g.reshape(c, &[]) };
            let now = match active {
                Some(a) => g.where_(a, c, no),
                None => c,
            };
            let next = inline(g, &self.body, &args)?[0];
            carry = g.where_(now, next, carry);
            active = Some(now);
        }
        Some(carry)
    }
    fn nested(&self) -> Option<&dyn super::NestedRules> {
        Some(self)
    }
    fn samples() -> Vec<Sample> {
        let x = HostTensor::from_f64(&[2], DType::F64, &[0.3, 0.5]).expect("sample");
        let limit = HostTensor::from_f64(&[], DType::F64, &[3.0]).expect("sample");
        vec![Sample::new("while_loop/f64", while_sample(DType::F64), vec![x, limit])]
    }
}

/// Doubles x while its sum is below `limit` (at most 6 times).
fn while_sample(dt: DType) -> WhileLoop {
    let s = Shape::new(&[2], dt);
    let mut c = Graph::new("cond");
    let x = c.input("x", s.clone());
    let limit = c.input("limit", Shape::scalar(dt));
    let t = c.sum_all(x);
    let p = c.lt(t, limit);
    c.set_outputs(vec![p]);
    let mut b = Graph::new("body");
    let x = b.input("x", s);
    b.input("limit", Shape::scalar(dt));
    let two = b.scalar(2.0, dt);
    let y = b.mul(x, two);
    b.set_outputs(vec![y]);
    WhileLoop { cond: Box::new(c), body: Box::new(b), max_trips: 6 }
}
