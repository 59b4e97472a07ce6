//! Elementwise ops (unary, binary, fused regions): WGSL generated from the ops' own scalar
//! expressions through `Wx`, with numpy broadcasting by per-input offset code.

use super::{
    Bind, Ctx, Dispatch, FLOATS, Kernel, Plan, WG, broadcast_strides, decls, float_ty, groups_for, module, offset_code,
    same_float, store_fn,
};
use crate::wexpr::{Wx, emit, literal};
use rlx_driver::KernelTable;
use rlx_ir::ops::fused::Instr;
use rlx_ir::{Op, OpKind, Result};

pub(super) fn register(t: &mut KernelTable<Kernel>) {
    for kind in [OpKind::Unary, OpKind::Binary, OpKind::Fused] {
        t.register(kind, FLOATS, Kernel { build: elementwise, accepts: same_float });
    }
}

/// One thread per output element: load each input at its broadcast offset, run the expression.
fn elementwise(ctx: &Ctx<'_>) -> Result<Plan> {
    let od = ctx.out_dims();
    let n = ctx.out_numel();
    let k = ctx.ins.len();
    if !matches!(ctx.op, Op::Unary(_) | Op::Binary(_) | Op::Fused(_)) {
        return Err(super::unsupported(ctx, "not an elementwise op"));
    }
    // The op's own scalar expression, evaluated on symbolic values, prints the WGSL.
    let (lines, result) = emit(|| {
        let ld = |i: usize| Wx::load(format!("f32(in{i}[o{i}])"));
        match ctx.op {
            Op::Unary(u) => u.kind.eval(ld(0)),
            Op::Binary(b) => b.kind.eval(ld(0), ld(1)),
            Op::Fused(f) => {
                let mut regs: Vec<Wx> = vec![];
                for ins in &f.program {
                    let v = match *ins {
                        Instr::Input(i) => ld(i),
                        Instr::Const(c) => Wx::load(literal(c)),
                        Instr::Unary(u, a) => u.eval(regs[a]),
                        Instr::Binary(b, x, y) => b.eval(regs[x], regs[y]),
                    };
                    regs.push(v);
                }
                // `validate` (run by infer) guarantees a non-empty program.
                regs.last().copied().unwrap_or_else(|| Wx::load("0.0"))
            }
            _ => unreachable!("checked above"),
        }
    });
    let names: Vec<String> = (0..k).map(|i| format!("in{i}")).collect();
    // f16 buffers are read into f32 and the result rounded back at the store.
    let ty = float_ty(ctx.out.dtype);
    let mut bufs: Vec<(&str, &str, bool)> = names.iter().map(|s| (s.as_str(), ty, false)).collect();
    bufs.push(("out", ty, true));
    let mut body = format!("let i = g * {WG}u + lid;\nif (i >= {n}u) {{ return; }}\n");
    for i in 0..k {
        let id = ctx.in_dims(i);
        if id == od {
            body += &format!("let o{i} = i;\n");
        } else {
            body += &offset_code(&format!("o{i}"), "i", &od, &broadcast_strides(&id, &od));
        }
    }
    body += &lines.join("\n");
    body += &format!("\nout[i] = {}({result});", store_fn(ctx.out.dtype));
    let groups = groups_for(n);
    let wgsl = module(&decls(&bufs), "", WG, groups, &body);
    let mut binds: Vec<Bind> = (0..k).map(Bind::Input).collect();
    binds.push(Bind::Output);
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups, binds }]))
}
