//! Ops indexed by values: gather (with device-side range checks reported through the status
//! words) and rope (positions from an integer tensor, frequencies computed on the host in f64).

use super::{Bind, Ctx, Dispatch, F32_AND_INDEX, Kernel, Plan, WG, decls, groups_for, module};
use crate::wexpr::literal;
use rlx_driver::KernelTable;
use rlx_ir::ops::rope::rope_inv_freq;
use rlx_ir::{DType, Op, OpKind, Result};

pub(super) fn register(t: &mut KernelTable<Kernel>) {
    t.register(OpKind::Gather, F32_AND_INDEX, Kernel { build: gather, accepts: f32_data_int_index });
    t.register(OpKind::ScatterAdd, F32_AND_INDEX, Kernel { build: scatter_add, accepts: scatter_ok });
    t.register(OpKind::Rope, F32_AND_INDEX, Kernel { build: rope, accepts: f32_data_int_index });
}

/// Data and output in f32; the second input holds i32, u32 or i64 indices.
fn f32_data_int_index(ctx: &Ctx<'_>) -> bool {
    ctx.out.dtype == DType::F32 && ctx.ins[0].dtype == DType::F32 && ctx.ins[1].dtype != DType::F32
}

/// f32 target and updates, integer indices.
fn scatter_ok(ctx: &Ctx<'_>) -> bool {
    f32_data_int_index(ctx) && ctx.ins[2].dtype == DType::F32
}

/// WGSL reading index `p` of the index buffer `ix` (as u32 words) into `lo` and `hi`: the value
/// is `hi * 2^32 + lo` (i64), or sign-extended for i32.
fn read_index(dt: DType, p: &str) -> String {
    match dt {
        DType::I64 => format!("let lo = ix[2u * ({p})];\nlet hi = ix[2u * ({p}) + 1u];\n"),
        DType::I32 => format!("let lo = ix[{p}];\nlet hi = select(0u, 0xffffffffu, (lo & 0x80000000u) != 0u);\n"),
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
    let n = ctx.out_numel();
    let body = format!(
        "let i = g * {WG}u + lid;\nif (i >= {n}u) {{ return; }}\n\
         let q = i % {inner}u;\nlet p = (i / {inner}u) % {nidx}u;\nlet o = i / {pi};\n{read}{check}\
         out[i] = x[(o * {dim}u + lo) * {inner}u + q];",
        pi = inner * nidx,
        read = read_index(ctx.ins[1].dtype, "p"),
        check = check(dim, ctx.node, "out[i] = 0.0;\nreturn;"),
    );
    let d = decls(&[("x", "f32", false), ("ix", "u32", false), ("out", "f32", true)]);
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
    let body = format!(
        "let i = g * {WG}u + lid;\nif (i >= {n}u) {{ return; }}\n\
         let q = i % {inner}u;\nlet t = (i / {inner}u) % {dim}u;\nlet o = i / {ti};\n\
         var acc: f32 = x[i];\n\
         for (var p: u32 = 0u; p < {nidx}u; p = p + 1u) {{\n{read}{check}\
           if (lo == t) {{ acc = acc + u[(o * {nidx}u + p) * {inner}u + q]; }}\n}}\n\
         out[i] = acc;",
        ti = inner * dim,
        read = read_index(ctx.ins[1].dtype, "p"),
        check = check(dim, ctx.node, "continue;"),
    );
    let d = decls(&[("x", "f32", false), ("ix", "u32", false), ("u", "f32", false), ("out", "f32", true)]);
    let d = d + "@group(0) @binding(4) var<storage, read_write> status: array<atomic<u32>>;\n";
    let groups = groups_for(n);
    let wgsl = module(&d, "", WG, groups, &body);
    let binds = vec![Bind::Input(0), Bind::Input(1), Bind::Input(2), Bind::Output, Bind::Status];
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups, binds }]))
}

/// Half-split rotary embedding on x `[b, h, s, d]` with positions `[s]`.
fn rope(ctx: &Ctx<'_>) -> Result<Plan> {
    let Op::Rope(op) = ctx.op else { return Err(super::unsupported(ctx, "not rope")) };
    let xd = ctx.in_dims(0);
    let (s, d) = (xd[2], xd[3]);
    let half = d / 2;
    let freqs: Vec<String> = rope_inv_freq(op.theta, d).iter().map(|&f| literal(f)).collect();
    let n = ctx.out_numel();
    let extra = format!("var<private> FREQ: array<f32, {half}> = array<f32, {half}>({});\n", freqs.join(", "));
    let body = format!(
        "let i = g * {WG}u + lid;\nif (i >= {n}u) {{ return; }}\n\
         let c = i % {d}u;\nlet row = i / {d}u;\nlet sp = row % {s}u;\n{read}\
         let pos = f32(bitcast<i32>(hi)) * 4294967296.0 + f32(lo);\n\
         let k = c % {half}u;\nlet ang = pos * FREQ[k];\nlet cs = cos(ang);\nlet sn = sin(ang);\n\
         let x1 = x[row * {d}u + k];\nlet x2 = x[row * {d}u + k + {half}u];\n\
         out[i] = select(x2 * cs + x1 * sn, x1 * cs - x2 * sn, c < {half}u);",
        read = read_index(ctx.ins[1].dtype, "sp"),
    );
    let d = decls(&[("x", "f32", false), ("ix", "u32", false), ("out", "f32", true)]);
    let groups = groups_for(n);
    let wgsl = module(&d, &extra, WG, groups, &body);
    let binds = vec![Bind::Input(0), Bind::Input(1), Bind::Output];
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups, binds }]))
}
