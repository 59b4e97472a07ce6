//! Ops that hold graphs: a custom function with its own derivative rules (`custom_fn`, as
//! `jax.custom_vjp` / `custom_jvp`), control flow (`cond`, `scan`, `while_loop`, and
//! `fori_loop`, a scan over its index) and `associative_scan` (a combine function as a body).
//!
//! A body is a `Graph` whose inputs (in creation order) are the op's operands and which has no
//! params. The reference interpreter runs bodies as written (the branch taken, the real loop).
//! Backends whose kernel table has the control-flow ops (the CPU's) compile each body once and
//! run it per trip or per branch; for the others `decompose` inlines the bodies (both branches and
//! a select, or an unrolled loop). The transforms differentiate a `scan` as a scan (`ad.rs`: its
//! JVP is a forward scan, its VJP a reverse scan over the saved carries, or with `Scan::checkpoint`
//! over segments recomputed from every `k`-th carry: `ckpt.rs`), so a differentiated loop keeps a
//! node count independent of its trip count; `while_loop` is forward-mode only.

mod ad;
mod assoc_scan;
mod ckpt;
mod cond;
mod scan;
mod while_loop;

/// Defaults the loop ops' serde attributes leave out of the text form.
mod serde_defaults {
    pub(super) fn one() -> usize {
        1
    }
    pub(super) fn is_one(n: &usize) -> bool {
        *n == 1
    }
    pub(super) fn is_zero(n: &usize) -> bool {
        *n == 0
    }
    pub(super) fn is_false(b: &bool) -> bool {
        !*b
    }
}

pub use ad::{NestedRules, Transforms};
pub use assoc_scan::{AssociativeScan, combine_lengths, linear_recurrence_body};
pub use ckpt::{checkpoint_scans, sqrt_segments};
pub use cond::Cond;
pub use scan::{Scan, ScanOutput};
pub use while_loop::WhileLoop;

use crate::ops::rules;
use crate::ops::util::rand_f64;
use crate::{DType, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, interp, op::Arity};
use serde::{Deserialize, Serialize};

/// Input types of a body, checking that it has no params.
pub(crate) fn body_inputs(body: &Graph, what: &str) -> std::result::Result<Vec<Shape>, String> {
    if !body.params().is_empty() {
        return Err(format!("the {what} body has params; pass them as operands instead"));
    }
    Ok(body.inputs().iter().map(|(id, _)| body.shape(*id).cloned().unwrap_or(Shape::scalar(DType::F32))).collect())
}

/// Checks that `body` takes exactly `want` and has `outs` outputs; returns its output types.
pub(crate) fn check_body(
    body: &Graph,
    what: &str,
    want: &[&Shape],
    outs: usize,
) -> std::result::Result<Vec<Shape>, String> {
    body.verify().map_err(|e| format!("the {what} body is invalid: {e}"))?;
    let got = body_inputs(body, what)?;
    if got.len() != want.len() || got.iter().zip(want).any(|(a, b)| a != *b) {
        let w: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        let g: Vec<String> = got.iter().map(|s| s.to_string()).collect();
        return Err(format!("the {what} body takes [{}], the op gives [{}]", g.join(", "), w.join(", ")));
    }
    if body.outputs().len() != outs {
        return Err(format!("the {what} body must have {outs} outputs, it has {}", body.outputs().len()));
    }
    Ok(body.outputs().iter().map(|o| body.shape(*o).cloned().unwrap_or(Shape::scalar(DType::F32))).collect())
}

/// Runs a body on host tensors.
pub(crate) fn run_body(op: &str, body: &Graph, args: &[&HostTensor]) -> Result<Vec<HostTensor>> {
    let names: Vec<String> = body.inputs().iter().map(|(_, n)| n.to_string()).collect();
    let feeds: Vec<(&str, HostTensor)> =
        names.iter().map(|n| n.as_str()).zip(args.iter().map(|t| (*t).clone())).collect();
    interp::evaluate(body, &feeds).map_err(|e| Error::eval(op, format!("in its body: {e}")))
}

/// `g` with its inputs in `like`'s order, matched by name (vmap may reorder them).
pub(crate) fn inputs_as(g: &Graph, like: &Graph) -> Graph {
    let names: Vec<&str> = like.inputs().iter().map(|&(_, n)| n).collect();
    let have: Vec<&str> = g.inputs().iter().map(|&(_, n)| n).collect();
    let order: Vec<usize> = names.iter().filter_map(|n| have.iter().position(|m| m == n)).collect();
    ad::reorder_inputs(g, &order)
}

/// `body` without the nodes no output needs (run per trip, dead code costs every trip). Inputs
/// stay, dead or not: a body's operands are positional.
pub fn prune(body: &Graph) -> Graph {
    let mut live = vec![false; body.len()];
    for o in body.outputs() {
        live[o.index()] = true;
    }
    for (i, n) in body.nodes().iter().enumerate().rev() {
        if live[i] {
            for x in &n.inputs {
                live[x.index()] = true;
            }
        }
    }
    let mut out = Graph::new(body.name());
    let mut map: Vec<Option<NodeId>> = vec![None; body.len()];
    for (i, n) in body.nodes().iter().enumerate() {
        if live[i] || matches!(n.op, crate::Op::Input(_)) {
            let ins: Vec<NodeId> = n.inputs.iter().filter_map(|x| map[x.index()]).collect();
            map[i] = Some(out.add_node(n.op.clone(), &ins));
        }
    }
    out.set_outputs(body.outputs().iter().filter_map(|o| map[o.index()]).collect());
    out
}

/// Copies `body` into `g` with its inputs bound to `args`; returns the body's outputs in `g`.
pub fn inline(g: &mut Graph, body: &Graph, args: &[NodeId]) -> Option<Vec<NodeId>> {
    let mut map = Vec::with_capacity(body.len());
    let mut next_arg = 0;
    for n in body.nodes() {
        let id = match &n.op {
            crate::Op::Input(_) => {
                next_arg += 1;
                *args.get(next_arg - 1)?
            }
            crate::Op::Param(_) => return None,
            op => {
                let ins: Vec<NodeId> = n.inputs.iter().map(|x| map[x.index()]).collect();
                g.add_node(op.clone(), &ins)
            }
        };
        map.push(id);
    }
    Some(body.outputs().iter().map(|o| map[o.index()]).collect())
}

/// A user function with optional derivative rules: `body` maps the operands to one output;
/// `jvp_body` maps `(primals..., tangents...)` to the output tangent; `vjp_body` maps
/// `(primals..., cotangent)` to one cotangent per operand. Without a rule, transforms
/// differentiate `body` itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomFn {
    /// A name for reports.
    pub name: String,
    /// The function.
    pub body: Box<Graph>,
    /// Forward-mode rule.
    pub jvp_body: Option<Box<Graph>>,
    /// Reverse-mode rule.
    pub vjp_body: Option<Box<Graph>>,
}

impl OpDef for CustomFn {
    fn name(&self) -> &'static str {
        "custom_fn"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(0)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let out = check_body(&self.body, &self.name, ins, 1)?.remove(0);
        if let Some(j) = &self.jvp_body {
            let mut want: Vec<&Shape> = ins.to_vec();
            want.extend_from_slice(ins);
            let t = check_body(j, "jvp", &want, 1)?;
            if t[0] != out {
                return Err(format!("the jvp body gives {}, the function gives {out}", t[0]));
            }
        }
        if let Some(v) = &self.vjp_body {
            let mut want: Vec<&Shape> = ins.to_vec();
            want.push(&out);
            let cts = check_body(v, "vjp", &want, ins.len())?;
            if let Some((i, c)) = cts.iter().enumerate().find(|(i, c)| c != &ins[*i]) {
                return Err(format!("the vjp body's output {i} is {c}, operand {i} is {}", ins[i]));
            }
        }
        Ok(out)
    }
    fn reference(&self, ins: &[&HostTensor], _out: &Shape) -> Result<HostTensor> {
        Ok(run_body("custom_fn", &self.body, ins)?.remove(0))
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        inline(g, &self.body, ins)?.first().copied()
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], _out: NodeId) -> Option<NodeId> {
        let body = self.jvp_body.as_ref()?;
        let mut args = ins.to_vec();
        for (k, &x) in ins.iter().enumerate() {
            args.push(rules::or_zeros(g, t[k], x));
        }
        inline(g, body, &args)?.first().copied()
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let body = self.vjp_body.as_ref()?;
        let mut args = ins.to_vec();
        args.push(ct);
        Some(inline(g, body, &args)?.into_iter().map(Some).collect())
    }
    fn samples() -> Vec<Sample> {
        let x = HostTensor::from_f64(&[2, 3], DType::F64, &rand_f64(6, -2.0, 2.0, 81)).expect("sample");
        let y = HostTensor::from_f64(&[3], DType::F64, &rand_f64(3, -2.0, 2.0, 82)).expect("sample");
        vec![Sample::new("custom_fn/f64", custom_sample(DType::F64), vec![x, y])]
    }
}

/// A sample custom function `x * tanh(y)` with hand-written jvp and vjp bodies.
fn custom_sample(dt: DType) -> CustomFn {
    let (sx, sy) = (Shape::new(&[2, 3], dt), Shape::new(&[3], dt));
    let mut f = Graph::new("f");
    let (x, y) = (f.input("x", sx.clone()), f.input("y", sy.clone()));
    let ty = f.tanh(y);
    let o = f.mul(x, ty);
    f.set_outputs(vec![o]);
    let mut j = Graph::new("f_jvp");
    let (x, y) = (j.input("x", sx.clone()), j.input("y", sy.clone()));
    let (tx, tyy) = (j.input("tx", sx.clone()), j.input("ty", sy.clone()));
    let t = j.tanh(y);
    let a = j.mul(tx, t);
    let one = j.scalar(1.0, dt);
    let t2 = j.mul(t, t);
    let d = j.sub(one, t2);
    let b = j.mul(tyy, d);
    let b = j.mul(x, b);
    let o = j.add(a, b);
    j.set_outputs(vec![o]);
    let mut v = Graph::new("f_vjp");
    let (x, y) = (v.input("x", sx), v.input("y", sy));
    let c = v.input("ct", Shape::new(&[2, 3], dt));
    let t = v.tanh(y);
    let dx = v.mul(c, t);
    let one = v.scalar(1.0, dt);
    let t2 = v.mul(t, t);
    let d = v.sub(one, t2);
    let cx = v.mul(c, x);
    let s = v.sum(cx, &[0], false);
    let dy = v.mul(s, d);
    v.set_outputs(vec![dx, dy]);
    CustomFn { name: "x_tanh_y".into(), body: Box::new(f), jvp_body: Some(Box::new(j)), vjp_body: Some(Box::new(v)) }
}

impl Graph {
    /// Applies a custom function (see `CustomFn`) to `args`.
    pub fn custom_fn(&mut self, f: CustomFn, args: &[NodeId]) -> NodeId {
        self.add_node(f, args)
    }
    /// `if pred { then_body(args) } else { else_body(args) }`.
    pub fn cond(&mut self, pred: NodeId, then_body: Graph, else_body: Graph, args: &[NodeId]) -> NodeId {
        let mut ins = vec![pred];
        ins.extend_from_slice(args);
        self.add_node(Cond { then_body: Box::new(then_body), else_body: Box::new(else_body) }, &ins)
    }
    /// `jax.lax.scan(body, init, xs)` where the body also takes `consts` after `(carry, x_t)`:
    /// returns (final carry, stacked per-step outputs).
    pub fn scan(&mut self, body: Graph, init: NodeId, xs: NodeId, consts: &[NodeId]) -> (NodeId, NodeId) {
        let base = Scan::new(body, 1, 1, false);
        let mut ins = vec![init, xs];
        ins.extend_from_slice(consts);
        let c = self.add_node(base.with_output(ScanOutput::Carry, 0), &ins);
        let y = self.add_node(base.with_output(ScanOutput::Ys, 0), &ins);
        (c, y)
    }
    /// The general scan: `body(carries..., x_ts..., consts...) -> (carries..., ys...)` over the
    /// leading axis of every `xs` (all the same length), from the last element to the first when
    /// `reverse` (the stacked outputs keep the elements' order, as `jax.lax.scan(reverse=True)`).
    /// Returns one node per final carry and one per stacked output (one output per node: they
    /// are computed by one loop on backends that run loops).
    pub fn scan_n(
        &mut self,
        body: Graph,
        inits: &[NodeId],
        xs: &[NodeId],
        consts: &[NodeId],
        reverse: bool,
    ) -> (Vec<NodeId>, Vec<NodeId>) {
        let ny = body.outputs().len().saturating_sub(inits.len());
        let base = Scan::new(body, inits.len(), xs.len(), reverse);
        let mut ins = inits.to_vec();
        ins.extend_from_slice(xs);
        ins.extend_from_slice(consts);
        let cs = (0..inits.len()).map(|i| self.add_node(base.with_output(ScanOutput::Carry, i), &ins)).collect();
        let ys = (0..ny).map(|j| self.add_node(base.with_output(ScanOutput::Ys, j), &ins)).collect();
        (cs, ys)
    }
    /// `jax.lax.fori_loop(0, trips, body, init)`: `body(i, carry, consts...) -> carry`, with `i`
    /// an i64 scalar, `trips` times. A scan over `arange(trips)`, so it is differentiable both
    /// ways and runs as one loop.
    pub fn fori_loop(&mut self, trips: usize, body: Graph, init: NodeId, consts: &[NodeId]) -> NodeId {
        // The scan body takes (carry, i, consts...): the user's body with its first two inputs
        // swapped.
        let mut order: Vec<usize> = (0..body.inputs().len()).collect();
        if order.len() >= 2 {
            order.swap(0, 1);
        }
        let wrapped = ad::reorder_inputs(&body, &order);
        let idx = self.arange(0.0, 1.0, trips, DType::I64);
        let (c, _) = self.scan_n(wrapped, &[init], &[idx], consts, false);
        c[0]
    }
    /// `while cond(x, consts..) { x = body(x, consts..) }`. A data-dependent trip count: backends
    /// that run loops (the CPU) run it until `cond` fails; `max_trips` bounds a runaway loop
    /// (the loop stops there, on every backend and in the reference), and backends without
    /// loops unroll that many masked steps (up to `WhileLoop::UNROLL_LIMIT`).
    pub fn while_loop(
        &mut self,
        cond: Graph,
        body: Graph,
        init: NodeId,
        consts: &[NodeId],
        max_trips: usize,
    ) -> NodeId {
        let mut ins = vec![init];
        ins.extend_from_slice(consts);
        self.add_node(WhileLoop { cond: Box::new(cond), body: Box::new(body), max_trips }, &ins)
    }
}
