//! Packed, cache-blocked GEMM: C = A * B with arbitrary strides (so transposed operands cost
//! nothing), BLIS-style loops around a register-blocked micro-kernel chosen at run time
//! (AVX2+FMA on x86-64, a portable kernel elsewhere). A row-major A whose k block fits L2 is
//! read in place; B is packed as the product runs or once ahead of time (`pack_b_full`, for
//! weights). An optional epilogue runs on each finished block of C while it is in cache.
//! Packing buffers live in process-wide slots, one per pool thread, grown once and reused, so a
//! warm call allocates nothing. Work is split across the shared thread pool.

mod gemv;
mod kernels;
mod pack;

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

impl<T> MatRef<T> {
    /// The view starting `i` rows further down.
    pub fn skip_rows(self, i: usize) -> Self {
        MatRef { ptr: self.ptr.wrapping_offset(i as isize * self.rs), ..self }
    }
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

impl<T> MatMut<T> {
    /// The view starting `i` rows further down.
    pub fn skip_rows(self, i: usize) -> Self {
        MatMut { ptr: self.ptr.wrapping_offset(i as isize * self.rs), ..self }
    }
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
    /// Computes an MR x NR tile `acc = sum_p A(i, p) * b[p*NR + j]` and writes or adds it
    /// into C at `c` (row stride `rs`), only the first `m` x `n` entries. Rows of A past `m`
    /// are never read.
    ///
    /// # Safety
    /// `a` covers m x kc, `b` holds `kc * NR` elements, `c` covers m x n with stride `rs`;
    /// 1 <= m <= MR, 1 <= n <= NR.
    #[allow(clippy::too_many_arguments)]
    unsafe fn micro(
        kc: usize,
        a: APanel<Self>,
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
/// Deepest k done in one block.
const KC_ONE: usize = 384;
const MC: usize = 96;
const NC: usize = 2048;
/// B panels packed and finished together by `gemm_direct`.
const GROUP_PANELS: usize = 4;
/// Largest A read in place by the micro-kernels (see `direct_a`).
const DIRECT_A_BYTES: usize = 256 << 10;

/// The micro-kernel's view of A: element (i, p) at `ptr[i * rs + p * cs]` (a packed panel, or A
/// itself).
pub type APanel<T> = MatRef<T>;

/// A callback on finished blocks of C: `(first row, rows, first column, columns)`.
pub type Epilogue<'a> = &'a (dyn Fn(usize, usize, usize, usize) + Sync);

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
    unsafe fn micro(kc: usize, a: APanel<f32>, b: *const f32, c: *mut f32, rs: isize, m: usize, n: usize, acc: bool) {
        unsafe { kernels::micro_f32(kc, a, b, c, rs, m, n, acc) }
    }
    fn with_buffers<R>(slot: usize, f: impl FnOnce(&mut Vec<f32>, &mut Vec<f32>) -> R) -> R {
        with_slot(&BUF_F32, slot, f)
    }
}

impl GemmElem for f64 {
    const MR: usize = 6;
    const NR: usize = 8;
    unsafe fn micro(kc: usize, a: APanel<f64>, b: *const f64, c: *mut f64, rs: isize, m: usize, n: usize, acc: bool) {
        unsafe { kernels::micro_f64(kc, a, b, c, rs, m, n, acc) }
    }
    fn with_buffers<R>(slot: usize, f: impl FnOnce(&mut Vec<f64>, &mut Vec<f64>) -> R) -> R {
        with_slot(&BUF_F64, slot, f)
    }
}

/// The k block: all of k up to `KC_ONE` (one pass, no re-accumulation of C: the m = 128 model
/// shapes), else even blocks of at most `KC`, so a 16-wide B micro-panel (16 KiB of f32) and the
/// A micro-panel stay in L1 together.
fn kc_for(k: usize) -> usize {
    if k <= KC_ONE { k.max(1) } else { k.div_ceil(k.div_ceil(KC)) }
}

/// Whether micro-kernels read A in place (row-major, its m x kc block small enough to stay in
/// L2) instead of from a packed copy.
fn direct_a<T>(m: usize, k: usize, a: MatRef<T>) -> bool {
    a.cs == 1 && m * kc_for(k) * std::mem::size_of::<T>() <= DIRECT_A_BYTES
}

/// Single-threaded C[:, j0..j0+n] = A * B[:, j0..j0+n] for an m x k times k x n product;
/// `epi(i0, rows, j0, cols)` runs on each finished block of C while it is still in cache.
///
/// `slot` picks the packing buffers (`threads::slot()`: one per pool thread).
///
/// # Safety
/// Views cover m x k, k x (j0+n) and m x (j0+n); C's columns j0..j0+n are not touched by others.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_block<T: GemmElem>(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    b: BSrc<T>,
    c: MatMut<T>,
    j0: usize,
    slot: usize,
    epi: Option<Epilogue<'_>>,
) {
    let (mr, nr) = (T::MR, T::NR);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                // SAFETY: inside C.
                unsafe { *c.ptr.offset(i as isize * c.rs + (j0 + j) as isize) = T::default() };
            }
        }
        if let Some(f) = epi {
            f(0, m, j0, n);
        }
        return;
    }
    if direct_a(m, k, a) {
        // SAFETY: forwarded.
        return unsafe { gemm_direct(m, n, k, a, b, c, j0, slot, epi) };
    }
    let kcm = kc_for(k);
    let direct = false;
    T::with_buffers(slot, |pa, pb| {
        let need_a = if direct { 0 } else { MC.div_ceil(mr) * mr * kcm };
        let need_b = if b.prepacked() { 0 } else { NC.min(n).div_ceil(nr) * nr * kcm };
        if pa.len() < need_a {
            pa.resize(need_a, T::default());
        }
        if pb.len() < need_b {
            pb.resize(need_b, T::default());
        }
        for jc in (0..n).step_by(NC) {
            let nc = NC.min(n - jc);
            for pc in (0..k).step_by(kcm) {
                let kc = kcm.min(k - pc);
                let last = pc + kc == k;
                // SAFETY: the block lies inside B.
                unsafe { b.pack(pc, kc, j0 + jc, nc, pb) };
                for ic in (0..m).step_by(MC) {
                    let mcb = MC.min(m - ic);
                    if !direct {
                        // SAFETY: the block lies inside A.
                        unsafe { pack::pack_a(a, ic, mcb, pc, kc, pa) };
                    }
                    for jr in (0..nc).step_by(nr) {
                        let bp = b.panel(pb, k, pc, kc, j0 + jc, jr);
                        for ir in (0..mcb).step_by(mr) {
                            let ap = if direct {
                                let ptr = a.ptr.wrapping_offset((ic + ir) as isize * a.rs + pc as isize);
                                MatRef { ptr, rs: a.rs, cs: 1 }
                            } else {
                                MatRef { ptr: pa[(ir / mr) * kc * mr..].as_ptr(), rs: 1, cs: mr as isize }
                            };
                            let cp = c.ptr.wrapping_offset((ic + ir) as isize * c.rs + (j0 + jc + jr) as isize);
                            // SAFETY: A covers the tile's rows and kc columns, the B panel holds
                            // kc*NR elements; the tile lies inside C.
                            unsafe { T::micro(kc, ap, bp, cp, c.rs, mr.min(mcb - ir), nr.min(nc - jr), pc > 0) };
                        }
                    }
                    if last && let Some(f) = epi {
                        f(ic, mcb, j0 + jc, nc);
                    }
                }
            }
        }
    })
}

/// `gemm_block` for a row-major A that stays in L2: micro-kernels read A in place; B is packed
/// one panel group at a time right before use (so it is in L1/L2 when read), and each group of
/// columns is finished (all of k) before the next, so the epilogue sees it in cache.
///
/// # Safety
/// As `gemm_block`; `a.cs == 1`.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_direct<T: GemmElem>(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    b: BSrc<T>,
    c: MatMut<T>,
    j0: usize,
    slot: usize,
    epi: Option<Epilogue<'_>>,
) {
    let (mr, nr) = (T::MR, T::NR);
    let kcm = kc_for(k);
    let group = GROUP_PANELS * nr;
    T::with_buffers(slot, |_, pb| {
        let need_b = if b.prepacked() { 0 } else { GROUP_PANELS * nr * kcm };
        if pb.len() < need_b {
            pb.resize(need_b, T::default());
        }
        for jg in (0..n).step_by(group) {
            let nc = group.min(n - jg);
            for pc in (0..k).step_by(kcm) {
                let kc = kcm.min(k - pc);
                // SAFETY: the block lies inside B.
                unsafe { b.pack(pc, kc, j0 + jg, nc, pb) };
                for jr in (0..nc).step_by(nr) {
                    let bp = b.panel(pb, k, pc, kc, j0 + jg, jr);
                    for ir in (0..m).step_by(mr) {
                        let ap =
                            MatRef { ptr: a.ptr.wrapping_offset(ir as isize * a.rs + pc as isize), rs: a.rs, cs: 1 };
                        let cp = c.ptr.wrapping_offset(ir as isize * c.rs + (j0 + jg + jr) as isize);
                        // SAFETY: A covers the tile's rows and kc columns, the B panel holds
                        // kc*NR elements; the tile lies inside C.
                        unsafe { T::micro(kc, ap, bp, cp, c.rs, mr.min(m - ir), nr.min(nc - jr), pc > 0) };
                    }
                }
            }
            if let Some(f) = epi {
                f(0, m, j0 + jg, nc);
            }
        }
    })
}

/// Where the micro-kernels read B: a strided view packed block by block during the product, or
/// the whole of it packed ahead of time (`pack_b_full`: NR-column panels of all k rows).
#[derive(Clone, Copy)]
pub enum BSrc<T> {
    /// Packed as the product runs.
    View(MatRef<T>),
    /// Packed ahead of time; the view is kept for the matrix-vector path.
    Packed(MatRef<T>, *const T),
}

// SAFETY: read-only data that callers keep alive during the call.
unsafe impl<T: Sync> Sync for BSrc<T> {}
unsafe impl<T: Sync> Send for BSrc<T> {}

impl<T: GemmElem> BSrc<T> {
    fn prepacked(&self) -> bool {
        matches!(self, BSrc::Packed(..))
    }

    fn view(&self) -> MatRef<T> {
        match *self {
            BSrc::View(v) | BSrc::Packed(v, _) => v,
        }
    }

    /// Packs the block (rows pc.., columns j..) into `buf` unless B is packed already.
    ///
    /// # Safety
    /// As `pack::pack_b`.
    unsafe fn pack(&self, pc: usize, kc: usize, j: usize, nc: usize, buf: &mut [T]) {
        if let BSrc::View(v) = *self {
            // SAFETY: forwarded.
            unsafe { pack::pack_b(v, pc, kc, j, nc, buf) }
        }
    }

    /// The micro-panel of columns `jb + jr ..` and rows `pc .. pc + kc` (`jb` the packed
    /// block's first column, a multiple of NR).
    fn panel(&self, buf: &[T], k: usize, pc: usize, kc: usize, jb: usize, jr: usize) -> *const T {
        match *self {
            BSrc::View(_) => buf[(jr / T::NR) * kc * T::NR..].as_ptr(),
            BSrc::Packed(_, p) => p.wrapping_add(((jb + jr) / T::NR) * k * T::NR + pc * T::NR),
        }
    }
}

/// Elements of B (k x n) packed whole by `pack_b_full`.
pub fn packed_b_len<T: GemmElem>(k: usize, n: usize) -> usize {
    n.div_ceil(T::NR) * T::NR * k
}

/// Packs all of B (k x n) into NR-column panels of k rows, on the thread pool.
///
/// # Safety
/// The view covers k x n.
pub unsafe fn pack_b_full<T: GemmElem>(k: usize, n: usize, b: MatRef<T>, out: &mut [T]) {
    let panels = n.div_ceil(T::NR);
    assert!(out.len() >= panels * T::NR * k, "packed B buffer too small");
    if k == 0 {
        return;
    }
    let tasks = if k * n < 1 << 16 { 1 } else { panels.div_ceil(4).min(4 * threads::num_threads()) };
    let per = panels.div_ceil(tasks.max(1));
    let base = out.as_mut_ptr() as usize;
    threads::parallel_for(tasks, &|t| {
        let (p0, p1) = ((t * per).min(panels), ((t + 1) * per).min(panels));
        if p0 < p1 {
            let len = (p1 - p0) * T::NR * k;
            // SAFETY: tasks write disjoint panel ranges of `out`.
            let dst = unsafe { std::slice::from_raw_parts_mut((base as *mut T).add(p0 * T::NR * k), len) };
            // SAFETY: the block lies inside B.
            unsafe { pack::pack_b(b, 0, k, p0 * T::NR, (n - p0 * T::NR).min((p1 - p0) * T::NR), dst) };
        }
    });
}

/// C = A * B (m x k times k x n), split across the thread pool.
///
/// # Safety
/// The views cover their matrices; C does not alias A or B.
pub unsafe fn gemm<T: GemmElem>(m: usize, n: usize, k: usize, a: MatRef<T>, b: MatRef<T>, c: MatMut<T>) {
    // SAFETY: forwarded.
    unsafe { gemm_epi(m, n, k, a, b, c, None) }
}

/// C = A * B, then `epi(i0, rows, j0, cols)` on every block of C once it is final (from any
/// thread, each block once, blocks disjoint): bias and activation run while C is in cache.
///
/// # Safety
/// The views cover their matrices; C does not alias A or B.
pub unsafe fn gemm_epi<T: GemmElem>(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    b: MatRef<T>,
    c: MatMut<T>,
    epi: Option<Epilogue<'_>>,
) {
    // SAFETY: forwarded.
    unsafe { gemm_src(m, n, k, a, BSrc::View(b), c, epi) }
}

/// `gemm_epi` with B given as a view or already packed (`pack_b_full`).
///
/// # Safety
/// As `gemm_epi`; a packed B holds `packed_b_len(k, n)` elements packed from its view.
pub unsafe fn gemm_src<T: GemmElem>(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    b: BSrc<T>,
    c: MatMut<T>,
    epi: Option<Epilogue<'_>>,
) {
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
                unsafe { gemv::gemv_cols(k, ai, b.view(), ci, j0, j1) };
            });
        }
        if let Some(f) = epi {
            f(0, m, 0, n);
        }
        return;
    }
    // Small products are not worth waking threads for.
    let tiles_n = n.div_ceil(T::NR);
    let threads = if flops < 2.0e5 { 1 } else { threads.clamp(1, MAX_TASKS) };
    if a.cs == 1 && k > 0 && (b.prepacked() || direct_a(m, k, a)) {
        // A row-major and B packed once: a grid of (row block, column block) tasks that share
        // nothing, read A in place and are claimed dynamically (a descheduled thread's share
        // goes to the others). With B a view and many rows, B would be packed once per row
        // block: the classic path below packs it once.
        let size = std::mem::size_of::<T>();
        let rb = if direct_a(m, k, a) { m } else { (DIRECT_A_BYTES / 2 / (kc_for(k) * size) / T::MR).max(1) * T::MR };
        let row_blocks = m.div_ceil(rb);
        let mut cw = GROUP_PANELS;
        while row_blocks * tiles_n.div_ceil(cw) > MAX_TASKS {
            cw *= 2;
        }
        let col_blocks = tiles_n.div_ceil(cw);
        let task = |t: usize| {
            let (i0, j0) = ((t / col_blocks) * rb, (t % col_blocks) * cw * T::NR);
            let (rows, cols) = (rb.min(m - i0), (cw * T::NR).min(n - j0));
            let shifted = |i: usize, r: usize, j: usize, w: usize| epi.map_or((), |f| f(i0 + i, r, j, w));
            let epi_t = epi.map(|_| &shifted as Epilogue<'_>);
            // SAFETY: tasks own disjoint blocks of C.
            unsafe { gemm_direct(rows, cols, k, a.skip_rows(i0), b, c.skip_rows(i0), j0, threads::slot(), epi_t) };
        };
        let tasks = row_blocks * col_blocks;
        if threads == 1 {
            (0..tasks).for_each(task);
        } else {
            threads::parallel_for(tasks, &task);
        }
        return;
    }
    if threads == 1 {
        // SAFETY: forwarded.
        return unsafe { gemm_block(m, n, k, a, b, c, 0, threads::slot(), epi) };
    }
    if tiles_n >= 2 * threads || m < 2 * T::MR * threads {
        // Column blocks: each task packs only its own part of B, and A (packed per task).
        let per = tiles_n.div_ceil(threads) * T::NR;
        threads::parallel_for(threads, &|t| {
            let j0 = t * per;
            if j0 < n {
                // SAFETY: tasks own disjoint column ranges.
                unsafe { gemm_block(m, per.min(n - j0), k, a, b, c, j0, threads::slot(), epi) };
            }
        });
    } else {
        // Row blocks (few columns, many rows).
        let per = m.div_ceil(threads).div_ceil(T::MR) * T::MR;
        threads::parallel_for(threads, &|t| {
            let i0 = t * per;
            if i0 < m {
                let (at, ct) = (a.skip_rows(i0), c.skip_rows(i0));
                let shifted = |i: usize, r: usize, j: usize, w: usize| epi.map_or((), |f| f(i0 + i, r, j, w));
                let epi_t = epi.map(|_| &shifted as Epilogue<'_>);
                // SAFETY: tasks own disjoint row ranges.
                unsafe { gemm_block(per.min(m - i0), n, k, at, b, ct, 0, threads::slot(), epi_t) };
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn naive(m: usize, n: usize, k: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    /// Runs f64 and f32 products in every operand layout against the naive product, and checks
    /// that the epilogue sees each element of C exactly once, after it is final.
    fn check(m: usize, n: usize, k: usize) {
        let a: Vec<f64> = (0..m * k).map(|i| ((i * 7 % 13) as f64 - 6.0) / 5.0).collect();
        let b: Vec<f64> = (0..k * n).map(|i| ((i * 5 % 11) as f64 - 5.0) / 3.0).collect();
        let want = naive(m, n, k, &a, &b);
        let seen: Vec<AtomicU32> = (0..m * n).map(|_| AtomicU32::new(0)).collect();
        let mut c = vec![f64::NAN; m * n];
        let cp = c.as_mut_ptr() as usize;
        // The epilogue doubles each element: a block seen twice or too early shows up below.
        let epi = |i0: usize, r: usize, j0: usize, w: usize| {
            for i in i0..i0 + r {
                for j in j0..j0 + w {
                    seen[i * n + j].fetch_add(1, Ordering::Relaxed);
                    // SAFETY: blocks are disjoint, so this element is ours.
                    unsafe { *(cp as *mut f64).add(i * n + j) *= 2.0 };
                }
            }
        };
        let (av, bv) =
            (MatRef { ptr: a.as_ptr(), rs: k as isize, cs: 1 }, MatRef { ptr: b.as_ptr(), rs: n as isize, cs: 1 });
        unsafe { gemm_epi(m, n, k, av, bv, MatMut { ptr: c.as_mut_ptr(), rs: n as isize }, Some(&epi)) };
        for (x, y) in c.iter().zip(&want) {
            assert!((x - 2.0 * y).abs() < 1e-9, "f64 {m}x{n}x{k}: {x} vs {}", 2.0 * y);
        }
        assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1), "epilogue coverage {m}x{n}x{k}");
        // f32 in all four layouts (A and B each row- or column-major).
        let at: Vec<f32> = (0..m * k).map(|i| a[(i % m) * k + i / m] as f32).collect();
        let bt: Vec<f32> = (0..k * n).map(|i| b[(i % k) * n + i / k] as f32).collect();
        let a32: Vec<f32> = a.iter().map(|&x| x as f32).collect();
        let b32: Vec<f32> = b.iter().map(|&x| x as f32).collect();
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let av = if ta {
                MatRef { ptr: at.as_ptr(), rs: 1, cs: m as isize }
            } else {
                MatRef { ptr: a32.as_ptr(), rs: k as isize, cs: 1 }
            };
            let bv = if tb {
                MatRef { ptr: bt.as_ptr(), rs: 1, cs: k as isize }
            } else {
                MatRef { ptr: b32.as_ptr(), rs: n as isize, cs: 1 }
            };
            // B as a view, then packed ahead of time.
            let mut packed = vec![f32::NAN; packed_b_len::<f32>(k, n)];
            unsafe { pack_b_full(k, n, bv, &mut packed) };
            for src in [BSrc::View(bv), BSrc::Packed(bv, packed.as_ptr())] {
                let mut c32 = vec![f32::NAN; m * n];
                unsafe { gemm_src(m, n, k, av, src, MatMut { ptr: c32.as_mut_ptr(), rs: n as isize }, None) };
                for (x, y) in c32.iter().zip(&want) {
                    let ok = (*x as f64 - y).abs() < 1e-3 * (1.0 + y.abs());
                    assert!(ok, "f32 {m}x{n}x{k} t{ta}{tb} packed {}: {x} vs {y}", src.prepacked());
                }
            }
        }
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
            (5, 1, 1),
            (4, 1, 900),
        ] {
            check(m, n, k);
        }
    }

    #[test]
    fn every_split_and_blocking_path_matches_naive() {
        // Direct A with several k blocks; packed A (past DIRECT_A_BYTES) with partial panels;
        // the row split (few columns); k past one block with a ragged tail; row-block grids.
        for &(m, n, k) in
            &[(128, 200, 1000), (301, 77, 600), (200, 20, 50), (37, 2100, 390), (130, 35, 1200), (700, 50, 400)]
        {
            check(m, n, k);
        }
    }
}
