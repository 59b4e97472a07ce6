//! f16/bf16 <-> f32 conversion for the half-precision GEMM: F16C `vcvtph2ps`/`vcvtps2ph` for
//! f16 and a 16-bit shift (widen) or integer round-to-nearest-even (narrow) for bf16, eight
//! lanes at a time, chosen at run time; the `half` crate's scalar conversions elsewhere.

use half::{bf16, f16};

/// A 16-bit float that the half-precision GEMM reads and writes (f16 or bf16).
pub trait HalfElem: Copy + Default + Send + Sync + 'static {
    /// Exact widening to f32.
    fn to_f32(self) -> f32;
    /// Narrowing from f32, rounding to nearest even (as the `half` crate does).
    fn from_f32(v: f32) -> Self;
    /// Loads eight values widened to f32.
    ///
    /// # Safety
    /// `p` is readable for 8 elements; the CPU has AVX2 and F16C (see `simd`).
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
    /// Stores eight f32 lanes rounded to nearest even.
    ///
    /// # Safety
    /// `p` is writable for 8 elements; the CPU has AVX2 and F16C (see `simd`).
    #[cfg(target_arch = "x86_64")]
    unsafe fn store8(p: *mut Self, v: std::arch::x86_64::__m256);
}

impl HalfElem for f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller vouches for 8 readable elements and F16C.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn store8(p: *mut Self, v: std::arch::x86_64::__m256) {
        use std::arch::x86_64::*;
        // SAFETY: the caller vouches for 8 writable elements and F16C.
        unsafe { _mm_storeu_si128(p as *mut __m128i, _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v)) }
    }
}

impl HalfElem for bf16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller vouches for 8 readable elements and AVX2. bf16 is the top half of
        // an f32.
        unsafe {
            let w = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(w))
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn store8(p: *mut Self, v: std::arch::x86_64::__m256) {
        use std::arch::x86_64::*;
        // SAFETY: the caller vouches for 8 writable elements and AVX2.
        unsafe {
            let bits = _mm256_castps_si256(v);
            let hi = _mm256_srli_epi32::<16>(bits);
            // Round to nearest even: add 0x7fff plus the lowest kept bit, keep the top 16 bits.
            let lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
            let bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff));
            let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(bits, bias));
            // NaN stays NaN (quieted), as in `bf16::from_f32`.
            let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
            let qnan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
            let r = _mm256_blendv_epi8(rounded, qnan, nan);
            // Pack the eight u32 (each below 0x10000) to u16 and gather both 128-bit lanes.
            let packed = _mm256_permute4x64_epi64::<0b1000>(_mm256_packus_epi32(r, r));
            _mm_storeu_si128(p as *mut __m128i, _mm256_castsi256_si128(packed));
        }
    }
}

/// Whether the vector conversions (and the AVX2+FMA loops built on them) may run: detected once;
/// `RLX_CPU_SIMD=scalar` forces the portable path.
#[inline]
pub fn simd() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        if rlx_driver::config().cpu.simd == rlx_driver::config::IsaCap::Scalar {
            return false;
        }
        #[cfg(target_arch = "x86_64")]
        {
            std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
                && std::is_x86_feature_detected!("f16c")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// `dst[i] = src[i] as f32` for `i < n` (contiguous).
///
/// # Safety
/// `src` is readable and `dst` writable for `n` elements.
#[inline]
pub unsafe fn widen<H: HalfElem>(src: *const H, n: usize, dst: *mut f32) {
    // SAFETY: forwarded.
    unsafe { widen_isa(simd(), src, n, dst) }
}

/// `widen` with the vector path only when `simd` (which must imply `simd()`).
///
/// # Safety
/// As `widen`.
#[inline]
pub unsafe fn widen_isa<H: HalfElem>(simd: bool, src: *const H, n: usize, dst: *mut f32) {
    #[cfg(target_arch = "x86_64")]
    if simd && self::simd() {
        // SAFETY: the features are present; the rest is forwarded.
        return unsafe { x86::widen(src, n, dst) };
    }
    let _ = simd;
    for i in 0..n {
        // SAFETY: inside both buffers.
        unsafe { *dst.add(i) = (*src.add(i)).to_f32() };
    }
}

/// `dst[i] = H::from_f32(src[i])` for `i < n` (contiguous), rounding to nearest even.
///
/// # Safety
/// `src` is readable and `dst` writable for `n` elements.
#[inline]
pub unsafe fn narrow<H: HalfElem>(src: *const f32, n: usize, dst: *mut H) {
    // SAFETY: forwarded.
    unsafe { narrow_isa(simd(), src, n, dst) }
}

/// `narrow` with the vector path only when `simd`.
///
/// # Safety
/// As `narrow`.
#[inline]
pub unsafe fn narrow_isa<H: HalfElem>(simd: bool, src: *const f32, n: usize, dst: *mut H) {
    #[cfg(target_arch = "x86_64")]
    if simd && self::simd() {
        // SAFETY: the features are present; the rest is forwarded.
        return unsafe { x86::narrow(src, n, dst) };
    }
    let _ = simd;
    for i in 0..n {
        // SAFETY: inside both buffers.
        unsafe { *dst.add(i) = H::from_f32(*src.add(i)) };
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::HalfElem;
    use std::arch::x86_64::*;

    /// `widen` with AVX2+F16C.
    ///
    /// # Safety
    /// As `widen`; the CPU has AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn widen<H: HalfElem>(src: *const H, n: usize, dst: *mut f32) {
        let mut i = 0;
        // SAFETY: every access stays below n.
        unsafe {
            while i + 8 <= n {
                _mm256_storeu_ps(dst.add(i), H::load8(src.add(i)));
                i += 8;
            }
            while i < n {
                *dst.add(i) = (*src.add(i)).to_f32();
                i += 1;
            }
        }
    }

    /// `narrow` with AVX2+F16C.
    ///
    /// # Safety
    /// As `narrow`; the CPU has AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn narrow<H: HalfElem>(src: *const f32, n: usize, dst: *mut H) {
        let mut i = 0;
        // SAFETY: every access stays below n.
        unsafe {
            while i + 8 <= n {
                H::store8(dst.add(i), _mm256_loadu_ps(src.add(i)));
                i += 8;
            }
            while i < n {
                *dst.add(i) = H::from_f32(*src.add(i));
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every f16/bf16 bit pattern widens exactly as the `half` crate does.
    #[test]
    fn widen_matches_half_on_every_bit_pattern() {
        let f: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let b: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        let mut out = vec![0f32; f.len()];
        unsafe { widen(f.as_ptr(), f.len(), out.as_mut_ptr()) };
        for (x, y) in f.iter().zip(&out) {
            assert!(x.to_f32().to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()), "f16 {x:?}: {y}");
        }
        unsafe { widen(b.as_ptr(), b.len(), out.as_mut_ptr()) };
        for (x, y) in b.iter().zip(&out) {
            assert!(x.to_f32().to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()), "bf16 {x:?}: {y}");
        }
    }

    /// Narrowing rounds to nearest even exactly as the `half` crate does, on ties, subnormals,
    /// overflow and a spread of bit patterns; NaN stays NaN.
    #[test]
    fn narrow_rounds_like_half() {
        let mut src: Vec<f32> = (0..200_003u32).map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761))).collect();
        // Exact ties between neighbouring f16/bf16 values, both parities, and edge cases.
        for h in [0x3c00u16, 0x3c01, 0x0001, 0x0400, 0x7bff, 0x8401] {
            let (lo, hi) = (f16::from_bits(h).to_f32(), f16::from_bits(h + 1).to_f32());
            src.push((lo + hi) / 2.0);
            src.push(-(lo + hi) / 2.0);
        }
        for h in [0x3f80u32, 0x3f81, 0x7f7f, 0x0001] {
            src.push(f32::from_bits((h << 16) | 0x8000));
            src.push(f32::from_bits((h << 16) | 0x8001));
        }
        src.extend([65520.0, 65519.0, 1e-8, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MAX]);
        let mut f = vec![f16::ZERO; src.len()];
        let mut b = vec![bf16::ZERO; src.len()];
        unsafe { narrow(src.as_ptr(), src.len(), f.as_mut_ptr()) };
        unsafe { narrow(src.as_ptr(), src.len(), b.as_mut_ptr()) };
        for (i, &x) in src.iter().enumerate() {
            let (wf, wb) = (f16::from_f32(x), bf16::from_f32(x));
            assert!(f[i].to_bits() == wf.to_bits() || (x.is_nan() && f[i].is_nan()), "f16 of {x:e}");
            assert!(b[i].to_bits() == wb.to_bits() || (x.is_nan() && b[i].is_nan()), "bf16 of {x:e}");
        }
    }
}
