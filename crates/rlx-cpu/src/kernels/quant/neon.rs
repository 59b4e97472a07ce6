//! aarch64 row dot products: baseline NEON (`smull` i8 x i8 products widened to i16, then
//! pairwise added to i32) and the `dotprod` extension (`sdot`, four products per i32 lane in one
//! instruction). Each computes the same exact integer sums as `dot.rs` and combines them with the
//! same float steps (`combine_k`, `combine_0`), so results match it bit for bit.
//!
//! `vdotq_s32` is not stable in Rust yet, so `sdot` is written as inline assembly.

use super::dot::{Q8K, Q80, combine_0, combine_k, half_at, q6k_offset, scales_mins_k4};
use std::arch::aarch64::*;

/// `acc +` the 16 products `w[i] * a[i]`, summed in groups into 4 i32 lanes (baseline NEON:
/// i8 x i8 products are exact in i16, and `sadalp` adds them in pairs to the i32 lanes).
#[target_feature(enable = "neon")]
#[inline]
fn dot_neon(acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    let lo = vmull_s8(vget_low_s8(w), vget_low_s8(a));
    vpadalq_s16(vpadalq_s16(acc, lo), vmull_high_s8(w, a))
}

/// As `dot_neon`, with one `sdot` (dotprod): lane l adds the products of bytes 4l..4l + 4.
#[target_feature(enable = "neon,dotprod")]
#[inline]
fn dot_sdot(mut acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    // SAFETY: `sdot` only reads and writes these three registers, and this function is compiled
    // (and only callable) with the dotprod feature.
    unsafe {
        std::arch::asm!(
            "sdot {acc:v}.4s, {w:v}.16b, {a:v}.16b",
            acc = inout(vreg) acc,
            w = in(vreg) w,
            a = in(vreg) a,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// `min_sum` in vector form: each sub-block's min times its two 16-sums of activations, in i32.
#[target_feature(enable = "neon")]
#[inline]
fn min_sum_v(m: &[u8; 8], a: &Q8K) -> i32 {
    // SAFETY: m is 8 bytes and bsums 16 i16 (two loads of 8).
    let (m8, b0, b1) =
        unsafe { (vld1_u8(m.as_ptr()), vld1q_s16(a.bsums.as_ptr()), vld1q_s16(a.bsums.as_ptr().add(8))) };
    let m16 = vreinterpretq_s16_u16(vmovl_u8(m8));
    // Pair sums of 16-sums (sub-blocks 0-3, then 4-7), widened so they cannot wrap.
    let (p0, p1) = (vpaddlq_s16(b0), vpaddlq_s16(b1));
    vaddvq_s32(vmlaq_s32(vmulq_s32(p0, vmovl_s16(vget_low_s16(m16))), p1, vmovl_high_s16(m16)))
}

macro_rules! isa {
    ($m:ident, $feat:literal, $dot:ident) => {
        /// Row dot products for one NEON level.
        pub mod $m {
            use super::*;

            /// 16 bytes at `p`.
            ///
            /// # Safety
            /// `p` must point to 16 readable bytes.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn ld(p: *const u8) -> uint8x16_t {
                // SAFETY: as the contract.
                unsafe { vld1q_u8(p) }
            }

            /// 16 activations at `p`.
            ///
            /// # Safety
            /// `p` must point to 16 readable values.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn lda(p: *const i8) -> int8x16_t {
                // SAFETY: as the contract.
                unsafe { vld1q_s8(p) }
            }

            /// The 32 products of weights `w` (two vectors of values below 128) and activations
            /// `a0`, `a1`, in 4 i32 lanes.
            #[target_feature(enable = $feat)]
            #[inline]
            fn dot32(w: [uint8x16_t; 2], a0: int8x16_t, a1: int8x16_t) -> int32x4_t {
                let z = vdupq_n_s32(0);
                $dot($dot(z, vreinterpretq_s8_u8(w[0]), a0), vreinterpretq_s8_u8(w[1]), a1)
            }

            /// Q4_K row . Q8_K activations.
            ///
            /// # Safety
            /// The CPU must support the module's features (baseline NEON: every aarch64 CPU).
            #[target_feature(enable = $feat)]
            pub unsafe fn q4k(w: &[u8], a: &[Q8K]) -> f32 {
                let m4 = vdupq_n_u8(0xF);
                let mut acc = 0f32;
                for (b, a) in w.chunks_exact(144).zip(a) {
                    let (sc, m) = scales_mins_k4(&b[4..16]);
                    let mut s = vdupq_n_s32(0);
                    for c in 0..4 {
                        let p = a.qs.as_ptr();
                        // SAFETY: 32 bytes at 16 + 32c < 144, and 64 activations at 64c < 256.
                        let (q, av) = unsafe {
                            (
                                [ld(b.as_ptr().add(16 + 32 * c)), ld(b.as_ptr().add(32 + 32 * c))],
                                [0, 16, 32, 48].map(|o| lda(p.add(64 * c + o))),
                            )
                        };
                        let lo = dot32([vandq_u8(q[0], m4), vandq_u8(q[1], m4)], av[0], av[1]);
                        let hi = dot32([vshrq_n_u8::<4>(q[0]), vshrq_n_u8::<4>(q[1])], av[2], av[3]);
                        s = vmlaq_n_s32(s, lo, sc[2 * c] as i32);
                        s = vmlaq_n_s32(s, hi, sc[2 * c + 1] as i32);
                    }
                    acc = combine_k(acc, a.d, half_at(b, 0), half_at(b, 2), vaddvq_s32(s), min_sum_v(&m, a));
                }
                acc
            }

            /// Q5_K row . Q8_K activations.
            ///
            /// # Safety
            /// As `q4k`.
            #[target_feature(enable = $feat)]
            pub unsafe fn q5k(w: &[u8], a: &[Q8K]) -> f32 {
                let (m4, one) = (vdupq_n_u8(0xF), vdupq_n_u8(1));
                let mut acc = 0f32;
                for (b, a) in w.chunks_exact(176).zip(a) {
                    let (sc, m) = scales_mins_k4(&b[4..16]);
                    // SAFETY: qh is bytes 16..48.
                    let mut qh = unsafe { [ld(b.as_ptr().add(16)), ld(b.as_ptr().add(32))] };
                    // Bit 0 of the remaining high bits, as bit 4 of each value; then the next bit.
                    let mut high = || {
                        let h = qh.map(|v| vshlq_n_u8::<4>(vandq_u8(v, one)));
                        qh = qh.map(|v| vshrq_n_u8::<1>(v));
                        h
                    };
                    let mut s = vdupq_n_s32(0);
                    for c in 0..4 {
                        let p = a.qs.as_ptr();
                        // SAFETY: 32 bytes at 48 + 32c < 176, and 64 activations at 64c < 256.
                        let (q, av) = unsafe {
                            (
                                [ld(b.as_ptr().add(48 + 32 * c)), ld(b.as_ptr().add(64 + 32 * c))],
                                [0, 16, 32, 48].map(|o| lda(p.add(64 * c + o))),
                            )
                        };
                        let (h0, h1) = (high(), high());
                        let lo = dot32([0, 1].map(|i| vorrq_u8(vandq_u8(q[i], m4), h0[i])), av[0], av[1]);
                        let hi = dot32([0, 1].map(|i| vorrq_u8(vshrq_n_u8::<4>(q[i]), h1[i])), av[2], av[3]);
                        s = vmlaq_n_s32(s, lo, sc[2 * c] as i32);
                        s = vmlaq_n_s32(s, hi, sc[2 * c + 1] as i32);
                    }
                    acc = combine_k(acc, a.d, half_at(b, 0), half_at(b, 2), vaddvq_s32(s), min_sum_v(&m, a));
                }
                acc
            }

            /// Q6_K row . Q8_K activations.
            ///
            /// # Safety
            /// As `q4k`.
            #[target_feature(enable = $feat)]
            pub unsafe fn q6k(w: &[u8], a: &[Q8K]) -> f32 {
                let (m4, m2) = (vdupq_n_u8(0xF), vdupq_n_u8(3));
                let z = vdupq_n_s32(0);
                let mut acc = 0f32;
                for (b, a) in w.chunks_exact(210).zip(a) {
                    let scales = &b[192..208];
                    let mut s = vdupq_n_s32(0);
                    for h in 0..2 {
                        for half in 0..2 {
                            // 16 values of each of the four 32-value runs of this 128-value half.
                            let at = 16 * half;
                            // SAFETY: ql is bytes 0..128, qh 128..192.
                            let (ql0, ql1, qh) = unsafe {
                                (
                                    ld(b.as_ptr().add(64 * h + at)),
                                    ld(b.as_ptr().add(64 * h + 32 + at)),
                                    ld(b.as_ptr().add(128 + 32 * h + at)),
                                )
                            };
                            let hb = |v: uint8x16_t| vshlq_n_u8::<4>(vandq_u8(v, m2));
                            let qs = [
                                vorrq_u8(vandq_u8(ql0, m4), hb(qh)),
                                vorrq_u8(vandq_u8(ql1, m4), hb(vshrq_n_u8::<2>(qh))),
                                vorrq_u8(vshrq_n_u8::<4>(ql0), hb(vshrq_n_u8::<4>(qh))),
                                vorrq_u8(vshrq_n_u8::<4>(ql1), vshlq_n_u8::<4>(vshrq_n_u8::<6>(qh))),
                            ];
                            for (i, q) in qs.into_iter().enumerate() {
                                let e = 128 * h + 32 * i + at;
                                // SAFETY: 16 activations at e <= 240.
                                let av = unsafe { lda(a.qs.as_ptr().add(e)) };
                                let d = $dot(z, vreinterpretq_s8_u8(q), av);
                                s = vmlaq_n_s32(s, d, scales[e / 16] as i8 as i32);
                            }
                        }
                    }
                    acc = combine_k(acc, a.d, half_at(b, 208), 0.0, vaddvq_s32(s) - q6k_offset(scales, a), 0);
                }
                acc
            }

            /// Q8_0 row . Q8_0 activations.
            ///
            /// # Safety
            /// As `q4k`.
            #[target_feature(enable = $feat)]
            pub unsafe fn q8_0(w: &[u8], a: &[Q80]) -> f32 {
                let z = vdupq_n_s32(0);
                let mut acc = 0f32;
                for (b, a) in w.chunks_exact(34).zip(a) {
                    // SAFETY: 32 values at byte 2 of a 34-byte block; 32 activations.
                    let (q0, q1, a0, a1) = unsafe {
                        let (p, ap) = (b.as_ptr().add(2) as *const i8, a.qs.as_ptr());
                        (lda(p), lda(p.add(16)), lda(ap), lda(ap.add(16)))
                    };
                    let isum = vaddvq_s32($dot($dot(z, q0, a0), q1, a1));
                    acc = combine_0(acc, a.d, half_at(b, 0), isum);
                }
                acc
            }

            /// Q4_0 row . Q8_0 activations.
            ///
            /// # Safety
            /// As `q4k`.
            #[target_feature(enable = $feat)]
            pub unsafe fn q4_0(w: &[u8], a: &[Q80]) -> f32 {
                let m4 = vdupq_n_u8(0xF);
                let mut acc = 0f32;
                for (b, a) in w.chunks_exact(18).zip(a) {
                    // SAFETY: 16 bytes at byte 2 of an 18-byte block; 32 activations.
                    let (x, a0, a1) =
                        unsafe { (ld(b.as_ptr().add(2)), lda(a.qs.as_ptr()), lda(a.qs.as_ptr().add(16))) };
                    let dot = vaddvq_s32(dot32([vandq_u8(x, m4), vshrq_n_u8::<4>(x)], a0, a1));
                    acc = combine_0(acc, a.d, half_at(b, 0), dot - 8 * a.sum);
                }
                acc
            }
        }
    };
}

isa!(base, "neon", dot_neon);
isa!(dotprod, "neon,dotprod", dot_sdot);
