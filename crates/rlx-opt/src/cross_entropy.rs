//! The softmax cross-entropy pattern: `sum(log_softmax(x) * onehot(labels), last axis)` (the
//! log-probabilities also as `log(softmax(x))`, the one-hot as `cast(labels[..., None] == iota)`
//! or `where(.., 1, 0)`, in either operand order) becomes `-softmax_cross_entropy(x, labels)`,
//! one pass per row whose gradient is the closed form. Matched by structure on ops, so graphs
//! built by hand are caught as well as `rlx_nn::loss::cross_entropy`'s older form.

use crate::engine::{Rewriter, Rule, RuleSet};
use rlx_ir::ops::{BinaryKind, CompareKind, ReduceKind, SoftmaxCrossEntropy, UnaryKind};
use rlx_ir::{Data, NodeId, Op, Shape};

/// The pattern. It runs before legalization, and only for backends that run
/// `softmax_cross_entropy` natively (the pipeline checks); it replaces a reduction with two
/// nodes (the loss and its negation) and lets the rest die, so it is marked `may_grow`.
pub const SOFTMAX_CROSS_ENTROPY: RuleSet = RuleSet {
    name: "softmax-cross-entropy",
    may_grow: true,
    rules: &[
        Rule { name: "softmax-cross-entropy", apply: softmax_cross_entropy },
        Rule { name: "neg-reduce-neg", apply: neg_reduce_neg },
    ],
};

/// `-sum(-x)` and `-mean(-x)` are `sum(x)` and `mean(x)` exactly (rounding is symmetric): the
/// mean of negated losses that the pattern leaves in `-mean(sum(log_probs * onehot))`.
fn neg_reduce_neg(rw: &mut Rewriter, op: &Op, ins: &[NodeId], _ty: &Shape) -> Option<NodeId> {
    let Op::Unary(u) = op else { return None };
    let Op::Reduce(r) = rw.op(ins[0]) else { return None };
    if u.kind != UnaryKind::Neg || !matches!(r.kind, ReduceKind::Sum | ReduceKind::Mean) || rw.source_users(ins[0]) > 1
    {
        return None;
    }
    let (r, inner) = (r.clone(), rw.node(ins[0]).inputs[0]);
    let Op::Unary(n) = rw.op(inner) else { return None };
    if n.kind != UnaryKind::Neg || rw.source_users(inner) > 1 {
        return None;
    }
    let x = rw.node(inner).inputs[0];
    rw.add(r, &[x]).ok()
}

/// Whether `axis` names the last of `rank` axes.
fn is_last(axis: i64, rank: usize) -> bool {
    axis == -1 || axis == rank as i64 - 1
}

/// The logits behind log-probabilities over the last axis: `log_softmax(x)` or `log(softmax(x))`.
fn log_probs_of(rw: &Rewriter, lp: NodeId) -> Option<NodeId> {
    let rank = rw.ty(lp).rank();
    match rw.op(lp) {
        Op::LogSoftmax(s) if is_last(s.axis, rank) => Some(rw.node(lp).inputs[0]),
        Op::Unary(u) if u.kind == UnaryKind::Log => {
            let p = rw.node(lp).inputs[0];
            let Op::Softmax(s) = rw.op(p) else { return None };
            (is_last(s.axis, rank) && rw.source_users(p) == 1).then(|| rw.node(p).inputs[0])
        }
        _ => None,
    }
}

/// A float scalar constant's value.
fn splat(rw: &Rewriter, x: NodeId) -> Option<f64> {
    if rw.ty(x).numel() != Some(1) {
        return None;
    }
    match rw.op(x) {
        Op::Full(f) => Some(f.value),
        Op::Constant(c) => match &c.value.data {
            Data::F(d) => d.first().copied(),
            _ => None,
        },
        _ => None,
    }
}

/// Whether `x` is the `[c]` sequence `0, 1, .., c - 1` (an arange or a constant).
fn is_iota(rw: &Rewriter, x: NodeId, c: usize) -> bool {
    let t = rw.ty(x);
    if t.fixed_dims().as_deref() != Some(&[c][..]) {
        return false;
    }
    match rw.op(x) {
        Op::Arange(a) => a.start == 0.0 && a.step == 1.0 && a.n == c,
        Op::Constant(k) => k.value.to_f64_vec().is_ok_and(|v| v.iter().enumerate().all(|(i, &x)| x == i as f64)),
        _ => false,
    }
}

/// The integer labels `[...]` behind `labels[..., None]` (an expand_dims or a reshape).
fn labels_of(rw: &Rewriter, l: NodeId, lead: &[rlx_ir::Dim]) -> Option<NodeId> {
    if !matches!(rw.op(l), Op::ExpandDims(_) | Op::Reshape(_)) {
        return None;
    }
    let y = rw.node(l).inputs[0];
    let (yt, lt) = (rw.ty(y), rw.ty(l));
    let appended = lt.dims.len() == yt.dims.len() + 1 && lt.dims[..yt.dims.len()] == yt.dims[..];
    (yt.dtype.is_int() && appended && yt.dims[..] == lead[..] && lt.dims.last()?.fixed() == Some(1)).then_some(y)
}

/// The labels of a float one-hot over the last axis of `like` (logits type).
fn one_hot_of(rw: &Rewriter, oh: NodeId, like: &Shape) -> Option<NodeId> {
    let c = like.dims.last()?.fixed()?;
    let lead = &like.dims[..like.dims.len() - 1];
    let hit = match rw.op(oh) {
        Op::Cast(_) => rw.node(oh).inputs[0],
        Op::Where(_) => {
            let ins = &rw.node(oh).inputs;
            let (one, zero) = (splat(rw, ins[1])?, splat(rw, ins[2])?);
            if one != 1.0 || zero != 0.0 {
                return None;
            }
            ins[0]
        }
        _ => return None,
    };
    let Op::Compare(cmp) = rw.op(hit) else { return None };
    if cmp.kind != CompareKind::Eq {
        return None;
    }
    let ins = &rw.node(hit).inputs;
    for (l, iota) in [(ins[0], ins[1]), (ins[1], ins[0])] {
        if is_iota(rw, iota, c)
            && let Some(y) = labels_of(rw, l, lead)
        {
            return Some(y);
        }
    }
    None
}

fn softmax_cross_entropy(rw: &mut Rewriter, op: &Op, ins: &[NodeId], ty: &Shape) -> Option<NodeId> {
    let Op::Reduce(r) = op else { return None };
    let prod = ins[0];
    let rank = rw.ty(prod).rank();
    if r.kind != ReduceKind::Sum || r.keep_dims || r.axes.len() != 1 || !is_last(r.axes[0], rank) {
        return None;
    }
    let Op::Binary(b) = rw.op(prod) else { return None };
    if b.kind != BinaryKind::Mul || rw.source_users(prod) > 1 {
        return None;
    }
    let (a, c) = (rw.node(prod).inputs[0], rw.node(prod).inputs[1]);
    for (lp, oh) in [(a, c), (c, a)] {
        // Log-probabilities read elsewhere (a backward pass) are computed anyway.
        if rw.ty(lp) != rw.ty(prod) || rw.ty(oh) != rw.ty(prod) || rw.source_users(lp) > 1 {
            continue;
        }
        let Some(x) = log_probs_of(rw, lp) else { continue };
        let Some(y) = one_hot_of(rw, oh, rw.ty(x)) else { continue };
        let loss = rw.add(SoftmaxCrossEntropy {}, &[x, y]).ok()?;
        let neg = rw.add(rlx_ir::ops::Unary { kind: UnaryKind::Neg }, &[loss]).ok()?;
        return (rw.ty(neg) == ty).then_some(neg);
    }
    None
}

/// Whether the backend runs an f32 `softmax_cross_entropy` with i32 labels natively (then the
/// pattern is worth forming; elsewhere it would only be decomposed again).
pub fn supports_cross_entropy(backend: &dyn rlx_driver::Backend) -> bool {
    let x = Shape::new(&[2, 4], rlx_ir::DType::F32);
    let y = Shape::new(&[2], rlx_ir::DType::I32);
    let ty = Shape::new(&[2], rlx_ir::DType::F32);
    backend.supports_op(SoftmaxCrossEntropy {}.into(), ty, &[&x, &y])
}
