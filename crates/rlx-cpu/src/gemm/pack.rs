//! Packing of A and B blocks into micro-panels, with contiguous fast paths for the layouts that
//! matter (row-major and transposed operands) and a strided fallback.

use super::{GemmElem, MatRef};

/// Packs rows `i0..i0+mc`, cols `p0..p0+kc` of A into `mr`-row panels, element (r, p) of a
/// panel at `p * mr + r` (rows past `mc` zero padded).
///
/// # Safety
/// The view covers the requested block; `out` holds `mc.div_ceil(mr) * mr * kc` elements.
pub unsafe fn pack_a<T: GemmElem>(a: MatRef<T>, i0: usize, mc: usize, p0: usize, kc: usize, mr: usize, out: &mut [T]) {
    for (panel, chunk) in out.chunks_exact_mut(kc * mr).enumerate().take(mc.div_ceil(mr)) {
        let r0 = panel * mr;
        let rows = mr.min(mc - r0);
        // SAFETY: (i0 + r0, p0) lies inside A.
        let base = unsafe { a.ptr.offset((i0 + r0) as isize * a.rs + p0 as isize * a.cs) };
        #[cfg(target_arch = "x86_64")]
        if a.cs == 1 && rows == mr && is_f32::<T>() && super::kernels::has_avx2() {
            // SAFETY: T is f32; the rows hold kc elements each and the chunk mr * kc.
            unsafe {
                super::pack_x86::pack_a_rows_f32(base as *const f32, a.rs, mr, kc, chunk.as_mut_ptr() as *mut f32)
            };
            continue;
        }
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

/// Packs rows `p0..p0+kc`, cols `j0..j0+nc` of B into `nr`-column panels, element (p, c) of a
/// panel at `p * nr + c` (columns past `nc` zero padded).
///
/// # Safety
/// The view covers the requested block; `out` holds `nc.div_ceil(nr) * nr * kc` elements.
pub unsafe fn pack_b<T: GemmElem>(b: MatRef<T>, p0: usize, kc: usize, j0: usize, nc: usize, nr: usize, out: &mut [T]) {
    for (panel, chunk) in out.chunks_exact_mut(kc * nr).enumerate().take(nc.div_ceil(nr)) {
        let c0 = panel * nr;
        let cols = nr.min(nc - c0);
        // SAFETY: (p0, j0 + c0) lies inside B.
        let base = unsafe { b.ptr.offset(p0 as isize * b.rs + (j0 + c0) as isize * b.cs) };
        if b.cs == 1 && cols == nr {
            // Row-major, a full panel: each k step is NR contiguous elements.
            // SAFETY: rows p0.. hold NR elements from column j0 + c0; the chunk holds kc * NR.
            unsafe { copy_rows(base, b.rs, nr, kc, chunk.as_mut_ptr()) };
        } else if b.cs == 1 {
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

/// Whether T is f32, for the f32-only fast paths.
#[cfg(target_arch = "x86_64")]
fn is_f32<T: 'static>() -> bool {
    std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
}

/// Copies `kc` rows of `w` contiguous elements (source row stride `rs`) to `out`, back to back;
/// the common widths get fixed-size copies instead of a `memcpy` call per row.
///
/// # Safety
/// The source rows hold `w` elements each; `out` holds `kc * w`.
unsafe fn copy_rows<T: Copy>(src: *const T, rs: isize, w: usize, kc: usize, out: *mut T) {
    /// Fixed-width version.
    #[inline(always)]
    unsafe fn fixed<T: Copy, const W: usize>(src: *const T, rs: isize, kc: usize, out: *mut T) {
        for p in 0..kc {
            // SAFETY: as `copy_rows`.
            unsafe { std::ptr::copy_nonoverlapping(src.offset(p as isize * rs), out.add(p * W), W) };
        }
    }
    // SAFETY (all arms): as `copy_rows`.
    unsafe {
        match w {
            8 => fixed::<T, 8>(src, rs, kc, out),
            16 => fixed::<T, 16>(src, rs, kc, out),
            32 => fixed::<T, 32>(src, rs, kc, out),
            _ => (0..kc).for_each(|p| std::ptr::copy_nonoverlapping(src.offset(p as isize * rs), out.add(p * w), w)),
        }
    }
}
