//! AVX-512 micro-kernels (f32 and f64): an MR x (LANES * NV) tile held in zmm registers (32 of
//! them), B loaded once per k step, each A value broadcast once per k step. Edge tiles use masked
//! loads and stores, so they never go through a stack buffer; a tile of at most 8 (or 4) rows
//! runs the 8-row (4-row) version, so no FMA is spent on rows past m. Zen 4 runs a zmm FMA as
//! two 256-bit halves: the gain over AVX2 is fewer instructions and loads per flop.

// Intrinsics code: every statement is unsafe; the functions document the contract.
#![allow(unsafe_op_in_unsafe_fn)]

use super::APanel;
use std::arch::x86_64::*;

/// k steps before the end of a tile at which its C rows are prefetched.
pub(super) const PREFETCH_TAIL: usize = 32;

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

/// `k` steps of a 12-row x 2-zmm product in asm, accumulators `r` pinned to zmm8..zmm31: per step,
/// B's two vectors at `b` (then `b += ldb` bytes) times A's 12 values, row i at `a + i * lda` bytes
/// (from four row pointers three rows apart; then each `+= astep`). Packed A panels are rows
/// `lda` = one element apart stepping a whole panel row; A in place is rows `lda` apart stepping one
/// element. `$bc` / `$fma` / `$ptr` name the element type's broadcast, FMA and operand size.
/// Written in asm because intrinsics made LLVM keep B's pointer on the stack and update an
/// address per row and step, which slowed the blocked loop (session 11 in
/// docs/benchmarks-history.md).
macro_rules! zmm_12x2_steps {
    ($bc:literal, $fma:literal, $ptr:literal; $k:expr, $a:expr, $lda:expr, $astep:expr, $b:expr, $ldb:expr, $r:expr) => {
        $crate::gemm::zmm_12x2_steps!(
            "/* {pf} {pfs} */", $bc, $fma, $ptr; $k, $a, $lda, $astep, $b, $ldb, $r, 0usize, 0usize
        )
    };
    // With a prefetch stream: each step also asks for the line at `pf` in L2, then `pf += pfs`.
    ($bc:literal, $fma:literal, $ptr:literal; $k:expr, $a:expr, $lda:expr, $astep:expr, $b:expr, $ldb:expr, $r:expr;
     stream $pf:expr, $pfs:expr) => {
        $crate::gemm::zmm_12x2_steps!(
            "prefetcht1 [{pf}]\n add {pf}, {pfs}", $bc, $fma, $ptr; $k, $a, $lda, $astep, $b, $ldb, $r, $pf, $pfs
        )
    };
    ($pfi:literal, $bc:literal, $fma:literal, $ptr:literal; $k:expr, $a:expr, $lda:expr, $astep:expr, $b:expr,
     $ldb:expr, $r:expr, $pf:expr, $pfs:expr) => {{
        let r = $r;
        let (a0, lda) = ($a as *const u8, $lda as isize);
        std::arch::asm!(
            "test {k}, {k}",
            "jz 3f",
            "2:",
            $pfi,
            "vmovups zmm0, [{b}]",
            "vmovups zmm1, [{b} + 64]",
            concat!($bc, " zmm2, ", $ptr, " ptr [{a0}]"),
            concat!($fma, " zmm8, zmm2, zmm0"),
            concat!($fma, " zmm9, zmm2, zmm1"),
            concat!($bc, " zmm3, ", $ptr, " ptr [{a0} + {lda}]"),
            concat!($fma, " zmm10, zmm3, zmm0"),
            concat!($fma, " zmm11, zmm3, zmm1"),
            concat!($bc, " zmm4, ", $ptr, " ptr [{a0} + {lda} * 2]"),
            concat!($fma, " zmm12, zmm4, zmm0"),
            concat!($fma, " zmm13, zmm4, zmm1"),
            concat!($bc, " zmm5, ", $ptr, " ptr [{a3}]"),
            concat!($fma, " zmm14, zmm5, zmm0"),
            concat!($fma, " zmm15, zmm5, zmm1"),
            concat!($bc, " zmm6, ", $ptr, " ptr [{a3} + {lda}]"),
            concat!($fma, " zmm16, zmm6, zmm0"),
            concat!($fma, " zmm17, zmm6, zmm1"),
            concat!($bc, " zmm7, ", $ptr, " ptr [{a3} + {lda} * 2]"),
            concat!($fma, " zmm18, zmm7, zmm0"),
            concat!($fma, " zmm19, zmm7, zmm1"),
            concat!($bc, " zmm2, ", $ptr, " ptr [{a6}]"),
            concat!($fma, " zmm20, zmm2, zmm0"),
            concat!($fma, " zmm21, zmm2, zmm1"),
            concat!($bc, " zmm3, ", $ptr, " ptr [{a6} + {lda}]"),
            concat!($fma, " zmm22, zmm3, zmm0"),
            concat!($fma, " zmm23, zmm3, zmm1"),
            concat!($bc, " zmm4, ", $ptr, " ptr [{a6} + {lda} * 2]"),
            concat!($fma, " zmm24, zmm4, zmm0"),
            concat!($fma, " zmm25, zmm4, zmm1"),
            concat!($bc, " zmm5, ", $ptr, " ptr [{a9}]"),
            concat!($fma, " zmm26, zmm5, zmm0"),
            concat!($fma, " zmm27, zmm5, zmm1"),
            concat!($bc, " zmm6, ", $ptr, " ptr [{a9} + {lda}]"),
            concat!($fma, " zmm28, zmm6, zmm0"),
            concat!($fma, " zmm29, zmm6, zmm1"),
            concat!($bc, " zmm7, ", $ptr, " ptr [{a9} + {lda} * 2]"),
            concat!($fma, " zmm30, zmm7, zmm0"),
            concat!($fma, " zmm31, zmm7, zmm1"),
            "add {a0}, {astep}",
            "add {a3}, {astep}",
            "add {a6}, {astep}",
            "add {a9}, {astep}",
            "add {b}, {ldb}",
            "dec {k}",
            "jnz 2b",
            "3:",
            a0 = inout(reg) a0 => _,
            a3 = inout(reg) a0.wrapping_offset(3 * lda) => _,
            a6 = inout(reg) a0.wrapping_offset(6 * lda) => _,
            a9 = inout(reg) a0.wrapping_offset(9 * lda) => _,
            lda = in(reg) lda,
            astep = in(reg) $astep as isize,
            b = inout(reg) $b => _,
            ldb = in(reg) $ldb as isize,
            k = inout(reg) $k => _,
            pf = inout(reg) $pf => _,
            pfs = in(reg) $pfs,
            inout("zmm8") r[0][0],
            inout("zmm9") r[0][1],
            inout("zmm10") r[1][0],
            inout("zmm11") r[1][1],
            inout("zmm12") r[2][0],
            inout("zmm13") r[2][1],
            inout("zmm14") r[3][0],
            inout("zmm15") r[3][1],
            inout("zmm16") r[4][0],
            inout("zmm17") r[4][1],
            inout("zmm18") r[5][0],
            inout("zmm19") r[5][1],
            inout("zmm20") r[6][0],
            inout("zmm21") r[6][1],
            inout("zmm22") r[7][0],
            inout("zmm23") r[7][1],
            inout("zmm24") r[8][0],
            inout("zmm25") r[8][1],
            inout("zmm26") r[9][0],
            inout("zmm27") r[9][1],
            inout("zmm28") r[10][0],
            inout("zmm29") r[10][1],
            inout("zmm30") r[11][0],
            inout("zmm31") r[11][1],
            out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
            out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
            options(nostack, readonly),
        );
    }};
}
pub(crate) use zmm_12x2_steps;

/// Defines `$name::<MR, NV>`: the tile routine for one element type and its zmm intrinsics; full
/// 12 x 2-zmm tiles go to the one-block asm tiles `$full` (packed A) and `$inplace` (A in place).
macro_rules! zmm_tile {
    ($name:ident, $stream_name:ident, $full:ident, $inplace:ident, $t:ty, $v:ty, $lanes:expr, $mask:ty, $zero:ident,
     $load:ident, $set1:ident, $fma:ident, $add:ident, $store:ident, $mload:ident, $mstore:ident, $bc:literal,
     $fma_asm:literal, $ptr:literal) => {
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
            $stream_name::<MR, NV>(kc, a, b, c, rs, m, n, acc, 0, 0)
        }

        /// `$name` that also prefetches into L2 from address `pf` on, one address per k step,
        /// `pfs` (at most 64) bytes apart (`pfs == 0`: none): data a later tile reads, fetched
        /// while this one computes, without the stall of a burst of prefetches.
        ///
        /// # Safety
        /// As `$name` (`pf` may be any address: prefetches never fault).
        #[target_feature(enable = "avx512f,avx2,fma")]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $stream_name<const MR: usize, const NV: usize>(
            kc: usize,
            a: APanel<$t>,
            b: *const $t,
            c: *mut $t,
            rs: isize,
            m: usize,
            n: usize,
            acc: bool,
            pf: usize,
            pfs: usize,
        ) {
            const L: usize = $lanes;
            // Short edge tiles: a smaller register tile does only the rows that exist.
            if MR > 8 && m <= 8 {
                return if m <= 4 {
                    $stream_name::<4, NV>(kc, a, b, c, rs, m, n, acc, pf, pfs)
                } else {
                    $stream_name::<8, NV>(kc, a, b, c, rs, m, n, acc, pf, pfs)
                };
            }
            let size = std::mem::size_of::<$t>();
            let (cb, rsb, wb) = (c as *const i8, rs * size as isize, L * NV * size);
            // The C tile is prefetched into L1 shortly before the end only: one at the start too
            // was slower on MiniLM 8x128 (session 12 in docs/benchmarks-history.md). Large
            // products' C rows are sent to L2 by the caller first (`tiles`, `c_far`).
            let mut r = [[$zero(); NV]; MR];
            let tail = kc.min(PREFETCH_TAIL);
            let packed = a.rs == 1 && a.cs == MR as isize;
            if MR == 12 && NV == 2 && m == 12 && n == L * NV {
                // A full tile over a packed panel or rows in place: all in asm, accumulators in
                // registers.
                if packed {
                    return super::avx512_full::$full(kc - tail, tail, a.ptr, b, c, rs, acc, pf, pfs);
                }
                if a.cs == 1 {
                    return super::avx512_full::$inplace(kc - tail, tail, a.ptr, a.rs, b, c, rs, acc, pf, pfs);
                }
            }
            let in_asm = MR == 12 && NV == 2 && (packed || (m == 12 && a.cs == 1));
            if !in_asm {
                // The other tiles issue their share of the stream up front.
                (0..kc * pfs).step_by(64).for_each(|o| crate::prefetch::to_l2(pf + o));
            }
            if in_asm {
                // The 12-row tile in asm. Packed: row i at element i, a step moves one panel row;
                // in place (all 12 rows exist): rows `a.rs` apart, a step moves one element.
                let (lda, astep) =
                    if packed { (size as isize, (MR * size) as isize) } else { (a.rs * size as isize, size as isize) };
                let (ldb, head) = (L * NV * size, kc - tail);
                // SAFETY: MR == 12 and NV == 2: the same type.
                let r12 = &mut *(&mut r as *mut [[$v; NV]; MR] as *mut [[$v; 2]; 12]);
                let a1 = (a.ptr as *const u8).offset(head as isize * astep) as *const $t;
                let b1 = b.add(head * L * NV);
                if pfs == 0 {
                    zmm_12x2_steps!($bc, $fma_asm, $ptr; head, a.ptr, lda, astep, b, ldb, &mut *r12);
                    prefetch_c(cb, rsb, m, wb);
                    zmm_12x2_steps!($bc, $fma_asm, $ptr; tail, a1, lda, astep, b1, ldb, &mut *r12);
                } else {
                    zmm_12x2_steps!($bc, $fma_asm, $ptr; head, a.ptr, lda, astep, b, ldb, &mut *r12; stream pf, pfs);
                    prefetch_c(cb, rsb, m, wb);
                    let pf1 = pf + head * pfs;
                    zmm_12x2_steps!($bc, $fma_asm, $ptr; tail, a1, lda, astep, b1, ldb, &mut *r12; stream pf1, pfs);
                }
            } else if packed {
                // Two copies of the k loop on purpose: one step closure for both (offsets passed
                // in) was far slower, as the accumulators left zmm.
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
    f32_tile_stream,
    f32_packed_full,
    f32_inplace_full,
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
    _mm512_mask_storeu_ps,
    "vbroadcastss",
    "vfmadd231ps",
    "dword"
);

zmm_tile!(
    f64_tile,
    f64_tile_stream,
    f64_packed_full,
    f64_inplace_full,
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
    _mm512_mask_storeu_pd,
    "vbroadcastsd",
    "vfmadd231pd",
    "qword"
);
