//! Row kernels written by hand: reductions, softmax, log_softmax, layer_norm, rms_norm, cumsum.
//! One workgroup of `RW` threads per output row, combining partials in workgroup memory.

use super::{
    Bind, Ctx, Dispatch, FLOATS, Kernel, Plan, decls, float_ty, module, offset_code, same_float, store_fn, strides,
};
use crate::wexpr::literal;
use rlx_driver::KernelTable;
use rlx_ir::ops::ReduceKind;
use rlx_ir::{DType, Op, OpKind, Result};

pub(super) fn register(t: &mut KernelTable<Kernel>) {
    t.register(OpKind::Reduce, FLOATS, Kernel { build: reduce, accepts: same_float });
    t.register(OpKind::Softmax, FLOATS, Kernel { build: lanes, accepts: same_float });
    t.register(OpKind::LogSoftmax, FLOATS, Kernel { build: lanes, accepts: same_float });
    t.register(OpKind::LayerNorm, FLOATS, Kernel { build: lanes, accepts: same_float });
    t.register(OpKind::RmsNorm, FLOATS, Kernel { build: lanes, accepts: same_float });
    t.register(
        OpKind::Cumsum,
        &[DType::F32, DType::F16, DType::BF16, DType::I32],
        Kernel { build: cumsum, accepts: cumsum_ok },
    );
}

/// Threads per row.
const RW: u32 = 64;

/// Workgroup scratch and a tree combine of `acc` across the row's threads into `red[0]`.
const SCRATCH: &str = "var<workgroup> red: array<f32, 64>;\n";

fn tree(combine: &str) -> String {
    if super::subgroups() {
        // Butterfly within each subgroup (every lane ends with its subgroup's result), then
        // thread 0 combines the subgroups' results in subgroup order.
        return format!(
            "{{ var v = acc;\n\
             for (var o: u32 = sgs / 2u; o > 0u; o = o >> 1u) {{ let a = v; let b = subgroupShuffleXor(v, o); v = {combine}; }}\n\
             if (sgi == 0u) {{ red[sgid] = v; }}\n\
             workgroupBarrier();\n\
             if (lid == 0u) {{ var w = red[0]; for (var s: u32 = 1u; s < nsg; s = s + 1u) {{ let a = w; let b = red[s]; w = {combine}; }} red[0] = w; }}\n\
             workgroupBarrier(); }}\n"
        );
    }
    format!(
        "red[lid] = acc;\nworkgroupBarrier();\n\
         for (var s: u32 = 32u; s > 0u; s = s >> 1u) {{\n\
           if (lid < s) {{ let a = red[lid]; let b = red[lid + s]; red[lid] = {combine}; }}\n\
           workgroupBarrier();\n}}\n"
    )
}

fn normalize(axis: i64, rank: usize) -> usize {
    if axis < 0 { (axis + rank as i64).max(0) as usize } else { axis as usize }
}

/// Any f32 reduction over any axes (see `rows`).
fn reduce(ctx: &Ctx<'_>) -> Result<Plan> {
    let Op::Reduce(r) = ctx.op else { return Err(super::unsupported(ctx, "not a reduction")) };
    let count: usize = ctx.in_dims(0).iter().product::<usize>() / ctx.out_numel().max(1);
    let (init, combine) = match r.kind {
        ReduceKind::Sum | ReduceKind::Mean => ("0.0", "a + b"),
        ReduceKind::Prod => ("1.0", "a * b"),
        ReduceKind::Max => ("bitcast<f32>(0xff800000u)", "rlx_max(a, b)"),
        ReduceKind::Min => ("bitcast<f32>(0x7f800000u)", "rlx_min(a, b)"),
    };
    let fin = if r.kind == ReduceKind::Mean { format!("red[0] / {}", literal(count as f64)) } else { "red[0]".into() };
    let (io, st) = (float_ty(ctx.out.dtype), store_fn(ctx.out.dtype));
    rows(ctx, ("f32", io, st), init, combine, &fin)
}

/// A reduction in WGSL type `ty`: row `g` is one output element; threads stride over the
/// reduced positions, whose offsets come from the reduced axes' strides, then combine in a tree.
/// `tys` = (accumulator type, buffer element type, store conversion function).
pub(super) fn rows(ctx: &Ctx<'_>, tys: (&str, &str, &str), init: &str, combine: &str, fin: &str) -> Result<Plan> {
    let (ty, io, store) = tys;
    let Op::Reduce(r) = ctx.op else { return Err(super::unsupported(ctx, "not a reduction")) };
    let xd = ctx.in_dims(0);
    let st = strides(&xd);
    // No axes reduces nothing (each output is its one input element).
    let axes: Vec<usize> = r.axes.iter().map(|&a| normalize(a, xd.len())).collect();
    let keep: Vec<usize> = (0..xd.len()).filter(|a| !axes.contains(a)).collect();
    let kd: Vec<usize> = keep.iter().map(|&a| xd[a]).collect();
    let ks: Vec<usize> = keep.iter().map(|&a| st[a]).collect();
    let rd: Vec<usize> = axes.iter().map(|&a| xd[a]).collect();
    let rs: Vec<usize> = axes.iter().map(|&a| st[a]).collect();
    let count: usize = rd.iter().product();
    let rows = ctx.out_numel();
    let body = format!(
        "{base}var acc: {ty} = {init};\n\
         for (var r: u32 = lid; r < {count}u; r = r + {RW}u) {{\n{roff}let a = acc; let b = {ty}(x[base + ro]); acc = {combine};\n}}\n\
         {tree}if (lid == 0u) {{ out[g] = {store}({fin}); }}",
        base = offset_code("base", "g", &kd, &ks),
        roff = offset_code("ro", "r", &rd, &rs),
        tree = tree(combine),
    );
    let scratch = format!("var<workgroup> red: array<{ty}, 64>;\n");
    let wgsl = module(&decls(&[("x", io, false), ("out", io, true)]), &scratch, RW, rows as u32, &body);
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups: rows as u32, binds: vec![Bind::Input(0), Bind::Output] }]))
}

/// Softmax, log_softmax (any axis) and layer/rms norm (last axis): one workgroup per lane.
fn lanes(ctx: &Ctx<'_>) -> Result<Plan> {
    let xd = ctx.in_dims(0);
    let axis = match ctx.op {
        Op::Softmax(s) => normalize(s.axis, xd.len()),
        Op::LogSoftmax(s) => normalize(s.axis, xd.len()),
        _ => xd.len().saturating_sub(1),
    };
    let n = xd.get(axis).copied().unwrap_or(1);
    let inner: usize = xd[axis + 1..].iter().product();
    let rows = xd.iter().product::<usize>() / n.max(1);
    let nf = literal(n as f64);
    // f16 buffers are read into f32 and results rounded back at the store.
    let (ty, st) = (float_ty(ctx.out.dtype), store_fn(ctx.out.dtype));
    // Element j of lane g sits at base + j * inner.
    let head = format!("let base = (g / {inner}u) * {} + g % {inner}u;\n", n * inner);
    let at = |j: &str| format!("base + {j} * {inner}u");
    let sum_of = |expr: &str| {
        format!(
            "acc = 0.0;\nfor (var j: u32 = lid; j < {n}u; j = j + {RW}u) {{ let v = f32(x[{p}]); acc = acc + {expr}; }}\n{t}",
            p = at("j"),
            t = tree("a + b")
        )
    };
    let (decl, body, binds) = match ctx.op {
        Op::Softmax(_) | Op::LogSoftmax(_) => {
            let log = matches!(ctx.op, Op::LogSoftmax(_));
            let write = if log { "v - m - log(s)" } else { "exp(v - m) / s" };
            let body = format!(
                "{head}var acc: f32 = bitcast<f32>(0xff800000u);\n\
                 for (var j: u32 = lid; j < {n}u; j = j + {RW}u) {{ let a = acc; let b = f32(x[{p}]); acc = rlx_max(a, b); }}\n\
                 {t}let m = red[0];\nworkgroupBarrier();\n{s}let s = red[0];\n\
                 for (var j: u32 = lid; j < {n}u; j = j + {RW}u) {{ let v = f32(x[{p}]); out[{p}] = {st}({write}); }}",
                p = at("j"),
                t = tree("rlx_max(a, b)"),
                s = sum_of("exp(v - m)"),
            );
            (decls(&[("x", ty, false), ("out", ty, true)]), body, vec![Bind::Input(0), Bind::Output])
        }
        Op::LayerNorm(l) => {
            let body = format!(
                "{head}var acc: f32;\n{s1}let mean = red[0] / {nf};\nworkgroupBarrier();\n{s2}\
                 let r = 1.0 / sqrt(red[0] / {nf} + {eps});\n\
                 for (var j: u32 = lid; j < {n}u; j = j + {RW}u) {{ out[{p}] = {st}((f32(x[{p}]) - mean) * r * f32(gamma[j]) + f32(beta[j])); }}",
                s1 = sum_of("v"),
                s2 = sum_of("(v - mean) * (v - mean)"),
                eps = literal(l.eps),
                p = at("j"),
            );
            let d = decls(&[("x", ty, false), ("gamma", ty, false), ("beta", ty, false), ("out", ty, true)]);
            (d, body, vec![Bind::Input(0), Bind::Input(1), Bind::Input(2), Bind::Output])
        }
        Op::RmsNorm(l) => {
            let body = format!(
                "{head}var acc: f32;\n{s}let r = 1.0 / sqrt(red[0] / {nf} + {eps});\n\
                 for (var j: u32 = lid; j < {n}u; j = j + {RW}u) {{ out[{p}] = {st}(f32(x[{p}]) * r * f32(gamma[j])); }}",
                s = sum_of("v * v"),
                eps = literal(l.eps),
                p = at("j"),
            );
            let d = decls(&[("x", ty, false), ("gamma", ty, false), ("out", ty, true)]);
            (d, body, vec![Bind::Input(0), Bind::Input(1), Bind::Output])
        }
        _ => return Err(super::unsupported(ctx, "not a lane op")),
    };
    let wgsl = module(&decl, SCRATCH, RW, rows as u32, &body);
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups: rows as u32, binds }]))
}

/// Float dtypes the device computes with, or i32, in and out.
fn cumsum_ok(ctx: &Ctx<'_>) -> bool {
    ctx.out.dtype == DType::I32 || same_float(ctx)
}

/// Cumulative sum (floats summed in f32 and rounded at each store, or wrapping i32): one thread
/// per lane, a sequential scan along the axis.
fn cumsum(ctx: &Ctx<'_>) -> Result<Plan> {
    let Op::Cumsum(c) = ctx.op else { return Err(super::unsupported(ctx, "not cumsum")) };
    let xd = ctx.in_dims(0);
    let axis = normalize(c.axis, xd.len());
    let n = xd.get(axis).copied().unwrap_or(1);
    let inner: usize = xd[axis + 1..].iter().product();
    let lanes = xd.iter().product::<usize>() / n.max(1);
    let j = if c.reverse { format!("{}u - k", n.max(1) - 1) } else { "k".into() };
    let int = ctx.out.dtype == DType::I32;
    let (t, io, st) = if int { ("i32", "i32", "") } else { ("f32", float_ty(ctx.out.dtype), store_fn(ctx.out.dtype)) };
    let write = if c.exclusive {
        format!("out[p] = {st}(acc); acc = acc + v;")
    } else {
        format!("acc = acc + v; out[p] = {st}(acc);")
    };
    let body = format!(
        "let l = g * {wg}u + lid;\nif (l >= {lanes}u) {{ return; }}\n\
         let base = (l / {inner}u) * {} + l % {inner}u;\nvar acc: {t} = {t}(0);\n\
         for (var k: u32 = 0u; k < {n}u; k = k + 1u) {{ let p = base + ({j}) * {inner}u; let v = {t}(x[p]); {write} }}",
        n * inner,
        wg = super::WG,
    );
    let groups = super::groups_for(lanes);
    let wgsl = module(&decls(&[("x", io, false), ("out", io, true)]), "", super::WG, groups, &body);
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups, binds: vec![Bind::Input(0), Bind::Output] }]))
}
