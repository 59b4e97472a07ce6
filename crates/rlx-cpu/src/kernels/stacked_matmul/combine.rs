//! `stacked_matmul` in combining mode (SwiGLU): each task computes every group's product for
//! one (row block, column block) of the single output, group 0 into the output block and the
//! others into a per-task tile, with A read in place for all of them; the last product's GEMM
//! epilogue runs the combining program on each finished micro-block while it is in cache.

use super::super::fused::{Buf, CHUNK, Prog, Src, fill, src};
use super::super::scratch::ScratchPool;
use super::super::{Kernel, KernelCtx, unsupported};
use super::{Geo, grid, packed_weight, run_tasks, x_rows};
use crate::elem::FloatElem;
use crate::exec::Bufs;
use crate::gemm::{BSrc, GemmElem, MatMut, MatRef, gemm_src};
use crate::kernels::matmul::BCache;
use rlx_ir::ops::{Instr, StackedMatMul};
use rlx_ir::{DType, Result};

use super::KC;

/// The kernel for a combining `op` of geometry `geo` (`geo.extras`: all the extras).
pub(super) fn kernel(ctx: &KernelCtx<'_>, op: &StackedMatMul, geo: Geo) -> Result<Kernel> {
    let Some(ep) = &op.epilogue else { return Err(unsupported(ctx)) };
    let od = ctx.out_dims();
    // Program inputs: group 0 is the output block, groups 1.. are tiles (In(g - 1)), extras follow.
    let g = op.groups;
    let mut srcs: Vec<(Buf, Src)> =
        (0..g).map(|i| (if i == 0 { Buf::Out } else { Buf::In(i - 1) }, Src::Same)).collect();
    srcs.extend((0..geo.extras).map(|i| (Buf::In(g - 1 + i), src(&od, &ctx.in_dims(1 + g + i)))));
    if ep.program.iter().any(|i| matches!(i, Instr::Input(x) if *x >= srcs.len())) {
        return Err(unsupported(ctx));
    }
    match ctx.out.dtype {
        DType::F32 => Ok(build::<f32>(geo, Prog::new(ep.program.clone(), srcs))),
        DType::F64 => Ok(build::<f64>(geo, Prog::new(ep.program.clone(), srcs))),
        _ => Err(unsupported(ctx)),
    }
}

fn build<T: FloatElem + GemmElem>(geo: Geo, prog: Prog<T>) -> Kernel {
    let mut caches: Vec<BCache<T>> = (0..geo.groups).map(|_| BCache::default()).collect();
    // Tasks cover the one output; each runs all the groups' products for its block. Row blocks
    // are sized by A's k-block (the GEMM walks k in blocks of 256), not all of k: every row
    // block streams the whole weights again, which at prefill (weights of many MB) costs more
    // than a taller A block in L2.
    let (rb, cw) = grid::<T>(&Geo { groups: 1, k: geo.k.min(KC), ..geo });
    let nr = T::kernel().nr;
    let tw = cw * nr;
    let (row_blocks, col_blocks) = (geo.rows.div_ceil(rb), geo.n.div_ceil(nr).div_ceil(cw));
    // Per concurrent caller: the tiles of groups 1.., and the program's registers.
    let tile = rb.min(geo.rows.max(1)) * tw;
    let tiles = ScratchPool::new((geo.groups - 1) * tile, T::from_f64(0.0));
    let regs = ScratchPool::new(prog.program.len() * CHUNK, T::from_f64(0.0));
    let mut packed: Vec<Option<usize>> = vec![None; geo.groups];
    let mut ins: Vec<(usize, usize)> = Vec::with_capacity(1 + geo.groups + geo.extras);
    Box::new(move |b: &Bufs<'_>| {
        let Geo { groups, rows, k, n, sb, extras: _ } = geo;
        for (g, c) in caches.iter_mut().enumerate() {
            packed[g] = packed_weight(c, b.input_version(1 + g), &geo, b.input::<T>(1 + g)).map(|p| p as usize);
        }
        // Inputs as (address, length), so the task closure is Sync.
        ins.clear();
        ins.extend((0..b.num_inputs()).map(|i| (b.input::<T>(i).as_ptr() as usize, b.input::<T>(i).len())));
        let out = b.output::<T>();
        assert!(out.len() == rows * n, "combined stacked_matmul output has the planned size");
        let optr = out.as_mut_ptr() as usize;
        let (ins, packed) = (&ins, &packed);
        let (_copy, xp, xrs) = x_rows::<T>(ins[0].0, rows, n, k);
        let task = |t: usize| {
            let (i0, j0) = ((t / col_blocks) * rb, (t % col_blocks) * tw);
            let (m, w) = (rb.min(rows - i0), tw.min(n - j0));
            let mut tl = tiles.take();
            let tptr = tl.as_mut_ptr() as usize;
            let a = MatRef { ptr: (xp as *const T).wrapping_add(i0 * xrs), rs: xrs as isize, cs: 1 };
            let epi = |bi: usize, br: usize, bj: usize, bw: usize| {
                let mut regs = regs.take();
                for i in bi..bi + br {
                    // Flat index of the run in the output, and its offset in a tile.
                    let (s0, t0) = ((i0 + i) * n + j0 + bj, i * tw + bj);
                    let mut s = s0;
                    while s < s0 + bw {
                        let e = (s + CHUNK).min(s0 + bw);
                        // SAFETY: `s..e` is a finished run of this task's output block.
                        let o = unsafe { std::slice::from_raw_parts_mut((optr as *mut T).add(s), e - s) };
                        let res = prog.eval(&mut regs, s, e - s, |buf, src, r| match buf {
                            Buf::Out => r.copy_from_slice(o),
                            Buf::In(x) if x + 1 < groups => {
                                let at = x * tile + t0 + (s - s0);
                                // SAFETY: a finished run of group x + 1's tile, inside the tile set.
                                r.copy_from_slice(unsafe {
                                    std::slice::from_raw_parts((tptr as *const T).add(at), e - s)
                                })
                            }
                            Buf::In(x) => {
                                let (p, l) = ins[groups + x];
                                // SAFETY: a live input of the step, disjoint from the output.
                                fill(src, unsafe { std::slice::from_raw_parts(p as *const T, l) }, r, s);
                            }
                        });
                        o.copy_from_slice(res);
                        s = e;
                    }
                }
            };
            for g in 0..groups {
                let bv = MatRef {
                    ptr: (ins[1 + g].0 as *const T).wrapping_add(j0 * sb.1),
                    rs: sb.0 as isize,
                    cs: sb.1 as isize,
                };
                let bs = packed[g].map_or(BSrc::View(bv), |p| BSrc::Packed(bv, (p as *const T).wrapping_add(j0 * k)));
                let c = if g == 0 {
                    MatMut { ptr: (optr as *mut T).wrapping_add(i0 * n + j0), rs: n as isize }
                } else {
                    MatMut { ptr: (tptr as *mut T).wrapping_add((g - 1) * tile), rs: tw as isize }
                };
                let last = g + 1 == groups;
                let epi_ref: Option<crate::gemm::Epilogue<'_>> = last.then_some(&epi as _);
                // SAFETY: the views lie inside x, weight g, and this task's output block or
                // tile (m <= rb rows of tw columns), which no other task touches; a packed weight
                // was packed from this same weight. Run from a pool task, the GEMM stays here.
                unsafe { gemm_src(m, w, k, a, bs, c, epi_ref) };
            }
            drop(tl);
        };
        run_tasks(row_blocks * col_blocks, 2.0 * (groups * rows * n) as f64 * k as f64, &task);
        Ok(())
    })
}
