//! Packed, cache-blocked GEMM: C = A * B with arbitrary strides (so transposed operands cost
//! nothing), BLIS-style loops around a register-blocked micro-kernel chosen once at run time
//! (AVX-512 12x32 / 12x16 or AVX2+FMA 6x16 / 6x8 for f32 / f64 on x86-64, NEON 8x12 / 6x8 on
//! aarch64, a portable kernel elsewhere). The task grid reads a row-major A in place (through a
//! padded copy when its rows are 4 KiB apart, except where its tasks pack B), the other paths
//! pack A a block at a time; B is packed as the product runs (for products with many rows: by
//! the grid's tasks in their first row tiles where the kernel can, `grid`, else all of it first;
//! else a block at a time, one copy shared by all threads) or once ahead of time (`pack_b_full`,
//! for weights). An optional epilogue runs on each finished block of C while it is in cache.
//! Packing buffers live in process-wide slots, one per pool thread, grown once and reused, so a
//! warm call allocates nothing; every buffer starts on a 64-byte line (`aligned_buf`).

#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_full;
#[cfg(target_arch = "x86_64")]
pub(crate) use avx512_full::{f32_packb_full, f32_strided_full};
mod blocked;
pub mod caches;
mod gemv;
mod grid;
pub mod half;
#[cfg(target_arch = "x86_64")]
pub(crate) mod half_amx;
#[cfg(target_arch = "x86_64")]
mod half_bf16;
mod half_convert;
mod half_gemv;
mod kernels;
#[cfg(target_arch = "aarch64")]
mod neon;
mod pack;
#[cfg(target_arch = "x86_64")]
mod pack_x86;
pub(crate) mod slots;

use crate::threads;
#[cfg(target_arch = "x86_64")]
pub(crate) use avx512::zmm_12x2_steps;
pub(crate) use blocked::aligned_buf;
pub(crate) use blocked::{RowBands, even_span};
use blocked::{direct_a, gemm_block, gemm_shared};
pub use grid::set_lazy_b_packing;
#[cfg(target_arch = "x86_64")]
pub(crate) use kernels::zmm_fma_split;
use slots::PackSlots;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

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

/// A micro-kernel's entry point, with the contract of `GemmElem::micro` for its own tile.
pub type MicroFn<T> = unsafe fn(usize, APanel<T>, *const T, *mut T, isize, usize, usize, bool);

/// `MicroFn` that also prefetches a stream into L2 across its k loop: from address `pf` (second
/// to last argument) on, one address per k step, the last argument (at most 64) bytes apart.
pub type StreamFn<T> = unsafe fn(usize, APanel<T>, *const T, *mut T, isize, usize, usize, bool, usize, usize);

/// A full `mr` x `nr` tile that also packs its B panel: A read in place (`a.cs == 1`), B's
/// source rows (`b.cs == 1`, `b.rs` apart) read once and stored to the packed panel at the third
/// argument (`kc * nr` elements), C at the fourth (row stride the fifth; the last: added to).
pub type PackTileFn<T> = unsafe fn(usize, APanel<T>, MatRef<T>, *mut T, *mut T, isize, bool);

/// A micro-kernel and its blocking: `micro` computes an `mr` x `nr` tile (the contract of
/// `GemmElem::micro` with MR = `mr`, NR = `nr`), k blocks are at most `kc` deep. An A panel with
/// `rs == 1, cs == mr` is taken as packed: all `mr` rows readable (zero padded past m).
#[derive(Clone, Copy)]
pub struct Kernel<T> {
    /// Name, for `RLX_GEMM_KERNEL` and reports.
    pub name: &'static str,
    /// Tile rows.
    pub mr: usize,
    /// Tile columns (also the width of packed B panels).
    pub nr: usize,
    /// Deepest k block.
    pub kc: usize,
    /// The tile routine.
    pub micro: MicroFn<T>,
    /// The tile routine with a prefetch stream, where the kernel has one.
    pub stream: Option<StreamFn<T>>,
    /// The full tile that packs its B panel as it runs, where the kernel has one: a product
    /// with B a view then packs B on its first row tiles instead of in a pass of its own.
    pub pack_tile: Option<PackTileFn<T>>,
}

impl<T> Kernel<T> {
    /// A kernel with neither a prefetch stream nor a packing tile.
    pub const fn plain(name: &'static str, mr: usize, nr: usize, kc: usize, micro: MicroFn<T>) -> Self {
        Kernel { name, mr, nr, kc, micro, stream: None, pack_tile: None }
    }
}

/// An element type with a micro-kernel.
pub trait GemmElem: gemv::GemvElem + Send + Sync + 'static {
    /// Rows of the portable tile (`micro`); `kernel()` may pick a wider one at run time.
    const MR: usize;
    /// Columns of the portable tile.
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
    /// Every micro-kernel this CPU can run, best first (the portable one last).
    fn kernels() -> Vec<Kernel<Self>>;
    /// The micro-kernel `gemm` uses: the best of `kernels()`, or the one `RLX_GEMM_KERNEL`
    /// names (a name prefix such as `avx2`). Chosen once per process.
    fn kernel() -> &'static Kernel<Self>;
    /// The packing buffers (A, B) of task slot `slot`.
    fn with_buffers<R>(slot: usize, f: impl FnOnce(&mut Vec<Self>, &mut Vec<Self>) -> R) -> R;
    /// The B block shared by all threads of one product, unless another product holds it.
    fn shared_b() -> Option<std::sync::MutexGuard<'static, Vec<Self>>>;
    /// The buffer a product with many rows packs all of its B into, unless another product holds it.
    fn whole_b() -> Option<std::sync::MutexGuard<'static, Vec<Self>>>;
}

/// Deepest k block of the 6x16 kernels (a 16 KiB B micro-panel).
const KC: usize = 256;
const MC: usize = 96;
/// Widest column block; `nc_block` rounds it down to whole micro-panels.
const NC: usize = 2048;

/// The column block for micro-panels `nr` wide: a prepacked B is addressed by whole panels, so
/// blocks must start on panel boundaries (12-wide NEON panels do not divide 2048).
fn nc_block(nr: usize) -> usize {
    NC / nr * nr
}
/// B panels packed and finished together by `gemm_direct`, and about the width of a task's
/// column block: fewer, wider column blocks re-read each row block of A fewer times (8 against
/// 4: session 11 in docs/benchmarks-history.md).
const GROUP_PANELS: usize = 8;
/// Whether products with many rows pack all of a view B up front (`set_whole_b_packing`).
static WHOLE_B: AtomicBool = AtomicBool::new(true);

/// Whether a product with a row-major A and many rows packs all of B once before its tasks run
/// (the default), or a block at a time (on several threads each block shared by the threads as
/// they go, on one the blocked loop of `gemm_block`).
/// For side-by-side measurements (`examples/gemm_paths.rs`); results are the same either way.
pub fn set_whole_b_packing(on: bool) {
    WHOLE_B.store(on, Ordering::Relaxed);
}

/// Largest B that a product packs whole (`whole_b`); a larger one is packed a block at a time
/// (`gemm_shared`, or `gemm_block` on one thread). The buffer is kept for the next product, as
/// the other packing buffers are.
const WHOLE_B_MAX_BYTES: usize = 256 << 20;
/// Largest A read in place by the micro-kernels (see `direct_a`).
const DIRECT_A_BYTES: usize = 256 << 10;

/// The micro-kernel's view of A: element (i, p) at `ptr[i * rs + p * cs]` (a packed panel, or A
/// itself).
pub type APanel<T> = MatRef<T>;

/// A callback on finished blocks of C: `(first row, rows, first column, columns)`.
pub type Epilogue<'a> = &'a (dyn Fn(usize, usize, usize, usize) + Sync);

/// Products below this many flops run on the calling thread (waking the pool costs more).
pub const SERIAL_FLOPS: f64 = 2.0e5;

/// Most tasks one GEMM is split into.
const MAX_TASKS: usize = 64;

static BUF_F32: PackSlots<f32> = PackSlots::new();
static BUF_F64: PackSlots<f64> = PackSlots::new();
static SHARED_F32: Mutex<Vec<f32>> = Mutex::new(Vec::new());
static SHARED_F64: Mutex<Vec<f64>> = Mutex::new(Vec::new());
static WHOLE_B_F32: Mutex<Vec<f32>> = Mutex::new(Vec::new());
static WHOLE_B_F64: Mutex<Vec<f64>> = Mutex::new(Vec::new());

thread_local! {
    static LOCAL_F32: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    static LOCAL_F64: RefCell<(Vec<f64>, Vec<f64>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Grows every pool thread's packing buffers (and this thread's) to the longest any of them
/// reached (`slots::PackSlots::spread`): called after each run of a compiled graph, so the
/// next runs allocate nothing whichever thread takes which task.
pub(crate) fn spread_pack_buffers() {
    BUF_F32.spread(&LOCAL_F32);
    BUF_F64.spread(&LOCAL_F64);
    half::spread_pack_buffers();
}

/// The shared B buffer, or None while another product (on another thread) holds it.
fn try_shared<T>(m: &'static Mutex<Vec<T>>) -> Option<std::sync::MutexGuard<'static, Vec<T>>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// The first of `all` whose name starts with `RLX_GEMM_KERNEL` (if set and matching), else the
/// first.
fn choose<T>(all: Vec<Kernel<T>>) -> Kernel<T> {
    let want = rlx_driver::config().cpu.gemm_kernel.clone().unwrap_or_default();
    let pick = all.iter().position(|k| !want.is_empty() && k.name.starts_with(want.as_str())).unwrap_or(0);
    all.into_iter().nth(pick).expect("the portable kernel is always listed")
}

impl GemmElem for f32 {
    const MR: usize = 6;
    const NR: usize = 16;
    unsafe fn micro(kc: usize, a: APanel<f32>, b: *const f32, c: *mut f32, rs: isize, m: usize, n: usize, acc: bool) {
        unsafe { kernels::micro_f32(kc, a, b, c, rs, m, n, acc) }
    }
    fn kernels() -> Vec<Kernel<f32>> {
        kernels::f32_kernels()
    }
    fn kernel() -> &'static Kernel<f32> {
        static K: OnceLock<Kernel<f32>> = OnceLock::new();
        K.get_or_init(|| choose(Self::kernels()))
    }
    fn with_buffers<R>(slot: usize, f: impl FnOnce(&mut Vec<f32>, &mut Vec<f32>) -> R) -> R {
        BUF_F32.with(&LOCAL_F32, slot, f)
    }
    fn shared_b() -> Option<std::sync::MutexGuard<'static, Vec<f32>>> {
        try_shared(&SHARED_F32)
    }
    fn whole_b() -> Option<std::sync::MutexGuard<'static, Vec<f32>>> {
        try_shared(&WHOLE_B_F32)
    }
}

impl GemmElem for f64 {
    const MR: usize = 6;
    const NR: usize = 8;
    unsafe fn micro(kc: usize, a: APanel<f64>, b: *const f64, c: *mut f64, rs: isize, m: usize, n: usize, acc: bool) {
        unsafe { kernels::micro_f64(kc, a, b, c, rs, m, n, acc) }
    }
    fn kernels() -> Vec<Kernel<f64>> {
        kernels::f64_kernels()
    }
    fn kernel() -> &'static Kernel<f64> {
        static K: OnceLock<Kernel<f64>> = OnceLock::new();
        K.get_or_init(|| choose(Self::kernels()))
    }
    fn with_buffers<R>(slot: usize, f: impl FnOnce(&mut Vec<f64>, &mut Vec<f64>) -> R) -> R {
        BUF_F64.with(&LOCAL_F64, slot, f)
    }
    fn shared_b() -> Option<std::sync::MutexGuard<'static, Vec<f64>>> {
        try_shared(&SHARED_F64)
    }
    fn whole_b() -> Option<std::sync::MutexGuard<'static, Vec<f64>>> {
        try_shared(&WHOLE_B_F64)
    }
}

/// Where the micro-kernels read B: a strided view packed block by block during the product, or
/// the whole of it packed ahead of time (`pack_b_full`: `kernel().nr`-column panels of all k
/// rows).
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
    unsafe fn pack(&self, kern: &Kernel<T>, pc: usize, kc: usize, j: usize, nc: usize, buf: &mut [T]) {
        if let BSrc::View(v) = *self {
            // SAFETY: forwarded.
            unsafe { pack::pack_b(v, pc, kc, j, nc, kern.nr, buf) }
        }
    }

    /// The micro-panel of columns `jb + jr ..` and rows `pc .. pc + kc` (`jb` the packed
    /// block's first column, a multiple of NR).
    #[allow(clippy::too_many_arguments)]
    fn panel(&self, kern: &Kernel<T>, buf: &[T], k: usize, pc: usize, kc: usize, jb: usize, jr: usize) -> *const T {
        let nr = kern.nr;
        match *self {
            BSrc::View(_) => buf[(jr / nr) * kc * nr..].as_ptr(),
            BSrc::Packed(_, p) => p.wrapping_add(((jb + jr) / nr) * k * nr + pc * nr),
        }
    }
}

/// Elements of B (k x n) packed whole by `pack_b_full` (for this process's `kernel()`).
pub fn packed_b_len<T: GemmElem>(k: usize, n: usize) -> usize {
    let nr = T::kernel().nr;
    n.div_ceil(nr) * nr * k
}

/// Packs all of B (k x n) into `kernel().nr`-column panels of k rows, on the thread pool.
///
/// # Safety
/// The view covers k x n.
pub unsafe fn pack_b_full<T: GemmElem>(k: usize, n: usize, b: MatRef<T>, out: &mut [T]) {
    // SAFETY: forwarded.
    unsafe { pack_b_with(T::kernel(), k, n, b, out) }
}

/// `pack_b_full` for kernel `kern`.
///
/// # Safety
/// As `pack_b_full`.
unsafe fn pack_b_with<T: GemmElem>(kern: &Kernel<T>, k: usize, n: usize, b: MatRef<T>, out: &mut [T]) {
    let nr = kern.nr;
    let panels = n.div_ceil(nr);
    assert!(out.len() >= panels * nr * k, "packed B buffer too small");
    if k == 0 {
        return;
    }
    let tasks = if k * n < 1 << 16 { 1 } else { panels.div_ceil(4).min(4 * threads::num_threads()) };
    let per = panels.div_ceil(tasks.max(1));
    let base = out.as_mut_ptr() as usize;
    threads::parallel_for(tasks, &|t| {
        let (p0, p1) = ((t * per).min(panels), ((t + 1) * per).min(panels));
        if p0 < p1 {
            let len = (p1 - p0) * nr * k;
            // SAFETY: tasks write disjoint panel ranges of `out`.
            let dst = unsafe { std::slice::from_raw_parts_mut((base as *mut T).add(p0 * nr * k), len) };
            // SAFETY: the block lies inside B.
            unsafe { pack::pack_b(b, 0, k, p0 * nr, (n - p0 * nr).min((p1 - p0) * nr), nr, dst) };
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
    // SAFETY: forwarded.
    unsafe { gemm_with(T::kernel(), threads::num_threads(), m, n, k, a, b, c, epi) }
}

/// Elements added to each row of A's padded copy: one cache line, so consecutive rows fall in
/// different L1 sets.
const A_ROW_PAD: usize = 64;

/// A row-major A whose rows lie a multiple of 4 KiB apart (k = 1024, 2048, 3072 in f32) maps every
/// row of a micro-tile to one L1 set, more rows than the cache has ways: the micro-kernel then
/// reads A from L2. The AVX-512 tile prefetches A's rows (`avx512_full`): in place and copied run
/// level on a Zen 5 (12-way L1), but in place lost a quarter on a Zen 4 (8-way), so A is copied for
/// every kernel (docs/benchmarks-history.md, sessions 24 and 31).
/// For products wide enough to amortize it, copies A once into the shared buffer with a padded
/// row stride and returns the guard and the view of the copy; None keeps A in place (not aliased,
/// narrow, the buffer busy, or called from a pool task: the caller that split the work decides,
/// once).
pub(crate) fn restride_a<T: GemmElem>(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    threads: usize,
) -> Option<(std::sync::MutexGuard<'static, Vec<T>>, MatRef<T>)> {
    let size = std::mem::size_of::<T>();
    let row_bytes = a.rs.unsigned_abs() * size;
    if a.cs != 1 || a.rs < k as isize || !row_bytes.is_multiple_of(4096) || n < 64 || m < 4 || threads::in_pool_task() {
        return None;
    }
    let mut buf = T::shared_b()?;
    let rs = k + A_ROW_PAD / size;
    let (src, dst) = (a.ptr as usize, blocked::aligned_buf(&mut buf, m * rs).as_mut_ptr() as usize);
    let tasks = if m * k < 1 << 15 { 1 } else { threads.min(m / 4).max(1) };
    threads::parallel_for(tasks, &|t| {
        for i in t * m / tasks..(t + 1) * m / tasks {
            // SAFETY: row i of A holds k elements; tasks write disjoint rows of the copy.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (src as *const T).offset(i as isize * a.rs),
                    (dst as *mut T).add(i * rs),
                    k,
                )
            };
        }
    });
    let view = MatRef { ptr: dst as *const T, rs: rs as isize, cs: 1 };
    Some((buf, view))
}

/// `gemm_src` with micro-kernel `kern` (a packed B packed for it) on at most `threads` threads.
///
/// # Safety
/// As `gemm_src`.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_with<T: GemmElem>(
    kern: &Kernel<T>,
    threads: usize,
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    b: BSrc<T>,
    c: MatMut<T>,
    epi: Option<Epilogue<'_>>,
) {
    let (mr, nr) = (kern.mr, kern.nr);
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    if m < 4 {
        // Decode shapes: stream B once per row instead of packing it.
        let tasks = if flops < SERIAL_FLOPS { 1 } else { threads.min(n.div_ceil(64)).max(1) };
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
    let tiles_n = n.div_ceil(nr);
    // Called from a pool task (a task of a product split by its caller), it runs on this thread.
    let threads = if flops < SERIAL_FLOPS || threads::in_pool_task() { 1 } else { threads.clamp(1, MAX_TASKS) };
    if a.cs == 1 && k > 0 && (b.prepacked() || direct_a(m, k, a, kern)) {
        // A row-major and B packed once: a grid of (row block, column block) tasks that share
        // nothing and read A in place (`grid`). With B a view and many rows, B would be packed
        // once per row block: the whole-B path below packs it once first.
        // SAFETY: forwarded.
        return unsafe { grid::grid(kern, threads, m, n, k, a, b, c, epi, None) };
    }
    // Elements of all of B packed into this kernel's panels.
    let whole_len = tiles_n * nr * k;
    if let BSrc::View(bv) = b
        && k > 0
        && a.cs == 1
        && m >= 2 * MC * threads
        && whole_len * std::mem::size_of::<T>() <= WHOLE_B_MAX_BYTES
        && WHOLE_B.load(Ordering::Relaxed)
        // A product its caller split (a pool task) keeps the blocked loop below.
        && !threads::in_pool_task()
        && let Some(mut whole) = T::whole_b()
    {
        // Many rows, A row-major: B packed whole, once, by the grid's own tasks where the kernel
        // can (`grid::grid_lazy_b`), else all of it first, on the pool, then the grid of (row
        // block, column block) tasks above over the packed copy. Each B block packed by
        // all threads at once and read by every thread (`gemm_shared`) left the other core's
        // half in that core's cache, modified, and ran slower at every size measured. One
        // thread gains too (instead of `gemm_block`, which packs B a block at a time and A per
        // block). Measurements: sessions 21 and 22 in docs/benchmarks-history.md.
        let buf = blocked::aligned_buf(&mut whole, whole_len);
        // SAFETY: the buffer holds every panel; the grid's tasks pack each before reading it.
        if unsafe { grid::grid_lazy_b(kern, threads, m, n, k, a, bv, buf.as_mut_ptr(), c, epi) } {
            return;
        }
        // SAFETY: the buffer holds every panel; the view covers k x n.
        unsafe { pack_b_with(kern, k, n, bv, buf) };
        // SAFETY: forwarded, with B now packed whole from its view.
        return unsafe { gemm_with(kern, threads, m, n, k, a, BSrc::Packed(bv, buf.as_ptr()), c, epi) };
    }
    if threads == 1 {
        // SAFETY: forwarded.
        return unsafe { gemm_block(kern, m, n, k, a, b, c, 0, threads::slot(), epi) };
    }
    if let BSrc::View(bv) = b
        && k > 0
        && m >= 2 * MC * threads
        && let Some(mut shared) = T::shared_b()
    {
        // Many rows: pack each B block once for all threads, split the rows.
        // SAFETY: forwarded.
        return unsafe { gemm_shared(kern, m, n, k, a, bv, c, threads, &mut shared, epi) };
    }
    if tiles_n >= 2 * threads || m < 2 * mr * threads {
        // Column blocks: each task packs only its own part of B, and A (packed per task).
        let per = tiles_n.div_ceil(threads) * nr;
        threads::parallel_for(threads, &|t| {
            let j0 = t * per;
            if j0 < n {
                // SAFETY: tasks own disjoint column ranges.
                unsafe { gemm_block(kern, m, per.min(n - j0), k, a, b, c, j0, threads::slot(), epi) };
            }
        });
    } else {
        // Row blocks (few columns, many rows).
        let per = m.div_ceil(threads).div_ceil(mr) * mr;
        threads::parallel_for(threads, &|t| {
            let i0 = t * per;
            if i0 < m {
                let (at, ct) = (a.skip_rows(i0), c.skip_rows(i0));
                let shifted = |i: usize, r: usize, j: usize, w: usize| epi.map_or((), |f| f(i0 + i, r, j, w));
                let epi_t = epi.map(|_| &shifted as Epilogue<'_>);
                // SAFETY: tasks own disjoint row ranges.
                unsafe { gemm_block(kern, per.min(m - i0), n, k, at, b, ct, 0, threads::slot(), epi_t) };
            }
        });
    }
}

#[cfg(test)]
mod tests;
