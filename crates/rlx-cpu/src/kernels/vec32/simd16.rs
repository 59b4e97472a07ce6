//! 16-lane AVX-512 versions of `exp8`, `erf8` and `gelu8` (the same polynomial and operation order, so
//! bit-identical results). Zen 4 runs a zmm FMA as two halves, so the gain is half the
//! instructions (session 6 in docs/benchmarks-history.md).

#[cfg(target_arch = "x86_64")]
use rlx_ir::ops::UnaryKind;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Whether the CPU has AVX-512F (and AVX2 + FMA), unless `RLX_CPU_SIMD` is `avx2` or `scalar`.
/// Read once.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub fn avx512() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        if rlx_driver::config().cpu.simd != rlx_driver::config::IsaCap::Best {
            return false;
        }
        #[cfg(target_arch = "x86_64")]
        {
            super::super::math::avx2_fma() && std::is_x86_feature_detected!("avx512f")
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

/// `out = u(x)` 16 lanes at a time for exp, erf and GELU; false (nothing written) for other ops.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub unsafe fn unary(u: UnaryKind, x: &[f32], out: &mut [f32]) -> bool {
    // SAFETY: both slices hold at least n elements.
    unsafe { apply(u, x.as_ptr(), out.as_mut_ptr(), x.len().min(out.len())) }
}

/// `x = u(x)` in place, as `unary`.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub unsafe fn unary_in_place(u: UnaryKind, x: &mut [f32]) -> bool {
    let p = x.as_mut_ptr();
    // SAFETY: reads and writes the same elements, each lane once.
    unsafe { apply(u, p, p, x.len()) }
}

/// `dst = u(src)` over n elements for the ops above (`src` may equal `dst`).
///
/// # Safety
/// The CPU has AVX-512F; `src` and `dst` hold n elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn apply(u: UnaryKind, src: *const f32, dst: *mut f32, n: usize) -> bool {
    match u {
        // SAFETY: forwarded.
        UnaryKind::Gelu => unsafe { lanes(src, dst, n, |v| gelu16(v)) },
        // SAFETY: forwarded.
        UnaryKind::Erf => unsafe { lanes(src, dst, n, |v| erf16(v)) },
        // SAFETY: forwarded.
        UnaryKind::Exp => unsafe { lanes(src, dst, n, |v| exp16(v)) },
        // SAFETY: forwarded.
        UnaryKind::Sigmoid => unsafe { lanes(src, dst, n, |v| _mm512_div_ps(splat(1.0), one_plus_exp_neg(v))) },
        // SAFETY: forwarded.
        UnaryKind::Silu => unsafe { lanes(src, dst, n, |v| _mm512_div_ps(v, one_plus_exp_neg(v))) },
        _ => return false,
    }
    true
}

/// `dst[i] = f(src[i])` for i < n, 16 lanes at a time; the tail with masked loads and stores
/// (`src` may equal `dst`).
///
/// # Safety
/// `src` and `dst` hold n elements.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn lanes(src: *const f32, dst: *mut f32, n: usize, f: impl Fn(__m512) -> __m512) {
    let n16 = n / 16 * 16;
    for j in (0..n16).step_by(16) {
        // SAFETY: j + 16 <= n; only inlined into AVX-512 code.
        unsafe { _mm512_storeu_ps(dst.add(j), f(_mm512_loadu_ps(src.add(j)))) };
    }
    if n > n16 {
        let mask = ((1u32 << (n - n16)) - 1) as __mmask16;
        // SAFETY: the mask covers only the n - n16 elements left; masked-off lanes are not touched.
        unsafe { _mm512_mask_storeu_ps(dst.add(n16), mask, f(_mm512_maskz_loadu_ps(mask, src.add(n16)))) };
    }
}

/// Softmax of one contiguous row `x` into `out` (the same length): max, then `exp(x - max)`
/// and its sum, then a scale by 1 / sum. A row of -inf gives NaN, and a NaN anywhere makes the
/// row NaN (through the sum), as `nn::softmax_lane`. Faster than the portable lane loop
/// (session 18 in docs/benchmarks-history.md).
///
/// # Safety
/// The CPU has AVX-512F; `out` holds `x.len()` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub unsafe fn softmax_row(x: &[f32], out: &mut [f32]) {
    let n = x.len();
    assert!(out.len() >= n);
    let ninf = splat(f32::NEG_INFINITY);
    let mask = |j: usize| if n - j >= 16 { 0xffff } else { ((1u32 << (n - j)) - 1) as __mmask16 };
    // SAFETY (whole body): every access is masked to the row's n elements.
    unsafe {
        let mut vm = ninf;
        for j in (0..n).step_by(16) {
            vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(ninf, mask(j), x.as_ptr().add(j)));
        }
        let m = _mm512_reduce_max_ps(vm);
        if m == f32::NEG_INFINITY {
            out[..n].fill(f32::NAN);
            return;
        }
        let (vmx, mut acc) = (splat(m), _mm512_setzero_ps());
        for j in (0..n).step_by(16) {
            let e = exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, mask(j), x.as_ptr().add(j)), vmx));
            _mm512_mask_storeu_ps(out.as_mut_ptr().add(j), mask(j), e);
            acc = _mm512_add_ps(acc, e);
        }
        let r = splat(1.0 / _mm512_reduce_add_ps(acc));
        for j in (0..n).step_by(16) {
            let p = out.as_mut_ptr().add(j);
            _mm512_mask_storeu_ps(p, mask(j), _mm512_mul_ps(_mm512_maskz_loadu_ps(mask(j), p), r));
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn splat(v: f32) -> __m512 {
    // SAFETY: only reached from functions compiled with AVX-512F (all callers are).
    unsafe { _mm512_set1_ps(v) }
}

/// `exp8` on 16 lanes (the same operations: bit-identical results).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub fn exp16(x: __m512) -> __m512 {
    let (n, y) = exp_poly!(
        x,
        splat,
        _mm512_min_ps,
        _mm512_max_ps,
        _mm512_add_ps,
        _mm512_sub_ps,
        _mm512_mul_ps,
        _mm512_fmadd_ps,
        _mm512_fnmadd_ps
    );
    // y * 2^n by `vscalefps` (n is a whole number in -126..=127, so the product is exact, as
    // exp8's multiply by a built power of two), with underflowing lanes zeroed by its mask (a
    // subnormal product is a microcode assist on Intel; -inf lanes are common in softmax): four
    // instructions fewer than building 2^n from integers.
    let y = _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask::<_CMP_NLT_UQ>(x, splat(-87.336_55)), y, n);
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, splat(88.722_83)), y, splat(f32::INFINITY))
}

/// `1 + exp(-x)`, the denominator of sigmoid and SiLU (as `sigmoid8` and `silu8` compute it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn one_plus_exp_neg(x: __m512) -> __m512 {
    // -x by the sign bit (integer ops: float xor needs AVX-512DQ).
    let neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(i32::MIN)));
    _mm512_add_ps(splat(1.0), exp16(neg))
}

/// `erf8` on 16 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub fn erf16(x: __m512) -> __m512 {
    let y = erf_clamped_poly!(x, splat, _mm512_min_ps, _mm512_max_ps, _mm512_mul_ps, _mm512_fmadd_ps);
    // +-1 with x's sign (integer ops: float and/or need AVX-512DQ).
    let sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(i32::MIN));
    let one = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(splat(1.0)), sign));
    let past = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(x), splat(super::ERF_LIM));
    _mm512_mask_blend_ps(past, y, one)
}

/// `gelu8` on 16 lanes: `0.5 x (1 + erf(x / sqrt 2))`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub fn gelu16(x: __m512) -> __m512 {
    let e = erf16(_mm512_mul_ps(x, splat(std::f32::consts::FRAC_1_SQRT_2)));
    let hx = _mm512_mul_ps(x, splat(0.5));
    _mm512_fmadd_ps(hx, e, hx)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn sixteen_lanes_match_eight_bit_for_bit() {
        if !avx512() {
            return;
        }
        let mut xs: Vec<f32> = (-6000..6000).map(|i| i as f32 * 1.7e-3).collect();
        xs.extend([0.0, -0.0, 1e-30, -1e-30, 3.7416, 3.7417, -3.7417, 9.0, -9.0, 1e30, -1e30]);
        xs.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE / 4.0]);
        // exp's ends: underflow below -87.34, the clamp at 88.38, overflow past 88.72.
        xs.extend((-1200..1200).map(|i| i as f32 * 0.0831));
        xs.extend([-87.336_55, -87.336_54, -87.336_56, 88.376_26, 88.4, 88.722_83, 88.722_84, -103.9, -150.0]);
        for u in [UnaryKind::Gelu, UnaryKind::Erf, UnaryKind::Exp, UnaryKind::Sigmoid, UnaryKind::Silu] {
            // Lengths with every tail size.
            for len in [xs.len(), xs.len() - 1, 15, 1, 0] {
                let (mut wide, mut narrow, mut inplace) = (vec![0.0; len], vec![0.0; len], xs[..len].to_vec());
                // SAFETY: avx512() implies AVX2, FMA and AVX-512F.
                unsafe {
                    assert!(unary(u, &xs[..len], &mut wide));
                    assert!(super::super::simd8::unary(u, &xs[..len], &mut narrow));
                    assert!(unary_in_place(u, &mut inplace));
                }
                for ((w, n), i) in wide.iter().zip(&narrow).zip(&inplace) {
                    assert!(w.to_bits() == n.to_bits() || (w.is_nan() && n.is_nan()), "{u:?}: {w} vs {n}");
                    assert!(w.to_bits() == i.to_bits() || (w.is_nan() && i.is_nan()), "{u:?} in place: {w} vs {i}");
                }
            }
        }
    }
}
