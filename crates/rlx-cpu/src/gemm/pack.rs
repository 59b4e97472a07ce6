//! Packing of A and B blocks into micro-panels, with contiguous fast paths for the layouts that
//! matter (row-major and transposed operands) and a strided fallback.

use super::{GemmElem, MatRef};

/// Packs rows `i0..i0+mc`, cols `p0..p0+kc` of A into MR-row panels, element (r, p) of a panel
/// at `p * MR + r` (rows past `mc` zero padded).
///
/// # Safety
/// The view covers the requested block; `out` holds `mc.div_ceil(MR) * MR * kc` elements.
pub unsafe fn pack_a<T: GemmElem>(a: MatRef<T>, i0: usize, mc: usize, p0: usize, kc: usize, out: &mut [T]) {
    let mr = T::MR;
    for (panel, chunk) in out.chunks_exact_mut(kc * mr).enumerate().take(mc.div_ceil(mr)) {
        let r0 = panel * mr;
        let rows = mr.min(mc - r0);
        // SAFETY: (i0 + r0, p0) lies inside A.
        let base = unsafe { a.ptr.offset((i0 + r0) as isize * a.rs + p0 as isize * a.cs) };
        if a.cs == 1 {
            // Row-major: read each row contiguously, scatter into the panel.
            for r in 0..mr {
                if r < rows {
                    // SAFETY: row r has kc elements from `base`.
                    let row = unsafe { std::slice::from_raw_parts(base.offset(r as isize * a.rs), kc) };
                    for (p, &v) in row.iter().enumerate() {
                        chunk[p * mr + r] = v;
                    }
                } else {
                    (0..kc).for_each(|p| chunk[p * mr + r] = T::default());
                }
            }
        } else if a.rs == 1 && rows == mr {
            // Column-major: each k step is MR contiguous elements.
            for (p, dst) in chunk.chunks_exact_mut(mr).enumerate() {
                // SAFETY: column p0 + p holds rows i0 + r0 .. + MR.
                dst.copy_from_slice(unsafe { std::slice::from_raw_parts(base.offset(p as isize * a.cs), mr) });
            }
        } else {
            for p in 0..kc {
                for r in 0..mr {
                    chunk[p * mr + r] = if r < rows {
                        // SAFETY: (r, p) lies inside the block.
                        unsafe { *base.offset(r as isize * a.rs + p as isize * a.cs) }
                    } else {
                        T::default()
                    };
                }
            }
        }
    }
}

/// Packs rows `p0..p0+kc`, cols `j0..j0+nc` of B into NR-column panels, element (p, c) of a
/// panel at `p * NR + c` (columns past `nc` zero padded).
///
/// # Safety
/// The view covers the requested block; `out` holds `nc.div_ceil(NR) * NR * kc` elements.
pub unsafe fn pack_b<T: GemmElem>(b: MatRef<T>, p0: usize, kc: usize, j0: usize, nc: usize, out: &mut [T]) {
    let nr = T::NR;
    for (panel, chunk) in out.chunks_exact_mut(kc * nr).enumerate().take(nc.div_ceil(nr)) {
        let c0 = panel * nr;
        let cols = nr.min(nc - c0);
        // SAFETY: (p0, j0 + c0) lies inside B.
        let base = unsafe { b.ptr.offset(p0 as isize * b.rs + (j0 + c0) as isize * b.cs) };
        if b.cs == 1 {
            // Row-major: each k step is `cols` contiguous elements.
            for (p, dst) in chunk.chunks_exact_mut(nr).enumerate() {
                // SAFETY: row p0 + p holds `cols` elements from column j0 + c0.
                let src = unsafe { std::slice::from_raw_parts(base.offset(p as isize * b.rs), cols) };
                dst[..cols].copy_from_slice(src);
                dst[cols..].fill(T::default());
            }
        } else if b.rs == 1 {
            // Column-major (a transposed weight): read each column contiguously.
            for c in 0..nr {
                if c < cols {
                    // SAFETY: column c has kc elements from `base`.
                    let col = unsafe { std::slice::from_raw_parts(base.offset(c as isize * b.cs), kc) };
                    for (p, &v) in col.iter().enumerate() {
                        chunk[p * nr + c] = v;
                    }
                } else {
                    (0..kc).for_each(|p| chunk[p * nr + c] = T::default());
                }
            }
        } else {
            for p in 0..kc {
                for c in 0..nr {
                    chunk[p * nr + c] = if c < cols {
                        // SAFETY: (p, c) lies inside the block.
                        unsafe { *base.offset(p as isize * b.rs + c as isize * b.cs) }
                    } else {
                        T::default()
                    };
                }
            }
        }
    }
}
