//! Prefill (m > 1) over the repacked eight-row groups (`repack.rs`): each 32-byte load of a
//! group's values serves MR activation rows (lane r of every vector is weight row r), with the
//! group's scales unpacked once for all of them. Each (activation row, weight row) pair gets the
//! integer sums and float steps of `dot.rs`, so results match the row path bit for bit.

use super::dot::Q8K;
use super::repack::{Q4K_GB, Q5K_GB, Q5K_QH, Q5K_QS, Q6K_D, Q6K_GB, Q6K_QS, Q6K_SC, ROWS};
use super::x8::{high_bit, prefetch_ahead, run_len, step_avx2, step_vnni, widen_avx2, widen_vnni};
use super::{Isa, OutPtr, x16gemm};
use crate::threads::parallel_for;
use rlx_ir::QuantScheme;
use std::arch::x86_64::*;

macro_rules! x8gemm {
    ($m:ident, $feat:literal, $step:ident, $widen:ident, $wide:literal, $macc:path, $MR:literal) => {
        /// Group kernels for MR activation rows, for one instruction set.
        pub mod $m {
            use super::*;

            /// Activation rows per call.
            pub const MR: usize = $MR;

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

            /// Q4_K (Q5_K with `Q5`): activation rows `i < M` (`nb` blocks each, row i at
            /// `a[i * nb..]`, pair sums `ps` alike) times the eight rows of group `w` into `out[i]`.
            ///
            /// # Safety
            /// The CPU must support the module's features.
            #[target_feature(enable = $feat)]
            pub unsafe fn q4k<const Q5: bool, const M: usize>(
                w: &[u8],
                a: &[Q8K],
                ps: &[[i32; 4]],
                nb: usize,
                out: &mut [[f32; ROWS]; M],
            ) {
                let (gb, qs) = if Q5 { (Q5K_GB, Q5K_QS) } else { (Q4K_GB, 160) };
                assert!(w.len() >= nb * gb && a.len() >= M * nb && ps.len() >= M * nb);
                let m4 = _mm256_set1_epi8(0xF);
                let mut acc = [_mm256_setzero_ps(); M];
                for b in 0..nb {
                    // SAFETY: block b of the group and of each activation row (asserted above).
                    unsafe {
                        let p = w.as_ptr().add(b * gb);
                        prefetch_ahead(p, gb, nb * gb);
                        let q8: [*const i8; M] = std::array::from_fn(|i| a[i * nb + b].qs.as_ptr());
                        let mut isum = [_mm256_setzero_si256(); M];
                        // Sums widened every `run` steps (`x8::run_len`).
                        let run = run_len($wide, if Q5 { 5 } else { 4 }).min(8);
                        for c in 0..4 {
                            // Sub-blocks 2c (low nibbles) and 2c + 1 (high), 32 values each.
                            let sl = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(32 + 16 * c) as *const __m128i));
                            let sh = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(40 + 16 * c) as *const __m128i));
                            for g0 in (0..8).step_by(run) {
                                let (mut lo, mut hi) = ([_mm256_setzero_si256(); M], [_mm256_setzero_si256(); M]);
                                for g in g0..g0 + run {
                                    let q = load(p.add(qs + 256 * c + 32 * g));
                                    let mut ql = _mm256_and_si256(q, m4);
                                    let mut qh = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                                    if Q5 {
                                        let h = load(p.add(Q5K_QH + 32 * g));
                                        ql = _mm256_or_si256(ql, high_bit(h, 2 * c));
                                        qh = _mm256_or_si256(qh, high_bit(h, 2 * c + 1));
                                    }
                                    for i in 0..M {
                                        lo[i] = $step(lo[i], ql, bcast(q8[i].add(64 * c + 4 * g)));
                                        hi[i] = $step(hi[i], qh, bcast(q8[i].add(64 * c + 32 + 4 * g)));
                                    }
                                }
                                for i in 0..M {
                                    let t = _mm256_add_epi32($widen(lo[i], sl), $widen(hi[i], sh));
                                    isum[i] = _mm256_add_epi32(isum[i], t);
                                }
                            }
                        }
                        let mins: [__m256i; 4] = std::array::from_fn(|q| {
                            _mm256_cvtepu8_epi16(_mm_loadu_si128(p.add(96 + 16 * q) as *const __m128i))
                        });
                        let d = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
                        let dmin = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16) as *const __m128i));
                        for i in 0..M {
                            let pr = &ps[i * nb + b];
                            let mut msum = _mm256_setzero_si256();
                            for q in 0..4 {
                                msum = $macc(msum, mins[q], _mm256_set1_epi32(pr[q]));
                            }
                            let ad = _mm256_set1_ps(a[i * nb + b].d);
                            // As `combine_k`, lane by lane: (acc + (a_d d) isum) - (a_d dmin) msum.
                            let t = _mm256_mul_ps(_mm256_mul_ps(ad, d), _mm256_cvtepi32_ps(isum[i]));
                            let u = _mm256_mul_ps(_mm256_mul_ps(ad, dmin), _mm256_cvtepi32_ps(msum));
                            acc[i] = _mm256_sub_ps(_mm256_add_ps(acc[i], t), u);
                        }
                    }
                }
                for i in 0..M {
                    // SAFETY: 8 floats.
                    unsafe { _mm256_storeu_ps(out[i].as_mut_ptr(), acc[i]) };
                }
            }

            /// Q6_K: as `q4k` (no pair sums).
            ///
            /// # Safety
            /// As `q4k`.
            #[target_feature(enable = $feat)]
            pub unsafe fn q6k<const M: usize>(w: &[u8], a: &[Q8K], nb: usize, out: &mut [[f32; ROWS]; M]) {
                assert!(w.len() >= nb * Q6K_GB && a.len() >= M * nb);
                let (m4, m2) = (_mm256_set1_epi8(0xF), _mm256_set1_epi8(3));
                let hb = |v: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(v, m2));
                let mut acc = [_mm256_setzero_ps(); M];
                for b in 0..nb {
                    // SAFETY: block b of the group and of each activation row (asserted above).
                    unsafe {
                        let p = w.as_ptr().add(b * Q6K_GB);
                        prefetch_ahead(p, Q6K_GB, nb * Q6K_GB);
                        let act: [&Q8K; M] = std::array::from_fn(|i| &a[i * nb + b]);
                        let (mut isum, mut off) = ([_mm256_setzero_si256(); M], [_mm256_setzero_si256(); M]);
                        for pr in 0..8 {
                            // Lane r: the i16 scales of groups 2pr and 2pr + 1 of row r.
                            let v = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(Q6K_SC + 16 * pr) as *const __m128i));
                            for i in 0..M {
                                let bs = (act[i].bsums.as_ptr().add(2 * pr) as *const i32).read_unaligned();
                                off[i] = $macc(off[i], v, _mm256_set1_epi32(bs));
                            }
                            let sc = [_mm256_srai_epi32::<16>(_mm256_slli_epi32::<16>(v)), _mm256_srai_epi32::<16>(v)];
                            for (e, &sc) in sc.iter().enumerate() {
                                let g = 2 * pr + e;
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
                                for i in 0..M {
                                    let x = act[i].qs.as_ptr().add(16 * g);
                                    let s01 = $step($step(_mm256_setzero_si256(), v0, bcast(x)), v1, bcast(x.add(4)));
                                    let t = if run_len($wide, 6) >= 4 {
                                        // The four steps in one run: one widening multiply instead of two.
                                        $widen($step($step(s01, v2, bcast(x.add(8))), v3, bcast(x.add(12))), sc)
                                    } else {
                                        // Two steps of 6-bit values per run (`x8::run_len`).
                                        let s23 = $step(
                                            $step(_mm256_setzero_si256(), v2, bcast(x.add(8))),
                                            v3,
                                            bcast(x.add(12)),
                                        );
                                        _mm256_add_epi32($widen(s01, sc), $widen(s23, sc))
                                    };
                                    isum[i] = _mm256_add_epi32(isum[i], t);
                                }
                            }
                        }
                        let d = _mm256_cvtph_ps(_mm_loadu_si128(p.add(Q6K_D) as *const __m128i));
                        for i in 0..M {
                            // The -32 offset of every value, taken out as 32 * sum(scale * bsum).
                            let is = _mm256_sub_epi32(isum[i], _mm256_slli_epi32::<5>(off[i]));
                            // As `combine_k` with dmin = 0 and msum = 0 (subtracting +0 changes nothing).
                            let t = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(act[i].d), d), _mm256_cvtepi32_ps(is));
                            acc[i] = _mm256_add_ps(acc[i], t);
                        }
                    }
                }
                for i in 0..M {
                    // SAFETY: 8 floats.
                    unsafe { _mm256_storeu_ps(out[i].as_mut_ptr(), acc[i]) };
                }
            }
        }
    };
}

x8gemm!(avx2, "avx2,fma,f16c", step_avx2, widen_avx2, false, super::super::blocks4::macc_avx2, 4);
x8gemm!(vnni, "avx2,fma,f16c,avx512vnni,avx512vl", step_vnni, widen_vnni, true, super::super::blocks4::macc_vnni, 8);

/// Groups per task: each task streams its groups' weights once per block of activation rows.
const GROUPS_PER_TASK: usize = 2;
/// Activation rows per pass over a task's groups (their quantized values stay in L2).
const M_BLOCK: usize = 64;

/// Calls `$isa::$f::<mr>` for run-time `mr <= MR` and writes the rows to `y`.
macro_rules! group_rows {
    ($isa:ident, $f:ident, [$($g:tt)*], $mr:expr, $lanes:expr, $out:ident, ($($arg:expr),*)) => {{
        // SAFETY: `isa` was detected on this CPU; the kernels check the slice sizes.
        match $mr {
            8 => { let mut o = [[0f32; $lanes]; 8]; unsafe { $isa::$f::<$($g)* 8>($($arg),*, &mut o) }; $out(&o) }
            7 => { let mut o = [[0f32; $lanes]; 7]; unsafe { $isa::$f::<$($g)* 7>($($arg),*, &mut o) }; $out(&o) }
            6 => { let mut o = [[0f32; $lanes]; 6]; unsafe { $isa::$f::<$($g)* 6>($($arg),*, &mut o) }; $out(&o) }
            5 => { let mut o = [[0f32; $lanes]; 5]; unsafe { $isa::$f::<$($g)* 5>($($arg),*, &mut o) }; $out(&o) }
            4 => { let mut o = [[0f32; $lanes]; 4]; unsafe { $isa::$f::<$($g)* 4>($($arg),*, &mut o) }; $out(&o) }
            3 => { let mut o = [[0f32; $lanes]; 3]; unsafe { $isa::$f::<$($g)* 3>($($arg),*, &mut o) }; $out(&o) }
            2 => { let mut o = [[0f32; $lanes]; 2]; unsafe { $isa::$f::<$($g)* 2>($($arg),*, &mut o) }; $out(&o) }
            _ => { let mut o = [[0f32; $lanes]; 1]; unsafe { $isa::$f::<$($g)* 1>($($arg),*, &mut o) }; $out(&o) }
        }
    }};
}

/// `y[m, n] = act[m, k] . w[n, k]^T` from repacked weights `packed` (Q4_K, Q5_K or Q6_K groups)
/// and Q8_K activations (`ps`: their `repack::pair_sums`, not for Q6_K), threaded over groups.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    isa: Isa,
    s: QuantScheme,
    packed: &[u8],
    act: &[Q8K],
    ps: &[[i32; 4]],
    (m, k): (usize, usize),
    n: usize,
    y: OutPtr,
) {
    let nb = k / 256;
    let gb = super::repack::group_block_bytes(s).expect("a scheme with a repacked layout") * nb;
    let groups = n.div_ceil(ROWS);
    assert!(isa != Isa::Scalar);
    assert!(packed.len() >= groups * gb && act.len() >= m * nb && (s == QuantScheme::Q6_K || ps.len() >= m * nb));
    let mr = if isa == Isa::Vnni { vnni::MR } else { avx2::MR };
    let zmm = isa == Isa::Vnni && x16gemm::available();
    parallel_for(groups.div_ceil(GROUPS_PER_TASK), &|t| {
        let (g0, g1) = (t * GROUPS_PER_TASK, ((t + 1) * GROUPS_PER_TASK).min(groups));
        for i0 in (0..m).step_by(M_BLOCK) {
            if zmm && g1 - g0 == 2 {
                pair(
                    s,
                    (&packed[g0 * gb..(g0 + 1) * gb], &packed[(g0 + 1) * gb..(g0 + 2) * gb]),
                    act,
                    ps,
                    nb,
                    (i0, m),
                    (g0, n),
                    y,
                );
                continue;
            }
            for gi in g0..g1 {
                let w = &packed[gi * gb..(gi + 1) * gb];
                let rows = ROWS.min(n - gi * ROWS);
                for i in (i0..(i0 + M_BLOCK).min(m)).step_by(mr) {
                    let mr = mr.min(m - i);
                    let put = |o: &[[f32; ROWS]]| {
                        for (ii, o) in o.iter().enumerate() {
                            for (r, &v) in o.iter().enumerate().take(rows) {
                                // SAFETY: (i + ii, gi * 8 + r) is inside the output; only this task writes group gi.
                                unsafe { *y.at((i + ii) * n + gi * ROWS + r) = v };
                            }
                        }
                    };
                    let (a, p) = (&act[i * nb..], if s == QuantScheme::Q6_K { ps } else { &ps[i * nb..] });
                    match (isa, s) {
                        (Isa::Vnni, QuantScheme::Q4_K) => {
                            group_rows!(vnni, q4k, [false,], mr, ROWS, put, (w, a, p, nb))
                        }
                        (Isa::Vnni, QuantScheme::Q5_K) => group_rows!(vnni, q4k, [true,], mr, ROWS, put, (w, a, p, nb)),
                        (Isa::Vnni, _) => group_rows!(vnni, q6k, [], mr, ROWS, put, (w, a, nb)),
                        (_, QuantScheme::Q4_K) => group_rows!(avx2, q4k, [false,], mr, ROWS, put, (w, a, p, nb)),
                        (_, QuantScheme::Q5_K) => group_rows!(avx2, q4k, [true,], mr, ROWS, put, (w, a, p, nb)),
                        _ => group_rows!(avx2, q6k, [], mr, ROWS, put, (w, a, nb)),
                    }
                }
            }
        }
    });
}

/// Activation rows `i0..` (one block of `M_BLOCK`, at most `m`) times the groups `g0` and
/// `g0 + 1` (`w`), by `x16gemm`'s kernels, into `y` (`n` columns).
#[allow(clippy::too_many_arguments)]
fn pair(
    s: QuantScheme,
    w: (&[u8], &[u8]),
    act: &[Q8K],
    ps: &[[i32; 4]],
    nb: usize,
    (i0, m): (usize, usize),
    (g0, n): (usize, usize),
    y: OutPtr,
) {
    use x16gemm::{LANES, MR};
    // Only the last group can be short, and the first of a pair never is.
    let rows = ROWS + ROWS.min(n - (g0 + 1) * ROWS);
    for i in (i0..(i0 + M_BLOCK).min(m)).step_by(MR) {
        let mr = MR.min(m - i);
        let put = |o: &[[f32; LANES]]| {
            for (ii, o) in o.iter().enumerate() {
                for (r, &v) in o.iter().enumerate().take(rows) {
                    // SAFETY: (i + ii, g0 * 8 + r) is inside the output; only this task writes groups g0 and g0 + 1.
                    unsafe { *y.at((i + ii) * n + g0 * ROWS + r) = v };
                }
            }
        };
        let (a, p) = (&act[i * nb..], if s == QuantScheme::Q6_K { ps } else { &ps[i * nb..] });
        match s {
            QuantScheme::Q4_K => group_rows!(x16gemm, q4k, [false,], mr, LANES, put, (w, a, p, nb)),
            QuantScheme::Q5_K => group_rows!(x16gemm, q4k, [true,], mr, LANES, put, (w, a, p, nb)),
            _ => group_rows!(x16gemm, q6k, [], mr, LANES, put, (w, a, nb)),
        }
    }
}
