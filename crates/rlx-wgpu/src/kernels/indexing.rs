//! Ops indexed by values: gather (with device-side range checks reported through the status
//! words) and rope (positions from an integer tensor, frequencies computed on the host in f64).

use super::{
    Bind, Ctx, Dispatch, FLOAT_AND_INDEX, Kernel, Plan, WG, decls, float_ty, groups_for, is_float, module, store_fn,
};
use crate::wexpr::literal;
use rlx_driver::KernelTable;
use rlx_ir::ops::rope::rope_inv_freq;
use rlx_ir::{DType, Op, OpKind, Result};

pub(super) fn register(t: &mut KernelTable<Kernel>) {
    t.register(OpKind::Gather, GATHER, Kernel { build: gather, accepts: gather_ok });
    t.register(OpKind::ScatterAdd, FLOAT_AND_INDEX, Kernel { build: scatter_add, accepts: scatter_ok });
    t.register(OpKind::Rope, FLOAT_AND_INDEX, Kernel { build: rope, accepts: float_data_int_index });
    t.register(OpKind::DynamicSlice, WORDS, Kernel { build: dynamic, accepts: dynamic_ok });
    t.register(OpKind::DynamicUpdateSlice, WORDS, Kernel { build: dynamic, accepts: dynamic_ok });
}

/// Dtypes stored as whole 32-bit words (i64 as two), moved by word copies.
const WORDS: &[DType] = &[DType::F32, DType::BF16, DType::I32, DType::U32, DType::I64, DType::Bool];

/// Data in a word dtype, the start an integer scalar.
fn dynamic_ok(ctx: &Ctx<'_>) -> bool {
    let start = ctx.ins[ctx.ins.len() - 1].dtype;
    matches!(start, DType::I32 | DType::I64 | DType::U32)
        && ctx.ins[..ctx.ins.len() - 1].iter().all(|s| s.dtype == ctx.out.dtype)
}

/// dynamic_slice and dynamic_update_slice: the start is read on the device and clamped to
/// `0..=dim - len` (JAX semantics); one thread per output word.
fn dynamic(ctx: &Ctx<'_>) -> Result<Plan> {
    let (axis, len, update) = match ctx.op {
        Op::DynamicSlice(d) => (d.axis, d.size, false),
        Op::DynamicUpdateSlice(d) => {
            let r = ctx.in_dims(1).len() as i64;
            let a = if d.axis < 0 { d.axis + r } else { d.axis } as usize;
            (d.axis, ctx.in_dims(1)[a], true)
        }
        _ => return Err(super::unsupported(ctx, "not a dynamic slice")),
    };
    let xd = ctx.in_dims(0);
    let a = if axis < 0 { axis + xd.len() as i64 } else { axis } as usize;
    let dim = xd[a];
    let inner: usize = xd[a + 1..].iter().product();
    let w = if ctx.out.dtype == DType::I64 { 2 } else { 1 };
    let n = ctx.out_numel() * w;
    let last = dim.saturating_sub(len);
    let start = ctx.ins.len() - 1;
    // Signed clamp of (hi, lo) to 0..=last.
    let clamp = format!(
        "{read}var s: u32 = lo;\n\
         if ((hi & 0x80000000u) != 0u {neg}) {{ s = 0u; }} else if (hi != 0u || lo > {last}u) {{ s = {last}u; }}\n",
        read = read_index(ctx.ins[start].dtype, "0u"),
        neg = if ctx.ins[start].dtype == DType::U32 { "&& false" } else { "" },
    );
    let (body, bufs, binds) = if update {
        let body = format!(
            "let i = g * {WG}u + lid;\nif (i >= {n}u) {{ return; }}\n{clamp}\
             let e = i / {w}u;\nlet c = i % {w}u;\n\
             let q = e % {inner}u;\nlet p = (e / {inner}u) % {dim}u;\nlet o = e / {oi}u;\n\
             if (p >= s && p < s + {len}u) {{ out[i] = u[{w}u * ((o * {len}u + p - s) * {inner}u + q) + c]; }}\n\
             else {{ out[i] = x[i]; }}",
            oi = dim * inner,
        );
        let bufs = decls(&[("x", "u32", false), ("u", "u32", false), ("ix", "u32", false), ("out", "u32", true)]);
        (body, bufs, vec![Bind::Input(0), Bind::Input(1), Bind::Input(2), Bind::Output])
    } else {
        let body = format!(
            "let i = g * {WG}u + lid;\nif (i >= {n}u) {{ return; }}\n{clamp}\
             let e = i / {w}u;\nlet c = i % {w}u;\n\
             let q = e % {inner}u;\nlet p = (e / {inner}u) % {len}u;\nlet o = e / {oi}u;\n\
             out[i] = x[{w}u * ((o * {dim}u + s + p) * {inner}u + q) + c];",
            oi = len * inner,
        );
        let bufs = decls(&[("x", "u32", false), ("ix", "u32", false), ("out", "u32", true)]);
        (body, bufs, vec![Bind::Input(0), Bind::Input(1), Bind::Output])
    };
    let groups = groups_for(n);
    let wgsl = module(&bufs, "", WG, groups, &body);
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups, binds }]))
}

/// Data and output in one float dtype; the second input holds i32, u32 or i64 indices.
fn float_data_int_index(ctx: &Ctx<'_>) -> bool {
    is_float(ctx.out.dtype)
        && ctx.ins[0].dtype == ctx.out.dtype
        && matches!(ctx.ins[1].dtype, DType::I32 | DType::I64 | DType::U32)
}

/// Float or i32 target and updates, integer indices.
fn scatter_ok(ctx: &Ctx<'_>) -> bool {
    (is_float(ctx.out.dtype) || ctx.out.dtype == DType::I32)
        && ctx.ins[0].dtype == ctx.out.dtype
        && ctx.ins[2].dtype == ctx.out.dtype
        && matches!(ctx.ins[1].dtype, DType::I32 | DType::I64 | DType::U32)
}

/// Data and indices of gather: word dtypes, and u8 indices (packed bytes).
const GATHER: &[DType] =
    &[DType::F32, DType::BF16, DType::I32, DType::U32, DType::I64, DType::Bool, DType::U8, DType::I8];

/// Data in a word or byte dtype; indices i32, i64, u32 or u8.
fn gather_ok(ctx: &Ctx<'_>) -> bool {
    ctx.ins[0].dtype == ctx.out.dtype && matches!(ctx.ins[1].dtype, DType::I32 | DType::I64 | DType::U32 | DType::U8)
}

/// WGSL reading index `p` of the index buffer `ix` (as u32 words) into `lo` and `hi`: the value
/// is `hi * 2^32 + lo` (i64), or sign-extended for i32.
fn read_index(dt: DType, p: &str) -> String {
    match dt {
        DType::I64 => format!("let lo = ix[2u * ({p})];\nlet hi = ix[2u * ({p}) + 1u];\n"),
        DType::I32 => format!("let lo = ix[{p}];\nlet hi = select(0u, 0xffffffffu, (lo & 0x80000000u) != 0u);\n"),
        DType::U8 => format!("let lo = (ix[({p}) / 4u] >> (8u * (({p}) % 4u))) & 0xffu;\nlet hi = 0u;\n"),
        _ => format!("let lo = ix[{p}];\nlet hi = 0u;\n"),
    }
}

/// numpy take along `axis`: out index (o, p, q) reads x[(o * dim + idx[p]) * inner + q].
fn gather(ctx: &Ctx<'_>) -> Result<Plan> {
    let Op::Gather(op) = ctx.op else { return Err(super::unsupported(ctx, "not gather")) };
    let xd = ctx.in_dims(0);
    let r = xd.len() as i64;
    let a = if op.axis < 0 { op.axis + r } else { op.axis } as usize;
    let dim = xd[a];
    let inner: usize = xd[a + 1..].iter().product();
    let nidx: usize = ctx.in_dims(1).iter().product();
    let w = if ctx.out.dtype == DType::I64 { 2 } else { 1 };
    let n = ctx.out_numel() * w;
    let read = read_index(ctx.ins[1].dtype, "p");
    let fail = check(dim, ctx.node, "out[i] = 0u;\nreturn;");
    let n = if matches!(ctx.out.dtype, DType::U8 | DType::I8) { ctx.out_numel().div_ceil(4) } else { n };
    let body = if matches!(ctx.out.dtype, DType::U8 | DType::I8) {
        // Bytes (packed weight rows): thread i assembles output word i from four gathered bytes.
        format!(
            "let i = g * {WG}u + lid;\nif (i >= {n}u) {{ return; }}\nvar word: u32 = 0u;\n\
             for (var c: u32 = 0u; c < 4u; c = c + 1u) {{\n\
               let e = 4u * i + c;\nif (e >= {numel}u) {{ break; }}\n\
               let q = e % {inner}u;\nlet p = (e / {inner}u) % {nidx}u;\nlet o = e / {pi}u;\n{read}{fail}\
               let s = (o * {dim}u + lo) * {inner}u + q;\n\
               word = word | (((x[s / 4u] >> (8u * (s % 4u))) & 0xffu) << (8u * c));\n\
             }}\nout[i] = word;",
            numel = ctx.out_numel(),
            pi = inner * nidx,
        )
    } else {
        // Thread i moves word c of element e.
        format!(
            "let i = g * {WG}u + lid;\nif (i >= {n}u) {{ return; }}\nlet e = i / {w}u;\nlet c = i % {w}u;\n\
         let q = e % {inner}u;\nlet p = (e / {inner}u) % {nidx}u;\nlet o = e / {pi};\n{read}{check}\
         out[i] = x[{w}u * ((o * {dim}u + lo) * {inner}u + q) + c];",
            pi = inner * nidx,
            check = fail,
        )
    };
    let d = decls(&[("x", "u32", false), ("ix", "u32", false), ("out", "u32", true)]);
    let d = d + "@group(0) @binding(3) var<storage, read_write> status: array<atomic<u32>>;\n";
    let groups = groups_for(n);
    let wgsl = module(&d, "", WG, groups, &body);
    let binds = vec![Bind::Input(0), Bind::Input(1), Bind::Output, Bind::Status];
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups, binds }]))
}

/// The range check of gather and scatter_add: records the node and index in the status words.
fn check(dim: usize, node: u32, on_fail: &str) -> String {
    format!(
        "if (hi != 0u || lo >= {dim}u) {{\n\
           atomicMin(&status[0], {node}u); atomicStore(&status[1], lo); atomicStore(&status[2], hi);\n\
           {on_fail}\n}}\n"
    )
}

/// scatter_add without atomics: each target element (o, t, q) sums, in index order, the
/// updates (o, p, q) whose index p equals t, so the result is deterministic.
fn scatter_add(ctx: &Ctx<'_>) -> Result<Plan> {
    let Op::ScatterAdd(op) = ctx.op else { return Err(super::unsupported(ctx, "not scatter_add")) };
    let td = ctx.in_dims(0);
    let r = td.len() as i64;
    let a = if op.axis < 0 { op.axis + r } else { op.axis } as usize;
    let dim = td[a];
    let inner: usize = td[a + 1..].iter().product();
    let nidx: usize = ctx.in_dims(1).iter().product();
    let n = ctx.out_numel();
    // Floats sum in f32 and round once at the store.
    let int = ctx.out.dtype == DType::I32;
    let (t, io, st) = if int { ("i32", "i32", "") } else { ("f32", float_ty(ctx.out.dtype), store_fn(ctx.out.dtype)) };
    let body = format!(
        "let i = g * {WG}u + lid;\nif (i >= {n}u) {{ return; }}\n\
         let q = i % {inner}u;\nlet t = (i / {inner}u) % {dim}u;\nlet o = i / {ti};\n\
         var acc: {t} = {t}(x[i]);\n\
         for (var p: u32 = 0u; p < {nidx}u; p = p + 1u) {{\n{read}{check}\
           if (lo == t) {{ acc = acc + {t}(u[(o * {nidx}u + p) * {inner}u + q]); }}\n}}\n\
         out[i] = {st}(acc);",
        ti = inner * dim,
        read = read_index(ctx.ins[1].dtype, "p"),
        check = check(dim, ctx.node, "continue;"),
    );
    let d = decls(&[("x", io, false), ("ix", "u32", false), ("u", io, false), ("out", io, true)]);
    let d = d + "@group(0) @binding(4) var<storage, read_write> status: array<atomic<u32>>;\n";
    let groups = groups_for(n);
    let wgsl = module(&d, "", WG, groups, &body);
    let binds = vec![Bind::Input(0), Bind::Input(1), Bind::Input(2), Bind::Output, Bind::Status];
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups, binds }]))
}

/// Rotary embedding on x `[b, h, s, d]` (`[b, s, h, d]` with layout `Bshd`) with positions `[s]`:
/// pairs are the two halves of a row, or adjacent elements (`interleaved`).
fn rope(ctx: &Ctx<'_>) -> Result<Plan> {
    let Op::Rope(op) = ctx.op else { return Err(super::unsupported(ctx, "not rope")) };
    let [_, h, s, d] = op.layout.bhsd(&ctx.in_dims(0));
    let per_pos = op.layout.rows_per_position(h);
    let half = d / 2;
    let freqs: Vec<String> = rope_inv_freq(op.theta, d).iter().map(|&f| literal(f)).collect();
    let n = ctx.out_numel();
    let extra = format!("var<private> FREQ: array<f32, {half}> = array<f32, {half}>({});\n", freqs.join(", "));
    let body = format!(
        "let i = g * {WG}u + lid;\nif (i >= {n}u) {{ return; }}\n\
         let c = i % {d}u;\nlet row = i / {d}u;\nlet sp = row / {per_pos}u % {s}u;\n{read}\
         let pos = f32(bitcast<i32>(hi)) * 4294967296.0 + f32(lo);\n\
         {pair}let ang = pos * FREQ[k];\nlet cs = cos(ang);\nlet sn = sin(ang);\n\
         let x1 = f32(x[row * {d}u + i1]);\nlet x2 = f32(x[row * {d}u + i2]);\n\
         out[i] = {st}(select(x2 * cs + x1 * sn, x1 * cs - x2 * sn, c == i1));",
        read = read_index(ctx.ins[1].dtype, "sp"),
        st = store_fn(ctx.out.dtype),
        // Frequency k, and where the pair's first (i1) and second (i2) elements sit.
        pair = if op.interleaved {
            "let k = c / 2u;\nlet i1 = 2u * k;\nlet i2 = i1 + 1u;\n".to_string()
        } else {
            format!("let k = c % {half}u;\nlet i1 = k;\nlet i2 = k + {half}u;\n")
        },
    );
    let io = float_ty(ctx.out.dtype);
    let d = decls(&[("x", io, false), ("ix", "u32", false), ("out", io, true)]);
    let groups = groups_for(n);
    let wgsl = module(&d, &extra, WG, groups, &body);
    let binds = vec![Bind::Input(0), Bind::Input(1), Bind::Output];
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups, binds }]))
}
