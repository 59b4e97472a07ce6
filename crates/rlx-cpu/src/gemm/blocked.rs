//! The cache-blocked loops around a micro-kernel: one thread over a block of C (`gemm_block`,
//! `gemm_direct`), and the threaded product that shares one packed B block between all threads
//! (`gemm_shared`).

use super::grid::{Claim, LazyB};
use super::{BSrc, DIRECT_A_BYTES, Epilogue, GROUP_PANELS, GemmElem, Kernel, MC, MatMut, MatRef, nc_block, pack};
use crate::threads;

/// The k block for kernel `kern`: all of k up to its `kc`, or up to 1.5 x `kc` while the B
/// micro-panel of all k stays within `ONE_PASS_B_BYTES` (one pass, no re-accumulation of C: the
/// k = 384 model shapes on the 6- and 8-row tiles), else even blocks of at most `kc`, so a B
/// micro-panel and the A micro-panel stay in cache together.
pub(super) fn kc_for<T>(k: usize, kern: &Kernel<T>) -> usize {
    let panel_bytes = k * kern.nr * std::mem::size_of::<T>();
    if k <= kern.kc || (k <= kern.kc * 3 / 2 && panel_bytes <= ONE_PASS_B_BYTES) {
        k.max(1)
    } else {
        k.div_ceil(k.div_ceil(kern.kc))
    }
}

/// Largest B micro-panel `kc_for` lets past a kernel's `kc` (it must share L1 with A).
const ONE_PASS_B_BYTES: usize = 32 << 10;

/// Whether micro-kernels read A in place (row-major, its m x kc block small enough to stay in
/// L2) instead of from a packed copy.
pub(super) fn direct_a<T>(m: usize, k: usize, a: MatRef<T>, kern: &Kernel<T>) -> bool {
    a.cs == 1 && m * kc_for(k, kern) * std::mem::size_of::<T>() <= DIRECT_A_BYTES
}

/// Whether `tiles` prefetches B micro-panels into L2, a slice per tile while the one before is
/// in use: a panel streamed from DRAM or L3 otherwise stalls the first tile that reads it (the
/// hardware prefetcher stops at every 4 KiB page). The blocked paths' B blocks (2 MiB, packed by
/// both threads) too, since the kernel streams the prefetches (`Kernel::stream`). Only a group of
/// panels packed right before use (`gemm_direct`, B a view) goes without. Measurements: sessions
/// 10 and 13 in docs/benchmarks-history.md.
#[derive(Clone, Copy)]
enum Prefetch<T> {
    Off,
    /// The panels of this call, then `after` (the first of the caller's next call) if any.
    Panels {
        after: Option<*const T>,
    },
}

/// Grows `buf` to hold `len` elements from a 64-byte boundary (once, on huge pages from 2 MiB;
/// warm calls allocate nothing) and returns them. Panels that start on a cache line keep every
/// zmm load of B and A in one line: misaligned A and B panels slow the blocked loop (session 11
/// in docs/benchmarks-history.md).
pub(crate) fn aligned_buf<T: Default + Clone>(buf: &mut Vec<T>, len: usize) -> &mut [T] {
    if len == 0 {
        // Nothing to hold (B packed ahead of time, say): an empty buffer stays unallocated.
        return &mut [];
    }
    let size = std::mem::size_of::<T>().max(1);
    let slack = 64usize.div_ceil(size);
    if buf.len() < len + slack {
        rlx_driver::huge_pages::grow(buf, len + slack, T::default());
    }
    let skip = buf.as_ptr().align_offset(64).min(slack);
    &mut buf[skip..skip + len]
}

/// B's panels packed by the tiles loop that first reads them (`LazyB`): the panels of columns
/// `j ..` (the group's first) at k block `pc`, B's rows from there in `src`; a panel another
/// task is packing is copied to `private` (room for one panel) instead of waited for.
#[derive(Clone, Copy)]
struct PackHere<'a, T> {
    lazy: &'a LazyB<'a>,
    src: MatRef<T>,
    j: usize,
    pc: usize,
    private: *mut T,
}

/// Runs the micro-kernel over rows `0..m` (tiles of `mr`) of a packed or in-place A block and
/// NR-wide B micro-panels `0..nc`: the B micro-panel stays in L1 while the A tiles stream by.
/// `c_far`: C may be out of cache (the blocked paths over large products), so each tile's C rows
/// are prefetched into L2 before its kernel runs (a gain on large products, a loss on MiniLM's
/// L2-resident blocks, which pass false: session 12 in docs/benchmarks-history.md). `pack`: B's
/// panels packed here as they are first read (`PackHere`).
///
/// # Safety
/// `ap(i)` views A rows from i over kc columns, `bp(j)` the packed B micro-panel of column j, `c`
/// the block of C (m x nc).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn tiles<T: GemmElem>(
    kern: &Kernel<T>,
    kc: usize,
    m: usize,
    nc: usize,
    ap: impl Fn(usize) -> MatRef<T>,
    bp: impl Fn(usize) -> *const T,
    c: MatMut<T>,
    acc: bool,
    prefetch: Prefetch<T>,
    c_far: bool,
    pack: Option<PackHere<'_, T>>,
) {
    let (mr, nr) = (kern.mr, kern.nr);
    let size = std::mem::size_of::<T>();
    let lines = (kc * nr * size).div_ceil(64);
    let per_tile = lines.div_ceil(m.div_ceil(mr).max(1));
    for jr in (0..nc).step_by(nr) {
        let mut b = bp(jr);
        // The first row tile: the kernel's, or (packing the panel as it runs) done here.
        let mut first = 0;
        if let Some(p) = pack {
            // SAFETY: the chunk's destination and the private panel hold kc * nr elements each,
            // apart from A, B and C.
            unsafe { first = pack_panel(kern, kc, m, nc, jr, &ap, &mut b, c, acc, p) };
        }
        let next = match prefetch {
            Prefetch::Off => None,
            _ if jr + nr < nc => Some(bp(jr + nr) as usize),
            Prefetch::Panels { after } => after.map(|p| p as usize),
        };
        for (t, ir) in (first..m).step_by(mr).enumerate() {
            // This tile's share of the next panel's lines: streamed by a kernel that can (one
            // line per k step or so: a burst of prefetches stalls once the fill buffers run out),
            // else asked for now.
            let mut stream = None;
            if let Some(next) = next {
                let from = t * per_tile;
                let count = per_tile.min(lines.saturating_sub(from));
                // At most a line a step is streamed (a one-tile panel has two lines a step).
                let mut streamed = 0;
                if let Some(f) = kern.stream
                    && count > 0
                {
                    streamed = count.min(kc);
                    stream = Some((f, next + from * 64, (streamed * 64).div_ceil(kc)));
                }
                (from + streamed..from + count).for_each(|l| crate::prefetch::to_l2(next + l * 64));
            }
            let cp = c.ptr.wrapping_offset(ir as isize * c.rs + jr as isize);
            if c_far {
                // The tile's C rows towards L2 while its k loop runs (the kernel pulls them into L1
                // near its end).
                let bytes = nr.min(nc - jr) * size;
                for i in 0..mr.min(m - ir) {
                    let row = cp.wrapping_offset(i as isize * c.rs) as usize;
                    (0..bytes).step_by(64).chain([bytes - 1]).for_each(|b| crate::prefetch::to_l2(row + b));
                }
            }
            // SAFETY: A covers the tile's rows and kc columns, the B panel holds kc*NR elements;
            // the tile lies inside C.
            unsafe {
                match stream {
                    Some((f, pf, pfs)) => f(kc, ap(ir), b, cp, c.rs, mr.min(m - ir), nr.min(nc - jr), acc, pf, pfs),
                    None => (kern.micro)(kc, ap(ir), b, cp, c.rs, mr.min(m - ir), nr.min(nc - jr), acc),
                }
            };
        }
    }
}

/// The panel of columns `jr ..` of a lazily packed B (`PackHere`), before its tiles run: packed
/// by the first row tile as it computes (`Kernel::pack_tile`, then returns `mr`: that tile is
/// done) or on its own (returns 0) when this task claims it; a private copy (`b` pointed at it)
/// when another task is packing it; nothing when it is packed already.
///
/// # Safety
/// As `tiles`; `b` is the panel's packed destination (kc * nr elements).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn pack_panel<T: GemmElem>(
    kern: &Kernel<T>,
    kc: usize,
    m: usize,
    nc: usize,
    jr: usize,
    ap: &impl Fn(usize) -> MatRef<T>,
    b: &mut *const T,
    c: MatMut<T>,
    acc: bool,
    p: PackHere<'_, T>,
) -> usize {
    let (mr, nr) = (kern.mr, kern.nr);
    let cols = nr.min(nc - jr);
    let src = MatRef { ptr: p.src.ptr.wrapping_offset(jr as isize * p.src.cs), ..p.src };
    let plain = |dst: *mut T| {
        // SAFETY: the destination holds one panel (the caller's contract); the source lies in B.
        unsafe { pack::pack_b(src, 0, kc, 0, cols, nr, std::slice::from_raw_parts_mut(dst, kc * nr)) }
    };
    match p.lazy.claim(p.j + jr, p.pc) {
        Claim::Packed => 0,
        Claim::Busy => {
            plain(p.private);
            *b = p.private;
            0
        }
        Claim::Mine => {
            let dst = *b as *mut T;
            let first = match kern.pack_tile {
                Some(f) if cols == nr && m >= mr && src.cs == 1 => {
                    // SAFETY: a full tile of A rows and B columns; C's tile lies inside C.
                    unsafe { f(kc, ap(0), src, dst, c.ptr.wrapping_add(jr), c.rs, acc) };
                    mr
                }
                _ => {
                    plain(dst);
                    0
                }
            };
            p.lazy.done(p.j + jr, p.pc);
            first
        }
    }
}

/// Single-threaded C[:, j0..j0+n] = A * B[:, j0..j0+n] for an m x k times k x n product;
/// `epi(i0, rows, j0, cols)` runs on each finished block of C while it is still in cache.
///
/// `slot` picks the packing buffers (`threads::slot()`: one per pool thread).
///
/// # Safety
/// Views cover m x k, k x (j0+n) and m x (j0+n); C's columns j0..j0+n are not touched by others.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_block<T: GemmElem>(
    kern: &Kernel<T>,
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
    let (mr, nr) = (kern.mr, kern.nr);
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
    if direct_a(m, k, a, kern) {
        // SAFETY: forwarded.
        return unsafe { gemm_direct(kern, m, n, k, a, b, c, (j0, None), slot, epi, None) };
    }
    let kcm = kc_for(k, kern);
    T::with_buffers(slot, |pa, pb| {
        let pa = aligned_buf(pa, MC.div_ceil(mr) * mr * kcm);
        let ncb = nc_block(nr);
        let pb = aligned_buf(pb, if b.prepacked() { 0 } else { ncb.min(n).div_ceil(nr) * nr * kcm });
        for jc in (0..n).step_by(ncb) {
            let nc = ncb.min(n - jc);
            for pc in (0..k).step_by(kcm) {
                let kc = kcm.min(k - pc);
                // SAFETY: the block lies inside B.
                unsafe { b.pack(kern, pc, kc, j0 + jc, nc, pb) };
                for ic in (0..m).step_by(MC) {
                    let mcb = MC.min(m - ic);
                    // SAFETY: the block lies inside A.
                    unsafe { pack::pack_a(a, ic, mcb, pc, kc, mr, pa) };
                    let ap = |ir: usize| MatRef { ptr: pa[(ir / mr) * kc * mr..].as_ptr(), rs: 1, cs: mr as isize };
                    let bp = |jr: usize| b.panel(kern, pb, k, pc, kc, j0 + jc, jr);
                    let cb = MatMut { ptr: c.ptr.wrapping_offset(ic as isize * c.rs + (j0 + jc) as isize), rs: c.rs };
                    // SAFETY: the packed blocks cover the tiles; the block lies inside C.
                    unsafe {
                        tiles(kern, kc, mcb, nc, ap, bp, cb, pc > 0, Prefetch::Panels { after: None }, true, None)
                    };
                    if pc + kc == k
                        && let Some(f) = epi
                    {
                        f(ic, mcb, j0 + jc, nc);
                    }
                }
            }
        }
    })
}

/// `gemm_block` for a row-major A that stays in L2: micro-kernels read A in place; B is packed
/// one panel group at a time right before use (so it is in L1/L2 when read), and each group of
/// columns is finished (all of k) before the next, so the epilogue sees it in cache. `next_j`:
/// the first column of the block the caller will likely run next (its B panels are prefetched).
///
/// # Safety
/// As `gemm_block`; `a.cs == 1`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_direct<T: GemmElem>(
    kern: &Kernel<T>,
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    b: BSrc<T>,
    c: MatMut<T>,
    (j0, next_j): (usize, Option<usize>),
    slot: usize,
    epi: Option<Epilogue<'_>>,
    lazy: Option<&LazyB<'_>>,
) {
    let nr = kern.nr;
    let kcm = kc_for(k, kern);
    let group = GROUP_PANELS * nr;
    T::with_buffers(slot, |_, pb| {
        let pb = aligned_buf(pb, if b.prepacked() && lazy.is_none() { 0 } else { group * kcm });
        for jg in (0..n).step_by(group) {
            let nc = group.min(n - jg);
            for pc in (0..k).step_by(kcm) {
                let kc = kcm.min(k - pc);
                // A B packed by the tasks: each panel packed by the first to read it (`tiles`).
                let bv = b.view();
                let pack = lazy.map(|lz| PackHere {
                    lazy: lz,
                    src: MatRef { ptr: bv.ptr.wrapping_offset(pc as isize * bv.rs + (j0 + jg) as isize * bv.cs), ..bv },
                    j: j0 + jg,
                    pc,
                    private: pb.as_mut_ptr(),
                });
                // SAFETY: the block lies inside B.
                unsafe { b.pack(kern, pc, kc, j0 + jg, nc, pb) };
                let ap = |ir: usize| MatRef {
                    ptr: a.ptr.wrapping_offset(ir as isize * a.rs + pc as isize),
                    rs: a.rs,
                    cs: 1,
                };
                let bp = |jr: usize| b.panel(kern, pb, k, pc, kc, j0 + jg, jr);
                let cb = MatMut { ptr: c.ptr.wrapping_add(j0 + jg), rs: c.rs };
                // B packed ahead of time (weights, usually out of cache): each next panel is
                // prefetched, up to the first one the next pass (or the caller's next block,
                // columns from `next_j`) reads. A B packed just now is in cache already.
                let prefetch = if b.prepacked() {
                    let after = match (pc + kc < k, jg + group < n) {
                        (true, _) => Some(b.panel(kern, pb, k, pc + kc, kc, j0 + jg, 0)),
                        (false, true) => Some(b.panel(kern, pb, k, 0, kc, j0 + jg + group, 0)),
                        (false, false) => next_j.map(|j| b.panel(kern, pb, k, 0, kc, j, 0)),
                    };
                    Prefetch::Panels { after }
                } else {
                    Prefetch::Off
                };
                // SAFETY: A (in place or packed) covers the rows; the block lies inside C.
                unsafe { tiles(kern, kc, m, nc, ap, bp, cb, pc > 0, prefetch, false, pack) };
            }
            if let Some(f) = epi {
                f(0, m, j0 + jg, nc);
            }
        }
    })
}

/// Threaded C = A * B with B a view: each k x n block of B is packed once, by all threads
/// together, into `shared`; then the threads split its rows of C (each packs only its own rows
/// of A). Two fork-joins per block and no barrier inside a task, so a descheduled thread
/// delays but never deadlocks the others; row tasks are claimed dynamically.
///
/// # Safety
/// As `gemm_block` over all of C; `threads > 1`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_shared<T: GemmElem>(
    kern: &Kernel<T>,
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    b: MatRef<T>,
    c: MatMut<T>,
    threads: usize,
    shared: &mut Vec<T>,
    epi: Option<Epilogue<'_>>,
) {
    let (mr, nr) = (kern.mr, kern.nr);
    let kcm = kc_for(k, kern);
    let ncm = nc_block(nr).min(n.div_ceil(nr) * nr);
    let sb = aligned_buf(shared, ncm * kcm).as_mut_ptr() as usize;
    let tiles_m = m.div_ceil(mr);
    // Row tasks of about MC rows, then smaller ones, claimed dynamically.
    let split = RowSplit::guided(tiles_m, threads, MC.div_ceil(mr));
    let tasks = split.tasks;
    let rows_of = |t: usize| {
        let (t0, t1) = split.tiles(t);
        (t0 * mr, (t1 * mr).min(m))
    };
    for jc in (0..n).step_by(ncm) {
        let nc = ncm.min(n - jc);
        let panels = nc.div_ceil(nr);
        for pc in (0..k).step_by(kcm) {
            let kc = kcm.min(k - pc);
            let packers = threads.min(panels);
            threads::parallel_for(packers, &|t| {
                let (p0, p1) = (t * panels / packers, (t + 1) * panels / packers);
                if p0 < p1 {
                    let len = (p1 - p0) * nr * kc;
                    // SAFETY: tasks write disjoint panel ranges of the shared buffer.
                    let dst = unsafe { std::slice::from_raw_parts_mut((sb as *mut T).add(p0 * nr * kc), len) };
                    // SAFETY: the block lies inside B.
                    unsafe { pack::pack_b(b, pc, kc, jc + p0 * nr, (nc - p0 * nr).min((p1 - p0) * nr), nr, dst) };
                }
            });
            threads::parallel_for_dynamic(tasks, &|t| {
                let (i0, i1) = rows_of(t);
                T::with_buffers(threads::slot(), |pa, _| {
                    // The largest task's size, whichever task this thread claims (a warm call
                    // must not grow the buffer).
                    let pa = aligned_buf(pa, split.largest * mr * kcm);
                    // SAFETY: the block lies inside A.
                    unsafe { pack::pack_a(a, i0, i1 - i0, pc, kc, mr, pa) };
                    let ap = |ir: usize| MatRef { ptr: pa[(ir / mr) * kc * mr..].as_ptr(), rs: 1, cs: mr as isize };
                    let bp = |jr: usize| (sb as *const T).wrapping_add((jr / nr) * kc * nr);
                    let ct = c.skip_rows(i0);
                    let cb = MatMut { ptr: ct.ptr.wrapping_add(jc), rs: ct.rs };
                    // SAFETY: the packed blocks cover the tiles; tasks own disjoint rows of C.
                    unsafe {
                        tiles(kern, kc, i1 - i0, nc, ap, bp, cb, pc > 0, Prefetch::Panels { after: None }, true, None)
                    };
                });
                if pc + kc == k
                    && let Some(f) = epi
                {
                    f(i0, i1 - i0, jc, nc);
                }
            });
        }
    }
}

/// Most row tasks `RowSplit` makes.
const MAX_ROW_TASKS: usize = 255;

/// Row tiles split into tasks claimed in order: full-size tasks first, then smaller and smaller
/// ones, so the threads finish together (the last task is one tile, not a whole block).
pub(super) struct RowSplit {
    /// Task t covers tiles `starts[t]..starts[t + 1]`.
    starts: [usize; MAX_ROW_TASKS + 1],
    /// Number of tasks.
    pub tasks: usize,
    /// Tiles in the largest task.
    pub largest: usize,
}

impl RowSplit {
    /// Tasks of `block` tiles (more for very tall products) while at least `2 * threads` such
    /// tasks remain, then each a `2 * threads`-th of what is left, down to one tile.
    pub(super) fn guided(tiles: usize, threads: usize, block: usize) -> Self {
        let block = block.max(tiles.div_ceil(MAX_ROW_TASKS / 2)).max(1);
        let mut starts = [0; MAX_ROW_TASKS + 1];
        let (mut done, mut tasks, mut largest) = (0, 0, 0);
        while done < tiles && tasks < MAX_ROW_TASKS {
            let left = tiles - done;
            let size = if tasks + 1 == MAX_ROW_TASKS { left } else { left.div_ceil(2 * threads).clamp(1, block) };
            largest = largest.max(size);
            done += size;
            tasks += 1;
            starts[tasks] = done;
        }
        RowSplit { starts, tasks, largest }
    }

    /// The tiles of task `t`.
    pub(super) fn tiles(&self, t: usize) -> (usize, usize) {
        (self.starts[t], self.starts[t + 1])
    }
}

/// Rows `i * tiles / of .. (i + 1) * tiles / of` of `w`-wide tiles as element bounds, clamped
/// to `len`: block i of `of` blocks with the tiles spread evenly.
pub(crate) fn even_span(i: usize, of: usize, tiles: usize, w: usize, len: usize) -> (usize, usize) {
    ((i * tiles / of * w).min(len), ((i + 1) * tiles / of * w).min(len))
}

/// Row blocks grouped into one band per thread. Task t of a grid with `inner` tasks per row
/// block (column blocks, or weights x column blocks) maps to (row block, inner index) so that a
/// thread's contiguous share of the tasks (`threads::parallel_for`) is one band, run inner index
/// by inner index: the same B block serves the band's row blocks in turn while it is in the
/// thread's L2. One thread, fewer row tiles than bands need, or all rows in one block keep
/// row-major order: a short A (one block, m = 128) is better shared and the columns split, so
/// each thread streams its own part of B (the weights) and the panels divide evenly.
/// Measurements: session 12 in docs/benchmarks-history.md.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowBands {
    /// Row blocks, a multiple of the band count.
    pub row_blocks: usize,
    bands: usize,
    per_band: usize,
}

impl RowBands {
    /// At least `row_blocks` blocks over `tiles_m` row tiles for `threads` threads.
    pub(crate) fn new(row_blocks: usize, tiles_m: usize, threads: usize) -> Self {
        let split = threads > 1 && row_blocks > 1 && row_blocks.div_ceil(threads) * threads <= tiles_m;
        let bands = if split { threads } else { 1 };
        let row_blocks = row_blocks.div_ceil(bands) * bands;
        RowBands { row_blocks, bands, per_band: row_blocks / bands }
    }

    /// Task t's (row block, inner index).
    pub(crate) fn coords(&self, t: usize, inner: usize) -> (usize, usize) {
        if self.bands == 1 {
            return (t / inner, t % inner);
        }
        let (band, w) = (t / (self.per_band * inner), t % (self.per_band * inner));
        (band * self.per_band + w % self.per_band, w / self.per_band)
    }
}
