//! Native row kernels for the normalizing composites: softmax and log_softmax (any axis),
//! layer_norm and rms_norm (last axis) and rope. Each lane is read once into a compute-type
//! buffer, reduced and written once; rows are split across the shared pool when large enough.

use super::math::{Compute, Real, SharedMut, avx2_fma, exp_shift, max8, sum8, sum32, sum32x2};
use super::{FLOATS, Kernel, KernelBuilder, KernelCtx, NUMERIC, unsupported};
use crate::exec::Bufs;
use crate::threads::{num_threads, parallel_for};
use crate::{with_float, with_int};
use rlx_driver::KernelTable;
use rlx_ir::shape::normalize_axis;
use rlx_ir::{Error, Op, OpKind, Result};
use std::sync::Mutex;

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::Softmax, FLOATS, softmax);
    t.register(OpKind::LogSoftmax, FLOATS, softmax);
    t.register(OpKind::LayerNorm, FLOATS, norm);
    t.register(OpKind::RmsNorm, FLOATS, norm);
    // x is float and the positions are integers (infer checks which is which).
    t.register(OpKind::Rope, NUMERIC, rope);
}

/// Below this many elements a kernel runs on the calling thread only.
const PAR_MIN: usize = 1 << 15;

/// How many tasks to split `lanes` lanes of `len` elements into.
fn tasks_for(lanes: usize, len: usize) -> usize {
    if lanes * len < PAR_MIN { 1 } else { (num_threads() * 4).min(lanes).max(1) }
}

/// Per-task scratch, sized at build time so that `run` allocates nothing.
fn scratch<C: Real>(tasks: usize, len: usize) -> Vec<Mutex<Vec<C>>> {
    (0..tasks).map(|_| Mutex::new(vec![C::ZERO; len])).collect()
}

/// Lanes `task`'s share of `0..lanes` when split into `tasks` contiguous ranges.
fn share(task: usize, tasks: usize, lanes: usize) -> std::ops::Range<usize> {
    (task * lanes / tasks)..((task + 1) * lanes / tasks)
}

/// The dims of a lane layout: `outer` blocks of `len` lanes elements, `inner` apart.
#[derive(Clone, Copy)]
struct Lanes {
    outer: usize,
    len: usize,
    inner: usize,
}

impl Lanes {
    fn count(&self) -> usize {
        self.outer * self.inner
    }
    /// First element and stride of lane `l`.
    fn start(&self, l: usize) -> usize {
        (l / self.inner) * self.len * self.inner + l % self.inner
    }
}

fn softmax(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let (axis, log) = match ctx.op {
        Op::Softmax(s) => (s.axis, false),
        Op::LogSoftmax(s) => (s.axis, true),
        _ => return Err(unsupported(ctx)),
    };
    let dims = ctx.in_dims(0);
    let name = ctx.op.def().name();
    let a = normalize_axis(axis, dims.len()).map_err(|e| Error::eval(name, e))?;
    let lanes = Lanes { outer: dims[..a].iter().product(), len: dims[a], inner: dims[a + 1..].iter().product() };
    with_float!(ctx.out.dtype, T => Ok(softmax_kernel::<T>(lanes, log)), else Err(unsupported(ctx)))
}

fn softmax_kernel<T: Compute>(ly: Lanes, log: bool) -> Kernel {
    let tasks = tasks_for(ly.count(), ly.len);
    let simd = avx2_fma();
    // Softmax of contiguous f32 rows straight from x into y with AVX-512 (x86-64 only: `avx512()`
    // is false elsewhere); the other cases copy each lane through a scratch buffer.
    let wide =
        !log && ly.inner == 1 && super::half_vec::cast::<T, f32>(&[]).is_some() && super::vec32::simd16::avx512();
    let bufs = scratch::<T::C>(tasks, if wide { 0 } else { ly.len });
    Box::new(move |b: &Bufs<'_>| {
        let x = b.input::<T>(0);
        let y = SharedMut(b.output::<T>().as_mut_ptr());
        parallel_for(tasks, &|task| {
            #[cfg(target_arch = "x86_64")]
            if wide {
                let (xs, lanes) =
                    (super::half_vec::cast::<T, f32>(x).expect("T is f32"), share(task, tasks, ly.count()));
                // SAFETY: tasks write disjoint row ranges of the output, which holds every row.
                let out = unsafe { y.slice(lanes.start * ly.len, lanes.len() * ly.len) };
                let out = super::half_vec::cast_mut::<T, f32>(out).expect("T is f32");
                for (r, o) in out.chunks_exact_mut(ly.len.max(1)).enumerate() {
                    let row = (lanes.start + r) * ly.len;
                    // SAFETY: `wide` holds only where the CPU has AVX-512F.
                    unsafe { super::vec32::simd16::softmax_row(&xs[row..row + ly.len], o) };
                }
                return;
            }
            let mut buf = bufs[task].lock().unwrap_or_else(|e| e.into_inner());
            for l in share(task, tasks, ly.count()) {
                let (s, st) = (ly.start(l), ly.inner);
                for (i, v) in buf.iter_mut().enumerate() {
                    *v = x[s + i * st].load();
                }
                softmax_simd::<T::C>(simd, &mut buf, log);
                for (i, &v) in buf.iter().enumerate() {
                    // SAFETY: lanes are disjoint, each task writes only its own lanes.
                    unsafe { y.write(s + i * st, T::store(v)) };
                }
            }
        });
        Ok(())
    })
}

crate::simd_entry!(softmax_simd = softmax_lane<C: Real>(v: &mut [C], log: bool));

/// Softmax (or log-softmax) of one lane in place. An all -inf lane gives NaN, as the reference.
#[inline(always)]
fn softmax_lane<C: Real, const FMA: bool>(v: &mut [C], log: bool) {
    let m = max8(v);
    if m == C::NEG_INF {
        v.fill(C::NAN);
        return;
    }
    if log {
        // log_softmax = x - m - ln(sum(exp(x - m))); the exps go through the lane once.
        let s = sum8(v, |x| (x - m).exp());
        let ls = m + s.ln();
        v.iter_mut().for_each(|x| *x = *x - ls);
    } else {
        exp_shift(v, m);
        let r = C::ONE / sum8(v, |x| x);
        v.iter_mut().for_each(|x| *x = *x * r);
    }
}

fn norm(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let (eps, layer) = match ctx.op {
        Op::LayerNorm(o) => (o.eps, true),
        Op::RmsNorm(o) => (o.eps, false),
        _ => return Err(unsupported(ctx)),
    };
    let dims = ctx.in_dims(0);
    let n = *dims.last().ok_or_else(|| unsupported(ctx))?;
    let rows = dims.iter().product::<usize>().checked_div(n).unwrap_or(0);
    with_float!(ctx.out.dtype, T => Ok(norm_kernel::<T>(rows, n, eps, layer)), else Err(unsupported(ctx)))
}

fn norm_kernel<T: Compute>(rows: usize, n: usize, eps: f64, layer: bool) -> Kernel {
    let tasks = tasks_for(rows, n);
    // Widening scratch for f16/bf16 rows; f32/f64 rows are normalized in the output.
    let bufs = scratch::<T::C>(tasks, if super::half_vec::is_half::<T>() { n } else { 0 });
    // Room for gamma and beta widened to the compute type (half params), refreshed every run:
    // params may change between runs.
    let mut gb = vec![T::C::ZERO; if super::half_vec::is_half::<T>() { 2 * n } else { 0 }];
    let simd = avx2_fma();
    let eps = T::C::from_f64(eps);
    Box::new(move |b: &Bufs<'_>| {
        let half = gb.len() / 2;
        let (gbuf, bbuf) = gb.split_at_mut(half);
        let gamma = param_row(b.input::<T>(1), gbuf);
        let beta = if layer { param_row(b.input::<T>(2), bbuf) } else { &*bbuf };
        let x = b.input::<T>(0);
        let y = SharedMut(b.output::<T>().as_mut_ptr());
        parallel_for(tasks, &|task| {
            let mut buf = bufs[task].lock().unwrap_or_else(|e| e.into_inner());
            for r in share(task, tasks, rows) {
                // SAFETY: rows are disjoint, each task writes only its own rows.
                let out = unsafe { y.slice(r * n, n) };
                // f32/f64 (T is T::C): normalized in place in the output row.
                if let Some(row) = super::half_vec::cast_mut::<T, T::C>(out) {
                    super::half_vec::load(&x[r * n..(r + 1) * n], row);
                    norm_simd::<T::C>(simd, row, gamma, beta, eps, layer);
                    continue;
                }
                // f16/bf16 rows are widened and narrowed with SIMD (half_vec.rs).
                super::half_vec::load(&x[r * n..(r + 1) * n], &mut buf);
                norm_simd::<T::C>(simd, &mut buf, gamma, beta, eps, layer);
                super::half_vec::store(&buf, out);
            }
        });
        Ok(())
    })
}

/// A norm's gamma or beta in the compute type: f32 / f64 as they are, halves widened into `buf`.
fn param_row<'a, T: Compute>(src: &'a [T], buf: &'a mut [T::C]) -> &'a [T::C] {
    match super::half_vec::cast::<T, T::C>(src) {
        Some(row) => row,
        None => {
            super::half_vec::load(src, buf);
            buf
        }
    }
}

crate::simd_entry!(pub(super) norm_simd = norm_row<C: Real>(v: &mut [C], gamma: &[C], beta: &[C], eps: C, layer: bool));

/// Layer norm (the variance of the row centred on a first mean) or rms norm, in place; the
/// sums keep 32 partial sums, so a row is not bound by the add latency.
#[inline(always)]
fn norm_row<C: Real, const FMA: bool>(v: &mut [C], gamma: &[C], beta: &[C], eps: C, layer: bool) {
    let inv_n = C::ONE / C::from_f64(v.len() as f64);
    if layer {
        // Centre on a first mean m1; the differences' own mean c is tiny, and their mean square
        // minus c^2 is their variance: rows far from 0 with a small spread keep their precision.
        let m1 = sum32(v, |x| x) * inv_n;
        let (sd, sq) = sum32x2(v, |x| x - m1, |x| (x - m1) * (x - m1));
        let c = sd * inv_n;
        let var = C::max_nan(sq * inv_n - c * c, C::ZERO);
        let r = C::ONE / (var + eps).sqrt();
        for ((x, &g), &bt) in v.iter_mut().zip(gamma).zip(beta) {
            *x = C::madd::<FMA>((*x - m1 - c) * r, g, bt);
        }
    } else {
        let ms = sum32(v, |x| x * x) * inv_n;
        let r = C::ONE / (ms + eps).sqrt();
        for (x, &g) in v.iter_mut().zip(gamma) {
            *x = *x * r * g;
        }
    }
}

fn rope(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Rope(op) = ctx.op else { return Err(unsupported(ctx)) };
    let dims = ctx.in_dims(0);
    if dims.len() != 4 || !dims[3].is_multiple_of(2) {
        return Err(unsupported(ctx));
    }
    let [_, h, s, d] = op.layout.bhsd(&dims);
    let per_pos = op.layout.rows_per_position(h);
    let inv = rlx_ir::ops::rope::rope_inv_freq(op.theta, d);
    let pdt = ctx.ins[1].dtype;
    let (numel, il) = (dims.iter().product(), op.interleaved);
    with_float!(ctx.out.dtype, T => with_int!(pdt, P => Ok(rope_kernel::<T, P>(numel, (s, per_pos), (d, il), inv)),
        else Err(unsupported(ctx))), else Err(unsupported(ctx)))
}

/// Rope over rows of `d`; row r is at position `r / per_pos % s` (`(s, per_pos)`); pairs are the
/// two halves of a row, or adjacent elements when `interleaved`.
fn rope_kernel<T: Compute, P: crate::elem::IntElem>(
    numel: usize,
    (s, per_pos): (usize, usize),
    (d, interleaved): (usize, bool),
    inv: Vec<f64>,
) -> Kernel {
    let half = d / 2;
    // cos and sin per (position row, frequency), recomputed only when the positions change: one
    // table after the other, so the rotation loop reads both as plain vectors.
    let mut table = vec![T::C::ZERO; 2 * s * half];
    let mut last: Vec<i64> = vec![0; s];
    let mut fresh = false;
    let rows = numel / d.max(1);
    let tasks = tasks_for(rows, d);
    Box::new(move |b: &Bufs<'_>| {
        let pos = b.input::<P>(1);
        if !fresh || pos.iter().zip(&last).any(|(p, l)| p.to_i64() != *l) {
            pos.iter().zip(&mut last).for_each(|(p, l)| *l = p.to_i64());
            // f64 cos and sin of every (position, frequency): split over the pool when there are
            // many (a long prefill's table is costly on one thread: session 18 in
            // docs/benchmarks-history.md).
            let (tab, last) = (SharedMut(table.as_mut_ptr()), &last);
            let chunks = if s * half < PAR_MIN / 16 { 1 } else { num_threads().min(s) };
            parallel_for(chunks, &|c| {
                for i in share(c, chunks, s) {
                    // SAFETY: chunks cover disjoint positions, so disjoint rows of both tables.
                    let (cos, sin) = unsafe { (tab.slice(i * half, half), tab.slice((s + i) * half, half)) };
                    for ((co, si), f) in cos.iter_mut().zip(sin.iter_mut()).zip(&inv) {
                        // Angles in f64 (exact for any position), as the reference.
                        let a = last[i] as f64 * f;
                        (*co, *si) = (T::C::from_f64(a.cos()), T::C::from_f64(a.sin()));
                    }
                }
            });
            fresh = true;
        }
        let (x, table) = (b.input::<T>(0), &table);
        let y = SharedMut(b.output::<T>().as_mut_ptr());
        parallel_for(tasks, &|task| {
            for r in share(task, tasks, rows) {
                let at = r / per_pos % s;
                let (cos, sin) = (&table[at * half..(at + 1) * half], &table[(s + at) * half..(s + at + 1) * half]);
                // SAFETY: rows are disjoint, each task writes only its own rows.
                let yr = unsafe { y.slice(r * d, d) };
                let xr = &x[r * d..(r + 1) * d];
                if interleaved {
                    for (((yp, xp), &c), &sn) in yr.chunks_exact_mut(2).zip(xr.chunks_exact(2)).zip(cos).zip(sin) {
                        let (a, b) = (xp[0].load(), xp[1].load());
                        yp[0] = T::store(a * c - b * sn);
                        yp[1] = T::store(b * c + a * sn);
                    }
                    continue;
                }
                let (x1, x2) = xr.split_at(half);
                let (y1, y2) = yr.split_at_mut(half);
                for i in 0..half {
                    let (a, b, c, sn) = (x1[i].load(), x2[i].load(), cos[i], sin[i]);
                    y1[i] = T::store(a * c - b * sn);
                    y2[i] = T::store(b * c + a * sn);
                }
            }
        });
        Ok(())
    })
}
