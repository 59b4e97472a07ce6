//! TFLite Micro's int8 softmax as an rlx graph: gemmlowp's fixed-point `exp_on_negative_values`
//! and `one_over_one_plus_x_for_x_in_0_1`, with every step an exact integer operation on f64:
//! products of two int32 values split into 16-bit halves, shifts and masks through `floor` of
//! values scaled by powers of two, bit tests and leading-zero counts through comparisons.

use super::{c, ind};
use rlx_cortexm::kernels::SoftmaxParams;
use rlx_ir::{Graph, NodeId};

const MIN: f64 = -2147483648.0;
const MAX: f64 = 2147483647.0;

fn pow2(e: i32) -> f64 {
    2f64.powi(e)
}

/// `floor(x / 2^k)`.
fn floor_pot(g: &mut Graph, x: NodeId, k: i32) -> NodeId {
    let s = c(g, pow2(-k));
    let y = g.mul(x, s);
    g.floor(y)
}

/// `x - floor(x / 2^k) 2^k`, in `[0, 2^k)`.
fn mod_pot(g: &mut Graph, x: NodeId, k: i32) -> NodeId {
    let f = floor_pot(g, x, k);
    let p = c(g, pow2(k));
    let fp = g.mul(f, p);
    g.sub(x, fp)
}

/// gemmlowp's `SaturatingRoundingDoublingHighMul(a, b)` for two int32 tensors: the product as
/// `ah bh 2^32 + (ah bl + al bh) 2^16 + al bl` (16-bit halves, every part exact), the nudge, the
/// floor of the division by 2^31 assembled from the parts, then C's truncation toward zero.
pub fn srdhm(g: &mut Graph, a: NodeId, b: NodeId) -> NodeId {
    let (ah, bh) = (floor_pot(g, a, 16), floor_pot(g, b, 16));
    let (al, bl) = (mod_pot(g, a, 16), mod_pot(g, b, 16));
    let t2 = g.mul(ah, bh);
    let (x1, x2) = (g.mul(ah, bl), g.mul(al, bh));
    let t1 = g.add(x1, x2);
    let t0 = g.mul(al, bl);
    // The product's sign is the factors' (zero counts as non-negative).
    let (sa, sb) = (g.sign(a), g.sign(b));
    let s = g.mul(sa, sb);
    let zero = c(g, 0.0);
    let nonneg = g.ge(s, zero);
    let (np, nn) = (c(g, pow2(30)), c(g, 1.0 - pow2(30)));
    let nudge = g.where_(nonneg, np, nn);
    let t0n = g.add(t0, nudge);
    // floor(N / 2^31) = 2 t2 + floor(t1 / 2^15) + floor((r1 2^16 + t0n) / 2^31).
    let f1 = floor_pot(g, t1, 15);
    let r1 = mod_pot(g, t1, 15);
    let p16 = c(g, pow2(16));
    let r16 = g.mul(r1, p16);
    let inner = g.add(r16, t0n);
    let f2 = floor_pot(g, inner, 31);
    let rem = mod_pot(g, inner, 31);
    let two = c(g, 2.0);
    let t2x2 = g.mul(t2, two);
    let fl = g.add(t2x2, f1);
    let fl = g.add(fl, f2);
    let neg = g.lt(fl, zero);
    let has_rem = g.gt(rem, zero);
    let (i_neg, i_rem) = (ind(g, neg), ind(g, has_rem));
    let up = g.mul(i_neg, i_rem);
    let r = g.add(fl, up);
    // The one overflow: MIN * MIN saturates to MAX.
    let min = c(g, MIN);
    let (am, bm) = (g.eq(a, min), g.eq(b, min));
    let (am, bm) = (ind(g, am), ind(g, bm));
    let both = g.mul(am, bm);
    let one = c(g, 1.0);
    let both = g.eq(both, one);
    let max = c(g, MAX);
    g.where_(both, max, r)
}

/// gemmlowp's `RoundingDivideByPOT(x, e)` for a constant `e`.
fn rdbp(g: &mut Graph, x: NodeId, e: i32) -> NodeId {
    let q = floor_pot(g, x, e);
    let rem = mod_pot(g, x, e);
    let zero = c(g, 0.0);
    let neg = g.lt(x, zero);
    let neg = ind(g, neg);
    let thr = c(g, ((1i64 << e) - 1) as f64 / 2.0);
    let thr = g.floor(thr);
    let thr = g.add(thr, neg);
    let above = g.gt(rem, thr);
    let above = ind(g, above);
    g.add(q, above)
}

/// `SaturatingRoundingMultiplyByPOT(x, e)` for `e > 0`: `x 2^e` clamped to int32.
fn sat_mul_pot(g: &mut Graph, x: NodeId, e: i32) -> NodeId {
    let p = c(g, pow2(e));
    let y = g.mul(x, p);
    let (lo, hi) = (c(g, MIN), c(g, MAX));
    let y = g.maximum(y, lo);
    g.minimum(y, hi)
}

fn srdhm_c(g: &mut Graph, a: NodeId, b: i32) -> NodeId {
    let b = c(g, b as f64);
    srdhm(g, a, b)
}

/// `exp_on_interval_between_negative_one_quarter_and_0_excl` (Q0.31).
fn exp_on_interval(g: &mut Graph, a: NodeId) -> NodeId {
    const CONSTANT_TERM: i32 = 1895147668;
    const ONE_THIRD: i32 = 715827883;
    let eighth = c(g, pow2(28));
    let x = g.add(a, eighth);
    let x2 = srdhm(g, x, x);
    let x3 = srdhm(g, x2, x);
    let x4 = srdhm(g, x2, x2);
    let x4_4 = rdbp(g, x4, 2);
    let s = g.add(x4_4, x3);
    let s = srdhm_c(g, s, ONE_THIRD);
    let s = g.add(s, x2);
    let poly = rdbp(g, s, 1);
    let xp = g.add(x, poly);
    let ct = c(g, CONSTANT_TERM as f64);
    let m = srdhm(g, ct, xp);
    g.add(ct, m)
}

/// `exp_on_negative_values` for a Q5.26 input `a <= 0` (Q0.31 result).
fn exp_on_negative_values(g: &mut Graph, a: NodeId) -> NodeId {
    let quarter = c(g, pow2(24));
    let amod = mod_pot(g, a, 24);
    let amq = g.sub(amod, quarter);
    let scaled = sat_mul_pot(g, amq, 5);
    let mut result = exp_on_interval(g, scaled);
    let remainder = g.sub(amq, a);
    for (exponent, multiplier) in
        [(-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401), (4, 242)]
    {
        let k = 26 + exponent;
        // Bit k of the (non-negative) remainder.
        let hi = floor_pot(g, remainder, k);
        let bit = mod_pot(g, hi, 1);
        let one = c(g, 1.0);
        let set = g.eq(bit, one);
        let m = srdhm_c(g, result, multiplier);
        result = g.where_(set, m, result);
    }
    let zero = c(g, 0.0);
    let is_zero = g.eq(a, zero);
    let max = c(g, MAX);
    g.where_(is_zero, max, result)
}

/// `one_over_one_plus_x_for_x_in_0_1` (Q0.31 in and out).
fn one_over_one_plus_x(g: &mut Graph, a: NodeId) -> NodeId {
    // RoundingHalfSum(a, MAX) for a >= 0: floor((a + MAX + 1) / 2).
    let m1 = c(g, MAX + 1.0);
    let s = g.add(a, m1);
    let half = floor_pot(g, s, 1);
    let k48 = c(g, 1515870810.0);
    let t = srdhm_c(g, half, -1010580540);
    let mut x = g.add(k48, t);
    let one = c(g, pow2(29));
    for _ in 0..3 {
        let hx = srdhm(g, half, x);
        let om = g.sub(one, hx);
        let p = srdhm(g, x, om);
        let p = sat_mul_pot(g, p, 2);
        x = g.add(x, p);
    }
    sat_mul_pot(g, x, 1)
}

/// Softmax of `x` (int8 values, `[rows, depth]`) with parameters `p`: int8 outputs.
pub fn softmax(g: &mut Graph, x: NodeId, p: &SoftmaxParams) -> NodeId {
    let max = g.max(x, &[-1], true);
    let diff = g.sub(x, max);
    let dmin = c(g, p.diff_min as f64);
    let live = g.ge(diff, dmin);
    let ls = c(g, pow2(p.input_left_shift));
    let d = g.mul(diff, ls);
    let scaled = srdhm_c(g, d, p.input_multiplier);
    let e = exp_on_negative_values(g, scaled);
    let e12 = rdbp(g, e, 12);
    let zero = c(g, 0.0);
    let e12 = g.where_(live, e12, zero);
    let sum = g.sum(e12, &[-1], true);
    // GetReciprocal: the leading zeros of the (positive) sum by comparisons; 2^headroom as a
    // product of factors 2 for every power of two the sum is below.
    let mut scale = c(g, 1.0);
    let two = c(g, 2.0);
    let onef = c(g, 1.0);
    for k in 0..32 {
        let pk = c(g, pow2(k));
        let below = g.lt(sum, pk);
        let f = g.where_(below, two, onef);
        scale = g.mul(scale, f);
    }
    // headroom_plus_one = clz(sum); shifted = sum << clz - 2^31.
    let shifted = g.mul(sum, scale);
    let p31 = c(g, pow2(31));
    let shifted = g.sub(shifted, p31);
    let recip = one_over_one_plus_x(g, shifted);
    // exponent = (12 - clz) + 31 - 8 = 35 - clz: 2^-exponent = 2^clz / 2^35.
    let inv_p35 = c(g, pow2(-35));
    let inv_pe = g.mul(scale, inv_p35);
    let pe = g.recip(inv_pe);
    let prod = srdhm(g, recip, e);
    // RoundingDivideByPOT(prod, exponent) with a per-row exponent.
    let qd = g.mul(prod, inv_pe);
    let q = g.floor(qd);
    let qpe = g.mul(q, pe);
    let rem = g.sub(prod, qpe);
    let pem1 = g.sub(pe, onef);
    let half = c(g, 0.5);
    let halfm = g.mul(pem1, half);
    let thr = g.floor(halfm);
    let neg = g.lt(prod, zero);
    let neg = ind(g, neg);
    let thr = g.add(thr, neg);
    let above = g.gt(rem, thr);
    let above = ind(g, above);
    let unsat = g.add(q, above);
    let off = c(g, -128.0);
    let y = g.add(unsat, off);
    let (lo, hi) = (c(g, -128.0), c(g, 127.0));
    let y = g.maximum(y, lo);
    let y = g.minimum(y, hi);
    g.where_(live, y, lo)
}
