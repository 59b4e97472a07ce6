//! Data movement (reshape, transpose, broadcast, slice, concat, ...): one kernel for every op
//! with the DATA_MOVEMENT trait. Its index map comes from `rlx_driver::movement_index_map` (the
//! op's reference run on element ids), so a new movement op needs no CPU code. Transpose,
//! broadcast and slice are strided views of their input and get a loop over rows instead
//! (no map to build or read).

use super::{ALL, Kernel, KernelBuilder, KernelCtx, unsupported};
use crate::exec::Bufs;
use rlx_driver::KernelTable;
use rlx_ir::shape::strides;
use rlx_ir::{Op, OpTraits, Result};

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register_trait(OpTraits::DATA_MOVEMENT, ALL, movement);
}

fn movement(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    if !ctx.op.def().traits().contains(OpTraits::DATA_MOVEMENT) {
        return Err(unsupported(ctx));
    }
    if let Some(view) = strided_view(ctx) {
        return Ok(strided_kernel(view, ctx.out.dtype.size_bytes()));
    }
    let wide = rlx_driver::movement_index_map(ctx.op, ctx.ins, ctx.out)?;
    let identity = rlx_driver::is_identity_map(&wide, ctx.ins);
    let size = ctx.out.dtype.size_bytes();
    // (input, element) per output element, narrowed to halve the map's memory.
    let map: Vec<(u32, u32)> = wide.into_iter().map(|(i, e)| (i as u32, e as u32)).collect();
    if identity {
        return Ok(Box::new(move |b: &Bufs<'_>| {
            b.output_bytes().copy_from_slice(b.input_bytes(0));
            Ok(())
        }));
    }
    Ok(Box::new(move |b: &Bufs<'_>| {
        let out = b.output_bytes();
        for (dst, &(i, e)) in out.chunks_exact_mut(size).zip(&map) {
            let src = b.input_bytes(i as usize);
            let e = e as usize * size;
            dst.copy_from_slice(&src[e..e + size]);
        }
        Ok(())
    }))
}

/// `out[i_0, .., i_r] = in[offset + sum_k i_k * strides[k]]`, in elements.
struct StridedView {
    dims: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

/// The strided form of transpose, broadcast_to and slice; None for other movement ops.
fn strided_view(ctx: &KernelCtx<'_>) -> Option<StridedView> {
    let ind = ctx.ins.first()?.fixed_dims()?;
    let ins = strides(&ind);
    let dims = ctx.out.fixed_dims()?;
    let (st, offset) = match ctx.op {
        Op::Transpose(t) => (t.perm.iter().map(|&p| ins[p]).collect(), 0),
        Op::BroadcastTo(b) => {
            let lead = b.dims.len().checked_sub(ind.len())?;
            let st = (0..dims.len()).map(|k| if k < lead || ind[k - lead] == 1 { 0 } else { ins[k - lead] }).collect();
            (st, 0)
        }
        Op::Slice(sl) => {
            let st = (0..dims.len()).map(|k| sl.steps[k] * ins[k]).collect();
            (st, sl.starts.iter().zip(&ins).map(|(a, b)| a * b).sum())
        }
        _ => return None,
    };
    Some(collapse(StridedView { dims, strides: st, offset }))
}

/// Merges neighbouring axes that stay contiguous, so the inner loop runs as long as it can.
fn collapse(v: StridedView) -> StridedView {
    let (mut dims, mut st): (Vec<usize>, Vec<usize>) = (vec![], vec![]);
    for (&d, &s) in v.dims.iter().zip(&v.strides) {
        if d == 1 {
            continue;
        }
        match (dims.last_mut(), st.last_mut()) {
            (Some(pd), Some(ps)) if *ps == s * d => {
                *pd *= d;
                *ps = s;
            }
            _ => {
                dims.push(d);
                st.push(s);
            }
        }
    }
    if dims.is_empty() {
        dims.push(1);
        st.push(1);
    }
    StridedView { dims, strides: st, offset: v.offset }
}

fn strided_kernel(v: StridedView, size: usize) -> Kernel {
    let r = v.dims.len();
    let (inner, inner_stride) = (v.dims[r - 1], v.strides[r - 1]);
    let rows: usize = v.dims[..r - 1].iter().product();
    Box::new(move |b: &Bufs<'_>| {
        let (src, out) = (b.input_bytes(0), b.output_bytes());
        for row in 0..rows {
            // The row's input offset: unravel it over the outer axes (no allocation per run).
            let (mut rest, mut base) = (row, v.offset);
            for k in (0..r - 1).rev() {
                base += (rest % v.dims[k]) * v.strides[k];
                rest /= v.dims[k];
            }
            let dst = &mut out[row * inner * size..(row + 1) * inner * size];
            if inner_stride == 1 {
                dst.copy_from_slice(&src[base * size..(base + inner) * size]);
            } else {
                for (j, d) in dst.chunks_exact_mut(size).enumerate() {
                    let e = (base + j * inner_stride) * size;
                    d.copy_from_slice(&src[e..e + size]);
                }
            }
        }
        Ok(())
    })
}
