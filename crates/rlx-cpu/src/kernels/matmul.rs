//! Matrix multiplication: `matrixmultiply` for f32/f64, a plain loop for the other dtypes.
//! Batch dims broadcast through index maps computed at compile time.

use super::{Kernel, KernelBuilder, KernelCtx, NUMERIC, unsupported};
use crate::elem::{FloatElem, IntElem};
use crate::exec::Bufs;
use crate::{with_float, with_int};
use rlx_driver::KernelTable;
use rlx_ir::ops::matmul::matmul_dims;
use rlx_ir::ops::util::broadcast_index_map;
use rlx_ir::{DType, OpKind, Result};

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::MatMul, NUMERIC, matmul);
}

/// Static geometry of a batched matmul.
#[derive(Clone)]
struct Geometry {
    m: usize,
    k: usize,
    n: usize,
    /// Per output batch: (a batch index, b batch index).
    batches: Vec<(usize, usize)>,
}

fn matmul(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let (ad, bd, od) = (ctx.in_dims(0), ctx.in_dims(1), ctx.out_dims());
    let (ba, bb, m, k, n) = matmul_dims(&ad, &bd);
    let batch = &od[..od.len() - 2];
    let ia = broadcast_index_map(batch, &ba);
    let ib = broadcast_index_map(batch, &bb);
    let geo = Geometry { m, k, n, batches: ia.into_iter().zip(ib).collect() };
    match ctx.out.dtype {
        DType::F32 => Ok(Box::new(move |b: &Bufs<'_>| {
            let (x, y, z) = (b.input::<f32>(0), b.input::<f32>(1), b.output::<f32>());
            let Geometry { m, k, n, .. } = geo;
            for (bi, &(pa, pb)) in geo.batches.iter().enumerate() {
                let (a, bm, c) = (&x[pa * m * k..], &y[pb * k * n..], &mut z[bi * m * n..]);
                // SAFETY: the slices hold m*k, k*n and m*n elements with these row-major strides.
                unsafe {
                    matrixmultiply::sgemm(
                        m,
                        k,
                        n,
                        1.0,
                        a.as_ptr(),
                        k as isize,
                        1,
                        bm.as_ptr(),
                        n as isize,
                        1,
                        0.0,
                        c.as_mut_ptr(),
                        n as isize,
                        1,
                    )
                };
            }
            Ok(())
        })),
        DType::F64 => Ok(Box::new(move |b: &Bufs<'_>| {
            let (x, y, z) = (b.input::<f64>(0), b.input::<f64>(1), b.output::<f64>());
            let Geometry { m, k, n, .. } = geo;
            for (bi, &(pa, pb)) in geo.batches.iter().enumerate() {
                let (a, bm, c) = (&x[pa * m * k..], &y[pb * k * n..], &mut z[bi * m * n..]);
                // SAFETY: as above.
                unsafe {
                    matrixmultiply::dgemm(
                        m,
                        k,
                        n,
                        1.0,
                        a.as_ptr(),
                        k as isize,
                        1,
                        bm.as_ptr(),
                        n as isize,
                        1,
                        0.0,
                        c.as_mut_ptr(),
                        n as isize,
                        1,
                    )
                };
            }
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
    let Geometry { m, k, n, .. } = *g;
    for (bi, &(pa, pb)) in g.batches.iter().enumerate() {
        for i in 0..m {
            for j in 0..n {
                let mut acc = zero;
                for p in 0..k {
                    acc = mac(acc, x[pa * m * k + i * k + p], y[pb * k * n + p * n + j]);
                }
                z[bi * m * n + i * n + j] = out(acc);
            }
        }
    }
}
