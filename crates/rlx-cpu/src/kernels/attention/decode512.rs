//! Attention for a few query rows per kv head (decode, s < 4) in f32 with AVX-512: K and V are
//! read in place, once per work item, 64 keys at a time. Scores are dot products of 16 key rows
//! with each query row, the 16 sums turned into one 16-lane vector by a transpose-and-add tree;
//! the online softmax runs on 16 lanes; `P @ V` keeps up to 4 rows x 64 columns of the output in
//! registers. The online path (AVX2 dot products with horizontal adds, 4-row tiles that decode
//! fills 1-2 rows of, a portable `P @ V`) was slower on a long cache; this path reads K and V
//! at about what DRAM gives two threads (session 18 in docs/benchmarks-history.md).

// Intrinsics code: every statement is unsafe; the functions document the contract.
#![allow(unsafe_op_in_unsafe_fn)]

use super::dense::{c_of, f32s, f32s_mut};
use super::{BK, Geo, Mask, RawKv, Scratch, Work, item_keys, scaled_queries};
use crate::kernels::math::{Compute, Real};
use crate::kernels::vec32::simd16::exp16;
use std::arch::x86_64::*;

/// Whether work items of `g` run here: K in place (few query rows), f32 compute, head dims that
/// are whole zmm vectors, AVX-512F, and not switched off (`RLX_ATTN_DECODE512=0`).
pub(super) fn applies(g: &Geo, f32_compute: bool) -> bool {
    rlx_driver::config().cpu.attention_decode512
        && !g.transposed
        && f32_compute
        && g.d > 0
        && g.dv > 0
        && g.d.is_multiple_of(16)
        && g.dv.is_multiple_of(16)
        && crate::kernels::vec32::simd16::avx512()
}

/// One work item (see `applies`), K and V read as stored (f32, f16 or bf16).
pub(super) fn item<T: Compute>(w: &Work<'_, T>, item: usize, sc: &mut Scratch<T::C>) {
    // SAFETY: `applies` was true, so the CPU has AVX-512F.
    unsafe {
        match w.raw {
            RawKv::F32(k, v) => item_body::<T, f32>(w, k, v, item, sc),
            RawKv::F16(k, v) => item_body::<T, half::f16>(w, k, v, item, sc),
            RawKv::Bf16(k, v) => item_body::<T, half::bf16>(w, k, v, item, sc),
            // `applies` needs f32 compute, whose storage types are the three above.
            RawKv::Other => unreachable!("decode512 over keys stored as f64"),
        }
    }
}

/// A storage type of K and V: 16 elements widened to f32 lanes.
trait Lanes16: Copy {
    /// The 16 elements at `p` as f32.
    ///
    /// # Safety
    /// `p` points at 16 readable elements; the CPU has AVX-512F.
    unsafe fn load16(p: *const Self) -> __m512;
}

impl Lanes16 for f32 {
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> __m512 {
        _mm512_loadu_ps(p)
    }
}

impl Lanes16 for half::f16 {
    #[inline(always)]
    unsafe fn load16(p: *const half::f16) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
    }
}

impl Lanes16 for half::bf16 {
    #[inline(always)]
    unsafe fn load16(p: *const half::bf16) -> __m512 {
        // bf16 is the high half of an f32: widen to 32 bits and shift into place.
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p as *const __m256i))))
    }
}

/// The item's rows against its visible keys, 64 at a time: scores, the mask, the online softmax,
/// then `P @ V` into the output accumulators; finally each row divided by its sum and stored.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn item_body<T: Compute, L: Lanes16>(w: &Work<'_, T>, k: &[L], v: &[L], item: usize, sc: &mut Scratch<T::C>) {
    let Work { g, scale, q, mask, spans, out, .. } = *w;
    let (d, dv) = (g.d, g.dv);
    let it = g.item(item);
    let (bi, kv, rows) = (it.bi, it.kv, it.rows());
    let rows4 = rows.div_ceil(4) * 4;
    scaled_queries(g, &it, q, scale, &mut sc.q[..rows4 * d]);
    let (qs, p, o) = (f32s(&sc.q), f32s_mut(&mut sc.p), f32s_mut(&mut sc.o));
    let (m, l) = (f32s_mut(&mut sc.m), f32s_mut(&mut sc.l));
    assert!(p.len() >= rows * BK && qs.len() >= rows * d && o.len() >= rows * dv && m.len() >= rows);
    m[..rows].fill(f32::NEG_INFINITY);
    l[..rows].fill(0.0);
    o[..rows * dv].fill(0.0);
    let (lo, hi_k) = item_keys(g, spans, &it);
    let (ldk, ldv) = (g.ks[2], g.vs[2]);
    let mut j0 = lo;
    while j0 < hi_k {
        let nk = BK.min(hi_k - j0);
        let (kb, vb) = (g.k_at(kv, j0), g.v_at(kv, j0));
        assert!(k.len() >= kb + (nk - 1) * ldk + d && v.len() >= vb + (nk - 1) * ldv + dv);
        // The next block's keys and values into L2 while this one computes: faster decode
        // attention over long caches (session 19 in docs/benchmarks-history.md).
        if j0 + nk < hi_k {
            let nn = BK.min(hi_k - j0 - nk);
            let (kn, vn, esz) = (g.k_at(kv, j0 + nk), g.v_at(kv, j0 + nk), std::mem::size_of::<L>());
            for jj in 0..nn {
                let (kr, vr) = (k.as_ptr().add(kn + jj * ldk) as *const i8, v.as_ptr().add(vn + jj * ldv) as *const i8);
                for off in (0..d * esz).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T1>(kr.add(off));
                }
                for off in (0..dv * esz).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T1>(vr.add(off));
                }
            }
        }
        scores(qs, d, rows, k.as_ptr().add(kb), ldk, nk, p);
        for r in 0..rows {
            let (hi, i) = it.row(r);
            let row = &mut p[r * BK..r * BK + nk];
            // Built-in masks hide the keys outside [vlo, vhi) of this row; a custom mask row that
            // only hides keys outside its span narrows the range and is not read.
            let ((vlo, vhi), plain) = spans.row_keys(g, bi, hi, i);
            let (a, b) = (vlo.clamp(j0, j0 + nk) - j0, vhi.clamp(j0, j0 + nk) - j0);
            row[..a].fill(f32::NEG_INFINITY);
            row[b.max(a)..].fill(f32::NEG_INFINITY);
            let mrow = bi * g.ms[0] + hi * g.ms[1] + i * g.ms[2] + j0 * g.ms[3];
            match mask {
                _ if plain => {}
                Mask::Bool(mk) => {
                    for (jj, x) in row.iter_mut().enumerate() {
                        if mk[mrow + jj * g.ms[3]] == 0 {
                            *x = f32::NEG_INFINITY;
                        }
                    }
                }
                Mask::Add(mk) => {
                    for (jj, x) in row.iter_mut().enumerate() {
                        *x += mk[mrow + jj * g.ms[3]].load().to_f64() as f32;
                    }
                }
                Mask::None => {}
            }
            online_softmax(row, &mut m[r], &mut l[r], &mut o[r * dv..(r + 1) * dv]);
        }
        pv(p, rows, v.as_ptr().add(vb), ldv, nk, o, dv);
        j0 += nk;
    }
    for r in 0..rows {
        let (hi, i) = it.row(r);
        let base = g.o_at(bi, hi, i);
        // SAFETY: each item writes only its own rows of the output.
        let dst = out.slice(base, dv);
        // No visible key at all: NaN, as softmax of an all -inf row.
        let rl = if m[r] == f32::NEG_INFINITY { f32::NAN } else { 1.0 / l[r] };
        let row = &mut o[r * dv..(r + 1) * dv];
        row.iter_mut().for_each(|x| *x *= rl);
        crate::kernels::half_vec::store::<T>(c_of(row), dst);
    }
}

/// Sums of each of 16 vectors, as one vector (lane `j` the sum of `a[j]`'s lanes): pairs of
/// vectors interleaved and added, then pairs of those, then their 128-bit lanes.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn sum16(a: &[__m512; 16]) -> __m512 {
    let x: [__m512; 8] = std::array::from_fn(|i| {
        _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]))
    });
    let y: [__m512; 4] = std::array::from_fn(|i| {
        _mm512_add_ps(
            _mm512_shuffle_ps::<0x44>(x[2 * i], x[2 * i + 1]),
            _mm512_shuffle_ps::<0xEE>(x[2 * i], x[2 * i + 1]),
        )
    });
    let z: [__m512; 2] = std::array::from_fn(|i| {
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x44>(y[2 * i], y[2 * i + 1]),
            _mm512_shuffle_f32x4::<0xEE>(y[2 * i], y[2 * i + 1]),
        )
    });
    _mm512_add_ps(_mm512_shuffle_f32x4::<0x88>(z[0], z[1]), _mm512_shuffle_f32x4::<0xDD>(z[0], z[1]))
}

/// `p[r * BK + j] = q_r . k_j` for rows `r < rows` (`q` rows `d` apart) and keys `j < nk` (rows of
/// `k` `ldk` apart): 16 keys at a time, read from memory once and from L1 for every further row.
#[target_feature(enable = "avx512f")]
unsafe fn scores<L: Lanes16>(q: &[f32], d: usize, rows: usize, k: *const L, ldk: usize, nk: usize, p: &mut [f32]) {
    for g0 in (0..nk).step_by(16) {
        let n = 16.min(nk - g0);
        let kg = k.add(g0 * ldk);
        for r in 0..rows {
            let qr = q.as_ptr().add(r * d);
            let mut acc = [_mm512_setzero_ps(); 16];
            if n == 16 {
                // A whole group: a fixed trip count keeps the 16 accumulators in registers.
                for c in (0..d).step_by(16) {
                    let qv = _mm512_loadu_ps(qr.add(c));
                    for (jj, a) in acc.iter_mut().enumerate() {
                        *a = _mm512_fmadd_ps(qv, L::load16(kg.add(jj * ldk + c)), *a);
                    }
                }
            } else {
                for c in (0..d).step_by(16) {
                    let qv = _mm512_loadu_ps(qr.add(c));
                    for (jj, a) in acc.iter_mut().enumerate().take(n) {
                        *a = _mm512_fmadd_ps(qv, L::load16(kg.add(jj * ldk + c)), *a);
                    }
                }
            }
            let lanes = ((1u32 << n) - 1) as __mmask16;
            _mm512_mask_storeu_ps(p.as_mut_ptr().add(r * BK + g0), lanes, sum16(&acc));
        }
    }
}

/// Folds one block's scores `row` (masked keys at -inf) into a row's running max `m`, sum `l` and
/// output `o`: `row` becomes `exp(x - new max)`, the older part is scaled by `exp(m - new max)`.
/// A row with nothing visible so far keeps zeros; a NaN score makes the row NaN.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn online_softmax(row: &mut [f32], m: &mut f32, l: &mut f32, o: &mut [f32]) {
    let n = row.len();
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mask = |j: usize| (((1u64 << (n - j).min(16)) - 1) as u16) as __mmask16;
    let mut vm = ninf;
    // A NaN score drops out of the max (max_ps returns its second operand, the running max, when
    // either is NaN), but its exp is NaN, so the row's sum and then the whole row become NaN.
    for j in (0..n).step_by(16) {
        vm = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, mask(j), row.as_ptr().add(j)), vm);
    }
    let mut lanes = [0f32; 16];
    _mm512_storeu_ps(lanes.as_mut_ptr(), vm);
    let bm = lanes.iter().fold(f32::NEG_INFINITY, |a, &x| f32::max_nan(a, x));
    let mnew = f32::max_nan(*m, bm);
    if mnew == f32::NEG_INFINITY {
        // Nothing visible yet in this row: probabilities are all zero.
        row.fill(0.0);
        return;
    }
    let alpha = (*m - mnew).exp();
    let (vmx, mut acc) = (_mm512_set1_ps(mnew), _mm512_setzero_ps());
    for j in (0..n).step_by(16) {
        let x = _mm512_mask_loadu_ps(ninf, mask(j), row.as_ptr().add(j));
        let e = exp16(_mm512_sub_ps(x, vmx));
        _mm512_mask_storeu_ps(row.as_mut_ptr().add(j), mask(j), e);
        acc = _mm512_add_ps(acc, e);
    }
    *l = *l * alpha + _mm512_reduce_add_ps(acc);
    *m = mnew;
    if alpha != 1.0 {
        o.iter_mut().for_each(|x| *x *= alpha);
    }
}

/// `o[r, :] += sum_j p[r * BK + j] * v_j` for rows `r < rows` (`o` rows `dv` apart) and keys
/// `j < nk` (rows of `v` `ldv` apart): register tiles of up to 4 rows x 64 columns.
#[target_feature(enable = "avx512f")]
unsafe fn pv<L: Lanes16>(p: &[f32], rows: usize, v: *const L, ldv: usize, nk: usize, o: &mut [f32], dv: usize) {
    for r0 in (0..rows).step_by(4) {
        for c0 in (0..dv).step_by(64) {
            let args = (p.as_ptr().add(r0 * BK), v.add(c0), ldv, o.as_mut_ptr().add(r0 * dv + c0), dv, nk);
            match ((rows - r0).min(4), ((dv - c0) / 16).min(4)) {
                (1, 1) => pv_tile::<L, 1, 1>(args),
                (1, 2) => pv_tile::<L, 1, 2>(args),
                (1, 3) => pv_tile::<L, 1, 3>(args),
                (1, _) => pv_tile::<L, 1, 4>(args),
                (2, 1) => pv_tile::<L, 2, 1>(args),
                (2, 2) => pv_tile::<L, 2, 2>(args),
                (2, 3) => pv_tile::<L, 2, 3>(args),
                (2, _) => pv_tile::<L, 2, 4>(args),
                (3, 1) => pv_tile::<L, 3, 1>(args),
                (3, 2) => pv_tile::<L, 3, 2>(args),
                (3, 3) => pv_tile::<L, 3, 3>(args),
                (3, _) => pv_tile::<L, 3, 4>(args),
                (_, 1) => pv_tile::<L, 4, 1>(args),
                (_, 2) => pv_tile::<L, 4, 2>(args),
                (_, 3) => pv_tile::<L, 4, 3>(args),
                (_, _) => pv_tile::<L, 4, 4>(args),
            }
        }
    }
}

/// One `R` rows x `16 NV` columns tile of `pv`: `(p, v, ldv, o, ldo, nk)`, P's rows `BK` apart.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn pv_tile<L: Lanes16, const R: usize, const NV: usize>(
    (p, v, ldv, o, ldo, nk): (*const f32, *const L, usize, *mut f32, usize, usize),
) {
    let mut acc: [[__m512; NV]; R] =
        std::array::from_fn(|r| std::array::from_fn(|h| _mm512_loadu_ps(o.add(r * ldo + 16 * h))));
    for j in 0..nk {
        let vr = v.add(j * ldv);
        let vv: [__m512; NV] = std::array::from_fn(|h| L::load16(vr.add(16 * h)));
        for (r, row) in acc.iter_mut().enumerate() {
            let pb = _mm512_set1_ps(*p.add(r * BK + j));
            for (a, &x) in row.iter_mut().zip(&vv) {
                *a = _mm512_fmadd_ps(pb, x, *a);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (h, &a) in row.iter().enumerate() {
            _mm512_storeu_ps(o.add(r * ldo + 16 * h), a);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sum16_adds_each_vector_into_its_lane() {
        if !crate::kernels::vec32::simd16::avx512() {
            return;
        }
        use std::arch::x86_64::*;
        let vals: Vec<f32> = (0..256).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
        // SAFETY: AVX-512F is present (checked above); each load reads 16 of the 256 values.
        let got = unsafe {
            let a: [__m512; 16] = std::array::from_fn(|j| _mm512_loadu_ps(vals.as_ptr().add(16 * j)));
            let mut out = [0f32; 16];
            _mm512_storeu_ps(out.as_mut_ptr(), super::sum16(&a));
            out
        };
        for (j, g) in got.iter().enumerate() {
            assert_eq!(*g, vals[16 * j..16 * j + 16].iter().sum::<f32>(), "lane {j}");
        }
    }
}
