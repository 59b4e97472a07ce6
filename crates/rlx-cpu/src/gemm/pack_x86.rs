//! AVX2 packing of a row-major f32 A panel: 8 x 8 and 4 x 4 register transposes turn row reads
//! into the panel's k-major order, instead of one scattered store per element.

// Intrinsics code: every statement is unsafe; the functions document the contract.
#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

/// Packs `mr` full rows of a row-major f32 A (row stride `rs`, from `base`) over `kc` columns:
/// element (r, p) to `out[p * mr + r]`.
///
/// # Safety
/// The rows hold `kc` elements each; `out` holds `mr * kc`; the CPU has AVX2.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn pack_a_rows_f32(base: *const f32, rs: isize, mr: usize, kc: usize, out: *mut f32) {
    let row = |r: usize| base.offset(r as isize * rs);
    let full = kc / 8 * 8;
    let mut r0 = 0;
    while r0 + 8 <= mr {
        let rows: [*const f32; 8] = std::array::from_fn(|i| row(r0 + i));
        for p in (0..full).step_by(8) {
            let v: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(rows[i].add(p)));
            for (q, col) in transpose8(v).into_iter().enumerate() {
                _mm256_storeu_ps(out.add((p + q) * mr + r0), col);
            }
        }
        r0 += 8;
    }
    while r0 + 4 <= mr {
        let rows: [*const f32; 4] = std::array::from_fn(|i| row(r0 + i));
        for p in (0..full).step_by(4) {
            let v: [__m128; 4] = std::array::from_fn(|i| _mm_loadu_ps(rows[i].add(p)));
            for (q, col) in transpose4(v).into_iter().enumerate() {
                _mm_storeu_ps(out.add((p + q) * mr + r0), col);
            }
        }
        r0 += 4;
    }
    // Leftover rows, and the columns past the last multiple of 8.
    for r in 0..mr {
        let start = if r < r0 { full } else { 0 };
        let src = row(r);
        for p in start..kc {
            *out.add(p * mr + r) = *src.add(p);
        }
    }
}

/// Transposes 8 rows of 8 into 8 columns of 8.
#[inline(always)]
unsafe fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

/// Transposes 4 rows of 4 into 4 columns of 4.
#[inline(always)]
unsafe fn transpose4(r: [__m128; 4]) -> [__m128; 4] {
    let t0 = _mm_unpacklo_ps(r[0], r[1]);
    let t1 = _mm_unpacklo_ps(r[2], r[3]);
    let t2 = _mm_unpackhi_ps(r[0], r[1]);
    let t3 = _mm_unpackhi_ps(r[2], r[3]);
    [_mm_movelh_ps(t0, t1), _mm_movehl_ps(t1, t0), _mm_movelh_ps(t2, t3), _mm_movehl_ps(t3, t2)]
}
