//! Matrix-vector products for the decode case (one row of A): B is streamed once, never packed.
//! Row-major B uses `y += a[p] * B[p, :]`; column-major B uses dot products per output.

use super::{MatMut, MatRef};

/// Elements this module computes with.
pub trait GemvElem: Copy + Default + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> {}
impl GemvElem for f32 {}
impl GemvElem for f64 {}

/// `c[0, j0..j1] = a[0, :] * B[:, j0..j1]` for one row `a` of length k.
///
/// # Safety
/// Views cover 1 x k, k x j1 and 1 x j1.
pub unsafe fn gemv_cols<T: GemvElem>(k: usize, a: MatRef<T>, b: MatRef<T>, c: MatMut<T>, j0: usize, j1: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the features are present; the rest is forwarded.
        return unsafe { gemv_avx2(k, a, b, c, j0, j1) };
    }
    unsafe { gemv_portable(k, a, b, c, j0, j1) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gemv_avx2<T: GemvElem>(k: usize, a: MatRef<T>, b: MatRef<T>, c: MatMut<T>, j0: usize, j1: usize) {
    // The same code, compiled with AVX2 so the loops vectorize.
    unsafe { gemv_portable(k, a, b, c, j0, j1) }
}

#[inline(always)]
unsafe fn gemv_portable<T: GemvElem>(k: usize, a: MatRef<T>, b: MatRef<T>, c: MatMut<T>, j0: usize, j1: usize) {
    let n = j1 - j0;
    // SAFETY (whole function): every index stays inside the views the caller vouched for.
    let out = unsafe { std::slice::from_raw_parts_mut(c.ptr.add(j0), n) };
    if b.cs == 1 {
        out.fill(T::default());
        for p in 0..k {
            let ap = unsafe { *a.ptr.offset(p as isize * a.cs) };
            let row = unsafe { std::slice::from_raw_parts(b.ptr.offset(p as isize * b.rs).add(j0), n) };
            for (y, &x) in out.iter_mut().zip(row) {
                *y = *y + ap * x;
            }
        }
    } else {
        // Column j of B is contiguous when rs == 1; otherwise strided (rare).
        let av: &[T] = if a.cs == 1 { unsafe { std::slice::from_raw_parts(a.ptr, k) } } else { &[] };
        for (jj, y) in out.iter_mut().enumerate() {
            let col = unsafe { b.ptr.offset((j0 + jj) as isize * b.cs) };
            *y = if b.rs == 1 && a.cs == 1 {
                dot(av, unsafe { std::slice::from_raw_parts(col, k) })
            } else {
                (0..k).fold(T::default(), |s, p| {
                    s + unsafe { *a.ptr.offset(p as isize * a.cs) * *col.offset(p as isize * b.rs) }
                })
            };
        }
    }
}

/// Dot product with 16 independent partial sums, so the loop vectorizes without reassociation.
#[inline(always)]
fn dot<T: GemvElem>(x: &[T], y: &[T]) -> T {
    let mut acc = [T::default(); 16];
    let (xc, yc) = (x.chunks_exact(16), y.chunks_exact(16));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (a, b) in xc.zip(yc) {
        for i in 0..16 {
            acc[i] = acc[i] + a[i] * b[i];
        }
    }
    let mut s = acc.iter().fold(T::default(), |s, &v| s + v);
    for (&a, &b) in xr.iter().zip(yr) {
        s = s + a * b;
    }
    s
}
