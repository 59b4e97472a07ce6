//! Elementwise kernels: unary and binary families, comparisons, where and cast. They evaluate
//! the same scalar expressions as the reference (`UnaryKind::eval`, `BinaryKind::eval`).

use super::epilogue::Layout;
use super::fused::{Buf, Src, src};
use super::{ALL, Kernel, KernelBuilder, KernelCtx, NUMERIC, REAL_AND_BOOL, unsupported};
use crate::elem::{FloatElem, IntElem};
use crate::exec::Bufs;
use crate::gemm::half::HalfElem;
use crate::{with_float, with_int};
use half::{bf16, f16};
use rlx_driver::KernelTable;
use rlx_ir::ops::util::broadcast_index_map;
use rlx_ir::ops::{BinaryKind, Instr};
use rlx_ir::{DType, Op, OpKind, Result};

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::Unary, NUMERIC, unary);
    t.register(OpKind::Binary, NUMERIC, binary);
    t.register(OpKind::Compare, REAL_AND_BOOL, compare);
    t.register(OpKind::Where, REAL_AND_BOOL, where_);
    t.register(OpKind::Binary, &[DType::C64], binary_complex);
    t.register(OpKind::Cast, ALL, cast);
}

/// Complex arithmetic on c64 stored as (re, im) f32 pairs, through the family's complex form.
fn binary_complex(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Binary(op) = ctx.op else { return Err(unsupported(ctx)) };
    let kind = op.kind;
    if kind.eval_complex([1.0, 0.0], [1.0, 0.0]).is_none() {
        return Err(unsupported(ctx));
    }
    let p = pairing(ctx);
    Ok(Box::new(move |b: &Bufs<'_>| {
        zip_broadcast(&p, b.input::<[f32; 2]>(0), b.input::<[f32; 2]>(1), b.output::<[f32; 2]>(), |x, y| {
            let z = kind.eval_complex([x[0] as f64, x[1] as f64], [y[0] as f64, y[1] as f64]).unwrap_or([f64::NAN; 2]);
            [z[0] as f32, z[1] as f32]
        });
        Ok(())
    }))
}

fn unary(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Unary(u) = ctx.op else { return Err(unsupported(ctx)) };
    let kind = u.kind;
    with_float!(ctx.out.dtype, T => Ok(Box::new(move |b: &Bufs<'_>| {
        // f32 runs the vectorized loop of vec32.rs (polynomial exp/tanh/erf), like fused regions.
        let (x, out) = (b.input::<T>(0), b.output::<T>());
        split(out, |s0, out| {
            let x = &x[s0..s0 + out.len()];
            // f16/bf16 widen a chunk at a time and run the same f32 loop, then round once.
            if !super::vec32::unary(kind, x, out) && !super::half_vec::unary(kind, x, out) {
                out.iter_mut().zip(x).for_each(|(y, &x)| *y = kind.eval(x));
            }
        });
        Ok(())
    })), else with_int!(ctx.out.dtype, T => Ok(Box::new(move |b: &Bufs<'_>| {
        for (y, &x) in b.output::<T>().iter_mut().zip(b.input::<T>(0)) {
            *y = T::from_i64(kind.eval_int(x.to_i64()).unwrap_or(0));
        }
        Ok(())
    })), else Err(unsupported(ctx))))
}

/// How the two inputs of a broadcasting op line up with the output.
enum Pairing {
    Same,
    ScalarA,
    ScalarB,
    /// Suffix (bias-like) or prefix (per-row) broadcasts, read as runs: no index maps.
    Runs(Layout, Layout),
    Maps(Vec<u32>, Vec<u32>),
}

fn pairing(ctx: &KernelCtx<'_>) -> Pairing {
    pairing_of(&ctx.in_dims(0), &ctx.in_dims(1), &ctx.out_dims())
}

/// The pairing of inputs of dims `a` and `b` with an output of dims `o`.
fn pairing_of(a: &[usize], b: &[usize], o: &[usize]) -> Pairing {
    let (na, nb): (usize, usize) = (a.iter().product(), b.iter().product());
    if a == o && b == o {
        Pairing::Same
    } else if na == 1 && b == o {
        Pairing::ScalarA
    } else if nb == 1 && a == o {
        Pairing::ScalarB
    } else {
        match (Layout::of(&src(o, a)), Layout::of(&src(o, b))) {
            (Some(la), Some(lb)) => Pairing::Runs(la, lb),
            _ => {
                let m = |d: &[usize]| broadcast_index_map(o, d).into_iter().map(|i| i as u32).collect();
                Pairing::Maps(m(a), m(b))
            }
        }
    }
}

/// Shortest broadcast run worth a vectorized loop (and its call) per run.
const MIN_VECTOR_RUN: usize = 16;

/// Runs `f(first element, part)` over the whole output, or over one part per thread when the
/// output is large (the parts are disjoint).
fn split<T>(out: &mut [T], f: impl Fn(usize, &mut [T]) + Sync) {
    let n = out.len();
    let tasks = if n >= super::fused::PARALLEL_MIN { crate::threads::num_threads() } else { 1 };
    if tasks <= 1 {
        return f(0, out);
    }
    let o = out.as_mut_ptr() as usize;
    crate::threads::parallel_for(tasks, &|t| {
        // Parts of whole cache lines (16 f32): threads never write the same line.
        let cut = |t: usize| (t * n / tasks).next_multiple_of(16).min(n);
        let (s0, s1) = (cut(t), cut(t + 1));
        // SAFETY: tasks write disjoint ranges of the output.
        f(s0, unsafe { std::slice::from_raw_parts_mut((o as *mut T).add(s0), s1 - s0) })
    });
}

/// f32 `out = op(a, b)` over broadcast runs (a bias, a per-row value): each run one vectorized
/// loop, large outputs split across the pool.
fn runs_f32(op: BinaryKind, la: Layout, lb: Layout, a: &[f32], b: &[f32], out: &mut [f32]) {
    split(out, |s0, out| {
        la.runs(s0, out.len(), |off, len, i, step_a| {
            lb.runs(s0 + off, len, |off2, len2, j, step_b| {
                let o = &mut out[off + off2..off + off2 + len2];
                let i = if step_a { i + off2 } else { i };
                match (step_a, step_b) {
                    (true, true) => {
                        super::vec32::binary(op, &a[i..i + len2], &b[j..j + len2], o);
                    }
                    (true, false) => {
                        o.copy_from_slice(&a[i..i + len2]);
                        super::epilogue::binary_scalar_f32(op, o, b[j], true);
                    }
                    (false, true) => {
                        o.copy_from_slice(&b[j..j + len2]);
                        super::epilogue::binary_scalar_f32(op, o, a[i], false);
                    }
                    (false, false) => o.fill(op.eval(a[i], b[j])),
                }
            })
        })
    });
}

/// Applies `f` over broadcast pairs of inputs 0 and 1 into the output.
#[inline(always)]
fn zip_broadcast<A: Copy, O>(p: &Pairing, a: &[A], b: &[A], out: &mut [O], f: impl Fn(A, A) -> O) {
    match p {
        Pairing::Same => out.iter_mut().zip(a.iter().zip(b)).for_each(|(o, (&x, &y))| *o = f(x, y)),
        Pairing::ScalarA => out.iter_mut().zip(b).for_each(|(o, &y)| *o = f(a[0], y)),
        Pairing::ScalarB => out.iter_mut().zip(a).for_each(|(o, &x)| *o = f(x, b[0])),
        Pairing::Maps(ia, ib) => {
            out.iter_mut().zip(ia.iter().zip(ib)).for_each(|(o, (&i, &j))| *o = f(a[i as usize], b[j as usize]))
        }
        Pairing::Runs(la, lb) => la.runs(0, out.len(), |off, len, i, step_a| {
            lb.runs(off, len, |off2, len2, j, step_b| {
                let o = &mut out[off + off2..off + off2 + len2];
                let i = if step_a { i + off2 } else { i };
                match (step_a, step_b) {
                    (true, true) => o.iter_mut().zip(a[i..].iter().zip(&b[j..])).for_each(|(o, (&x, &y))| *o = f(x, y)),
                    (true, false) => o.iter_mut().zip(&a[i..]).for_each(|(o, &x)| *o = f(x, b[j])),
                    (false, true) => o.iter_mut().zip(&b[j..]).for_each(|(o, &y)| *o = f(a[i], y)),
                    (false, false) => o.iter_mut().for_each(|o| *o = f(a[i], b[j])),
                }
            })
        }),
    }
}

fn binary(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Binary(op) = ctx.op else { return Err(unsupported(ctx)) };
    let kind = op.kind;
    // f16/bf16: a one-op region in f32 over widened chunks, broadcasts read as runs (half_fused.rs).
    super::half_fused::with_half!(ctx.out.dtype, H => {
        let od = ctx.out_dims();
        let srcs = (0..2).map(|i| (Buf::In(i), src(&od, &ctx.in_dims(i)))).collect();
        let program = vec![Instr::Input(0), Instr::Input(1), Instr::Binary(kind, 0, 1)];
        return Ok(super::half_fused::build::<H>(program, srcs, od.iter().product()));
    }, else {});
    let p = pairing(ctx);
    with_float!(ctx.out.dtype, T => Ok(Box::new(move |b: &Bufs<'_>| {
        let (x, y, out) = (b.input::<T>(0), b.input::<T>(1), b.output::<T>());
        if matches!(p, Pairing::Same) && super::vec32::as_f32(x).is_some() {
            split(out, |s0, out| {
                let n = out.len();
                super::vec32::binary(kind, &x[s0..s0 + n], &y[s0..s0 + n], out);
            });
            return Ok(());
        }
        if let Pairing::Runs(la, lb) = p
            && la.run_len(out.len()).min(lb.run_len(out.len())) >= MIN_VECTOR_RUN
            && let (Some(x), Some(y), Some(out)) =
                (super::vec32::as_f32(x), super::vec32::as_f32(y), super::vec32::as_f32_mut(out))
        {
            runs_f32(kind, la, lb, x, y, out);
            return Ok(());
        }
        zip_broadcast(&p, x, y, out, |x, y| kind.eval(x, y));
        Ok(())
    })), else with_int!(ctx.out.dtype, T => Ok(Box::new(move |b: &Bufs<'_>| {
        zip_broadcast(&p, b.input::<T>(0), b.input::<T>(1), b.output::<T>(), |x, y| {
            T::from_i64(kind.eval_int(x.to_i64(), y.to_i64()).unwrap_or(0))
        });
        Ok(())
    })), else Err(unsupported(ctx))))
}

fn compare(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Compare(op) = ctx.op else { return Err(unsupported(ctx)) };
    let kind = op.kind;
    let p = pairing(ctx);
    let dt = ctx.ins[0].dtype;
    if dt == DType::Bool {
        return Ok(Box::new(move |b: &Bufs<'_>| {
            zip_broadcast(&p, b.input::<u8>(0), b.input::<u8>(1), b.output::<u8>(), |x, y| kind.eval(x, y) as u8);
            Ok(())
        }));
    }
    with_float!(dt, T => Ok(Box::new(move |b: &Bufs<'_>| {
        zip_broadcast(&p, b.input::<T>(0), b.input::<T>(1), b.output::<u8>(), |x, y| kind.eval(x, y) as u8);
        Ok(())
    })), else with_int!(dt, T => Ok(Box::new(move |b: &Bufs<'_>| {
        zip_broadcast(&p, b.input::<T>(0), b.input::<T>(1), b.output::<u8>(), |x, y| kind.eval(x, y) as u8);
        Ok(())
    })), else Err(unsupported(ctx))))
}

fn where_(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let o = ctx.out_dims();
    // An input of the output's shape is read directly, a one-element one as a splat; others
    // through an index map (one load per element, not a division as `Src::Cycle` would cost).
    let srcs: Vec<Src> = (0..3)
        .map(|i| match src(&o, &ctx.in_dims(i)) {
            s @ (Src::Same | Src::Splat) => s,
            _ => Src::Map(broadcast_index_map(&o, &ctx.in_dims(i)).into_iter().map(|x| x as u32).collect()),
        })
        .collect();
    Ok(match ctx.out.dtype.size_bytes() {
        1 => where_typed::<u8>(srcs),
        2 => where_typed::<u16>(srcs),
        4 => where_typed::<u32>(srcs),
        8 => where_typed::<u64>(srcs),
        size => Box::new(move |b: &Bufs<'_>| {
            let (c, x, y, out) = (b.input_bytes(0), b.input_bytes(1), b.input_bytes(2), b.output_bytes());
            for (i, dst) in out.chunks_exact_mut(size).enumerate() {
                let (src, j) = if c[srcs[0].index(i)] != 0 { (x, srcs[1].index(i)) } else { (y, srcs[2].index(i)) };
                dst.copy_from_slice(&src[j * size..(j + 1) * size]);
            }
            Ok(())
        }),
    })
}

/// `where` on elements of one size, moved as plain words. Without index maps: a scalar
/// condition copies (or fills) the chosen branch whole; otherwise one pass with the branches
/// read in place or splat (the loss scaler's `where(finite, update, old)` over every weight).
fn where_typed<E: bytemuck::Pod>(srcs: Vec<Src>) -> Kernel {
    Box::new(move |b: &Bufs<'_>| {
        let (c, x, y, out) = (b.input::<u8>(0), b.input::<E>(1), b.input::<E>(2), b.output::<E>());
        if srcs.iter().all(|s| matches!(s, Src::Same | Src::Splat)) {
            let splat = |k: usize| matches!(srcs[k], Src::Splat);
            if splat(0) {
                let (src, k) = if c[0] != 0 { (x, 1) } else { (y, 2) };
                if splat(k) {
                    out.fill(src[0])
                } else {
                    out.copy_from_slice(src)
                }
                return Ok(());
            }
            match (splat(1), splat(2)) {
                (false, false) => out
                    .iter_mut()
                    .zip(c.iter().zip(x.iter().zip(y)))
                    .for_each(|(o, (&c, (&x, &y)))| *o = if c != 0 { x } else { y }),
                (true, false) => {
                    out.iter_mut().zip(c.iter().zip(y)).for_each(|(o, (&c, &y))| *o = if c != 0 { x[0] } else { y })
                }
                (false, true) => {
                    out.iter_mut().zip(c.iter().zip(x)).for_each(|(o, (&c, &x))| *o = if c != 0 { x } else { y[0] })
                }
                (true, true) => out.iter_mut().zip(c).for_each(|(o, &c)| *o = if c != 0 { x[0] } else { y[0] }),
            }
            return Ok(());
        }
        for (i, o) in out.iter_mut().enumerate() {
            *o = if c[srcs[0].index(i)] != 0 { x[srcs[1].index(i)] } else { y[srcs[2].index(i)] };
        }
        Ok(())
    })
}

/// A widened value, as the reference holds it.
#[derive(Clone, Copy)]
enum Wide {
    F(f64),
    I(i64),
    C(f64, f64),
}

fn load(dt: DType) -> fn(&[u8], usize) -> Wide {
    if dt == DType::C64 {
        return |s, i| {
            let c = bytemuck::cast_slice::<u8, [f32; 2]>(s)[i];
            Wide::C(c[0] as f64, c[1] as f64)
        };
    }
    with_float!(dt, T => |s, i| Wide::F(bytemuck::cast_slice::<u8, T>(s)[i].to_f64()),
        else with_int!(dt, T => |s, i| Wide::I(bytemuck::cast_slice::<u8, T>(s)[i].to_i64()),
        else |s, i| Wide::I((s[i] != 0) as i64)))
}

fn store(dt: DType) -> fn(&mut [u8], usize, Wide) {
    // Float to int truncates toward zero and saturates to i64, then wraps, as the reference does.
    // Complex to real keeps the real part, as the reference does.
    fn as_f(w: Wide) -> f64 {
        match w {
            Wide::F(x) | Wide::C(x, _) => x,
            Wide::I(x) => x as f64,
        }
    }
    fn as_i(w: Wide) -> i64 {
        match w {
            Wide::F(x) | Wide::C(x, _) => x as i64,
            Wide::I(x) => x,
        }
    }
    if dt == DType::C64 {
        return |s, i, w| {
            let c = match w {
                Wide::C(re, im) => [re as f32, im as f32],
                w => [as_f(w) as f32, 0.0],
            };
            bytemuck::cast_slice_mut::<u8, [f32; 2]>(s)[i] = c;
        };
    }
    with_float!(dt, T => |s, i, w| bytemuck::cast_slice_mut::<u8, T>(s)[i] = T::from_f64(as_f(w)),
    else with_int!(dt, T => |s, i, w| bytemuck::cast_slice_mut::<u8, T>(s)[i] = T::from_i64(as_i(w)),
    else |s, i, w| s[i] = match w {
        Wide::F(x) => (x != 0.0) as u8,
        Wide::I(x) => (x != 0) as u8,
        Wide::C(re, im) => (re != 0.0 || im != 0.0) as u8,
    }))
}

fn cast(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let (from, to) = (ctx.ins[0].dtype, ctx.out.dtype);
    let n = ctx.out.numel().unwrap_or(0);
    if let Some(k) = cast_f32_half(from, to) {
        return Ok(k);
    }
    let (ld, st) = (load(from), store(to));
    Ok(Box::new(move |b: &Bufs<'_>| {
        let (src, dst) = (b.input_bytes(0), b.output_bytes());
        for i in 0..n {
            st(dst, i, ld(src, i));
        }
        Ok(())
    }))
}

/// Casts among f32, f16 and bf16 (the mixed-precision boundaries): a chunk is widened to f32 with
/// SIMD and narrowed with one round-to-nearest-even, exactly as the element-wise path rounds.
fn cast_f32_half(from: DType, to: DType) -> Option<Kernel> {
    use super::half_vec::{CHUNK, narrow, widen};
    use DType::{BF16, F16, F32};
    // Reads elements `s..s + r.len()` of the input as f32.
    fn get<S: HalfElem + bytemuck::Pod>(b: &Bufs<'_>, s: usize, r: &mut [f32]) {
        widen(&b.input::<S>(0)[s..s + r.len()], r)
    }
    fn run<D: HalfElem + bytemuck::Pod>(get: fn(&Bufs<'_>, usize, &mut [f32])) -> Kernel {
        Box::new(move |b: &Bufs<'_>| {
            let mut buf = [0f32; CHUNK];
            for (c, o) in b.output::<D>().chunks_mut(CHUNK).enumerate() {
                let r = &mut buf[..o.len()];
                get(b, c * CHUNK, r);
                narrow(r, o);
            }
            Ok(())
        })
    }
    let get: fn(&Bufs<'_>, usize, &mut [f32]) = match from {
        F32 => |b, s, r| r.copy_from_slice(&b.input::<f32>(0)[s..s + r.len()]),
        F16 => get::<f16>,
        BF16 => get::<bf16>,
        _ => return None,
    };
    match to {
        F16 if from != F16 => Some(run::<f16>(get)),
        BF16 if from != BF16 => Some(run::<bf16>(get)),
        F32 if from != F32 => Some(Box::new(move |b: &Bufs<'_>| {
            for (c, o) in b.output::<f32>().chunks_mut(CHUNK).enumerate() {
                get(b, c * CHUNK, o);
            }
            Ok(())
        })),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pairing gives what the index maps give, for suffix, prefix, middle and mixed
    /// broadcasts on either side.
    #[test]
    fn broadcast_runs_match_index_maps() {
        let o = [2usize, 3, 4];
        let shapes: [&[usize]; 9] =
            [&[2, 3, 4], &[4], &[3, 4], &[1], &[2, 1, 1], &[2, 3, 1], &[1, 3, 1], &[2, 1, 4], &[1, 1, 4]];
        for a in shapes {
            for b in shapes {
                let (na, nb): (usize, usize) = (a.iter().product(), b.iter().product());
                let xa: Vec<f64> = (0..na).map(|i| i as f64 + 0.5).collect();
                let xb: Vec<f64> = (0..nb).map(|i| 100.0 * i as f64).collect();
                let (ia, ib) = (broadcast_index_map(&o, a), broadcast_index_map(&o, b));
                let want: Vec<f64> = ia.iter().zip(&ib).map(|(&i, &j)| xa[i] * 3.0 - xb[j]).collect();
                let mut got = vec![0.0; 24];
                let p = pairing_of(a, b, &o);
                zip_broadcast(&p, &xa, &xb, &mut got, |x, y| x * 3.0 - y);
                assert_eq!(got, want, "{a:?} with {b:?}");
            }
        }
    }
}
