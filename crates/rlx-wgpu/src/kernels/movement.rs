//! Data movement (reshape, transpose, broadcast, slice, concat, ...): one kernel for every op
//! with the DATA_MOVEMENT trait. As on the CPU, the index map comes from running the op's
//! reference on tensors of element ids at compile time; it is uploaded once as a u32 buffer.

use super::{Bind, Ctx, Dispatch, Kernel, Plan, WG, decls, groups_for, module};
use rlx_driver::KernelTable;
use rlx_ir::{DType, OpTraits, Result};

/// Dtypes moved as whole device words: f32, the index types, bool and bf16 (one u32 each).
const MOVABLE: &[DType] =
    &[DType::F32, DType::I32, DType::I64, DType::U32, DType::Bool, DType::BF16, DType::F16, DType::U8, DType::I8];

pub(super) fn register(t: &mut KernelTable<Kernel>) {
    t.register_trait(OpTraits::DATA_MOVEMENT, MOVABLE, Kernel { build: movement, accepts: movable });
}

/// f16 moves as f16 elements, on devices with shader-f16.
fn movable(ctx: &Ctx<'_>) -> bool {
    ctx.out.dtype != DType::F16 || super::is_float(DType::F16)
}

fn movement(ctx: &Ctx<'_>) -> Result<Plan> {
    if !ctx.op.def().traits().contains(OpTraits::DATA_MOVEMENT) {
        return Err(super::unsupported(ctx, "not a data-movement op"));
    }
    let map = rlx_driver::movement_index_map(ctx.op, ctx.ins, ctx.out)?;
    // Elements are copied as whole 32-bit words (i64 is two words, a bool one).
    let f16 = ctx.out.dtype == DType::F16;
    let (w, ty) = if f16 { (1, "f16") } else { (ctx.out.dtype.size_bytes().div_ceil(4), "u32") };
    if rlx_driver::is_identity_map(&map, ctx.ins) {
        return Ok(Plan::Copy);
    }
    if matches!(ctx.out.dtype, DType::U8 | DType::I8) {
        return Ok(bytes(ctx, &map));
    }
    let d = decls(&[("src", ty, false), ("map", "u32", false), ("out", ty, true)]);
    let mut out = vec![];
    for j in 0..ctx.ins.len() {
        // Pairs (output element, input element) for input j.
        let pairs: Vec<u32> = map
            .iter()
            .enumerate()
            .filter(|(_, (i, _))| *i == j)
            .flat_map(|(o, &(_, e))| [o as u32, e as u32])
            .collect();
        let n = pairs.len() / 2;
        if n == 0 {
            continue;
        }
        let body = format!(
            "let i = g * {WG}u + lid;\nif (i >= {n}u) {{ return; }}\n\
             let o = map[2u * i] * {w}u;\nlet e = map[2u * i + 1u] * {w}u;\n\
             for (var c: u32 = 0u; c < {w}u; c = c + 1u) {{ out[o + c] = src[e + c]; }}"
        );
        let groups = groups_for(n);
        let wgsl = module(&d, "", WG, groups, &body);
        out.push(Dispatch { wgsl, groups, binds: vec![Bind::Input(j), Bind::Aux(pairs), Bind::Output] });
    }
    Ok(Plan::Dispatches(out))
}

/// Byte dtypes (u8, i8) sit four to a word: one thread assembles one output word from the
/// bytes the map names, reading whichever input each byte comes from.
fn bytes(ctx: &Ctx<'_>, map: &[(usize, usize)]) -> Plan {
    let n = map.len();
    let words = n.div_ceil(4);
    let pairs: Vec<u32> = map.iter().flat_map(|&(j, e)| [j as u32, e as u32]).collect();
    let names: Vec<String> = (0..ctx.ins.len()).map(|j| format!("in{j}")).collect();
    let mut bufs: Vec<(&str, &str, bool)> = names.iter().map(|s| (s.as_str(), "u32", false)).collect();
    bufs.push(("map", "u32", false));
    bufs.push(("out", "u32", true));
    let cases: String = (0..ctx.ins.len())
        .map(|j| format!("case {j}u: {{ return (in{j}[e / 4u] >> (8u * (e % 4u))) & 0xffu; }}\n"))
        .collect();
    let extra = format!("fn rd(j: u32, e: u32) -> u32 {{\nswitch j {{\n{cases}default: {{ return 0u; }}\n}}\n}}\n");
    let body = format!(
        "let i = g * {WG}u + lid;\nif (i >= {words}u) {{ return; }}\nvar word: u32 = 0u;\n\
         for (var c: u32 = 0u; c < 4u; c = c + 1u) {{\n\
           let o = 4u * i + c;\n\
           if (o < {n}u) {{ word = word | (rd(map[2u * o], map[2u * o + 1u]) << (8u * c)); }}\n\
         }}\nout[i] = word;"
    );
    let groups = groups_for(words);
    let wgsl = module(&decls(&bufs), &extra, WG, groups, &body);
    let mut binds: Vec<Bind> = (0..ctx.ins.len()).map(Bind::Input).collect();
    binds.push(Bind::Aux(pairs));
    binds.push(Bind::Output);
    Plan::Dispatches(vec![Dispatch { wgsl, groups, binds }])
}
