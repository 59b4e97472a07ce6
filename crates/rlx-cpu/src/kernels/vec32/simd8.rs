//! 8-lane AVX2 + FMA versions of `exp_f32`, `erf_f32` and `tanh_f32` (same reductions and
//! polynomials, so the same accuracy), and the unary loops built on them: exp, erf, tanh, both
//! GELUs, sigmoid and SiLU, the activations of transformer feed-forward layers.

#[cfg(target_arch = "x86_64")]
use rlx_ir::ops::UnaryKind;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// `out = u(x)` with 8-lane loops for the ops above; false (nothing written) for other ops.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn unary(u: UnaryKind, x: &[f32], out: &mut [f32]) -> bool {
    // One loop per op, so that the lane function is inlined into it.
    match u {
        UnaryKind::Gelu => lanes(x, out, |v| gelu8(v)),
        UnaryKind::GeluTanh => lanes(x, out, |v| gelu_tanh8(v)),
        UnaryKind::Erf => lanes(x, out, |v| erf8(v)),
        UnaryKind::Tanh => lanes(x, out, |v| tanh8(v)),
        UnaryKind::Exp => lanes(x, out, |v| exp8(v)),
        UnaryKind::Sigmoid => lanes(x, out, |v| sigmoid8(v)),
        UnaryKind::Silu => lanes(x, out, |v| silu8(v)),
        _ => return false,
    }
    true
}

/// `x = u(x)` in place, with the loops of `unary`; false (nothing written) for other ops.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn unary_in_place(u: UnaryKind, x: &mut [f32]) -> bool {
    match u {
        UnaryKind::Gelu => lanes_in_place(x, |v| gelu8(v)),
        UnaryKind::GeluTanh => lanes_in_place(x, |v| gelu_tanh8(v)),
        UnaryKind::Erf => lanes_in_place(x, |v| erf8(v)),
        UnaryKind::Tanh => lanes_in_place(x, |v| tanh8(v)),
        UnaryKind::Exp => lanes_in_place(x, |v| exp8(v)),
        UnaryKind::Sigmoid => lanes_in_place(x, |v| sigmoid8(v)),
        UnaryKind::Silu => lanes_in_place(x, |v| silu8(v)),
        _ => return false,
    }
    true
}

/// `x[i] = f(x[i])` 8 lanes at a time; the tail as in `lanes`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn lanes_in_place(x: &mut [f32], f: impl Fn(__m256) -> __m256) {
    let n = x.len();
    let n8 = n / 8 * 8;
    for j in (0..n8).step_by(8) {
        // SAFETY: j + 8 <= n8 <= n; only inlined into AVX2 code (`unary_in_place`).
        unsafe {
            let p = x.as_mut_ptr().add(j);
            _mm256_storeu_ps(p, f(_mm256_loadu_ps(p)))
        };
    }
    if n > n8 {
        let mut buf = [0f32; 8];
        buf[..n - n8].copy_from_slice(&x[n8..n]);
        // SAFETY: 8 lanes.
        unsafe { _mm256_storeu_ps(buf.as_mut_ptr(), f(_mm256_loadu_ps(buf.as_ptr()))) };
        x[n8..n].copy_from_slice(&buf[..n - n8]);
    }
}

/// `out[i] = f(x[i])` 8 lanes at a time; the tail goes through a zero-padded buffer, so it
/// rounds as the body does.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn lanes(x: &[f32], out: &mut [f32], f: impl Fn(__m256) -> __m256) {
    let n = x.len().min(out.len());
    let n8 = n / 8 * 8;
    for j in (0..n8).step_by(8) {
        // SAFETY: j + 8 <= n8 <= both lengths; only inlined into AVX2 code (`unary`).
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(j), f(_mm256_loadu_ps(x.as_ptr().add(j)))) };
    }
    if n > n8 {
        let mut buf = [0f32; 8];
        buf[..n - n8].copy_from_slice(&x[n8..n]);
        // SAFETY: 8 lanes.
        unsafe { _mm256_storeu_ps(buf.as_mut_ptr(), f(_mm256_loadu_ps(buf.as_ptr()))) };
        out[n8..n].copy_from_slice(&buf[..n - n8]);
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn splat(v: f32) -> __m256 {
    // SAFETY: only reached from functions compiled with AVX2 (all callers are).
    unsafe { _mm256_set1_ps(v) }
}

/// `exp_f32` on 8 lanes; -inf and anything below -87.3 give 0, NaN stays NaN.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub fn exp8(x: __m256) -> __m256 {
    let (n, y) = exp_poly!(
        x,
        splat,
        _mm256_min_ps,
        _mm256_max_ps,
        _mm256_add_ps,
        _mm256_sub_ps,
        _mm256_mul_ps,
        _mm256_fmadd_ps,
        _mm256_fnmadd_ps
    );
    let bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    // Underflowing lanes are zeroed before the scaling: their product would be subnormal (a
    // microcode assist on Intel for the whole instruction; -inf lanes are common in softmax).
    let y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, splat(-87.336_55), _CMP_LT_OQ));
    let y = _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
    _mm256_blendv_ps(y, splat(f32::INFINITY), _mm256_cmp_ps(x, splat(88.722_83), _CMP_GT_OQ))
}

/// `erf_f32` on 8 lanes: the same polynomial, with fused multiply-adds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub fn erf8(x: __m256) -> __m256 {
    let y = erf_clamped_poly!(x, splat, _mm256_min_ps, _mm256_max_ps, _mm256_mul_ps, _mm256_fmadd_ps);
    let one = _mm256_or_ps(splat(1.0), _mm256_and_ps(x, splat(-0.0)));
    let past = _mm256_cmp_ps(_mm256_andnot_ps(splat(-0.0), x), splat(super::ERF_LIM), _CMP_GT_OQ);
    _mm256_blendv_ps(y, one, past)
}

/// `tanh_f32` on 8 lanes: a Taylor series below 0.3, else `(1 - e) / (1 + e)`, `e = exp(-2|x|)`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub fn tanh8(x: __m256) -> __m256 {
    let sign = _mm256_and_ps(x, splat(-0.0));
    let a = _mm256_andnot_ps(splat(-0.0), x);
    let e = exp8(_mm256_mul_ps(a, splat(-2.0)));
    let big = _mm256_div_ps(_mm256_sub_ps(splat(1.0), e), _mm256_add_ps(splat(1.0), e));
    let big = _mm256_or_ps(big, sign);
    let x2 = _mm256_mul_ps(x, x);
    let mut s = splat(62.0 / 2835.0);
    for c in [-17.0 / 315.0, 2.0 / 15.0, -1.0 / 3.0, 1.0] {
        s = _mm256_fmadd_ps(s, x2, splat(c));
    }
    let small = _mm256_mul_ps(x, s);
    _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, splat(0.3), _CMP_LT_OQ))
}

/// `1 / (1 + exp(-x))` (the logistic sigmoid), as the op defines it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub fn sigmoid8(x: __m256) -> __m256 {
    _mm256_div_ps(splat(1.0), _mm256_add_ps(splat(1.0), exp8(_mm256_xor_ps(x, splat(-0.0)))))
}

/// `x / (1 + exp(-x))` (SiLU), as the op defines it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub fn silu8(x: __m256) -> __m256 {
    _mm256_div_ps(x, _mm256_add_ps(splat(1.0), exp8(_mm256_xor_ps(x, splat(-0.0)))))
}

/// `0.5 x (1 + erf(x / sqrt 2))`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub fn gelu8(x: __m256) -> __m256 {
    let e = erf8(_mm256_mul_ps(x, splat(std::f32::consts::FRAC_1_SQRT_2)));
    let hx = _mm256_mul_ps(x, splat(0.5));
    _mm256_fmadd_ps(hx, e, hx)
}

/// `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub fn gelu_tanh8(x: __m256) -> __m256 {
    let x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    let inner = _mm256_mul_ps(_mm256_fmadd_ps(x3, splat(0.044_715), x), splat(0.797_884_6));
    let hx = _mm256_mul_ps(x, splat(0.5));
    _mm256_fmadd_ps(hx, tanh8(inner), hx)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::kernels::math::{avx2_fma, exp_f32};
    use crate::kernels::vec32::{erf_f32, tanh_f32};

    /// The 8-lane functions against the scalar ones they mirror, on a grid plus the edges.
    #[test]
    fn lanes_match_the_scalar_functions() {
        if !avx2_fma() {
            return;
        }
        let mut xs: Vec<f32> = (-4000..4000).map(|i| i as f32 * 2.3e-3).collect();
        xs.extend([0.0, -0.0, 1e-7, -1e-7, 0.3, 0.5, -0.5, 9.0, -9.0, 88.0, 89.0, -87.0, -88.0, -100.0]);
        xs.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
        type Pair = (UnaryKind, fn(f32) -> f32, f64);
        let pairs: [Pair; 5] = [
            (UnaryKind::Exp, exp_f32, 1e-6),
            (UnaryKind::Erf, erf_f32, 0.0),
            (UnaryKind::Tanh, tanh_f32, 0.0),
            (UnaryKind::Sigmoid, |x| 1.0 / (1.0 + exp_f32(-x)), 1e-6),
            (UnaryKind::Silu, |x| x / (1.0 + exp_f32(-x)), 1e-6),
        ];
        for (u, f, rel) in pairs {
            let mut out = vec![0.0; xs.len()];
            // SAFETY: avx2_fma() checked above.
            assert!(unsafe { unary(u, &xs, &mut out) });
            for (&x, &y) in xs.iter().zip(&out) {
                let want = f(x);
                let ok = (y.is_nan() && want.is_nan())
                    || y == want
                    || ((y - want).abs() as f64) <= 2e-7 + rel * (want.abs() as f64);
                assert!(ok, "{u:?}({x}) = {y}, scalar {want}");
            }
        }
    }

    #[test]
    fn gelus_match_the_reference_expressions() {
        if !avx2_fma() {
            return;
        }
        // 1003 values: a tail of 3 past the last full lane group.
        let xs: Vec<f32> = (0..1003).map(|i| (i as f32 - 501.0) * 0.017).collect();
        for u in [UnaryKind::Gelu, UnaryKind::GeluTanh] {
            let mut out = vec![0.0; xs.len()];
            // SAFETY: avx2_fma() checked above.
            assert!(unsafe { unary(u, &xs, &mut out) });
            for (&x, &y) in xs.iter().zip(&out) {
                let want = u.eval(x as f64);
                assert!((y as f64 - want).abs() <= 1e-6 + 1e-5 * want.abs(), "{u:?}({x}) = {y}, want {want}");
            }
        }
        let mut nan = [0.0f32; 1];
        // SAFETY: as above.
        assert!(unsafe { unary(UnaryKind::Gelu, &[f32::NAN], &mut nan) } && nan[0].is_nan());
    }
}
