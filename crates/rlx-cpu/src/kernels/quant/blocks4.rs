//! Row dot products that take four blocks of one weight row per step: the four blocks' integer
//! sums are reduced together and their scales applied as one vector, then added to the row's sum
//! one block at a time in order. The integer sums and every float operation are those of `dot.rs`
//! (`combine_k`, `combine_0`), so results match it bit for bit. One row streams at a time, which
//! keeps the hardware prefetcher on a single sequential stream (four interleaved rows ran at half
//! the speed from DRAM).

use super::dot::{Q8K, Q80};
use super::x86::{udot_avx2, udot_vnni};
use std::arch::x86_64::*;

/// Lane l of the result is the sum of the 8 lanes of `v[l]`.
#[target_feature(enable = "avx2")]
#[inline]
fn hsum4(v: [__m256i; 4]) -> __m128i {
    let a = _mm256_hadd_epi32(v[0], v[1]);
    let b = _mm256_hadd_epi32(v[2], v[3]);
    let c = _mm256_hadd_epi32(a, b);
    _mm_add_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256::<1>(c))
}

/// Lane l of the result is the sum of the 4 lanes of `v[l]`.
#[target_feature(enable = "avx2")]
#[inline]
fn hsum4x128(v: [__m128i; 4]) -> __m128i {
    _mm_hadd_epi32(_mm_hadd_epi32(v[0], v[1]), _mm_hadd_epi32(v[2], v[3]))
}

/// `acc + madd(p, s)` (AVX2: two instructions).
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn macc_avx2(acc: __m256i, p: __m256i, s: __m256i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_madd_epi16(p, s))
}

/// `acc + madd(p, s)` (VNNI `vpdpwssd`: one instruction).
#[target_feature(enable = "avx2,avx512vnni,avx512vl")]
#[inline]
pub(super) fn macc_vnni(acc: __m256i, p: __m256i, s: __m256i) -> __m256i {
    _mm256_dpwssd_epi32(acc, p, s)
}

/// Four f16 values (one per block) as f32 lanes.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn halves4(h: [u16; 4]) -> __m128 {
    _mm_cvtph_ps(_mm_setr_epi16(h[0] as i16, h[1] as i16, h[2] as i16, h[3] as i16, 0, 0, 0, 0))
}

/// A shuffle mask that broadcasts i16 lane `lo` to the low 128 bits and `hi` to the high 128 bits.
const fn bcast16(lo: u8, hi: u8) -> [u8; 32] {
    let mut m = [0u8; 32];
    let mut i = 0;
    while i < 16 {
        m[i] = 2 * lo + (i as u8 & 1);
        m[16 + i] = 2 * hi + (i as u8 & 1);
        i += 1;
    }
    m
}

/// Q4_K: sub-block j's scale everywhere (scales duplicated in both 128-bit halves).
const K4_MASKS: [[u8; 32]; 8] = [
    bcast16(0, 0),
    bcast16(1, 1),
    bcast16(2, 2),
    bcast16(3, 3),
    bcast16(4, 4),
    bcast16(5, 5),
    bcast16(6, 6),
    bcast16(7, 7),
];
/// Q6_K: groups (2i, 2i + 1) of one half-block's eight scales.
const K6_MASKS: [[u8; 32]; 4] = [bcast16(0, 1), bcast16(2, 3), bcast16(4, 5), bcast16(6, 7)];

/// Adds four blocks' terms to `acc` in block order: `(acc + t[l]) - u[l]` for the first `lanes`.
#[inline(always)]
fn add_in_order(mut acc: f32, t: [f32; 4], u: [f32; 4], lanes: usize) -> f32 {
    for l in 0..lanes {
        acc = acc + t[l] - u[l];
    }
    acc
}

/// The 4 lanes of `v`.
#[target_feature(enable = "avx2")]
#[inline]
fn lanes4(v: __m128) -> [f32; 4] {
    let mut out = [0f32; 4];
    // SAFETY: 4 floats.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), v) };
    out
}

macro_rules! blocks4 {
    ($m:ident, $feat:literal, $udot:ident, $macc:ident) => {
        /// Four-block row dot products for one instruction set.
        pub mod $m {
            use super::*;

            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn load(p: *const u8) -> __m256i {
                // SAFETY: callers pass pointers with 32 readable bytes.
                unsafe { _mm256_loadu_si256(p as *const __m256i) }
            }

            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn mask(m: &[u8; 32]) -> __m256i {
                // SAFETY: 32 bytes.
                unsafe { load(m.as_ptr()) }
            }

            /// The blocks `bi..bi + 4` (the last repeated past the end) and how many are real.
            #[inline(always)]
            fn four<'a, A>(w: &'a [u8], bb: usize, a: &'a [A], bi: usize) -> ([&'a [u8]; 4], [&'a A; 4], usize) {
                let lanes = (a.len() - bi).min(4);
                let at = |l: usize| bi + l.min(lanes - 1);
                (std::array::from_fn(|l| &w[at(l) * bb..(at(l) + 1) * bb]), std::array::from_fn(|l| &a[at(l)]), lanes)
            }

            /// Q4_K row . Q8_K activations.
            ///
            /// # Safety
            /// The CPU must support the module's features; `w` holds `a.len()` blocks.
            #[target_feature(enable = $feat)]
            pub unsafe fn q4k(w: &[u8], a: &[Q8K]) -> f32 {
                let m4 = _mm256_set1_epi8(0xF);
                // SAFETY: constant 32-byte masks.
                let masks: [__m256i; 8] = std::array::from_fn(|j| unsafe { mask(&K4_MASKS[j]) });
                let pick = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
                let mut acc = 0f32;
                for bi in (0..a.len()).step_by(4) {
                    let (blk, av, lanes) = four(w, 144, a, bi);
                    let mut sc = [_mm256_setzero_si256(); 4];
                    let mut mins = [_mm_setzero_si128(); 4];
                    let mut dd = [0u32; 4];
                    for l in 0..4 {
                        // SAFETY: 4 bytes at i < 16 of a 144-byte block.
                        let u = |i: usize| unsafe { (blk[l].as_ptr().add(i) as *const u32).read_unaligned() };
                        let (u0, u1, u2) = (u(4), u(8), u(12));
                        const K1: u32 = 0x3f3f_3f3f;
                        const K2: u32 = 0x0f0f_0f0f;
                        const K3: u32 = 0x0303_0303;
                        let s = [u0 & K1, (u2 & K2) | (((u0 >> 6) & K3) << 4)];
                        let m = [u1 & K1, ((u2 >> 4) & K2) | (((u1 >> 6) & K3) << 4)];
                        let sm =
                            _mm256_cvtepu8_epi16(_mm_setr_epi32(s[0] as i32, s[1] as i32, m[0] as i32, m[1] as i32));
                        sc[l] = _mm256_permute4x64_epi64::<0b01_00_01_00>(sm);
                        // SAFETY: 16 i16 sums.
                        let bs = unsafe { load(av[l].bsums.as_ptr() as *const u8) };
                        let bs32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256::<1>(bs));
                        mins[l] = _mm_madd_epi16(_mm256_extracti128_si256::<1>(sm), bs32);
                        dd[l] = u(0);
                    }
                    let mut s = [_mm256_setzero_si256(); 4];
                    for c in 0..4 {
                        for l in 0..4 {
                            // SAFETY: 32 bytes at 16 + 32c < 144; 64 activations at 64c < 256.
                            let (q, alo, ahi) = unsafe {
                                (
                                    load(blk[l].as_ptr().add(16 + 32 * c)),
                                    load(av[l].qs.as_ptr().add(64 * c) as *const u8),
                                    load(av[l].qs.as_ptr().add(64 * c + 32) as *const u8),
                                )
                            };
                            let lo = _mm256_maddubs_epi16(_mm256_and_si256(q, m4), alo);
                            let hi = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16::<4>(q), m4), ahi);
                            s[l] = $macc(s[l], lo, _mm256_shuffle_epi8(sc[l], masks[2 * c]));
                            s[l] = $macc(s[l], hi, _mm256_shuffle_epi8(sc[l], masks[2 * c + 1]));
                        }
                    }
                    let dm = _mm256_cvtph_ps(_mm_setr_epi32(dd[0] as i32, dd[1] as i32, dd[2] as i32, dd[3] as i32));
                    let dm = _mm256_permutevar8x32_ps(dm, pick);
                    let (d, dmin) = (_mm256_castps256_ps128(dm), _mm256_extractf128_ps::<1>(dm));
                    let ad = _mm_setr_ps(av[0].d, av[1].d, av[2].d, av[3].d);
                    // As `combine_k`: the terms (a_d d) isum and (a_d dmin) msum, four blocks at once.
                    let t = _mm_mul_ps(_mm_mul_ps(ad, d), _mm_cvtepi32_ps(hsum4(s)));
                    let u = _mm_mul_ps(_mm_mul_ps(ad, dmin), _mm_cvtepi32_ps(hsum4x128(mins)));
                    acc = add_in_order(acc, lanes4(t), lanes4(u), lanes);
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
                // SAFETY: constant 32-byte masks.
                let masks: [__m256i; 4] = std::array::from_fn(|j| unsafe { mask(&K6_MASKS[j]) });
                let mut acc = 0f32;
                for bi in (0..a.len()).step_by(4) {
                    let (blk, av, lanes) = four(w, 210, a, bi);
                    let mut s = [_mm256_setzero_si256(); 4];
                    let mut dh = [0u16; 4];
                    for l in 0..4 {
                        // SAFETY: 16 scales at byte 192 of a 210-byte block; 16 i16 sums.
                        let (v, bs) = unsafe {
                            (
                                _mm_loadu_si128(blk[l].as_ptr().add(192) as *const __m128i),
                                load(av[l].bsums.as_ptr() as *const u8),
                            )
                        };
                        let v = _mm256_cvtepi8_epi16(v);
                        // The offset term 32 * sum(scale * bsum), taken out of the integer sum.
                        s[l] = _mm256_sub_epi32(s[l], _mm256_slli_epi32::<5>(_mm256_madd_epi16(v, bs)));
                        let sc = [
                            _mm256_permute4x64_epi64::<0b01_00_01_00>(v),
                            _mm256_permute4x64_epi64::<0b11_10_11_10>(v),
                        ];
                        dh[l] = u16::from_le_bytes([blk[l][208], blk[l][209]]);
                        for h in 0..2 {
                            // SAFETY: ql is bytes 0..128, qh 128..192.
                            let (ql0, ql1, qh) = unsafe {
                                (
                                    load(blk[l].as_ptr().add(64 * h)),
                                    load(blk[l].as_ptr().add(64 * h + 32)),
                                    load(blk[l].as_ptr().add(128 + 32 * h)),
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
                            for i in 0..4 {
                                // SAFETY: 32 activations at 128h + 32i < 256.
                                let x = unsafe { load(av[l].qs.as_ptr().add(128 * h + 32 * i) as *const u8) };
                                let p = _mm256_maddubs_epi16(qs[i], x);
                                s[l] = $macc(s[l], p, _mm256_shuffle_epi8(sc[h], masks[i]));
                            }
                        }
                    }
                    let ad = _mm_setr_ps(av[0].d, av[1].d, av[2].d, av[3].d);
                    let zero = _mm_setzero_ps();
                    // As `combine_k` with dmin = 0 and msum = 0.
                    let t = _mm_mul_ps(_mm_mul_ps(ad, halves4(dh)), _mm_cvtepi32_ps(hsum4(s)));
                    let u = _mm_mul_ps(_mm_mul_ps(ad, zero), zero);
                    acc = add_in_order(acc, lanes4(t), lanes4(u), lanes);
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
                for bi in (0..a.len()).step_by(4) {
                    let (blk, av, lanes) = four(w, 34, a, bi);
                    let mut s = [_mm256_setzero_si256(); 4];
                    for l in 0..4 {
                        // SAFETY: a 34-byte block: the f16 scale, then 32 values; 32 activations.
                        let (q, x) = unsafe { (load(blk[l].as_ptr().add(2)), load(av[l].qs.as_ptr() as *const u8)) };
                        s[l] = $udot(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q));
                    }
                    let dh: [u16; 4] = std::array::from_fn(|l| u16::from_le_bytes([blk[l][0], blk[l][1]]));
                    let ad = _mm_setr_ps(av[0].d, av[1].d, av[2].d, av[3].d);
                    // As `combine_0`: acc + (a_d d) isum, block by block.
                    let t = _mm_mul_ps(_mm_mul_ps(ad, halves4(dh)), _mm_cvtepi32_ps(hsum4(s)));
                    acc = add_in_order(acc, lanes4(t), [0.0; 4], lanes);
                }
                acc
            }
        }
    };
}

blocks4!(avx2, "avx2,fma,f16c", udot_avx2, macc_avx2);
blocks4!(vnni, "avx2,fma,f16c,avx512vnni,avx512vl", udot_vnni, macc_vnni);
