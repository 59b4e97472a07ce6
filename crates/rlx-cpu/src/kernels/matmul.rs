//! Matrix multiplication: RLX's packed GEMM (`crate::gemm`) for f32/f64, its f16/bf16 variant
//! (`crate::gemm::half`: f32 sums, one rounding) for the half types, a plain loop for integers.
//! Batch dims broadcast through index maps computed at compile time.

use super::{Kernel, KernelBuilder, KernelCtx, NUMERIC, unsupported};
use crate::elem::IntElem;
use crate::exec::Bufs;
use crate::gemm::half::{self, HalfElem};
use crate::gemm::{BSrc, GemmElem, MatMut, MatRef, gemm_src, pack_b_full, packed_b_len};
use crate::with_int;
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
        DType::F16 => Ok(half_kernel::<::half::f16>(geo)),
        DType::BF16 => Ok(half_kernel::<::half::bf16>(geo)),
        dt => with_int!(dt, T => Ok(Box::new(move |b: &Bufs<'_>| {
            naive(&geo, b.input::<T>(0), b.input::<T>(1), b.output::<T>(), 0i64, |acc, x: T, y: T| acc.wrapping_add(x.to_i64().wrapping_mul(y.to_i64())), T::from_i64);
            Ok(())
        })), else Err(unsupported(ctx))),
    }
}

/// The f16/bf16 kernel: f32 sums, one rounding per output; a param B is packed (widened) once.
fn half_kernel<H: HalfElem + bytemuck::Pod>(geo: Geometry) -> Kernel {
    let mut cache = BCache::<f32>::default();
    Box::new(move |b: &Bufs<'_>| {
        let pb = cache.get_half(b.input_version(1), &geo, b.input::<H>(1));
        half_packed::<H>(&geo, b.input::<H>(0), b.input::<H>(1), b.output::<H>(), pb, None);
        Ok(())
    })
}

/// Products below this many flops per batch run one batch per pool task instead of splitting
/// each batch (attention's many small heads).
const HALF_BATCH_SPLIT_FLOPS: f64 = 4.0e6;

/// One f16/bf16 GEMM per output batch (B from `packed_b` when packed ahead of time); `epi` gets
/// each finished f32 run of the output `(first flat index, values)` before it is rounded.
pub(super) fn half_packed<H: HalfElem>(
    geo: &Geometry,
    x: &[H],
    y: &[H],
    z: &mut [H],
    packed_b: Option<*const f32>,
    epi: Option<half::FlatEpilogue<'_>>,
) {
    let Geometry { m, k, n, sa, sb, .. } = *geo;
    let (xp, yp, zp) = (x.as_ptr() as usize, y.as_ptr() as usize, z.as_mut_ptr() as usize);
    let pb = packed_b.map(|p| p as usize);
    let one = |bi: usize, threaded: bool| {
        let (pa, pbi) = geo.batches[bi];
        let av = MatRef { ptr: (xp as *const H).wrapping_add(pa * m * k), rs: sa.0 as isize, cs: sa.1 as isize };
        let bv = MatRef { ptr: (yp as *const H).wrapping_add(pbi * k * n), rs: sb.0 as isize, cs: sb.1 as isize };
        let c = MatMut { ptr: (zp as *mut H).wrapping_add(bi * m * n), rs: n as isize };
        let flat = |i: usize, j: usize, v: &mut [f32]| epi.map_or((), |f| f(bi * m * n + i * n + j, v));
        let tile = epi.map(|_| &flat as half::TileEpilogue<'_>);
        // SAFETY: the buffers hold every batch's m*k, k*n and m*n elements; the strides address
        // only those; batches write disjoint parts of z; a packed B was packed from this B.
        unsafe { half::gemm_src_epi(m, n, k, av, bv, pb.map(|p| p as *const f32), c, threaded, tile) };
    };
    let flops = 2.0 * (m * n) as f64 * k as f64;
    let batches = geo.batches.len();
    if batches > 1 && flops < HALF_BATCH_SPLIT_FLOPS && crate::threads::num_threads() > 1 {
        half::reserve_all(m, n, k, packed_b.is_some());
        crate::threads::parallel_for(batches, &|bi| one(bi, false));
    } else {
        (0..batches).for_each(|bi| one(bi, true));
    }
}

/// A callback on a finished block of the output: `(first flat index, rows, columns, row
/// stride)`, the rows `stride` elements apart.
pub(super) type BlockEpilogue<'a> = &'a (dyn Fn(usize, usize, usize, usize) + Sync);

/// B packed ahead of time when it is a param (a weight): packed on the second run that sees the
/// same version (so a param rewritten every run, as in training, is never packed twice), its
/// buffer allocated on the first.
#[derive(Default)]
pub(crate) struct BCache<T> {
    buf: Vec<T>,
    packed: Option<u64>,
    seen: Option<u64>,
}

impl<P: Copy + Default> BCache<P> {
    /// The packed B for this run, if it is cached (or worth caching now): `len` elements that
    /// `pack` fills from the param, from a 64-byte boundary. None as well where `stream` says
    /// the product streams B instead (matrix-vector shapes).
    pub(super) fn get_with(
        &mut self,
        version: Option<u64>,
        stream: bool,
        len: usize,
        pack: impl FnOnce(&mut [P]),
    ) -> Option<*const P> {
        let v = version?;
        if stream {
            return None;
        }
        if self.packed == Some(v) {
            return Some(crate::gemm::aligned_buf(&mut self.buf, len).as_ptr());
        }
        if self.seen != Some(v) {
            self.seen = Some(v);
            self.packed = None;
            crate::gemm::aligned_buf(&mut self.buf, len);
            return None;
        }
        let buf = crate::gemm::aligned_buf(&mut self.buf, len);
        pack(buf);
        self.packed = Some(v);
        Some(buf.as_ptr())
    }

    /// Whether a product of this geometry streams B (no packed copy): matrix-vector shapes, or
    /// batches with a B each.
    fn streams(geo: &Geometry) -> bool {
        geo.m < 4 || geo.batches.iter().any(|&(_, pb)| pb != 0)
    }
}

impl<T: GemmElem> BCache<T> {
    /// The packed B for this run, if it is cached (or worth caching now).
    pub(super) fn get(&mut self, version: Option<u64>, geo: &Geometry, y: &[T]) -> Option<*const T> {
        let (k, n) = (geo.k, geo.n);
        let view = MatRef { ptr: y.as_ptr(), rs: geo.sb.0 as isize, cs: geo.sb.1 as isize };
        // SAFETY: y holds k*n elements addressed by the strides; the buffer has the packed size.
        self.get_with(version, Self::streams(geo), packed_b_len::<T>(k, n), |buf| unsafe {
            pack_b_full(k, n, view, buf)
        })
    }
}

impl BCache<f32> {
    /// The widened, packed B of an f16/bf16 param, on the same schedule.
    pub(super) fn get_half<H: HalfElem>(
        &mut self,
        version: Option<u64>,
        geo: &Geometry,
        y: &[H],
    ) -> Option<*const f32> {
        let (k, n) = (geo.k, geo.n);
        let view = MatRef { ptr: y.as_ptr(), rs: geo.sb.0 as isize, cs: geo.sb.1 as isize };
        // SAFETY: y holds k*n elements addressed by the strides; the buffer has the packed size.
        self.get_with(version, Self::streams(geo), half::packed_b_len(k, n), |buf| unsafe {
            half::pack_b_full(k, n, view, buf)
        })
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
    epi: Option<BlockEpilogue<'_>>,
) {
    let Geometry { m, k, n, sa, sb, .. } = *geo;
    for (bi, &(pa, pb)) in geo.batches.iter().enumerate() {
        let (a, bm, c) = (&x[pa * m * k..], &y[pb * k * n..], &mut z[bi * m * n..]);
        let av = MatRef { ptr: a.as_ptr(), rs: sa.0 as isize, cs: sa.1 as isize };
        let bv = MatRef { ptr: bm.as_ptr(), rs: sb.0 as isize, cs: sb.1 as isize };
        let base = bi * m * n;
        let rows = |i0: usize, r: usize, j0: usize, w: usize| epi.map_or((), |f| f(base + i0 * n + j0, r, w, n));
        let tile: Option<crate::gemm::Epilogue<'_>> = epi.map(|_| &rows as _);
        let bs = packed_b.map_or(BSrc::View(bv), |p| BSrc::Packed(bv, p));
        // SAFETY: the slices hold m*k, k*n and m*n elements; the strides address only those; a
        // packed B was packed from this same B.
        unsafe { gemm_src(m, n, k, av, bs, MatMut { ptr: c.as_mut_ptr(), rs: n as isize }, tile) };
    }
}

/// Triple loop with a wide accumulator, for the integer dtypes.
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
