//! `fused_norm`: an elementwise prologue (the residual add, a bias) computed row by row straight
//! into layer_norm / rms_norm. Each row of the prologue lives in per-task registers (L1), is
//! normalized there and written once, so the sum is never stored and read back.

use super::half_vec::{load, store};
use super::math::{Compute, Real, SharedMut, avx2_fma};
use super::nn::norm_simd;
use super::rows::{RowSrc, consts, region_row, row_src};
use super::{FLOATS, Kernel, KernelBuilder, KernelCtx, unsupported};
use crate::exec::Bufs;
use crate::threads::{num_threads, parallel_for};
use crate::with_float;
use rlx_driver::KernelTable;
use rlx_ir::ops::{Instr, NormKind};
use rlx_ir::{Op, OpKind, Result, Scalar};
use std::sync::Mutex;

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::FusedNorm, FLOATS, fused_norm);
}

fn fused_norm(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::FusedNorm(f) = ctx.op else { return Err(unsupported(ctx)) };
    let od = ctx.out_dims();
    let n = *od.last().ok_or_else(|| unsupported(ctx))?;
    let k = f.prologue_inputs();
    let srcs: Vec<RowSrc> = (0..k).map(|i| row_src(&od, &ctx.in_dims(i), 1)).collect();
    let rows = od.iter().product::<usize>().checked_div(n).unwrap_or(0);
    let layer = f.norm == NormKind::LayerNorm;
    let p = Plan { program: f.prologue.program.clone(), srcs, rows, n, eps: f.eps, layer };
    with_float!(ctx.out.dtype, T => Ok(build::<T>(p)), else Err(unsupported(ctx)))
}

/// What a built kernel needs.
struct Plan {
    program: Vec<Instr>,
    srcs: Vec<RowSrc>,
    rows: usize,
    n: usize,
    eps: f64,
    layer: bool,
}

fn build<T: Compute>(p: Plan) -> Kernel
where
    T::C: Scalar,
{
    let Plan { program, srcs, rows, n, eps, layer } = p;
    let k = srcs.len();
    let tasks = if rows * n < (1 << 15) { 1 } else { (num_threads() * 4).min(rows).max(1) };
    // One task's scratch: the prologue's registers for one row, in the compute type.
    let scratch: Vec<Mutex<Vec<T::C>>> = (0..tasks).map(|_| Mutex::new(vec![T::C::ZERO; program.len() * n])).collect();
    let consts = consts::<T::C>(&program);
    let mut gb = vec![T::C::ZERO; 2 * n];
    let (simd, eps) = (avx2_fma(), T::C::from_f64(eps));
    let last = program.len() - 1;
    // The prologue inputs as (address, length), refilled each run without allocating.
    let mut addrs: Vec<(usize, usize)> = Vec::with_capacity(k);
    Box::new(move |b: &Bufs<'_>| {
        load(&b.input::<T>(k)[..n], &mut gb[..n]);
        if layer {
            load(&b.input::<T>(k + 1)[..n], &mut gb[n..]);
        }
        let (gamma, beta) = gb.split_at(n);
        addrs.clear();
        addrs.extend((0..k).map(|i| (b.input::<T>(i).as_ptr() as usize, b.input::<T>(i).len())));
        let addrs = &addrs;
        let y = SharedMut(b.output::<T>().as_mut_ptr());
        parallel_for(tasks, &|task| {
            let mut regs = scratch[task].lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the inputs are arena or param bytes that outlive the run; fused_norm never
            // runs in place, so nothing writes them meanwhile.
            let input = |i: usize| unsafe { std::slice::from_raw_parts(addrs[i].0 as *const T, addrs[i].1) };
            for r in (task * rows / tasks)..((task + 1) * rows / tasks) {
                region_row(&program, &consts, &srcs, &input, &mut regs, r, n);
                let row = &mut regs[last * n..(last + 1) * n];
                norm_simd::<T::C>(simd, row, gamma, beta, eps, layer);
                // SAFETY: rows are disjoint, each task writes only its own rows.
                store(row, unsafe { y.slice(r * n, n) });
            }
        });
        Ok(())
    })
}
