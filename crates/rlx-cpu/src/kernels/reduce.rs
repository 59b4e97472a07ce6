//! Reductions (sum, mean, max, min, prod) and argmax. Floats accumulate in f64, ints in i64.

use super::{Kernel, KernelBuilder, KernelCtx, NUMERIC, unsupported};
use crate::elem::{FloatElem, IntElem};
use crate::exec::Bufs;
use crate::{with_float, with_int};
use rlx_driver::KernelTable;
use rlx_ir::ops::ReduceKind;
use rlx_ir::ops::reduce::reduce_index_map;
use rlx_ir::ops::util::unravel;
use rlx_ir::shape::{normalize_axes, normalize_axis};
use rlx_ir::{Error, Op, OpKind, Result};

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::Reduce, NUMERIC, reduce);
    t.register(OpKind::ArgMax, NUMERIC, argmax);
}

fn reduce(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Reduce(r) = ctx.op else { return Err(unsupported(ctx)) };
    let dims = ctx.in_dims(0);
    let axes = normalize_axes(&r.axes, dims.len()).map_err(|e| Error::eval(r.kind.name(), e))?;
    let map: Vec<u32> = reduce_index_map(&dims, &axes).into_iter().map(|x| x as u32).collect();
    let count: usize = axes.iter().map(|&a| dims[a]).product();
    let n_out = ctx.out.numel().unwrap_or(0);
    let kind = r.kind;
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
