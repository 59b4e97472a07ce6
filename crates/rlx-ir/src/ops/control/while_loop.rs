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

impl WhileLoop {
    /// Forward mode as one loop: the carry and its tangent travel stacked (`[2, ..]`) through a
    /// `while_loop` whose cond reads the carry half and whose body is the body's JVP, so the trip
    /// count stays data-dependent and nothing is unrolled. Consts with tangents pass theirs in as
    /// further consts (they do not change across trips).
    pub(super) fn jvp_loop(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        t: &[Option<NodeId>],
        out: NodeId,
        tx: &dyn super::Transforms,
    ) -> Result<NodeId> {
        let err =
            |reason: String| crate::Error::Transform { transform: "jvp", op: "while_loop".into(), node: out.0, reason };
        let carry = g.shape(ins[0]).cloned().ok_or_else(|| err("the carry has no shape".into()))?;
        if !carry.dtype.is_float() {
            return Err(err(format!("the carry is {carry}: an integer carry has no tangent")));
        }
        let d = dims(g, ins[0]);
        let kt: Vec<usize> = (1..ins.len()).filter(|&i| t[i].is_some() && g.dtype(ins[i]).is_float()).collect();
        let mut wrt = vec![0];
        wrt.extend(&kt);
        // The JVP body: inputs [c, consts.., tc, tk..], outputs [c', tc'].
        let j = tx.jvp(&self.body, &wrt)?;
        let mut pair_dims = vec![2];
        pair_dims.extend(&d);
        let pair = Shape::new(&pair_dims, carry.dtype);
        let const_shapes: Vec<Shape> =
            ins[1..].iter().map(|&k| g.shape(k).cloned().expect("an input's shape")).collect();
        let tk_shapes: Vec<Shape> = kt.iter().map(|&i| const_shapes[i - 1].clone()).collect();
        // Inputs of both new bodies: [pair, consts.., tk..].
        let open = |name: &str| -> (Graph, NodeId, NodeId, Vec<NodeId>, Vec<NodeId>) {
            let mut b = Graph::new(name);
            let p = b.input("pair", pair.clone());
            let ks: Vec<NodeId> =
                const_shapes.iter().enumerate().map(|(i, s)| b.input(&format!("k{i}"), s.clone())).collect();
            let tks: Vec<NodeId> =
                tk_shapes.iter().enumerate().map(|(i, s)| b.input(&format!("tk{i}"), s.clone())).collect();
            let c = b.slice_axis(p, 0, 0, 1);
            let c = b.reshape(c, &d);
            let tc = b.slice_axis(p, 0, 1, 2);
            let tc = b.reshape(tc, &d);
            (b, c, tc, ks, tks)
        };
        let (mut cg, c, _tc, ks, _tks) = open("while_jvp_cond");
        let mut args = vec![c];
        args.extend(&ks);
        let go = inline(&mut cg, &self.cond, &args).ok_or_else(|| err("the cond body does not inline".into()))?;
        cg.set_outputs(vec![go[0]]);
        let (mut bg, c, tc, ks, tks) = open("while_jvp_body");
        let mut args = vec![c];
        args.extend(&ks);
        args.push(tc);
        args.extend(&tks);
        let o = inline(&mut bg, &j, &args).ok_or_else(|| err("the JVP body does not inline".into()))?;
        let mut one = vec![1];
        one.extend(&d);
        let (c1, t1) = (bg.reshape(o[0], &one), bg.reshape(o[1], &one));
        let next = bg.concat(&[c1, t1], 0);
        bg.set_outputs(vec![next]);
        let t0 = crate::ops::rules::or_zeros(g, t[0], ins[0]);
        let (c0, t0) = (g.reshape(ins[0], &one), g.reshape(t0, &one));
        let p0 = g.concat(&[c0, t0], 0);
        let mut consts = ins[1..].to_vec();
        consts.extend(kt.iter().map(|&i| t[i].expect("a tangent")));
        let mut loop_ins = vec![p0];
        loop_ins.extend(consts);
        let w = WhileLoop { cond: Box::new(cg), body: Box::new(bg), max_trips: self.max_trips };
        let p = g.try_add(w, &loop_ins)?;
        let tan = g.slice_axis(p, 0, 1, 2);
        Ok(g.reshape(tan, &d))
    }
}

impl WhileLoop {
    /// Batching as one loop, as JAX does: the carry gains the batch axis (broadcast when only
    /// consts are batched), the loop runs while any element's condition holds, and elements
    /// whose condition has failed keep their carry (a select per trip).
    pub(super) fn batch_loop(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        batched: &[bool],
        size: usize,
        tx: &dyn super::Transforms,
    ) -> Result<NodeId> {
        let wrt: Vec<usize> = (0..ins.len()).filter(|&i| i == 0 || batched[i]).collect();
        let vcond = super::inputs_as(&tx.vmap(&self.cond, &wrt, size)?, &self.cond);
        let vbody = super::inputs_as(&tx.vmap(&self.body, &wrt, size)?, &self.body);
        let mut args = vec![if batched[0] { ins[0] } else { crate::ops::rules::add_batch(g, ins[0], size) }];
        args.extend_from_slice(&ins[1..]);
        let shapes: Vec<Shape> = args.iter().map(|&x| g.shape(x).cloned().expect("an operand's shape")).collect();
        let open = |name: &str| -> (Graph, Vec<NodeId>) {
            let mut b = Graph::new(name);
            let xs = shapes.iter().enumerate().map(|(i, s)| b.input(&format!("a{i}"), s.clone())).collect();
            (b, xs)
        };
        let err = |what: &str| crate::Error::Transform {
            transform: "vmap",
            op: "while_loop".into(),
            node: ins[0].0,
            reason: format!("the batched {what} does not inline"),
        };
        // cond: any element still running.
        let (mut c, xs) = open("while_vmap_cond");
        let go = inline(&mut c, &vcond, &xs).ok_or_else(|| err("cond"))?[0];
        let go = c.cast(go, DType::F32);
        let any = c.max(go, &[0], false);
        let zero = c.scalar(0.0, DType::F32);
        let any = c.gt(any, zero);
        c.set_outputs(vec![any]);
        // body: step the running elements, keep the others.
        let (mut b, xs) = open("while_vmap_body");
        let go = inline(&mut b, &vcond, &xs).ok_or_else(|| err("cond"))?[0];
        let next = inline(&mut b, &vbody, &xs).ok_or_else(|| err("body"))?[0];
        let mut keep = vec![size];
        keep.resize(shapes[0].rank(), 1);
        let go = b.reshape(go, &keep);
        let out = b.where_(go, next, xs[0]);
        b.set_outputs(vec![out]);
        g.try_add(WhileLoop { cond: Box::new(c), body: Box::new(b), max_trips: self.max_trips }, &args)
    }
}
