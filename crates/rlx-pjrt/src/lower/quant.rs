//! `dequantize` of ggml blocks in StableHLO, so packed weights stay packed on the device:
//! bytes are sliced per block, scales reassembled with `bitcast_convert`, nibbles split with
//! `and` / `shift_right_logical`. Every index is static, so the whole unpacking is slices,
//! reshapes and elementwise ops that XLA fuses into the consumer.
//!
//! The K-quants follow rlx-gguf's `dequant.rs` (ggml's reference kernels) operation for
//! operation: super-blocks of 256 values in sub-blocks of 32 (Q4_K, Q5_K) or 16 (Q6_K).

use super::emit::{broadcast, i64_array};
use super::{Ctx, V};
use rlx_ir::{DType, Node, Op, QuantScheme};

/// `x[..., start..end]` of the last axis.
fn last_axis(ctx: &mut Ctx, x: &V, start: usize, end: usize) -> V {
    let r = x.dims.len();
    let mut limit = x.dims.clone();
    limit[r - 1] = end;
    let starts: Vec<usize> = (0..r).map(|i| if i == r - 1 { start } else { 0 }).collect();
    let attrs = format!(
        "start_indices = {}, limit_indices = {}, strides = {}",
        i64_array(&starts),
        i64_array(&limit),
        i64_array(vec![1; r])
    );
    let mut dims = x.dims.clone();
    dims[r - 1] = end - start;
    ctx.op("slice", &[x], &attrs, &dims, x.dt)
}

/// The f16 scale at byte `at` of each block (`blocks`: `[.., nb, block_bytes]` u8) as f32
/// `[.., nb, 1]`.
fn f16_scale(ctx: &mut Ctx, blocks: &V, at: usize) -> V {
    let b = last_axis(ctx, blocks, at, at + 2);
    let lead = &blocks.dims[..blocks.dims.len() - 1];
    let h = ctx.op("bitcast_convert", &[&b], "", lead, DType::F16);
    let f = ctx.op("convert", &[&h], "", lead, DType::F32);
    let mut one: Vec<usize> = lead.to_vec();
    one.push(1);
    reshape(ctx, &f, &one)
}

fn reshape(ctx: &mut Ctx, x: &V, dims: &[usize]) -> V {
    ctx.op("reshape", &[x], "", dims, x.dt)
}

fn convert(ctx: &mut Ctx, x: &V, dt: DType) -> V {
    ctx.op("convert", &[x], "", &x.dims.clone(), dt)
}

/// `a <op> b` of two values with the same dims and dtype.
fn bin(ctx: &mut Ctx, op: &str, a: &V, b: &V) -> V {
    ctx.op(op, &[a, b], "", &a.dims.clone(), a.dt)
}

/// `x <op> c` for a constant `c` of x's dtype (`and`, `or`, the shifts).
fn with_const(ctx: &mut Ctx, op: &str, x: &V, c: u8) -> V {
    let k = ctx.splat(f64::from(c), &x.dims, x.dt);
    bin(ctx, op, x, &k)
}

/// `x <op> c` for an f32 constant.
fn with_f32(ctx: &mut Ctx, op: &str, x: &V, c: f64) -> V {
    let k = ctx.splat(c, &x.dims, DType::F32);
    bin(ctx, op, x, &k)
}

/// `parts` joined along `axis`.
fn concat(ctx: &mut Ctx, parts: &[&V], axis: usize) -> V {
    let mut dims = parts[0].dims.clone();
    dims[axis] = parts.iter().map(|p| p.dims[axis]).sum();
    ctx.op("concatenate", parts, &format!("dimension = {axis} : i64"), &dims, parts[0].dt)
}

/// Splits each byte of `x` (`[.., 1, n]`, the 1 at `axis`) into its low and high nibble along
/// `axis`: `[.., 2, n]` with the low nibbles first, as ggml lays out consecutive values.
fn nibbles(ctx: &mut Ctx, x: &V, axis: usize) -> V {
    let lo = with_const(ctx, "and", x, 15);
    let hi = with_const(ctx, "shift_right_logical", x, 4);
    concat(ctx, &[&lo, &hi], axis)
}

/// The u8 constant `vals` laid along `axis` of `dims` (the same at every other index): the
/// per-position shift amounts, so one `shift_right_logical` picks a different bit per row.
fn along(ctx: &mut Ctx, vals: &[u8], dims: &[usize], axis: usize) -> V {
    let list: Vec<String> = vals.iter().map(u8::to_string).collect();
    let n = [vals.len()];
    let attrs = format!("value = dense<[{}]> : {}", list.join(", "), super::tensor_ty(&n, DType::U8));
    let c = ctx.op("constant", &[], &attrs, &n, DType::U8);
    ctx.op("broadcast_in_dim", &[&c], &format!("broadcast_dimensions = array<i64: {axis}>"), dims, DType::U8)
}

/// `(x >> shifts) & mask`, `x` broadcast from size 1 to `shifts`' dims along the shifted axis.
fn bit_field(ctx: &mut Ctx, x: &V, shifts: &V, mask: u8) -> V {
    let x = broadcast(ctx, x, &shifts.dims);
    let s = bin(ctx, "shift_right_logical", &x, shifts);
    with_const(ctx, "and", &s, mask)
}

/// `scale [.., nb, g]` broadcast over the values of each group (`q`: `[.., nb, g, n]`).
fn per_group(ctx: &mut Ctx, scale: &V) -> V {
    let mut dims = scale.dims.clone();
    dims.push(1);
    reshape(ctx, scale, &dims)
}

/// Writes `Dequantize` for Q8_0, Q4_0, Q4_K, Q5_K and Q6_K (u8 `[.., row_bytes]` -> f32
/// `[.., k]`); None for other schemes or dtypes, which are then reported missing.
pub fn dequantize(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::Dequantize(d) = &n.op else { return None };
    let x = &ins[0];
    let (bs, bb) = (d.scheme.block_size(), d.scheme.block_bytes());
    if n.ty.dtype != DType::F32 || x.dt != DType::U8 || d.k == 0 || !d.k.is_multiple_of(bs) {
        return None;
    }
    let nb = d.k / bs;
    if x.dims.last() != Some(&(nb * bb)) {
        return None;
    }
    let emit: fn(&mut Ctx, &V) -> V = match d.scheme {
        s if s == QuantScheme::Q8_0 => q8_0,
        s if s == QuantScheme::Q4_0 => q4_0,
        s if s == QuantScheme::Q4_K => |c, b| qkx_k(c, b, false),
        s if s == QuantScheme::Q5_K => |c, b| qkx_k(c, b, true),
        s if s == QuantScheme::Q6_K => q6_k,
        _ => return None,
    };
    let mut bd: Vec<usize> = x.dims[..x.dims.len() - 1].to_vec();
    bd.extend([nb, bb]);
    let blocks = reshape(ctx, x, &bd);
    let y = emit(ctx, &blocks);
    Some(reshape(ctx, &y, dims))
}

/// Q8_0: f16 d, 32 x i8; `d * q`. Returns `[.., nb, 32]` f32, as do the others per block.
fn q8_0(ctx: &mut Ctx, blocks: &V) -> V {
    let d = f16_scale(ctx, blocks, 0);
    let q = last_axis(ctx, blocks, 2, 34);
    let s = ctx.op("bitcast_convert", &[&q], "", &q.dims.clone(), DType::I8);
    let f = convert(ctx, &s, DType::F32);
    let d = broadcast(ctx, &d, &f.dims);
    bin(ctx, "multiply", &f, &d)
}

/// Q4_0: f16 d, 16 bytes; byte j holds element j (low nibble) and j + 16 (high nibble), each
/// minus 8.
fn q4_0(ctx: &mut Ctx, blocks: &V) -> V {
    let r = blocks.dims.len();
    let d = f16_scale(ctx, blocks, 0);
    let qs = last_axis(ctx, blocks, 2, 18);
    let both = nibbles(ctx, &qs, r - 1);
    let f = convert(ctx, &both, DType::F32);
    let f = with_f32(ctx, "subtract", &f, 8.0);
    let d = broadcast(ctx, &d, &f.dims);
    bin(ctx, "multiply", &f, &d)
}

/// Q4_K (`high` false) and Q5_K (`high` true): f16 d, f16 dmin, 12 bytes of 6-bit scales and
/// mins, [Q5_K: 32 bytes qh], 128 bytes qs. Sub-block j of 32 values is
/// `(d * sc[j]) * q - dmin * m[j]`; its 4-bit part is nibble `j % 2` of `qs[32 * (j / 2) + l]`
/// and Q5_K's fifth bit is bit j of `qh[l]`. Returns `[.., nb, 8, 32]` f32.
fn qkx_k(ctx: &mut Ctx, blocks: &V, high: bool) -> V {
    let r = blocks.dims.len();
    let lead = &blocks.dims[..r - 1];
    let d = f16_scale(ctx, blocks, 0);
    let dmin = f16_scale(ctx, blocks, 2);
    // ggml's get_scale_min_k4 on bytes a = sc[0..4], b = sc[4..8], c = sc[8..12]: the first
    // four (scale, min) pairs are the low 6 bits of a and b; the last four take their low
    // 4 bits from c's nibbles and their top 2 bits from the top of a (scales) and b (mins).
    let a = last_axis(ctx, blocks, 4, 8);
    let b = last_axis(ctx, blocks, 8, 12);
    let c = last_axis(ctx, blocks, 12, 16);
    let six = |ctx: &mut Ctx, x: &V| with_const(ctx, "and", x, 63);
    let top = |ctx: &mut Ctx, x: &V| {
        let t = with_const(ctx, "shift_right_logical", x, 6);
        with_const(ctx, "shift_left", &t, 4)
    };
    let (sc_lo, m_lo) = (six(ctx, &a), six(ctx, &b));
    let (a_top, b_top) = (top(ctx, &a), top(ctx, &b));
    let c_lo = with_const(ctx, "and", &c, 15);
    let c_hi = with_const(ctx, "shift_right_logical", &c, 4);
    let sc_hi = bin(ctx, "or", &c_lo, &a_top);
    let m_hi = bin(ctx, "or", &c_hi, &b_top);
    let sc = concat(ctx, &[&sc_lo, &sc_hi], r - 1);
    let m = concat(ctx, &[&m_lo, &m_hi], r - 1);
    let sc = convert(ctx, &sc, DType::F32);
    let m = convert(ctx, &m, DType::F32);
    let d = broadcast(ctx, &d, &sc.dims);
    let dmin = broadcast(ctx, &dmin, &m.dims);
    let d1 = bin(ctx, "multiply", &d, &sc);
    let m1 = bin(ctx, "multiply", &dmin, &m);

    // qs as [.., nb, 4 chunks, 1, 32] -> nibbles [.., nb, 4, 2, 32] = sub-block 2 * chunk + nibble.
    let at = if high { 48 } else { 16 };
    let qs = last_axis(ctx, blocks, at, at + 128);
    let qs = reshape(ctx, &qs, &[lead, &[4, 1, 32]].concat());
    let q = nibbles(ctx, &qs, r);
    let sub_dims = [lead, &[8, 32]].concat();
    let mut q = reshape(ctx, &q, &sub_dims);
    if high {
        let qh = last_axis(ctx, blocks, 16, 48);
        let qh = reshape(ctx, &qh, &[lead, &[1, 32]].concat());
        let shifts = along(ctx, &[0, 1, 2, 3, 4, 5, 6, 7], &sub_dims, r - 1);
        let h = bit_field(ctx, &qh, &shifts, 1);
        let h = with_const(ctx, "shift_left", &h, 4);
        q = bin(ctx, "or", &q, &h);
    }
    let q = convert(ctx, &q, DType::F32);
    let d1 = per_group(ctx, &d1);
    let m1 = per_group(ctx, &m1);
    let d1 = broadcast(ctx, &d1, &sub_dims);
    let m1 = broadcast(ctx, &m1, &sub_dims);
    let y = bin(ctx, "multiply", &d1, &q);
    bin(ctx, "subtract", &y, &m1)
}

/// Q6_K: 128 bytes ql, 64 bytes qh, 16 i8 scales, f16 d. Value e = 128 h + 32 c + l (h < 2,
/// c < 4, l < 32) takes its low 4 bits from nibble `c / 2` of `ql[64 h + 32 (c % 2) + l]`, its
/// top 2 bits from bits `2c..2c+2` of `qh[32 h + l]`, minus 32; it is
/// `(d * scales[e / 16]) * q`. Returns `[.., nb, 16, 16]` f32.
fn q6_k(ctx: &mut Ctx, blocks: &V) -> V {
    let r = blocks.dims.len();
    let lead = &blocks.dims[..r - 1];
    let flat = [lead, &[256]].concat();
    // ql as [.., nb, 2 halves, 1, 64] -> nibbles [.., nb, 2, 2, 64]: 128 h + 64 (c / 2) + (r % 64).
    let ql = last_axis(ctx, blocks, 0, 128);
    let ql = reshape(ctx, &ql, &[lead, &[2, 1, 64]].concat());
    let low = nibbles(ctx, &ql, r);
    let low = reshape(ctx, &low, &flat);
    // qh as [.., nb, 2 halves, 1, 32] -> 2-bit fields [.., nb, 2, 4, 32]: 128 h + 32 c + l.
    let qh = last_axis(ctx, blocks, 128, 192);
    let qh = reshape(ctx, &qh, &[lead, &[2, 1, 32]].concat());
    let shifts = along(ctx, &[0, 2, 4, 6], &[lead, &[2, 4, 32]].concat(), r);
    let high = bit_field(ctx, &qh, &shifts, 3);
    let high = reshape(ctx, &high, &flat);
    let high = with_const(ctx, "shift_left", &high, 4);
    let q = bin(ctx, "or", &low, &high);
    let q = convert(ctx, &q, DType::F32);
    let q = with_f32(ctx, "subtract", &q, 32.0);
    let groups = [lead, &[16, 16]].concat();
    let q = reshape(ctx, &q, &groups);

    let sc = last_axis(ctx, blocks, 192, 208);
    let sc = ctx.op("bitcast_convert", &[&sc], "", &sc.dims.clone(), DType::I8);
    let sc = convert(ctx, &sc, DType::F32);
    let d = f16_scale(ctx, blocks, 208);
    let d = broadcast(ctx, &d, &sc.dims);
    let ds = bin(ctx, "multiply", &d, &sc);
    let ds = per_group(ctx, &ds);
    let ds = broadcast(ctx, &ds, &groups);
    bin(ctx, "multiply", &ds, &q)
}
