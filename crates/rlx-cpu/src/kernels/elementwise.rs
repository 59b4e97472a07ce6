//! Elementwise kernels: unary and binary families, comparisons, where and cast. They evaluate
//! the same scalar expressions as the reference (`UnaryKind::eval`, `BinaryKind::eval`).

use super::{ALL, Kernel, KernelBuilder, KernelCtx, NUMERIC, REAL_AND_BOOL, unsupported};
use crate::elem::{FloatElem, IntElem};
use crate::exec::Bufs;
use crate::{with_float, with_int};
use rlx_driver::KernelTable;
use rlx_ir::ops::util::broadcast_index_map;
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
        if !super::vec32::unary(kind, x, out) {
            out.iter_mut().zip(x).for_each(|(y, &x)| *y = kind.eval(x));
        }
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
    Maps(Vec<u32>, Vec<u32>),
}

fn pairing(ctx: &KernelCtx<'_>) -> Pairing {
    let (a, b, o) = (ctx.in_dims(0), ctx.in_dims(1), ctx.out_dims());
    let (na, nb): (usize, usize) = (a.iter().product(), b.iter().product());
    if a == o && b == o {
        Pairing::Same
    } else if na == 1 && b == o {
        Pairing::ScalarA
    } else if nb == 1 && a == o {
        Pairing::ScalarB
    } else {
        let m = |d: &[usize]| broadcast_index_map(&o, d).into_iter().map(|i| i as u32).collect();
        Pairing::Maps(m(&a), m(&b))
    }
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
    }
}

fn binary(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Binary(op) = ctx.op else { return Err(unsupported(ctx)) };
    let kind = op.kind;
    let p = pairing(ctx);
    with_float!(ctx.out.dtype, T => Ok(Box::new(move |b: &Bufs<'_>| {
        let (x, y, out) = (b.input::<T>(0), b.input::<T>(1), b.output::<T>());
        if !(matches!(p, Pairing::Same) && super::vec32::binary(kind, x, y, out)) {
            zip_broadcast(&p, x, y, out, |x, y| kind.eval(x, y));
        }
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
    let maps: Vec<Vec<u32>> =
        (0..3).map(|i| broadcast_index_map(&o, &ctx.in_dims(i)).into_iter().map(|x| x as u32).collect()).collect();
    let size = ctx.out.dtype.size_bytes();
    Ok(Box::new(move |b: &Bufs<'_>| {
        let (c, x, y, out) = (b.input_bytes(0), b.input_bytes(1), b.input_bytes(2), b.output_bytes());
        for (i, dst) in out.chunks_exact_mut(size).enumerate() {
            let (src, j) = if c[maps[0][i] as usize] != 0 { (x, maps[1][i]) } else { (y, maps[2][i]) };
            let j = j as usize * size;
            dst.copy_from_slice(&src[j..j + size]);
        }
        Ok(())
    }))
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
    let (ld, st) = (load(from), store(to));
    let n = ctx.out.numel().unwrap_or(0);
    Ok(Box::new(move |b: &Bufs<'_>| {
        let (src, dst) = (b.input_bytes(0), b.output_bytes());
        for i in 0..n {
            st(dst, i, ld(src, i));
        }
        Ok(())
    }))
}
