//! Matrix multiplication: RLX's packed GEMM (`crate::gemm`) for f32/f64, a plain loop for the other dtypes.
//! Batch dims broadcast through index maps computed at compile time.

use super::{Kernel, KernelBuilder, KernelCtx, NUMERIC, unsupported};
use crate::elem::{FloatElem, IntElem};
use crate::exec::Bufs;
use crate::gemm::{BSrc, GemmElem, MatMut, MatRef, gemm_src, pack_b_full, packed_b_len};
use crate::{with_float, with_int};
use rlx_driver::KernelTable;
use rlx_ir::ops::matmul::matmul_dims_t;
use rlx_ir::ops::util::broadcast_index_map;
use rlx_ir::{DType, Op, OpKind, Result};

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::MatMul, NUMERIC, matmul);
}

/// Static geometry of a batched matmul.
#[derive(Clone)]
pub(super) struct Geometry {
    m: usize,
    k: usize,
    n: usize,
    /// Element strides (row, column) of a's `[m, k]` view and b's `[k, n]` view.
    sa: (usize, usize),
    sb: (usize, usize),
    /// Per output batch: (a batch index, b batch index).
    batches: Vec<(usize, usize)>,
}

/// The geometry of a matmul node with `op`'s transpose flags (inputs 0 and 1 of `ctx`).
pub(super) fn geometry(ctx: &KernelCtx<'_>, op: &rlx_ir::ops::matmul::MatMul) -> Geometry {
    let (ad, bd, od) = (ctx.in_dims(0), ctx.in_dims(1), ctx.out_dims());
    let (ta, tb) = (op.transpose_a, op.transpose_b);
    let (ba, bb, m, k, n) = matmul_dims_t(&ad, &bd, ta, tb);
    let sa = if ta { (1, m) } else { (k, 1) };
    let sb = if tb { (1, k) } else { (n, 1) };
    let batch = &od[..od.len() - 2];
    let ia = broadcast_index_map(batch, &ba);
    let ib = broadcast_index_map(batch, &bb);
    Geometry { m, k, n, sa, sb, batches: ia.into_iter().zip(ib).collect() }
}

fn matmul(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::MatMul(op) = ctx.op else { return Err(unsupported(ctx)) };
    let geo = geometry(ctx, op);
    match ctx.out.dtype {
        DType::F32 => {
            let mut cache = BCache::default();
            Ok(Box::new(move |b: &Bufs<'_>| {
                let pb = cache.get(b.input_version(1), &geo, b.input::<f32>(1));
                packed::<f32>(&geo, b.input::<f32>(0), b.input::<f32>(1), b.output::<f32>(), pb, None);
                Ok(())
            }))
        }
        DType::F64 => {
            let mut cache = BCache::default();
            Ok(Box::new(move |b: &Bufs<'_>| {
                let pb = cache.get(b.input_version(1), &geo, b.input::<f64>(1));
                packed::<f64>(&geo, b.input::<f64>(0), b.input::<f64>(1), b.output::<f64>(), pb, None);
                Ok(())
            }))
        }
        dt => with_float!(dt, T => Ok(Box::new(move |b: &Bufs<'_>| {
            naive(&geo, b.input::<T>(0), b.input::<T>(1), b.output::<T>(), 0.0, |acc, x: T, y: T| x.to_f64().mul_add(y.to_f64(), acc), T::from_f64);
            Ok(())
        })), else with_int!(dt, T => Ok(Box::new(move |b: &Bufs<'_>| {
            naive(&geo, b.input::<T>(0), b.input::<T>(1), b.output::<T>(), 0i64, |acc, x: T, y: T| acc.wrapping_add(x.to_i64().wrapping_mul(y.to_i64())), T::from_i64);
            Ok(())
        })), else Err(unsupported(ctx)))),
    }
}

/// A callback on a finished run of output elements: `(first flat index, count)`.
pub(super) type FlatEpilogue<'a> = &'a (dyn Fn(usize, usize) + Sync);

/// B packed ahead of time when it is a param (a weight): packed on the second run that sees the
/// same version (so a param rewritten every run, as in training, is never packed twice), its
/// buffer allocated on the first.
#[derive(Default)]
pub(super) struct BCache<T> {
    buf: Vec<T>,
    packed: Option<u64>,
    seen: Option<u64>,
}

impl<T: GemmElem> BCache<T> {
    /// The packed B for this run, if it is cached (or worth caching now).
    pub(super) fn get(&mut self, version: Option<u64>, geo: &Geometry, y: &[T]) -> Option<*const T> {
        let v = version?;
        // Matrix-vector products stream B instead; one B shared by every batch only.
        if geo.m < 4 || geo.batches.iter().any(|&(_, pb)| pb != 0) {
            return None;
        }
        if self.packed == Some(v) {
            return Some(self.buf.as_ptr());
        }
        let (k, n) = (geo.k, geo.n);
        if self.seen != Some(v) {
            self.seen = Some(v);
            self.packed = None;
            self.buf.resize(packed_b_len::<T>(k, n), T::default());
            return None;
        }
        let view = MatRef { ptr: y.as_ptr(), rs: geo.sb.0 as isize, cs: geo.sb.1 as isize };
        // SAFETY: y holds k*n elements addressed by the strides; the buffer has the packed size.
        unsafe { pack_b_full(k, n, view, &mut self.buf) };
        self.packed = Some(v);
        Some(self.buf.as_ptr())
    }
}

/// One packed GEMM per output batch (B from `pb` when packed ahead of time); `epi` runs on each
/// finished run of the output while it is still in cache (from the GEMM's threads).
pub(super) fn packed<T: GemmElem>(
    geo: &Geometry,
    x: &[T],
    y: &[T],
    z: &mut [T],
    packed_b: Option<*const T>,
    epi: Option<FlatEpilogue<'_>>,
) {
    let Geometry { m, k, n, sa, sb, .. } = *geo;
    for (bi, &(pa, pb)) in geo.batches.iter().enumerate() {
        let (a, bm, c) = (&x[pa * m * k..], &y[pb * k * n..], &mut z[bi * m * n..]);
        let av = MatRef { ptr: a.as_ptr(), rs: sa.0 as isize, cs: sa.1 as isize };
        let bv = MatRef { ptr: bm.as_ptr(), rs: sb.0 as isize, cs: sb.1 as isize };
        let base = bi * m * n;
        let rows = |i0: usize, r: usize, j0: usize, w: usize| {
            if let Some(f) = epi {
                (i0..i0 + r).for_each(|i| f(base + i * n + j0, w));
            }
        };
        let tile: Option<crate::gemm::Epilogue<'_>> = epi.map(|_| &rows as _);
        let bs = packed_b.map_or(BSrc::View(bv), |p| BSrc::Packed(bv, p));
        // SAFETY: the slices hold m*k, k*n and m*n elements; the strides address only those; a
        // packed B was packed from this same B.
        unsafe { gemm_src(m, n, k, av, bs, MatMut { ptr: c.as_mut_ptr(), rs: n as isize }, tile) };
    }
}

/// Triple loop with a wide accumulator, for dtypes without a fast kernel.
fn naive<T: Copy, A: Copy>(
    g: &Geometry,
    x: &[T],
    y: &[T],
    z: &mut [T],
    zero: A,
    mac: impl Fn(A, T, T) -> A,
    out: impl Fn(A) -> T,
) {
    let Geometry { m, k, n, sa, sb, .. } = *g;
    for (bi, &(pa, pb)) in g.batches.iter().enumerate() {
        for i in 0..m {
            for j in 0..n {
                let mut acc = zero;
                for p in 0..k {
                    acc = mac(acc, x[pa * m * k + i * sa.0 + p * sa.1], y[pb * k * n + p * sb.0 + j * sb.1]);
                }
                z[bi * m * n + i * n + j] = out(acc);
            }
        }
    }
}
