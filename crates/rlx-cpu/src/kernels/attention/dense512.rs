//! AVX-512 forms of the dense attention path's two products and its row softmax: 12 x 32
//! register tiles (24 zmm accumulators, 12 broadcasts per 24 FMAs; 8 and 4 rows at the end)
//! instead of AVX2's 4 x 16, and 16-lane exps. Same contracts as `dense.rs`'s AVX2 `gemm` and
//! `softmax_span`.

// Intrinsics code: every statement is unsafe; the functions document the contract.
#![allow(unsafe_op_in_unsafe_fn)]

use super::dense::Product;
use crate::kernels::vec32::simd16::exp16;
use std::arch::x86_64::*;

/// One `R` x `16 V` tile of `p` at its first row and column: `c (+)= a[R, k] @ b[k, 16 V]`; the
/// 12 x 32 tile all in asm (`gemm::f32_strided_full`).
///
/// # Safety
/// The CPU has AVX-512F; `p`'s pointers cover R rows and 16 V columns from its first.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
unsafe fn tile<const R: usize, const V: usize>(p: Product) {
    let Product { a, lda, b, ldb, c, ldc, k, acc, .. } = p;
    if R == 12 && V == 2 {
        // The full tile in one asm block (accumulators never leave the registers).
        return crate::gemm::f32_strided_full(k, a, lda, b, ldb, c, ldc, acc);
    }
    let mut t = [[_mm512_setzero_ps(); V]; R];
    if acc {
        for (r, row) in t.iter_mut().enumerate() {
            for (h, v) in row.iter_mut().enumerate() {
                *v = _mm512_loadu_ps(c.add(r * ldc + 16 * h));
            }
        }
    }
    let (mut ap, mut bp) = (a, b);
    for _ in 0..k {
        let bv: [__m512; V] = std::array::from_fn(|h| _mm512_loadu_ps(bp.add(16 * h)));
        for (r, row) in t.iter_mut().enumerate() {
            let av = _mm512_set1_ps(*ap.add(r * lda));
            for (h, v) in row.iter_mut().enumerate() {
                *v = _mm512_fmadd_ps(av, bv[h], *v);
            }
        }
        ap = ap.add(1);
        bp = bp.add(ldb);
    }
    for (r, row) in t.iter().enumerate() {
        for (h, &v) in row.iter().enumerate() {
            _mm512_storeu_ps(c.add(r * ldc + 16 * h), v);
        }
    }
}

/// The tiles of rows `0..R` of `p` over columns `0..n16` (a multiple of 16): 32 wide, then one 16.
#[inline(always)]
unsafe fn row_block<const R: usize>(p: Product, n16: usize) {
    let mut j = 0;
    while j + 32 <= n16 {
        tile::<R, 2>(p.columns_from(j));
        j += 32;
    }
    if j < n16 {
        tile::<R, 1>(p.columns_from(j));
    }
}

/// The product `p` as `dense::gemm`: 8-row blocks, a 4-row one at the end; columns past the last
/// multiple of 16 go to the AVX2 routine.
///
/// # Safety
/// The CPU has AVX-512F, AVX2 and FMA; `p`'s pointers cover its matrices.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn gemm(p: Product) {
    let n16 = p.n / 16 * 16;
    let mut i = 0;
    while i < p.m {
        // Rows from i: A and C shifted down.
        let rows = Product { a: p.a.add(i * p.lda), c: p.c.add(i * p.ldc), ..p };
        if p.m - i >= 12 {
            row_block::<12>(rows, n16);
            i += 12;
        } else if p.m - i >= 8 {
            row_block::<8>(rows, n16);
            i += 8;
        } else {
            row_block::<4>(rows, n16);
            i += 4;
        }
    }
    if n16 < p.n {
        super::dense::gemm(p.columns_from(n16));
    }
}

/// `dense::softmax_span` with 16 lanes: numerators of `p[a..b]` in place, zero elsewhere in `p`;
/// returns (max, sum). Hidden keys (`hide` byte 0) are -inf in the max and 0 after the exp.
///
/// # Safety
/// The CPU has AVX-512F; `a <= b <= p.len()`; `hide` holds `b - a` bytes when given.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn softmax_span(p: &mut [f32], a: usize, b: usize, hide: Option<&[u8]>) -> (f32, f32) {
    p[..a].fill(0.0);
    p[b..].fill(0.0);
    let s = &mut p[a..b];
    let len = s.len();
    let n16 = len / 16 * 16;
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    // Lanes `j..j + 16` (those of `lm`; -inf elsewhere) with hidden keys set to -inf.
    let lanes = |s: &[f32], j: usize, lm: __mmask16| -> __m512 {
        let x = _mm512_mask_loadu_ps(ninf, lm, s.as_ptr().add(j));
        match hide {
            Some(m) => {
                let bytes = if j + 16 <= len {
                    _mm_loadu_si128(m.as_ptr().add(j) as *const __m128i)
                } else {
                    // The tail: past the span reads as visible (those lanes are -inf already).
                    let mut part = [1u8; 16];
                    part[..len - j].copy_from_slice(&m[j..len]);
                    _mm_loadu_si128(part.as_ptr() as *const __m128i)
                };
                let wide = _mm512_cvtepu8_epi32(bytes);
                let hidden = _mm512_cmpeq_epi32_mask(wide, _mm512_setzero_si512());
                _mm512_mask_blend_ps(hidden, x, ninf)
            }
            None => x,
        }
    };
    let tail = if len > n16 { ((1u32 << (len - n16)) - 1) as __mmask16 } else { 0 };
    // Max: a NaN anywhere makes the row NaN later (its exp is NaN), whatever the max says.
    let mut vm = ninf;
    for j in (0..n16).step_by(16) {
        vm = _mm512_max_ps(vm, lanes(s, j, 0xffff));
    }
    if tail != 0 {
        vm = _mm512_max_ps(vm, lanes(s, n16, tail));
    }
    let mx = _mm512_reduce_max_ps(vm);
    if mx == f32::NEG_INFINITY {
        s.fill(0.0);
        return (mx, 0.0);
    }
    let vmx = _mm512_set1_ps(mx);
    let mut acc = _mm512_setzero_ps();
    for j in (0..n16).step_by(16) {
        let e = exp16(_mm512_sub_ps(lanes(s, j, 0xffff), vmx));
        _mm512_storeu_ps(s.as_mut_ptr().add(j), e);
        acc = _mm512_add_ps(acc, e);
    }
    if tail != 0 {
        // Lanes past the span are -inf: exp gives 0 there, and they are not stored.
        let e = exp16(_mm512_sub_ps(lanes(s, n16, tail), vmx));
        _mm512_mask_storeu_ps(s.as_mut_ptr().add(n16), tail, e);
        acc = _mm512_add_ps(acc, e);
    }
    (mx, _mm512_reduce_add_ps(acc))
}

/// Writes 16 key rows transposed: `dst[c * tp + j] = src[j * rs + c]` for `j < 16`, `c < d`, one
/// 16-lane gather per output row (the scalar copy spent about 3 cycles per element).
///
/// # Safety
/// The CPU has AVX-512F; `src` covers 16 rows of `d` values `rs` elements apart, `15 * rs` fits
/// in an i32; `dst` covers `d` rows of 16 values `tp` apart.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn transpose16(src: *const f32, rs: usize, d: usize, dst: *mut f32, tp: usize) {
    let rows = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let offsets = _mm512_mullo_epi32(rows, _mm512_set1_epi32(rs as i32));
    for c in 0..d {
        let column = _mm512_i32gather_ps::<4>(offsets, src.add(c));
        _mm512_storeu_ps(dst.add(c * tp), column);
    }
}
