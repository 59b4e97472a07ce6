//! x86 kernels over the repacked eight-row groups (`repack.rs`): lane r of every vector is row r.
//! Four values of eight rows load as one 32-byte vector and meet one broadcast 4-byte group of
//! activations (`vpdpbusd`, or `maddubs` summed in i16 on AVX2); block scales apply per lane; each
//! lane's float steps are `combine_k`'s, so results match the row path bit for bit.

use super::blocks4::{macc_avx2, macc_vnni};
use super::dot::Q8K;
use super::repack::{Q4K_GB, Q5K_GB, Q5K_QH, Q5K_QS, Q6K_D, Q6K_GB, Q6K_QS, Q6K_SC, ROWS};
use std::arch::x86_64::*;

/// AVX2 sums u8 x i8 products in i16 lanes (`maddubs`, then `add`) and widens them once per
/// run of steps with the sub-block scale folded into the `madd`: two multiplies per step fewer
/// than widening every step. Each i16 lane gains at most 2 x (2^bits - 1) x 128 per step, so a
/// run is at most `run_len` steps.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn step_avx2(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, s))
}

/// The i16 pair sums of `step_avx2` times the per-lane scale `sc` (an i32 in 0..=255 or a
/// sign-extended i16), summed to i32 lanes.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn widen_avx2(acc: __m256i, sc: __m256i) -> __m256i {
    let sc16 = _mm256_or_si256(_mm256_and_si256(sc, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32::<16>(sc));
    _mm256_madd_epi16(acc, sc16)
}

/// VNNI sums u8 x i8 products in fours straight into i32 lanes.
#[target_feature(enable = "avx2,avx512vnni,avx512vl")]
#[inline]
pub(super) fn step_vnni(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(acc, u, s)
}

/// The i32 sums of `step_vnni` times the per-lane scale `sc`.
#[target_feature(enable = "avx2,avx512vnni,avx512vl")]
#[inline]
pub(super) fn widen_vnni(acc: __m256i, sc: __m256i) -> __m256i {
    _mm256_mullo_epi32(acc, sc)
}

/// Steps summed before widening (`step_*` / `widen_*`) for values of `bits` bits: i16 lanes hold
/// 32767 / (2 x (2^bits - 1) x 128) steps; i32 lanes (`wide`) need no limit for one block.
pub(super) const fn run_len(wide: bool, bits: u32) -> usize {
    if wide { 8 } else { 32767 / (2 * ((1 << bits) - 1) * 128) }
}

/// How many group blocks ahead of the one being read the decode kernels (`q4k`, `q6k`, and the
/// pair kernels of `x16gemm`) prefetch into L2, a line or two per step of a block's loop (a
/// thread's groups lie in order in memory). On a Sapphire Rapids host the hardware prefetcher
/// alone left decode reading weights at half the memory's rate, and a whole block's prefetches in
/// a burst at its start stalled the loads behind them once the fill buffers ran out; two blocks
/// ahead beat one, three and four (sessions 34 and 35 in docs/benchmarks-history.md).
pub(super) const AHEAD_BLOCKS: usize = 2;

/// Prefetches into L2 line `line` of the block at `p`, where a block of `gb` bytes has it.
#[inline(always)]
pub(super) fn prefetch_line(p: *const u8, line: usize, gb: usize) {
    if line * 64 < gb {
        // SAFETY: a prefetch never faults, whatever the address (past the weights it is dropped).
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(64 * line) as *const i8) };
    }
}

/// Prefetches into L2 the `gb` bytes `dist` past `p`: the batched kernels pass the same block
/// of the groups the thread takes next (its share of groups lies in order in memory), which
/// the hardware prefetcher alone left them waiting for. Into L1 it evicted the activations.
#[inline(always)]
pub(super) fn prefetch_ahead(p: *const u8, gb: usize, dist: usize) {
    let ahead = p.wrapping_add(dist);
    for l in (0..gb).step_by(64) {
        // SAFETY: a prefetch never faults, whatever the address (past the weights it is dropped).
        unsafe { _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(l) as *const i8) };
    }
}

/// Bit `j` of every byte of `h` moved to bit 4 (Q5_K: the fifth bit of sub-block j's values).
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn high_bit(h: __m256i, j: usize) -> __m256i {
    let v = if j <= 4 {
        _mm256_sll_epi16(h, _mm_cvtsi32_si128(4 - j as i32))
    } else {
        _mm256_srl_epi16(h, _mm_cvtsi32_si128(j as i32 - 4))
    };
    _mm256_and_si256(v, _mm256_set1_epi8(0x10))
}

macro_rules! x8 {
    ($m:ident, $feat:literal, $step:ident, $widen:ident, $wide:literal, $macc:ident) => {
        /// Eight-row group kernels for one instruction set.
        pub mod $m {
            use super::*;

            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn load(p: *const u8) -> __m256i {
                // SAFETY: callers pass pointers with 32 readable bytes.
                unsafe { _mm256_loadu_si256(p as *const __m256i) }
            }

            /// The 4 bytes at `p` in every 32-bit lane.
            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn bcast(p: *const i8) -> __m256i {
                // SAFETY: callers pass pointers with 4 readable bytes.
                _mm256_set1_epi32(unsafe { (p as *const i32).read_unaligned() })
            }

            /// Q4_K (Q5_K with `Q5`): the eight rows of one group (`a.len()` blocks) .
            /// activations, into `out`. `ps` holds `repack::pair_sums` of `a`.
            ///
            /// # Safety
            /// The CPU must support the module's features; `w` holds `a.len()` group blocks.
            #[target_feature(enable = $feat)]
            pub unsafe fn q4k<const Q5: bool>(w: &[u8], a: &[Q8K], ps: &[[i32; 4]], out: &mut [f32; ROWS]) {
                let (gb, qs) = if Q5 { (Q5K_GB, Q5K_QS) } else { (Q4K_GB, 160) };
                assert!(w.len() >= a.len() * gb && ps.len() >= a.len());
                let m4 = _mm256_set1_epi8(0xF);
                let mut acc = _mm256_setzero_ps();
                for (bi, (a, ps)) in a.iter().zip(ps).enumerate() {
                    // SAFETY: block bi of the group (asserted above); 256 activations.
                    unsafe {
                        let p = w.as_ptr().add(bi * gb);
                        let ahead = p.wrapping_add(AHEAD_BLOCKS * gb);
                        let q8 = a.qs.as_ptr();
                        // Eight independent sums (one per 32-value sub-block), advanced in turn,
                        // so the dot products' latency overlaps; widened every `run` steps.
                        let run = run_len($wide, if Q5 { 5 } else { 4 }).min(8);
                        let mut isum = _mm256_setzero_si256();
                        for g0 in (0..8).step_by(run) {
                            let mut s = [_mm256_setzero_si256(); 8];
                            for g in g0..g0 + run {
                                let h = if Q5 { load(p.add(Q5K_QH + 32 * g)) } else { _mm256_setzero_si256() };
                                for c in 0..4 {
                                    // 32 steps a block, a line a step (Q5_K's block has 23).
                                    prefetch_line(ahead, 4 * g + c, gb);
                                    let q = load(p.add(qs + 256 * c + 32 * g));
                                    let mut lo = _mm256_and_si256(q, m4);
                                    let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                                    if Q5 {
                                        lo = _mm256_or_si256(lo, high_bit(h, 2 * c));
                                        hi = _mm256_or_si256(hi, high_bit(h, 2 * c + 1));
                                    }
                                    s[2 * c] = $step(s[2 * c], lo, bcast(q8.add(64 * c + 4 * g)));
                                    s[2 * c + 1] = $step(s[2 * c + 1], hi, bcast(q8.add(64 * c + 32 + 4 * g)));
                                }
                            }
                            for (j, &sj) in s.iter().enumerate() {
                                let sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(32 + 8 * j) as *const __m128i));
                                isum = _mm256_add_epi32(isum, $widen(sj, sc));
                            }
                        }
                        let mut msum = _mm256_setzero_si256();
                        for (q, &pair) in ps.iter().enumerate() {
                            let mins = _mm256_cvtepu8_epi16(_mm_loadu_si128(p.add(96 + 16 * q) as *const __m128i));
                            msum = $macc(msum, mins, _mm256_set1_epi32(pair));
                        }
                        let d = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
                        let dmin = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16) as *const __m128i));
                        let ad = _mm256_set1_ps(a.d);
                        // As `combine_k`, lane by lane: (acc + (a_d d) isum) - (a_d dmin) msum.
                        let t = _mm256_mul_ps(_mm256_mul_ps(ad, d), _mm256_cvtepi32_ps(isum));
                        let u = _mm256_mul_ps(_mm256_mul_ps(ad, dmin), _mm256_cvtepi32_ps(msum));
                        acc = _mm256_sub_ps(_mm256_add_ps(acc, t), u);
                    }
                }
                // SAFETY: 8 floats.
                unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
            }

            /// Q6_K: the eight rows of one group (`a.len()` blocks) . activations, into `out`.
            ///
            /// # Safety
            /// As `q4k`.
            #[target_feature(enable = $feat)]
            pub unsafe fn q6k(w: &[u8], a: &[Q8K], out: &mut [f32; ROWS]) {
                assert!(w.len() >= a.len() * Q6K_GB);
                let (m4, m2) = (_mm256_set1_epi8(0xF), _mm256_set1_epi8(3));
                let hb = |v: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(v, m2));
                let mut acc = _mm256_setzero_ps();
                for (bi, a) in a.iter().enumerate() {
                    // SAFETY: block bi of the group (asserted above); 256 activations, 16 sums.
                    unsafe {
                        let p = w.as_ptr().add(bi * Q6K_GB);
                        let ahead = p.wrapping_add(AHEAD_BLOCKS * Q6K_GB);
                        let q8 = a.qs.as_ptr();
                        let (mut isum, mut off) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                        for pr in 0..8 {
                            // Lane r: the i16 scales of groups 2pr and 2pr + 1 of row r.
                            let v = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(Q6K_SC + 16 * pr) as *const __m128i));
                            let bs = (a.bsums.as_ptr().add(2 * pr) as *const i32).read_unaligned();
                            off = $macc(off, v, _mm256_set1_epi32(bs));
                            let sc = [_mm256_srai_epi32::<16>(_mm256_slli_epi32::<16>(v)), _mm256_srai_epi32::<16>(v)];
                            for (e, &sc) in sc.iter().enumerate() {
                                let g = 2 * pr + e;
                                // 16 steps a block: two lines a step (the block has 27).
                                prefetch_line(ahead, 2 * g, Q6K_GB);
                                prefetch_line(ahead, 2 * g + 1, Q6K_GB);
                                let q = p.add(Q6K_QS + 96 * g);
                                let (qa, qb, qh) = (load(q), load(q.add(32)), load(q.add(64)));
                                let v0 = _mm256_or_si256(_mm256_and_si256(qa, m4), hb(qh));
                                let v1 = _mm256_or_si256(
                                    _mm256_and_si256(_mm256_srli_epi16::<4>(qa), m4),
                                    hb(_mm256_srli_epi16::<2>(qh)),
                                );
                                let v2 = _mm256_or_si256(_mm256_and_si256(qb, m4), hb(_mm256_srli_epi16::<4>(qh)));
                                let v3 = _mm256_or_si256(
                                    _mm256_and_si256(_mm256_srli_epi16::<4>(qb), m4),
                                    hb(_mm256_srli_epi16::<6>(qh)),
                                );
                                let x = q8.add(16 * g);
                                // Two steps of 6-bit values per run (`run_len`).
                                let s01 = $step($step(_mm256_setzero_si256(), v0, bcast(x)), v1, bcast(x.add(4)));
                                let s23 =
                                    $step($step(_mm256_setzero_si256(), v2, bcast(x.add(8))), v3, bcast(x.add(12)));
                                isum = _mm256_add_epi32(isum, _mm256_add_epi32($widen(s01, sc), $widen(s23, sc)));
                            }
                        }
                        // The -32 offset of every value, taken out as 32 * sum(scale * bsum).
                        let isum = _mm256_sub_epi32(isum, _mm256_slli_epi32::<5>(off));
                        let d = _mm256_cvtph_ps(_mm_loadu_si128(p.add(Q6K_D) as *const __m128i));
                        // As `combine_k` with dmin = 0 and msum = 0 (subtracting +0 changes nothing).
                        let t = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(a.d), d), _mm256_cvtepi32_ps(isum));
                        acc = _mm256_add_ps(acc, t);
                    }
                }
                // SAFETY: 8 floats.
                unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
            }
        }
    };
}

x8!(avx2, "avx2,fma,f16c", step_avx2, widen_avx2, false, macc_avx2);
x8!(vnni, "avx2,fma,f16c,avx512vnni,avx512vl", step_vnni, widen_vnni, true, macc_vnni);
