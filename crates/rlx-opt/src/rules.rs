//! The rule sets. Each rule is a few lines: a pattern on the op and its inputs, and the
//! replacement. Patterns ask op traits and attributes through the helpers at the bottom.

use crate::engine::{Rewriter, Rule, RuleSet};
use rlx_ir::ops::{BinaryKind, BroadcastTo, MatMul, Reshape, Transpose, UnaryKind};
use rlx_ir::{DType, Data, NodeId, Op, OpTraits, Shape};

macro_rules! rules {
    ($($name:literal => $f:expr),* $(,)?) => {
        &[$(Rule { name: $name, apply: $f }),*]
    };
}

/// Algebraic identities that hold exactly in floating point (no reassociation).
pub const ALGEBRAIC: RuleSet = RuleSet {
    name: "algebraic",
    may_grow: false,
    rules: rules! {
        "add-zero" => |rw, op, ins, ty| {
            binary(op, BinaryKind::Add)?;
            pick_identity(rw, ins, ty, 0.0, true)
        },
        "sub-zero" => |rw, op, ins, ty| {
            binary(op, BinaryKind::Sub)?;
            keep_if(rw, ins[0], ty, is_splat(rw, ins[1], 0.0))
        },
        "mul-one" => |rw, op, ins, ty| {
            binary(op, BinaryKind::Mul)?;
            pick_identity(rw, ins, ty, 1.0, true)
        },
        "div-one" => |rw, op, ins, ty| {
            binary(op, BinaryKind::Div)?;
            keep_if(rw, ins[0], ty, is_splat(rw, ins[1], 1.0))
        },
        "pow-one" => |rw, op, ins, ty| {
            binary(op, BinaryKind::Pow)?;
            keep_if(rw, ins[0], ty, is_splat(rw, ins[1], 1.0))
        },
        "max-min-self" => |rw, op, ins, ty| {
            let Op::Binary(b) = op else { return None };
            let idem = matches!(b.kind, BinaryKind::Maximum | BinaryKind::Minimum);
            keep_if(rw, ins[0], ty, idem && ins[0] == ins[1])
        },
        "neg-neg" => |rw, op, ins, _ty| {
            unary(op, UnaryKind::Neg)?;
            let inner = ins[0];
            unary(rw.op(inner), UnaryKind::Neg)?;
            Some(rw.node(inner).inputs[0])
        },
        "cast-same" => |rw, op, ins, ty| {
            let Op::Cast(c) = op else { return None };
            keep_if(rw, ins[0], ty, rw.ty(ins[0]).dtype == c.to)
        },
        "cast-widen-narrow" => |rw, op, ins, _ty| {
            let Op::Cast(c) = op else { return None };
            let Op::Cast(_) = rw.op(ins[0]) else { return None };
            let x = rw.node(ins[0]).inputs[0];
            let (from, mid) = (rw.ty(x).dtype, rw.ty(ins[0]).dtype);
            (from == c.to && widens_exactly(from, mid)).then_some(x)
        },
        "where-same" => |rw, op, ins, ty| {
            let Op::Where(_) = op else { return None };
            keep_if(rw, ins[1], ty, ins[1] == ins[2])
        },
    },
};

/// Views: every static view becomes one reshape; reshape chains collapse; identity views,
/// transposes and broadcasts disappear; transpose chains compose.
pub const VIEWS: RuleSet = RuleSet {
    name: "views",
    may_grow: false,
    rules: rules! {
        "view-identity" => |rw, op, ins, ty| {
            let t = op.def().traits();
            let viewish = t.contains(OpTraits::VIEW) || matches!(op, Op::BroadcastTo(_) | Op::Transpose(_));
            keep_if(rw, *ins.first()?, ty, viewish && ins.len() == 1 && is_identity_perm(op))
        },
        "view-to-reshape" => |rw, op, ins, ty| {
            if !op.def().traits().contains(OpTraits::VIEW) || matches!(op, Op::Reshape(_)) || ins.len() != 1 {
                return None;
            }
            rw.add(Reshape { dims: ty.fixed_dims()? }, ins).ok()
        },
        "reshape-reshape" => |rw, op, ins, _ty| {
            let Op::Reshape(r) = op else { return None };
            let Op::Reshape(_) = rw.op(ins[0]) else { return None };
            let x = rw.node(ins[0]).inputs[0];
            rw.add(r.clone(), &[x]).ok()
        },
        "transpose-transpose" => |rw, op, ins, _ty| {
            let Op::Transpose(outer) = op else { return None };
            let Op::Transpose(inner) = rw.op(ins[0]) else { return None };
            let perm: Vec<usize> = outer.perm.iter().map(|&p| inner.perm[p]).collect();
            let x = rw.node(ins[0]).inputs[0];
            rw.add(Transpose { perm }, &[x]).ok()
        },
    },
};

/// Broadcasts: an explicit broadcast feeding an op that broadcasts by itself is dropped.
pub const BROADCAST: RuleSet = RuleSet {
    name: "broadcast",
    may_grow: false,
    rules: rules! {
        "implicit-broadcast" => |rw, op, ins, ty| {
            if !op.def().traits().contains(OpTraits::BROADCAST) {
                return None;
            }
            let mut new = ins.to_vec();
            let mut changed = false;
            for x in new.iter_mut() {
                if let Op::BroadcastTo(_) = rw.op(*x) {
                    let src = rw.node(*x).inputs[0];
                    let mut trial = ins.to_vec();
                    trial[ins.iter().position(|y| y == x).unwrap_or(0)] = src;
                    if rw.infer(op, &trial).ok().as_ref() == Some(ty) {
                        *x = src;
                        changed = true;
                    }
                }
            }
            if !changed || rw.infer(op, &new).ok().as_ref() != Some(ty) {
                return None;
            }
            rw.add(op.clone(), &new).ok()
        },
    },
};

/// Legalization for backends without implicit broadcasting: every input of a broadcasting op
/// is broadcast to the output dims explicitly. May add nodes.
pub const EXPLICIT_BROADCAST: RuleSet = RuleSet {
    name: "explicit-broadcast",
    may_grow: true,
    rules: rules! {
        "explicit-broadcast" => |rw, op, ins, ty| {
            if !op.def().traits().contains(OpTraits::BROADCAST) {
                return None;
            }
            let od = ty.fixed_dims()?;
            if ins.iter().all(|&x| rw.ty(x).fixed_dims().as_deref() == Some(&od[..])) {
                return None;
            }
            let mut new = vec![];
            for &x in ins {
                let same = rw.ty(x).fixed_dims()? == od;
                new.push(if same { x } else { rw.add(BroadcastTo { dims: od.clone() }, &[x]).ok()? });
            }
            rw.add(op.clone(), &new).ok()
        },
    },
};

/// Contractions: a transpose of the last two axes feeding a matmul becomes a matmul flag.
pub const MATMUL: RuleSet = RuleSet {
    name: "matmul",
    may_grow: false,
    rules: rules! {
        "transpose-into-matmul" => |rw, op, ins, _ty| {
            let Op::MatMul(m) = op else { return None };
            let mut m = m.clone();
            let mut new = ins.to_vec();
            for (side, flag) in [(0, &mut m.transpose_a), (1, &mut m.transpose_b)] {
                if let Op::Transpose(t) = rw.op(ins[side])
                    && swaps_last_two(&t.perm)
                {
                    new[side] = rw.node(ins[side]).inputs[0];
                    *flag = !*flag;
                }
            }
            if new == ins {
                return None;
            }
            rw.add(MatMul { transpose_a: m.transpose_a, transpose_b: m.transpose_b }, &new).ok()
        },
    },
};

/// Constant folding: an op whose inputs are all constants is evaluated by its reference
/// implementation (no per-op folding code), when the result is small enough.
pub const FOLD: RuleSet = RuleSet {
    name: "fold",
    may_grow: false,
    rules: rules! {
        "fold" => |rw, op, ins, ty| {
            if op.def().traits().contains(OpTraits::LEAF) || ins.is_empty() {
                return None;
            }
            let mut vals = vec![];
            let mut in_elems = 0;
            for &x in ins {
                let n = rw.node(x);
                if !matches!(n.op, Op::Constant(_) | Op::Full(_) | Op::Arange(_)) {
                    return None;
                }
                in_elems += n.ty.numel()?;
                vals.push(n.op.def().reference(&[], &n.ty).ok()?);
            }
            let out = ty.numel()?;
            if out > rw.fold_limit.max(in_elems) {
                return None;
            }
            let refs: Vec<&rlx_ir::HostTensor> = vals.iter().collect();
            let value = op.def().reference(&refs, ty).ok()?;
            if &value.shape != ty {
                return None;
            }
            rw.add(rlx_ir::ops::Constant { value }, &[]).ok()
        },
    },
};

/// The sets the pipeline runs to simplify (CSE and DCE come with the engine).
pub const SIMPLIFY: &[RuleSet] = &[FOLD, ALGEBRAIC, VIEWS, BROADCAST, MATMUL];

/// Looks up a rule set by name (`algebraic`, `views`, `broadcast`, `explicit-broadcast`,
/// `matmul`, `fold`; `cse` runs the engine with no rules: hash-consing and DCE only).
pub fn set_by_name(name: &str) -> Option<&'static [RuleSet]> {
    Some(match name {
        "algebraic" => &[ALGEBRAIC],
        "views" => &[VIEWS],
        "broadcast" => &[BROADCAST],
        "explicit-broadcast" => &[EXPLICIT_BROADCAST],
        "matmul" => &[MATMUL],
        "fold" => &[FOLD],
        "cse" => &[],
        "simplify" => SIMPLIFY,
        _ => return None,
    })
}

fn binary(op: &Op, kind: BinaryKind) -> Option<()> {
    matches!(op, Op::Binary(b) if b.kind == kind).then_some(())
}

fn unary(op: &Op, kind: UnaryKind) -> Option<()> {
    matches!(op, Op::Unary(u) if u.kind == kind).then_some(())
}

/// `x` when `cond` holds and `x` already has the output type.
fn keep_if(rw: &Rewriter, x: NodeId, ty: &Shape, cond: bool) -> Option<NodeId> {
    (cond && rw.ty(x) == ty).then_some(x)
}

/// For `x op c` (or `c op x` when commutative) with c a splat of `v`: x.
fn pick_identity(rw: &Rewriter, ins: &[NodeId], ty: &Shape, v: f64, commutative: bool) -> Option<NodeId> {
    if is_splat(rw, ins[1], v) && rw.ty(ins[0]) == ty {
        return Some(ins[0]);
    }
    (commutative && is_splat(rw, ins[0], v) && rw.ty(ins[1]) == ty).then_some(ins[1])
}

/// Whether a node is a constant with every element equal to `v`.
pub fn is_splat(rw: &Rewriter, x: NodeId, v: f64) -> bool {
    match rw.op(x) {
        Op::Full(f) => f.value == v || (rw.ty(x).dtype.is_int() && f.value.trunc() == v),
        Op::Constant(c) => match &c.value.data {
            Data::F(d) => d.iter().all(|&e| e == v),
            Data::I(d) => d.iter().all(|&e| e as f64 == v),
            _ => false,
        },
        _ => false,
    }
}

/// Whether every value of `from` is exactly representable in `to`.
fn widens_exactly(from: DType, to: DType) -> bool {
    use DType::*;
    matches!(
        (from, to),
        (F16 | BF16, F32 | F64) | (F32, F64) | (I8 | U8, I16 | I32 | I64) | (I16, I32 | I64) | (I32 | U32, I64)
    )
}

fn swaps_last_two(perm: &[usize]) -> bool {
    let r = perm.len();
    r >= 2 && perm[r - 2] == r - 1 && perm[r - 1] == r - 2 && perm[..r - 2].iter().enumerate().all(|(i, &p)| p == i)
}

/// Transposes with the identity permutation (other ops pass: the type check decides).
fn is_identity_perm(op: &Op) -> bool {
    match op {
        Op::Transpose(t) => t.perm.iter().enumerate().all(|(i, &p)| p == i),
        _ => true,
    }
}
