//! Packed GGUF weights in WGSL: `dequantize` and `qmatmul` (y = x @ dequant(w)^T) for Q8_0, Q4_0,
//! Q4_K, Q5_K and Q6_K. The packed bytes are uploaded as they are (u32 words on the device) and
//! decoded inside the kernels; every scheme is read as 16-element groups whose values are
//! `a * q + b`, so one (a, b) pair serves 16 weights. Products accumulate in f32.

use super::{Bind, Ctx, Dispatch, Kernel, Plan, decls, float_ty, groups_for, module, store_fn};
use rlx_driver::KernelTable;
use rlx_ir::quant::QuantScheme;
use rlx_ir::{DType, Op, OpKind, Result};

/// Activations, outputs and the packed u8 weights.
const QTYPES: &[DType] = &[DType::F32, DType::F16, DType::U8];

pub(super) fn register(t: &mut KernelTable<Kernel>) {
    t.register(OpKind::Dequantize, &[DType::U8, DType::F32], Kernel { build: dequantize, accepts: dequant_ok });
    t.register(OpKind::QMatMul, QTYPES, Kernel { build: qmatmul, accepts: qmatmul_ok });
}

fn scheme_of(op: &Op) -> Option<(QuantScheme, usize)> {
    match op {
        Op::Dequantize(d) => Some((d.scheme, d.k)),
        Op::QMatMul(q) => Some((q.scheme, q.k)),
        _ => None,
    }
}

fn dequant_ok(ctx: &Ctx<'_>) -> bool {
    ctx.ins[0].dtype == DType::U8
        && ctx.out.dtype == DType::F32
        && scheme_of(ctx.op).is_some_and(|(s, _)| wgsl(s).is_some())
}

fn qmatmul_ok(ctx: &Ctx<'_>) -> bool {
    super::is_float(ctx.out.dtype)
        && ctx.ins[0].dtype == ctx.out.dtype
        && ctx.ins[1].dtype == DType::U8
        && scheme_of(ctx.op).is_some_and(|(s, _)| wgsl(s).is_some())
}

/// Byte and f16 readers over the packed words `w` (f16 fields always sit at even offsets).
const READERS: &str = "
fn byte(o: u32) -> u32 { return (w[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu; }
fn half(o: u32) -> f32 { return unpack2x16float(w[o >> 2u] >> ((o & 2u) * 8u)).x; }
fn i8v(b: u32) -> f32 { return f32(bitcast<i32>(b << 24u) >> 24u); }
fn scale_min(sb: u32, s: u32) -> vec2<f32> {
  if (s < 4u) { return vec2<f32>(f32(byte(sb + s) & 63u), f32(byte(sb + s + 4u) & 63u)); }
  let sc = (byte(sb + s + 4u) & 15u) | ((byte(sb + s - 4u) >> 6u) << 4u);
  let mn = (byte(sb + s + 4u) >> 4u) | ((byte(sb + s) >> 6u) << 4u);
  return vec2<f32>(f32(sc), f32(mn));
}
";

/// Per scheme: `grp_ab(rb, g)` gives (a, b) of 16-group `g` of the row starting at byte `rb`,
/// and `grp_q(rb, g, e)` the quantized value of its element `e`; the weight is `a * q + b`.
/// The layouts are ggml's (rlx-ir's `quant/decode.rs` is the reference).
fn wgsl(s: QuantScheme) -> Option<String> {
    let (bb, gb) = (s.block_bytes(), s.block_size() / 16);
    let head = format!("let blk = rb + (g / {gb}u) * {bb}u; let j = g % {gb}u;");
    let (ab, q) = match s {
        QuantScheme::Q8_0 => ("return vec2<f32>(half(blk), 0.0);", "return i8v(byte(blk + 2u + j * 16u + e));"),
        QuantScheme::Q4_0 => {
            ("return vec2<f32>(half(blk), 0.0);", "return f32(i32((byte(blk + 2u + e) >> (4u * j)) & 15u) - 8);")
        }
        QuantScheme::Q4_K => (
            "let sm = scale_min(blk + 4u, j / 2u); return vec2<f32>(half(blk) * sm.x, -(half(blk + 2u) * sm.y));",
            "let sub = j / 2u; let l = (j % 2u) * 16u + e;\n\
             return f32((byte(blk + 16u + (sub / 2u) * 32u + l) >> (4u * (sub % 2u))) & 15u);",
        ),
        QuantScheme::Q5_K => (
            "let sm = scale_min(blk + 4u, j / 2u); return vec2<f32>(half(blk) * sm.x, -(half(blk + 2u) * sm.y));",
            "let sub = j / 2u; let l = (j % 2u) * 16u + e;\n\
             let lo = (byte(blk + 48u + (sub / 2u) * 32u + l) >> (4u * (sub % 2u))) & 15u;\n\
             let hi = (byte(blk + 16u + l) >> sub) & 1u;\n\
             return f32(lo | (hi << 4u));",
        ),
        QuantScheme::Q6_K => (
            "return vec2<f32>(half(blk + 208u) * i8v(byte(blk + 192u + j)), 0.0);",
            "let idx = j * 16u + e; let h = idx / 128u; let r = idx % 128u;\n\
             let lo = (byte(blk + h * 64u + r % 64u) >> (4u * (r / 64u))) & 15u;\n\
             let hi = (byte(blk + 128u + h * 32u + r % 32u) >> (2u * (r / 32u))) & 3u;\n\
             return f32(i32(lo | (hi << 4u)) - 32);",
        ),
        _ => return None,
    };
    Some(format!(
        "{READERS}fn grp_ab(rb: u32, g: u32) -> vec2<f32> {{\n{head}\n{ab}\n}}\n\
         fn grp_q(rb: u32, g: u32, e: u32) -> f32 {{\n{head}\n{q}\n}}\n"
    ))
}

fn scheme_wgsl(ctx: &Ctx<'_>) -> Result<(QuantScheme, usize, usize, String)> {
    let (s, k) = scheme_of(ctx.op).ok_or_else(|| super::unsupported(ctx, "not a quantized op"))?;
    let code = wgsl(s).ok_or_else(|| super::unsupported(ctx, &format!("no WGSL decoder for {s} blocks")))?;
    let rb = s.row_bytes(k).map_err(|e| super::unsupported(ctx, &e))?;
    Ok((s, k, rb, code))
}

/// One thread per 16-group: decode and write its 16 values.
fn dequantize(ctx: &Ctx<'_>) -> Result<Plan> {
    let (_, k, rb, code) = scheme_wgsl(ctx)?;
    let rows = ctx.out_numel() / k;
    let gpr = k / 16;
    let n = rows * gpr;
    let body = format!(
        "let i = g * {wg}u + lid;\nif (i >= {n}u) {{ return; }}\n\
         let row = i / {gpr}u; let gi = i % {gpr}u; let rb = row * {rb}u;\n\
         let ab = grp_ab(rb, gi);\nlet o = row * {k}u + gi * 16u;\n\
         for (var e: u32 = 0u; e < 16u; e = e + 1u) {{ out[o + e] = ab.x * grp_q(rb, gi, e) + ab.y; }}",
        wg = super::WG,
    );
    let groups = groups_for(n);
    let wgsl = module(&decls(&[("w", "u32", false), ("out", "f32", true)]), &code, super::WG, groups, &body);
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups, binds: vec![Bind::Input(0), Bind::Output] }]))
}

/// Rows of x up to which the matrix-vector kernel runs (weights read once for all rows).
const MV_ROWS: usize = 8;
/// Threads of the matrix-vector kernel (one workgroup per output column).
const MV_WG: u32 = 64;

fn qmatmul(ctx: &Ctx<'_>) -> Result<Plan> {
    let (_, k, rb, code) = scheme_wgsl(ctx)?;
    let m = ctx.in_dims(0).iter().product::<usize>() / k;
    let n = ctx.in_dims(1)[0];
    let (io, st) = (float_ty(ctx.out.dtype), store_fn(ctx.out.dtype));
    let bufs = decls(&[("x", io, false), ("w", "u32", false), ("out", io, true)]);
    let binds = vec![Bind::Input(0), Bind::Input(1), Bind::Output];
    let (wgsl, groups) =
        if m <= MV_ROWS { matvec(m, n, k, rb, &code, &bufs, st) } else { gemm(m, n, k, rb, &code, &bufs, st) };
    if groups > u32::MAX as usize {
        return Err(super::unsupported(ctx, "too many workgroups for one dispatch"));
    }
    Ok(Plan::Dispatches(vec![Dispatch { wgsl, groups: groups as u32, binds }]))
}

/// One workgroup per output column: threads stride over the row's 16-groups, decode each once
/// for all `m` rows of x, then combine the partial sums in workgroup memory.
fn matvec(m: usize, n: usize, k: usize, rb: usize, code: &str, bufs: &str, st: &str) -> (String, usize) {
    let gpr = k / 16;
    let rows = 0..m;
    let acc: String = rows.clone().map(|r| format!("var acc{r}: f32 = 0.0;\n")).collect();
    let sums: String = rows.clone().map(|r| format!("var s{r}: f32 = 0.0; var t{r}: f32 = 0.0;\n")).collect();
    let fma: String = rows
        .clone()
        .map(|r| format!("let x{r} = f32(x[{o}u + xo]); s{r} = s{r} + q * x{r}; t{r} = t{r} + x{r};\n", o = r * k))
        .collect();
    let fold: String = rows.clone().map(|r| format!("acc{r} = acc{r} + ab.x * s{r} + ab.y * t{r};\n")).collect();
    let park: String = rows.clone().map(|r| format!("red[{}u + lid] = acc{r};\n", r as u32 * MV_WG)).collect();
    let comb: String = rows
        .clone()
        .map(|r| format!("red[{o}u + lid] = red[{o}u + lid] + red[{o}u + lid + s];\n", o = r as u32 * MV_WG))
        .collect();
    let combine = if super::subgroups() {
        // Subgroup sums, then one partial per subgroup in workgroup memory.
        let park: String = rows
            .clone()
            .map(|r| {
                format!(
                    "let v{r} = subgroupAdd(acc{r});\nif (sgi == 0u) {{ red[{}u + sgid] = v{r}; }}\n",
                    r as u32 * MV_WG
                )
            })
            .collect();
        format!(
            "{park}workgroupBarrier();\n\
             if (lid < {m}u) {{ var w: f32 = 0.0; for (var s: u32 = 0u; s < nsg; s = s + 1u) {{ w = w + red[lid * {MV_WG}u + s]; }}\n\
             out[lid * {n}u + g] = {st}(w); }}"
        )
    } else {
        format!(
            "{park}workgroupBarrier();\n\
             for (var s: u32 = {half}u; s > 0u; s = s >> 1u) {{\n\
               if (lid < s) {{\n{comb}}}\n\
               workgroupBarrier();\n\
             }}\n\
             if (lid < {m}u) {{ out[lid * {n}u + g] = {st}(red[lid * {MV_WG}u]); }}",
            half = MV_WG / 2,
        )
    };
    let body = format!(
        "let rb = g * {rb}u;\n{acc}\
         for (var gi: u32 = lid; gi < {gpr}u; gi = gi + {MV_WG}u) {{\n\
           let ab = grp_ab(rb, gi);\n{sums}\
           for (var e: u32 = 0u; e < 16u; e = e + 1u) {{\n\
             let q = grp_q(rb, gi, e); let xo = gi * 16u + e;\n{fma}\
           }}\n{fold}\
         }}\n{combine}"
    );
    let extra = format!("{code}var<workgroup> red: array<f32, {}>;\n", m as u32 * MV_WG);
    (module(bufs, &extra, MV_WG, n as u32, &body), n)
}

/// Output tile side of the GEMM (as in `matmul`): 64 threads with a 4x4 block each.
const TILE: usize = 32;

/// Tiled GEMM: each k step of 16 is one 16-group of every weight row in the tile, decoded by
/// two threads per row into workgroup memory, then the same register blocking as `matmul`.
fn gemm(m: usize, n: usize, k: usize, rb: usize, code: &str, bufs: &str, st: &str) -> (String, usize) {
    let (tm, tn) = (m.div_ceil(TILE), n.div_ceil(TILE));
    let q4 = TILE / 4;
    let mut store = String::new();
    for i in 0..4 {
        store += &format!("let r{i} = tm * {TILE}u + ty * 4u + {i}u;\n");
        for j in 0..4 {
            let c = format!("tn * {TILE}u + tx * 4u + {j}u");
            store += &format!("if (r{i} < {m}u && {c} < {n}u) {{ out[r{i} * {n}u + {c}] = {st}(c{i}[{j}]); }}\n");
        }
    }
    let extra = format!(
        "{code}var<workgroup> As: array<vec4<f32>, {0}>;\nvar<workgroup> Bs: array<vec4<f32>, {0}>;\n",
        16 * q4
    );
    let body = format!(
        "let tn = g % {tn}u;\nlet tm = g / {tn}u;\n\
         let tx = lid % {q4}u;\nlet ty = lid / {q4}u;\n\
         let nl = lid / 2u; let nn = tn * {TILE}u + nl; let e0 = (lid % 2u) * 8u;\n\
         var c0 = vec4<f32>(); var c1 = vec4<f32>(); var c2 = vec4<f32>(); var c3 = vec4<f32>();\n\
         for (var k0: u32 = 0u; k0 < {k}u; k0 = k0 + 16u) {{\n\
           for (var l: u32 = 0u; l < 8u; l = l + 1u) {{\n\
             let e = lid + l * 64u;\n\
             let mm = tm * {TILE}u + e / 16u; let kk = k0 + e % 16u;\n\
             var v: f32 = 0.0;\n\
             if (mm < {m}u) {{ v = f32(x[mm * {k}u + kk]); }}\n\
             As[(e % 16u) * {q4}u + (e / 16u) / 4u][(e / 16u) % 4u] = v;\n\
           }}\n\
           if (nn < {n}u) {{\n\
             let rb = nn * {rb}u; let gi = k0 / 16u; let ab = grp_ab(rb, gi);\n\
             for (var e: u32 = e0; e < e0 + 8u; e = e + 1u) {{ Bs[e * {q4}u + nl / 4u][nl % 4u] = ab.x * grp_q(rb, gi, e) + ab.y; }}\n\
           }} else {{\n\
             for (var e: u32 = e0; e < e0 + 8u; e = e + 1u) {{ Bs[e * {q4}u + nl / 4u][nl % 4u] = 0.0; }}\n\
           }}\n\
           workgroupBarrier();\n\
           for (var q: u32 = 0u; q < 16u; q = q + 1u) {{\n\
             let av = As[q * {q4}u + ty];\n\
             let bv = Bs[q * {q4}u + tx];\n\
             c0 = c0 + av.x * bv; c1 = c1 + av.y * bv; c2 = c2 + av.z * bv; c3 = c3 + av.w * bv;\n\
           }}\n\
           workgroupBarrier();\n\
         }}\n{store}"
    );
    let groups = tm * tn;
    (module(bufs, &extra, (q4 * q4) as u32, groups as u32, &body), groups)
}
