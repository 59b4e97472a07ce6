//! Helpers for the transform rules on ops (jvp, vjp, batch): a `Scalar` that builds graph nodes,
//! so the derivative expressions of the elementwise tables build JVP/VJP graphs too, and shape
//! helpers (sum back to a broadcast input's shape, zeros, moving a batch axis).

use crate::{Graph, NodeId, Op, Scalar, Shape};
use std::cell::RefCell;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// A graph node as a `Scalar`: arithmetic on it appends nodes to the shared graph.
#[derive(Clone, Copy)]
pub struct Sym<'a> {
    g: &'a RefCell<Graph>,
    /// The node this value is.
    pub id: NodeId,
}

impl<'a> Sym<'a> {
    /// Wraps node `id` of the graph in `g`.
    pub fn new(g: &'a RefCell<Graph>, id: NodeId) -> Self {
        Sym { g, id }
    }
    fn un(self, f: impl FnOnce(&mut Graph, NodeId) -> NodeId) -> Self {
        let id = f(&mut self.g.borrow_mut(), self.id);
        Sym { g: self.g, id }
    }
    fn bin(self, o: Self, f: impl FnOnce(&mut Graph, NodeId, NodeId) -> NodeId) -> Self {
        let id = f(&mut self.g.borrow_mut(), self.id, o.id);
        Sym { g: self.g, id }
    }
}

/// Runs `f` with the graph behind a `RefCell`, so `Sym` values can share it.
pub fn with_sym<R>(g: &mut Graph, f: impl FnOnce(&RefCell<Graph>) -> R) -> R {
    let cell = RefCell::new(std::mem::replace(g, Graph::new(String::new())));
    let r = f(&cell);
    *g = cell.into_inner();
    r
}

/// True when `id` is a constant whose every element equals `v`.
pub fn is_const(g: &Graph, id: NodeId, v: f64) -> bool {
    match g.node(id).map(|n| &n.op) {
        Some(Op::Constant(c)) => c.value.to_f64_vec().is_ok_and(|x| x.iter().all(|&e| e == v)),
        Some(Op::Full(f)) => f.value == v,
        _ => false,
    }
}

/// `a * b`, skipping multiplication by a constant one when the shapes allow.
pub fn mul(g: &mut Graph, a: NodeId, b: NodeId) -> NodeId {
    let same = |x: NodeId, y: NodeId| g.shape(x).zip(g.shape(y)).is_some_and(|(p, q)| p.dims.len() >= q.dims.len());
    if is_const(g, b, 1.0) && same(a, b) {
        return a;
    }
    if is_const(g, a, 1.0) && same(b, a) {
        return b;
    }
    g.mul(a, b)
}

impl Add for Sym<'_> {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        self.bin(o, |g, a, b| g.add(a, b))
    }
}
impl Sub for Sym<'_> {
    type Output = Self;
    fn sub(self, o: Self) -> Self {
        self.bin(o, |g, a, b| g.sub(a, b))
    }
}
impl Mul for Sym<'_> {
    type Output = Self;
    fn mul(self, o: Self) -> Self {
        self.bin(o, mul)
    }
}
impl Div for Sym<'_> {
    type Output = Self;
    fn div(self, o: Self) -> Self {
        self.bin(o, |g, a, b| g.div(a, b))
    }
}
impl Neg for Sym<'_> {
    type Output = Self;
    fn neg(self) -> Self {
        self.un(|g, a| g.neg(a))
    }
}

impl Scalar for Sym<'_> {
    fn c(self, v: f64) -> Self {
        self.un(|g, a| {
            let dt = g.dtype(a);
            g.scalar(v, dt)
        })
    }
    fn exp(self) -> Self {
        self.un(Graph::exp)
    }
    fn ln(self) -> Self {
        self.un(Graph::log)
    }
    fn sqrt(self) -> Self {
        self.un(Graph::sqrt)
    }
    fn sin(self) -> Self {
        self.un(Graph::sin)
    }
    fn cos(self) -> Self {
        self.un(Graph::cos)
    }
    fn tanh(self) -> Self {
        self.un(Graph::tanh)
    }
    fn erf(self) -> Self {
        self.un(Graph::erf)
    }
    fn abs(self) -> Self {
        self.un(Graph::abs)
    }
    fn floor(self) -> Self {
        self.un(Graph::floor)
    }
    fn round(self) -> Self {
        self.un(Graph::round)
    }
    fn max(self, o: Self) -> Self {
        self.bin(o, Graph::maximum)
    }
    fn min(self, o: Self) -> Self {
        self.bin(o, Graph::minimum)
    }
    fn pow(self, o: Self) -> Self {
        self.bin(o, Graph::pow)
    }
    fn sign(self) -> Self {
        self.un(Graph::sign)
    }
}

/// Static dims of a node (empty for an invalid id; the error is recorded by the op using it).
pub fn dims(g: &Graph, id: NodeId) -> Vec<usize> {
    g.shape(id).and_then(Shape::fixed_dims).unwrap_or_default()
}

/// Zeros shaped like node `like`.
pub fn zeros_like(g: &mut Graph, like: NodeId) -> NodeId {
    let s = g.shape(like).cloned().unwrap_or(Shape::scalar(crate::DType::F32));
    g.full(s, 0.0)
}

/// The given tangent, or zeros shaped like `like`.
pub fn or_zeros(g: &mut Graph, t: Option<NodeId>, like: NodeId) -> NodeId {
    t.unwrap_or_else(|| zeros_like(g, like))
}

/// Sums `x` (broadcast from `target` dims, numpy style) back down to `target` dims.
pub fn sum_to(g: &mut Graph, x: NodeId, target: &[usize]) -> NodeId {
    let xd = dims(g, x);
    if xd == target {
        return x;
    }
    let lead = xd.len().saturating_sub(target.len());
    let mut axes: Vec<i64> = (0..lead as i64).collect();
    for (i, &t) in target.iter().enumerate() {
        if t == 1 && xd.get(lead + i) != Some(&1) {
            axes.push((lead + i) as i64);
        }
    }
    let s = if axes.is_empty() { x } else { g.sum(x, &axes, false) };
    if dims(g, s) == target { s } else { g.reshape(s, target) }
}

/// Broadcasts `x` to `target` dims unless it already has them.
pub fn broadcast_to(g: &mut Graph, x: NodeId, target: &[usize]) -> NodeId {
    if dims(g, x) == target { x } else { g.broadcast_to(x, target) }
}

/// Swaps the last two axes.
pub fn swap_last(g: &mut Graph, x: NodeId) -> NodeId {
    let r = dims(g, x).len();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    g.transpose(x, &perm)
}

/// A batched node `[B, xs..]` reshaped to `[B, 1.., xs..]` with `rank` per-example axes, so it
/// broadcasts numpy-style against unbatched inputs of per-example rank up to `rank`.
pub fn lift(g: &mut Graph, x: NodeId, rank: usize) -> NodeId {
    let d = dims(g, x);
    if d.len() > rank {
        return x;
    }
    let mut nd = vec![d[0]];
    nd.extend(std::iter::repeat_n(1, rank + 1 - d.len()));
    nd.extend_from_slice(&d[1..]);
    g.reshape(x, &nd)
}

/// Gives an unbatched node a leading batch axis of `size`.
pub fn add_batch(g: &mut Graph, x: NodeId, size: usize) -> NodeId {
    let mut d = vec![size];
    d.extend(dims(g, x));
    g.broadcast_to(x, &d)
}

/// Applies `f` to a batched node with its batch axis merged into axis 1 (`[B, n, ..] -> [B*n, ..]`),
/// then splits it out again: the batch rule of ops that already have a leading batch axis.
pub fn merged(g: &mut Graph, xs: &[NodeId], f: impl FnOnce(&mut Graph, &[NodeId]) -> NodeId) -> Option<NodeId> {
    let mut flat = vec![];
    let mut b = 0;
    for &x in xs {
        let d = dims(g, x);
        if d.len() < 2 {
            return None;
        }
        b = d[0];
        let mut nd = vec![d[0] * d[1]];
        nd.extend_from_slice(&d[2..]);
        flat.push(g.reshape(x, &nd));
    }
    let y = f(g, &flat);
    let yd = dims(g, y);
    if yd.is_empty() || b == 0 {
        return None;
    }
    let mut od = vec![b, yd[0] / b];
    od.extend_from_slice(&yd[1..]);
    Some(g.reshape(y, &od))
}

/// The batch rule of ops whose first input has a leading batch axis and whose other inputs are
/// shared (conv2d, pools, rope): fold the vmap axis into that batch axis. None when another input
/// is batched.
pub fn batch_first_input(op: impl Into<crate::Op>, g: &mut Graph, ins: &[NodeId], batched: &[bool]) -> Option<NodeId> {
    if batched[1..].iter().any(|&b| b) {
        return None;
    }
    let rest = ins[1..].to_vec();
    let op = op.into();
    merged(g, &ins[..1], move |g, x| {
        let mut all = vec![x[0]];
        all.extend(rest);
        g.add_node(op, &all)
    })
}

/// Normalizes a possibly negative axis against a per-example rank and shifts it past the batch axis.
pub fn shift_axis(axis: i64, rank: usize) -> i64 {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    a + 1
}

/// The batch rule of elementwise (broadcasting) ops: lift batched inputs to the output rank and
/// apply the op unchanged.
pub fn elementwise_batch(g: &mut Graph, op: Op, ins: &[NodeId], batched: &[bool]) -> Option<NodeId> {
    let rank = ins.iter().zip(batched).map(|(&x, &b)| dims(g, x).len() - usize::from(b)).max()?;
    let lifted: Vec<NodeId> = ins.iter().zip(batched).map(|(&x, &b)| if b { lift(g, x, rank) } else { x }).collect();
    g.try_add(op, &lifted).ok()
}
