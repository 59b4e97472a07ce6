//! `stacked_matmul`: G products sharing their left input in one thread-pool dispatch. The
//! output of every group is cut into (row block, column block) tasks, all G groups' tasks are
//! claimed from one pool job, each runs the packed GEMM on its block single-threaded (nested
//! pool calls run inline) with B packed once per weight version, and the per-group epilogue runs
//! on each finished block while it is in cache. Groups never share a task, so n need not be a
//! multiple of the micro-tile width.

use super::fused::{Buf, CHUNK, Prog, Src, fill, src};
use super::matmul::BCache;
use super::{Kernel, KernelBuilder, KernelCtx, unsupported};
use crate::elem::FloatElem;
use crate::exec::Bufs;
use crate::gemm::{BSrc, GemmElem, MatMut, MatRef, RowBands, even_span, gemm_src, pack_b_full, packed_b_len};
use crate::threads;
use rlx_driver::KernelTable;
use rlx_ir::{DType, Op, OpKind, Result};

mod combine;

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::StackedMatMul, &[DType::F32, DType::F64], stacked_matmul);
}

/// A row block of A is kept near this many bytes (half of L2), so it stays cached across the
/// column blocks that read it.
const A_BLOCK_BYTES: usize = 128 << 10;
/// The GEMM's k block (`gemm::KC`), which sizes row blocks when the weights are past L3.
const KC: usize = 256;
/// Weight bytes (all groups) above which re-reading them per row block goes to DRAM (half of a
/// 32 MB L3).
const WEIGHTS_IN_L3: usize = 16 << 20;
/// Most tasks per dispatch (each task is a GEMM call with its own fixed cost).
const MAX_TASKS: usize = 64;

/// Static geometry: x as `[rows, k]`, each weight `[k, n]` (strided when transposed).
#[derive(Clone, Copy)]
struct Geo {
    groups: usize,
    rows: usize,
    k: usize,
    n: usize,
    /// Element strides (row, column) of each weight's `[k, n]` view.
    sb: (usize, usize),
    /// Epilogue extras per group.
    extras: usize,
}

fn stacked_matmul(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::StackedMatMul(op) = ctx.op else { return Err(unsupported(ctx)) };
    let e = op.extras_per_group(ctx.ins.len()).map_err(|r| rlx_ir::Error::eval("stacked_matmul", r))?;
    let (xd, wd, od) = (ctx.in_dims(0), ctx.in_dims(1), ctx.out_dims());
    if xd.len() < 2 || wd.len() != 2 || ctx.ins.iter().take(1 + op.groups).any(|s| s.dtype != ctx.out.dtype) {
        return Err(unsupported(ctx));
    }
    let k = xd[xd.len() - 1];
    let n = if op.transpose_b { wd[0] } else { wd[1] };
    let sb = if op.transpose_b { (1, k) } else { (n, 1) };
    let geo = Geo { groups: op.groups, rows: xd[..xd.len() - 1].iter().product(), k, n, sb, extras: e };
    if op.combine {
        return combine::kernel(ctx, op, geo);
    }
    // The epilogue sees one group's output: Input(0) is the product, Input(i) extra i - 1.
    let gd = &od[1..];
    let extras = op.group_inputs(0, e).1;
    let mut srcs = vec![(Buf::Out, Src::Same)];
    srcs.extend(extras.enumerate().map(|(i, x)| (Buf::In(i), src(gd, &ctx.in_dims(x)))));
    let program = op.epilogue.as_ref().map(|f| f.program.clone());
    match ctx.out.dtype {
        DType::F32 => Ok(build::<f32>(geo, program.map(|p| Prog::new(p, srcs)))),
        DType::F64 => Ok(build::<f64>(geo, program.map(|p| Prog::new(p, srcs)))),
        _ => Err(unsupported(ctx)),
    }
}

/// The packed weight of one group, on the plain matmul's schedule (a weight rewritten every
/// run is never packed); matrix-vector products stream B instead.
fn packed_weight<T: GemmElem>(cache: &mut BCache<T>, version: Option<u64>, geo: &Geo, w: &[T]) -> Option<*const T> {
    let view = MatRef { ptr: w.as_ptr(), rs: geo.sb.0 as isize, cs: geo.sb.1 as isize };
    // SAFETY: w holds k*n elements addressed by the strides; the buffer has the packed size.
    cache.get_with(version, geo.rows < 4, packed_b_len::<T>(geo.k, geo.n), |buf| unsafe {
        pack_b_full(geo.k, geo.n, view, buf)
    })
}

/// The task grid on the pool's threads (`grid_on`).
fn grid<T: GemmElem>(geo: &Geo) -> (usize, usize) {
    grid_on::<T>(geo, threads::num_threads())
}

/// The task grid on `threads` threads: rows per block and micro-panels per column block. The
/// column blocks are sized so that every thread gets the same number of panels when it can
/// (3 groups of 12 panels on 2 threads: 12 tasks of 3, not 9 of 4, which idle one thread for
/// a whole task), near 4 panels each, and at most `MAX_TASKS` tasks.
fn grid_on<T: GemmElem>(geo: &Geo, threads: usize) -> (usize, usize) {
    let (mr, nr) = (T::kernel().mr, T::kernel().nr);
    let size = std::mem::size_of::<T>();
    // Every row block streams all the weights again: while they fit in L3 that is cheap and
    // row blocks are sized by all of k (A's rows stay in L2); past L3 each pass comes from DRAM,
    // so row blocks are sized by A's k block instead (taller, fewer passes).
    let weights = geo.groups * geo.k * geo.n * size;
    let kb = if weights > WEIGHTS_IN_L3 { geo.k.clamp(1, KC) } else { geo.k.max(1) };
    let rb = if geo.rows * kb * size <= 2 * A_BLOCK_BYTES {
        geo.rows.max(1)
    } else {
        (A_BLOCK_BYTES / (kb * size) / mr).max(1) * mr
    };
    let (row_blocks, tiles) = (geo.rows.div_ceil(rb), geo.n.div_ceil(nr).max(1));
    // The busiest thread's panels (tasks claimed in rounds), then the distance from 4 panels.
    let cost = |cw: usize| {
        let tasks = geo.groups * row_blocks * tiles.div_ceil(cw);
        (tasks.div_ceil(threads.max(1)) * cw, cw.abs_diff(4))
    };
    let fits = |cw: &usize| geo.groups * row_blocks * tiles.div_ceil(*cw) <= MAX_TASKS;
    let cw = (1..=tiles).filter(fits).min_by_key(|&cw| cost(cw));
    (rb, cw.unwrap_or(tiles))
}

/// The shared x `[rows, k]` at address `x` as (guard, address, row stride): in place, or a copy
/// with padded rows when its rows alias in L1 (`gemm::restride_a`; the guard keeps the copy
/// until the tasks end).
fn x_rows<T: GemmElem>(x: usize, rows: usize, n: usize, k: usize) -> (Option<impl Sized>, usize, usize) {
    let view = MatRef { ptr: x as *const T, rs: k as isize, cs: 1 };
    match crate::gemm::restride_a(rows, n, k, view, threads::num_threads()) {
        Some((guard, v)) => (Some(guard), v.ptr as usize, v.rs as usize),
        None => (None, x, k),
    }
}

/// Runs `task` over `0..tasks`: on the pool, or on this thread for a product under
/// `gemm::SERIAL_FLOPS`.
fn run_tasks(tasks: usize, flops: f64, task: &(impl Fn(usize) + Sync)) {
    if flops < crate::gemm::SERIAL_FLOPS {
        (0..tasks).for_each(task);
    } else {
        threads::parallel_for(tasks, task);
    }
}

fn build<T: FloatElem + GemmElem>(geo: Geo, prog: Option<Prog<T>>) -> Kernel {
    let mut caches: Vec<BCache<T>> = (0..geo.groups).map(|_| BCache::default()).collect();
    let (rb, cw) = grid::<T>(&geo);
    let nr = T::kernel().nr;
    let mr = T::kernel().mr;
    let (tiles_m, col_blocks) = (geo.rows.div_ceil(mr), geo.n.div_ceil(nr).div_ceil(cw));
    // One band of rows per thread (as in `gemm`), run a weight and column block at a time.
    let bands = RowBands::new(geo.rows.div_ceil(rb), tiles_m, threads::num_threads());
    let row_blocks = bands.row_blocks;
    let per_group = row_blocks * col_blocks;
    // Chains (bias, activation) run in place on the output; other programs through scratch.
    let plan = prog.as_ref().and_then(|p| super::epilogue::RowPlan::<T>::compile(&p.program, &p.srcs));
    let width = if plan.is_some() { 0 } else { prog.as_ref().map_or(0, |p| p.program.len() * CHUNK) };
    let scratch = super::scratch::ScratchPool::new(width, T::from_f64(0.0));
    let mut packed: Vec<Option<usize>> = vec![None; geo.groups];
    let mut ins: Vec<(usize, usize)> = Vec::with_capacity(1 + geo.groups * (1 + geo.extras));
    Box::new(move |b: &Bufs<'_>| {
        let Geo { groups, rows, k, n, sb, extras } = geo;
        for (g, c) in caches.iter_mut().enumerate() {
            packed[g] = packed_weight(c, b.input_version(1 + g), &geo, b.input::<T>(1 + g)).map(|p| p as usize);
        }
        // Inputs as (address, length), so the task closure is Sync.
        ins.clear();
        ins.extend((0..b.num_inputs()).map(|i| (b.input::<T>(i).as_ptr() as usize, b.input::<T>(i).len())));
        let out = b.output::<T>();
        assert!(out.len() == groups * rows * n, "stacked_matmul output has the planned size");
        let optr = out.as_mut_ptr() as usize;
        let (ins, packed) = (&ins, &packed);
        let (_copy, xp, xrs) = x_rows::<T>(ins[0].0, rows, n, k);
        let task = |t: usize| {
            let (rblock, rest) = bands.coords(t, groups * col_blocks);
            let (g, j0) = (rest / col_blocks, (rest % col_blocks) * cw * nr);
            let (i0, i1) = even_span(rblock, row_blocks, tiles_m, mr, rows);
            let (m, w) = (i1 - i0, (cw * nr).min(n - j0));
            if m == 0 {
                return;
            }
            let a = MatRef { ptr: (xp as *const T).wrapping_add(i0 * xrs), rs: xrs as isize, cs: 1 };
            let bv = MatRef {
                ptr: (ins[1 + g].0 as *const T).wrapping_add(j0 * sb.1),
                rs: sb.0 as isize,
                cs: sb.1 as isize,
            };
            // A packed weight's panels for columns j0.. start at panel j0 / nr (j0 is a multiple).
            let bs = packed[g].map_or(BSrc::View(bv), |p| BSrc::Packed(bv, (p as *const T).wrapping_add(j0 * k)));
            let base = g * rows * n;
            let c = MatMut { ptr: (optr as *mut T).wrapping_add(base + i0 * n + j0), rs: n as isize };
            let epi = |bi: usize, br: usize, bj: usize, bw: usize| {
                let Some(prog) = &prog else { return };
                let first = 1 + groups + g * extras;
                if let Some(plan) = &plan {
                    // SAFETY: a finished block of this group's output, touched only by this task;
                    // the plan reads live inputs of the step, disjoint from the output.
                    return unsafe {
                        plan.run_rows((optr as *mut T).add(base), (i0 + bi) * n + j0 + bj, br, bw, n, &ins[first..])
                    };
                }
                let mut regs = scratch.take();
                for i in i0 + bi..i0 + bi + br {
                    // Flat index within this group's output, and its run of columns.
                    let (s0, len) = (i * n + j0 + bj, bw);
                    let mut s = s0;
                    while s < s0 + len {
                        let e = (s + CHUNK).min(s0 + len);
                        // SAFETY: `s..e` is a finished run of this group's output, touched only
                        // by this task.
                        let o = unsafe { std::slice::from_raw_parts_mut((optr as *mut T).add(base + s), e - s) };
                        let res = prog.eval(&mut regs, s, e - s, |buf, src, r| match buf {
                            Buf::Out => r.copy_from_slice(o),
                            Buf::In(x) => {
                                let (p, l) = ins[first + x];
                                // SAFETY: a live input of the step, disjoint from the output.
                                fill(src, unsafe { std::slice::from_raw_parts(p as *const T, l) }, r, s);
                            }
                        });
                        o.copy_from_slice(res);
                        s = e;
                    }
                }
            };
            let epi_ref: Option<crate::gemm::Epilogue<'_>> = prog.as_ref().map(|_| &epi as _);
            // SAFETY: the task's views lie inside x, weight g and group g's output block, which
            // no other task writes; a packed weight was packed from this same weight. Run from
            // a pool task, the GEMM stays on this thread.
            unsafe { gemm_src(m, w, k, a, bs, c, epi_ref) };
        };
        run_tasks(groups * per_group, 2.0 * (groups * rows * n) as f64 * k as f64, &task);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_covers_the_output_with_bounded_balanced_tasks() {
        // The last two have weights past L3 (row blocks by the k block).
        let shapes = [
            (3, 128, 384, 384),
            (3, 1024, 384, 384),
            (2, 1, 896, 4864),
            (3, 7, 5, 17),
            (3, 128, 384, 1152),
            (3, 512, 2048, 2048),
            (2, 300, 4864, 896),
        ];
        for &(groups, rows, k, n) in &shapes {
            for threads in [1, 2, 3, 4] {
                let geo = Geo { groups, rows, k, n, sb: (n, 1), extras: 0 };
                let (rb, cw) = grid_on::<f32>(&geo, threads);
                let nr = f32::kernel().nr;
                let tiles = n.div_ceil(nr);
                let tasks = groups * rows.div_ceil(rb) * tiles.div_ceil(cw);
                let what = (groups, rows, k, n, threads, rb, cw);
                assert!(rb >= 1 && cw >= 1, "{what:?}");
                assert!(tasks <= MAX_TASKS || cw >= tiles, "{tasks} tasks for {what:?}");
                assert!(rows.div_ceil(rb) * rb >= rows && tiles.div_ceil(cw) * cw * nr >= n, "{what:?}");
                // Work in whole panels per thread: no worse than one task's width above even.
                let total = groups * rows.div_ceil(rb) * tiles;
                let busiest = tasks.div_ceil(threads) * cw;
                assert!(busiest <= total.div_ceil(threads) + cw, "{what:?}: {busiest} of {total}");
            }
        }
        // Weights past L3: row blocks sized by the k block (120 rows at k 2048), not by all of k
        // (12 rows, which would stream 48 MB of weights from DRAM 43 times).
        let big = Geo { groups: 3, rows: 512, k: 2048, n: 2048, sb: (2048, 1), extras: 0 };
        assert!(grid_on::<f32>(&big, 2).0 >= 96, "{:?}", grid_on::<f32>(&big, 2));
        // MiniLM's QKV on two threads: every thread gets exactly half of the panels.
        let geo = Geo { groups: 3, rows: 128, k: 384, n: 384, sb: (384, 1), extras: 0 };
        let (_, cw) = grid_on::<f32>(&geo, 2);
        let tiles = 384usize.div_ceil(f32::kernel().nr);
        assert_eq!((3 * tiles.div_ceil(cw)) % 2, 0, "cw {cw}");
    }
}
