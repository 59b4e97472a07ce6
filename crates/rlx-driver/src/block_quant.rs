//! ggml block dequantization (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) written once over `BlockOps`, the few
//! tensor operations it needs (static slices, reshapes, byte bit-fields, f16 reassembly, f32
//! arithmetic), so every whole-graph backend keeps packed weights packed on its device: rlx-pjrt
//! implements `BlockOps` with StableHLO ops, rlx-mlx with MLX calls.
//!
//! Every index is static: a backend's compiler sees slices, reshapes and elementwise ops it can
//! fuse into the consumer. The K-quants follow rlx-ir's `quant/decode.rs` (ggml's reference kernels)
//! operation for operation: super-blocks of 256 values in sub-blocks of 32 (Q4_K, Q5_K) or 16
//! (Q6_K).

use rlx_ir::QuantScheme;

/// A bitwise operation on u8 values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BitOp {
    /// `a & b`.
    And,
    /// `a | b`.
    Or,
    /// `a << b`.
    Shl,
    /// `a >> b` (logical).
    Shr,
}

/// An f32 arithmetic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arith {
    /// `a * b`.
    Mul,
    /// `a - b`.
    Sub,
}

/// The tensor operations block dequantization is written in. Values carry their dims; binary
/// operations take equal dims (callers broadcast first).
pub trait BlockOps {
    /// A value of the backend's program.
    type V: Clone;
    /// The dims of a value.
    fn dims(&self, v: &Self::V) -> Vec<usize>;
    /// `x[..., start..end]` of the last axis.
    fn slice_last(&mut self, x: &Self::V, start: usize, end: usize) -> Self::V;
    /// The same elements with new dims.
    fn reshape(&mut self, x: &Self::V, dims: &[usize]) -> Self::V;
    /// Little-endian byte pairs `[.., 2]` (u8) read as f16 and widened: f32 `[..]`.
    fn f16_pairs(&mut self, x: &Self::V) -> Self::V;
    /// u8 bytes read as i8 and widened to f32.
    fn i8_bytes(&mut self, x: &Self::V) -> Self::V;
    /// u8 values widened to f32.
    fn u8_to_f32(&mut self, x: &Self::V) -> Self::V;
    /// A bitwise operation of two u8 values.
    fn bits(&mut self, op: BitOp, a: &Self::V, b: &Self::V) -> Self::V;
    /// A bitwise operation of a u8 value and a constant.
    fn bits_const(&mut self, op: BitOp, a: &Self::V, c: u8) -> Self::V;
    /// An f32 operation of two values.
    fn arith(&mut self, op: Arith, a: &Self::V, b: &Self::V) -> Self::V;
    /// An f32 operation of a value and a constant.
    fn arith_const(&mut self, op: Arith, a: &Self::V, c: f32) -> Self::V;
    /// `parts` joined along `axis`.
    fn concat(&mut self, parts: &[&Self::V], axis: usize) -> Self::V;
    /// `x` broadcast numpy-style to `dims`.
    fn broadcast(&mut self, x: &Self::V, dims: &[usize]) -> Self::V;
    /// The u8 constant `vals` laid along `axis` of `dims` (the same at every other index).
    fn u8_along(&mut self, vals: &[u8], dims: &[usize], axis: usize) -> Self::V;
}

/// Dequantizes `x` (u8 `[.., row_bytes]`) to f32 `[.., k]`; None for a scheme without a lowering
/// here or a row length that does not match.
pub fn dequantize<B: BlockOps>(b: &mut B, x: &B::V, scheme: QuantScheme, k: usize) -> Option<B::V> {
    let (bs, bb) = (scheme.block_size(), scheme.block_bytes());
    let xd = b.dims(x);
    if k == 0 || !k.is_multiple_of(bs) || xd.last() != Some(&(k / bs * bb)) {
        return None;
    }
    let emit: fn(&mut B, &B::V) -> B::V = match scheme {
        QuantScheme::Q8_0 => q8_0,
        QuantScheme::Q4_0 => q4_0,
        QuantScheme::Q4_K => |c, v| qkx_k(c, v, false),
        QuantScheme::Q5_K => |c, v| qkx_k(c, v, true),
        QuantScheme::Q6_K => q6_k,
        _ => return None,
    };
    let lead = &xd[..xd.len() - 1];
    let blocks = b.reshape(x, &[lead, &[k / bs, bb]].concat());
    let y = emit(b, &blocks);
    Some(b.reshape(&y, &[lead, &[k]].concat()))
}

/// The f16 scale at byte `at` of each block (`blocks`: `[.., nb, block_bytes]`) as f32 `[.., nb, 1]`.
fn f16_scale<B: BlockOps>(b: &mut B, blocks: &B::V, at: usize) -> B::V {
    let pair = b.slice_last(blocks, at, at + 2);
    let f = b.f16_pairs(&pair);
    let mut one = b.dims(&f);
    one.push(1);
    b.reshape(&f, &one)
}

/// Splits each byte of `x` (`[.., 1, n]`, the 1 at `axis`) into its low and high nibble along
/// `axis`: `[.., 2, n]` with the low nibbles first, as ggml lays out consecutive values.
fn nibbles<B: BlockOps>(b: &mut B, x: &B::V, axis: usize) -> B::V {
    let lo = b.bits_const(BitOp::And, x, 15);
    let hi = b.bits_const(BitOp::Shr, x, 4);
    b.concat(&[&lo, &hi], axis)
}

/// `(x >> shifts) & mask`, `x` broadcast from size 1 to `shifts`' dims along the shifted axis.
fn bit_field<B: BlockOps>(b: &mut B, x: &B::V, shifts: &B::V, mask: u8) -> B::V {
    let x = b.broadcast(x, &b.dims(shifts));
    let s = b.bits(BitOp::Shr, &x, shifts);
    b.bits_const(BitOp::And, &s, mask)
}

/// `a * b` with b broadcast to a's dims.
fn scaled<B: BlockOps>(b: &mut B, a: &B::V, s: &B::V) -> B::V {
    let s = b.broadcast(s, &b.dims(a));
    b.arith(Arith::Mul, a, &s)
}

/// `scale [.., nb, g]` as `[.., nb, g, 1]`, to broadcast over the values of each group.
fn per_group<B: BlockOps>(b: &mut B, scale: &B::V) -> B::V {
    let mut dims = b.dims(scale);
    dims.push(1);
    b.reshape(scale, &dims)
}

/// Q8_0: f16 d, 32 x i8; `d * q`. Returns `[.., nb, 32]` f32, as do the others per block.
fn q8_0<B: BlockOps>(b: &mut B, blocks: &B::V) -> B::V {
    let d = f16_scale(b, blocks, 0);
    let q = b.slice_last(blocks, 2, 34);
    let f = b.i8_bytes(&q);
    scaled(b, &f, &d)
}

/// Q4_0: f16 d, 16 bytes; byte j holds element j (low nibble) and j + 16 (high nibble), each
/// minus 8.
fn q4_0<B: BlockOps>(b: &mut B, blocks: &B::V) -> B::V {
    let r = b.dims(blocks).len();
    let d = f16_scale(b, blocks, 0);
    let qs = b.slice_last(blocks, 2, 18);
    let both = nibbles(b, &qs, r - 1);
    let f = b.u8_to_f32(&both);
    let f = b.arith_const(Arith::Sub, &f, 8.0);
    scaled(b, &f, &d)
}

/// Q4_K (`high` false) and Q5_K (`high` true): f16 d, f16 dmin, 12 bytes of 6-bit scales and
/// mins, [Q5_K: 32 bytes qh], 128 bytes qs. Sub-block j of 32 values is
/// `(d * sc[j]) * q - dmin * m[j]`; its 4-bit part is nibble `j % 2` of `qs[32 * (j / 2) + l]`
/// and Q5_K's fifth bit is bit j of `qh[l]`. Returns `[.., nb, 8, 32]` f32.
fn qkx_k<B: BlockOps>(b: &mut B, blocks: &B::V, high: bool) -> B::V {
    let bd = b.dims(blocks);
    let r = bd.len();
    let lead = &bd[..r - 1];
    let d = f16_scale(b, blocks, 0);
    let dmin = f16_scale(b, blocks, 2);
    // ggml's get_scale_min_k4 on bytes a = sc[0..4], b = sc[4..8], c = sc[8..12]: the first
    // four (scale, min) pairs are the low 6 bits of a and b; the last four take their low
    // 4 bits from c's nibbles and their top 2 bits from the top of a (scales) and b (mins).
    let sa = b.slice_last(blocks, 4, 8);
    let sb = b.slice_last(blocks, 8, 12);
    let sc = b.slice_last(blocks, 12, 16);
    let top = |b: &mut B, x: &B::V| {
        let t = b.bits_const(BitOp::Shr, x, 6);
        b.bits_const(BitOp::Shl, &t, 4)
    };
    let (sc_lo, m_lo) = (b.bits_const(BitOp::And, &sa, 63), b.bits_const(BitOp::And, &sb, 63));
    let (a_top, b_top) = (top(b, &sa), top(b, &sb));
    let c_lo = b.bits_const(BitOp::And, &sc, 15);
    let c_hi = b.bits_const(BitOp::Shr, &sc, 4);
    let sc_hi = b.bits(BitOp::Or, &c_lo, &a_top);
    let m_hi = b.bits(BitOp::Or, &c_hi, &b_top);
    let scales = b.concat(&[&sc_lo, &sc_hi], r - 1);
    let mins = b.concat(&[&m_lo, &m_hi], r - 1);
    let scales = b.u8_to_f32(&scales);
    let mins = b.u8_to_f32(&mins);
    let d1 = scaled(b, &scales, &d);
    let m1 = scaled(b, &mins, &dmin);

    // qs as [.., nb, 4 chunks, 1, 32] -> nibbles [.., nb, 4, 2, 32] = sub-block 2 * chunk + nibble.
    let at = if high { 48 } else { 16 };
    let qs = b.slice_last(blocks, at, at + 128);
    let qs = b.reshape(&qs, &[lead, &[4, 1, 32]].concat());
    let q = nibbles(b, &qs, r);
    let sub = [lead, &[8, 32]].concat();
    let mut q = b.reshape(&q, &sub);
    if high {
        let qh = b.slice_last(blocks, 16, 48);
        let qh = b.reshape(&qh, &[lead, &[1, 32]].concat());
        let shifts = b.u8_along(&[0, 1, 2, 3, 4, 5, 6, 7], &sub, r - 1);
        let h = bit_field(b, &qh, &shifts, 1);
        let h = b.bits_const(BitOp::Shl, &h, 4);
        q = b.bits(BitOp::Or, &q, &h);
    }
    let q = b.u8_to_f32(&q);
    let d1 = per_group(b, &d1);
    let m1 = per_group(b, &m1);
    let d1 = b.broadcast(&d1, &sub);
    let m1 = b.broadcast(&m1, &sub);
    let y = b.arith(Arith::Mul, &d1, &q);
    b.arith(Arith::Sub, &y, &m1)
}

/// Q6_K: 128 bytes ql, 64 bytes qh, 16 i8 scales, f16 d. Value e = 128 h + 32 c + l (h < 2,
/// c < 4, l < 32) takes its low 4 bits from nibble `c / 2` of `ql[64 h + 32 (c % 2) + l]`, its
/// top 2 bits from bits `2c..2c+2` of `qh[32 h + l]`, minus 32; it is
/// `(d * scales[e / 16]) * q`. Returns `[.., nb, 16, 16]` f32.
fn q6_k<B: BlockOps>(b: &mut B, blocks: &B::V) -> B::V {
    let bd = b.dims(blocks);
    let r = bd.len();
    let lead = &bd[..r - 1];
    let flat = [lead, &[256]].concat();
    // ql as [.., nb, 2 halves, 1, 64] -> nibbles [.., nb, 2, 2, 64]: 128 h + 64 (c / 2) + (r % 64).
    let ql = b.slice_last(blocks, 0, 128);
    let ql = b.reshape(&ql, &[lead, &[2, 1, 64]].concat());
    let low = nibbles(b, &ql, r);
    let low = b.reshape(&low, &flat);
    // qh as [.., nb, 2 halves, 1, 32] -> 2-bit fields [.., nb, 2, 4, 32]: 128 h + 32 c + l.
    let qh = b.slice_last(blocks, 128, 192);
    let qh = b.reshape(&qh, &[lead, &[2, 1, 32]].concat());
    let shifts = b.u8_along(&[0, 2, 4, 6], &[lead, &[2, 4, 32]].concat(), r);
    let high = bit_field(b, &qh, &shifts, 3);
    let high = b.reshape(&high, &flat);
    let high = b.bits_const(BitOp::Shl, &high, 4);
    let q = b.bits(BitOp::Or, &low, &high);
    let q = b.u8_to_f32(&q);
    let q = b.arith_const(Arith::Sub, &q, 32.0);
    let groups = [lead, &[16, 16]].concat();
    let q = b.reshape(&q, &groups);

    let sc = b.slice_last(blocks, 192, 208);
    let sc = b.i8_bytes(&sc);
    let d = f16_scale(b, blocks, 208);
    let ds = scaled(b, &sc, &d);
    let ds = per_group(b, &ds);
    let ds = b.broadcast(&ds, &groups);
    b.arith(Arith::Mul, &ds, &q)
}
