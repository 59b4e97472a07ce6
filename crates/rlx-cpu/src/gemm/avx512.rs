//! AVX-512 micro-kernels (f32 and f64): an MR x (LANES * NV) tile held in zmm registers (32 of
//! them), B loaded once per k step, each A value broadcast once per k step. Edge tiles use masked
//! loads and stores, so they never go through a stack buffer; a tile of at most 8 (or 4) rows
//! runs the 8-row (4-row) version, so no FMA is spent on rows past m. Zen 4 runs a zmm FMA as
//! two 256-bit halves: the gain over AVX2 is fewer instructions and loads per flop.

// Intrinsics code: every statement is unsafe; the functions document the contract.
#![allow(unsafe_op_in_unsafe_fn)]

use super::APanel;
use std::arch::x86_64::*;

/// k steps before the end of a tile at which its C rows are prefetched again.
const PREFETCH_TAIL: usize = 32;

/// Prefetches every cache line of the first `m` rows of a tile `bytes` wide (rows need not be
/// 64-byte aligned, so the last byte is fetched too).
#[inline(always)]
unsafe fn prefetch_c(c: *const i8, rs_bytes: isize, m: usize, bytes: usize) {
    for i in 0..m {
        let row = c.offset(i as isize * rs_bytes);
        for h in (0..bytes).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(row.add(h));
        }
        _mm_prefetch::<_MM_HINT_T0>(row.add(bytes - 1));
    }
}

/// Defines `$name::<MR, NV>`: the tile routine for one element type and its zmm intrinsics.
macro_rules! zmm_tile {
    ($name:ident, $t:ty, $v:ty, $lanes:expr, $mask:ty, $zero:ident, $load:ident, $set1:ident, $fma:ident,
     $add:ident, $store:ident, $mload:ident, $mstore:ident) => {
        /// Computes an MR x LANES*NV tile of `A * B` over `kc` and writes (or adds) its first
        /// m x n entries into C. A packed panel (`a.rs == 1, a.cs == MR`) is read at fixed
        /// offsets; any other A (read in place, or a taller packed panel) through per-row
        /// offsets; rows past m re-read row m - 1 (discarded).
        ///
        /// # Safety
        /// As `GemmElem::micro`, with MR and LANES * NV the tile; the CPU has AVX-512F.
        #[target_feature(enable = "avx512f,avx2,fma")]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $name<const MR: usize, const NV: usize>(
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
            // Short edge tiles: a smaller register tile does only the rows that exist.
            if MR > 8 && m <= 8 {
                return if m <= 4 {
                    $name::<4, NV>(kc, a, b, c, rs, m, n, acc)
                } else {
                    $name::<8, NV>(kc, a, b, c, rs, m, n, acc)
                };
            }
            let size = std::mem::size_of::<$t>();
            let (cb, rsb, wb) = (c as *const i8, rs * size as isize, L * NV * size);
            // Pull the C tile towards L2 now and into L1 again shortly before the end (the A and
            // B panels streaming through L1 would evict an early prefetch).
            prefetch_c(cb, rsb, m, wb);
            let mut r = [[$zero(); NV]; MR];
            let tail = kc.min(PREFETCH_TAIL);
            // Two copies of the k loop on purpose: one step closure for both (offsets passed in)
            // measured 39-50 GFLOP/s against 113-115 (the accumulators no longer stay in zmm).
            if a.rs == 1 && a.cs == MR as isize {
                // A packed panel (zero padded past m): fixed offsets.
                let step = |r: &mut [[$v; NV]; MR], p: usize| {
                    let (ap, bp) = (a.ptr.add(p * MR), b.add(p * L * NV));
                    let bv: [$v; NV] = std::array::from_fn(|h| $load(bp.add(L * h)));
                    for (i, row) in r.iter_mut().enumerate() {
                        let av = $set1(*ap.add(i));
                        for (h, v) in row.iter_mut().enumerate() {
                            *v = $fma(av, bv[h], *v);
                        }
                    }
                };
                for p in 0..kc {
                    if p == kc - tail {
                        prefetch_c(cb, rsb, m, wb);
                    }
                    step(&mut r, p);
                }
            } else {
                let off: [isize; MR] = std::array::from_fn(|i| i.min(m - 1) as isize * a.rs);
                let step = |r: &mut [[$v; NV]; MR], p: usize| {
                    let (ap, bp) = (a.ptr.offset(p as isize * a.cs), b.add(p * L * NV));
                    let bv: [$v; NV] = std::array::from_fn(|h| $load(bp.add(L * h)));
                    for (i, row) in r.iter_mut().enumerate() {
                        let av = $set1(*ap.offset(off[i]));
                        for (h, v) in row.iter_mut().enumerate() {
                            *v = $fma(av, bv[h], *v);
                        }
                    }
                };
                for p in 0..kc {
                    if p == kc - tail {
                        prefetch_c(cb, rsb, m, wb);
                    }
                    step(&mut r, p);
                }
            }
            if m == MR && n == L * NV {
                // Full tile: constant trip counts, so the accumulators stay in registers.
                for (i, row) in r.iter().enumerate() {
                    let dst = c.offset(i as isize * rs);
                    for (h, &v) in row.iter().enumerate() {
                        let p = dst.add(L * h);
                        let v = if acc { $add($load(p), v) } else { v };
                        $store(p, v);
                    }
                }
                return;
            }
            // Lane masks for the columns of C this tile covers.
            let masks: [$mask; NV] = std::array::from_fn(|h| {
                let lanes = n.saturating_sub(L * h).min(L);
                ((1u32 << lanes) - 1) as $mask
            });
            let full = ((1u32 << L) - 1) as $mask;
            // All MR rows with a test, not `take(m)`: constant indices keep `r` in registers.
            for (i, row) in r.iter().enumerate() {
                if i >= m {
                    continue;
                }
                let dst = c.offset(i as isize * rs);
                for (h, &v) in row.iter().enumerate() {
                    let p = dst.add(L * h);
                    if masks[h] == full {
                        let v = if acc { $add($load(p), v) } else { v };
                        $store(p, v);
                    } else if masks[h] != 0 {
                        let v = if acc { $add($mload(masks[h], p), v) } else { v };
                        $mstore(p, masks[h], v);
                    }
                }
            }
        }
    };
}

zmm_tile!(
    f32_tile,
    f32,
    __m512,
    16,
    __mmask16,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    _mm512_add_ps,
    _mm512_storeu_ps,
    _mm512_maskz_loadu_ps,
    _mm512_mask_storeu_ps
);

zmm_tile!(
    f64_tile,
    f64,
    __m512d,
    8,
    __mmask8,
    _mm512_setzero_pd,
    _mm512_loadu_pd,
    _mm512_set1_pd,
    _mm512_fmadd_pd,
    _mm512_add_pd,
    _mm512_storeu_pd,
    _mm512_maskz_loadu_pd,
    _mm512_mask_storeu_pd
);
