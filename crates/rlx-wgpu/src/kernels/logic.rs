//! Comparisons (f32, i32 or i64 inputs), where, and top_k. Bools live on the device as one u32
//! per element (0 or 1); the executable converts them at upload and readback.

use super::{Bind, Ctx, Dispatch, Kernel, Plan, WG, broadcast_strides, decls, groups_for, module, offset_code};
use rlx_driver::KernelTable;
use rlx_ir::ops::{CompareKind, TopKOutput};
use rlx_ir::{DType, Op, OpKind, Result};

/// Dtypes of compare, where and top_k nodes.
const LOGIC: &[DType] = &[DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32, DType::I64, DType::Bool];
/// Dtypes casts convert among (bytes packed four to a word).
const CASTS: &[DType] =
    &[DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32, DType::I64, DType::Bool, DType::U8, DType::I8];

/// Casts involving f16 need shader-f16 on the device.
fn cast_ok(ctx: &Ctx<'_>) -> bool {
    [ctx.ins[0].dtype, ctx.out.dtype].iter().all(|&d| d != DType::F16 || super::is_float(d))
}

pub(super) fn register(t: &mut KernelTable<Kernel>) {
    t.register(OpKind::Compare, LOGIC, Kernel { build: compare, accepts: compare_ok });
    t.register(OpKind::Where, LOGIC, Kernel { build: where_, accepts: where_ok });
    t.register(OpKind::TopK, LOGIC, Kernel { build: top_k, accepts: top_k_ok });
    t.register(OpKind::ArgMax, LOGIC, Kernel { build: argmax, accepts: top_k_ok });
    t.register(OpKind::Cast, CASTS, Kernel { build: cast, accepts: cast_ok });
}

fn compare_ok(ctx: &Ctx<'_>) -> bool {
    ctx.out.dtype == DType::Bool
        && matches!(ctx.ins[0].dtype, DType::F32 | DType::BF16 | DType::I32 | DType::U32 | DType::I64)
}

fn where_ok(ctx: &Ctx<'_>) -> bool {
    ctx.ins[0].dtype == DType::Bool && (ctx.out.dtype != DType::F16 || super::is_float(DType::F16))
}

fn top_k_ok(ctx: &Ctx<'_>) -> bool {
    matches!(ctx.ins[0].dtype, DType::F32 | DType::BF16 | DType::I32 | DType::I64)
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
        DType::U32 => ("u32", format!("a[o0] {op} b[o1]")),
        // NaN compares unequal to everything, spelled out as some drivers order `!=`.
        _ if c.kind == CompareKind::Ne => ("f32", "a[o0] != b[o1] || rlx_isnan(a[o0]) || rlx_isnan(b[o1])".into()),
        _ => ("f32", format!("a[o0] {op} b[o1]")),
    };
    let body = format!("{}out[i] = select(0u, 1u, {test});", offsets(ctx));
    one_dispatch(ctx, &[("a", ty, false), ("b", ty, false), ("out", "u32", true)], CMP_I64, body)
}

fn where_(ctx: &Ctx<'_>) -> Result<Plan> {
    let w = if ctx.out.dtype == DType::I64 { 2 } else { 1 };
    let t = if ctx.out.dtype == DType::F16 { "f16" } else { "u32" };
    let body = format!(
        "{}for (var k: u32 = 0u; k < {w}u; k = k + 1u) {{\n\
           out[{w}u * i + k] = select(b[{w}u * o2 + k], a[{w}u * o1 + k], c[o0] != 0u);\n}}",
        offsets(ctx)
    );
    one_dispatch(ctx, &[("c", "u32", false), ("a", t, false), ("b", t, false), ("out", t, true)], "", body)
}

/// `gt(p, q)`: element p orders before element q by value (NaN largest); `eq(p, q)`: equal
/// values (NaN equals NaN), for x stored as u32 words of `dt` (f32, i32 or i64).
fn order_fns(dt: DType) -> String {
    let (gt, eq) = match dt {
        DType::I64 => (
            "return rlx_cmp64(x[2u * p + 1u], x[2u * p], x[2u * q + 1u], x[2u * q]) > 0;",
            "return x[2u * p] == x[2u * q] && x[2u * p + 1u] == x[2u * q + 1u];",
        ),
        DType::I32 => ("return bitcast<i32>(x[p]) > bitcast<i32>(x[q]);", "return x[p] == x[q];"),
        _ => (
            "let a = bitcast<f32>(x[p]); let b = bitcast<f32>(x[q]);\n\
             let na = rlx_isnan(a); let nb = rlx_isnan(b);\n\
             if (na || nb) { return na && !nb; }\nreturn a > b;",
            "let a = bitcast<f32>(x[p]); let b = bitcast<f32>(x[q]);\n\
             return (rlx_isnan(a) && rlx_isnan(b)) || a == b;",
        ),
    };
    format!("{CMP_I64}fn gt(p: u32, q: u32) -> bool {{\n{gt}\n}}\nfn eq(p: u32, q: u32) -> bool {{\n{eq}\n}}\n")
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
    let w = if ctx.ins[0].dtype == DType::I64 { 2 } else { 1 };
    let write = match t.output {
        TopKOutput::Values => format!(
            "for (var c: u32 = 0u; c < {w}u; c = c + 1u) {{ out[{w}u * (r * K + rank) + c] = x[{w}u * i + c]; }}"
        ),
        TopKOutput::Indices => "out[2u * (r * K + rank)] = j; out[2u * (r * K + rank) + 1u] = 0u;".into(),
    };
    let extra = format!("const K: u32 = {k}u;\n{}", order_fns(ctx.ins[0].dtype));
    let body = format!(
        "let i = g * {WG}u + lid;\nif (i >= {total}u) {{ return; }}\n\
         let r = i / {n}u;\nlet j = i % {n}u;\nvar rank: u32 = 0u;\n\
         for (var q: u32 = 0u; q < {n}u; q = q + 1u) {{\n\
           let p = r * {n}u + q;\n\
           if (gt(p, i) || (q < j && eq(p, i))) {{ rank = rank + 1u; }}\n}}\n\
         if (rank < K) {{ {write} }}"
    );
    let groups = groups_for(total);
    let wgsl = module(&decls(&[("x", "u32", false), ("out", "u32", true)]), &extra, WG, groups, &body);
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
         var best: u32 = base;\nvar at: u32 = 0u;\n\
         for (var j: u32 = 1u; j < {n}u; j = j + 1u) {{\n\
           let p = base + j * {inner}u;\n\
           if (gt(p, best)) {{ best = p; at = j; }}\n\
         }}\n\
         out[2u * l] = at;\nout[2u * l + 1u] = 0u;",
        ni = n * inner,
    );
    let groups = groups_for(lanes);
    let extra = order_fns(ctx.ins[0].dtype);
    let wgsl = module(&decls(&[("x", "u32", false), ("out", "u32", true)]), &extra, WG, groups, &body);
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups, binds: vec![Bind::Input(0), Bind::Output] }]))
}

/// Dtype conversions. Integers pass through a 64-bit (lo, hi) word pair, floats become
/// integers by truncation saturated to i64 then wrapped to the target, as the reference does.
/// Byte targets (u8, i8) are packed four to a word: one thread writes one word.
fn cast(ctx: &Ctx<'_>) -> Result<Plan> {
    let (from, to) = (ctx.ins[0].dtype, ctx.out.dtype);
    if from == to {
        return Ok(Plan::Copy);
    }
    let src = match from {
        DType::F32 | DType::F16 | DType::BF16 => "let f = f32(x[e]);\nlet iv = rlx_f2i64(f);",
        DType::I32 => "let lo = x[e];\nlet iv = vec2<u32>(lo, select(0u, 0xffffffffu, (lo & 0x80000000u) != 0u));",
        DType::U32 | DType::Bool => "let iv = vec2<u32>(x[e], 0u);",
        DType::I64 => "let iv = vec2<u32>(x[2u * e], x[2u * e + 1u]);",
        DType::U8 => "let iv = vec2<u32>((x[e / 4u] >> (8u * (e % 4u))) & 0xffu, 0u);",
        DType::I8 => {
            "let sb = bitcast<i32>(x[e / 4u] << (24u - 8u * (e % 4u))) >> 24u;\n\
             let iv = vec2<u32>(bitcast<u32>(sb), select(0u, 0xffffffffu, sb < 0));"
        }
        _ => return Err(super::unsupported(ctx, "no WGSL for this source dtype")),
    };
    let float_from = matches!(from, DType::F32 | DType::F16 | DType::BF16);
    let fl = if float_from { "" } else { "let f = rlx_i64_f32(iv);" };
    let write = match to {
        DType::F32 => "out[e] = f;",
        DType::F16 => "out[e] = rlx_to_f16(f);",
        DType::BF16 => "out[e] = rlx_round_bf(f);",
        DType::I32 | DType::U32 => "out[e] = iv.x;",
        DType::I64 => "out[2u * e] = iv.x;\nout[2u * e + 1u] = iv.y;",
        // NaN is true, written out: some drivers compare != as ordered.
        DType::Bool if float_from => "out[e] = select(0u, 1u, f != 0.0 || rlx_isnan(f));",
        DType::Bool => "out[e] = select(0u, 1u, (iv.x | iv.y) != 0u);",
        DType::U8 | DType::I8 => "word = word | ((iv.x & 0xffu) << (8u * c));",
        _ => return Err(super::unsupported(ctx, "no WGSL for this target dtype")),
    };
    let word = |d: DType| if d.is_float() { super::float_ty(d) } else { "u32" };
    let (ti, to_ty) = (word(from), word(to));
    let n = ctx.out_numel();
    let (body, threads) = if matches!(to, DType::U8 | DType::I8) {
        let body = format!(
            "let w = g * {WG}u + lid;\nif (w >= {}u) {{ return; }}\nvar word: u32 = 0u;\n\
             for (var c: u32 = 0u; c < 4u; c = c + 1u) {{\nlet e = 4u * w + c;\nif (e < {n}u) {{\n{src}\n{write}\n}}\n}}\n\
             out[w] = word;",
            n.div_ceil(4)
        );
        (body, n.div_ceil(4))
    } else {
        (format!("let e = g * {WG}u + lid;\nif (e >= {n}u) {{ return; }}\n{src}\n{fl}\n{write}"), n)
    };
    let groups = groups_for(threads);
    let wgsl = module(&decls(&[("x", ti, false), ("out", to_ty, true)]), CAST_HELPERS, WG, groups, &body);
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups, binds: vec![Bind::Input(0), Bind::Output] }]))
}

/// f32 to i64 (truncate, saturate, NaN to 0) and i64 to f32, on (lo, hi) word pairs.
const CAST_HELPERS: &str = "
fn rlx_f2i64(x: f32) -> vec2<u32> {
    if (rlx_isnan(x)) { return vec2<u32>(0u, 0u); }
    let a = abs(trunc(x));
    if (a >= 9223372036854775808.0) {
        return select(vec2<u32>(0xffffffffu, 0x7fffffffu), vec2<u32>(0u, 0x80000000u), x < 0.0);
    }
    var hi: u32 = 0u;
    var lo: u32 = 0u;
    if (a < 4294967296.0) { lo = u32(a); } else {
        hi = u32(floor(a / 4294967296.0));
        lo = u32(a - f32(hi) * 4294967296.0);
    }
    if (x < 0.0) {
        lo = ~lo + 1u;
        hi = ~hi + select(0u, 1u, lo == 0u);
    }
    return vec2<u32>(lo, hi);
}
fn rlx_i64_f32(v: vec2<u32>) -> f32 {
    let fits = v.y == select(0u, 0xffffffffu, (v.x & 0x80000000u) != 0u);
    if (fits) { return f32(bitcast<i32>(v.x)); }
    let neg = (v.y & 0x80000000u) != 0u;
    var lo = v.x;
    var hi = v.y;
    if (neg) { lo = ~lo + 1u; hi = ~hi + select(0u, 1u, lo == 0u); }
    let m = f32(hi) * 4294967296.0 + f32(lo);
    return select(m, -m, neg);
}
";
