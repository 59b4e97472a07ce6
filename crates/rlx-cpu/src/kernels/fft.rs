//! fft / ifft / rfft / irfft through rustfft and realfft: plans made at compile time, lanes
//! split across the shared pool, scratch per task reserved at build time (a run allocates
//! nothing). Complex values are interleaved `(re, im)` pairs, which is rustfft's `Complex<T>`
//! layout, so complex lanes are transformed in the output buffer itself.

use super::math::SharedMut;
use super::{Kernel, KernelBuilder, KernelCtx, unsupported};
use crate::exec::Bufs;
use crate::threads::{num_threads, parallel_for};
use realfft::RealFftPlanner;
use rlx_driver::KernelTable;
use rlx_ir::ops::{Fft, FftKind};
use rlx_ir::{DType, Error, Op, OpKind, Result};
use rustfft::num_complex::Complex;
use rustfft::num_traits::Zero;
use rustfft::{FftDirection, FftNum, FftPlanner};
use std::sync::{Arc, Mutex};

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::Fft, &[DType::F32, DType::F64], fft);
}

/// Below this many points in all a transform runs on the calling thread only.
const PAR_MIN: usize = 1 << 15;

fn fft(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Fft(op) = ctx.op else { return Err(unsupported(ctx)) };
    let numel = ctx.ins[0].numel().ok_or_else(|| unsupported(ctx))?;
    match ctx.out.dtype {
        DType::F32 => build::<f32>(op, numel),
        DType::F64 => build::<f64>(op, numel),
        _ => Err(unsupported(ctx)),
    }
}

/// Per-task buffers: a copy of the real input lane (rfft), or of the complex one (irfft), and
/// the plan's scratch.
struct Scratch<T> {
    real: Vec<T>,
    cplx: Vec<Complex<T>>,
    work: Vec<Complex<T>>,
}

/// `count` lanes split into `tasks` contiguous shares.
fn share(task: usize, tasks: usize, count: usize) -> std::ops::Range<usize> {
    (task * count / tasks)..((task + 1) * count / tasks)
}

/// Reinterprets interleaved pairs as complex numbers.
fn as_complex<T>(v: &mut [T]) -> &mut [Complex<T>] {
    // SAFETY: `Complex<T>` is `repr(C)` `{ re: T, im: T }`: two T's, T's alignment; a pair
    // count of `len / 2` stays inside the slice.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut Complex<T>, v.len() / 2) }
}

fn fft_error(op: &Fft, e: impl std::fmt::Display) -> Error {
    Error::eval(op.kind.name(), format!("n = {}: {e}", op.n))
}

fn build<T: FftNum + bytemuck::Pod>(op: &Fft, numel: usize) -> Result<Kernel> {
    let op = op.clone();
    let (li, lo) = op.lane_lens();
    let (n, m) = (op.n, op.half());
    let lanes = numel / li;
    let tasks = if lanes * n < PAR_MIN { 1 } else { num_threads().min(lanes).max(1) };
    let scale = T::from_f64(op.norm.scale(op.kind, n)).unwrap_or_else(T::one);
    let scaled = op.norm.scale(op.kind, n) != 1.0;
    enum Plan<T: FftNum> {
        Complex(Arc<dyn rustfft::Fft<T>>),
        Forward(Arc<dyn realfft::RealToComplex<T>>),
        Inverse(Arc<dyn realfft::ComplexToReal<T>>),
    }
    let plan = match op.kind {
        FftKind::Fft | FftKind::Ifft => {
            let dir = if op.kind == FftKind::Fft { FftDirection::Forward } else { FftDirection::Inverse };
            Plan::Complex(FftPlanner::<T>::new().plan_fft(n, dir))
        }
        FftKind::Rfft => Plan::Forward(RealFftPlanner::<T>::new().plan_fft_forward(n)),
        FftKind::Irfft => Plan::Inverse(RealFftPlanner::<T>::new().plan_fft_inverse(n)),
    };
    let z = Complex::<T>::zero();
    let scratch: Vec<Mutex<Scratch<T>>> = (0..tasks)
        .map(|_| {
            let (real, cplx, work) = match &plan {
                Plan::Complex(p) => (0, 0, p.get_inplace_scratch_len()),
                Plan::Forward(p) => (n, 0, p.get_scratch_len()),
                Plan::Inverse(p) => (0, m, p.get_scratch_len()),
            };
            Mutex::new(Scratch { real: vec![T::zero(); real], cplx: vec![z; cplx], work: vec![z; work] })
        })
        .collect();
    Ok(Box::new(move |b: &Bufs<'_>| {
        let x = b.input::<T>(0);
        let y = b.output::<T>();
        if let Plan::Complex(_) = &plan {
            // Transformed in place in the output: copy first (the input may be a caller's buffer).
            y.copy_from_slice(x);
        }
        let out = SharedMut(y.as_mut_ptr());
        let failed: Mutex<Option<Error>> = Mutex::new(None);
        parallel_for(tasks, &|task| {
            let lanes_here = share(task, tasks, lanes);
            if lanes_here.is_empty() {
                return;
            }
            // SAFETY: tasks write disjoint lane ranges of the output, which holds every lane.
            let yl = unsafe { out.slice(lanes_here.start * lo, lanes_here.len() * lo) };
            let mut s = scratch[task].lock().unwrap_or_else(|e| e.into_inner());
            let Scratch { real, cplx, work } = &mut *s;
            let r = match &plan {
                Plan::Complex(p) => {
                    p.process_with_scratch(as_complex(yl), work);
                    Ok(())
                }
                Plan::Forward(p) => lanes_here.clone().zip(yl.chunks_exact_mut(lo)).try_for_each(|(l, o)| {
                    real.copy_from_slice(&x[l * li..(l + 1) * li]);
                    p.process_with_scratch(real, as_complex(o), work)
                }),
                Plan::Inverse(p) => lanes_here.clone().zip(yl.chunks_exact_mut(lo)).try_for_each(|(l, o)| {
                    for (c, pair) in cplx.iter_mut().zip(x[l * li..(l + 1) * li].chunks_exact(2)) {
                        *c = Complex { re: pair[0], im: pair[1] };
                    }
                    // numpy ignores the imaginary parts at DC and Nyquist; realfft rejects them.
                    cplx[0].im = T::zero();
                    if n % 2 == 0 {
                        cplx[m - 1].im = T::zero();
                    }
                    p.process_with_scratch(cplx, o, work)
                }),
            };
            if let Err(e) = r {
                *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(fft_error(&op, e));
            }
            if scaled {
                yl.iter_mut().for_each(|v| *v = *v * scale);
            }
        });
        match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }))
}
