//! NEON forms of the dense attention path's two products and its row softmax (aarch64, where
//! NEON is always present): 4 x 16 register tiles (16 accumulators) fed by one A vector of 4
//! consecutive k per row, used lane by lane (`fmla v.4s, v.4s, v.s[l]`), and 4-lane exps. Same
//! contracts as `dense.rs`'s AVX2 `gemm` and `softmax_span`.

// Intrinsics code: every statement is unsafe; the functions document the contract.
#![allow(unsafe_op_in_unsafe_fn)]

use super::dense::Product;
use crate::kernels::math::exp_f32;
use std::arch::aarch64::*;

/// `exp_f32` on 4 lanes, with the same operations in the same order (no fused multiply-adds),
/// so bit for bit the same: -inf and anything below -87.3 give 0, above 88.72 give +inf, NaN
/// stays NaN.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn exp4(x: float32x4_t) -> float32x4_t {
    let k = vdupq_n_f32;
    // FMAX/FMIN return NaN when either operand is NaN: NaN passes through the clamps.
    let xc = vminq_f32(k(88.376_26), vmaxq_f32(k(-87.336_55), x));
    let round = k(12_582_912.0);
    let n = vsubq_f32(vaddq_f32(vmulq_f32(xc, k(std::f32::consts::LOG2_E)), round), round);
    let r = vaddq_f32(vsubq_f32(xc, vmulq_f32(n, k(0.693_359_4))), vmulq_f32(n, k(2.121_944_4e-4)));
    let mut p = k(1.987_569_1e-4);
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5] {
        p = vaddq_f32(vmulq_f32(p, r), k(c));
    }
    let y = vaddq_f32(vaddq_f32(vmulq_f32(vmulq_f32(p, r), r), r), k(1.0));
    // n is a whole number in [-126, 127] (or NaN, whose lane is NaN anyway).
    let bits = vshlq_n_s32::<23>(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)));
    let y = vmulq_f32(y, vreinterpretq_f32_s32(bits));
    let y = vbslq_f32(vcgtq_f32(x, k(88.722_83)), k(f32::INFINITY), y);
    vbslq_f32(vcltq_f32(x, k(-87.336_55)), k(0.0), y)
}

/// One k step of a `V`-vector tile: `t[r] += a[r][L] * b[0..4 V]` for the 4 rows.
///
/// # Safety
/// `bp` points at `4 V` readable floats.
#[inline(always)]
unsafe fn k_step<const L: i32, const V: usize>(t: &mut [[float32x4_t; V]; 4], av: &[float32x4_t; 4], bp: *const f32) {
    let bv: [float32x4_t; V] = std::array::from_fn(|h| vld1q_f32(bp.add(4 * h)));
    for (row, &a) in t.iter_mut().zip(av) {
        for (v, &b) in row.iter_mut().zip(&bv) {
            *v = vfmaq_laneq_f32::<L>(*v, b, a);
        }
    }
}

/// One 4 x `4 V` tile: `c[r] (+)= a[r] @ b[k, 4 V]` for the rows at `ar` and `cr`. Four k steps
/// share one load of A per row (4 consecutive k, used lane by lane); the last `k % 4` steps
/// multiply by A's elements one at a time. Every output is a chain of FMAs in k order.
///
/// # Safety
/// Each `ar[r]` holds `k` floats, `b` holds `k` rows of `4 V` at `ldb`, each `cr[r]` holds `4 V`.
#[inline(always)]
unsafe fn tile<const V: usize>(
    ar: &[*const f32; 4],
    b: *const f32,
    ldb: usize,
    cr: &[*mut f32; 4],
    k: usize,
    acc: bool,
) {
    let mut t = [[vdupq_n_f32(0.0); V]; 4];
    if acc {
        for (row, &c) in t.iter_mut().zip(cr) {
            for (h, v) in row.iter_mut().enumerate() {
                *v = vld1q_f32(c.add(4 * h));
            }
        }
    }
    let mut bp = b;
    let mut p = 0;
    while p + 4 <= k {
        let av: [float32x4_t; 4] = std::array::from_fn(|r| vld1q_f32(ar[r].add(p)));
        k_step::<0, V>(&mut t, &av, bp);
        k_step::<1, V>(&mut t, &av, bp.add(ldb));
        k_step::<2, V>(&mut t, &av, bp.add(2 * ldb));
        k_step::<3, V>(&mut t, &av, bp.add(3 * ldb));
        bp = bp.add(4 * ldb);
        p += 4;
    }
    while p < k {
        let bv: [float32x4_t; V] = std::array::from_fn(|h| vld1q_f32(bp.add(4 * h)));
        for (row, &a) in t.iter_mut().zip(ar) {
            let x = *a.add(p);
            for (v, &b) in row.iter_mut().zip(&bv) {
                *v = vfmaq_n_f32(*v, b, x);
            }
        }
        bp = bp.add(ldb);
        p += 1;
    }
    for (row, &c) in t.iter().zip(cr) {
        for (h, &v) in row.iter().enumerate() {
            vst1q_f32(c.add(4 * h), v);
        }
    }
}

/// The product `p` as `dense::gemm`, in 4 x 16 tiles; columns past the last multiple of 16 take
/// 4-wide, then scalar steps.
///
/// # Safety
/// `p`'s pointers cover its matrices.
#[target_feature(enable = "neon")]
pub(super) unsafe fn gemm(p: Product) {
    let Product { a, lda, b, ldb, c, ldc, m, n, k, acc } = p;
    let (n16, n4) = (n / 16 * 16, n / 4 * 4);
    for i in (0..m).step_by(4) {
        let ar: [*const f32; 4] = std::array::from_fn(|r| a.add((i + r) * lda));
        let cr: [*mut f32; 4] = std::array::from_fn(|r| c.add((i + r) * ldc));
        let at = |j: usize| -> [*mut f32; 4] { std::array::from_fn(|r| cr[r].add(j)) };
        for j in (0..n16).step_by(16) {
            tile::<4>(&ar, b.add(j), ldb, &at(j), k, acc);
        }
        for j in (n16..n4).step_by(4) {
            tile::<1>(&ar, b.add(j), ldb, &at(j), k, acc);
        }
        for (&ap, &cp) in ar.iter().zip(&cr) {
            for j in n4..n {
                let mut x = if acc { *cp.add(j) } else { 0.0 };
                for p in 0..k {
                    x = (*ap.add(p)).mul_add(*b.add(p * ldb + j), x);
                }
                *cp.add(j) = x;
            }
        }
    }
}

/// `dense::softmax_span` with 4 lanes: numerators of `p[a..b]` in place (`exp(x - max)`), zero
/// elsewhere in `p`; returns (max, sum). `hide` (a bool mask row over `a..b`) hides the keys
/// whose byte is 0: they are -inf in the max and 0 after the exp, whatever their score. A span
/// with no visible key gives max -inf (the caller writes NaN). Panics unless `a <= b <= p.len()`
/// and `hide` holds at least `b - a` bytes.
#[target_feature(enable = "neon")]
pub(super) fn softmax_span(p: &mut [f32], a: usize, b: usize, hide: Option<&[u8]>) -> (f32, f32) {
    p[..a].fill(0.0);
    p[b..].fill(0.0);
    let s = &mut p[a..b];
    let len = s.len();
    assert!(hide.is_none_or(|m| m.len() >= len), "the mask row covers the span");
    let n4 = len / 4 * 4;
    let ninf = vdupq_n_f32(f32::NEG_INFINITY);
    // Lanes `j..j + 4` with hidden keys set to -inf (never stored back over the scores).
    let lanes = |s: &[f32], j: usize| -> float32x4_t {
        // SAFETY: the slice holds the 4 lanes.
        let x = unsafe { vld1q_f32(s[j..j + 4].as_ptr()) };
        match hide {
            Some(m) => {
                let bytes: [u8; 4] = m[j..j + 4].try_into().expect("4 mask bytes");
                let b8 = vreinterpret_u8_u32(vdup_n_u32(u32::from_le_bytes(bytes)));
                let b32 = vmovl_u16(vget_low_u16(vmovl_u8(b8)));
                vbslq_f32(vceqzq_u32(b32), ninf, x)
            }
            None => x,
        }
    };
    let hidden = |j: usize| hide.is_some_and(|m| m[j] == 0);
    // Max over two accumulators: a NaN anywhere makes the row NaN (FMAX keeps it, and its exp
    // is NaN).
    let (mut m0, mut m1) = (ninf, ninf);
    let mut j = 0;
    while j + 8 <= n4 {
        m0 = vmaxq_f32(m0, lanes(s, j));
        m1 = vmaxq_f32(m1, lanes(s, j + 4));
        j += 8;
    }
    if j < n4 {
        m0 = vmaxq_f32(m0, lanes(s, j));
    }
    let tail = (n4..len).filter(|&j| !hidden(j)).map(|j| s[j]);
    let mx = tail.fold(vmaxvq_f32(vmaxq_f32(m0, m1)), |m, x| if x > m { x } else { m });
    if mx == f32::NEG_INFINITY {
        s.fill(0.0);
        return (mx, 0.0);
    }
    let vmx = vdupq_n_f32(mx);
    let (mut s0, mut s1) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
    let mut j = 0;
    while j + 8 <= n4 {
        let (e0, e1) = (exp4(vsubq_f32(lanes(s, j), vmx)), exp4(vsubq_f32(lanes(s, j + 4), vmx)));
        // SAFETY: the slices hold the 4 lanes each.
        unsafe {
            vst1q_f32(s[j..j + 4].as_mut_ptr(), e0);
            vst1q_f32(s[j + 4..j + 8].as_mut_ptr(), e1);
        }
        (s0, s1) = (vaddq_f32(s0, e0), vaddq_f32(s1, e1));
        j += 8;
    }
    if j < n4 {
        let e = exp4(vsubq_f32(lanes(s, j), vmx));
        // SAFETY: the slice holds the 4 lanes.
        unsafe { vst1q_f32(s[j..j + 4].as_mut_ptr(), e) };
        s0 = vaddq_f32(s0, e);
    }
    let mut sum = vaddvq_f32(vaddq_f32(s0, s1));
    for (j, x) in s.iter_mut().enumerate().skip(n4) {
        *x = if hidden(j) { 0.0 } else { exp_f32(*x - mx) };
        sum += *x;
    }
    (mx, sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `exp4` on each group of 4 values (the last group padded with zeros).
    fn exp4_all(xs: &[f32]) -> Vec<f32> {
        let mut out = Vec::with_capacity(xs.len() + 3);
        for group in xs.chunks(4) {
            let mut lanes = [0f32; 4];
            lanes[..group.len()].copy_from_slice(group);
            let mut y = [0f32; 4];
            // SAFETY: 4 lanes in and out; every aarch64 CPU has NEON.
            unsafe { vst1q_f32(y.as_mut_ptr(), exp4(vld1q_f32(lanes.as_ptr()))) };
            out.extend_from_slice(&y[..group.len()]);
        }
        out
    }

    #[test]
    fn four_lanes_match_the_scalar_exp_bit_for_bit() {
        let mut xs: Vec<f32> = (-12000..12000).map(|i| i as f32 * 8.7e-3).collect();
        // A sweep over the bit patterns: every exponent, both signs, NaNs and infinities.
        xs.extend((0..=u32::MAX).step_by(65_521).map(f32::from_bits));
        xs.extend([0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30, f32::MIN_POSITIVE / 4.0, 0.5, -0.5, 1.0, -1.0]);
        xs.extend([88.376_26, 88.376_27, 88.4, 88.722_83, 88.722_84, 89.0, 100.0]);
        xs.extend([-87.336_55, -87.336_54, -87.336_56, -87.0, -88.0, -100.0, -103.97]);
        xs.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MAX, f32::MIN]);
        for (&x, &y) in xs.iter().zip(&exp4_all(&xs)) {
            let want = exp_f32(x);
            assert!(y.to_bits() == want.to_bits() || (y.is_nan() && want.is_nan()), "exp4({x}) = {y}, scalar {want}");
        }
        let edges = exp4_all(&[f32::NEG_INFINITY, -100.0, f32::INFINITY, 89.0]);
        assert_eq!(edges, [0.0, 0.0, f32::INFINITY, f32::INFINITY]);
        assert!(exp4_all(&[f32::NAN])[0].is_nan());
    }

    /// `gemm` against a triple loop of FMAs in k order (the same chain per output, so the same
    /// bits), with row strides wider than the rows; padding past each row must stay untouched.
    fn check_gemm(m: usize, n: usize, k: usize, acc: bool) {
        let (lda, ldb, ldc) = (k + 3, n + 5, n + 2);
        let val = |i: usize, s: f32| ((i * 7919 + 13) % 61) as f32 * s - 1.0;
        let a: Vec<f32> = (0..m * lda).map(|i| val(i, 0.031)).collect();
        let b: Vec<f32> = (0..k.max(1) * ldb).map(|i| val(i, 0.027)).collect();
        let c0: Vec<f32> = (0..m * ldc).map(|i| val(i, 0.05)).collect();
        let mut c = c0.clone();
        // SAFETY: the buffers hold m x k, k x n and m x n at their strides.
        unsafe { gemm(Product::new((a.as_ptr(), lda), (b.as_ptr(), ldb), (c.as_mut_ptr(), ldc), (m, n, k), acc)) };
        for i in 0..m {
            for j in 0..ldc {
                let want = if j < n {
                    let init = if acc { c0[i * ldc + j] } else { 0.0 };
                    (0..k).fold(init, |x, p| a[i * lda + p].mul_add(b[p * ldb + j], x))
                } else {
                    c0[i * ldc + j]
                };
                let got = c[i * ldc + j];
                assert_eq!(got.to_bits(), want.to_bits(), "({i}, {j}) of {m}x{n}, k {k}, acc {acc}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn gemm_matches_the_triple_loop() {
        for m in [4, 8, 12] {
            for n in [1, 3, 4, 5, 15, 16, 17, 20, 31, 33, 48] {
                for k in [0, 1, 3, 4, 5, 7, 8, 16, 33] {
                    check_gemm(m, n, k, false);
                    check_gemm(m, n, k, true);
                }
            }
        }
    }

    #[test]
    fn softmax_span_hides_keys_and_zeroes_outside_the_span() {
        let p0: Vec<f32> = (0..48).map(|i| ((i * 37) % 23) as f32 * 0.3 - 2.0).collect();
        for (a, b) in [(0, 48), (3, 40), (5, 6), (7, 7), (16, 35)] {
            let hide: Vec<u8> = (a..b).map(|j| u8::from(j % 5 != 2)).collect();
            for mask in [None, Some(&hide[..])] {
                let mut p = p0.clone();
                // SAFETY: every aarch64 CPU has NEON.
                let (mx, sum) = unsafe { softmax_span(&mut p, a, b, mask) };
                let vis = |j: usize| (a..b).contains(&j) && mask.is_none_or(|m| m[j - a] != 0);
                let want = (0..48).filter(|&j| vis(j)).map(|j| p0[j]).fold(f32::NEG_INFINITY, f32::max);
                assert_eq!(mx, want, "span {a}..{b}");
                let mut total = 0.0;
                for (j, &x) in p.iter().enumerate() {
                    let e = if vis(j) { exp_f32(p0[j] - mx) } else { 0.0 };
                    assert_eq!(x.to_bits(), e.to_bits(), "key {j} of span {a}..{b}");
                    total += e;
                }
                assert!((sum - total).abs() <= 1e-5 * total.max(1.0), "span {a}..{b}: {sum} vs {total}");
            }
        }
        // Every key hidden: max -inf, all zero.
        let mut p = p0.clone();
        // SAFETY: as above.
        let (mx, sum) = unsafe { softmax_span(&mut p, 4, 12, Some(&[0; 8])) };
        assert!(mx == f32::NEG_INFINITY && sum == 0.0 && p.iter().all(|&x| x == 0.0));
    }
}
