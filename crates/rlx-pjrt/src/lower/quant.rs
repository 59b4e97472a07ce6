//! `dequantize` of ggml blocks in StableHLO, so packed weights stay packed on the device:
//! bytes are sliced per block, scales reassembled with `bitcast_convert`, nibbles split with
//! `and` / `shift_right_logical`.

use super::emit::i64_array;
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
    ctx.op("reshape", &[&f], "", &one, DType::F32)
}

/// `q * d` with d `[.., nb, 1]` broadcast over the block's values, reshaped to the output.
fn scale(ctx: &mut Ctx, q: &V, d: &V, out: &[usize]) -> V {
    let d = super::emit::broadcast(ctx, d, &q.dims);
    let y = ctx.op("multiply", &[q, &d], "", &q.dims.clone(), DType::F32);
    ctx.op("reshape", &[&y], "", out, DType::F32)
}

/// Q8_0 and Q4_0; the K-quants are not written yet (they are reported missing).
pub fn dequantize(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::Dequantize(d) = &n.op else { return None };
    let x = &ins[0];
    if n.ty.dtype != DType::F32 || x.dt != DType::U8 || !d.k.is_multiple_of(32) {
        return None;
    }
    let bb = d.scheme.block_bytes();
    let nb = d.k / 32;
    let mut bd: Vec<usize> = x.dims[..x.dims.len() - 1].to_vec();
    bd.extend([nb, bb]);
    if d.scheme != QuantScheme::Q8_0 && d.scheme != QuantScheme::Q4_0 {
        return None;
    }
    let blocks = ctx.op("reshape", &[x], "", &bd, DType::U8);
    let scale_d = f16_scale(ctx, &blocks, 0);
    let q = if d.scheme == QuantScheme::Q8_0 {
        let q = last_axis(ctx, &blocks, 2, 34);
        let s = ctx.op("bitcast_convert", &[&q], "", &q.dims.clone(), DType::I8);
        ctx.op("convert", &[&s], "", &q.dims.clone(), DType::F32)
    } else {
        // Q4_0: byte j holds element j (low nibble) and j + 16 (high nibble), each minus 8.
        let qs = last_axis(ctx, &blocks, 2, 18);
        let qd = qs.dims.clone();
        let mask = ctx.splat(15.0, &qd, DType::U8);
        let four = ctx.splat(4.0, &qd, DType::U8);
        let lo = ctx.op("and", &[&qs, &mask], "", &qd, DType::U8);
        let hi = ctx.op("shift_right_logical", &[&qs, &four], "", &qd, DType::U8);
        let mut full = qd.clone();
        let r = full.len();
        full[r - 1] = 32;
        let both = ctx.op("concatenate", &[&lo, &hi], &format!("dimension = {} : i64", r - 1), &full, DType::U8);
        let f = ctx.op("convert", &[&both], "", &full, DType::F32);
        let eight = ctx.splat(8.0, &full, DType::F32);
        ctx.op("subtract", &[&f, &eight], "", &full, DType::F32)
    };
    Some(scale(ctx, &q, &scale_d, dims))
}
