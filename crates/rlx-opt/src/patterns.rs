//! Named patterns: subgraphs recognized as one op that backends implement natively.
//!
//! `attention`: `softmax(scale * q @ k^T [+ mask | where(mask, ., -inf)]) @ v` on rank-4
//! `[batch, heads, seq, dim]` values becomes one `attention` op (flash-style on the CPU). A
//! constant bool mask that is exactly causal becomes `MaskKind::Causal`; any other mask stays
//! an input (`MaskKind::Custom`). The pattern is left alone when the probabilities have other
//! users (a training graph's backward reads them), since they would be computed twice.

use crate::engine::{Rewriter, Rule, RuleSet};
use rlx_ir::ops::{Attention, BinaryKind, HeadLayout, MaskKind, Transpose};
use rlx_ir::{Data, NodeId, Op};

/// The attention pattern. Runs only before legalization, and only for backends with a native
/// attention kernel (the pipeline checks), so a decomposed attention is never re-formed.
pub const ATTENTION: RuleSet =
    RuleSet { name: "attention", may_grow: false, rules: &[Rule { name: "attention", apply: attention }] };

/// Per-head values in `[batch, seq, heads, dim]` order, as projections reshaped to heads give
/// them, are read in place instead of transposed to heads first (`HeadLayout::Bshd`):
/// `rope(transpose(x))` becomes `transpose(rope(x))`, a norm over the last axis moves before the
/// transpose the same way (Qwen3's q/k norms), and an attention whose q, k and v are all
/// such transposes (`perm [0, 2, 1, 3]`) reads their inputs, its output transposed back (which
/// cancels against the usual transpose to `[batch, seq, heads, dim]`). Only for backends whose
/// kernels honor the layout (the pipeline checks). The rope rule moves a transpose and the
/// attention rule adds one for three, hence `may_grow`.
pub const HEAD_LAYOUT: RuleSet = RuleSet {
    name: "head-layout",
    may_grow: true,
    rules: &[
        Rule { name: "norm-before-transpose", apply: norm_first },
        Rule { name: "rope-bshd", apply: rope_bshd },
        Rule { name: "attention-bshd", apply: attention_bshd },
    ],
};

const SWAP_MIDDLE: [usize; 4] = [0, 2, 1, 3];

/// The input of a transpose that swaps axes 1 and 2 of a rank-4 value.
fn swapped_from(rw: &Rewriter, x: NodeId) -> Option<NodeId> {
    match rw.op(x) {
        Op::Transpose(t) if t.perm == SWAP_MIDDLE => Some(rw.node(x).inputs[0]),
        _ => None,
    }
}

/// `norm(transpose(x))` as `transpose(norm(x))`: rms_norm and layer_norm work on the last axis
/// with per-feature vectors, which the swap leaves in place.
fn norm_first(rw: &mut Rewriter, op: &Op, ins: &[NodeId], _ty: &rlx_ir::Shape) -> Option<NodeId> {
    if !matches!(op, Op::RmsNorm(_) | Op::LayerNorm(_)) {
        return None;
    }
    let mut inner = ins.to_vec();
    inner[0] = swapped_from(rw, ins[0])?;
    let y = rw.add(op.clone(), &inner).ok()?;
    rw.add(Transpose { perm: SWAP_MIDDLE.to_vec() }, &[y]).ok()
}

fn rope_bshd(rw: &mut Rewriter, op: &Op, ins: &[NodeId], _ty: &rlx_ir::Shape) -> Option<NodeId> {
    let Op::Rope(rope) = op else { return None };
    if rope.layout != HeadLayout::Bhsd {
        return None;
    }
    let x = swapped_from(rw, ins[0])?;
    let y = rw.add(rope.clone().with_layout(HeadLayout::Bshd), &[x, ins[1]]).ok()?;
    rw.add(Transpose { perm: SWAP_MIDDLE.to_vec() }, &[y]).ok()
}

fn attention_bshd(rw: &mut Rewriter, op: &Op, ins: &[NodeId], _ty: &rlx_ir::Shape) -> Option<NodeId> {
    let Op::Attention(att) = op else { return None };
    if att.layout != HeadLayout::Bhsd {
        return None;
    }
    let mut inner = ins[..3].iter().map(|&x| swapped_from(rw, x)).collect::<Option<Vec<_>>>()?;
    inner.extend(ins.get(3));
    let op = att.clone().with_layout(HeadLayout::Bshd);
    rw.infer(&op.clone().into(), &inner).ok()?;
    let y = rw.add(op, &inner).ok()?;
    rw.add(Transpose { perm: SWAP_MIDDLE.to_vec() }, &[y]).ok()
}

/// A float scalar constant's value.
fn scalar_value(rw: &Rewriter, x: NodeId) -> Option<f64> {
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

fn is_last_axis_softmax(rw: &Rewriter, x: NodeId) -> bool {
    matches!(rw.op(x), Op::Softmax(s) if s.axis == -1 || s.axis == 3)
}

/// Whether a constant bool `[.., s, t]` mask is exactly causal: key j visible iff j <= i + t - s.
fn is_causal_constant(rw: &Rewriter, m: NodeId, s: usize, t: usize) -> bool {
    let Op::Constant(c) = rw.op(m) else { return false };
    let Data::B(v) = &c.value.data else { return false };
    let d = c.value.dims();
    if d.len() < 2 || d[d.len() - 2] != s || d[d.len() - 1] != t || v.len() != s * t {
        return false;
    }
    (0..s).all(|i| (0..t).all(|j| v[i * t + j] == (j as i64 <= i as i64 + t as i64 - s as i64)))
}

/// Splits `x` into (scores, scale): `x * c`, `c * x`, `x / c` with a scalar constant c.
fn peel_scale(rw: &Rewriter, x: NodeId) -> (NodeId, f64) {
    if let Op::Binary(b) = rw.op(x) {
        let ins = &rw.node(x).inputs;
        match b.kind {
            BinaryKind::Mul => {
                if let Some(c) = scalar_value(rw, ins[1]) {
                    return (ins[0], c);
                }
                if let Some(c) = scalar_value(rw, ins[0]) {
                    return (ins[1], c);
                }
            }
            BinaryKind::Div => {
                if let Some(c) = scalar_value(rw, ins[1]).filter(|c| *c != 0.0) {
                    return (ins[0], 1.0 / c);
                }
            }
            _ => {}
        }
    }
    (x, 1.0)
}

/// Splits the softmax input into (scaled scores, mask kind, mask input).
fn peel_mask(rw: &Rewriter, x: NodeId, s: usize, t: usize) -> (NodeId, MaskKind, Option<NodeId>) {
    match rw.op(x) {
        Op::Binary(b) if b.kind == BinaryKind::Add => {
            let ins = &rw.node(x).inputs;
            // The scores have the full [b, h, s, t] type; the mask broadcasts to it.
            let (sc, m) = if rw.ty(ins[0]) == rw.ty(x) { (ins[0], ins[1]) } else { (ins[1], ins[0]) };
            if rw.ty(sc) == rw.ty(x) && rw.ty(m).dtype == rw.ty(x).dtype && rw.ty(m).rank() <= 4 {
                return (sc, MaskKind::Custom, Some(m));
            }
        }
        Op::Where(_) => {
            let ins = &rw.node(x).inputs;
            let neg_inf = scalar_value(rw, ins[2]).is_some_and(|v| v == f64::NEG_INFINITY);
            if neg_inf && rw.ty(ins[1]) == rw.ty(x) && rw.ty(ins[0]).rank() <= 4 {
                if is_causal_constant(rw, ins[0], s, t) {
                    return (ins[1], MaskKind::Causal, None);
                }
                return (ins[1], MaskKind::Custom, Some(ins[0]));
            }
        }
        _ => {}
    }
    (x, MaskKind::None, None)
}

/// `q @ k^T` as (q, k): a matmul with `transpose_b`, or of a last-two-axes transpose.
fn peel_qk(rw: &Rewriter, x: NodeId) -> Option<(NodeId, NodeId)> {
    let Op::MatMul(mm) = rw.op(x) else { return None };
    if mm.transpose_a {
        return None;
    }
    let ins = &rw.node(x).inputs;
    if mm.transpose_b {
        return Some((ins[0], ins[1]));
    }
    match rw.op(ins[1]) {
        Op::Transpose(tr) if tr.perm == [0, 1, 3, 2] => Some((ins[0], rw.node(ins[1]).inputs[0])),
        _ => None,
    }
}

fn attention(rw: &mut Rewriter, op: &Op, ins: &[NodeId], ty: &rlx_ir::Shape) -> Option<NodeId> {
    let Op::MatMul(mm) = op else { return None };
    if mm.transpose_a || mm.transpose_b || ty.rank() != 4 || !is_last_axis_softmax(rw, ins[0]) {
        return None;
    }
    let (p, v) = (ins[0], ins[1]);
    // When the probabilities are read elsewhere too (a backward pass), they are computed anyway:
    // forming attention would run the scores and softmax twice.
    if rw.source_users(p) > 1 {
        return None;
    }
    let pd = rw.ty(p).fixed_dims()?;
    let (s, t) = (pd[2], pd[3]);
    let (masked, mask, mask_in) = peel_mask(rw, rw.node(p).inputs[0], s, t);
    let (scores, scale) = peel_scale(rw, masked);
    let (q, k) = peel_qk(rw, scores)?;
    if rw.ty(q).rank() != 4 || rw.ty(k).rank() != 4 || rw.ty(v).rank() != 4 {
        return None;
    }
    let mut inputs = vec![q, k, v];
    inputs.extend(mask_in);
    let att = Attention::new(mask, scale);
    rw.infer(&att.clone().into(), &inputs).ok()?;
    rw.add(att, &inputs).ok()
}
