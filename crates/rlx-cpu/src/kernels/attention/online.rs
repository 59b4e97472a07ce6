//! The online-softmax path: one work item's query rows against key blocks of `BK`, with a
//! running max and sum per row (any float compute type; decode, f64 and CPUs without the dense
//! path's ISA).

use super::{BK, Mask, Scratch, Work, item_keys, scaled_queries};
use crate::kernels::math::{Compute, Real, exp_shift, max8, sum8};

crate::simd_entry!(pub(super) run_item = item_body<T: Compute>(w: &Work<'_, T>, item: usize, sc: &mut Scratch<T::C>));

/// One (batch, head, query block): online softmax over the visible key blocks.
#[inline(always)]
fn item_body<T: Compute, const FMA: bool>(w: &Work<'_, T>, item: usize, sc: &mut Scratch<T::C>) {
    let Work { g, scale, q, k, tp, v, mask, spans, out, .. } = *w;
    let (d, dv) = (g.d, g.dv);
    let it = g.item(item);
    let (bi, kv, rows) = (it.bi, it.kv, it.rows());
    let rows4 = rows.div_ceil(4) * 4;
    scaled_queries(g, &it, q, scale, &mut sc.q[..rows4 * d]);
    sc.m[..rows].fill(T::C::NEG_INF);
    sc.l[..rows].fill(T::C::ZERO);
    sc.o[..rows4 * dv].fill(T::C::ZERO);
    let (lo, hi_k) = item_keys(g, spans, &it);
    // Blocks start on a multiple of 16 so that a score tile never reads past the padded row.
    let lo = lo / 16 * 16;
    let mut j0 = lo;
    while j0 < hi_k {
        let nk = BK.min(hi_k - j0);
        let nk16 = nk.div_ceil(16) * 16;
        // Scores: p[rows4, nk16] = qs[rows4, d] @ kt[d, j0..j0 + nk16] (`k` is K transposed).
        if g.transposed {
            let kt = &k[kv * d * tp..(kv + 1) * d * tp];
            matmul_tile::<T::C, FMA>(&sc.q, d, &kt[j0..], tp, &mut sc.p, BK, rows4, nk16, d, false);
        } else {
            let kb = &k[g.k_at(kv, j0)..];
            scores::<T::C, FMA>(&sc.q, d, kb, g.ks[2], &mut sc.p, rows4, nk);
        }
        for r in 0..rows {
            let (hi, i) = it.row(r);
            let p = &mut sc.p[r * BK..r * BK + nk];
            // Built-in masks hide the keys outside [vlo, vhi) of this row.
            let (vlo, vhi) = g.key_range(i, i + 1);
            let (vlo, vhi) = (vlo.clamp(j0, j0 + nk) - j0, vhi.clamp(j0, j0 + nk) - j0);
            p[..vlo].fill(T::C::NEG_INF);
            p[vhi.max(vlo)..].fill(T::C::NEG_INF);
            let mrow = bi * g.ms[0] + hi * g.ms[1] + i * g.ms[2] + j0 * g.ms[3];
            match mask {
                Mask::Bool(m) => {
                    for (jj, x) in p.iter_mut().enumerate() {
                        if m[mrow + jj * g.ms[3]] == 0 {
                            *x = T::C::NEG_INF;
                        }
                    }
                }
                Mask::Add(m) if g.ms[3] == 1 => {
                    for (x, &y) in p.iter_mut().zip(&m[mrow..mrow + nk]) {
                        *x = *x + y.load();
                    }
                }
                Mask::Add(m) => {
                    for (jj, x) in p.iter_mut().enumerate() {
                        *x = *x + m[mrow + jj * g.ms[3]].load();
                    }
                }
                Mask::None => {}
            }
            let bm = max8(p);
            let mold = sc.m[r];
            let mnew = T::C::max_nan(mold, bm);
            if mnew == T::C::NEG_INF {
                // Nothing visible yet in this row: probabilities are all zero.
                sc.p[r * BK..r * BK + nk16].fill(T::C::ZERO);
                continue;
            }
            let alpha = (mold - mnew).exp();
            exp_shift(p, mnew);
            let s = sum8(p, |x| x);
            sc.p[r * BK + nk..r * BK + nk16].fill(T::C::ZERO);
            sc.l[r] = sc.l[r] * alpha + s;
            sc.m[r] = mnew;
            if alpha != T::C::ONE {
                sc.o[r * dv..(r + 1) * dv].iter_mut().for_each(|o| *o = *o * alpha);
            }
        }
        for r in rows..rows4 {
            sc.p[r * BK..(r + 1) * BK].fill(T::C::ZERO);
        }
        // o[rows4, dv] += p[rows4, nk] @ v[nk, dv].
        let vb = &v[g.v_at(kv, j0)..];
        matmul_tile::<T::C, FMA>(&sc.p, BK, vb, g.vs[2], &mut sc.o, dv, rows4, dv, nk, true);
        j0 += nk;
    }
    for r in 0..rows {
        let (hi, i) = it.row(r);
        let base = g.o_at(bi, hi, i);
        // SAFETY: each item writes only its own rows of the output.
        let dst = unsafe { out.slice(base, dv) };
        // No visible key at all: NaN, as softmax of an all -inf row.
        let rl = if sc.m[r] == T::C::NEG_INF { T::C::NAN } else { T::C::ONE / sc.l[r] };
        for (o, &x) in dst.iter_mut().zip(&sc.o[r * dv..(r + 1) * dv]) {
            *o = T::store(x * rl);
        }
    }
}

/// `p[r * BK + j] = q_r . k_j` (see `scores_rows`; key rows `ldk` elements apart), with AVX2 +
/// FMA for f32 when `d` is a multiple of 8.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn scores<C: Real, const FMA: bool>(
    q: &[C],
    d: usize,
    k: &[C],
    ldk: usize,
    p: &mut [C],
    rows4: usize,
    nk: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if FMA && std::mem::size_of::<C>() == 4 && d.is_multiple_of(8) {
        assert!(q.len() >= rows4 * d && k.len() >= (nk - 1) * ldk + d && p.len() >= (rows4 - 1) * BK + nk);
        // SAFETY: C is f32 (the only 4-byte Real); FMA is only set where the CPU has AVX2 and
        // FMA; the bounds were checked above.
        unsafe {
            scores_avx2(
                q.as_ptr() as *const f32,
                d,
                k.as_ptr() as *const f32,
                ldk,
                p.as_mut_ptr() as *mut f32,
                rows4,
                nk,
            )
        };
        return;
    }
    scores_rows::<C, FMA>(q, d, k, ldk, p, rows4, nk)
}

/// f32 scores of 4 query rows against 2 keys per step: 8 independent FMA chains, then one
/// horizontal-add tree per 4 sums.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn scores_avx2(q: *const f32, d: usize, k: *const f32, ldk: usize, p: *mut f32, rows4: usize, nk: usize) {
    use std::arch::x86_64::*;
    // SAFETY: the caller checked that rows4 x d of q, nk x d of k and the score rows of p exist.
    unsafe {
        // Sums of the 8 lanes of each of 4 vectors, as one 4-lane vector.
        let reduce = |a: [__m256; 4]| {
            let s = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
            _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1))
        };
        for r0 in (0..rows4).step_by(4) {
            let qr = q.add(r0 * d);
            let mut j = 0;
            while j < nk {
                let ka = k.add(j * ldk);
                let kb = if j + 1 < nk { k.add((j + 1) * ldk) } else { ka };
                let mut a = [_mm256_setzero_ps(); 4];
                let mut b = [_mm256_setzero_ps(); 4];
                for c in (0..d).step_by(8) {
                    let (va, vb) = (_mm256_loadu_ps(ka.add(c)), _mm256_loadu_ps(kb.add(c)));
                    for i in 0..4 {
                        let qv = _mm256_loadu_ps(qr.add(i * d + c));
                        a[i] = _mm256_fmadd_ps(qv, va, a[i]);
                        b[i] = _mm256_fmadd_ps(qv, vb, b[i]);
                    }
                }
                let (sa, sb) = (reduce(a), reduce(b));
                let (mut xa, mut xb) = ([0f32; 4], [0f32; 4]);
                _mm_storeu_ps(xa.as_mut_ptr(), sa);
                _mm_storeu_ps(xb.as_mut_ptr(), sb);
                for i in 0..4 {
                    *p.add((r0 + i) * BK + j) = xa[i];
                    if j + 1 < nk {
                        *p.add((r0 + i) * BK + j + 1) = xb[i];
                    }
                }
                j += 2;
            }
        }
    }
}

/// `p[r * BK + j] = q_r . k_j` for rows `0..rows4` (a multiple of 4) and the `nk` rows of
/// `k` (`ldk` apart): each key row is loaded once per 4 query rows, two keys per step, 8 partial
/// sums per product (8 independent accumulators in flight).
#[inline(always)]
fn scores_rows<C: Real, const FMA: bool>(q: &[C], d: usize, k: &[C], ldk: usize, p: &mut [C], rows4: usize, nk: usize) {
    let d8 = d / 8 * 8;
    let lanes = |x: &[C], c: usize| -> [C; 8] { x[c..c + 8].try_into().expect("8 lanes") };
    for r0 in (0..rows4).step_by(4) {
        let qs: [&[C]; 4] = std::array::from_fn(|i| &q[(r0 + i) * d..(r0 + i + 1) * d]);
        for j in (0..nk).step_by(2) {
            let j1 = (j + 1).min(nk - 1);
            let ks = [&k[j * ldk..j * ldk + d], &k[j1 * ldk..j1 * ldk + d]];
            let mut acc = [[[C::ZERO; 8]; 2]; 4];
            for c in (0..d8).step_by(8) {
                let kv = [lanes(ks[0], c), lanes(ks[1], c)];
                for (a, qr) in acc.iter_mut().zip(&qs) {
                    let qv = lanes(qr, c);
                    for (au, kr) in a.iter_mut().zip(&kv) {
                        for l in 0..8 {
                            au[l] = C::madd::<FMA>(qv[l], kr[l], au[l]);
                        }
                    }
                }
            }
            for (i, a) in acc.iter().enumerate() {
                for (u, (x, kr)) in a.iter().zip(ks).enumerate().take(nk - j) {
                    let mut s = ((x[0] + x[4]) + (x[1] + x[5])) + ((x[2] + x[6]) + (x[3] + x[7]));
                    for c in d8..d {
                        s = C::madd::<FMA>(qs[i][c], kr[c], s);
                    }
                    p[(r0 + i) * BK + j + u] = s;
                }
            }
        }
    }
}

/// `c[m, n] (+)= a[m, k] @ b[k, n]` (row strides lda, ldb, ldc) with 4x16 register tiles; `m`
/// must be a multiple of 4. Columns past the last full 16 take a scalar path.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn matmul_tile<C: Real, const FMA: bool>(
    a: &[C],
    lda: usize,
    b: &[C],
    ldb: usize,
    c: &mut [C],
    ldc: usize,
    m: usize,
    n: usize,
    k: usize,
    acc: bool,
) {
    let n16 = n / 16 * 16;
    for i in (0..m).step_by(4) {
        for j in (0..n16).step_by(16) {
            let mut t = [[C::ZERO; 16]; 4];
            if acc {
                for (r, tr) in t.iter_mut().enumerate() {
                    tr.copy_from_slice(&c[(i + r) * ldc + j..(i + r) * ldc + j + 16]);
                }
            }
            for p in 0..k {
                let bv: &[C; 16] = b[p * ldb + j..p * ldb + j + 16].try_into().expect("16 columns");
                for (r, tr) in t.iter_mut().enumerate() {
                    let av = a[(i + r) * lda + p];
                    for (x, &y) in tr.iter_mut().zip(bv) {
                        *x = C::madd::<FMA>(av, y, *x);
                    }
                }
            }
            for (r, tr) in t.iter().enumerate() {
                c[(i + r) * ldc + j..(i + r) * ldc + j + 16].copy_from_slice(tr);
            }
        }
        for r in i..i + 4 {
            for j in n16..n {
                let mut x = if acc { c[r * ldc + j] } else { C::ZERO };
                for p in 0..k {
                    x = C::madd::<FMA>(a[r * lda + p], b[p * ldb + j], x);
                }
                c[r * ldc + j] = x;
            }
        }
    }
}
