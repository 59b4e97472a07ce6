//! Emitters of the structured ops: reductions, matmul, layout, slicing, indexing, scans, sort.

use super::emit::{broadcast, cmp, highest, i64_array, lowest};
use super::{Check, Ctx, V, tensor_ty};
use rlx_ir::ops::{ReduceKind, TopKOutput};
use rlx_ir::shape::normalize_axis;
use rlx_ir::{DType, DTypeClass, Node, Op};

/// A reduction region `^bb0(%a, %b): %r = op(%a, %b); return %r` over scalars of dt.
fn region(op: &str, dt: DType) -> String {
    let t = tensor_ty(&[], dt);
    format!(
        "    ^bb0(%ra: {t}, %rb: {t}):\n      %rr = \"stablehlo.{op}\"(%ra, %rb) : ({t}, {t}) -> {t}\n      \"stablehlo.return\"(%rr) : ({t}) -> ()"
    )
}

/// Reduces `x` over `axes` (sorted, distinct) with `op` from `init`.
fn reduce_axes(ctx: &mut Ctx, x: &V, axes: &[usize], op: &str, init: f64) -> V {
    let init = ctx.splat(init, &[], x.dt);
    let dims: Vec<usize> = x.dims.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect();
    let attrs = format!("dimensions = {}", i64_array(axes));
    ctx.op_region("reduce", &[x, &init], &attrs, &region(op, x.dt), &[(dims, x.dt)]).remove(0)
}

fn axes_of(axes: &[i64], rank: usize) -> Option<Vec<usize>> {
    let mut v: Vec<usize> = axes.iter().map(|&a| normalize_axis(a, rank).ok()).collect::<Option<_>>()?;
    v.sort_unstable();
    v.dedup();
    Some(v)
}

pub fn reduce(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::Reduce(r) = &n.op else { return None };
    let x = &ins[0];
    let axes = axes_of(&r.axes, x.dims.len())?;
    if axes.is_empty() {
        return Some(ctx.op("reshape", &[x], "", dims, x.dt));
    }
    let v = match r.kind {
        ReduceKind::Sum => reduce_axes(ctx, x, &axes, "add", 0.0),
        ReduceKind::Prod => reduce_axes(ctx, x, &axes, "multiply", 1.0),
        ReduceKind::Max => reduce_axes(ctx, x, &axes, "maximum", lowest(x.dt)),
        ReduceKind::Min => reduce_axes(ctx, x, &axes, "minimum", highest(x.dt)),
        ReduceKind::Mean => {
            if x.dt.class() != DTypeClass::Float {
                return None;
            }
            let s = reduce_axes(ctx, x, &axes, "add", 0.0);
            let count: usize = axes.iter().map(|&a| x.dims[a]).product();
            let c = ctx.splat(count as f64, &s.dims.clone(), x.dt);
            ctx.op("divide", &[&s, &c], "", &s.dims.clone(), x.dt)
        }
    };
    Some(if v.dims == dims { v } else { ctx.op("reshape", &[&v], "", dims, x.dt) })
}

/// First index of the largest element (NaN counts as largest): the max, then the smallest
/// index whose element equals it (or is NaN, when the max is NaN).
pub fn argmax(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::ArgMax(a) = &n.op else { return None };
    let x = &ins[0];
    let axis = normalize_axis(a.axis, x.dims.len()).ok()?;
    if x.dt == DType::Bool {
        return None;
    }
    let m = reduce_axes(ctx, x, &[axis], "maximum", lowest(x.dt));
    let keep: Vec<usize> = x.dims.iter().enumerate().map(|(i, &d)| if i == axis { 1 } else { d }).collect();
    let m = ctx.op("reshape", &[&m], "", &keep, x.dt);
    let m = broadcast(ctx, &m, &x.dims);
    let mut hit = cmp(ctx, x, &m, "EQ");
    if x.dt.class() == DTypeClass::Float {
        let nan = cmp(ctx, x, x, "NE");
        hit = ctx.op("or", &[&hit, &nan], "", &x.dims.clone(), DType::Bool);
    }
    let iota = ctx.op("iota", &[], &format!("iota_dimension = {axis} : i64"), &x.dims.clone(), DType::I64);
    let big = ctx.splat(x.dims[axis] as f64, &x.dims.clone(), DType::I64);
    let idx = ctx.op("select", &[&hit, &iota, &big], "", &x.dims.clone(), DType::I64);
    let r = reduce_axes(ctx, &idx, &[axis], "minimum", highest(DType::I64));
    let r = if r.dims == dims { r } else { ctx.op("reshape", &[&r], "", dims, DType::I64) };
    Some(if n.ty.dtype == DType::I64 { r } else { ctx.op("convert", &[&r], "", dims, n.ty.dtype) })
}

/// `a @ b` with numpy-broadcast batch dims and transpose flags: both operands are broadcast to
/// the output's batch dims, then one `dot_general`.
pub fn matmul(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::MatMul(mm) = &n.op else { return None };
    let (a, b) = (&ins[0], &ins[1]);
    let nb = dims.len() - 2;
    let batch = &dims[..nb];
    let with_batch = |x: &V| -> Vec<usize> {
        let r = x.dims.len();
        batch.iter().copied().chain(x.dims[r - 2..].iter().copied()).collect()
    };
    let a = broadcast(ctx, a, &with_batch(a));
    let b = broadcast(ctx, b, &with_batch(b));
    let bd: Vec<usize> = (0..nb).collect();
    let ca = if mm.transpose_a { nb } else { nb + 1 };
    let cb = if mm.transpose_b { nb + 1 } else { nb };
    let mut attrs = format!(
        "dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [{bd}], rhs_batching_dimensions = [{bd}], \
         lhs_contracting_dimensions = [{ca}], rhs_contracting_dimensions = [{cb}]>",
        bd = bd.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
    );
    if a.dt.class() == DTypeClass::Float {
        attrs.push_str(", precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]");
    }
    let out = ctx.op("dot_general", &[&a, &b], &attrs, dims, n.ty.dtype);
    // dot_general yields [batch, free(a), free(b)]; with transpose_a the free dim of a is still
    // the one not contracted, so the order is already [.., m, n].
    Some(out)
}

pub fn transpose(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::Transpose(t) = &n.op else { return None };
    Some(ctx.op("transpose", &[&ins[0]], &format!("permutation = {}", i64_array(&t.perm)), dims, n.ty.dtype))
}

pub fn slice(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::Slice(s) = &n.op else { return None };
    let attrs = format!(
        "start_indices = {}, limit_indices = {}, strides = {}",
        i64_array(&s.starts),
        i64_array(&s.ends),
        i64_array(&s.steps)
    );
    Some(ctx.op("slice", &[&ins[0]], &attrs, dims, n.ty.dtype))
}

pub fn concat(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::Concat(c) = &n.op else { return None };
    let axis = normalize_axis(c.axis, dims.len()).ok()?;
    let refs: Vec<&V> = ins.iter().collect();
    Some(ctx.op("concatenate", &refs, &format!("dimension = {axis} : i64"), dims, n.ty.dtype))
}

/// Start indices for every axis: `start` at `axis`, zeros elsewhere (StableHLO clamps them as
/// RLX does).
fn starts(ctx: &mut Ctx, start: &V, rank: usize, axis: usize) -> Vec<V> {
    let start = if start.dims.is_empty() { start.clone() } else { ctx.op("reshape", &[start], "", &[], start.dt) };
    let zero = ctx.splat(0.0, &[], start.dt);
    (0..rank).map(|i| if i == axis { start.clone() } else { zero.clone() }).collect()
}

pub fn dynamic_slice(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::DynamicSlice(d) = &n.op else { return None };
    let x = &ins[0];
    let axis = normalize_axis(d.axis, x.dims.len()).ok()?;
    let s = starts(ctx, &ins[1], x.dims.len(), axis);
    let mut args: Vec<&V> = vec![x];
    args.extend(s.iter());
    Some(ctx.op("dynamic_slice", &args, &format!("slice_sizes = {}", i64_array(dims)), dims, n.ty.dtype))
}

pub fn dynamic_update_slice(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::DynamicUpdateSlice(d) = &n.op else { return None };
    let x = &ins[0];
    let axis = normalize_axis(d.axis, x.dims.len()).ok()?;
    let s = starts(ctx, &ins[2], x.dims.len(), axis);
    let mut args: Vec<&V> = vec![x, &ins[1]];
    args.extend(s.iter());
    Some(ctx.op("dynamic_update_slice", &args, "", dims, n.ty.dtype))
}

/// Adds a check that every index lies in `0..dim`: XLA clamps (gather) or drops (scatter)
/// out-of-range indices, where RLX reports them.
fn check_indices(ctx: &mut Ctx, idx: &V, dim: usize, what: String) {
    let lo = ctx.splat(0.0, &idx.dims.clone(), idx.dt);
    let hi = ctx.splat(dim as f64, &idx.dims.clone(), idx.dt);
    let below = cmp(ctx, idx, &lo, "LT");
    let above = cmp(ctx, idx, &hi, "GE");
    let bad = ctx.op("or", &[&below, &above], "", &idx.dims.clone(), DType::Bool);
    let all: Vec<usize> = (0..idx.dims.len()).collect();
    let flag = if all.is_empty() { bad } else { reduce_axes(ctx, &bad, &all, "or", 0.0) };
    ctx.checks.push((flag, Check { message: format!("{what}: an index is outside 0..{dim}") }));
}

/// numpy `take`: output dims are `x[:axis] + idx + x[axis+1:]`.
pub fn gather(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::Gather(g) = &n.op else { return None };
    let (x, idx) = (&ins[0], &ins[1]);
    let axis = normalize_axis(g.axis, x.dims.len()).ok()?;
    check_indices(ctx, idx, x.dims[axis], format!("gather along axis {axis}"));
    let k = idx.dims.len();
    let offset: Vec<usize> = (0..axis).chain(axis + k..dims.len()).collect();
    let sizes: Vec<usize> = x.dims.iter().enumerate().map(|(i, &d)| if i == axis { 1 } else { d }).collect();
    let attrs = format!(
        "dimension_numbers = #stablehlo.gather<offset_dims = [{}], collapsed_slice_dims = [{axis}], \
         start_index_map = [{axis}], index_vector_dim = {k}>, slice_sizes = {}, indices_are_sorted = false",
        join(&offset),
        i64_array(&sizes)
    );
    Some(ctx.op("gather", &[x, idx], &attrs, dims, n.ty.dtype))
}

/// `out = target; out[.., idx[j], ..] += updates[.., j, ..]`.
pub fn scatter_add(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::ScatterAdd(s) = &n.op else { return None };
    let (t, idx, u) = (&ins[0], &ins[1], &ins[2]);
    let axis = normalize_axis(s.axis, t.dims.len()).ok()?;
    check_indices(ctx, idx, t.dims[axis], format!("scatter_add along axis {axis}"));
    let k = idx.dims.len();
    let window: Vec<usize> = (0..axis).chain(axis + k..u.dims.len()).collect();
    let attrs = format!(
        "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [{}], inserted_window_dims = [{axis}], \
         scatter_dims_to_operand_dims = [{axis}], index_vector_dim = {k}>, indices_are_sorted = false, unique_indices = false",
        join(&window)
    );
    Some(ctx.op_region("scatter", &[t, idx, u], &attrs, &region("add", t.dt), &[(dims.to_vec(), t.dt)]).remove(0))
}

/// Running sum by `reduce_window` (window = the whole axis, padded in front); exclusive sums
/// shift the input by one first, reverse ones flip before and after.
pub fn cumsum(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::Cumsum(c) = &n.op else { return None };
    let r = dims.len();
    let axis = normalize_axis(c.axis, r).ok()?;
    let len = dims[axis];
    let dt = n.ty.dtype;
    let mut x = ins[0].clone();
    if c.reverse {
        x = ctx.op("reverse", &[&x], &format!("dimensions = {}", i64_array([axis])), dims, dt);
    }
    if c.exclusive {
        let z = ctx.splat(0.0, &[], dt);
        let lo: Vec<i64> = (0..r).map(|i| (i == axis) as i64).collect();
        let hi: Vec<i64> = lo.iter().map(|v| -v).collect();
        let attrs = format!(
            "edge_padding_low = {}, edge_padding_high = {}, interior_padding = {}",
            i64_array(&lo),
            i64_array(&hi),
            i64_array(vec![0; r])
        );
        x = ctx.op("pad", &[&x, &z], &attrs, dims, dt);
    }
    let window: Vec<usize> = (0..r).map(|i| if i == axis { len.max(1) } else { 1 }).collect();
    let pad: Vec<String> =
        (0..r).map(|i| format!("[{}, 0]", if i == axis { len.saturating_sub(1) } else { 0 })).collect();
    let init = ctx.splat(0.0, &[], dt);
    let attrs = format!(
        "window_dimensions = {}, window_strides = {}, padding = dense<[{}]> : tensor<{r}x2xi64>",
        i64_array(&window),
        i64_array(vec![1; r]),
        pad.join(", ")
    );
    let mut y = if r == 0 {
        x
    } else {
        ctx.op_region("reduce_window", &[&x, &init], &attrs, &region("add", dt), &[(dims.to_vec(), dt)]).remove(0)
    };
    if c.reverse {
        y = ctx.op("reverse", &[&y], &format!("dimensions = {}", i64_array([axis])), dims, dt);
    }
    Some(y)
}

/// The `k` largest along the last axis, largest first, ties to the lower index, NaN largest:
/// a stable descending sort of (value, index) pairs, then the first `k`.
pub fn top_k(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::TopK(t) = &n.op else { return None };
    let x = &ins[0];
    if x.dt == DType::Bool {
        return None;
    }
    let r = x.dims.len();
    let axis = r - 1;
    let iota = ctx.op("iota", &[], &format!("iota_dimension = {axis} : i64"), &x.dims.clone(), DType::I64);
    let (tv, ti) = (tensor_ty(&[], x.dt), tensor_ty(&[], DType::I64));
    let attrs_cmp = |dir: &str| super::emit::compare_attrs(dir, x.dt);
    let body = if x.dt.class() == DTypeClass::Float {
        format!(
            "    ^bb0(%a: {tv}, %b: {tv}, %i: {ti}, %j: {ti}):\n\
             \x20     %gt = \"stablehlo.compare\"(%a, %b) {{{gt}}} : ({tv}, {tv}) -> tensor<i1>\n\
             \x20     %an = \"stablehlo.compare\"(%a, %a) {{{ne}}} : ({tv}, {tv}) -> tensor<i1>\n\
             \x20     %bn = \"stablehlo.compare\"(%b, %b) {{{ne}}} : ({tv}, {tv}) -> tensor<i1>\n\
             \x20     %bok = \"stablehlo.not\"(%bn) : (tensor<i1>) -> tensor<i1>\n\
             \x20     %nan = \"stablehlo.and\"(%an, %bok) : (tensor<i1>, tensor<i1>) -> tensor<i1>\n\
             \x20     %r = \"stablehlo.or\"(%gt, %nan) : (tensor<i1>, tensor<i1>) -> tensor<i1>\n\
             \x20     \"stablehlo.return\"(%r) : (tensor<i1>) -> ()",
            gt = attrs_cmp("GT"),
            ne = attrs_cmp("NE")
        )
    } else {
        format!(
            "    ^bb0(%a: {tv}, %b: {tv}, %i: {ti}, %j: {ti}):\n\
             \x20     %r = \"stablehlo.compare\"(%a, %b) {{{gt}}} : ({tv}, {tv}) -> tensor<i1>\n\
             \x20     \"stablehlo.return\"(%r) : (tensor<i1>) -> ()",
            gt = attrs_cmp("GT")
        )
    };
    let attrs = format!("dimension = {axis} : i64, is_stable = true");
    let sorted =
        ctx.op_region("sort", &[x, &iota], &attrs, &body, &[(x.dims.clone(), x.dt), (x.dims.clone(), DType::I64)]);
    let pick = match t.output {
        TopKOutput::Values => &sorted[0],
        TopKOutput::Indices => &sorted[1],
    };
    let limits: Vec<usize> = x.dims.iter().enumerate().map(|(i, &d)| if i == axis { t.k } else { d }).collect();
    let attrs = format!(
        "start_indices = {}, limit_indices = {}, strides = {}",
        i64_array(vec![0; r]),
        i64_array(&limits),
        i64_array(vec![1; r])
    );
    Some(ctx.op("slice", &[pick], &attrs, dims, n.ty.dtype))
}

/// `start + i * step` for i in 0..n, computed in f64 and converted.
pub fn arange(ctx: &mut Ctx, n: &Node, _: &[V], dims: &[usize]) -> Option<V> {
    let Op::Arange(a) = &n.op else { return None };
    let i = ctx.op("iota", &[], "iota_dimension = 0 : i64", dims, DType::F64);
    let step = ctx.splat(a.step, dims, DType::F64);
    let start = ctx.splat(a.start, dims, DType::F64);
    let m = ctx.op("multiply", &[&i, &step], "", dims, DType::F64);
    let v = ctx.op("add", &[&m, &start], "", dims, DType::F64);
    Some(if n.ty.dtype == DType::F64 { v } else { ctx.op("convert", &[&v], "", dims, n.ty.dtype) })
}

fn join(v: &[usize]) -> String {
    v.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
}
