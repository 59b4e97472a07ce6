//! Comparisons (f32, i32 or i64 inputs), where, and top_k. Bools live on the device as one u32
//! per element (0 or 1); the executable converts them at upload and readback.

use super::{Bind, Ctx, Dispatch, Kernel, Plan, WG, broadcast_strides, decls, groups_for, module, offset_code};
use rlx_driver::KernelTable;
use rlx_ir::ops::{CompareKind, TopKOutput};
use rlx_ir::{DType, Op, OpKind, Result};

/// Dtypes of compare, where and top_k nodes.
const LOGIC: &[DType] = &[DType::F32, DType::I32, DType::I64, DType::Bool];

pub(super) fn register(t: &mut KernelTable<Kernel>) {
    t.register(OpKind::Compare, LOGIC, Kernel { build: compare, accepts: compare_ok });
    t.register(OpKind::Where, LOGIC, Kernel { build: where_, accepts: where_ok });
    t.register(OpKind::TopK, LOGIC, Kernel { build: top_k, accepts: top_k_ok });
    t.register(OpKind::ArgMax, LOGIC, Kernel { build: argmax, accepts: top_k_ok });
    t.register(OpKind::Cast, LOGIC, Kernel { build: cast, accepts: cast_ok });
}

fn compare_ok(ctx: &Ctx<'_>) -> bool {
    ctx.out.dtype == DType::Bool && matches!(ctx.ins[0].dtype, DType::F32 | DType::I32 | DType::I64)
}

fn where_ok(ctx: &Ctx<'_>) -> bool {
    ctx.ins[0].dtype == DType::Bool && ctx.out.dtype == DType::F32
}

/// Casts among f32, i32, i64 and bool, except float to integer (its saturating truncation to
/// 64 bits is not written in WGSL yet).
fn cast_ok(ctx: &Ctx<'_>) -> bool {
    !(ctx.ins[0].dtype == DType::F32 && matches!(ctx.out.dtype, DType::I32 | DType::I64))
}

fn top_k_ok(ctx: &Ctx<'_>) -> bool {
    ctx.ins[0].dtype == DType::F32
}

/// Broadcast offset variables `o{i}` of every input for output element `i`.
fn offsets(ctx: &Ctx<'_>) -> String {
    let od = ctx.out_dims();
    let mut s = String::new();
    for i in 0..ctx.ins.len() {
        let id = ctx.in_dims(i);
        if id == od {
            s += &format!("let o{i} = i;\n");
        } else {
            s += &offset_code(&format!("o{i}"), "i", &od, &broadcast_strides(&id, &od));
        }
    }
    s
}

fn one_dispatch(ctx: &Ctx<'_>, bufs: &[(&str, &str, bool)], extra: &str, body: String) -> Result<Plan> {
    let n = ctx.out_numel();
    let groups = groups_for(n);
    let body = format!("let i = g * {WG}u + lid;\nif (i >= {n}u) {{ return; }}\n{body}");
    let wgsl = module(&decls(bufs), extra, WG, groups, &body);
    let mut binds: Vec<Bind> = (0..ctx.ins.len()).map(Bind::Input).collect();
    binds.push(Bind::Output);
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups, binds }]))
}

/// Signed 64-bit compare of (hi, lo) word pairs: -1, 0 or 1.
const CMP_I64: &str = "fn rlx_cmp64(ah: u32, al: u32, bh: u32, bl: u32) -> i32 {\n\
    let sa = bitcast<i32>(ah); let sb = bitcast<i32>(bh);\n\
    if (sa != sb) { return select(1, -1, sa < sb); }\n\
    if (al != bl) { return select(1, -1, al < bl); }\n\
    return 0;\n}\n";

fn compare(ctx: &Ctx<'_>) -> Result<Plan> {
    let Op::Compare(c) = ctx.op else { return Err(super::unsupported(ctx, "not a comparison")) };
    let op = match c.kind {
        CompareKind::Eq => "==",
        CompareKind::Ne => "!=",
        CompareKind::Lt => "<",
        CompareKind::Le => "<=",
        CompareKind::Gt => ">",
        CompareKind::Ge => ">=",
    };
    let dt = ctx.ins[0].dtype;
    let (ty, test) = match dt {
        DType::I64 => ("u32", format!("rlx_cmp64(a[2u * o0 + 1u], a[2u * o0], b[2u * o1 + 1u], b[2u * o1]) {op} 0")),
        DType::I32 => ("i32", format!("a[o0] {op} b[o1]")),
        _ => ("f32", format!("a[o0] {op} b[o1]")),
    };
    let body = format!("{}out[i] = select(0u, 1u, {test});", offsets(ctx));
    one_dispatch(ctx, &[("a", ty, false), ("b", ty, false), ("out", "u32", true)], CMP_I64, body)
}

fn where_(ctx: &Ctx<'_>) -> Result<Plan> {
    let body = format!("{}out[i] = select(b[o2], a[o1], c[o0] != 0u);", offsets(ctx));
    one_dispatch(ctx, &[("c", "u32", false), ("a", "f32", false), ("b", "f32", false), ("out", "f32", true)], "", body)
}

/// top_k along the last axis by ranks: element j of a row lands at position rank(j) when that
/// is below k, where rank counts the elements ordered before it (larger, NaN largest, ties by
/// lower index). One thread per input element; O(n) work each.
fn top_k(ctx: &Ctx<'_>) -> Result<Plan> {
    let Op::TopK(t) = ctx.op else { return Err(super::unsupported(ctx, "not top_k")) };
    let xd = ctx.in_dims(0);
    let n = xd.last().copied().unwrap_or(1);
    let total: usize = xd.iter().product();
    let k = t.k;
    let (ty, write) = match t.output {
        TopKOutput::Values => ("f32", "out[r * K + rank] = v;"),
        TopKOutput::Indices => ("u32", "out[2u * (r * K + rank)] = j; out[2u * (r * K + rank) + 1u] = 0u;"),
    };
    let extra = format!(
        "const K: u32 = {k}u;\n\
         fn before(a: f32, ia: u32, b: f32, ib: u32) -> bool {{\n\
           let na = rlx_isnan(a); let nb = rlx_isnan(b);\n\
           if (na || nb) {{ return (na && !nb) || (na && nb && ia < ib); }}\n\
           return a > b || (a == b && ia < ib);\n}}\n"
    );
    let body = format!(
        "let i = g * {WG}u + lid;\nif (i >= {total}u) {{ return; }}\n\
         let r = i / {n}u;\nlet j = i % {n}u;\nlet v = x[i];\nvar rank: u32 = 0u;\n\
         for (var q: u32 = 0u; q < {n}u; q = q + 1u) {{ if (before(x[r * {n}u + q], q, v, j)) {{ rank = rank + 1u; }} }}\n\
         if (rank < K) {{ {write} }}"
    );
    let groups = groups_for(total);
    let wgsl = module(&decls(&[("x", "f32", false), ("out", ty, true)]), &extra, WG, groups, &body);
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups, binds: vec![Bind::Input(0), Bind::Output] }]))
}

/// argmax along one axis: one thread per output; the first NaN wins, else the first maximum.
fn argmax(ctx: &Ctx<'_>) -> Result<Plan> {
    let Op::ArgMax(op) = ctx.op else { return Err(super::unsupported(ctx, "not argmax")) };
    let xd = ctx.in_dims(0);
    let r = xd.len() as i64;
    let a = if op.axis < 0 { op.axis + r } else { op.axis } as usize;
    let n = xd[a];
    let inner: usize = xd[a + 1..].iter().product();
    let lanes = ctx.out_numel();
    let body = format!(
        "let l = g * {WG}u + lid;\nif (l >= {lanes}u) {{ return; }}\n\
         let base = (l / {inner}u) * {ni}u + l % {inner}u;\n\
         var best: f32 = 0.0;\nvar at: u32 = 0xffffffffu;\n\
         for (var j: u32 = 0u; j < {n}u; j = j + 1u) {{\n\
           let v = x[base + j * {inner}u];\n\
           if (at == 0xffffffffu || (!rlx_isnan(best) && (rlx_isnan(v) || v > best))) {{ best = v; at = j; }}\n\
         }}\n\
         out[2u * l] = at;\nout[2u * l + 1u] = 0u;",
        ni = n * inner,
    );
    let groups = groups_for(lanes);
    let wgsl = module(&decls(&[("x", "f32", false), ("out", "u32", true)]), "", WG, groups, &body);
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups, binds: vec![Bind::Input(0), Bind::Output] }]))
}

/// Dtype conversions, one thread per element. i64 values are (lo, hi) u32 word pairs; i64 to f32
/// is exact below 2^24 in magnitude and within one rounding step above.
fn cast(ctx: &Ctx<'_>) -> Result<Plan> {
    let (from, to) = (ctx.ins[0].dtype, ctx.out.dtype);
    if from == to {
        return Ok(Plan::Copy);
    }
    let (ti, to_ty) = (if from == DType::F32 { "f32" } else { "u32" }, if to == DType::F32 { "f32" } else { "u32" });
    let body = match (from, to) {
        (DType::I64, DType::F32) => "out[i] = f32(bitcast<i32>(x[2u * i + 1u])) * 4294967296.0 + f32(x[2u * i]);",
        (DType::I32, DType::F32) => "out[i] = f32(bitcast<i32>(x[i]));",
        (DType::Bool, DType::F32) => "out[i] = select(0.0, 1.0, x[i] != 0u);",
        (DType::F32, DType::Bool) => "out[i] = select(0u, 1u, x[i] != 0.0);",
        (DType::I64, DType::Bool) => "out[i] = select(0u, 1u, (x[2u * i] | x[2u * i + 1u]) != 0u);",
        (DType::I32, DType::Bool) => "out[i] = select(0u, 1u, x[i] != 0u);",
        (DType::I64, DType::I32) => "out[i] = x[2u * i];",
        (DType::I32, DType::I64) => {
            "out[2u * i] = x[i];\nout[2u * i + 1u] = select(0u, 0xffffffffu, (x[i] & 0x80000000u) != 0u);"
        }
        (DType::Bool, DType::I32) => "out[i] = x[i];",
        (DType::Bool, DType::I64) => "out[2u * i] = x[i];\nout[2u * i + 1u] = 0u;",
        _ => return Err(super::unsupported(ctx, "no WGSL for this conversion")),
    };
    one_dispatch(ctx, &[("x", ti, false), ("out", to_ty, true)], "", body.to_string())
}
