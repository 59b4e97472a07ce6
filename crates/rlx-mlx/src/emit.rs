//! The emitter table (the backend's kernel table): each node's shim calls.

use crate::program::{self, Mx, Prog, V};
use rlx_driver::KernelTable;
use rlx_ir::ops::{BinaryKind, CompareKind, ReduceKind, TopKOutput, UnaryKind};
use rlx_ir::shape::normalize_axis;
use rlx_ir::{DType, DTypeClass, Node, Op, OpKind};
use std::sync::LazyLock;

/// Writes one node's steps: input values and output dims in, the node's value out; None when
/// the attributes or dtypes are outside what MLX runs (the node is decomposed or reported).
pub type Emit = fn(&mut Prog, &Node, &[V], &[usize]) -> Option<V>;

const NUMBERS: &[DType] = &DType::NUMERIC;
const ALL: &[DType] = &DType::REAL_AND_BOOL;
const FLOATS: &[DType] = &DType::FLOATS;

/// Every op rlx-mlx runs directly; the rest is decomposed by `legalize` first.
pub static EMITTERS: LazyLock<KernelTable<Emit>> = LazyLock::new(|| {
    let mut t: KernelTable<Emit> = KernelTable::new();
    t.register(OpKind::Constant, ALL, constant);
    t.register(OpKind::Full, ALL, |p, n, _, d| {
        let Op::Full(f) = &n.op else { return None };
        Some(p.full(f.value, d, n.ty.dtype))
    });
    t.register(OpKind::Arange, NUMBERS, arange);
    t.register(OpKind::Unary, NUMBERS, unary);
    t.register(OpKind::Binary, NUMBERS, binary);
    t.register(OpKind::Compare, ALL, compare);
    t.register(OpKind::Where, ALL, |p, n, i, d| Some(p.op("where", &[&i[0], &i[1], &i[2]], &[], &[], d, n.ty.dtype)));
    t.register(OpKind::Cast, ALL, cast);
    t.register(OpKind::Reduce, NUMBERS, reduce);
    t.register(OpKind::ArgMax, NUMBERS, argmax);
    t.register(OpKind::MatMul, FLOATS, matmul);
    t.register(OpKind::Reshape, ALL, reshape);
    t.register(OpKind::ExpandDims, ALL, reshape);
    t.register(OpKind::Squeeze, ALL, reshape);
    t.register(OpKind::Transpose, ALL, |p, n, i, d| {
        let Op::Transpose(t) = &n.op else { return None };
        Some(p.op("transpose", &[&i[0]], &ints(&t.perm), &[], d, n.ty.dtype))
    });
    t.register(OpKind::BroadcastTo, ALL, |p, n, i, d| {
        Some(p.op("broadcast_to", &[&i[0]], &ints(d), &[], d, n.ty.dtype))
    });
    t.register(OpKind::Slice, ALL, |p, n, i, d| {
        let Op::Slice(s) = &n.op else { return None };
        let a: Vec<i64> = ints(&s.starts).into_iter().chain(ints(&s.ends)).chain(ints(&s.steps)).collect();
        Some(p.op("slice", &[&i[0]], &a, &[], d, n.ty.dtype))
    });
    t.register(OpKind::Concat, ALL, |p, n, i, d| {
        let Op::Concat(c) = &n.op else { return None };
        let axis = normalize_axis(c.axis, d.len()).ok()?;
        let refs: Vec<&V> = i.iter().collect();
        Some(p.op("concatenate", &refs, &[axis as i64], &[], d, n.ty.dtype))
    });
    t.register(OpKind::DynamicSlice, ALL, dynamic_slice);
    t.register(OpKind::DynamicUpdateSlice, ALL, dynamic_update_slice);
    t.register(OpKind::Gather, ALL, gather);
    t.register(OpKind::ScatterAdd, NUMBERS, scatter_add);
    t.register(OpKind::Cumsum, NUMBERS, |p, n, i, d| {
        let Op::Cumsum(c) = &n.op else { return None };
        let axis = normalize_axis(c.axis, d.len()).ok()? as i64;
        Some(p.op("cumsum", &[&i[0]], &[axis, c.reverse as i64, !c.exclusive as i64], &[], d, n.ty.dtype))
    });
    t.register(OpKind::TopK, NUMBERS, top_k);
    // MLX's fused kernels where their semantics are RLX's (f64 is left to the decompositions:
    // MLX computes its exp in f32 precision).
    const HALF_AND_F32: &[DType] = &[DType::F32, DType::F16, DType::BF16];
    t.register(OpKind::LayerNorm, HALF_AND_F32, norm);
    t.register(OpKind::RmsNorm, HALF_AND_F32, norm);
    t.register(OpKind::Attention, &[DType::F32, DType::F16, DType::BF16, DType::Bool], attention);
    t.register(OpKind::Dequantize, &[DType::U8, DType::F32], crate::quant::dequantize);
    t
});

/// `mx::fast::layer_norm` / `rms_norm` over the last axis, with 1-D weights of its length.
fn norm(p: &mut Prog, n: &Node, i: &[V], d: &[usize]) -> Option<V> {
    let last = *d.last()?;
    if i[1..].iter().any(|w| w.dims != [last] || w.dt != n.ty.dtype) {
        return None;
    }
    match &n.op {
        Op::LayerNorm(l) => Some(p.op("layer_norm", &[&i[0], &i[1], &i[2]], &[], &[l.eps], d, n.ty.dtype)),
        Op::RmsNorm(r) => Some(p.op("rms_norm", &[&i[0], &i[1]], &[], &[r.eps], d, n.ty.dtype)),
        _ => None,
    }
}

/// `mx::fast::scaled_dot_product_attention` for `[batch, heads, seq, dim]` values with no mask,
/// the causal mask (MLX aligns it bottom-right, as RLX does) or a mask input; sliding windows
/// and the `Bshd` layout are left to the decomposition.
fn attention(p: &mut Prog, n: &Node, i: &[V], d: &[usize]) -> Option<V> {
    let Op::Attention(a) = &n.op else { return None };
    if a.layout != rlx_ir::ops::HeadLayout::Bhsd || i[0].dt != n.ty.dtype || i[0].dt == DType::Bool {
        return None;
    }
    let mode = match a.mask {
        rlx_ir::MaskKind::None => 0,
        rlx_ir::MaskKind::Causal => 1,
        rlx_ir::MaskKind::Custom => 2,
        rlx_ir::MaskKind::SlidingWindow(_) => return None,
    };
    let refs: Vec<&V> = i.iter().collect();
    Some(p.op("sdpa", &refs, &[mode], &[a.scale], d, n.ty.dtype))
}

fn ints(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

fn constant(p: &mut Prog, n: &Node, _: &[V], d: &[usize]) -> Option<V> {
    let Op::Constant(c) = &n.op else { return None };
    Some(p.constant(c.value.to_bytes(), d, n.ty.dtype))
}

fn arange(p: &mut Prog, n: &Node, _: &[V], d: &[usize]) -> Option<V> {
    let Op::Arange(a) = &n.op else { return None };
    Some(p.op("arange", &[], &[a.n as i64], &[a.start, a.step], d, n.ty.dtype))
}

fn reshape(p: &mut Prog, n: &Node, i: &[V], d: &[usize]) -> Option<V> {
    Some(p.op("reshape", &[&i[0]], &ints(d), &[], d, n.ty.dtype))
}

fn unary(p: &mut Prog, n: &Node, i: &[V], d: &[usize]) -> Option<V> {
    let Op::Unary(u) = &n.op else { return None };
    let dt = n.ty.dtype;
    if dt == DType::F64 && f32_precise_only(u.kind) {
        return None;
    }
    if dt.class() == DTypeClass::Float {
        return Some(program::emit(p, d, dt, &i[0..1], |x| u.kind.eval(x[0])));
    }
    u.kind.eval_int(0)?;
    let x = &i[0];
    Some(match u.kind {
        UnaryKind::Floor | UnaryKind::Round => p.op("identity", &[x], &[], &[], d, dt),
        UnaryKind::Neg => p.op("negative", &[x], &[], &[], d, dt),
        UnaryKind::Abs => p.op("abs", &[x], &[], &[], d, dt),
        UnaryKind::Sign => p.op("sign", &[x], &[], &[], d, dt),
        UnaryKind::Square => p.op("multiply", &[x, x], &[], &[], d, dt),
        UnaryKind::Relu => {
            let z = p.full(0.0, &[], dt);
            p.op("maximum", &[x, &z], &[], &[], d, dt)
        }
        _ => return None,
    })
}

/// Kinds whose expressions use exp, sin, cos or erf: MLX evaluates those in f32 precision even
/// for f64 arrays, so f64 nodes of these kinds are left to the reference-precise backends.
pub fn f32_precise_only(k: UnaryKind) -> bool {
    use UnaryKind::*;
    matches!(k, Exp | Sin | Cos | Erf | Sigmoid | Gelu | Silu | Softplus)
}

fn binary(p: &mut Prog, n: &Node, i: &[V], d: &[usize]) -> Option<V> {
    let Op::Binary(b) = &n.op else { return None };
    let dt = n.ty.dtype;
    if dt.class() == DTypeClass::Float {
        // MLX broadcasts operands numpy-style, as RLX does.
        return Some(program::emit(p, d, dt, &i[0..2], |v: &[Mx]| b.kind.eval(v[0], v[1])));
    }
    let op = match b.kind {
        BinaryKind::Add => "add",
        BinaryKind::Sub => "subtract",
        BinaryKind::Mul => "multiply",
        BinaryKind::Maximum => "maximum",
        BinaryKind::Minimum => "minimum",
        _ => return None,
    };
    Some(p.op(op, &[&i[0], &i[1]], &[], &[], d, dt))
}

fn compare(p: &mut Prog, n: &Node, i: &[V], d: &[usize]) -> Option<V> {
    let Op::Compare(c) = &n.op else { return None };
    let op = match c.kind {
        CompareKind::Eq => "equal",
        CompareKind::Ne => "not_equal",
        CompareKind::Lt => "less",
        CompareKind::Le => "less_equal",
        CompareKind::Gt => "greater",
        CompareKind::Ge => "greater_equal",
    };
    Some(p.op(op, &[&i[0], &i[1]], &[], &[], d, DType::Bool))
}

/// Float to int truncates into i64 (saturating, NaN to 0) and wraps to the target, as the
/// reference does; to bool is `!= 0`.
fn cast(p: &mut Prog, n: &Node, i: &[V], d: &[usize]) -> Option<V> {
    let (x, to) = (&i[0], n.ty.dtype);
    if to == DType::Bool {
        let z = p.full(0.0, &[], x.dt);
        return Some(p.op("not_equal", &[x, &z], &[], &[], d, DType::Bool));
    }
    if x.dt.class() == DTypeClass::Float && to.class() == DTypeClass::Int {
        let w = p.op("astype", &[x], &[], &[], d, DType::F64);
        let lo = p.full(i64::MIN as f64, &[], DType::F64);
        let hi = p.full(f64::from_bits((i64::MAX as f64).to_bits() - 1), &[], DType::F64);
        let c = p.op("maximum", &[&w, &lo], &[], &[], d, DType::F64);
        let c = p.op("minimum", &[&c, &hi], &[], &[], d, DType::F64);
        let nan = p.op("isnan", &[&w], &[], &[], d, DType::Bool);
        let z = p.full(0.0, &[], DType::F64);
        let c = p.op("where", &[&nan, &z, &c], &[], &[], d, DType::F64);
        let wide = p.op("astype", &[&c], &[], &[], d, DType::I64);
        return Some(if to == DType::I64 { wide } else { p.op("astype", &[&wide], &[], &[], d, to) });
    }
    Some(p.op("astype", &[x], &[], &[], d, to))
}

fn reduce(p: &mut Prog, n: &Node, i: &[V], d: &[usize]) -> Option<V> {
    let Op::Reduce(r) = &n.op else { return None };
    let x = &i[0];
    let mut axes: Vec<i64> =
        r.axes.iter().map(|&a| normalize_axis(a, x.dims.len()).ok().map(|a| a as i64)).collect::<Option<_>>()?;
    axes.sort_unstable();
    axes.dedup();
    if axes.is_empty() {
        return Some(p.op("reshape", &[x], &ints(d), &[], d, x.dt));
    }
    let op = match r.kind {
        ReduceKind::Sum => "sum",
        ReduceKind::Prod => "prod",
        ReduceKind::Max => "max",
        ReduceKind::Min => "min",
        ReduceKind::Mean if x.dt.class() == DTypeClass::Float => "mean",
        ReduceKind::Mean => return None,
    };
    axes.push(r.keep_dims as i64);
    Some(p.op(op, &[x], &axes, &[], d, x.dt))
}

/// First index of the largest element, NaN counting as largest: the max, then the smallest
/// index whose element equals it (or is NaN).
fn argmax(p: &mut Prog, n: &Node, i: &[V], d: &[usize]) -> Option<V> {
    let Op::ArgMax(a) = &n.op else { return None };
    let x = &i[0];
    let axis = normalize_axis(a.axis, x.dims.len()).ok()?;
    let m = p.op("max", &[x], &[axis as i64, 1], &[], &[], x.dt);
    let mut hit = p.op("equal", &[x, &m], &[], &[], &x.dims.clone(), DType::Bool);
    if x.dt.class() == DTypeClass::Float {
        let nan = p.op("isnan", &[x], &[], &[], &x.dims.clone(), DType::Bool);
        hit = p.op("logical_or", &[&hit, &nan], &[], &[], &x.dims.clone(), DType::Bool);
    }
    let len = x.dims[axis];
    let iota = p.op("arange", &[], &[len as i64], &[0.0, 1.0], &[len], DType::I64);
    let shape: Vec<i64> = (0..x.dims.len()).map(|j| if j == axis { len as i64 } else { 1 }).collect();
    let iota = p.op("reshape", &[&iota], &shape, &[], &[], DType::I64);
    let big = p.full(len as f64, &[], DType::I64);
    let idx = p.op("where", &[&hit, &iota, &big], &[], &[], &x.dims.clone(), DType::I64);
    let r = p.op("min", &[&idx], &[axis as i64, a.keep_dims as i64], &[], d, DType::I64);
    Some(if n.ty.dtype == DType::I64 { r } else { p.op("astype", &[&r], &[], &[], d, n.ty.dtype) })
}

fn matmul(p: &mut Prog, n: &Node, i: &[V], d: &[usize]) -> Option<V> {
    let Op::MatMul(mm) = &n.op else { return None };
    let flip = |p: &mut Prog, v: &V, t: bool| -> V {
        if !t {
            return v.clone();
        }
        let r = v.dims.len();
        let perm: Vec<i64> = (0..r as i64 - 2).chain([r as i64 - 1, r as i64 - 2]).collect();
        let mut dims = v.dims.clone();
        dims.swap(r - 1, r - 2);
        p.op("transpose", &[v], &perm, &[], &dims, v.dt)
    };
    let a = flip(p, &i[0], mm.transpose_a);
    let b = flip(p, &i[1], mm.transpose_b);
    Some(p.op("matmul", &[&a, &b], &[], &[], d, n.ty.dtype))
}

/// Clamps a run-time start to `0..=hi`, as RLX and JAX do.
fn clamp_start(p: &mut Prog, start: &V, hi: usize) -> V {
    let lo = p.full(0.0, &[], start.dt);
    let hi = p.full(hi as f64, &[], start.dt);
    let s = p.op("maximum", &[start, &lo], &[], &[], &start.dims.clone(), start.dt);
    p.op("minimum", &[&s, &hi], &[], &[], &start.dims.clone(), start.dt)
}

fn dynamic_slice(p: &mut Prog, n: &Node, i: &[V], d: &[usize]) -> Option<V> {
    let Op::DynamicSlice(s) = &n.op else { return None };
    let axis = normalize_axis(s.axis, d.len()).ok()?;
    let start = clamp_start(p, &i[1], i[0].dims[axis] - s.size);
    Some(p.op("dynamic_slice", &[&i[0], &start], &[axis as i64, s.size as i64], &[], d, n.ty.dtype))
}

fn dynamic_update_slice(p: &mut Prog, n: &Node, i: &[V], d: &[usize]) -> Option<V> {
    let Op::DynamicUpdateSlice(s) = &n.op else { return None };
    let axis = normalize_axis(s.axis, d.len()).ok()?;
    let start = clamp_start(p, &i[2], i[0].dims[axis] - i[1].dims[axis]);
    Some(p.op("dynamic_update_slice", &[&i[0], &i[1], &start], &[axis as i64], &[], d, n.ty.dtype))
}

/// A check that every index lies in `0..dim` (MLX, like XLA, would not say).
fn check_indices(p: &mut Prog, idx: &V, dim: usize, what: String) {
    let lo = p.full(0.0, &[], idx.dt);
    let hi = p.full(dim as f64, &[], idx.dt);
    let below = p.op("less", &[idx, &lo], &[], &[], &idx.dims.clone(), DType::Bool);
    let above = p.op("greater_equal", &[idx, &hi], &[], &[], &idx.dims.clone(), DType::Bool);
    let bad = p.op("logical_or", &[&below, &above], &[], &[], &idx.dims.clone(), DType::Bool);
    let bad = p.op("astype", &[&bad], &[], &[], &idx.dims.clone(), DType::U8);
    let mut axes: Vec<i64> = (0..idx.dims.len() as i64).collect();
    axes.push(0);
    let flag = if idx.dims.is_empty() { bad } else { p.op("max", &[&bad], &axes, &[], &[], DType::U8) };
    p.checks.push((flag.id, format!("{what}: an index is outside 0..{dim}")));
}

fn gather(p: &mut Prog, n: &Node, i: &[V], d: &[usize]) -> Option<V> {
    let Op::Gather(g) = &n.op else { return None };
    let axis = normalize_axis(g.axis, i[0].dims.len()).ok()?;
    check_indices(p, &i[1], i[0].dims[axis], format!("gather along axis {axis}"));
    Some(p.op("take", &[&i[0], &i[1]], &[axis as i64], &[], d, n.ty.dtype))
}

/// `scatter_add_axis` over the indices flattened to one axis and broadcast to the updates.
fn scatter_add(p: &mut Prog, n: &Node, i: &[V], d: &[usize]) -> Option<V> {
    let Op::ScatterAdd(s) = &n.op else { return None };
    let (t, idx, u) = (&i[0], &i[1], &i[2]);
    let axis = normalize_axis(s.axis, t.dims.len()).ok()?;
    check_indices(p, idx, t.dims[axis], format!("scatter_add along axis {axis}"));
    let k: usize = idx.dims.iter().product();
    let mut ud: Vec<usize> = t.dims.clone();
    ud[axis] = k;
    let u = p.op("reshape", &[u], &ints(&ud), &[], &ud, u.dt);
    let shape: Vec<i64> = (0..ud.len()).map(|j| if j == axis { k as i64 } else { 1 }).collect();
    let idx = p.op("reshape", &[idx], &shape, &[], &[], idx.dt);
    let idx = p.op("broadcast_to", &[&idx], &ints(&ud), &[], &ud, idx.dt);
    Some(p.op("scatter_add_axis", &[t, &idx, &u], &[axis as i64], &[], d, n.ty.dtype))
}

/// The `k` largest along the last axis, largest first, ties to the lower index, NaN largest: a
/// stable ascending argsort of the negated values (NaN mapped below every number).
fn top_k(p: &mut Prog, n: &Node, i: &[V], d: &[usize]) -> Option<V> {
    let Op::TopK(t) = &n.op else { return None };
    let x = &i[0];
    let r = x.dims.len();
    let axis = r as i64 - 1;
    // Unsigned values would wrap when negated: sort them as i64.
    let (x, kt) = if x.dt.is_unsigned() {
        (p.op("astype", &[x], &[], &[], &x.dims.clone(), DType::I64), DType::I64)
    } else {
        (x.clone(), x.dt)
    };
    let x = &x;
    let mut key = p.op("negative", &[x], &[], &[], &x.dims.clone(), kt);
    if x.dt.class() == DTypeClass::Float {
        let nan = p.op("isnan", &[x], &[], &[], &x.dims.clone(), DType::Bool);
        let low = p.full(f64::NEG_INFINITY, &[], x.dt);
        key = p.op("where", &[&nan, &low, &key], &[], &[], &x.dims.clone(), x.dt);
    }
    let order = p.op("argsort", &[&key], &[axis], &[], &x.dims.clone(), DType::U32);
    let mut stop = ints(&x.dims);
    stop[r - 1] = t.k as i64;
    let a: Vec<i64> = vec![0; r].into_iter().chain(stop).chain(vec![1; r]).collect();
    let idx = p.op("slice", &[&order], &a, &[], d, DType::U32);
    Some(match t.output {
        TopKOutput::Indices => p.op("astype", &[&idx], &[], &[], d, n.ty.dtype),
        TopKOutput::Values => p.op("take_along_axis", &[&i[0], &idx], &[axis], &[], d, n.ty.dtype),
    })
}
