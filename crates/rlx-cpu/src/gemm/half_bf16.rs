//! bf16 GEMM tiles on AVX-512 BF16 (`vdpbf16ps`): A and B stay bf16 in pair-interleaved panels
//! and each instruction adds two exact products per lane to an f32 sum, twice the flops per
//! instruction of the widened f32 path. Sums stay in f32 over all of k and are rounded once,
//! as on the f32 path; only the order inside each pair of k differs, and the instruction
//! flushes f32 denormals (below 1.2e-38) to zero. `RLX_BF16_DOT=0` keeps the widened path.

// Intrinsics code: every statement is unsafe; the functions document the contract.
#![allow(unsafe_op_in_unsafe_fn)]

use super::MatRef;
use ::half::bf16;
use std::arch::x86_64::*;

/// Tile rows (the f32 AVX-512 kernel's, so both paths share the packing geometry).
pub const MR: usize = 12;
/// Tile columns.
pub const NR: usize = 32;

/// Whether bf16 products take this path: the CPU has AVX-512 BF16 and runs 512-bit FMAs as two
/// halves (AMD Zen 4: there `vdpbf16ps` doubles the sums per cycle),
/// the f32 GEMM runs the 12 x 32 AVX-512 tile, and neither `RLX_BF16_DOT=0` nor
/// `RLX_CPU_SIMD=avx2|scalar` is set; `RLX_BF16_DOT=1` takes it on any CPU with AVX-512 BF16.
/// Where two full-width FMAs issue per cycle (Intel) it adds no sums per cycle and costs the
/// pair packing, so it runs slower than the widened path (sessions 7 and 13 in
/// docs/benchmarks-history.md).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let cfg = rlx_driver::config();
        let dot = cfg.cpu.bf16_dot;
        let off = dot == Some(false) || cfg.cpu.simd != rlx_driver::config::IsaCap::Best;
        let pays = dot == Some(true) || super::kernels::zmm_fma_split();
        let k = <f32 as super::GemmElem>::kernel();
        !off && pays
            && std::is_x86_feature_detected!("avx512bf16")
            && std::is_x86_feature_detected!("avx512f")
            && (k.mr, k.nr) == (MR, NR)
    })
}

/// Pairs of k (the last one zero padded when k is odd).
pub fn pairs(k: usize) -> usize {
    k.div_ceil(2)
}

/// Packs rows `i0..i0+rows` (at most MR) of A, all of k, as pairs: the bits of (row r, k 2p)
/// and (r, 2p + 1) in the low and high half of `out[p * MR + r]`; rows past `rows` and the
/// pad past k are zero.
///
/// # Safety
/// The rows lie inside A; `out` is writable for `MR * pairs(k)` words.
pub unsafe fn pack_a(a: MatRef<bf16>, i0: usize, rows: usize, k: usize, out: *mut u32) {
    let np = pairs(k);
    for r in 0..MR {
        if r >= rows {
            (0..np).for_each(|p| *out.add(p * MR + r) = 0);
            continue;
        }
        let row = a.ptr.offset((i0 + r) as isize * a.rs);
        let at = |p: usize| if p < k { (*row.offset(p as isize * a.cs)).to_bits() as u32 } else { 0 };
        if a.cs == 1 {
            // Contiguous row: each pair is one unaligned 32-bit read.
            for p in 0..k / 2 {
                *out.add(p * MR + r) = (row.add(2 * p) as *const u32).read_unaligned();
            }
            if k % 2 == 1 {
                *out.add(k / 2 * MR + r) = at(k - 1);
            }
        } else {
            for p in 0..np {
                *out.add(p * MR + r) = at(2 * p) | at(2 * p + 1) << 16;
            }
        }
    }
}

/// Packs columns `j0..j0+cols` (at most NR) of B, all of k, as pairs: (k 2p, column c) and
/// (2p + 1, c) at `out[(p * NR + c) * 2]` and the element after; columns past `cols` and the
/// pad past k are zero.
///
/// # Safety
/// The columns lie inside B; `out` is writable for `2 * NR * pairs(k)` elements.
pub unsafe fn pack_b(b: MatRef<bf16>, j0: usize, cols: usize, k: usize, out: *mut u16) {
    let np = pairs(k);
    let at = |p: usize, c: usize| {
        if p < k && c < cols { (*b.ptr.offset(p as isize * b.rs + (j0 + c) as isize * b.cs)).to_bits() } else { 0 }
    };
    for p in 0..np {
        let dst = out.add(p * NR * 2);
        if b.cs == 1 && cols == NR && 2 * p + 1 < k {
            // Row-major B, a full panel: interleave two contiguous row pieces (vectorizes).
            let r0 = b.ptr.offset(2 * p as isize * b.rs + j0 as isize) as *const u16;
            let r1 = r0.offset(b.rs);
            let d = std::slice::from_raw_parts_mut(dst, 2 * NR);
            for (c, pair) in d.chunks_exact_mut(2).enumerate() {
                pair[0] = *r0.add(c);
                pair[1] = *r1.add(c);
            }
            continue;
        }
        for c in 0..NR {
            *dst.add(2 * c) = at(2 * p, c);
            *dst.add(2 * c + 1) = at(2 * p + 1, c);
        }
    }
}

/// The MR x NR f32 tile `A_panel * B_panel` over `np` pairs of k, written to `out` (rows of NR).
///
/// # Safety
/// `enabled()`; `a` holds `MR * np` words and `b` `2 * NR * np` elements packed as above;
/// `out` is writable for `MR * NR` floats.
#[target_feature(enable = "avx512bf16,avx512f")]
pub unsafe fn tile(np: usize, a: *const u32, b: *const u16, out: *mut f32) {
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for p in 0..np {
        let bp = b.add(p * NR * 2);
        let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp as *const __m512i));
        let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp.add(NR) as *const __m512i));
        let ap = a.add(p * MR);
        for (r, row) in acc.iter_mut().enumerate() {
            let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*ap.add(r) as i32));
            row[0] = _mm512_dpbf16_ps(row[0], av, b0);
            row[1] = _mm512_dpbf16_ps(row[1], av, b1);
        }
    }
    for (r, row) in acc.iter().enumerate() {
        _mm512_storeu_ps(out.add(r * NR), row[0]);
        _mm512_storeu_ps(out.add(r * NR + 16), row[1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_matches_f64_sums_of_the_bf16_products() {
        if !std::is_x86_feature_detected!("avx512bf16") {
            eprintln!("no AVX-512 BF16 here: skipped");
            return;
        }
        for (m, n, k) in [(12, 32, 64), (5, 17, 7), (1, 1, 1), (12, 3, 33)] {
            let a: Vec<bf16> = (0..m * k).map(|i| bf16::from_f32(((i * 7 % 13) as f32 - 6.0) / 3.0)).collect();
            let b: Vec<bf16> = (0..k * n).map(|i| bf16::from_f32(((i * 5 % 11) as f32 - 5.0) / 7.0)).collect();
            let np = pairs(k);
            let (mut pa, mut pb, mut out) = (vec![0u32; MR * np], vec![0u16; 2 * NR * np], vec![f32::NAN; MR * NR]);
            // Row-major A through the contiguous path; B column-major through the strided path
            // and row-major (the interleaving path when n is a full panel); same packed bits.
            let bt: Vec<bf16> = (0..k * n).map(|i| b[(i % k) * n + i / k]).collect();
            let mut pb_rows = vec![0u16; 2 * NR * np];
            unsafe {
                pack_a(MatRef { ptr: a.as_ptr(), rs: k as isize, cs: 1 }, 0, m, k, pa.as_mut_ptr());
                pack_b(MatRef { ptr: bt.as_ptr(), rs: 1, cs: k as isize }, 0, n, k, pb.as_mut_ptr());
                pack_b(MatRef { ptr: b.as_ptr(), rs: n as isize, cs: 1 }, 0, n, k, pb_rows.as_mut_ptr());
                tile(np, pa.as_ptr(), pb.as_ptr(), out.as_mut_ptr());
            }
            assert_eq!(pb, pb_rows, "B packed from rows and from columns");
            for i in 0..MR {
                for j in 0..NR {
                    let want: f64 = if i < m && j < n {
                        (0..k).map(|p| a[i * k + p].to_f64() * b[p * n + j].to_f64()).sum()
                    } else {
                        0.0
                    };
                    let got = out[i * NR + j] as f64;
                    assert!((got - want).abs() <= 1e-5 * (1.0 + want.abs()), "{m}x{n}x{k} ({i}, {j}): {got} vs {want}");
                }
            }
        }
    }
}
