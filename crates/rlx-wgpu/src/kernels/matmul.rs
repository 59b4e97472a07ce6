//! Batched matmul with broadcast batch dims and folded transposes: 32x32 output tiles per
//! workgroup of 64 threads, K in steps of 16 through workgroup memory (vec4 rows), a 4x4
//! register block per thread. (32 beat 64 on lavapipe; tuning for real GPUs needs one.)
//! `fused_matmul` runs its elementwise epilogue (generated from the ops' scalar expressions)
//! on each result before the store.

use super::{
    Bind, Ctx, Dispatch, FLOATS, Kernel, Plan, broadcast_strides, decls, float_ty, module, offset_code, same_float,
    store_fn,
};
use crate::wexpr::{Wx, emit, literal};
use rlx_driver::KernelTable;
use rlx_ir::ops::matmul::matmul_dims_t;
use rlx_ir::ops::{Fused, Instr};
use rlx_ir::{DType, Op, OpKind, Result};

pub(super) fn register(t: &mut KernelTable<Kernel>) {
    t.register(
        OpKind::MatMul,
        &[DType::F32, DType::F16, DType::BF16, DType::I32],
        Kernel { build: matmul, accepts: matmul_ok },
    );
    t.register(OpKind::FusedMatMul, FLOATS, Kernel { build: matmul, accepts: same_float });
}

/// f32, bf16, f16 (with shader-f16) or i32 operands of one dtype.
fn matmul_ok(ctx: &Ctx<'_>) -> bool {
    same_float(ctx) || ctx.ins.iter().chain([&ctx.out]).all(|s| s.dtype == DType::I32)
}

/// `fn epi(i: u32, x0: f32) -> f32`: the epilogue at flat output index `i`, where `x0` is the
/// matmul result and the extras `e1..` (node inputs 2..) load at their broadcast offsets.
fn epilogue(ctx: &Ctx<'_>, f: &Fused) -> String {
    let od = ctx.out_dims();
    let mut head = String::new();
    for k in 1..ctx.ins.len() - 1 {
        let id = ctx.in_dims(k + 1);
        head += &offset_code(&format!("o{k}"), "i", &od, &broadcast_strides(&id, &od));
    }
    let (lines, result) = emit(|| {
        let mut regs: Vec<Wx> = vec![];
        for ins in &f.program {
            let v = match *ins {
                Instr::Input(0) => Wx::load("x0"),
                Instr::Input(k) => Wx::load(format!("f32(e{k}[o{k}])")),
                Instr::Const(c) => Wx::load(literal(c)),
                Instr::Unary(u, a) => u.eval(regs[a]),
                Instr::Binary(b, x, y) => b.eval(regs[x], regs[y]),
            };
            regs.push(v);
        }
        regs.last().copied().unwrap_or_else(|| Wx::load("x0"))
    });
    format!("fn epi(i: u32, x0: f32) -> f32 {{\n{head}{}\nreturn {result};\n}}\n", lines.join("\n"))
}

/// Output tile side; a workgroup has (TILE/4)^2 threads with a 4x4 block each.
const TILE: usize = 32;

fn matmul(ctx: &Ctx<'_>) -> Result<Plan> {
    let (mm, epi) = match ctx.op {
        Op::MatMul(mm) => (mm, None),
        Op::FusedMatMul(f) => (&f.matmul, Some(&f.epilogue)),
        _ => return Err(super::unsupported(ctx, "not a matmul")),
    };
    let (ad, bd, od) = (ctx.in_dims(0), ctx.in_dims(1), ctx.out_dims());
    // i32 matmul wraps modulo 2^32 (WGSL integer arithmetic), as the reference does.
    // f16 operands load into f32 tiles, accumulate in f32 and round at the store.
    let t = if ctx.out.dtype == DType::I32 { "i32" } else { "f32" };
    let io = if ctx.out.dtype == DType::I32 { "i32" } else { float_ty(ctx.out.dtype) };
    let st = store_fn(ctx.out.dtype);
    let (abatch, bbatch, m, k, n) = matmul_dims_t(&ad, &bd, mm.transpose_a, mm.transpose_b);
    let obatch = &od[..od.len() - 2];
    let nb: usize = obatch.iter().product();
    let (tm, tn) = (m.div_ceil(TILE), n.div_ceil(TILE));
    let groups = nb * tm * tn;
    if groups > u32::MAX as usize {
        return Err(super::unsupported(ctx, "too many tiles for one dispatch"));
    }
    // Batch offsets: broadcast strides over whole matrices.
    let a_st: Vec<usize> = broadcast_strides(&abatch, obatch).iter().map(|s| s * m * k).collect();
    let b_st: Vec<usize> = broadcast_strides(&bbatch, obatch).iter().map(|s| s * k * n).collect();
    let a_at = if mm.transpose_a { format!("ao + kk * {m}u + mm") } else { format!("ao + mm * {k}u + kk") };
    let b_at = if mm.transpose_b { format!("bo + nn * {k}u + kk") } else { format!("bo + kk * {n}u + nn") };
    // Thread (tx, ty) owns rows ty*4.. and columns tx*4..: one vec4 of A (stored k-major) and
    // one of B per k step, four vec4 accumulators.
    let mut store = String::new();
    for i in 0..4 {
        store += &format!("let r{i} = tm * {TILE}u + ty * 4u + {i}u;\n");
        for j in 0..4 {
            let at = format!("co + r{i} * {n}u + tn * {TILE}u + tx * 4u + {j}u");
            let v = if epi.is_some() { format!("epi({at}, c{i}[{j}])") } else { format!("c{i}[{j}]") };
            store +=
                &format!("if (r{i} < {m}u && tn * {TILE}u + tx * 4u + {j}u < {n}u) {{ out[{at}] = {st}({v}); }}\n");
        }
    }
    let (q4, wg) = (TILE / 4, (TILE / 4) * (TILE / 4));
    let loads = TILE * 16 / wg;
    let mut extra =
        format!("var<workgroup> As: array<vec4<{t}>, {0}>;\nvar<workgroup> Bs: array<vec4<{t}>, {0}>;\n", 16 * q4);
    if let Some(f) = epi {
        extra += &epilogue(ctx, f);
    }
    let body = format!(
        "let tn = g % {tn}u;\nlet tm = (g / {tn}u) % {tm}u;\nlet bi = g / {tmn}u;\n\
         {aoff}{boff}let co = bi * {mn}u;\n\
         let tx = lid % {q4}u;\nlet ty = lid / {q4}u;\n\
         var c0 = vec4<{t}>(); var c1 = vec4<{t}>(); var c2 = vec4<{t}>(); var c3 = vec4<{t}>();\n\
         for (var k0: u32 = 0u; k0 < {k}u; k0 = k0 + 16u) {{\n\
           for (var l: u32 = 0u; l < {loads}u; l = l + 1u) {{\n\
             let e = lid + l * {wg}u;\n\
             var mm = tm * {TILE}u + e / 16u; var kk = k0 + e % 16u;\n\
             var v: {t} = {t}(0);\n\
             if (mm < {m}u && kk < {k}u) {{ v = {t}(a[{a_at}]); }}\n\
             As[(e % 16u) * {q4}u + (e / 16u) / 4u][(e / 16u) % 4u] = v;\n\
             kk = k0 + e / {TILE}u; let nn = tn * {TILE}u + e % {TILE}u;\n\
             v = {t}(0);\n\
             if (nn < {n}u && kk < {k}u) {{ v = {t}(b[{b_at}]); }}\n\
             Bs[(e / {TILE}u) * {q4}u + (e % {TILE}u) / 4u][e % 4u] = v;\n\
           }}\n\
           workgroupBarrier();\n\
           for (var q: u32 = 0u; q < 16u; q = q + 1u) {{\n\
             let av = As[q * {q4}u + ty];\n\
             let bv = Bs[q * {q4}u + tx];\n\
             c0 = c0 + av.x * bv; c1 = c1 + av.y * bv; c2 = c2 + av.z * bv; c3 = c3 + av.w * bv;\n\
           }}\n\
           workgroupBarrier();\n\
         }}\n{store}",
        tmn = tm * tn,
        mn = m * n,
        aoff = offset_code("ao", "bi", obatch, &a_st),
        boff = offset_code("bo", "bi", obatch, &b_st),
    );
    let names: Vec<String> = (1..ctx.ins.len() - 1).map(|k| format!("e{k}")).collect();
    let mut bufs: Vec<(&str, &str, bool)> = vec![("a", io, false), ("b", io, false)];
    bufs.extend(names.iter().map(|s| (s.as_str(), io, false)));
    bufs.push(("out", io, true));
    let wgsl = module(&decls(&bufs), &extra, wg as u32, groups as u32, &body);
    let mut binds: Vec<Bind> = (0..ctx.ins.len()).map(Bind::Input).collect();
    binds.push(Bind::Output);
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups: groups as u32, binds }]))
}
