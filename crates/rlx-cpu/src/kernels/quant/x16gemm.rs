//! Prefill and batched decode over two repacked eight-row groups at once on AVX-512: the
//! 32-byte loads of both groups fill one 512-bit vector (lanes 0-7 the first group's rows,
//! 8-15 the second's) that meets one broadcast of the activations, so each `vpdpbusd` does
//! twice the work of `x8gemm`'s. Each lane's integer sums and float steps are `x8gemm`'s, so
//! results match the row path bit for bit.

use super::dot::Q8K;
use super::repack::{Q4K_GB, Q5K_GB, Q5K_QH, Q5K_QS, Q6K_D, Q6K_GB, Q6K_QS, Q6K_SC};
use super::x8::{self, AHEAD_BLOCKS};
use std::arch::x86_64::*;

/// Output lanes: eight rows of each of the two groups.
pub const LANES: usize = 16;
/// Activation rows per call.
pub const MR: usize = 8;

/// Whether this CPU runs these kernels (AVX-512 VNNI with byte and word ops).
pub fn available() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("f16c")
}

/// Bytes from the start of block `b` (of `nb` blocks of `gb` bytes a group) to the block
/// `AHEAD_BLOCKS` on in the thread's order: in the same group, else in the next pair's (a
/// thread's pairs lie in order in memory, the next one `2 nb` blocks on).
#[inline(always)]
fn ahead(b: usize, nb: usize, gb: usize) -> usize {
    if b + AHEAD_BLOCKS < nb { AHEAD_BLOCKS * gb } else { (nb + AHEAD_BLOCKS) * gb }
}

/// `x8::prefetch_line` for both groups of a pair.
#[inline(always)]
fn prefetch_line(fa: *const u8, fb: *const u8, line: usize, gb: usize) {
    x8::prefetch_line(fa, line, gb);
    x8::prefetch_line(fb, line, gb);
}

/// The 32 bytes at `a` in the low half, those at `b` in the high half.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load2(a: *const u8, b: *const u8) -> __m512i {
    // SAFETY: callers pass pointers with 32 readable bytes each.
    unsafe {
        let lo = _mm256_loadu_si256(a as *const __m256i);
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), _mm256_loadu_si256(b as *const __m256i))
    }
}

/// The 16 bytes at `a`, then the 16 at `b`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load2x16(a: *const u8, b: *const u8) -> __m256i {
    // SAFETY: callers pass pointers with 16 readable bytes each.
    unsafe { _mm256_loadu2_m128i(b as *const __m128i, a as *const __m128i) }
}

/// The 8 bytes at `a` widened to lanes 0-7, those at `b` to lanes 8-15.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn scales2(a: *const u8, b: *const u8) -> __m512i {
    // SAFETY: callers pass pointers with 8 readable bytes each.
    unsafe {
        let v = _mm_unpacklo_epi64(_mm_loadl_epi64(a as *const __m128i), _mm_loadl_epi64(b as *const __m128i));
        _mm512_cvtepu8_epi32(v)
    }
}

/// The 4 bytes at `p` in every 32-bit lane.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn bcast(p: *const i8) -> __m512i {
    // SAFETY: callers pass pointers with 4 readable bytes.
    _mm512_set1_epi32(unsafe { (p as *const i32).read_unaligned() })
}

/// Bit `j` of every byte of `h` moved to bit 4 (as `x8::high_bit`).
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn high_bit(h: __m512i, j: usize) -> __m512i {
    let v = if j <= 4 {
        _mm512_sll_epi16(h, _mm_cvtsi32_si128(4 - j as i32))
    } else {
        _mm512_srl_epi16(h, _mm_cvtsi32_si128(j as i32 - 4))
    };
    _mm512_and_si512(v, _mm512_set1_epi8(0x10))
}

/// Q4_K (Q5_K with `Q5`): activation rows `i < M` (`nb` blocks each, row i at `a[i * nb..]`,
/// pair sums `ps` alike) times the sixteen rows of groups `wa` and `wb` into `out[i]`.
///
/// # Safety
/// The CPU must pass `available()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vl,avx2,f16c")]
pub unsafe fn q4k<const Q5: bool, const M: usize>(
    (wa, wb): (&[u8], &[u8]),
    a: &[Q8K],
    ps: &[[i32; 4]],
    nb: usize,
    out: &mut [[f32; LANES]; M],
) {
    let (gb, qs) = if Q5 { (Q5K_GB, Q5K_QS) } else { (Q4K_GB, 160) };
    assert!(wa.len() >= nb * gb && wb.len() >= nb * gb && a.len() >= M * nb && ps.len() >= M * nb);
    let m4 = _mm512_set1_epi8(0xF);
    let mut acc = [_mm512_setzero_ps(); M];
    for b in 0..nb {
        // SAFETY: block b of both groups and of each activation row (asserted above).
        unsafe {
            let (pa, pb) = (wa.as_ptr().add(b * gb), wb.as_ptr().add(b * gb));
            let ahead = ahead(b, nb, gb);
            let (fa, fb) = (pa.wrapping_add(ahead), pb.wrapping_add(ahead));
            let q8: [*const i8; M] = std::array::from_fn(|i| a[i * nb + b].qs.as_ptr());
            let mut isum = [_mm512_setzero_si512(); M];
            for c in 0..4 {
                // Sub-blocks 2c (low nibbles) and 2c + 1 (high), 32 values each; i32 lanes hold
                // a whole sub-block's sums, so one widening multiply per sub-block.
                let sl = scales2(pa.add(32 + 16 * c), pb.add(32 + 16 * c));
                let sh = scales2(pa.add(40 + 16 * c), pb.add(40 + 16 * c));
                let (mut lo, mut hi) = ([_mm512_setzero_si512(); M], [_mm512_setzero_si512(); M]);
                for g in 0..8 {
                    // 32 steps a block, one line of each group a step (Q5_K's block has 23).
                    prefetch_line(fa, fb, 8 * c + g, gb);
                    let q = load2(pa.add(qs + 256 * c + 32 * g), pb.add(qs + 256 * c + 32 * g));
                    let mut ql = _mm512_and_si512(q, m4);
                    let mut qh = _mm512_and_si512(_mm512_srli_epi16::<4>(q), m4);
                    if Q5 {
                        let h = load2(pa.add(Q5K_QH + 32 * g), pb.add(Q5K_QH + 32 * g));
                        ql = _mm512_or_si512(ql, high_bit(h, 2 * c));
                        qh = _mm512_or_si512(qh, high_bit(h, 2 * c + 1));
                    }
                    for i in 0..M {
                        lo[i] = _mm512_dpbusd_epi32(lo[i], ql, bcast(q8[i].add(64 * c + 4 * g)));
                        hi[i] = _mm512_dpbusd_epi32(hi[i], qh, bcast(q8[i].add(64 * c + 32 + 4 * g)));
                    }
                }
                for i in 0..M {
                    let t = _mm512_add_epi32(_mm512_mullo_epi32(lo[i], sl), _mm512_mullo_epi32(hi[i], sh));
                    isum[i] = _mm512_add_epi32(isum[i], t);
                }
            }
            let mins: [__m512i; 4] =
                std::array::from_fn(|q| _mm512_cvtepu8_epi16(load2x16(pa.add(96 + 16 * q), pb.add(96 + 16 * q))));
            let d = _mm512_cvtph_ps(load2x16(pa, pb));
            let dmin = _mm512_cvtph_ps(load2x16(pa.add(16), pb.add(16)));
            for i in 0..M {
                let pr = &ps[i * nb + b];
                let mut msum = _mm512_setzero_si512();
                for q in 0..4 {
                    msum = _mm512_dpwssd_epi32(msum, mins[q], _mm512_set1_epi32(pr[q]));
                }
                let ad = _mm512_set1_ps(a[i * nb + b].d);
                // As `combine_k`, lane by lane: (acc + (a_d d) isum) - (a_d dmin) msum.
                let t = _mm512_mul_ps(_mm512_mul_ps(ad, d), _mm512_cvtepi32_ps(isum[i]));
                let u = _mm512_mul_ps(_mm512_mul_ps(ad, dmin), _mm512_cvtepi32_ps(msum));
                acc[i] = _mm512_sub_ps(_mm512_add_ps(acc[i], t), u);
            }
        }
    }
    for i in 0..M {
        // SAFETY: 16 floats.
        unsafe { _mm512_storeu_ps(out[i].as_mut_ptr(), acc[i]) };
    }
}

/// Q6_K: as `q4k` (no pair sums).
///
/// # Safety
/// As `q4k`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vl,avx2,f16c")]
pub unsafe fn q6k<const M: usize>((wa, wb): (&[u8], &[u8]), a: &[Q8K], nb: usize, out: &mut [[f32; LANES]; M]) {
    assert!(wa.len() >= nb * Q6K_GB && wb.len() >= nb * Q6K_GB && a.len() >= M * nb);
    let (m4, m2) = (_mm512_set1_epi8(0xF), _mm512_set1_epi8(3));
    let hb = |v: __m512i| _mm512_slli_epi16::<4>(_mm512_and_si512(v, m2));
    let mut acc = [_mm512_setzero_ps(); M];
    for b in 0..nb {
        // SAFETY: block b of both groups and of each activation row (asserted above).
        unsafe {
            let (pa, pb) = (wa.as_ptr().add(b * Q6K_GB), wb.as_ptr().add(b * Q6K_GB));
            let ahead = ahead(b, nb, Q6K_GB);
            let (fa, fb) = (pa.wrapping_add(ahead), pb.wrapping_add(ahead));
            let act: [&Q8K; M] = std::array::from_fn(|i| &a[i * nb + b]);
            let (mut isum, mut off) = ([_mm512_setzero_si512(); M], [_mm512_setzero_si512(); M]);
            for pr in 0..8 {
                // Lane r: the i16 scales of groups 2pr and 2pr + 1 of row r.
                let v = _mm512_cvtepi8_epi16(load2x16(pa.add(Q6K_SC + 16 * pr), pb.add(Q6K_SC + 16 * pr)));
                for i in 0..M {
                    let bs = (act[i].bsums.as_ptr().add(2 * pr) as *const i32).read_unaligned();
                    off[i] = _mm512_dpwssd_epi32(off[i], v, _mm512_set1_epi32(bs));
                }
                let sc = [_mm512_srai_epi32::<16>(_mm512_slli_epi32::<16>(v)), _mm512_srai_epi32::<16>(v)];
                for (e, &sc) in sc.iter().enumerate() {
                    let g = 2 * pr + e;
                    // 16 steps a block: two lines of each group a step (the block has 27).
                    prefetch_line(fa, fb, 2 * g, Q6K_GB);
                    prefetch_line(fa, fb, 2 * g + 1, Q6K_GB);
                    let (qa, qb, qh) = (
                        load2(pa.add(Q6K_QS + 96 * g), pb.add(Q6K_QS + 96 * g)),
                        load2(pa.add(Q6K_QS + 96 * g + 32), pb.add(Q6K_QS + 96 * g + 32)),
                        load2(pa.add(Q6K_QS + 96 * g + 64), pb.add(Q6K_QS + 96 * g + 64)),
                    );
                    let v0 = _mm512_or_si512(_mm512_and_si512(qa, m4), hb(qh));
                    let v1 = _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16::<4>(qa), m4),
                        hb(_mm512_srli_epi16::<2>(qh)),
                    );
                    let v2 = _mm512_or_si512(_mm512_and_si512(qb, m4), hb(_mm512_srli_epi16::<4>(qh)));
                    let v3 = _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16::<4>(qb), m4),
                        hb(_mm512_srli_epi16::<6>(qh)),
                    );
                    for i in 0..M {
                        // Four steps of 6-bit values fit an i32 lane: one widening multiply.
                        let x = act[i].qs.as_ptr().add(16 * g);
                        let mut s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v0, bcast(x));
                        s = _mm512_dpbusd_epi32(s, v1, bcast(x.add(4)));
                        s = _mm512_dpbusd_epi32(s, v2, bcast(x.add(8)));
                        s = _mm512_dpbusd_epi32(s, v3, bcast(x.add(12)));
                        isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(s, sc));
                    }
                }
            }
            let d = _mm512_cvtph_ps(load2x16(pa.add(Q6K_D), pb.add(Q6K_D)));
            for i in 0..M {
                // The -32 offset of every value, taken out as 32 * sum(scale * bsum).
                let is = _mm512_sub_epi32(isum[i], _mm512_slli_epi32::<5>(off[i]));
                // As `combine_k` with dmin = 0 and msum = 0 (subtracting +0 changes nothing).
                let t = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(act[i].d), d), _mm512_cvtepi32_ps(is));
                acc[i] = _mm512_add_ps(acc[i], t);
            }
        }
    }
    for i in 0..M {
        // SAFETY: 16 floats.
        unsafe { _mm512_storeu_ps(out[i].as_mut_ptr(), acc[i]) };
    }
}
