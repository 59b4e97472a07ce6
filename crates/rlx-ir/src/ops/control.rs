//! Ops that hold graphs: a custom function with its own derivative rules (`custom_fn`, as
//! `jax.custom_vjp` / `custom_jvp`) and control flow (`cond`, `scan`, `while_loop`).
//!
//! A body is a `Graph` whose inputs (in creation order) are the op's operands and which has no
//! params. The reference interpreter runs bodies as written (the branch taken, the real loop);
//! `decompose` inlines them (both branches and a select, or an unrolled loop), which is how
//! backends run them and how transforms differentiate and batch them.

use crate::ops::rules::{self, dims};
use crate::ops::util::rand_f64;
use crate::{DType, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, interp, op::Arity};
use serde::{Deserialize, Serialize};

/// Input types of a body, checking that it has no params.
fn body_inputs(body: &Graph, what: &str) -> std::result::Result<Vec<Shape>, String> {
    if !body.params().is_empty() {
        return Err(format!("the {what} body has params; pass them as operands instead"));
    }
    Ok(body.inputs().iter().map(|(id, _)| body.shape(*id).cloned().unwrap_or(Shape::scalar(DType::F32))).collect())
}

/// Checks that `body` takes exactly `want` and has `outs` outputs; returns its output types.
fn check_body(body: &Graph, what: &str, want: &[&Shape], outs: usize) -> std::result::Result<Vec<Shape>, String> {
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
fn run_body(op: &str, body: &Graph, args: &[&HostTensor]) -> Result<Vec<HostTensor>> {
    let names: Vec<String> = body.inputs().iter().map(|(_, n)| n.to_string()).collect();
    let feeds: Vec<(&str, HostTensor)> =
        names.iter().map(|n| n.as_str()).zip(args.iter().map(|t| (*t).clone())).collect();
    interp::evaluate(body, &feeds).map_err(|e| Error::eval(op, format!("in its body: {e}")))
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

/// Which result of a scan a node is (one output per node, as for top_k).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScanOutput {
    /// The final carry.
    Carry,
    /// The per-step outputs, stacked on a new leading axis.
    Ys,
}

/// `jax.lax.scan` with one carry and one sequence: `body(carry, x_t, consts...) -> (carry, y_t)`
/// for each `x_t` along the leading axis of `xs` (inputs: `[init, xs, consts...]`; the consts are
/// what the body closes over, such as weights).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scan {
    /// The step function: inputs (carry, x_t, consts...), outputs (new carry, y_t).
    pub body: Box<Graph>,
    /// Which result this node gives.
    pub output: ScanOutput,
}

impl OpDef for Scan {
    fn name(&self) -> &'static str {
        "scan"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(2)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let xs = ins[1].dims_fixed()?;
        let Some((&len, rest)) = xs.split_first() else {
            return Err("xs needs a leading (time) axis".into());
        };
        let x_t = Shape::new(rest, ins[1].dtype);
        let mut want = vec![ins[0], &x_t];
        want.extend_from_slice(&ins[2..]);
        let outs = check_body(&self.body, "scan", &want, 2)?;
        if &outs[0] != ins[0] {
            return Err(format!("the body's carry output is {}, the carry is {}", outs[0], ins[0]));
        }
        Ok(match self.output {
            ScanOutput::Carry => outs[0].clone(),
            ScanOutput::Ys => {
                let mut d = vec![len];
                d.extend(outs[1].dims_fixed()?);
                Shape::new(&d, outs[1].dtype)
            }
        })
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let xs = ins[1];
        let d = xs.dims();
        let step: usize = d[1..].iter().product();
        let mut carry = ins[0].clone();
        let mut ys = vec![];
        for t in 0..d[0] {
            let idx: Vec<usize> = (t * step..(t + 1) * step).collect();
            let x_t = HostTensor::new(Shape::new(&d[1..], xs.dtype()), xs.data.gather(&idx))?;
            let mut args = vec![&carry, &x_t];
            args.extend_from_slice(&ins[2..]);
            let mut r = run_body("scan", &self.body, &args)?;
            ys.push(r.remove(1));
            carry = r.remove(0);
        }
        match self.output {
            ScanOutput::Carry => Ok(carry),
            ScanOutput::Ys => {
                let parts: Vec<&crate::Data> = ys.iter().map(|y| &y.data).collect();
                let data = crate::Data::concat(&parts).unwrap_or_else(|| crate::Data::zeros(out.dtype, 0));
                HostTensor::new(out.clone(), data)
            }
        }
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        let d = dims(g, ins[1]);
        let mut carry = ins[0];
        let mut ys = vec![];
        for t in 0..d[0] {
            let x = g.slice_axis(ins[1], 0, t, t + 1);
            let x = g.reshape(x, &d[1..]);
            let mut args = vec![carry, x];
            args.extend_from_slice(&ins[2..]);
            let r = inline(g, &self.body, &args)?;
            carry = r[0];
            ys.push(g.expand_dims(r[1], 0));
        }
        match self.output {
            ScanOutput::Carry => Some(carry),
            ScanOutput::Ys if ys.is_empty() => None,
            ScanOutput::Ys => Some(g.concat(&ys, 0)),
        }
    }
    fn samples() -> Vec<Sample> {
        let h0 = HostTensor::from_f64(&[3], DType::F64, &rand_f64(3, -1.0, 1.0, 84)).expect("sample");
        let xs = HostTensor::from_f64(&[4, 3], DType::F64, &rand_f64(12, -1.0, 1.0, 85)).expect("sample");
        let w = HostTensor::from_f64(&[3], DType::F64, &rand_f64(3, -1.0, 1.0, 86)).expect("sample");
        [ScanOutput::Carry, ScanOutput::Ys]
            .into_iter()
            .map(|o| {
                let ins = vec![h0.clone(), xs.clone(), w.clone()];
                Sample::new(format!("scan/{o:?}"), scan_sample(DType::F64, o), ins)
            })
            .collect()
    }
}

fn scan_sample(dt: DType, output: ScanOutput) -> Scan {
    let s = Shape::new(&[3], dt);
    let mut b = Graph::new("step");
    let (h, x, w) = (b.input("h", s.clone()), b.input("x", s.clone()), b.input("w", s));
    let a = b.mul(h, w);
    let a = b.add(a, x);
    let hn = b.tanh(a);
    let y = b.square(hn);
    b.set_outputs(vec![hn, y]);
    Scan { body: Box::new(b), output }
}

/// `while cond(carry, consts...) { carry = body(carry, consts...) }`, at most `max_trips` times
/// (then it stops). Inputs: `[init, consts...]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhileLoop {
    /// (carry, consts...) -> bool scalar.
    pub cond: Box<Graph>,
    /// (carry, consts...) -> carry.
    pub body: Box<Graph>,
    /// The most iterations run; the decomposition unrolls this many masked steps.
    pub max_trips: usize,
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
        let body = Box::new(body);
        let mut ins = vec![init, xs];
        ins.extend_from_slice(consts);
        let c = self.add_node(Scan { body: body.clone(), output: ScanOutput::Carry }, &ins);
        let y = self.add_node(Scan { body, output: ScanOutput::Ys }, &ins);
        (c, y)
    }
    /// `while cond(x, consts..) { x = body(x, consts..) }`, at most `max_trips` iterations.
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
