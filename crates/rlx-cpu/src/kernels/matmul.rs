//! Matrix multiplication: RLX's packed GEMM (`crate::gemm`) for f32/f64, a plain loop for the other dtypes.
//! Batch dims broadcast through index maps computed at compile time.

use super::{Kernel, KernelBuilder, KernelCtx, NUMERIC, unsupported};
use crate::elem::{FloatElem, IntElem};
use crate::exec::Bufs;
use crate::gemm::{GemmElem, MatMut, MatRef, gemm};
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
struct Geometry {
    m: usize,
    k: usize,
    n: usize,
    /// Element strides (row, column) of a's `[m, k]` view and b's `[k, n]` view.
    sa: (usize, usize),
    sb: (usize, usize),
    /// Per output batch: (a batch index, b batch index).
    batches: Vec<(usize, usize)>,
}

fn matmul(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let (ad, bd, od) = (ctx.in_dims(0), ctx.in_dims(1), ctx.out_dims());
    let Op::MatMul(op) = ctx.op else { return Err(unsupported(ctx)) };
    let (ta, tb) = (op.transpose_a, op.transpose_b);
    let (ba, bb, m, k, n) = matmul_dims_t(&ad, &bd, ta, tb);
    let sa = if ta { (1, m) } else { (k, 1) };
    let sb = if tb { (1, k) } else { (n, 1) };
    let batch = &od[..od.len() - 2];
    let ia = broadcast_index_map(batch, &ba);
    let ib = broadcast_index_map(batch, &bb);
    let geo = Geometry { m, k, n, sa, sb, batches: ia.into_iter().zip(ib).collect() };
    match ctx.out.dtype {
        DType::F32 => Ok(Box::new(move |b: &Bufs<'_>| {
            packed::<f32>(&geo, b.input::<f32>(0), b.input::<f32>(1), b.output::<f32>());
            Ok(())
        })),
        DType::F64 => Ok(Box::new(move |b: &Bufs<'_>| {
            packed::<f64>(&geo, b.input::<f64>(0), b.input::<f64>(1), b.output::<f64>());
            Ok(())
        })),
        dt => with_float!(dt, T => Ok(Box::new(move |b: &Bufs<'_>| {
            naive(&geo, b.input::<T>(0), b.input::<T>(1), b.output::<T>(), 0.0, |acc, x: T, y: T| x.to_f64().mul_add(y.to_f64(), acc), T::from_f64);
            Ok(())
        })), else with_int!(dt, T => Ok(Box::new(move |b: &Bufs<'_>| {
            naive(&geo, b.input::<T>(0), b.input::<T>(1), b.output::<T>(), 0i64, |acc, x: T, y: T| acc.wrapping_add(x.to_i64().wrapping_mul(y.to_i64())), T::from_i64);
            Ok(())
        })), else Err(unsupported(ctx)))),
    }
}

/// One packed GEMM per output batch.
fn packed<T: GemmElem>(geo: &Geometry, x: &[T], y: &[T], z: &mut [T]) {
    let Geometry { m, k, n, sa, sb, .. } = *geo;
    for (bi, &(pa, pb)) in geo.batches.iter().enumerate() {
        let (a, bm, c) = (&x[pa * m * k..], &y[pb * k * n..], &mut z[bi * m * n..]);
        let av = MatRef { ptr: a.as_ptr(), rs: sa.0 as isize, cs: sa.1 as isize };
        let bv = MatRef { ptr: bm.as_ptr(), rs: sb.0 as isize, cs: sb.1 as isize };
        // SAFETY: the slices hold m*k, k*n and m*n elements; the strides address only those.
        unsafe { gemm(m, n, k, av, bv, MatMut { ptr: c.as_mut_ptr(), rs: n as isize }) };
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
