//! AVX-512 f32 micro-kernels: an MR x (16 * NV) tile held in zmm registers (32 of them), B loaded
//! once per k step, each A value broadcast straight into the FMA. Edge tiles use masked loads and
//! stores, so they never go through a stack buffer. Zen 4 runs a zmm FMA as two 256-bit halves:
//! the gain over AVX2 is fewer instructions and loads per flop, and a bigger tile.

// Intrinsics code: every statement is unsafe; the functions document the contract.
#![allow(unsafe_op_in_unsafe_fn)]

use super::APanel;
use std::arch::x86_64::*;

/// k steps before the end of a tile at which its C rows are prefetched again.
const PREFETCH_TAIL: usize = 32;

/// Prefetches every cache line of the first `m` rows of a 16*NV-wide C tile (rows need not be
/// 64-byte aligned, so the last byte is fetched too).
#[inline(always)]
unsafe fn prefetch_c<const NV: usize>(c: *mut f32, rs: isize, m: usize) {
    for i in 0..m {
        let row = c.offset(i as isize * rs) as *const i8;
        for h in 0..NV {
            _mm_prefetch::<_MM_HINT_T0>(row.add(64 * h));
        }
        _mm_prefetch::<_MM_HINT_T0>(row.add(64 * NV - 1));
    }
}

/// Computes an MR x 16*NV tile of `A * B` over `kc` and writes (or adds) its first m x n
/// entries into C. A packed panel (`a.rs == 1`) is read at fixed offsets; any other A (read in
/// place) through per-row offsets; rows past m re-read row m - 1 (discarded).
///
/// # Safety
/// As `GemmElem::micro`, with MR and 16 * NV the tile; the CPU has AVX-512F.
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn f32_tile<const MR: usize, const NV: usize>(
    kc: usize,
    a: APanel<f32>,
    b: *const f32,
    c: *mut f32,
    rs: isize,
    m: usize,
    n: usize,
    acc: bool,
) {
    // Pull the C tile towards L2 now and into L1 again shortly before the end (the A and B
    // panels streaming through L1 would evict an early prefetch).
    prefetch_c::<NV>(c, rs, m);
    let mut r = [[_mm512_setzero_ps(); NV]; MR];
    let tail = kc.min(PREFETCH_TAIL);
    if a.rs == 1 && a.cs == MR as isize {
        // A packed panel (zero padded past m): fixed offsets.
        let step = |r: &mut [[__m512; NV]; MR], p: usize| {
            let (ap, bp) = (a.ptr.add(p * MR), b.add(p * 16 * NV));
            let bv: [__m512; NV] = std::array::from_fn(|h| _mm512_loadu_ps(bp.add(16 * h)));
            for (i, row) in r.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*ap.add(i));
                for (h, v) in row.iter_mut().enumerate() {
                    *v = _mm512_fmadd_ps(av, bv[h], *v);
                }
            }
        };
        for p in 0..kc - tail {
            step(&mut r, p);
        }
        prefetch_c::<NV>(c, rs, m);
        for p in kc - tail..kc {
            step(&mut r, p);
        }
    } else {
        let off: [isize; MR] = std::array::from_fn(|i| i.min(m - 1) as isize * a.rs);
        let step = |r: &mut [[__m512; NV]; MR], p: usize| {
            let (ap, bp) = (a.ptr.offset(p as isize * a.cs), b.add(p * 16 * NV));
            let bv: [__m512; NV] = std::array::from_fn(|h| _mm512_loadu_ps(bp.add(16 * h)));
            for (i, row) in r.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*ap.offset(off[i]));
                for (h, v) in row.iter_mut().enumerate() {
                    *v = _mm512_fmadd_ps(av, bv[h], *v);
                }
            }
        };
        for p in 0..kc - tail {
            step(&mut r, p);
        }
        prefetch_c::<NV>(c, rs, m);
        for p in kc - tail..kc {
            step(&mut r, p);
        }
    }
    if m == MR && n == 16 * NV {
        // Full tile: constant trip counts, so the accumulators stay in registers.
        for (i, row) in r.iter().enumerate() {
            let dst = c.offset(i as isize * rs);
            for (h, &v) in row.iter().enumerate() {
                let p = dst.add(16 * h);
                let v = if acc { _mm512_add_ps(_mm512_loadu_ps(p), v) } else { v };
                _mm512_storeu_ps(p, v);
            }
        }
        return;
    }
    // Lane masks for the columns of C this tile covers.
    let masks: [__mmask16; NV] = std::array::from_fn(|h| {
        let lanes = n.saturating_sub(16 * h).min(16);
        ((1u32 << lanes) - 1) as __mmask16
    });
    for (i, row) in r.iter().enumerate().take(m) {
        let dst = c.offset(i as isize * rs);
        for (h, &v) in row.iter().enumerate() {
            let p = dst.add(16 * h);
            if masks[h] == 0xffff {
                let v = if acc { _mm512_add_ps(_mm512_loadu_ps(p), v) } else { v };
                _mm512_storeu_ps(p, v);
            } else if masks[h] != 0 {
                let v = if acc { _mm512_add_ps(_mm512_maskz_loadu_ps(masks[h], p), v) } else { v };
                _mm512_mask_storeu_ps(p, masks[h], v);
            }
        }
    }
}
