//! x86 row dot products: AVX2 (`maddubs` int8 products) and AVX-512 VNNI (`vpdpbusd`). Each
//! computes the same exact integer sums as `dot.rs` and combines them identically.

use super::dot::{Q8K, Q80, combine_0, combine_k, q6k_offset, scales_mins_k4};
use std::arch::x86_64::*;

/// u8 x i8 products summed in fours to 8 i32 lanes (AVX2: pairs to i16, then to i32).
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn udot_avx2(u: __m256i, s: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
}

/// u8 x i8 products summed in fours to 8 i32 lanes (VNNI, one instruction, no saturation).
#[target_feature(enable = "avx2,avx512vnni,avx512vl")]
#[inline]
pub(super) fn udot_vnni(u: __m256i, s: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
}

/// `scale * (u8 x i8 products)` summed to 8 i32 lanes; `lo` scales the low 128 bits, `hi` the high.
#[target_feature(enable = "avx2")]
#[inline]
fn sdot_avx2(u: __m256i, s: __m256i, lo: i32, hi: i32) -> __m256i {
    let sc = _mm256_set_m128i(_mm_set1_epi16(hi as i16), _mm_set1_epi16(lo as i16));
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc)
}

/// As `sdot_avx2`, with VNNI.
#[target_feature(enable = "avx2,avx512vnni,avx512vl")]
#[inline]
fn sdot_vnni(u: __m256i, s: __m256i, lo: i32, hi: i32) -> __m256i {
    _mm256_mullo_epi32(udot_vnni(u, s), _mm256_set_m128i(_mm_set1_epi32(hi), _mm_set1_epi32(lo)))
}

/// The f16 at byte `at`, converted in hardware (exact, as `half`).
#[target_feature(enable = "f16c")]
#[inline]
fn h2f(b: &[u8], at: usize) -> f32 {
    let bits = u16::from_le_bytes([b[at], b[at + 1]]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// `min_sum` in vector form: each sub-block's min times its two 16-sums of activations.
#[target_feature(enable = "avx2")]
#[inline]
fn min_sum_v(m: &[u8; 8], a: &Q8K) -> i32 {
    let m8 = _mm_cvtsi64_si128(i64::from_le_bytes(*m));
    let dup = _mm_shuffle_epi8(m8, _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
    // SAFETY: bsums is 16 i16 = 32 bytes.
    let bs = unsafe { _mm256_loadu_si256(a.bsums.as_ptr() as *const __m256i) };
    hsum(_mm256_madd_epi16(bs, _mm256_cvtepu8_epi16(dup)))
}

/// Sum of 8 i32 lanes.
#[target_feature(enable = "avx2")]
#[inline]
fn hsum(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

macro_rules! isa {
    ($m:ident, $feat:literal, $udot:ident, $sdot:ident) => {
        /// Row dot products for one instruction set.
        pub mod $m {
            use super::*;

            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn load(p: *const u8) -> __m256i {
                // SAFETY: callers pass pointers with 32 readable bytes.
                unsafe { _mm256_loadu_si256(p as *const __m256i) }
            }

            /// Q4_K row . Q8_K activations.
            ///
            /// # Safety
            /// The CPU must support the module's features; `w` holds `a.len()` blocks.
            #[target_feature(enable = $feat)]
            pub unsafe fn q4k(w: &[u8], a: &[Q8K]) -> f32 {
                let m4 = _mm256_set1_epi8(0xF);
                let mut acc = 0f32;
                for (b, a) in w.chunks_exact(144).zip(a) {
                    let (sc, m) = scales_mins_k4(&b[4..16]);
                    let mut s = _mm256_setzero_si256();
                    for c in 0..4 {
                        // SAFETY: 32 bytes at 16 + 32c < 144, and 64 activations at 64c < 256.
                        let (q, alo, ahi) = unsafe {
                            (
                                load(b.as_ptr().add(16 + 32 * c)),
                                load(a.qs.as_ptr().add(64 * c) as *const u8),
                                load(a.qs.as_ptr().add(64 * c + 32) as *const u8),
                            )
                        };
                        let (s0, s1) = (sc[2 * c] as i32, sc[2 * c + 1] as i32);
                        s = _mm256_add_epi32(s, $sdot(_mm256_and_si256(q, m4), alo, s0, s0));
                        s = _mm256_add_epi32(s, $sdot(_mm256_and_si256(_mm256_srli_epi16::<4>(q), m4), ahi, s1, s1));
                    }
                    acc = combine_k(acc, a.d, h2f(b, 0), h2f(b, 2), hsum(s), min_sum_v(&m, a));
                }
                acc
            }

            /// Q5_K row . Q8_K activations.
            ///
            /// # Safety
            /// As `q4k`.
            #[target_feature(enable = $feat)]
            pub unsafe fn q5k(w: &[u8], a: &[Q8K]) -> f32 {
                let (m4, one) = (_mm256_set1_epi8(0xF), _mm256_set1_epi8(1));
                let mut acc = 0f32;
                for (b, a) in w.chunks_exact(176).zip(a) {
                    let (sc, m) = scales_mins_k4(&b[4..16]);
                    // SAFETY: qh is bytes 16..48.
                    let qh = unsafe { load(b.as_ptr().add(16)) };
                    let mut s = _mm256_setzero_si256();
                    for c in 0..4 {
                        // SAFETY: 32 bytes at 48 + 32c < 176; 64 activations at 64c.
                        let (q, alo, ahi) = unsafe {
                            (
                                load(b.as_ptr().add(48 + 32 * c)),
                                load(a.qs.as_ptr().add(64 * c) as *const u8),
                                load(a.qs.as_ptr().add(64 * c + 32) as *const u8),
                            )
                        };
                        let bit = |sh: i32| {
                            let h = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(sh)), one);
                            _mm256_slli_epi16::<4>(h)
                        };
                        let lo = _mm256_or_si256(_mm256_and_si256(q, m4), bit(2 * c as i32));
                        let hi =
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(q), m4), bit(2 * c as i32 + 1));
                        let (s0, s1) = (sc[2 * c] as i32, sc[2 * c + 1] as i32);
                        s = _mm256_add_epi32(s, _mm256_add_epi32($sdot(lo, alo, s0, s0), $sdot(hi, ahi, s1, s1)));
                    }
                    acc = combine_k(acc, a.d, h2f(b, 0), h2f(b, 2), hsum(s), min_sum_v(&m, a));
                }
                acc
            }

            /// Q6_K row . Q8_K activations.
            ///
            /// # Safety
            /// As `q4k`.
            #[target_feature(enable = $feat)]
            pub unsafe fn q6k(w: &[u8], a: &[Q8K]) -> f32 {
                let (m4, m2) = (_mm256_set1_epi8(0xF), _mm256_set1_epi8(3));
                let mut acc = 0f32;
                for (b, a) in w.chunks_exact(210).zip(a) {
                    let scales = &b[192..208];
                    let mut s = _mm256_setzero_si256();
                    for h in 0..2 {
                        // SAFETY: ql is bytes 0..128, qh 128..192.
                        let (ql0, ql1, qh) = unsafe {
                            (
                                load(b.as_ptr().add(64 * h)),
                                load(b.as_ptr().add(64 * h + 32)),
                                load(b.as_ptr().add(128 + 32 * h)),
                            )
                        };
                        let hb = |v: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(v, m2));
                        let qs = [
                            _mm256_or_si256(_mm256_and_si256(ql0, m4), hb(qh)),
                            _mm256_or_si256(_mm256_and_si256(ql1, m4), hb(_mm256_srli_epi16::<2>(qh))),
                            _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                                hb(_mm256_srli_epi16::<4>(qh)),
                            ),
                            _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                                hb(_mm256_srli_epi16::<6>(qh)),
                            ),
                        ];
                        for (i, q) in qs.into_iter().enumerate() {
                            // SAFETY: 32 activations at 128h + 32i < 256.
                            let av = unsafe { load(a.qs.as_ptr().add(128 * h + 32 * i) as *const u8) };
                            let g = 8 * h + 2 * i;
                            let (lo, hi) = (scales[g] as i8 as i32, scales[g + 1] as i8 as i32);
                            s = _mm256_add_epi32(s, $sdot(q, av, lo, hi));
                        }
                    }
                    acc = combine_k(acc, a.d, h2f(b, 208), 0.0, hsum(s) - q6k_offset(scales, a), 0);
                }
                acc
            }

            /// Q8_0 row . Q8_0 activations.
            ///
            /// # Safety
            /// As `q4k`.
            #[target_feature(enable = $feat)]
            pub unsafe fn q8_0(w: &[u8], a: &[Q80]) -> f32 {
                let mut acc = 0f32;
                for (b, a) in w.chunks_exact(34).zip(a) {
                    // SAFETY: 32 values at byte 2 of a 34-byte block; 32 activations.
                    let (q, av) = unsafe { (load(b.as_ptr().add(2)), load(a.qs.as_ptr() as *const u8)) };
                    // |w| as unsigned, and the activation carrying w's sign.
                    let d = $udot(_mm256_sign_epi8(q, q), _mm256_sign_epi8(av, q));
                    acc = combine_0(acc, a.d, h2f(b, 0), hsum(d));
                }
                acc
            }

            /// Q4_0 row . Q8_0 activations.
            ///
            /// # Safety
            /// As `q4k`.
            #[target_feature(enable = $feat)]
            pub unsafe fn q4_0(w: &[u8], a: &[Q80]) -> f32 {
                let m4 = _mm_set1_epi8(0xF);
                let mut acc = 0f32;
                for (b, a) in w.chunks_exact(18).zip(a) {
                    // SAFETY: 16 bytes at byte 2 of an 18-byte block; 32 activations.
                    let (x, av) = unsafe {
                        (_mm_loadu_si128(b.as_ptr().add(2) as *const __m128i), load(a.qs.as_ptr() as *const u8))
                    };
                    let q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16::<4>(x), m4), _mm_and_si128(x, m4));
                    acc = combine_0(acc, a.d, h2f(b, 0), hsum($udot(q, av)) - 8 * a.sum);
                }
                acc
            }
        }
    };
}

isa!(avx2, "avx2,fma,f16c", udot_avx2, sdot_avx2);
isa!(vnni, "avx2,fma,f16c,avx512vnni,avx512vl", udot_vnni, sdot_vnni);

/// `dot::quantize_block` for a multiple of 32 values, bit for bit: the same scale, products
/// rounded half away from zero (`f32::round`), NaN to 0.
///
/// # Safety
/// The CPU must support AVX2; `qs.len() == x.len()`, a multiple of 32.
#[target_feature(enable = "avx2")]
pub unsafe fn quantize_block_avx2(x: &[f32], qs: &mut [i8]) -> f32 {
    assert!(x.len() == qs.len() && x.len().is_multiple_of(32));
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let mut m = _mm256_setzero_ps();
    for c in x.chunks_exact(8) {
        // SAFETY: 8 floats. `max(|v|, m)` keeps m when v is NaN, as `f32::max`.
        m = _mm256_max_ps(_mm256_and_ps(unsafe { _mm256_loadu_ps(c.as_ptr()) }, abs), m);
    }
    let mut l = [0f32; 8];
    // SAFETY: 8 floats.
    unsafe { _mm256_storeu_ps(l.as_mut_ptr(), m) };
    let amax = l.iter().fold(0f32, |a, &v| a.max(v));
    if amax == 0.0 {
        qs.fill(0);
        return 0.0;
    }
    let iscale = _mm256_set1_ps(127.0 / amax);
    let (half, sign) = (_mm256_set1_ps(0.5), _mm256_set1_ps(-0.0));
    let one = _mm256_set1_ps(1.0);
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let round = |at: &[f32]| {
        // SAFETY: 8 floats.
        let v = _mm256_mul_ps(unsafe { _mm256_loadu_ps(at.as_ptr()) }, iscale);
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
        // Half away from zero: one more step, with v's sign, when the dropped part is >= 0.5.
        let up = _mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_andnot_ps(sign, _mm256_sub_ps(v, t)), half);
        let r = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(_mm256_and_ps(v, sign), one)));
        let r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0)), _mm256_set1_ps(127.0));
        // NaN lanes to 0 (the scalar cast's result).
        _mm256_cvtps_epi32(_mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(v, v)))
    };
    for (c, q) in x.chunks_exact(32).zip(qs.chunks_exact_mut(32)) {
        let ab = _mm256_packs_epi32(round(&c[0..8]), round(&c[8..16]));
        let cd = _mm256_packs_epi32(round(&c[16..24]), round(&c[24..32]));
        let b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), order);
        // SAFETY: 32 bytes.
        unsafe { _mm256_storeu_si256(q.as_mut_ptr() as *mut __m256i, b) };
    }
    amax / 127.0
}
