//! f16/bf16 matrix-vector products (one row of A, the decode case): B is streamed once and
//! widened on the fly, sums are kept in f32 and rounded once into C.

#[cfg(target_arch = "x86_64")]
use super::half_convert::simd;
use super::half_convert::{HalfElem, narrow};
use super::{MatMut, MatRef};

/// Output columns accumulated together in f32 (a stack buffer) for a row-major B.
const COLS: usize = 256;

/// `c[0, j0..j1] = a[0, :] * B[:, j0..j1]` for one row `a` of length k.
///
/// # Safety
/// Views cover 1 x k, k x j1 and 1 x j1.
pub unsafe fn gemv_cols<H: HalfElem>(k: usize, a: MatRef<H>, b: MatRef<H>, c: MatMut<H>, j0: usize, j1: usize) {
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: the features are present; the rest is forwarded.
        return unsafe { x86::gemv(k, a, b, c, j0, j1) };
    }
    // SAFETY: forwarded.
    unsafe { portable(k, a, b, c, j0, j1) }
}

/// Scalar loops: row-major B as `y += a[p] * B[p, :]` over column chunks, otherwise dot
/// products per output.
///
/// # Safety
/// As `gemv_cols`.
unsafe fn portable<H: HalfElem>(k: usize, a: MatRef<H>, b: MatRef<H>, c: MatMut<H>, j0: usize, j1: usize) {
    // SAFETY (whole function): every index stays inside the views the caller vouched for.
    unsafe {
        let av = |p: usize| (*a.ptr.offset(p as isize * a.cs)).to_f32();
        let bv = |p: usize, j: usize| (*b.ptr.offset(p as isize * b.rs + j as isize * b.cs)).to_f32();
        if b.cs == 1 {
            let mut acc = [0f32; COLS];
            for jc in (j0..j1).step_by(COLS) {
                let w = COLS.min(j1 - jc);
                acc[..w].fill(0.0);
                for p in 0..k {
                    let x = av(p);
                    for (jj, s) in acc[..w].iter_mut().enumerate() {
                        *s = x.mul_add(bv(p, jc + jj), *s);
                    }
                }
                narrow(acc.as_ptr(), w, c.ptr.add(jc));
            }
        } else {
            for j in j0..j1 {
                let s = (0..k).fold(0f32, |s, p| av(p).mul_add(bv(p, j), s));
                *c.ptr.add(j) = H::from_f32(s);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    // Intrinsics code: every statement is unsafe; the functions document the contract.
    #![allow(unsafe_op_in_unsafe_fn)]
    use super::{COLS, HalfElem, MatMut, MatRef, narrow};
    use std::arch::x86_64::*;

    /// `gemv_cols` with AVX2+FMA+F16C.
    ///
    /// # Safety
    /// As `gemv_cols`; the CPU has AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn gemv<H: HalfElem>(k: usize, a: MatRef<H>, b: MatRef<H>, c: MatMut<H>, j0: usize, j1: usize) {
        if b.cs == 1 {
            rows(k, a, b, c, j0, j1)
        } else if b.rs == 1 && a.cs == 1 {
            dots(k, a, b, c, j0, j1)
        } else {
            super::portable(k, a, b, c, j0, j1)
        }
    }

    /// Row-major B: f32 sums for up to `COLS` columns on the stack, four rows of B per pass.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn rows<H: HalfElem>(k: usize, a: MatRef<H>, b: MatRef<H>, c: MatMut<H>, j0: usize, j1: usize) {
        let mut acc = [0f32; COLS];
        let av = |p: usize| _mm256_set1_ps((*a.ptr.offset(p as isize * a.cs)).to_f32());
        let row = |p: usize, j: usize| b.ptr.offset(p as isize * b.rs).add(j);
        for jc in (j0..j1).step_by(COLS) {
            let w = COLS.min(j1 - jc);
            let wv = w / 8 * 8;
            acc[..w].fill(0.0);
            let s = acc.as_mut_ptr();
            let mut p = 0;
            while p + 4 <= k {
                let (x0, x1, x2, x3) = (av(p), av(p + 1), av(p + 2), av(p + 3));
                let (r0, r1, r2, r3) = (row(p, jc), row(p + 1, jc), row(p + 2, jc), row(p + 3, jc));
                let mut j = 0;
                while j < wv {
                    let mut v = _mm256_loadu_ps(s.add(j));
                    v = _mm256_fmadd_ps(x0, H::load8(r0.add(j)), v);
                    v = _mm256_fmadd_ps(x1, H::load8(r1.add(j)), v);
                    v = _mm256_fmadd_ps(x2, H::load8(r2.add(j)), v);
                    v = _mm256_fmadd_ps(x3, H::load8(r3.add(j)), v);
                    _mm256_storeu_ps(s.add(j), v);
                    j += 8;
                }
                p += 4;
            }
            while p < k {
                let (x, r) = (av(p), row(p, jc));
                let mut j = 0;
                while j < wv {
                    _mm256_storeu_ps(s.add(j), _mm256_fmadd_ps(x, H::load8(r.add(j)), _mm256_loadu_ps(s.add(j))));
                    j += 8;
                }
                p += 1;
            }
            // The last w % 8 columns, scalar.
            for j in wv..w {
                let mut t = 0f32;
                for p in 0..k {
                    t = (*a.ptr.offset(p as isize * a.cs)).to_f32().mul_add((*row(p, jc + j)).to_f32(), t);
                }
                *s.add(j) = t;
            }
            narrow(s, w, c.ptr.add(jc));
        }
    }

    /// Column-major B (a transposed weight) and contiguous a: four dot products at a time, two
    /// f32 accumulators each.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dots<H: HalfElem>(k: usize, a: MatRef<H>, b: MatRef<H>, c: MatMut<H>, j0: usize, j1: usize) {
        let kv = k / 16 * 16;
        let col = |j: usize| b.ptr.offset(j as isize * b.cs);
        let tail = |j: usize| {
            let cj = col(j);
            (kv..k).fold(0f32, |s, p| (*a.ptr.add(p)).to_f32().mul_add((*cj.add(p)).to_f32(), s))
        };
        let mut out = [0f32; 4];
        let mut j = j0;
        while j + 4 <= j1 {
            let cols = [col(j), col(j + 1), col(j + 2), col(j + 3)];
            let mut acc = [[_mm256_setzero_ps(); 2]; 4];
            let mut p = 0;
            while p < kv {
                let (x0, x1) = (H::load8(a.ptr.add(p)), H::load8(a.ptr.add(p + 8)));
                for (s, cp) in acc.iter_mut().zip(&cols) {
                    s[0] = _mm256_fmadd_ps(x0, H::load8(cp.add(p)), s[0]);
                    s[1] = _mm256_fmadd_ps(x1, H::load8(cp.add(p + 8)), s[1]);
                }
                p += 16;
            }
            for (o, (s, jj)) in out.iter_mut().zip(acc.iter().zip(j..)) {
                *o = hsum(_mm256_add_ps(s[0], s[1])) + tail(jj);
            }
            narrow(out.as_ptr(), 4, c.ptr.add(j));
            j += 4;
        }
        while j < j1 {
            let cp = col(j);
            let mut s = [_mm256_setzero_ps(); 2];
            let mut p = 0;
            while p < kv {
                s[0] = _mm256_fmadd_ps(H::load8(a.ptr.add(p)), H::load8(cp.add(p)), s[0]);
                s[1] = _mm256_fmadd_ps(H::load8(a.ptr.add(p + 8)), H::load8(cp.add(p + 8)), s[1]);
                p += 16;
            }
            *c.ptr.add(j) = H::from_f32(hsum(_mm256_add_ps(s[0], s[1])) + tail(j));
            j += 1;
        }
    }

    /// The sum of the eight lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
    }
}
