//! Ops whose positions depend on data: gather, scatter_add, top_k; and cumsum.

use super::{ALL, Kernel, KernelBuilder, KernelCtx, NUMERIC, unsupported};
use crate::elem::{FloatElem, IntElem};
use crate::exec::Bufs;
use crate::{with_float, with_int};
use rlx_driver::KernelTable;
use rlx_ir::ops::dynamic::clamp_start;
use rlx_ir::ops::topk::TopKOutput;
use rlx_ir::shape::normalize_axis;
use rlx_ir::{DType, Error, Op, OpKind, Result};
use std::cmp::Ordering;

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::Gather, ALL, gather);
    t.register(OpKind::ScatterAdd, NUMERIC, scatter_add);
    t.register(OpKind::Cumsum, NUMERIC, cumsum);
    t.register(OpKind::TopK, NUMERIC, top_k);
    t.register(OpKind::DynamicSlice, ALL, dynamic_slice);
    t.register(OpKind::DynamicUpdateSlice, ALL, dynamic_update_slice);
}

fn dynamic_slice(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::DynamicSlice(op) = ctx.op else { return Err(unsupported(ctx)) };
    let axis = axis_of(ctx, op.axis)?;
    let (outer, len, inner) = around(&ctx.in_dims(0), axis);
    let read = index_reader(ctx.ins[1].dtype).ok_or_else(|| unsupported(ctx))?;
    let (size, es) = (op.size, ctx.out.dtype.size_bytes());
    Ok(Box::new(move |b: &Bufs<'_>| {
        let start = clamp_start(read(b.input_bytes(1), 0), len, size);
        let (x, out) = (b.input_bytes(0), b.output_bytes());
        let block = size * inner * es;
        for o in 0..outer {
            let src = (o * len + start) * inner * es;
            out[o * block..(o + 1) * block].copy_from_slice(&x[src..src + block]);
        }
        Ok(())
    }))
}

/// Writes the update rows into the output; when the plan put the output on the operand's bytes
/// (a param updated in place, e.g. a KV cache), the operand is not copied first.
fn dynamic_update_slice(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::DynamicUpdateSlice(op) = ctx.op else { return Err(unsupported(ctx)) };
    let axis = axis_of(ctx, op.axis)?;
    let (outer, len, inner) = around(&ctx.in_dims(0), axis);
    let ulen = ctx.in_dims(1)[axis];
    let read = index_reader(ctx.ins[2].dtype).ok_or_else(|| unsupported(ctx))?;
    let es = ctx.out.dtype.size_bytes();
    Ok(Box::new(move |b: &Bufs<'_>| {
        let start = clamp_start(read(b.input_bytes(2), 0), len, ulen);
        if !b.in_place(0) {
            let x = b.input_bytes(0).as_ptr();
            let out = b.output_bytes();
            // SAFETY: not in place, so the operand and output ranges are distinct and equal in size.
            unsafe { std::ptr::copy_nonoverlapping(x, out.as_mut_ptr(), out.len()) };
        }
        let (u, block) = (b.input_bytes(1).as_ptr(), ulen * inner * es);
        let out = b.output_bytes();
        for o in 0..outer {
            let dst = (o * len + start) * inner * es;
            // SAFETY: the update is a different node, so its bytes never overlap the output.
            unsafe { std::ptr::copy_nonoverlapping(u.add(o * block), out.as_mut_ptr().add(dst), block) };
        }
        Ok(())
    }))
}

/// Splits dims around `axis` into (outer, axis length, inner).
fn around(dims: &[usize], axis: usize) -> (usize, usize, usize) {
    (dims[..axis].iter().product(), dims[axis], dims[axis + 1..].iter().product())
}

/// Reads index `j` of an integer tensor of dtype `dt` as i64.
fn index_reader(dt: DType) -> Option<fn(&[u8], usize) -> i64> {
    with_int!(dt, T => Some(|s, j| bytemuck::cast_slice::<u8, T>(s)[j].to_i64()), else None)
}

/// Checks an index against the axis length, naming the op.
fn bound(op: &str, i: i64, len: usize) -> Result<usize> {
    if i < 0 || i as usize >= len {
        return Err(Error::eval(op, format!("index {i} is out of range for an axis of length {len}")));
    }
    Ok(i as usize)
}

fn axis_of(ctx: &KernelCtx<'_>, axis: i64) -> Result<usize> {
    normalize_axis(axis, ctx.ins[0].rank()).map_err(|e| Error::eval(ctx.op.def().name(), e))
}

fn gather(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Gather(op) = ctx.op else { return Err(unsupported(ctx)) };
    let axis = axis_of(ctx, op.axis)?;
    let (outer, len, inner) = around(&ctx.in_dims(0), axis);
    let ni = ctx.ins[1].numel().unwrap_or(0);
    let read = index_reader(ctx.ins[1].dtype).ok_or_else(|| unsupported(ctx))?;
    let row = inner * ctx.out.dtype.size_bytes();
    Ok(Box::new(move |b: &Bufs<'_>| {
        let (x, idx, out) = (b.input_bytes(0), b.input_bytes(1), b.output_bytes());
        for o in 0..outer {
            for j in 0..ni {
                let i = bound("gather", read(idx, j), len)?;
                let src = (o * len + i) * row;
                let dst = (o * ni + j) * row;
                out[dst..dst + row].copy_from_slice(&x[src..src + row]);
            }
        }
        Ok(())
    }))
}

fn scatter_add(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::ScatterAdd(op) = ctx.op else { return Err(unsupported(ctx)) };
    let axis = axis_of(ctx, op.axis)?;
    let (outer, len, inner) = around(&ctx.in_dims(0), axis);
    let ni = ctx.ins[1].numel().unwrap_or(0);
    let read = index_reader(ctx.ins[1].dtype).ok_or_else(|| unsupported(ctx))?;
    macro_rules! body {
        ($T:ty, $add:expr) => {
            Ok(Box::new(move |b: &Bufs<'_>| {
                let (t, idx, u, out) = (b.input::<$T>(0), b.input_bytes(1), b.input::<$T>(2), b.output::<$T>());
                out.copy_from_slice(t);
                for o in 0..outer {
                    for j in 0..ni {
                        let i = bound("scatter_add", read(idx, j), len)?;
                        let d = (o * len + i) * inner;
                        let s = (o * ni + j) * inner;
                        $add(&mut out[d..d + inner], &u[s..s + inner]);
                    }
                }
                Ok(())
            }))
        };
    }
    with_float!(ctx.out.dtype, T => body!(T, add_into::<T>),
        else with_int!(ctx.out.dtype, T => body!(T, |out: &mut [T], u: &[T]| out.iter_mut().zip(u).for_each(|(a, &x)| {
            *a = T::from_i64(a.to_i64().wrapping_add(x.to_i64()))
        })),
        else Err(unsupported(ctx))))
}

/// `out[k] += u[k]`, rounded once per element as the reference (which adds in f64) does: f32 and
/// f64 add in their own type, f16/bf16 in f32 chunks. Rounding a sum first to a type of at
/// least 2p + 2 bits (f64 for f32, f32 for the halves) and then to p bits equals one rounding,
/// so every path gives the reference's bits.
fn add_into<T: FloatElem>(out: &mut [T], u: &[T]) {
    use super::half_vec::{cast, cast_mut};
    if let (Some(o), Some(x)) = (cast_mut::<T, f32>(out), cast::<T, f32>(u)) {
        o.iter_mut().zip(x).for_each(|(o, &x)| *o += x);
    } else if let (Some(o), Some(x)) = (cast_mut::<T, f64>(out), cast::<T, f64>(u)) {
        o.iter_mut().zip(x).for_each(|(o, &x)| *o += x);
    } else if let (Some(o), Some(x)) = (cast_mut::<T, half::bf16>(out), cast::<T, half::bf16>(u)) {
        add_half(o, x);
    } else if let (Some(o), Some(x)) = (cast_mut::<T, half::f16>(out), cast::<T, half::f16>(u)) {
        add_half(o, x);
    } else {
        out.iter_mut().zip(u).for_each(|(a, &x)| *a = T::from_f64(a.to_f64() + x.to_f64()));
    }
}

/// `add_into` for f16/bf16: widened a chunk at a time, added in f32, rounded once.
fn add_half<H: crate::gemm::half::HalfElem>(out: &mut [H], u: &[H]) {
    const CHUNK: usize = 256;
    let (mut a, mut b) = ([0f32; CHUNK], [0f32; CHUNK]);
    for (oc, uc) in out.chunks_mut(CHUNK).zip(u.chunks(CHUNK)) {
        let n = oc.len();
        super::half_vec::widen(oc, &mut a[..n]);
        super::half_vec::widen(uc, &mut b[..n]);
        a[..n].iter_mut().zip(&b[..n]).for_each(|(a, &b)| *a += b);
        super::half_vec::narrow(&a[..n], oc);
    }
}

fn cumsum(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Cumsum(op) = ctx.op else { return Err(unsupported(ctx)) };
    let axis = axis_of(ctx, op.axis)?;
    let (outer, len, inner) = around(&ctx.in_dims(0), axis);
    let (reverse, exclusive) = (op.reverse, op.exclusive);
    macro_rules! body {
        ($T:ty, $zero:expr, $wide:expr, $narrow:expr, $add:expr) => {
            Ok(Box::new(move |b: &Bufs<'_>| {
                let (x, y) = (b.input::<$T>(0), b.output::<$T>());
                for o in 0..outer {
                    for k in 0..inner {
                        let mut acc = $zero;
                        for step in 0..len {
                            let i = if reverse { len - 1 - step } else { step };
                            let at = (o * len + i) * inner + k;
                            let v = $wide(x[at]);
                            if exclusive {
                                y[at] = $narrow(acc);
                                acc = $add(acc, v);
                            } else {
                                acc = $add(acc, v);
                                y[at] = $narrow(acc);
                            }
                        }
                    }
                }
                Ok(())
            }))
        };
    }
    with_float!(ctx.out.dtype, T => body!(T, 0.0f64, |x: T| x.to_f64(), T::from_f64, |a: f64, v: f64| a + v),
        else with_int!(ctx.out.dtype, T => body!(T, 0i64, |x: T| x.to_i64(), T::from_i64, |a: i64, v: i64| a.wrapping_add(v)),
        else Err(unsupported(ctx))))
}

/// Descending, NaN first; callers break ties by the lower index (as the reference).
fn desc(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        _ => b.partial_cmp(&a).unwrap_or(Ordering::Equal),
    }
}

fn top_k(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::TopK(op) = ctx.op else { return Err(unsupported(ctx)) };
    let dims = ctx.in_dims(0);
    let n = dims.last().copied().unwrap_or(0);
    let rows = dims.iter().product::<usize>().checked_div(n).unwrap_or(0);
    let (k, output) = (op.k, op.output);
    let mut order: Vec<usize> = Vec::with_capacity(n);
    let mut keys: Vec<f64> = Vec::with_capacity(n);
    macro_rules! body {
        ($T:ty, $wide:expr) => {
            Ok(Box::new(move |b: &Bufs<'_>| {
                let x = b.input::<$T>(0);
                for r in 0..rows {
                    keys.clear();
                    keys.extend(x[r * n..(r + 1) * n].iter().map(|&v| $wide(v)));
                    order.clear();
                    order.extend(0..n);
                    order.sort_unstable_by(|&i, &j| desc(keys[i], keys[j]).then(i.cmp(&j)));
                    match output {
                        TopKOutput::Values => {
                            let y = b.output::<$T>();
                            for (c, &i) in order[..k].iter().enumerate() {
                                y[r * k + c] = x[r * n + i];
                            }
                        }
                        TopKOutput::Indices => {
                            let y = b.output::<i64>();
                            for (c, &i) in order[..k].iter().enumerate() {
                                y[r * k + c] = i as i64;
                            }
                        }
                    }
                }
                Ok(())
            }))
        };
    }
    match ctx.ins[0].dtype {
        // i64 does not fit f64 exactly: compare as integers.
        DType::I64 => {
            let mut ord: Vec<usize> = Vec::with_capacity(n);
            Ok(Box::new(move |b: &Bufs<'_>| {
                let x = b.input::<i64>(0);
                for r in 0..rows {
                    let row = &x[r * n..(r + 1) * n];
                    ord.clear();
                    ord.extend(0..n);
                    ord.sort_unstable_by(|&i, &j| row[j].cmp(&row[i]).then(i.cmp(&j)));
                    for (c, &i) in ord[..k].iter().enumerate() {
                        match output {
                            TopKOutput::Values => b.output::<i64>()[r * k + c] = row[i],
                            TopKOutput::Indices => b.output::<i64>()[r * k + c] = i as i64,
                        }
                    }
                }
                Ok(())
            }))
        }
        dt => with_float!(dt, T => body!(T, |v: T| v.to_f64()),
            else with_int!(dt, T => body!(T, |v: T| v.to_i64() as f64), else Err(unsupported(ctx)))),
    }
}
