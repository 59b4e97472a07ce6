//! Data movement (reshape, transpose, broadcast, slice, concat, ...): one kernel for every op
//! with the DATA_MOVEMENT trait. Its index map comes from `rlx_driver::movement_index_map` (the
//! op's reference run on element ids), so a new movement op needs no CPU code. Transpose,
//! broadcast and slice are strided views of their input and get a loop over rows instead
//! (no map to build or read).

use super::math::SharedMut;
use super::{ALL, Kernel, KernelBuilder, KernelCtx, unsupported};
use crate::exec::Bufs;
use crate::threads::{num_threads, parallel_for};
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
    if let Some(view) = strided_view(ctx).filter(|v| v.dims.len() <= MAX_RANK) {
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

/// Most axes a strided view keeps after `collapse` (more take the index-map path).
const MAX_RANK: usize = 16;

/// Bytes below which a strided copy stays on the calling thread.
const PARALLEL_BYTES: usize = 1 << 16;

fn strided_kernel(v: StridedView, size: usize) -> Kernel {
    let r = v.dims.len();
    let (inner, inner_stride) = (v.dims[r - 1], v.strides[r - 1]);
    let rows: usize = v.dims[..r - 1].iter().product();
    // Large copies (attention's head transposes) split their rows over the pool.
    let tasks = if rows * inner * size >= PARALLEL_BYTES { (2 * num_threads()).min(rows) } else { 1 };
    Box::new(move |b: &Bufs<'_>| {
        let src = b.input_bytes(0);
        let out = b.output_bytes();
        assert!(out.len() >= rows * inner * size, "strided copy: output too small");
        let dst = SharedMut(out.as_mut_ptr());
        let copy_rows = |lo: usize, hi: usize| {
            // The first row's index over the outer axes, then an odometer (no division per row).
            let mut idx = [0usize; MAX_RANK];
            let (mut rest, mut base) = (lo, v.offset);
            for k in (0..r - 1).rev() {
                idx[k] = rest % v.dims[k];
                base += idx[k] * v.strides[k];
                rest /= v.dims[k];
            }
            for row in lo..hi {
                if row > lo {
                    let mut k = r - 2;
                    idx[k] += 1;
                    base += v.strides[k];
                    while idx[k] == v.dims[k] && k > 0 {
                        base -= v.dims[k] * v.strides[k];
                        idx[k] = 0;
                        k -= 1;
                        idx[k] += 1;
                        base += v.strides[k];
                    }
                }
                // SAFETY: rows are disjoint output ranges, inside the output (asserted above).
                let d = unsafe { dst.slice(row * inner * size, inner * size) };
                if inner_stride == 1 {
                    d.copy_from_slice(&src[base * size..(base + inner) * size]);
                } else {
                    // Elements `inner_stride` apart: a typed gather for the common sizes (a byte
                    // copy per element compiled to a `memcpy` call each).
                    assert!((base + (inner - 1) * inner_stride + 1) * size <= src.len(), "strided copy: source");
                    match size {
                        // SAFETY (both): every element read lies inside `src` (asserted above), and
                        // `d` holds `inner` elements of `size` bytes.
                        4 => unsafe { gather::<u32>(src.as_ptr(), base, inner_stride, d) },
                        8 => unsafe { gather::<u64>(src.as_ptr(), base, inner_stride, d) },
                        _ => {
                            for (j, d) in d.chunks_exact_mut(size).enumerate() {
                                let e = (base + j * inner_stride) * size;
                                d.copy_from_slice(&src[e..e + size]);
                            }
                        }
                    }
                }
            }
        };
        parallel_for(tasks, &|t| copy_rows(rows * t / tasks, rows * (t + 1) / tasks));
        Ok(())
    })
}

/// Copies elements `base, base + stride, ...` of type `E` from `src` (bytes) into `d` (bytes,
/// `d.len() / size_of::<E>()` elements), unaligned reads and writes.
///
/// # Safety
/// Every element read lies inside the buffer at `src`.
unsafe fn gather<E: Copy>(src: *const u8, base: usize, stride: usize, d: &mut [u8]) {
    let (size, out) = (std::mem::size_of::<E>(), d.as_mut_ptr());
    for j in 0..d.len() / size {
        // SAFETY: the caller's bounds for the read; element j of `d` for the write.
        unsafe {
            let v = (src.add((base + j * stride) * size) as *const E).read_unaligned();
            (out.add(j * size) as *mut E).write_unaligned(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use rlx_ir::{DType, Graph, HostTensor, Shape};

    /// Strided copies split over the pool (large) and on one thread (small), against the
    /// reference interpreter: odometer carries over several axes, broadcast and sliced views.
    #[test]
    fn strided_views_match_the_reference() {
        let cases: [(&[usize], &[usize]); 5] = [
            (&[6, 40, 7, 33], &[2, 0, 3, 1]),
            (&[8, 128, 12, 32], &[0, 2, 1, 3]),
            (&[3, 4, 5], &[2, 1, 0]),
            (&[2, 3], &[1, 0]),
            // The LLM graphs' RoPE layout: pairs split into halves (innermost stride 2).
            (&[1, 128, 8, 32, 2], &[0, 2, 1, 4, 3]),
        ];
        // 4- and 8-byte elements take the typed gathers, 2-byte ones the byte copies.
        for ((dims, perm), dt) in cases.into_iter().flat_map(|c| [DType::F32, DType::F64, DType::F16].map(|d| (c, d))) {
            let n: usize = dims.iter().product();
            let mut g = Graph::new("t");
            let x = g.input("x", Shape::new(dims, dt));
            let t = g.transpose(x, perm);
            let s = g.slice_axis(t, 1, 1, dims[perm[1]]);
            let e = g.expand_dims(s, 0);
            let mut bd = g.shape(e).unwrap().fixed_dims().unwrap();
            bd[0] = 3;
            let bcast = g.broadcast_to(e, &bd);
            g.set_outputs(vec![t, bcast]);
            let data: Vec<f64> = (0..n).map(|i| (i % 2048) as f64).collect();
            let feeds = [("x", HostTensor::from_f64(dims, dt, &data).unwrap())];
            let got = rlx_driver::run_host(&crate::CpuBackend::new(), &g, &feeds).unwrap();
            let want = rlx_ir::interp::evaluate(&g, &feeds).unwrap();
            for (a, b) in got.iter().zip(&want) {
                assert_eq!(a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap(), "{dims:?} {perm:?} {dt:?}");
            }
        }
    }
}
