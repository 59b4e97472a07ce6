//! Packed, cache-blocked GEMM: C = A * B with arbitrary strides (so transposed operands cost
//! nothing), BLIS-style loops around a register-blocked micro-kernel chosen at run time
//! (AVX2+FMA on x86-64, a portable kernel elsewhere). Packing buffers live in process-wide slots,
//! one per task index, grown once and reused, so a warm call allocates nothing. Work is split
//! across the shared thread pool.

mod gemv;
mod kernels;

use crate::threads;
use std::sync::Mutex;

/// A strided matrix view: element (i, j) is at `ptr[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub struct MatRef<T> {
    /// First element.
    pub ptr: *const T,
    /// Row stride in elements.
    pub rs: isize,
    /// Column stride in elements.
    pub cs: isize,
}

// SAFETY: a read-only view; callers keep the data alive and unaliased by writers during the call.
unsafe impl<T: Sync> Sync for MatRef<T> {}
unsafe impl<T: Sync> Send for MatRef<T> {}

/// A row-major output matrix with row stride `rs`.
#[derive(Clone, Copy)]
pub struct MatMut<T> {
    /// First element.
    pub ptr: *mut T,
    /// Row stride in elements.
    pub rs: isize,
}

// SAFETY: tasks write disjoint column ranges of C.
unsafe impl<T: Send> Sync for MatMut<T> {}
unsafe impl<T: Send> Send for MatMut<T> {}

/// An element type with a micro-kernel.
pub trait GemmElem: gemv::GemvElem + Send + Sync + 'static {
    /// Micro-tile rows and columns.
    const MR: usize;
    /// Micro-tile columns.
    const NR: usize;
    /// Computes an MR x NR tile `acc = sum_p a[p*MR + i] * b[p*NR + j]` and writes or adds it
    /// into C at `c` (row stride `rs`), only the first `m` x `n` entries.
    ///
    /// # Safety
    /// `a` holds `kc * MR`, `b` holds `kc * NR` elements, `c` covers m x n with stride `rs`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn micro(
        kc: usize,
        a: *const Self,
        b: *const Self,
        c: *mut Self,
        rs: isize,
        m: usize,
        n: usize,
        accumulate: bool,
    );
    /// The packing buffers (A, B) of task slot `slot`.
    fn with_buffers<R>(slot: usize, f: impl FnOnce(&mut Vec<Self>, &mut Vec<Self>) -> R) -> R;
}

const KC: usize = 256;
const MC: usize = 96;
const NC: usize = 2048;

/// Most tasks one GEMM is split into (one packing slot each).
const MAX_TASKS: usize = 64;

type Slots<T> = [Mutex<(Vec<T>, Vec<T>)>; MAX_TASKS];
static BUF_F32: Slots<f32> = [const { Mutex::new((Vec::new(), Vec::new())) }; MAX_TASKS];
static BUF_F64: Slots<f64> = [const { Mutex::new((Vec::new(), Vec::new())) }; MAX_TASKS];

fn with_slot<T, R>(slots: &Slots<T>, slot: usize, f: impl FnOnce(&mut Vec<T>, &mut Vec<T>) -> R) -> R {
    let mut b = slots[slot % MAX_TASKS].lock().unwrap_or_else(|e| e.into_inner());
    let (pa, pb) = &mut *b;
    f(pa, pb)
}

impl GemmElem for f32 {
    const MR: usize = 6;
    const NR: usize = 16;
    unsafe fn micro(kc: usize, a: *const f32, b: *const f32, c: *mut f32, rs: isize, m: usize, n: usize, acc: bool) {
        unsafe { kernels::micro_f32(kc, a, b, c, rs, m, n, acc) }
    }
    fn with_buffers<R>(slot: usize, f: impl FnOnce(&mut Vec<f32>, &mut Vec<f32>) -> R) -> R {
        with_slot(&BUF_F32, slot, f)
    }
}

impl GemmElem for f64 {
    const MR: usize = 6;
    const NR: usize = 8;
    unsafe fn micro(kc: usize, a: *const f64, b: *const f64, c: *mut f64, rs: isize, m: usize, n: usize, acc: bool) {
        unsafe { kernels::micro_f64(kc, a, b, c, rs, m, n, acc) }
    }
    fn with_buffers<R>(slot: usize, f: impl FnOnce(&mut Vec<f64>, &mut Vec<f64>) -> R) -> R {
        with_slot(&BUF_F64, slot, f)
    }
}

/// Packs rows `i0..i0+mc`, cols `p0..p0+kc` of A into MR-row panels (zero padded).
///
/// # Safety
/// The view covers the requested block.
unsafe fn pack_a<T: GemmElem>(a: MatRef<T>, i0: usize, mc: usize, p0: usize, kc: usize, out: &mut [T]) {
    let mr = T::MR;
    for (panel, chunk) in out.chunks_exact_mut(kc * mr).enumerate().take(mc.div_ceil(mr)) {
        let r0 = panel * mr;
        for p in 0..kc {
            for r in 0..mr {
                chunk[p * mr + r] = if r0 + r < mc {
                    // SAFETY: (i0 + r0 + r, p0 + p) lies inside A.
                    unsafe { *a.ptr.offset((i0 + r0 + r) as isize * a.rs + (p0 + p) as isize * a.cs) }
                } else {
                    T::default()
                };
            }
        }
    }
}

/// Packs rows `p0..p0+kc`, cols `j0..j0+nc` of B into NR-column panels (zero padded).
///
/// # Safety
/// The view covers the requested block.
unsafe fn pack_b<T: GemmElem>(b: MatRef<T>, p0: usize, kc: usize, j0: usize, nc: usize, out: &mut [T]) {
    let nr = T::NR;
    for (panel, chunk) in out.chunks_exact_mut(kc * nr).enumerate().take(nc.div_ceil(nr)) {
        let c0 = panel * nr;
        for p in 0..kc {
            let row = &mut chunk[p * nr..(p + 1) * nr];
            for (j, v) in row.iter_mut().enumerate() {
                *v = if c0 + j < nc {
                    // SAFETY: (p0 + p, j0 + c0 + j) lies inside B.
                    unsafe { *b.ptr.offset((p0 + p) as isize * b.rs + (j0 + c0 + j) as isize * b.cs) }
                } else {
                    T::default()
                };
            }
        }
    }
}

/// Single-threaded C[:, j0..j0+n] = A * B[:, j0..j0+n] for an m x k times k x n product.
///
/// `slot` picks the packing buffers (one per concurrent task).
///
/// # Safety
/// Views cover m x k, k x (j0+n) and m x (j0+n); C's columns j0..j0+n are not touched by others.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_block<T: GemmElem>(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    b: MatRef<T>,
    c: MatMut<T>,
    j0: usize,
    slot: usize,
) {
    let (mr, nr) = (T::MR, T::NR);
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                // SAFETY: inside C.
                unsafe { *c.ptr.offset(i as isize * c.rs + (j0 + j) as isize) = T::default() };
            }
        }
        return;
    }
    T::with_buffers(slot, |pa, pb| {
        let need_a = MC.div_ceil(mr) * mr * KC;
        let need_b = NC.div_ceil(nr) * nr * KC;
        if pa.len() < need_a {
            pa.resize(need_a, T::default());
        }
        if pb.len() < need_b {
            pb.resize(need_b, T::default());
        }
        for jc in (0..n).step_by(NC) {
            let nc = NC.min(n - jc);
            for pc in (0..k).step_by(KC) {
                let kc = KC.min(k - pc);
                // SAFETY: the block lies inside B.
                unsafe { pack_b(b, pc, kc, j0 + jc, nc, pb) };
                for ic in (0..m).step_by(MC) {
                    let mcb = MC.min(m - ic);
                    // SAFETY: the block lies inside A.
                    unsafe { pack_a(a, ic, mcb, pc, kc, pa) };
                    for jr in (0..nc).step_by(nr) {
                        for ir in (0..mcb).step_by(mr) {
                            let ap = pa[(ir / mr) * kc * mr..].as_ptr();
                            let bp = pb[(jr / nr) * kc * nr..].as_ptr();
                            let cp = c.ptr.wrapping_offset((ic + ir) as isize * c.rs + (j0 + jc + jr) as isize);
                            // SAFETY: panels hold kc*MR / kc*NR elements; the tile lies inside C.
                            unsafe { T::micro(kc, ap, bp, cp, c.rs, mr.min(mcb - ir), nr.min(nc - jr), pc > 0) };
                        }
                    }
                }
            }
        }
    })
}

/// C = A * B (m x k times k x n), split across the thread pool by column blocks.
///
/// # Safety
/// The views cover their matrices; C does not alias A or B.
pub unsafe fn gemm<T: GemmElem>(m: usize, n: usize, k: usize, a: MatRef<T>, b: MatRef<T>, c: MatMut<T>) {
    let threads = threads::num_threads();
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    if m < 4 {
        // Decode shapes: stream B once per row instead of packing it.
        let tasks = if flops < 2.0e5 { 1 } else { threads.min(n.div_ceil(64)).max(1) };
        let per = n.div_ceil(tasks).div_ceil(16) * 16;
        for i in 0..m {
            let (ai, ci) = (
                MatRef { ptr: a.ptr.wrapping_offset(i as isize * a.rs), ..a },
                MatMut { ptr: c.ptr.wrapping_offset(i as isize * c.rs), ..c },
            );
            threads::parallel_for(tasks, &|t| {
                let (j0, j1) = ((t * per).min(n), ((t + 1) * per).min(n));
                // SAFETY: tasks own disjoint column ranges of row i.
                unsafe { gemv::gemv_cols(k, ai, b, ci, j0, j1) };
            });
        }
        return;
    }
    // Small products are not worth waking threads for.
    let tasks = if flops < 2.0e5 { 1 } else { threads.min(n.div_ceil(T::NR)).clamp(1, MAX_TASKS) };
    if tasks == 1 {
        // SAFETY: forwarded.
        return unsafe { gemm_block(m, n, k, a, b, c, 0, 0) };
    }
    let per = n.div_ceil(tasks).div_ceil(T::NR) * T::NR;
    threads::parallel_for(tasks, &|t| {
        let j0 = t * per;
        if j0 < n {
            // SAFETY: tasks own disjoint column ranges.
            unsafe { gemm_block(m, per.min(n - j0), k, a, b, c, j0, t) };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(m: usize, n: usize, k: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    #[test]
    fn matches_naive_on_awkward_sizes_and_transposes() {
        for &(m, n, k) in &[
            (1, 1, 1),
            (1, 700, 300),
            (3, 40, 9),
            (7, 17, 5),
            (13, 33, 300),
            (100, 70, 257),
            (1, 300, 40),
            (97, 2100, 3),
            (6, 16, 0),
        ] {
            let a: Vec<f64> = (0..m * k).map(|i| ((i * 7 % 13) as f64 - 6.0) / 5.0).collect();
            let b: Vec<f64> = (0..k * n).map(|i| ((i * 5 % 11) as f64 - 5.0) / 3.0).collect();
            let want = naive(m, n, k, &a, &b);
            let mut c = vec![f64::NAN; m * n];
            let (av, bv) =
                (MatRef { ptr: a.as_ptr(), rs: k as isize, cs: 1 }, MatRef { ptr: b.as_ptr(), rs: n as isize, cs: 1 });
            unsafe { gemm(m, n, k, av, bv, MatMut { ptr: c.as_mut_ptr(), rs: n as isize }) };
            for (x, y) in c.iter().zip(&want) {
                assert!((x - y).abs() < 1e-9, "f64 {m}x{n}x{k}: {x} vs {y}");
            }
            // f32, with A given transposed (column-major) and B transposed.
            let at: Vec<f32> = (0..m * k).map(|i| a[(i % m) * k + i / m] as f32).collect();
            let bt: Vec<f32> = (0..k * n).map(|i| b[(i % k) * n + i / k] as f32).collect();
            let mut c32 = vec![f32::NAN; m * n];
            let av = MatRef { ptr: at.as_ptr(), rs: 1, cs: m as isize };
            let bv = MatRef { ptr: bt.as_ptr(), rs: 1, cs: k as isize };
            unsafe { gemm(m, n, k, av, bv, MatMut { ptr: c32.as_mut_ptr(), rs: n as isize }) };
            for (x, y) in c32.iter().zip(&want) {
                assert!((*x as f64 - y).abs() < 1e-3 * (1.0 + y.abs()), "f32 {m}x{n}x{k}: {x} vs {y}");
            }
        }
    }
}
