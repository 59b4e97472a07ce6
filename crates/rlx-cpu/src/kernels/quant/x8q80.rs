//! Q8_0 over repacked eight-row groups (`repack.rs`): per 32-value block, `d[8]` (f16) then
//! `qs[g][r][i]` = value `4g + i` of row r (272 bytes, as 8 x 34). Decode takes one activation
//! row, prefill MR rows per pass over a group. Each row's integer sums and float steps are those
//! of `dot::q8_0` (`combine_0`), so results match the row path bit for bit.

use super::dot::{Q80, combine_0, half_at};
use super::repack::ROWS;
use super::{Isa, OutPtr};
use crate::threads::parallel_for;

/// Bytes of one Q8_0 block of one group.
pub const Q80_GB: usize = 272;

/// The group layout read back value by value (the portable path, and the tests' check of it).
pub fn scalar(w: &[u8], act: &[Q80], out: &mut [f32; ROWS]) {
    for (r, o) in out.iter_mut().enumerate() {
        let mut acc = 0f32;
        for (b, a) in w.chunks_exact(Q80_GB).zip(act) {
            let isum: i32 = (0..32).map(|l| b[16 + 32 * (l / 4) + 4 * r + l % 4] as i8 as i32 * a.qs[l] as i32).sum();
            acc = combine_0(acc, a.d, half_at(b, 2 * r), isum);
        }
        *o = acc;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// `acc +` the signed products of `q` (weights) and `a` (activations) summed in fours:
    /// |q| (unsigned) times a with q's sign, so `maddubs` never saturates (at most 2 x 128 x 127).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn sdot_avx2(acc: __m256i, q: __m256i, a: __m256i) -> __m256i {
        let p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(a, q));
        _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)))
    }

    /// As `sdot_avx2` with VNNI.
    #[target_feature(enable = "avx2,avx512vnni,avx512vl")]
    #[inline]
    fn sdot_vnni(acc: __m256i, q: __m256i, a: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, _mm256_sign_epi8(q, q), _mm256_sign_epi8(a, q))
    }

    macro_rules! x8q80 {
        ($m:ident, $feat:literal, $dot:ident) => {
            /// Q8_0 group kernels for one instruction set.
            pub mod $m {
                use super::*;

                /// Activation rows `i < M` (`nb` blocks each, row i at `a[i * nb..]`) times the
                /// eight rows of group `w` into `out[i]`.
                ///
                /// # Safety
                /// The CPU must support the module's features.
                #[target_feature(enable = $feat)]
                pub unsafe fn rows<const M: usize>(w: &[u8], a: &[Q80], nb: usize, out: &mut [[f32; ROWS]; M]) {
                    assert!(w.len() >= nb * Q80_GB && a.len() >= M * nb);
                    let mut acc = [_mm256_setzero_ps(); M];
                    for b in 0..nb {
                        // SAFETY: block b of the group (asserted above); 32 activations per row.
                        unsafe {
                            let p = w.as_ptr().add(b * Q80_GB);
                            let act: [&Q80; M] = std::array::from_fn(|i| &a[i * nb + b]);
                            // Two sums per row (even and odd steps), so the latency overlaps.
                            let mut s = [[_mm256_setzero_si256(); 2]; M];
                            for g in 0..8 {
                                let q = _mm256_loadu_si256(p.add(16 + 32 * g) as *const __m256i);
                                for i in 0..M {
                                    let x = (act[i].qs.as_ptr().add(4 * g) as *const i32).read_unaligned();
                                    s[i][g % 2] = $dot(s[i][g % 2], q, _mm256_set1_epi32(x));
                                }
                            }
                            let s: [__m256i; M] = std::array::from_fn(|i| _mm256_add_epi32(s[i][0], s[i][1]));
                            let d = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
                            for i in 0..M {
                                // As `combine_0`, lane by lane: acc + (a_d d) isum.
                                let t =
                                    _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(act[i].d), d), _mm256_cvtepi32_ps(s[i]));
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

    x8q80!(avx2, "avx2,fma,f16c", sdot_avx2);
    x8q80!(vnni, "avx2,fma,f16c,avx512vnni,avx512vl", sdot_vnni);
}

/// Groups per prefill task, and activation rows per pass over a task's groups.
const GROUPS_PER_TASK: usize = 2;
const M_BLOCK: usize = 64;

/// `y[m, n] = act[m, k] . w[n, k]^T` from repacked Q8_0 groups and Q8_0 activations (decode
/// when m = 1), threaded over groups of rows.
pub fn gemm(isa: Isa, packed: &[u8], act: &[Q80], (m, k): (usize, usize), n: usize, y: OutPtr) {
    let nb = k / 32;
    let (gb, groups) = (Q80_GB * nb, n.div_ceil(ROWS));
    assert!(packed.len() >= groups * gb && act.len() >= m * nb);
    // Decode streams long runs of groups per task (a few per thread); prefill two groups.
    let per = if m == 1 { groups.div_ceil(crate::threads::num_threads() * 4).max(4) } else { GROUPS_PER_TASK };
    parallel_for(groups.div_ceil(per), &|t| {
        let (g0, g1) = (t * per, ((t + 1) * per).min(groups));
        for i0 in (0..m).step_by(M_BLOCK) {
            for gi in g0..g1 {
                let w = &packed[gi * gb..(gi + 1) * gb];
                let rows = ROWS.min(n - gi * ROWS);
                let put = |i: usize, o: &[[f32; ROWS]]| {
                    for (ii, o) in o.iter().enumerate() {
                        for (r, &v) in o.iter().enumerate().take(rows) {
                            // SAFETY: (i + ii, gi * 8 + r) is inside the output; only this task writes group gi.
                            unsafe { *y.at((i + ii) * n + gi * ROWS + r) = v };
                        }
                    }
                };
                let mut i = i0;
                while i < (i0 + M_BLOCK).min(m) {
                    let mr = 4.min(m - i);
                    group_rows(isa, w, &act[i * nb..], nb, mr, &mut |o| put(i, o));
                    i += mr;
                }
            }
        }
    });
}

/// Rows `i < mr` (at most 4) of `a` times group `w`, handed to `put`.
fn group_rows(isa: Isa, w: &[u8], a: &[Q80], nb: usize, mr: usize, put: &mut dyn FnMut(&[[f32; ROWS]])) {
    #[cfg(target_arch = "x86_64")]
    macro_rules! run {
        ($m:ident, $mr:literal) => {{
            let mut o = [[0f32; ROWS]; $mr];
            // SAFETY: `Isa::detect` chose this path only when the CPU has the features.
            unsafe { x86::$m::rows::<$mr>(w, a, nb, &mut o) };
            put(&o)
        }};
    }
    match (isa, mr) {
        #[cfg(target_arch = "x86_64")]
        (Isa::Vnni, 4) => run!(vnni, 4),
        #[cfg(target_arch = "x86_64")]
        (Isa::Vnni, 3) => run!(vnni, 3),
        #[cfg(target_arch = "x86_64")]
        (Isa::Vnni, 2) => run!(vnni, 2),
        #[cfg(target_arch = "x86_64")]
        (Isa::Vnni, _) => run!(vnni, 1),
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, 4) => run!(avx2, 4),
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, 3) => run!(avx2, 3),
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, 2) => run!(avx2, 2),
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, _) => run!(avx2, 1),
        _ => {
            let mut o = [[0f32; ROWS]; 4];
            for (i, o) in o.iter_mut().enumerate().take(mr) {
                scalar(w, &a[i * nb..(i + 1) * nb], o);
            }
            put(&o[..mr])
        }
    }
}
