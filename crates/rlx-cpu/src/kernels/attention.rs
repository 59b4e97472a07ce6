//! Native attention: tiled, flash-style (online softmax over key blocks, so memory is O(block)
//! whatever the sequence length), with causal, sliding-window and custom (bool or additive)
//! masks and grouped-query heads. Key blocks a built-in mask hides entirely are skipped, and
//! so are keys a custom mask hides in every row of a work item (false, or an additive -inf):
//! decoding over a long KV cache reads only the filled slots. Such keys never enter the
//! softmax, even when their scores are not finite (the reference adds -inf to NaN there).
//!
//! Work items are (batch, head, query block); the pool hands them out dynamically, and each
//! running item borrows one of `num_threads()` preallocated scratch slots. With f32 compute,
//! AVX2 + FMA (x86_64) or NEON (aarch64) and several query rows (encoders, prefill), items take
//! the chunked whole-row path of `dense.rs` instead of the online softmax over 64-key blocks;
//! with fewer rows (decode) and AVX-512, f32 items take `decode512.rs` (`RLX_ATTN_DECODE512=0`
//! turns it off, for comparisons).

mod arena;
#[cfg(target_arch = "x86_64")]
mod decode512;
mod dense;
#[cfg(target_arch = "x86_64")]
mod dense512;
#[cfg(target_arch = "aarch64")]
mod dense_neon;
mod online;
mod paged;

use super::math::{Compute, Real, SharedMut, avx2_fma};
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
    paged::register(t);
}

/// Query rows per work item (a multiple of the 4-row register tile, and of the AVX-512 dense
/// path's 12-row one: 48 runs four full tiles and beat 32 at 2048 tokens, session 16 in
/// docs/benchmarks-history.md).
const BQ: usize = 48;
/// Keys per block (a multiple of the 16-column register tile).
const BK: usize = 64;
/// Keys from which the dense path copies V's rows of one head together when they are not.
const COPY_V_KEYS: usize = 512;

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
    /// Query blocks per head.
    qblocks: usize,
    /// One work item takes all query heads of a kv head (when their rows fit one block, as in
    /// decode), so that K and V are read once per kv head.
    grouped: bool,
    /// Work items run the f32 whole-row path (`dense.rs`).
    dense: bool,
    /// Work items run the AVX-512 few-rows path (`decode512.rs`).
    decode512: bool,
    /// Element strides of (batch, head, position) in q, k, v and the output; the head dim is
    /// contiguous (`HeadLayout::strides`).
    qs: [usize; 3],
    ks: [usize; 3],
    vs: [usize; 3],
    os: [usize; 3],
}

/// The query rows of one work item: heads `h0..h0 + nh` (sharing kv head `kv`) times queries
/// `i0..i0 + ni`; row `r` is head `h0 + r / ni`, query `i0 + r % ni`.
#[derive(Clone, Copy)]
struct Item {
    bi: usize,
    kv: usize,
    h0: usize,
    nh: usize,
    i0: usize,
    ni: usize,
}

impl Item {
    fn rows(&self) -> usize {
        self.nh * self.ni
    }
    /// (head, query) of row `r`.
    fn row(&self, r: usize) -> (usize, usize) {
        (self.h0 + r / self.ni, self.i0 + r % self.ni)
    }
}

/// The keys `[lo, hi)` outside which a custom mask hides everything, per mask row, found once
/// per run; rows are (batch, head, query) with head 0 only when the mask broadcasts over heads.
struct Spans {
    /// `[lo, hi)` per mask row; `lo >= hi` when the row hides every key.
    rows: Vec<(u32, u32)>,
    /// Per mask row: the mask does nothing inside the span (bool: every key visible; additive:
    /// every value 0), so the row is just its span and the kernels need not read it.
    plain: Vec<bool>,
    /// Distinct heads in the mask (1 when it broadcasts over heads, else `h`).
    heads: usize,
}

impl Spans {
    fn new(g: &Geo) -> Spans {
        let heads = if g.ms[1] == 0 { 1 } else { g.h };
        let n = if g.mask == MaskKind::Custom { g.b * heads * g.s } else { 0 };
        Spans { rows: vec![(0, g.t as u32); n], plain: vec![false; n], heads }
    }

    /// Scans the mask rows (`hidden(m)` says whether an element hides its key, `inert(m)` whether
    /// it leaves its key as it is).
    fn scan<M: Copy>(&mut self, g: &Geo, mask: &[M], hidden: impl Fn(M) -> bool, inert: impl Fn(M) -> bool) {
        let heads = self.heads;
        for (r, (span, plain)) in self.rows.iter_mut().zip(&mut self.plain).enumerate() {
            let (bi, hi, i) = (r / (heads * g.s), r / g.s % heads, r % g.s);
            let base = bi * g.ms[0] + hi * g.ms[1] + i * g.ms[2];
            let at = |j: usize| mask[base + j * g.ms[3]];
            *span = match (0..g.t).find(|&j| !hidden(at(j))) {
                Some(lo) => {
                    let last = (lo..g.t).rev().find(|&j| !hidden(at(j))).unwrap_or(lo);
                    (lo as u32, last as u32 + 1)
                }
                None => (0, 0),
            };
            *plain = (span.0 as usize..span.1 as usize).all(|j| inert(at(j)));
        }
    }

    /// The span of mask row (batch `bi`, head `hi`, query `i`) when the row is plain (the
    /// kernel then visits the span and skips the mask), else None.
    fn plain_row(&self, g: &Geo, bi: usize, hi: usize, i: usize) -> Option<(usize, usize)> {
        let r = (bi * self.heads + if self.heads == 1 { 0 } else { hi }) * g.s + i;
        let (lo, hi_k) = *self.rows.get(r)?;
        self.plain[r].then_some((lo as usize, (hi_k as usize).max(lo as usize)))
    }

    /// The keys `[lo, hi)` row (batch `bi`, head `hi`, query `i`) may see under the built-in mask,
    /// narrowed to the custom mask's span when that mask row is plain; and whether it is (the
    /// kernels then need not read the mask row).
    fn row_keys(&self, g: &Geo, bi: usize, hi: usize, i: usize) -> ((usize, usize), bool) {
        let (lo, hi_k) = g.key_range(i, i + 1);
        match self.plain_row(g, bi, hi, i) {
            Some((a, b)) => ((lo.max(a), hi_k.min(b)), true),
            None => ((lo, hi_k), false),
        }
    }

    /// The union of the spans of the item's rows, or all keys without a mask.
    fn union(&self, g: &Geo, it: &Item) -> (usize, usize) {
        if self.rows.is_empty() {
            return (0, g.t);
        }
        let heads = if self.heads == 1 { 0..1 } else { it.h0..it.h0 + it.nh };
        let (mut lo, mut hi_k) = (g.t, 0);
        for hi in heads {
            let base = (it.bi * self.heads + hi) * g.s;
            for &(a, b) in &self.rows[base + it.i0..base + it.i0 + it.ni] {
                if a < b {
                    (lo, hi_k) = (lo.min(a as usize), hi_k.max(b as usize));
                }
            }
        }
        (lo, hi_k.max(lo))
    }
}

#[cfg(test)]
thread_local! {
    /// Key rows the work items of the runs on this thread visited (a test hook).
    static KEY_ROWS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl Geo {
    /// Offset of query row (batch `bi`, head `hi`, position `i`) in q.
    fn q_at(&self, bi: usize, hi: usize, i: usize) -> usize {
        bi * self.qs[0] + hi * self.qs[1] + i * self.qs[2]
    }

    /// Offset of output row (batch `bi`, head `hi`, position `i`).
    fn o_at(&self, bi: usize, hi: usize, i: usize) -> usize {
        bi * self.os[0] + hi * self.os[1] + i * self.os[2]
    }

    /// Offset of key row `j` of kv head `kv` (counted over batch and kv heads) in k.
    fn k_at(&self, kv: usize, j: usize) -> usize {
        (kv / self.kvh) * self.ks[0] + (kv % self.kvh) * self.ks[1] + j * self.ks[2]
    }

    /// Offset of value row `j` of kv head `kv` (counted over batch and kv heads) in v.
    fn v_at(&self, kv: usize, j: usize) -> usize {
        (kv / self.kvh) * self.vs[0] + (kv % self.kvh) * self.vs[1] + j * self.vs[2]
    }

    /// Work items per run.
    fn items(&self) -> usize {
        if self.grouped { self.b * self.kvh } else { self.b * self.h * self.qblocks }
    }

    /// The rows of work item `n`.
    fn item(&self, n: usize) -> Item {
        let grp = self.h / self.kvh;
        if self.grouped {
            let (bi, k) = (n / self.kvh, n % self.kvh);
            return Item { bi, kv: n, h0: k * grp, nh: grp, i0: 0, ni: self.s };
        }
        let (bh, qb) = (n / self.qblocks, n % self.qblocks);
        let (bi, hi) = (bh / self.h, bh % self.h);
        let i0 = qb * BQ;
        Item { bi, kv: bi * self.kvh + hi / grp, h0: hi, nh: 1, i0, ni: BQ.min(self.s - i0) }
    }

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
    if qd.len() != 4 || kd.len() != 4 || vd.len() != 4 {
        return Err(unsupported(ctx));
    }
    // Dims as (batch, heads, positions, head dim), whatever the layout.
    let l = op.layout;
    let (qd, kd, vd) = (l.bhsd(&qd), l.bhsd(&kd), l.bhsd(&vd));
    if kd[1] == 0 || qd[1] % kd[1] != 0 {
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
    let mut g = Geo {
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
        qblocks: qd[2].div_ceil(BQ),
        grouped: qd[1] / kd[1] * qd[2] <= BQ,
        dense: false,
        decode512: false,
        qs: l.strides(qd[1], qd[2], qd[3]),
        ks: l.strides(kd[1], kd[2], kd[3]),
        vs: l.strides(vd[1], vd[2], vd[3]),
        os: l.strides(qd[1], qd[2], vd[3]),
    };
    let f32_compute = matches!(ctx.out.dtype, DType::F32 | DType::F16 | DType::BF16);
    g.dense = dense::applies(&g, f32_compute, avx2_fma());
    #[cfg(target_arch = "x86_64")]
    {
        g.decode512 = decode512::applies(&g, f32_compute);
    }
    let scale = op.scale;
    // K and V in q's dtype, or a half-precision KV cache under f32 queries.
    match (ctx.out.dtype, ctx.ins[1].dtype) {
        (DType::F32, DType::F16) => Ok(build::<f32, half::f16>(g, scale)),
        (DType::F32, DType::BF16) => Ok(build::<f32, half::bf16>(g, scale)),
        (out, kv) if out == kv => with_float!(out, T => Ok(build::<T, T>(g, scale)), else Err(unsupported(ctx))),
        _ => Err(unsupported(ctx)),
    }
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

impl<C: Real> Scratch<C> {
    /// Zeroed buffers for one work item of `g`.
    fn new(g: &Geo) -> Self {
        let z = |n: usize| vec![C::ZERO; n];
        let pw = if g.dense { dense::row_width(g.t.min(dense::MAX_T)).max(BK) } else { BK };
        Scratch { q: z(BQ * g.d), p: z(BQ * pw), o: z(BQ * g.dv), m: z(BQ), l: z(BQ) }
    }
}

/// K and V as stored, for the paths that read them in place (`decode512.rs`).
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum RawKv<'a> {
    /// Another storage type (f64): no path reads it in place.
    Other,
    F32(&'a [f32], &'a [f32]),
    F16(&'a [half::f16], &'a [half::f16]),
    Bf16(&'a [half::bf16], &'a [half::bf16]),
}

impl<'a> RawKv<'a> {
    fn of<KV: 'static>(k: &'a [KV], v: &'a [KV]) -> Self {
        use super::half_vec::cast;
        if let (Some(k), Some(v)) = (cast::<KV, f32>(k), cast::<KV, f32>(v)) {
            RawKv::F32(k, v)
        } else if let (Some(k), Some(v)) = (cast::<KV, half::f16>(k), cast::<KV, half::f16>(v)) {
            RawKv::F16(k, v)
        } else if let (Some(k), Some(v)) = (cast::<KV, half::bf16>(k), cast::<KV, half::bf16>(v)) {
            RawKv::Bf16(k, v)
        } else {
            RawKv::Other
        }
    }
}

/// The kernel for queries and output of dtype `T`, keys and values of dtype `KV` (`T`, or
/// f16/bf16 under f32).
fn build<T: Compute, KV: Compute<C = T::C>>(g: Geo, scale: f64) -> Kernel {
    let slots: Vec<Mutex<Scratch<T::C>>> = (0..num_threads()).map(|_| Mutex::new(Scratch::new(&g))).collect();
    let convert_q = super::half_vec::cast::<T, T::C>(&[]).is_none();
    // The decode path reads K and V as stored; the others read them in the compute type.
    let convert_kv = super::half_vec::cast::<KV, T::C>(&[]).is_none() && !g.decode512;
    // The dense path's `P @ V` reads V's rows in place as a product operand: rows of one head
    // spread `kv_heads` rows apart (`[batch, seq, heads, dim]`) fall into few L1 sets and are
    // re-read from L2 for every register tile, so many of them are first copied together (a gain
    // at 2000 keys; at MiniLM's 128 the copy costs more: session 19 in docs/benchmarks-history.md).
    let copy_v = move |t_used: usize| g.dense && g.vs[2] != g.dv && t_used >= COPY_V_KEYS;
    let items = g.items();
    let simd = avx2_fma();
    let scale = T::C::from_f64(scale);
    let mut spans = Spans::new(&g);
    Box::new(move |bufs: &Bufs<'_>| {
        let (q_in, k_in, v_in) = (bufs.input::<T>(0), bufs.input::<KV>(1), bufs.input::<KV>(2));
        let mask = match (g.mask, g.bool_mask) {
            (MaskKind::Custom, true) => Mask::Bool(bufs.input::<u8>(3)),
            (MaskKind::Custom, false) => Mask::Add(bufs.input::<T>(3)),
            _ => Mask::None,
        };
        match mask {
            Mask::Bool(m) => spans.scan(&g, m, |x| x == 0, |x| x != 0),
            Mask::Add(m) => spans.scan(&g, m, |x: T| x.load() == T::C::NEG_INF, |x: T| x.load() == T::C::ZERO),
            Mask::None => {}
        }
        let spans = &spans;
        // Keys past the last one any row may see are never read: K and V are widened, and K
        // transposed, up to there.
        let t_used =
            if spans.rows.is_empty() { g.t } else { spans.rows.iter().map(|r| r.1 as usize).max().unwrap_or(0) };
        #[cfg(test)]
        KEY_ROWS.with(|c| c.set(c.get() + key_rows(&g, spans)));
        // K transposed to [batch * kv_heads, d, tp] (tp: the used keys padded to 16), so that
        // score tiles read 16 consecutive keys.
        let tp = t_used.div_ceil(16) * 16;
        let used = |copy: bool, width: usize| if copy { g.b * g.kvh * t_used * width } else { 0 };
        let lens = [
            if convert_q { q_in.len() } else { 0 },
            used(convert_kv, g.d),
            used(convert_kv || copy_v(t_used), g.dv),
            if g.transposed { g.b * g.kvh * g.d * tp } else { 0 },
        ];
        arena::with_buffers::<T::C, _>(lens, |[qb, kb, vb, kt]| {
            let q = arena::view(q_in, qb);
            let raw = RawKv::of(k_in, v_in);
            // The geometry with K's and V's strides as read (compact when widened).
            let mut gr = g;
            let (k, v) = if g.decode512 {
                // Read in place (`raw`); the compute-type views are only borrowed when they are K and V.
                let same = |x| super::half_vec::cast::<KV, T::C>(x).unwrap_or(&[]);
                (same(k_in), same(v_in))
            } else {
                let (k, ks) = arena::view_keys(&g, k_in, kb, (g.ks, g.d), t_used, false);
                let (v, vs) = arena::view_keys(&g, v_in, vb, (g.vs, g.dv), t_used, copy_v(t_used));
                (gr.ks, gr.vs) = (ks, vs);
                (k, v)
            };
            if g.transposed {
                transpose_keys(&gr, k, t_used, kt, tp);
            }
            let k = if g.transposed { &kt[..] } else { k };
            let out = SharedMut(bufs.output::<T>().as_mut_ptr());
            let work = Work { g: &gr, scale, q, k, tp, v, raw, mask, spans, out };
            parallel_for(items, &|item| {
                // At most num_threads() items run at once: one slot is always free.
                let mut guard = slots.iter().find_map(|s| s.try_lock().ok());
                let Some(sc) = guard.as_deref_mut() else {
                    return item_with_new_scratch::<T>(simd, &work, item);
                };
                any_item::<T>(simd, &work, item, sc);
            });
        });
        Ok(())
    })
}

/// Writes keys `0..t_used` of `k` (strides `g.ks`) transposed into `kt`: `[batch * kv_heads, d,
/// tp]`, 16 keys at a time (each destination row gets one contiguous run of 16, and the 16
/// source rows stay in L1 while their columns are read); the padding columns of the last group
/// repeat its last key (finite values whose scores no row uses).
fn transpose_keys<C: Real>(g: &Geo, k: &[C], t_used: usize, kt: &mut [C], tp: usize) {
    // By gathers: f32 keys whose row stride fits their offsets.
    #[cfg(target_arch = "x86_64")]
    let gather16 = std::mem::size_of::<C>() == 4
        && crate::kernels::vec32::simd16::avx512()
        && g.ks[2].checked_mul(15).is_some_and(|o| o <= i32::MAX as usize);
    let ktp = SharedMut(kt.as_mut_ptr());
    let heads = g.b * g.kvh;
    let small = heads * t_used * g.d < 1 << 14;
    assert!(kt.len() >= heads * g.d * tp);
    parallel_for(if small { 1 } else { heads }, &|task| {
        for hk in if small { 0..heads } else { task..task + 1 } {
            // SAFETY: each task writes only its own head's block, inside `kt` (asserted above).
            let dst = unsafe { ktp.slice(hk * g.d * tp, g.d * tp) };
            for j0 in (0..t_used).step_by(16) {
                let n = 16.min(t_used - j0);
                #[cfg(target_arch = "x86_64")]
                if n == 16 && gather16 {
                    let src = &k[g.k_at(hk, j0)..g.k_at(hk, j0 + 15) + g.d];
                    let out = &mut dst[j0..(g.d - 1) * tp + j0 + 16];
                    // SAFETY: C is f32 and the CPU has AVX-512F (`gather16`); the slices cover
                    // the 16 rows and the d output runs; 15 * ks[2] fits in an i32.
                    unsafe {
                        dense512::transpose16(
                            src.as_ptr() as *const f32,
                            g.ks[2],
                            g.d,
                            out.as_mut_ptr() as *mut f32,
                            tp,
                        )
                    };
                    continue;
                }
                let keys: [&[C]; 16] = std::array::from_fn(|jj| {
                    let at = g.k_at(hk, j0 + jj.min(n - 1));
                    &k[at..at + g.d]
                });
                for c in 0..g.d {
                    for (o, row) in dst[c * tp + j0..c * tp + j0 + 16].iter_mut().zip(&keys) {
                        *o = row[c];
                    }
                }
            }
        }
    });
}

/// A custom mask as stored.
#[derive(Clone, Copy)]
enum Mask<'a, T> {
    None,
    Bool(&'a [u8]),
    Add(&'a [T]),
}

/// What every work item of one call reads: the geometry (K's and V's strides as read), the
/// score scale, Q, K (transposed when `g.transposed`, rows `tp` apart) and V in the compute
/// type (K and V empty on the decode path, which reads `raw`), the custom mask with its spans,
/// the output.
#[derive(Clone, Copy)]
struct Work<'a, T: Compute> {
    g: &'a Geo,
    scale: T::C,
    q: &'a [T::C],
    k: &'a [T::C],
    tp: usize,
    v: &'a [T::C],
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    raw: RawKv<'a>,
    mask: Mask<'a, T>,
    spans: &'a Spans,
    out: SharedMut<T>,
}

/// Never reached in practice (a slot is free whenever an item runs); kept so that a pool change
/// cannot turn a busy slot into a wrong result.
#[cold]
fn item_with_new_scratch<T: Compute>(simd: bool, w: &Work<'_, T>, item: usize) {
    let mut sc = Scratch::new(w.g);
    any_item::<T>(simd, w, item, &mut sc);
}

/// One work item on the dense path when it applies, else the online-softmax one.
#[inline(always)]
fn any_item<T: Compute>(simd: bool, w: &Work<'_, T>, item: usize, sc: &mut Scratch<T::C>) {
    if w.g.dense {
        dense::item::<T>(w, item, sc);
    } else if w.g.decode512 {
        #[cfg(target_arch = "x86_64")]
        decode512::item::<T>(w, item, sc);
    } else {
        online::run_item::<T>(simd, w, item, sc);
    }
}

/// The item's query rows times `scale` into `dst` (`rows` rounded up to 4 rows of the head dim);
/// rows past the end are zero (their results are dropped).
fn scaled_queries<C: Real>(g: &Geo, it: &Item, q: &[C], scale: C, dst: &mut [C]) {
    let (d, rows) = (g.d, it.rows());
    for (r, dst) in dst.chunks_exact_mut(d).enumerate() {
        if r < rows {
            let (hi, i) = it.row(r);
            let qr = g.q_at(it.bi, hi, i);
            for (o, &x) in dst.iter_mut().zip(&q[qr..qr + d]) {
                *o = x * scale;
            }
        } else {
            dst.fill(C::ZERO);
        }
    }
}

/// Keys `[lo, hi)` a work item visits: those the built-in mask and the custom mask's spans
/// leave visible to at least one of its rows.
fn item_keys(g: &Geo, spans: &Spans, it: &Item) -> (usize, usize) {
    let (lo, hi_k) = g.key_range(it.i0, it.i0 + it.ni);
    let (mlo, mhi) = spans.union(g, it);
    (lo.max(mlo), hi_k.min(mhi).max(lo.max(mlo)))
}

/// Key rows all work items of one run visit (before rounding down to a multiple of 16).
#[cfg(test)]
fn key_rows(g: &Geo, spans: &Spans) -> u64 {
    (0..g.items()).map(|n| item_keys(g, spans, &g.item(n))).map(|(lo, hi)| (hi - lo) as u64).sum()
}

#[cfg(test)]
mod tests {
    use super::KEY_ROWS;
    use rlx_ir::{DType, Graph, HostTensor, Shape};

    fn rand(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    /// Runs attention of `s` queries over `t` keys with an additive mask whose rows see keys
    /// `pad..=visible_end(i)`; returns the output and the key rows the kernel visited.
    fn run(s: usize, t: usize, pad: usize, end: impl Fn(usize) -> usize) -> (Vec<f32>, u64) {
        let (h, kvh, d) = (4, 2, 16);
        let mut g = Graph::new("att");
        let q = g.input("q", Shape::new(&[1, h, s, d], DType::F32));
        let k = g.input("k", Shape::new(&[1, kvh, t, d], DType::F32));
        let v = g.input("v", Shape::new(&[1, kvh, t, d], DType::F32));
        let m = g.input("m", Shape::new(&[1, 1, s, t], DType::F32));
        let y = g.attention_with_mask(q, k, v, m, 0.25);
        g.set_outputs(vec![y]);
        let mut mask = vec![f32::NEG_INFINITY; s * t];
        for i in 0..s {
            mask[i * t + pad..=i * t + end(i)].fill(0.0);
        }
        // Key j of kv head c is the same whatever t; keys past the visible ones hold huge
        // values: reading them would show in the output.
        let keys = |seed: u64| -> Vec<f32> {
            let all = rand(kvh * 512 * d, seed);
            (0..kvh).flat_map(|c| all[c * 512 * d..(c * 512 + t) * d].to_vec()).collect()
        };
        let mut kd = keys(2);
        for (j, x) in kd.iter_mut().enumerate() {
            if (j / d) % t > end(s - 1) {
                *x = 1e30;
            }
        }
        let feeds = [
            ("q", HostTensor::from_f32(&[1, h, s, d], &rand(h * s * d, 1)).unwrap()),
            ("k", HostTensor::from_f32(&[1, kvh, t, d], &kd).unwrap()),
            ("v", HostTensor::from_f32(&[1, kvh, t, d], &keys(3)).unwrap()),
            ("m", HostTensor::from_f32(&[1, 1, s, t], &mask).unwrap()),
        ];
        let before = KEY_ROWS.with(|c| c.get());
        let out = rlx_driver::run_host(&crate::CpuBackend::new(), &g, &feeds).unwrap();
        let read = KEY_ROWS.with(|c| c.get()) - before;
        // The reference interpreter, where no huge key is hidden (it adds -inf to them).
        if end(s - 1) + 1 == t {
            let want = rlx_ir::interp::evaluate(&g, &feeds).unwrap()[0].to_f64_vec().unwrap();
            for (a, b) in out[0].to_f64_vec().unwrap().iter().zip(&want) {
                assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs reference {b}");
            }
        }
        (out[0].to_f64_vec().unwrap().into_iter().map(|x| x as f32).collect(), read)
    }

    #[test]
    fn decode_visits_only_the_keys_the_mask_leaves_visible() {
        // One query over a 512-slot cache with 3 pads and keys 3..=n visible.
        for n in [3, 20, 100] {
            let (long, read) = run(1, 512, 3, |_| n);
            // One work item per kv head (2), each reading keys 3..=n once for its 2 query heads.
            assert_eq!(read, 2 * (n as u64 + 1 - 3), "filled {n}");
            // The same problem in a cache of exactly n + 1 slots.
            let (short, _) = run(1, n + 1, 3, |_| n);
            assert!(long.iter().all(|x| x.is_finite()));
            for (a, b) in long.iter().zip(&short) {
                assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "filled {n}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn prefill_into_a_long_cache_visits_only_the_filled_keys() {
        // BQ + 8 causal queries at the start of a 300-slot cache (transposed-K path): two query
        // blocks, the first seeing keys 0..BQ, the second keys 0..BQ + 8.
        let q = super::BQ + 8;
        let (long, read) = run(q, 300, 0, |i| i);
        assert_eq!(read, 4 * (super::BQ + q) as u64);
        let (short, _) = run(q, q, 0, |i| i);
        for (a, b) in long.iter().zip(&short) {
            assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }

    #[test]
    fn a_row_that_hides_every_key_gives_nan_and_visits_nothing() {
        let (out, read) = run(1, 64, 10, |_| 9);
        assert_eq!(read, 0);
        assert!(out.iter().all(|x| x.is_nan()));
    }
}
