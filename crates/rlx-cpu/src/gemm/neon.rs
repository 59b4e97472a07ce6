//! NEON micro-kernels (aarch64, where NEON is always present): f32 8 x 12 and f64 6 x 8, each 24
//! accumulator registers of the 32. Per k step B is loaded once and A's column once, and every
//! product is a multiply-add by one lane of A (`fmla v.4s, v.4s, v.s[l]`), so no A broadcast.

// Intrinsics code: every statement is unsafe; the functions document the contract.
#![allow(unsafe_op_in_unsafe_fn)]

use super::APanel;
use std::arch::aarch64::*;

/// Defines one tile routine: `$mr` rows as `$av` A registers of `$lanes` lanes, `$nv` B registers.
macro_rules! neon_tile {
    ($name:ident, $t:ty, $v:ty, $lanes:expr, $mr:expr, $nv:expr, $zero:ident, $load:ident, $fma:ident, $add:ident,
     $store:ident, [$(($row:expr, $areg:expr, $lane:expr)),*]) => {
        /// Computes an MR x NR tile of `A * B` over `kc` and writes (or adds) its first m x n
        /// entries into C. A packed panel (`a.rs == 1, a.cs == MR`) is loaded as vectors; any
        /// other A is gathered row by row (rows past m re-read row m - 1, discarded).
        ///
        /// # Safety
        /// As `GemmElem::micro` with this tile's MR and NR.
        #[target_feature(enable = "neon")]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $name(
            kc: usize,
            a: APanel<$t>,
            b: *const $t,
            c: *mut $t,
            rs: isize,
            m: usize,
            n: usize,
            acc: bool,
        ) {
            const L: usize = $lanes;
            const MR: usize = $mr;
            const NV: usize = $nv;
            const NR: usize = L * NV;
            const AV: usize = MR / L;
            let mut r = [[$zero(); NV]; MR];
            let mut bp = b;
            // One k step with A's column in registers `av`.
            macro_rules! step {
                ($avs:expr) => {{
                    let av: [$v; AV] = $avs;
                    let bv: [$v; NV] = std::array::from_fn(|h| $load(bp.add(h * L)));
                    $(for h in 0..NV {
                        r[$row][h] = $fma::<$lane>(r[$row][h], bv[h], av[$areg]);
                    })*
                    bp = bp.add(NR);
                }};
            }
            if a.rs == 1 && a.cs == MR as isize {
                let mut ap = a.ptr;
                for _ in 0..kc {
                    step!(std::array::from_fn(|g| $load(ap.add(g * L))));
                    ap = ap.add(MR);
                }
            } else {
                let off: [isize; MR] = std::array::from_fn(|i| i.min(m - 1) as isize * a.rs);
                let mut ap = a.ptr;
                for _ in 0..kc {
                    let col: [$t; MR] = std::array::from_fn(|i| *ap.offset(off[i]));
                    step!(std::array::from_fn(|g| $load(col.as_ptr().add(g * L))));
                    ap = ap.offset(a.cs);
                }
            }
            if m == MR && n == NR {
                for (i, row) in r.iter().enumerate() {
                    let dst = c.offset(i as isize * rs);
                    for (h, &v) in row.iter().enumerate() {
                        let p = dst.add(h * L);
                        $store(p, if acc { $add($load(p), v) } else { v });
                    }
                }
            } else {
                let mut tmp = [0 as $t; MR * NR];
                for (i, row) in r.iter().enumerate() {
                    for (h, &v) in row.iter().enumerate() {
                        $store(tmp.as_mut_ptr().add(i * NR + h * L), v);
                    }
                }
                super::kernels::write_tile(&tmp, NR, c, rs, m, n, acc);
            }
        }
    };
}

neon_tile!(
    f32_8x12,
    f32,
    float32x4_t,
    4,
    8,
    3,
    zero_f32,
    vld1q_f32,
    vfmaq_laneq_f32,
    vaddq_f32,
    vst1q_f32,
    [(0, 0, 0), (1, 0, 1), (2, 0, 2), (3, 0, 3), (4, 1, 0), (5, 1, 1), (6, 1, 2), (7, 1, 3)]
);

neon_tile!(
    f64_6x8,
    f64,
    float64x2_t,
    2,
    6,
    4,
    zero_f64,
    vld1q_f64,
    vfmaq_laneq_f64,
    vaddq_f64,
    vst1q_f64,
    [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1), (4, 2, 0), (5, 2, 1)]
);

#[inline(always)]
unsafe fn zero_f32() -> float32x4_t {
    vdupq_n_f32(0.0)
}

#[inline(always)]
unsafe fn zero_f64() -> float64x2_t {
    vdupq_n_f64(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One tile against the plain triple loop, with A packed (k-major) and A read in place.
    fn check_f32(kc: usize, m: usize, n: usize, acc: bool) {
        let a: Vec<f32> = (0..8 * kc).map(|i| (i % 7) as f32 - 3.0).collect();
        let b: Vec<f32> = (0..12 * kc).map(|i| (i % 5) as f32 * 0.5 - 1.0).collect();
        // a[p * 8 + r] is A[r][p]; the in-place view has rows of kc.
        let rows: Vec<f32> = (0..8 * kc).map(|i| a[(i % kc) * 8 + i / kc]).collect();
        for (ptr, rs, cs) in [(a.as_ptr(), 1, 8), (rows.as_ptr(), kc as isize, 1)] {
            let mut c = vec![1.0f32; 8 * 12];
            unsafe { f32_8x12(kc, APanel { ptr, rs, cs }, b.as_ptr(), c.as_mut_ptr(), 12, m, n, acc) };
            for i in 0..8 {
                for j in 0..12 {
                    let dot: f32 = (0..kc).map(|p| a[p * 8 + i] * b[p * 12 + j]).sum();
                    let want = if i < m && j < n { dot + if acc { 1.0 } else { 0.0 } } else { 1.0 };
                    assert_eq!(c[i * 12 + j], want, "({i}, {j}) of {m}x{n} kc {kc} rs {rs}");
                }
            }
        }
    }

    #[test]
    fn f32_tile_matches_the_triple_loop() {
        for (kc, m, n) in [(1, 8, 12), (3, 8, 12), (5, 1, 12), (4, 8, 5), (7, 3, 2)] {
            check_f32(kc, m, n, false);
            check_f32(kc, m, n, true);
        }
    }
}
