//! `paged_attention` and `paged_kv_write`: attention over a paged KV cache, read through each
//! sequence's block table (no copy into a contiguous cache), and the in-place write of new keys
//! and values into their pages.
//!
//! Work items are (run of query tokens of one sequence, kv head): the query heads of a kv head
//! and up to `RUN_TOKENS` consecutive tokens of one sequence share every key read, so a decode
//! step reads each sequence's keys once per kv head and a prefill chunk reads them once per
//! block of tokens. Keys are gathered `BK` at a time from their pages into scratch (widened to
//! the compute type), then scored and accumulated with an online softmax as `online.rs` does.

use super::online::{matmul_tile, scores};
use super::{BK, Kernel, KernelBuilder, KernelCtx, unsupported};
use crate::exec::Bufs;
use crate::kernels::math::{Compute, Real, SharedMut, avx2_fma, exp_shift, max8, sum8};
use crate::threads::parallel_for_dynamic;
use rlx_driver::KernelTable;
use rlx_ir::{DType, Error, Op, OpKind, Result};
use std::cell::RefCell;

/// Floats of queries, pages and outputs, and the integer dtypes of the index inputs.
const DTYPES: &[DType] = &[DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64];

/// Query tokens of one sequence per work item (rows = tokens x grouped heads).
const RUN_TOKENS: usize = 16;

pub(in crate::kernels) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::PagedAttention, DTYPES, paged_attention);
    t.register(OpKind::PagedKvWrite, DTYPES, paged_kv_write);
}

/// Reads element `j` of an integer tensor as i64.
fn int_at(dt: DType, bytes: &[u8], j: usize) -> i64 {
    match dt {
        DType::I32 => bytemuck::cast_slice::<u8, i32>(bytes)[j] as i64,
        _ => bytemuck::cast_slice::<u8, i64>(bytes)[j],
    }
}

fn paged_kv_write(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let p = ctx.in_dims(0);
    let (slots, kvh, ps, d) = (p[0] * p[2], p[1], p[2], p[3]);
    let t = ctx.in_dims(1)[0];
    let (sdt, es) = (ctx.ins[2].dtype, ctx.out.dtype.size_bytes());
    if !matches!(sdt, DType::I32 | DType::I64) {
        return Err(unsupported(ctx));
    }
    Ok(Box::new(move |b: &Bufs<'_>| {
        if !b.in_place(0) {
            b.output_bytes().copy_from_slice(b.input_bytes(0));
        }
        let (new, idx, out) = (b.input_bytes(1), b.input_bytes(2), b.output_bytes());
        let row = d * es;
        for ti in 0..t {
            let s = int_at(sdt, idx, ti);
            if s < 0 {
                continue;
            }
            let s = s as usize;
            if s >= slots {
                let reason = format!("slot {s} of token {ti} is outside the pool of {slots} slots");
                return Err(Error::eval("paged_kv_write", reason));
            }
            let (page, off) = (s / ps, s % ps);
            for h in 0..kvh {
                let dst = ((page * kvh + h) * ps + off) * row;
                let src = (ti * kvh + h) * row;
                out[dst..dst + row].copy_from_slice(&new[src..src + row]);
            }
        }
        Ok(())
    }))
}

/// Static geometry of one `paged_attention` node.
#[derive(Clone, Copy)]
struct Geo {
    tokens: usize,
    heads: usize,
    kvh: usize,
    pages: usize,
    ps: usize,
    d: usize,
    dv: usize,
    /// Block-table rows and pages per row.
    rows: usize,
    blocks: usize,
    scale: f64,
}

/// Tokens `t0..t0 + nt` (one sequence, block-table row `row`) against kv head `kv`.
#[derive(Clone, Copy)]
struct Item {
    t0: usize,
    nt: usize,
    row: usize,
    kv: usize,
    /// Keys the item reads: the largest position of its tokens, plus one.
    keys: usize,
}

fn paged_attention(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::PagedAttention(op) = ctx.op else { return Err(unsupported(ctx)) };
    let (q, k, v, bt) = (ctx.in_dims(0), ctx.in_dims(1), ctx.in_dims(2), ctx.in_dims(3));
    let g = Geo {
        tokens: q[0],
        heads: q[1],
        kvh: k[1],
        pages: k[0],
        ps: k[2],
        d: q[2],
        dv: v[3],
        rows: bt[0],
        blocks: bt[1],
        scale: op.scale as f64,
    };
    let dts = [ctx.ins[3].dtype, ctx.ins[4].dtype, ctx.ins[5].dtype];
    if dts.iter().any(|dt| !matches!(dt, DType::I32 | DType::I64)) {
        return Err(unsupported(ctx));
    }
    let simd = avx2_fma();
    let mut items: Vec<Item> = Vec::new();
    macro_rules! run {
        ($Q:ty, $K:ty) => {
            Ok(Box::new(move |b: &Bufs<'_>| {
                plan_items(&g, b, dts, &mut items)?;
                let w = Work::<$Q, $K> {
                    g,
                    q: b.input::<$Q>(0),
                    k: b.input::<$K>(1),
                    v: b.input::<$K>(2),
                    tables: (dts[0], b.input_bytes(3)),
                    positions: (dts[2], b.input_bytes(5)),
                    out: SharedMut(b.output::<$Q>().as_mut_ptr()),
                };
                let items = &items;
                parallel_for_dynamic(items.len(), &|i| run_item::<$Q, $K>(simd, &w, &items[i]));
                Ok(())
            }))
        };
    }
    match (ctx.ins[0].dtype, ctx.ins[1].dtype) {
        (DType::F32, DType::F32) => run!(f32, f32),
        (DType::F32, DType::F16) => run!(f32, half::f16),
        (DType::F32, DType::BF16) => run!(f32, half::bf16),
        (DType::F64, DType::F64) => run!(f64, f64),
        _ => Err(unsupported(ctx)),
    }
}

/// Checks every token's sequence row, position and pages (so the items cannot read outside the
/// pool), and splits the tokens into work items.
fn plan_items(g: &Geo, b: &Bufs<'_>, dts: [DType; 3], items: &mut Vec<Item>) -> Result<()> {
    let err = |r: String| Error::eval("paged_attention", r);
    let (tables, seq, pos) = (b.input_bytes(3), b.input_bytes(4), b.input_bytes(5));
    items.clear();
    let mut t = 0;
    while t < g.tokens {
        let row = int_at(dts[1], seq, t);
        let row = usize::try_from(row).ok().filter(|&r| r < g.rows);
        let row =
            row.ok_or_else(|| err(format!("token {t}'s sequence {} has no block-table row", int_at(dts[1], seq, t))))?;
        let mut end = t;
        let mut keys = 0;
        while end < g.tokens && end - t < RUN_TOKENS && int_at(dts[1], seq, end) == row as i64 {
            let p = int_at(dts[2], pos, end);
            let n = usize::try_from(p + 1).ok().filter(|&n| n >= 1 && n <= g.blocks * g.ps);
            keys = keys.max(n.ok_or_else(|| err(format!("token {end}'s position {p} does not fit its block table")))?);
            end += 1;
        }
        for blk in 0..keys.div_ceil(g.ps) {
            let page = int_at(dts[0], tables, row * g.blocks + blk);
            if usize::try_from(page).ok().filter(|&p| p < g.pages).is_none() {
                return Err(err(format!(
                    "block {blk} of sequence row {row} names page {page}, outside 0..{}",
                    g.pages
                )));
            }
        }
        items.extend((0..g.kvh).map(|kv| Item { t0: t, nt: end - t, row, kv, keys }));
        t = end;
    }
    Ok(())
}

struct Work<'a, Q: Compute, K> {
    g: Geo,
    q: &'a [Q],
    k: &'a [K],
    v: &'a [K],
    tables: (DType, &'a [u8]),
    positions: (DType, &'a [u8]),
    out: SharedMut<Q>,
}

// SAFETY: items write disjoint output rows through `out`; everything else is read-only.
unsafe impl<Q: Compute, K: Sync> Sync for Work<'_, Q, K> {}

/// Per-thread scratch, grown on first use and kept (warm runs allocate nothing).
#[derive(Default)]
struct Scratch<C> {
    q: Vec<C>,
    p: Vec<C>,
    o: Vec<C>,
    m: Vec<C>,
    l: Vec<C>,
    kb: Vec<C>,
    vb: Vec<C>,
}

thread_local! {
    static SCRATCH32: RefCell<Scratch<f32>> = RefCell::new(Scratch::default());
    static SCRATCH64: RefCell<Scratch<f64>> = RefCell::new(Scratch::default());
}

fn run_item<Q: Compute, K: Compute<C = Q::C>>(simd: bool, w: &Work<'_, Q, K>, it: &Item) {
    // The compute type is f32 or f64; each has its own thread-local scratch.
    if std::mem::size_of::<Q::C>() == 4 {
        SCRATCH32.with_borrow_mut(|sc| {
            // SAFETY: Q::C is f32 (the only 4-byte compute type), so the scratch types agree.
            let sc = unsafe { &mut *(sc as *mut Scratch<f32> as *mut Scratch<Q::C>) };
            item_entry::<Q, K>(simd, w, it, sc)
        })
    } else {
        SCRATCH64.with_borrow_mut(|sc| {
            // SAFETY: Q::C is f64 (the only 8-byte compute type).
            let sc = unsafe { &mut *(sc as *mut Scratch<f64> as *mut Scratch<Q::C>) };
            item_entry::<Q, K>(simd, w, it, sc)
        })
    }
}

crate::simd_entry!(item_entry = item_body<Q: Compute, K: Compute<C = Q::C>>(w: &Work<'_, Q, K>, it: &Item, sc: &mut Scratch<Q::C>));

#[inline(always)]
fn item_body<Q: Compute, K: Compute<C = Q::C>, const FMA: bool>(w: &Work<'_, Q, K>, it: &Item, sc: &mut Scratch<Q::C>) {
    let g = &w.g;
    let (d, dv, grp) = (g.d, g.dv, g.heads / g.kvh);
    let rows = it.nt * grp;
    let rows4 = rows.div_ceil(4) * 4;
    let grow = |v: &mut Vec<Q::C>, n: usize| {
        if v.len() < n {
            v.resize(n, Q::C::ZERO);
        }
    };
    grow(&mut sc.q, rows4 * d);
    grow(&mut sc.p, rows4 * BK);
    grow(&mut sc.o, rows4 * dv);
    grow(&mut sc.m, rows4);
    grow(&mut sc.l, rows4);
    grow(&mut sc.kb, BK * d);
    grow(&mut sc.vb, BK * dv);
    // Row r is token t0 + r / grp, query head kv * grp + r % grp.
    let head = |r: usize| (it.t0 + r / grp, it.kv * grp + r % grp);
    let scale = Q::C::from_f64(g.scale);
    for r in 0..rows4 {
        let dst = &mut sc.q[r * d..(r + 1) * d];
        if r < rows {
            let (t, h) = head(r);
            let src = &w.q[(t * g.heads + h) * d..(t * g.heads + h + 1) * d];
            dst.iter_mut().zip(src).for_each(|(x, &y)| *x = y.load() * scale);
        } else {
            dst.fill(Q::C::ZERO);
        }
    }
    sc.m[..rows].fill(Q::C::NEG_INF);
    sc.l[..rows].fill(Q::C::ZERO);
    sc.o[..rows4 * dv].fill(Q::C::ZERO);
    let (tdt, tables) = w.tables;
    // Positions were checked by `plan_items`.
    let (pdt, pos) = w.positions;
    let positions: [usize; RUN_TOKENS] =
        std::array::from_fn(|i| if i < it.nt { int_at(pdt, pos, it.t0 + i) as usize } else { 0 });
    let mut j0 = 0;
    while j0 < it.keys {
        let nk = BK.min(it.keys - j0);
        for jj in 0..nk {
            let j = j0 + jj;
            let page = int_at(tdt, tables, it.row * g.blocks + j / g.ps) as usize;
            let slot = (page * g.kvh + it.kv) * g.ps + j % g.ps;
            let (ks, vs) = (&w.k[slot * d..(slot + 1) * d], &w.v[slot * dv..(slot + 1) * dv]);
            K::load_slice(ks, &mut sc.kb[jj * d..(jj + 1) * d]);
            K::load_slice(vs, &mut sc.vb[jj * dv..(jj + 1) * dv]);
        }
        scores::<Q::C, FMA>(&sc.q, d, &sc.kb, d, &mut sc.p, rows4, nk);
        for r in 0..rows {
            let visible = (positions[r / grp] + 1).saturating_sub(j0).min(nk);
            let p = &mut sc.p[r * BK..r * BK + nk];
            p[visible..].fill(Q::C::NEG_INF);
            let mold = sc.m[r];
            let mnew = Q::C::max_nan(mold, max8(p));
            if mnew == Q::C::NEG_INF {
                p.fill(Q::C::ZERO);
                continue;
            }
            let alpha = (mold - mnew).exp();
            exp_shift(p, mnew);
            let s = sum8(p, |x| x);
            sc.l[r] = sc.l[r] * alpha + s;
            sc.m[r] = mnew;
            if alpha != Q::C::ONE {
                sc.o[r * dv..(r + 1) * dv].iter_mut().for_each(|o| *o = *o * alpha);
            }
        }
        for r in rows..rows4 {
            sc.p[r * BK..(r + 1) * BK].fill(Q::C::ZERO);
        }
        matmul_tile::<Q::C, FMA>(&sc.p, BK, &sc.vb, dv, &mut sc.o, dv, rows4, dv, nk, true);
        j0 += nk;
    }
    for r in 0..rows {
        let (t, h) = head(r);
        // SAFETY: each (token, head) row belongs to exactly one item.
        let dst = unsafe { w.out.slice((t * g.heads + h) * dv, dv) };
        let rl = Q::C::ONE / sc.l[r];
        for (o, &x) in dst.iter_mut().zip(&sc.o[r * dv..(r + 1) * dv]) {
            *o = Q::store(x * rl);
        }
    }
}
