//! Reductions (sum, mean, max, min, prod), argmax, and reductions of an elementwise region
//! (`fused_reduce`). Floats accumulate in f64, ints in i64.

use super::half_vec::{CHUNK, is_half, widen_any};
use super::math::{Compute, SharedMut};
use super::rows::{RowSrc, consts, region_row, row_src};
use super::{FLOATS, Kernel, KernelBuilder, KernelCtx, NUMERIC, unsupported};
use crate::elem::{FloatElem, IntElem};
use crate::exec::Bufs;
use crate::threads::{num_threads, parallel_for};
use crate::{with_float, with_int};
use rlx_driver::KernelTable;
use rlx_ir::ops::reduce::reduce_index_map;
use rlx_ir::ops::util::unravel;
use rlx_ir::ops::{Instr, ReduceKind};
use rlx_ir::shape::{normalize_axes, normalize_axis};
use rlx_ir::{Error, Op, OpKind, Result, Scalar};
use std::sync::Mutex;

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::Reduce, NUMERIC, reduce);
    t.register(OpKind::ArgMax, NUMERIC, argmax);
    t.register(OpKind::FusedReduce, FLOATS, fused_reduce);
}

fn reduce(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Reduce(r) = ctx.op else { return Err(unsupported(ctx)) };
    let dims = ctx.in_dims(0);
    let axes = normalize_axes(&r.axes, dims.len()).map_err(|e| Error::eval(r.kind.name(), e))?;
    let count: usize = axes.iter().map(|&a| dims[a]).product();
    let n_out = ctx.out.numel().unwrap_or(0);
    let kind = r.kind;
    if let Some(split) = contiguous_split(&dims, &axes)
        && let Some(k) = with_float!(ctx.out.dtype, T => Some(strided::<T>(split, kind)), else None)
    {
        return Ok(k);
    }
    // The general case: each input element's output index, built only here (an input's worth of
    // indices: for a large activation it was most of a training graph's compile time).
    let map: Vec<u32> = reduce_index_map(&dims, &axes).into_iter().map(|x| x as u32).collect();
    with_float!(ctx.out.dtype, T => {
        let mut acc = vec![0.0f64; n_out];
        Ok(Box::new(move |b: &Bufs<'_>| {
            acc.fill(kind.init());
            for (&x, &o) in b.input::<T>(0).iter().zip(&map) {
                acc[o as usize] = kind.combine(acc[o as usize], x.to_f64());
            }
            let scale = if kind == ReduceKind::Mean { 1.0 / count as f64 } else { 1.0 };
            for (y, &a) in b.output::<T>().iter_mut().zip(&acc) {
                *y = T::from_f64(if kind == ReduceKind::Mean { a * scale } else { a });
            }
            Ok(())
        }))
    }, else with_int!(ctx.out.dtype, T => {
        let (lo, hi) = ctx.out.dtype.int_range().unwrap_or((i64::MIN, i64::MAX));
        let init = match kind { ReduceKind::Max => lo, ReduceKind::Min => hi, ReduceKind::Prod => 1, _ => 0 };
        let mut acc = vec![0i64; n_out];
        Ok(Box::new(move |b: &Bufs<'_>| {
            acc.fill(init);
            for (&x, &o) in b.input::<T>(0).iter().zip(&map) {
                let a = &mut acc[o as usize];
                let x = x.to_i64();
                *a = match kind {
                    ReduceKind::Max => (*a).max(x),
                    ReduceKind::Min => (*a).min(x),
                    ReduceKind::Prod => a.wrapping_mul(x),
                    _ => a.wrapping_add(x),
                };
            }
            for (y, &a) in b.output::<T>().iter_mut().zip(&acc) {
                *y = T::from_i64(a);
            }
            Ok(())
        }))
    }, else Err(unsupported(ctx))))
}

fn argmax(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::ArgMax(a) = ctx.op else { return Err(unsupported(ctx)) };
    let dims = ctx.in_dims(0);
    let axis = normalize_axis(a.axis, dims.len()).map_err(|e| Error::eval("argmax", e))?;
    let map: Vec<u32> = reduce_index_map(&dims, &[axis]).into_iter().map(|x| x as u32).collect();
    let pos: Vec<u32> = (0..map.len()).map(|i| unravel(i, &dims)[axis] as u32).collect();
    let n_out = ctx.out.numel().unwrap_or(0);
    let mut best = vec![0.0f64; n_out];
    // Same rule as the reference: first maximum wins; NaN counts as the largest.
    macro_rules! body {
        ($T:ty, $wide:expr) => {
            Ok(Box::new(move |b: &Bufs<'_>| {
                let out = b.output::<i64>();
                out.fill(-1);
                for ((&x, &o), &p) in b.input::<$T>(0).iter().zip(&map).zip(&pos) {
                    let (o, x) = (o as usize, $wide(x));
                    if out[o] < 0 || (!best[o].is_nan() && (x.is_nan() || x > best[o])) {
                        best[o] = x;
                        out[o] = p as i64;
                    }
                }
                Ok(())
            }))
        };
    }
    with_float!(ctx.ins[0].dtype, T => body!(T, |x: T| x.to_f64()),
        else with_int!(ctx.ins[0].dtype, T => body!(T, |x: T| x.to_i64() as f64), else Err(unsupported(ctx))))
}

/// `(outer, reduced, inner)` when the reduced axes form one contiguous run of dims.
fn contiguous_split(dims: &[usize], axes: &[usize]) -> Option<(usize, usize, usize)> {
    let (&first, &last) = (axes.first()?, axes.last()?);
    if last - first + 1 != axes.len() {
        return None;
    }
    let prod = |d: &[usize]| d.iter().product::<usize>();
    Some((prod(&dims[..first]), prod(&dims[first..=last]), prod(&dims[last + 1..])))
}

/// Columns of one accumulator block in the strided case (on the stack).
const COLS: usize = 256;

/// A float reduction over the middle dim of `[outer, reduced, inner]`: rows (inner = 1) reduce
/// with eight independent f64 accumulators, columns accumulate a block of lanes at a time.
/// Work is split over the pool by output element; results equal the index-map path's up to
/// summation order.
fn strided<T: FloatElem>(split: (usize, usize, usize), kind: ReduceKind) -> Kernel {
    // One copy of the loops per kind, so the combine step inlines and sums vectorize.
    match kind {
        ReduceKind::Sum | ReduceKind::Mean => strided_with::<T>(split, kind, |a, x| a + x),
        ReduceKind::Prod => strided_with::<T>(split, kind, |a, x| a * x),
        ReduceKind::Max => strided_with::<T>(split, kind, |a, x| ReduceKind::Max.combine(a, x)),
        ReduceKind::Min => strided_with::<T>(split, kind, |a, x| ReduceKind::Min.combine(a, x)),
    }
}

fn strided_with<T: FloatElem>(
    (outer, red, inner): (usize, usize, usize),
    kind: ReduceKind,
    combine: impl Fn(f64, f64) -> f64 + Copy + Send + Sync + 'static,
) -> Kernel {
    let scale = if kind == ReduceKind::Mean { 1.0 / red as f64 } else { 1.0 };
    let finish = move |a: f64| T::from_f64(if kind == ReduceKind::Mean { a * scale } else { a });
    let blocks = inner.div_ceil(COLS);
    let units = outer * blocks;
    let tasks = if outer * red * inner < 32 * 1024 { 1 } else { num_threads().min(units).max(1) };
    Box::new(move |b: &Bufs<'_>| {
        let x = b.input::<T>(0);
        let y = SharedMut(b.output::<T>().as_mut_ptr());
        parallel_for(tasks, &|task| {
            for unit in (task * units / tasks)..((task + 1) * units / tasks) {
                let (o, c0) = (unit / blocks, (unit % blocks) * COLS);
                if inner == 1 {
                    let v = reduce_row(&x[o * red..(o + 1) * red], kind.init(), combine);
                    // SAFETY: each unit owns one output element.
                    unsafe { y.write(o, finish(v)) };
                    continue;
                }
                let w = COLS.min(inner - c0);
                let (mut acc, mut wide) = ([kind.init(); COLS], [0f32; COLS]);
                for r in 0..red {
                    let row = &x[(o * red + r) * inner + c0..][..w];
                    // f16/bf16 rows are widened with SIMD first.
                    if widen_any(row, &mut wide[..w]) {
                        acc[..w].iter_mut().zip(&wide[..w]).for_each(|(a, &v)| *a = combine(*a, v as f64));
                    } else {
                        acc[..w].iter_mut().zip(row).for_each(|(a, v)| *a = combine(*a, v.to_f64()));
                    }
                }
                for (i, &a) in acc[..w].iter().enumerate() {
                    // SAFETY: the units' output blocks are disjoint.
                    unsafe { y.write(o * inner + c0 + i, finish(a)) };
                }
            }
        });
        Ok(())
    })
}

/// One contiguous row, eight lanes at a time (sum-like kinds vectorize; max/min keep NaN);
/// f16/bf16 rows are widened to f32 a chunk at a time with SIMD.
#[inline]
fn reduce_row<T: FloatElem>(row: &[T], init: f64, combine: impl Fn(f64, f64) -> f64) -> f64 {
    let mut lanes = [init; 8];
    let mut acc = init;
    if is_half::<T>() {
        let mut buf = [0f32; CHUNK];
        for c in row.chunks(CHUNK) {
            let b = &mut buf[..c.len()];
            widen_any(c, b);
            for &v in fold8(&mut lanes, b, |v| v as f64, &combine) {
                acc = combine(acc, v as f64);
            }
        }
    } else {
        for v in fold8(&mut lanes, row, T::to_f64, &combine) {
            acc = combine(acc, v.to_f64());
        }
    }
    lanes.into_iter().fold(acc, combine)
}

/// Folds the whole groups of eight of `v` into `lanes`; returns the remainder.
#[inline(always)]
fn fold8<'v, V: Copy>(
    lanes: &mut [f64; 8],
    v: &'v [V],
    wide: impl Fn(V) -> f64,
    combine: &impl Fn(f64, f64) -> f64,
) -> &'v [V] {
    let chunks = v.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &x) in lanes.iter_mut().zip(c) {
            *a = combine(*a, wide(x));
        }
    }
    tail
}

/// `fused_reduce` over trailing axes: each task evaluates the region one row at a time into its
/// registers (L1) and reduces the row there; nothing of the region is stored.
fn fused_reduce(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::FusedReduce(f) = ctx.op else { return Err(unsupported(ctx)) };
    let shapes: Vec<&rlx_ir::Shape> = ctx.ins.iter().collect();
    let region = rlx_ir::OpDef::infer(&f.prologue, &shapes).map_err(|e| Error::eval("fused_reduce", e))?;
    let od = region.fixed_dims().ok_or_else(|| unsupported(ctx))?;
    let mut axes = normalize_axes(&f.reduce.axes, od.len()).map_err(|e| Error::eval("fused_reduce", e))?;
    axes.sort_unstable();
    let k = axes.len();
    let (program, kind) = (f.prologue.program.clone(), f.reduce.kind);
    if k == 0 || axes.iter().enumerate().any(|(i, &a)| a != od.len() - k + i) {
        // The optimizer forms only row reductions; any other layout (built by hand) evaluates
        // the region into a buffer made at build time, then reduces it through an index map.
        let srcs: Vec<RowSrc> = (0..ctx.ins.len()).map(|i| row_src(&od, &ctx.in_dims(i), od.len())).collect();
        let map: Vec<u32> = reduce_index_map(&od, &axes).into_iter().map(|x| x as u32).collect();
        let count: usize = axes.iter().map(|&a| od[a]).product();
        let n_out = ctx.out.numel().unwrap_or(0);
        return with_float!(ctx.out.dtype, T => {
            let numel = od.iter().product::<usize>();
            let mut regs = vec![<<T as Compute>::C as super::math::Real>::ZERO; program.len() * numel];
            let consts = consts::<<T as Compute>::C>(&program);
            let mut acc = vec![0.0f64; n_out];
            let last = program.len() - 1;
            Ok(Box::new(move |b: &Bufs<'_>| {
                region_row(&program, &consts, &srcs, &|i| b.input::<T>(i), &mut regs, 0, numel);
                acc.fill(kind.init());
                for (&x, &o) in regs[last * numel..].iter().zip(&map) {
                    acc[o as usize] = kind.combine(acc[o as usize], x.to_f64());
                }
                let scale = if kind == ReduceKind::Mean { 1.0 / count as f64 } else { 1.0 };
                for (y, &a) in b.output::<T>().iter_mut().zip(&acc) {
                    *y = T::from_f64(a * scale);
                }
                Ok(())
            }) as Kernel)
        }, else Err(unsupported(ctx)));
    }
    let n: usize = od[od.len() - k..].iter().product();
    let rows = od.iter().product::<usize>().checked_div(n).unwrap_or(0);
    let srcs: Vec<RowSrc> = (0..ctx.ins.len()).map(|i| row_src(&od, &ctx.in_dims(i), k)).collect();
    with_float!(ctx.out.dtype, T => Ok(fused_reduce_kernel::<T>(program, srcs, rows, n, kind)), else Err(unsupported(ctx)))
}

fn fused_reduce_kernel<T: Compute>(
    program: Vec<Instr>,
    srcs: Vec<RowSrc>,
    rows: usize,
    n: usize,
    kind: ReduceKind,
) -> Kernel
where
    T::C: Scalar + FloatElem,
{
    let tasks = if rows * n < (1 << 15) { 1 } else { (num_threads() * 4).min(rows).max(1) };
    // Registers in the compute type: f16/bf16 regions run in f32.
    let scratch: Vec<Mutex<Vec<T::C>>> =
        (0..tasks).map(|_| Mutex::new(vec![<T::C as super::math::Real>::ZERO; program.len() * n])).collect();
    let consts = consts::<T::C>(&program);
    let last = program.len() - 1;
    let scale = if kind == ReduceKind::Mean { 1.0 / n as f64 } else { 1.0 };
    // The region inputs as (address, length), refilled each run without allocating.
    let mut addrs: Vec<(usize, usize)> = Vec::with_capacity(srcs.len());
    Box::new(move |b: &Bufs<'_>| {
        addrs.clear();
        addrs.extend((0..srcs.len()).map(|i| (b.input::<T>(i).as_ptr() as usize, b.input::<T>(i).len())));
        let addrs = &addrs;
        let y = SharedMut(b.output::<T>().as_mut_ptr());
        parallel_for(tasks, &|task| {
            let mut regs = scratch[task].lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the inputs are arena or param bytes that outlive the run; fused_reduce never
            // runs in place, so nothing writes them meanwhile.
            let input = |i: usize| unsafe { std::slice::from_raw_parts(addrs[i].0 as *const T, addrs[i].1) };
            for r in (task * rows / tasks)..((task + 1) * rows / tasks) {
                region_row(&program, &consts, &srcs, &input, &mut regs, r, n);
                let v = match kind {
                    ReduceKind::Sum | ReduceKind::Mean => reduce_row(&regs[last * n..], 0.0, |a, x| a + x) * scale,
                    ReduceKind::Prod => reduce_row(&regs[last * n..], 1.0, |a, x| a * x),
                    k => reduce_row(&regs[last * n..], k.init(), |a, x| k.combine(a, x)),
                };
                // SAFETY: each row writes only its own output element.
                unsafe { y.write(r, T::from_f64(v)) };
            }
        });
        Ok(())
    })
}
