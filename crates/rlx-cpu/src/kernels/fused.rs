//! `fused` elementwise regions: the program runs over chunks of the output, one instruction at
//! a time over the whole chunk (so each step is a tight, vectorizable loop). Inputs are read
//! chunk by chunk before the chunk is written, which makes running in place safe.

use super::{FLOATS, Kernel, KernelBuilder, KernelCtx, unsupported};
use crate::elem::FloatElem;
use crate::exec::Bufs;
use crate::with_float;
use rlx_driver::KernelTable;
use rlx_ir::ops::Instr;
use rlx_ir::ops::util::broadcast_index_map;
use rlx_ir::{Op, OpKind, Result};

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::Fused, FLOATS, fused);
    t.register(OpKind::FusedMatMul, FLOATS, fused_matmul);
}

/// Elements per chunk: the registers of a chunk stay in L1.
const CHUNK: usize = 256;

/// Where a program input lives: node input `i`, or the output itself (a matmul epilogue).
#[derive(Clone, Copy)]
enum Buf {
    In(usize),
    Out,
}

/// How an input lines up with the output.
enum Src {
    /// Same element order (same count).
    Same,
    /// One element, repeated.
    Splat,
    /// The input is a suffix of the output's dims (a bias): element `i % n`.
    Cycle(usize),
    /// The input is a prefix of the output's dims, then ones (a per-row value): element `i / n`.
    Repeat(usize),
    /// Broadcast: the input element of each output element.
    Map(Vec<u32>),
}

/// How program input `i` (of dims `d`) is read.
fn src(od: &[usize], d: &[usize]) -> Src {
    let n: usize = od.iter().product();
    let c = d.iter().product::<usize>();
    // Without leading ones, d lines up with the end of od.
    let d = &d[d.iter().position(|&x| x != 1).unwrap_or(d.len())..];
    let k = od.len().saturating_sub(d.len());
    match c {
        c if c == n => Src::Same,
        1 => Src::Splat,
        _ if d.len() <= od.len() && od[k..] == *d => Src::Cycle(c),
        _ if d.len() <= od.len() && {
            let lead = d.iter().rposition(|&x| x != 1).map_or(0, |p| p + 1);
            od[k..k + lead] == d[..lead] && od[..k].iter().all(|&x| x == 1)
        } =>
        {
            Src::Repeat(n / c)
        }
        _ => Src::Map(broadcast_index_map(od, d).into_iter().map(|x| x as u32).collect()),
    }
}

fn fused(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Fused(f) = ctx.op else { return Err(unsupported(ctx)) };
    let od = ctx.out_dims();
    let srcs: Vec<(Buf, Src)> = (0..ctx.ins.len()).map(|i| (Buf::In(i), src(&od, &ctx.in_dims(i)))).collect();
    let (program, n) = (f.program.clone(), od.iter().product());
    with_float!(ctx.out.dtype, T => Ok(build::<T>(program, srcs, n)), else Err(unsupported(ctx)))
}

/// The matmul kernel of the table writes the output; the epilogue then runs over it in place.
fn fused_matmul(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::FusedMatMul(f) = ctx.op else { return Err(unsupported(ctx)) };
    let mm_op = Op::MatMul(f.matmul.clone());
    let mm_ctx = KernelCtx { op: &mm_op, ins: &ctx.ins[..2], out: ctx.out };
    let node = rlx_ir::Node { op: mm_op.clone(), inputs: vec![], ty: ctx.out.clone() };
    let table = super::table();
    let ins: Vec<&rlx_ir::Shape> = ctx.ins[..2].iter().collect();
    let entry = table.lookup(&node, &ins).ok_or_else(|| unsupported(ctx))?;
    let mut gemm = (entry.build)(&mm_ctx)?;
    let od = ctx.out_dims();
    let mut srcs = vec![(Buf::Out, Src::Same)];
    srcs.extend((2..ctx.ins.len()).map(|i| (Buf::In(i), src(&od, &ctx.in_dims(i)))));
    let (program, n) = (f.epilogue.program.clone(), od.iter().product());
    let mut epilogue = with_float!(ctx.out.dtype, T => build::<T>(program, srcs, n), else return Err(unsupported(ctx)));
    Ok(Box::new(move |b: &Bufs<'_>| {
        gemm(&b.first_inputs(2))?;
        epilogue(b)
    }))
}

fn build<T: FloatElem>(program: Vec<Instr>, srcs: Vec<(Buf, Src)>, n: usize) -> Kernel {
    let zero = T::from_f64(0.0);
    let consts: Vec<T> = program.iter().map(|i| if let Instr::Const(c) = *i { T::from_f64(c) } else { zero }).collect();
    let mut regs = vec![zero; program.len() * CHUNK];
    let last = program.len() - 1;
    Box::new(move |b: &Bufs<'_>| {
        let mut s = 0;
        while s < n {
            let e = (s + CHUNK).min(n);
            let len = e - s;
            for (k, ins) in program.iter().enumerate() {
                let (done, rest) = regs.split_at_mut(k * CHUNK);
                let r = &mut rest[..len];
                let reg = |a: usize| &done[a * CHUNK..a * CHUNK + len];
                match *ins {
                    Instr::Input(i) => match &srcs[i] {
                        (Buf::Out, _) => r.copy_from_slice(b.output_range::<T>(s, e)),
                        (Buf::In(i), Src::Same) => r.copy_from_slice(b.input_range::<T>(*i, s, e)),
                        (Buf::In(i), Src::Splat) => r.fill(b.input_range::<T>(*i, 0, 1)[0]),
                        (Buf::In(i), Src::Cycle(c)) => {
                            // Runs of consecutive input elements, wrapping at the input's end.
                            let (x, mut p, mut done) = (b.input::<T>(*i), s % c, 0);
                            while done < len {
                                let take = (c - p).min(len - done);
                                r[done..done + take].copy_from_slice(&x[p..p + take]);
                                (done, p) = (done + take, 0);
                            }
                        }
                        (Buf::In(i), Src::Repeat(c)) => {
                            // Runs of one input element, each `c` output elements long.
                            let (x, mut done) = (b.input::<T>(*i), 0);
                            while done < len {
                                let at = s + done;
                                let take = (c - at % c).min(len - done);
                                r[done..done + take].fill(x[at / c]);
                                done += take;
                            }
                        }
                        (Buf::In(i), Src::Map(m)) => {
                            let x = b.input::<T>(*i);
                            r.iter_mut().zip(&m[s..e]).for_each(|(o, &j)| *o = x[j as usize]);
                        }
                    },
                    Instr::Const(_) => r.fill(consts[k]),
                    // f32 runs vectorized loops (vec32.rs); other dtypes evaluate the expression here.
                    Instr::Unary(u, a) if !super::vec32::unary(u, reg(a), r) => {
                        r.iter_mut().zip(reg(a)).for_each(|(o, &x)| *o = u.eval(x))
                    }
                    Instr::Binary(op, a, c) if !super::vec32::binary(op, reg(a), reg(c), r) => {
                        r.iter_mut().zip(reg(a).iter().zip(reg(c))).for_each(|(o, (&x, &y))| *o = op.eval(x, y))
                    }
                    Instr::Unary(..) | Instr::Binary(..) => {}
                }
            }
            b.output_range::<T>(s, e).copy_from_slice(&regs[last * CHUNK..last * CHUNK + len]);
            s = e;
        }
        Ok(())
    })
}
