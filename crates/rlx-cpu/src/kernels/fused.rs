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
pub(super) const CHUNK: usize = 256;

/// Where a program input lives: node input `i`, or the output itself (a matmul epilogue).
#[derive(Clone, Copy)]
pub(super) enum Buf {
    In(usize),
    Out,
}

/// How an input lines up with the output.
pub(super) enum Src {
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

impl Src {
    /// The input element that output element `i` reads.
    #[inline(always)]
    pub(super) fn index(&self, i: usize) -> usize {
        match self {
            Src::Same => i,
            Src::Splat => 0,
            Src::Cycle(c) => i % c,
            Src::Repeat(c) => i / c,
            Src::Map(m) => m[i] as usize,
        }
    }
}

/// How program input `i` (of dims `d`) is read.
pub(super) fn src(od: &[usize], d: &[usize]) -> Src {
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
    // f16/bf16: the program runs in f32 on widened chunks (half_fused.rs).
    super::half_fused::with_half!(ctx.out.dtype, H => return Ok(super::half_fused::build::<H>(program, srcs, n)), else {});
    with_float!(ctx.out.dtype, T => Ok(build::<T>(program, srcs, n)), else Err(unsupported(ctx)))
}

/// f32/f64: the packed GEMM runs the epilogue on each finished block of the output while it is
/// in cache, on the GEMM's threads. Other dtypes: the table's matmul kernel writes the output and
/// the epilogue then runs over it in place.
fn fused_matmul(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::FusedMatMul(f) = ctx.op else { return Err(unsupported(ctx)) };
    let od = ctx.out_dims();
    let mut srcs = vec![(Buf::Out, Src::Same)];
    srcs.extend((2..ctx.ins.len()).map(|i| (Buf::In(i), src(&od, &ctx.in_dims(i)))));
    let (program, n) = (f.epilogue.program.clone(), od.iter().product());
    let same = ctx.ins[..2].iter().all(|s| s.dtype == ctx.out.dtype);
    match ctx.out.dtype {
        rlx_ir::DType::F32 if same => {
            return Ok(in_gemm::<f32>(super::matmul::geometry(ctx, &f.matmul), program, srcs));
        }
        rlx_ir::DType::F64 if same => {
            return Ok(in_gemm::<f64>(super::matmul::geometry(ctx, &f.matmul), program, srcs));
        }
        // f16/bf16: the epilogue runs on the half GEMM's f32 tiles before rounding.
        dt if same => super::half_fused::with_half!(dt, H => {
            return Ok(super::half_fused::in_gemm::<H>(super::matmul::geometry(ctx, &f.matmul), program, srcs));
        }, else {}),
        _ => {}
    }
    let mm_op = Op::MatMul(f.matmul.clone());
    let mm_ctx = KernelCtx { op: &mm_op, ins: &ctx.ins[..2], out: ctx.out, group: None };
    let node = rlx_ir::Node { op: mm_op.clone(), inputs: vec![], ty: ctx.out.clone() };
    let table = super::table();
    let ins: Vec<&rlx_ir::Shape> = ctx.ins[..2].iter().collect();
    let entry = table.lookup(&node, &ins).ok_or_else(|| unsupported(ctx))?;
    let mut gemm = (entry.build)(&mm_ctx)?;
    let mut epilogue = with_float!(ctx.out.dtype, T => build::<T>(program, srcs, n), else return Err(unsupported(ctx)));
    Ok(Box::new(move |b: &Bufs<'_>| {
        gemm(&b.first_inputs(2))?;
        epilogue(b)
    }))
}

/// The epilogue inside the packed GEMM. Its inputs never alias the output (only `fused` nodes
/// run in place), so they are read as whole slices from any thread.
fn in_gemm<T: FloatElem + crate::gemm::GemmElem>(
    geo: super::matmul::Geometry,
    program: Vec<Instr>,
    srcs: Vec<(Buf, Src)>,
) -> Kernel {
    let prog = Prog::new(program, srcs);
    // A chain (bias, residual, activation) runs in place on the output; anything else through
    // the chunked evaluator and its scratch registers.
    let plan = super::epilogue::RowPlan::<T>::compile(&prog.program, &prog.srcs);
    let scratch =
        super::scratch::ScratchPool::new(if plan.is_some() { 0 } else { prog.program.len() * CHUNK }, T::from_f64(0.0));
    let mut ins: Vec<(usize, usize)> = Vec::with_capacity(prog.srcs.len() + 1);
    let mut cache = super::matmul::BCache::<T>::default();
    Box::new(move |b: &Bufs<'_>| {
        // Input slices as (address, length), so the callback is Sync.
        ins.clear();
        ins.extend((0..b.num_inputs()).map(|i| (b.input::<T>(i).as_ptr() as usize, b.input::<T>(i).len())));
        let out = b.output::<T>();
        let (optr, olen) = (out.as_mut_ptr() as usize, out.len());
        let ins = &ins;
        let epi = |s0: usize, rows: usize, w: usize, stride: usize| {
            assert!(rows == 0 || s0 + (rows - 1) * stride + w <= olen, "epilogue block out of bounds");
            if let Some(plan) = &plan {
                // SAFETY: the block is finished output that only this call touches; the plan
                // reads live inputs of the step, disjoint from the output.
                return unsafe { plan.run_rows(optr as *mut T, s0, rows, w, stride, ins) };
            }
            let mut regs = scratch.take();
            for r in 0..rows {
                let (row, mut s) = (s0 + r * stride, s0 + r * stride);
                while s < row + w {
                    let e = (s + CHUNK).min(row + w);
                    // SAFETY: `s..e` is a finished run of the output that only this call touches.
                    let o = unsafe { std::slice::from_raw_parts_mut((optr as *mut T).add(s), e - s) };
                    let res = prog.eval(&mut regs, s, e - s, |k, src, r| match k {
                        Buf::Out => r.copy_from_slice(o),
                        Buf::In(i) => {
                            let (p, l) = ins[i];
                            // SAFETY: a live input buffer of the step, disjoint from the output.
                            fill(src, unsafe { std::slice::from_raw_parts(p as *const T, l) }, r, s);
                        }
                    });
                    o.copy_from_slice(res);
                    s = e;
                }
            }
        };
        let pb = cache.get(b.input_version(1), &geo, b.input::<T>(1));
        super::matmul::packed::<T>(&geo, b.input::<T>(0), b.input::<T>(1), out, pb, Some(&epi));
        Ok(())
    })
}

/// An elementwise program with its constants and input layouts.
pub(super) struct Prog<T> {
    pub(super) program: Vec<Instr>,
    consts: Vec<T>,
    pub(super) srcs: Vec<(Buf, Src)>,
}

impl<T: FloatElem> Prog<T> {
    pub(super) fn new(program: Vec<Instr>, srcs: Vec<(Buf, Src)>) -> Self {
        let consts = program.iter().map(|i| T::from_f64(if let Instr::Const(c) = *i { c } else { 0.0 })).collect();
        Prog { program, consts, srcs }
    }

    /// Evaluates output elements `s..s+len` (len <= CHUNK) into `regs` and returns the result;
    /// `load(buf, src, r)` fills register `r` with an input.
    pub(super) fn eval<'r>(
        &self,
        regs: &'r mut [T],
        s: usize,
        len: usize,
        load: impl FnMut(Buf, &Src, &mut [T]),
    ) -> &'r [T] {
        self.eval_reading(regs, s, len, load, None)
    }

    /// `eval` that reads inputs in output order (`Src::Same`) in place: `chunk(buf)` gives their
    /// `len` elements of this chunk, which the instructions then read instead of a copy in a
    /// register (faster on the SwiGLU fusion of a long prefill; docs/benchmarks-history.md).
    pub(super) fn eval_reading<'r, 'c>(
        &self,
        regs: &'r mut [T],
        s: usize,
        len: usize,
        mut load: impl FnMut(Buf, &Src, &mut [T]),
        chunk: Option<&dyn Fn(Buf) -> &'c [T]>,
    ) -> &'r [T] {
        let _ = s;
        let last = self.program.len() - 1;
        // Register a's input when it is read in place (never the last: the result is a register).
        let in_place = |a: usize| match (self.program[a], chunk) {
            (Instr::Input(i), Some(_)) if a != last && matches!(self.srcs[i].1, Src::Same) => Some(self.srcs[i].0),
            _ => None,
        };
        for (k, ins) in self.program.iter().enumerate() {
            let (done, rest) = regs.split_at_mut(k * CHUNK);
            let r = &mut rest[..len];
            let reg = |a: usize| match (in_place(a), chunk) {
                (Some(buf), Some(view)) => view(buf),
                _ => &done[a * CHUNK..a * CHUNK + len],
            };
            match *ins {
                Instr::Input(_) if in_place(k).is_some() => {}
                Instr::Input(i) => {
                    let (buf, src) = &self.srcs[i];
                    load(*buf, src, r)
                }
                Instr::Const(_) => r.fill(self.consts[k]),
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
        let last = self.program.len() - 1;
        &regs[last * CHUNK..last * CHUNK + len]
    }
}

/// Fills `r` with output elements `s..s+r.len()` of an input `x` laid out as `src`.
pub(super) fn fill<T: Copy>(src: &Src, x: &[T], r: &mut [T], s: usize) {
    let len = r.len();
    match src {
        Src::Same => r.copy_from_slice(&x[s..s + len]),
        Src::Splat => r.fill(x[0]),
        Src::Cycle(c) => {
            // Runs of consecutive input elements, wrapping at the input's end.
            let (c, mut p, mut done) = (*c, s % c, 0);
            while done < len {
                let take = (c - p).min(len - done);
                r[done..done + take].copy_from_slice(&x[p..p + take]);
                (done, p) = (done + take, 0);
            }
        }
        Src::Repeat(c) => {
            // Runs of one input element, each `c` output elements long.
            let (c, mut done) = (*c, 0);
            while done < len {
                let at = s + done;
                let take = (c - at % c).min(len - done);
                r[done..done + take].fill(x[at / c]);
                done += take;
            }
        }
        Src::Map(m) => r.iter_mut().zip(&m[s..s + len]).for_each(|(o, &j)| *o = x[j as usize]),
    }
}

/// Elementwise outputs of fewer elements run on the calling thread (waking the pool costs more).
pub(super) const PARALLEL_MIN: usize = 1 << 15;

/// The `fused` kernel: chunks of the output, split across the pool for large outputs (an
/// optimizer update over every weight, a wide activation). Chunks are disjoint, and an input
/// that shares the output's buffer is read in the same order (`Src::Same`), so each chunk reads
/// its inputs before it writes its own part of the output, on whichever thread.
fn build<T: FloatElem>(program: Vec<Instr>, srcs: Vec<(Buf, Src)>, n: usize) -> Kernel {
    let prog = Prog::<T>::new(program, srcs);
    let scratch = super::scratch::ScratchPool::new(prog.program.len() * CHUNK, T::from_f64(0.0));
    let mut ins: Vec<(usize, usize)> = Vec::with_capacity(prog.srcs.len());
    Box::new(move |b: &Bufs<'_>| {
        // Buffers as (address, length), so the chunks can run on any thread.
        ins.clear();
        ins.extend((0..b.num_inputs()).map(|i| (b.input::<T>(i).as_ptr() as usize, b.input::<T>(i).len())));
        let out = b.output::<T>();
        assert!(n <= out.len(), "fused output shorter than its program's count");
        let short = prog.srcs.iter().any(|(buf, src)| matches!((buf, src), (Buf::In(i), Src::Same) if ins[*i].1 < n));
        assert!(!short, "fused input shorter than the output it lines up with");
        let (ins, optr) = (&ins, out.as_mut_ptr() as usize);
        let chunks = n.div_ceil(CHUNK);
        let run = |c0: usize, c1: usize| {
            let mut regs = scratch.take();
            for c in c0..c1 {
                let (s, e) = (c * CHUNK, ((c + 1) * CHUNK).min(n));
                // SAFETY (all views): inside live buffers of the step (lengths from `Bufs`). Only an
                // input read in output order may share the output's buffer: it is viewed a chunk
                // at a time, and the chunk is written only after it is read.
                let chunk_of = |p: usize| unsafe { std::slice::from_raw_parts((p as *const T).add(s), e - s) };
                let whole = |i: usize| unsafe { std::slice::from_raw_parts(ins[i].0 as *const T, ins[i].1) };
                let view = |buf: Buf| match buf {
                    Buf::Out => chunk_of(optr),
                    Buf::In(i) => chunk_of(ins[i].0),
                };
                let load = |buf, src: &Src, r: &mut [T]| match (buf, src) {
                    (Buf::Out, _) => r.copy_from_slice(chunk_of(optr)),
                    (Buf::In(i), Src::Same) => r.copy_from_slice(chunk_of(ins[i].0)),
                    (Buf::In(i), Src::Splat) => r.fill(whole(i)[0]),
                    (Buf::In(i), src) => fill(src, whole(i), r, s),
                };
                let res = prog.eval_reading(&mut regs, s, e - s, load, Some(&view));
                // SAFETY: chunk s..e of the output, which only this task writes.
                unsafe { std::slice::from_raw_parts_mut((optr as *mut T).add(s), e - s) }.copy_from_slice(res);
            }
        };
        let tasks = if n >= PARALLEL_MIN { crate::threads::num_threads().min(chunks) } else { 1 };
        if tasks > 1 {
            crate::threads::parallel_for(tasks, &|t| run(t * chunks / tasks, (t + 1) * chunks / tasks));
        } else {
            run(0, chunks);
        }
        Ok(())
    })
}
