//! Native attention: tiled, flash-style (online softmax over key blocks, so memory is O(block)
//! whatever the sequence length), with causal, sliding-window and custom (bool or additive)
//! masks and grouped-query heads. Key blocks a built-in mask hides entirely are skipped.
//!
//! Work items are (batch, head, query block); the pool hands them out dynamically, and each
//! running item borrows one of `num_threads()` preallocated scratch slots.

use super::math::{Compute, Real, SharedMut, avx2_fma, exp_shift, max8, sum8};
use super::{Kernel, KernelBuilder, KernelCtx, unsupported};
use crate::exec::Bufs;
use crate::threads::{num_threads, parallel_for};
use crate::with_float;
use rlx_driver::KernelTable;
use rlx_ir::ops::MaskKind;
use rlx_ir::{DType, Op, OpKind, Result};
use std::sync::Mutex;

/// Float dtypes, plus bool for a custom mask.
const DTYPES: &[DType] = &[DType::F32, DType::F64, DType::F16, DType::BF16, DType::Bool];

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::Attention, DTYPES, attention);
}

/// Query rows per work item (a multiple of the 4-row register tile).
const BQ: usize = 32;
/// Keys per block (a multiple of the 16-column register tile).
const BK: usize = 64;

/// Static geometry of one attention node.
#[derive(Clone, Copy)]
struct Geo {
    b: usize,
    h: usize,
    kvh: usize,
    s: usize,
    t: usize,
    d: usize,
    dv: usize,
    mask: MaskKind,
    /// Element strides of the custom mask over (batch, head, query, key); 0 where broadcast.
    ms: [usize; 4],
    /// The custom mask is bool (else additive, of the query dtype).
    bool_mask: bool,
    /// K is transposed once per run so that scores are register-tiled products; with few query
    /// rows (decode) scores are dot products with K's rows instead.
    transposed: bool,
}

impl Geo {
    /// Keys `lo..hi` that rows `i0..i1` may see under the built-in mask.
    fn key_range(&self, i0: usize, i1: usize) -> (usize, usize) {
        let off = self.t as i64 - self.s as i64;
        let t = self.t as i64;
        let (lo, hi) = match self.mask {
            MaskKind::Causal => (0, i1 as i64 - 1 + off + 1),
            MaskKind::SlidingWindow(n) => (i0 as i64 + off - n as i64 + 1, i1 as i64 - 1 + off + 1),
            _ => (0, t),
        };
        (lo.clamp(0, t) as usize, hi.clamp(0, t) as usize)
    }
}

fn attention(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Attention(op) = ctx.op else { return Err(unsupported(ctx)) };
    let (qd, kd, vd) = (ctx.in_dims(0), ctx.in_dims(1), ctx.in_dims(2));
    if qd.len() != 4 || kd.len() != 4 || vd.len() != 4 || kd[1] == 0 || qd[1] % kd[1] != 0 {
        return Err(unsupported(ctx));
    }
    let mut ms = [0; 4];
    let mut bool_mask = false;
    if let Some(m) = ctx.ins.get(3) {
        let md = m.fixed_dims().ok_or_else(|| unsupported(ctx))?;
        let full = [qd[0], qd[1], qd[2], kd[2]];
        let mut stride = 1;
        for (i, &dim) in md.iter().enumerate().rev() {
            let axis = 4 - md.len() + i;
            ms[axis] = if dim == 1 && full[axis] != 1 { 0 } else { stride };
            stride *= dim;
        }
        bool_mask = m.dtype == DType::Bool;
    }
    let g = Geo {
        b: qd[0],
        h: qd[1],
        kvh: kd[1],
        s: qd[2],
        t: kd[2],
        d: qd[3],
        dv: vd[3],
        mask: op.mask,
        ms,
        bool_mask,
        transposed: qd[2] >= 4,
    };
    let scale = op.scale;
    with_float!(ctx.out.dtype, T => Ok(build::<T>(g, scale)), else Err(unsupported(ctx)))
}

/// Per-thread buffers of one work item.
struct Scratch<C> {
    /// The query block, scaled, `[BQ, d]`.
    q: Vec<C>,
    /// Scores, then probabilities, `[BQ, BK]`.
    p: Vec<C>,
    /// Output accumulators `[BQ, dv]`, running max and running sum per row.
    o: Vec<C>,
    m: Vec<C>,
    l: Vec<C>,
}

/// A whole input in the compute type: borrowed when the storage is the compute type, else
/// converted into `buf` (sized at build time).
fn view<'a, T: Compute>(x: &'a [T], buf: &'a mut [T::C]) -> &'a [T::C] {
    if std::mem::size_of::<T>() == std::mem::size_of::<T::C>() {
        // SAFETY: same size means T is T::C here (f32 -> f32 or f64 -> f64).
        return unsafe { std::slice::from_raw_parts(x.as_ptr() as *const T::C, x.len()) };
    }
    for (o, &v) in buf.iter_mut().zip(x) {
        *o = v.load();
    }
    &buf[..x.len()]
}

fn build<T: Compute>(g: Geo, scale: f64) -> Kernel {
    let slots: Vec<Mutex<Scratch<T::C>>> = (0..num_threads())
        .map(|_| {
            Mutex::new(Scratch {
                q: vec![T::C::ZERO; BQ * g.d],
                p: vec![T::C::ZERO; BQ * BK],
                o: vec![T::C::ZERO; BQ * g.dv],
                m: vec![T::C::ZERO; BQ],
                l: vec![T::C::ZERO; BQ],
            })
        })
        .collect();
    let convert = std::mem::size_of::<T>() != std::mem::size_of::<T::C>();
    let size = |n: usize| if convert { n } else { 0 };
    let (nq, nk, nv) = (g.b * g.h * g.s * g.d, g.b * g.kvh * g.t * g.d, g.b * g.kvh * g.t * g.dv);
    let mut conv = (vec![T::C::ZERO; size(nq)], vec![T::C::ZERO; size(nk)], vec![T::C::ZERO; size(nv)]);
    // K transposed once per run to [batch * kv_heads, d, tp] (tp: t padded to 16 with zeros), so
    // that score tiles read 16 consecutive keys.
    let tp = g.t.div_ceil(16) * 16;
    let mut kt = vec![T::C::ZERO; if g.transposed { g.b * g.kvh * g.d * tp } else { 0 }];
    let qblocks = g.s.div_ceil(BQ);
    let items = g.b * g.h * qblocks;
    let simd = avx2_fma();
    let scale = T::C::from_f64(scale);
    Box::new(move |bufs: &Bufs<'_>| {
        let q = view(bufs.input::<T>(0), &mut conv.0);
        let k = view(bufs.input::<T>(1), &mut conv.1);
        let v = view(bufs.input::<T>(2), &mut conv.2);
        let mask = match (g.mask, g.bool_mask) {
            (MaskKind::Custom, true) => Mask::Bool(bufs.input::<u8>(3)),
            (MaskKind::Custom, false) => Mask::Add(bufs.input::<T>(3)),
            _ => Mask::None,
        };
        let ktp = SharedMut(kt.as_mut_ptr());
        let heads = g.b * g.kvh;
        let tasks = if !g.transposed {
            0
        } else if heads * g.t * g.d < 1 << 14 {
            1
        } else {
            heads
        };
        parallel_for(tasks, &|task| {
            let range = if heads * g.t * g.d < 1 << 14 { 0..heads } else { task..task + 1 };
            for hk in range {
                // SAFETY: each task writes only its own head's block.
                let dst = unsafe { ktp.slice(hk * g.d * tp, g.d * tp) };
                let src = &k[hk * g.t * g.d..(hk + 1) * g.t * g.d];
                for (j, row) in src.chunks_exact(g.d).enumerate() {
                    for (c, &x) in row.iter().enumerate() {
                        dst[c * tp + j] = x;
                    }
                }
            }
        });
        let kt = if g.transposed { &kt[..] } else { k };
        let out = SharedMut(bufs.output::<T>().as_mut_ptr());
        parallel_for(items, &|item| {
            // At most num_threads() items run at once: one slot is always free.
            let mut guard = slots.iter().find_map(|s| s.try_lock().ok());
            let Some(sc) = guard.as_deref_mut() else {
                return item_with_new_scratch::<T>(&g, scale, simd, q, kt, v, mask, out, item, qblocks);
            };
            run_item::<T>(simd, &g, scale, q, kt, v, mask, out, item, qblocks, sc);
        });
        Ok(())
    })
}

/// A custom mask as stored.
#[derive(Clone, Copy)]
enum Mask<'a, T> {
    None,
    Bool(&'a [u8]),
    Add(&'a [T]),
}

/// Never reached in practice (a slot is free whenever an item runs); kept so that a pool change
/// cannot turn a busy slot into a wrong result.
#[allow(clippy::too_many_arguments)]
#[cold]
fn item_with_new_scratch<T: Compute>(
    g: &Geo,
    scale: T::C,
    simd: bool,
    q: &[T::C],
    k: &[T::C],
    v: &[T::C],
    mask: Mask<'_, T>,
    out: SharedMut<T>,
    item: usize,
    qblocks: usize,
) {
    let mut sc = Scratch {
        q: vec![T::C::ZERO; BQ * g.d],
        p: vec![T::C::ZERO; BQ * BK],
        o: vec![T::C::ZERO; BQ * g.dv],
        m: vec![T::C::ZERO; BQ],
        l: vec![T::C::ZERO; BQ],
    };
    run_item::<T>(simd, g, scale, q, k, v, mask, out, item, qblocks, &mut sc);
}

crate::simd_entry!(run_item = item_body<T: Compute>(
    g: &Geo,
    scale: T::C,
    q: &[T::C],
    k: &[T::C],
    v: &[T::C],
    mask: Mask<'_, T>,
    out: SharedMut<T>,
    item: usize,
    qblocks: usize,
    sc: &mut Scratch<T::C>
));

/// One (batch, head, query block): online softmax over the visible key blocks.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn item_body<T: Compute, const FMA: bool>(
    g: &Geo,
    scale: T::C,
    q: &[T::C],
    k: &[T::C],
    v: &[T::C],
    mask: Mask<'_, T>,
    out: SharedMut<T>,
    item: usize,
    qblocks: usize,
    sc: &mut Scratch<T::C>,
) {
    let (d, dv, t) = (g.d, g.dv, g.t);
    let (bh, qb) = (item / qblocks, item % qblocks);
    let (bi, hi) = (bh / g.h, bh % g.h);
    let kv = bi * g.kvh + hi / (g.h / g.kvh);
    let i0 = qb * BQ;
    let rows = BQ.min(g.s - i0);
    let rows4 = rows.div_ceil(4) * 4;
    let qrow = |i: usize| ((bi * g.h + hi) * g.s + i) * d;
    // The scaled query block; rows past the end are zero (their results are dropped).
    for r in 0..rows4 {
        let dst = &mut sc.q[r * d..(r + 1) * d];
        if r < rows {
            for (o, &x) in dst.iter_mut().zip(&q[qrow(i0 + r)..qrow(i0 + r) + d]) {
                *o = x * scale;
            }
        } else {
            dst.fill(T::C::ZERO);
        }
    }
    sc.m[..rows].fill(T::C::NEG_INF);
    sc.l[..rows].fill(T::C::ZERO);
    sc.o[..rows4 * dv].fill(T::C::ZERO);
    let (lo, hi_k) = g.key_range(i0, i0 + rows);
    // Blocks start on a multiple of 16 so that a score tile never reads past the padded row.
    let lo = lo / 16 * 16;
    let kbase = kv * t;
    let tp = t.div_ceil(16) * 16;
    let mut j0 = lo;
    while j0 < hi_k {
        let nk = BK.min(hi_k - j0);
        let nk16 = nk.div_ceil(16) * 16;
        // Scores: p[rows4, nk16] = qs[rows4, d] @ kt[d, j0..j0 + nk16] (`k` is K transposed).
        if g.transposed {
            let kt = &k[kv * d * tp..(kv + 1) * d * tp];
            matmul_tile::<T::C, FMA>(&sc.q, d, &kt[j0..], tp, &mut sc.p, BK, rows4, nk16, d, false);
        } else {
            for r in 0..rows {
                let qr = &sc.q[r * d..(r + 1) * d];
                for jj in 0..nk {
                    let kr = &k[(kbase + j0 + jj) * d..(kbase + j0 + jj + 1) * d];
                    sc.p[r * BK + jj] = dot::<T::C, FMA>(qr, kr);
                }
            }
        }
        for r in 0..rows {
            let i = i0 + r;
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
        let vb = &v[(kbase + j0) * dv..(kbase + j0 + nk) * dv];
        matmul_tile::<T::C, FMA>(&sc.p, BK, vb, dv, &mut sc.o, dv, rows4, dv, nk, true);
        j0 += nk;
    }
    for r in 0..rows {
        let i = i0 + r;
        let base = ((bi * g.h + hi) * g.s + i) * dv;
        // SAFETY: each item writes only its own rows of the output.
        let dst = unsafe { out.slice(base, dv) };
        // No visible key at all: NaN, as softmax of an all -inf row.
        let rl = if sc.m[r] == T::C::NEG_INF { T::C::NAN } else { T::C::ONE / sc.l[r] };
        for (o, &x) in dst.iter_mut().zip(&sc.o[r * dv..(r + 1) * dv]) {
            *o = T::store(x * rl);
        }
    }
}

/// The dot product of two equal-length rows, with 8 partial sums (vectorizes).
#[inline(always)]
fn dot<C: Real, const FMA: bool>(a: &[C], b: &[C]) -> C {
    let mut acc = [C::ZERO; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] = C::madd::<FMA>(x[k], y[k], acc[k]);
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (&x, &y) in ra.iter().zip(rb) {
        s = C::madd::<FMA>(x, y, s);
    }
    s
}

/// `c[m, n] (+)= a[m, k] @ b[k, n]` (row strides lda, ldb, ldc) with 4x16 register tiles; `m`
/// must be a multiple of 4. Columns past the last full 16 take a scalar path.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn matmul_tile<C: Real, const FMA: bool>(
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
