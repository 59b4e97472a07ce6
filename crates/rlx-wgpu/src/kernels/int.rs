//! Integer elementwise ops and reductions on i32 and u32 (WGSL integer arithmetic wraps, as
//! the reference's wrapping ops do modulo 2^32). Each op kind with an integer form in rlx-ir
//! (`eval_int`) maps to one WGSL expression here; a kind without one is refused by `accepts`.

use super::{Bind, Ctx, Dispatch, Kernel, Plan, WG, broadcast_strides, decls, groups_for, module, offset_code};
use rlx_driver::KernelTable;
use rlx_ir::ops::fused::Instr;
use rlx_ir::ops::{BinaryKind, ReduceKind, UnaryKind};
use rlx_ir::{DType, Op, OpKind, Result};

/// Integer dtypes computed natively.
const INTS: &[DType] = &[DType::I32, DType::U32];

pub(super) fn register(t: &mut KernelTable<Kernel>) {
    for kind in [OpKind::Unary, OpKind::Binary, OpKind::Fused] {
        t.register(kind, INTS, Kernel { build: elementwise, accepts: elementwise_ok });
    }
    t.register(OpKind::Reduce, INTS, Kernel { build: reduce, accepts: reduce_ok });
}

fn ty(dt: DType) -> &'static str {
    if dt == DType::I32 { "i32" } else { "u32" }
}

/// WGSL for an integer unary op of `x` in type `t`, when the kind has an integer form.
fn unary(k: UnaryKind, x: &str, t: &str) -> Option<String> {
    k.eval_int(1)?;
    let signed = t == "i32";
    Some(match k {
        UnaryKind::Neg => format!("({t}(0) - {x})"),
        UnaryKind::Abs if signed => format!("abs({x})"),
        UnaryKind::Square => format!("({x} * {x})"),
        UnaryKind::Relu if signed => format!("max({x}, 0i)"),
        UnaryKind::Sign if signed => format!("sign({x})"),
        UnaryKind::Sign => format!("select(0u, 1u, {x} > 0u)"),
        UnaryKind::Abs | UnaryKind::Relu | UnaryKind::Floor | UnaryKind::Round => x.to_string(),
        _ => return None,
    })
}

/// WGSL for an integer binary op, when the kind has an integer form.
fn binary(k: BinaryKind, a: &str, b: &str) -> Option<String> {
    k.eval_int(1, 1)?;
    Some(match k {
        BinaryKind::Add => format!("({a} + {b})"),
        BinaryKind::Sub => format!("({a} - {b})"),
        BinaryKind::Mul => format!("({a} * {b})"),
        BinaryKind::Maximum => format!("max({a}, {b})"),
        BinaryKind::Minimum => format!("min({a}, {b})"),
        _ => return None,
    })
}

/// The statements computing the node's value `r` for output element `i` (inputs at `in{k}[o{k}]`).
fn program(ctx: &Ctx<'_>) -> Option<String> {
    let t = ty(ctx.out.dtype);
    let ld = |i: usize| format!("in{i}[o{i}]");
    Some(match ctx.op {
        Op::Unary(u) => format!("let r = {};", unary(u.kind, &ld(0), t)?),
        Op::Binary(b) => format!("let r = {};", binary(b.kind, &ld(0), &ld(1))?),
        Op::Fused(f) => {
            let mut s = String::new();
            for (j, ins) in f.program.iter().enumerate() {
                let e = match *ins {
                    Instr::Input(i) => ld(i),
                    // Constants are integral for integer regions; wrap like the reference.
                    Instr::Const(c) => format!("{t}({}i)", c as i64 as i32),
                    Instr::Unary(u, a) => unary(u, &format!("r{a}"), t)?,
                    Instr::Binary(b, x, y) => binary(b, &format!("r{x}"), &format!("r{y}"))?,
                };
                s += &format!("let r{j}: {t} = {t}({e});\n");
            }
            s + &format!("let r = r{};", f.program.len().checked_sub(1)?)
        }
        _ => return None,
    })
}

fn elementwise_ok(ctx: &Ctx<'_>) -> bool {
    ctx.ins.iter().all(|s| s.dtype == ctx.out.dtype) && program(ctx).is_some()
}

/// One thread per output element, as the f32 kernel, in i32 or u32.
fn elementwise(ctx: &Ctx<'_>) -> Result<Plan> {
    let prog = program(ctx).ok_or_else(|| super::unsupported(ctx, "no integer form of this op in WGSL"))?;
    let (od, n, k, t) = (ctx.out_dims(), ctx.out_numel(), ctx.ins.len(), ty(ctx.out.dtype));
    let names: Vec<String> = (0..k).map(|i| format!("in{i}")).collect();
    let mut bufs: Vec<(&str, &str, bool)> = names.iter().map(|s| (s.as_str(), t, false)).collect();
    bufs.push(("out", t, true));
    let mut body = format!("let i = g * {WG}u + lid;\nif (i >= {n}u) {{ return; }}\n");
    for i in 0..k {
        let id = ctx.in_dims(i);
        if id == od {
            body += &format!("let o{i} = i;\n");
        } else {
            body += &offset_code(&format!("o{i}"), "i", &od, &broadcast_strides(&id, &od));
        }
    }
    body += &format!("{prog}\nout[i] = r;");
    let groups = groups_for(n);
    let wgsl = module(&decls(&bufs), "", WG, groups, &body);
    let mut binds: Vec<Bind> = (0..k).map(Bind::Input).collect();
    binds.push(Bind::Output);
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups, binds }]))
}

fn reduce_ok(ctx: &Ctx<'_>) -> bool {
    matches!(ctx.op, Op::Reduce(r) if r.kind != ReduceKind::Mean) && ctx.ins[0].dtype == ctx.out.dtype
}

/// Integer sum, prod, max and min: the f32 row kernel's structure with integer identities.
fn reduce(ctx: &Ctx<'_>) -> Result<Plan> {
    let Op::Reduce(r) = ctx.op else { return Err(super::unsupported(ctx, "not a reduction")) };
    let t = ty(ctx.out.dtype);
    let signed = t == "i32";
    let (init, combine) = match r.kind {
        ReduceKind::Sum => ("0", "a + b"),
        ReduceKind::Prod => ("1", "a * b"),
        ReduceKind::Max => (if signed { "-2147483648" } else { "0" }, "max(a, b)"),
        ReduceKind::Min => (if signed { "2147483647" } else { "4294967295" }, "min(a, b)"),
        ReduceKind::Mean => return Err(super::unsupported(ctx, "integer mean")),
    };
    super::reduce::rows(ctx, (t, t, ""), &format!("{t}({init})"), combine, "red[0]")
}
