//! `softmax_cross_entropy`: one loss per row, `max + ln(sum(exp(x - max))) - x[label]`. Each row
//! is read once into a per-task compute-type buffer (L1), reduced there with the vectorized max
//! and exp-sum, and one value is written; rows are split across the pool. No allocation per run.

use super::math::{Compute, Real, SharedMut, avx2_fma, max8, sum8};
use super::{Kernel, KernelBuilder, KernelCtx, NUMERIC, unsupported};
use crate::elem::IntElem;
use crate::exec::Bufs;
use crate::threads::{num_threads, parallel_for};
use crate::{with_float, with_int};
use rlx_driver::KernelTable;
use rlx_ir::{Op, OpKind, Result};
use std::sync::Mutex;

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    // Float logits and integer labels (infer checks which is which).
    t.register(OpKind::SoftmaxCrossEntropy, NUMERIC, softmax_cross_entropy);
}

fn softmax_cross_entropy(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::SoftmaxCrossEntropy(_) = ctx.op else { return Err(unsupported(ctx)) };
    let dims = ctx.in_dims(0);
    let c = *dims.last().ok_or_else(|| unsupported(ctx))?;
    let rows = dims.iter().product::<usize>().checked_div(c).unwrap_or(0);
    with_float!(ctx.out.dtype, T => with_int!(ctx.ins[1].dtype, L => Ok(build::<T, L>(rows, c)),
        else Err(unsupported(ctx))), else Err(unsupported(ctx)))
}

fn build<T: Compute, L: IntElem>(rows: usize, c: usize) -> Kernel {
    let tasks = if rows * c < (1 << 15) { 1 } else { (num_threads() * 4).min(rows).max(1) };
    let bufs: Vec<Mutex<Vec<T::C>>> = (0..tasks).map(|_| Mutex::new(vec![T::C::ZERO; c])).collect();
    let simd = avx2_fma();
    Box::new(move |b: &Bufs<'_>| {
        let (x, labels) = (b.input::<T>(0), b.input::<L>(1));
        let y = SharedMut(b.output::<T>().as_mut_ptr());
        parallel_for(tasks, &|task| {
            let mut buf = bufs[task].lock().unwrap_or_else(|e| e.into_inner());
            for r in (task * rows / tasks)..((task + 1) * rows / tasks) {
                // f16/bf16 rows are widened with SIMD.
                super::half_vec::load(&x[r * c..(r + 1) * c], &mut buf);
                let loss = row_loss::<T::C>(simd, &buf, labels[r].to_i64());
                // SAFETY: each row writes only its own output element.
                unsafe { y.write(r, T::store(loss)) };
            }
        });
        Ok(())
    })
}

/// The loss of one row: `lse - x[label]`, or 0 when the label is outside the row (an ignored
/// row). An all -inf row gives NaN, as the reference.
fn row_loss<C: Real>(simd: bool, v: &[C], label: i64) -> C {
    let mut out = C::ZERO;
    row_simd::<C>(simd, v, label, &mut out);
    out
}

crate::simd_entry!(row_simd = row_body<C: Real>(v: &[C], label: i64, out: &mut C));

#[inline(always)]
fn row_body<C: Real, const FMA: bool>(v: &[C], label: i64, out: &mut C) {
    let Some(&picked) = usize::try_from(label).ok().and_then(|l| v.get(l)) else {
        *out = C::ZERO;
        return;
    };
    let m = max8(v);
    if m == C::NEG_INF {
        *out = C::NAN;
        return;
    }
    *out = m + sum8(v, |x| (x - m).exp()).ln() - picked;
}

#[cfg(test)]
mod tests {
    use crate::CpuBackend;
    use rlx_ir::{DType, Graph, HostTensor, Shape};

    /// Rows large enough to split over the pool, with labels in and outside the row.
    #[test]
    fn threaded_rows_match_the_reference() {
        let (rows, c) = (700, 97);
        let mut g = Graph::new("ce");
        let x = g.input("x", Shape::new(&[rows, c], DType::F32));
        let y = g.input("y", Shape::new(&[rows], DType::I64));
        let l = g.softmax_cross_entropy(x, y);
        g.set_outputs(vec![l]);
        let xs: Vec<f64> = rlx_ir::ops::util::rand_f64(rows * c, -8.0, 8.0, 3);
        let ys: Vec<i64> = (0..rows as i64).map(|r| if r % 50 == 7 { -1 } else { (r * 31) % c as i64 }).collect();
        let feeds = [
            ("x", HostTensor::from_f64(&[rows, c], DType::F32, &xs).unwrap()),
            ("y", HostTensor::from_i64(&[rows], DType::I64, &ys).unwrap()),
        ];
        let want = rlx_ir::interp::evaluate(&g, &feeds).unwrap()[0].to_f64_vec().unwrap();
        let got = rlx_driver::run_host(&CpuBackend::new(), &g, &feeds).unwrap()[0].to_f64_vec().unwrap();
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }
}
