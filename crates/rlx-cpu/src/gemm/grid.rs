//! The task grid for a row-major A: (row block, column block) tasks over a B packed whole. B is
//! packed ahead of time (weights; each thread then runs its own band of rows, `RowBands`), or by
//! the grid's own tasks as they first read it (`LazyB`, for a B given as a view): each thread
//! then runs its own band of columns, and the first row tile of each panel reads B's rows,
//! computes, and stores the packed panel in one pass (`Kernel::pack_tile`). No pass over all of B
//! before the product, no packed line read from the other core's cache, and A read in place
//! (copied first only when its rows alias in L1, `restride_a`).

use super::blocked::{RowBands, direct_a, even_span, gemm_direct, kc_for};
use super::caches;
use super::{BSrc, DIRECT_A_BYTES, Epilogue, GROUP_PANELS, GemmElem, Kernel, MAX_TASKS, MatMut, MatRef, restride_a};
use crate::threads;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// Most (panel, k block) chunks a lazily packed B may have (else it is packed up front): a B of
/// `WHOLE_B_MAX_BYTES` in 32-column panels of 256-deep chunks.
const LAZY_CHUNKS: usize = 8192;

/// Claim states of the chunks of the B being packed lazily; held by one product at a time.
static LAZY_STATES: Mutex<[AtomicU8; LAZY_CHUNKS]> = Mutex::new([const { AtomicU8::new(0) }; LAZY_CHUNKS]);

/// Whether a view B is packed by the grid's tasks (`set_lazy_b_packing`).
static LAZY_B: AtomicBool = AtomicBool::new(true);

/// Tests: mark every n-th chunk of the next lazily packed B busy (0: none).
#[cfg(test)]
pub(super) static BUSY_EVERY: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

const FREE: u8 = 0;
const PACKING: u8 = 1;
const PACKED: u8 = 2;

/// Whether a product with a row-major A and B given as a view packs B in its tasks' first row
/// tiles (the default, where the micro-kernel can), or all of B before its tasks run. For
/// side-by-side measurements; results are the same either way.
pub fn set_lazy_b_packing(on: bool) {
    LAZY_B.store(on, Ordering::Relaxed);
}

/// The claims on a B being packed into the whole-B buffer by the grid's tasks (the view and
/// the buffer travel as `BSrc::Packed`): the chunk of the panel at column `j` and k block `pc` is
/// packed by the task that claims it first.
pub(super) struct LazyB<'a> {
    states: &'a [AtomicU8; LAZY_CHUNKS],
    kcm: usize,
    kblocks: usize,
    nr: usize,
}

/// Who packs a chunk of a `LazyB`.
#[derive(Debug, PartialEq)]
pub(super) enum Claim {
    /// Packed already: read it.
    Packed,
    /// This task packs it now, then calls `LazyB::done`.
    Mine,
    /// Another task is packing it: pack a private copy instead of waiting.
    Busy,
}

impl LazyB<'_> {
    fn state(&self, j: usize, pc: usize) -> &AtomicU8 {
        &self.states[(j / self.nr) * self.kblocks + pc / self.kcm]
    }

    /// Claims the chunk of the panel at column `j` (a multiple of the panel width), k block `pc`.
    pub(super) fn claim(&self, j: usize, pc: usize) -> Claim {
        let s = self.state(j, pc);
        match s.load(Ordering::Acquire) {
            PACKED => Claim::Packed,
            PACKING => Claim::Busy,
            _ => match s.compare_exchange(FREE, PACKING, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => Claim::Mine,
                Err(PACKED) => Claim::Packed,
                Err(_) => Claim::Busy,
            },
        }
    }

    /// Marks a claimed chunk packed: its stores happen before any later `Claim::Packed` of it.
    pub(super) fn done(&self, j: usize, pc: usize) {
        self.state(j, pc).store(PACKED, Ordering::Release);
    }
}

/// Runs the grid with B (a view) packed by its tasks into `buf` when kernel `kern` packs a panel
/// in its first tile, B is row-major, there is a column band per thread, and no other product
/// holds the claim states; returns false (nothing done) otherwise, and the caller packs B first.
///
/// Each thread packs only the panels it reads, in its own cache: faster than packing all of B
/// first on a 2-thread Zen 5 (session 24 in docs/benchmarks-history.md).
///
/// # Safety
/// As `gemm_src`; `buf` holds `n.div_ceil(nr) * nr * k` elements.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn grid_lazy_b<T: GemmElem>(
    kern: &Kernel<T>,
    threads: usize,
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    b: MatRef<T>,
    buf: *mut T,
    c: MatMut<T>,
    epi: Option<Epilogue<'_>>,
) -> bool {
    let (kcm, nr) = (kc_for(k, kern), kern.nr);
    let (kblocks, tiles_n) = (k.div_ceil(kcm), n.div_ceil(nr));
    if kern.pack_tile.is_none() || b.cs != 1 || !LAZY_B.load(Ordering::Relaxed) || tiles_n < threads {
        return false;
    }
    let Ok(states) = LAZY_STATES.try_lock() else { return false };
    let chunks = tiles_n * kblocks;
    if chunks > LAZY_CHUNKS {
        return false;
    }
    states[..chunks].iter().for_each(|s| s.store(FREE, Ordering::Relaxed));
    // Tests: every `BUSY_EVERY`-th chunk reads as being packed by another task, for good.
    #[cfg(test)]
    if let n @ 1.. = BUSY_EVERY.load(Ordering::Relaxed) {
        states[..chunks].iter().step_by(n).for_each(|s| s.store(PACKING, Ordering::Relaxed));
    }
    let lazy = LazyB { states: &states, kcm, kblocks, nr };
    // SAFETY: forwarded; every chunk is packed (or copied privately) before it is read.
    unsafe { grid(kern, threads, m, n, k, a, BSrc::Packed(b, buf), c, epi, Some(&lazy)) };
    true
}

/// The grid of (row block, column block) tasks for a row-major A (`a.cs == 1`, k > 0) and B
/// packed ahead of time or by the tasks (`lazy`), or A small enough to stay in L2 (`direct_a`).
///
/// # Safety
/// As `gemm_src`; a `lazy` B's buffer is the one `b` points to.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn grid<T: GemmElem>(
    kern: &Kernel<T>,
    threads: usize,
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<T>,
    b: BSrc<T>,
    c: MatMut<T>,
    epi: Option<Epilogue<'_>>,
    lazy: Option<&LazyB<'_>>,
) {
    let (mr, nr) = (kern.mr, kern.nr);
    let tiles_n = n.div_ceil(nr);
    let size = std::mem::size_of::<T>();
    // Held while the tasks read the padded copy of A, if one is made. A is read by rows, in
    // place or from that copy: MR-row panels of all of A packed first (for the 12-row tiles)
    // cost more than they saved once the 12-row kernel read rows from four pointers in asm
    // (session 22 in docs/benchmarks-history.md). The copy also where the tiles pack B: their
    // prefetch of A's rows covers the aliasing where L1 has 12 ways (Zen 5), not where it has 8
    // (Zen 4: 58-64% of the FMA peak at 1024-4096 in place, 76-90% copied; session 31).
    let _copy_of_a;
    let a = match restride_a(m, n, k, a, threads) {
        Some((guard, view)) => {
            _copy_of_a = guard;
            view
        }
        None => a,
    };
    let tiles_m = m.div_ceil(mr);
    let rb_tiles =
        if direct_a(m, k, a, kern) { tiles_m } else { (DIRECT_A_BYTES / 2 / (kc_for(k, kern) * size) / mr).max(1) };
    // Column blocks of about GROUP_PANELS panels.
    let mut col_blocks = tiles_n.div_ceil(GROUP_PANELS);
    // B packed by the tasks: one band of columns per thread (a whole number of column blocks
    // each), run down each column block in turn, so each thread packs the panels it reads. A B
    // packed ahead of time as well where it outgrows the threads' L2 caches together: with a band
    // of rows each, every thread would stream all of it from L3 or DRAM (session 34 in
    // docs/benchmarks-history.md); smaller weights keep the row bands.
    let b_bytes = tiles_n * nr * k * size;
    let col_bands = threads > 1 && (lazy.is_some() || (b.prepacked() && b_bytes > threads * caches::l2_bytes()));
    let fitting_rows = tiles_m.div_ceil(rb_tiles);
    let bands = RowBands::new(fitting_rows, tiles_m, threads);
    let mut row_blocks = bands.row_blocks;
    if col_bands {
        col_blocks = col_blocks.next_multiple_of(threads).min(tiles_n / threads * threads);
        while fitting_rows * col_blocks > MAX_TASKS && col_blocks > threads {
            col_blocks -= threads;
        }
        row_blocks = fitting_rows.clamp(1, (MAX_TASKS / col_blocks).max(1));
    } else {
        // One band of rows per thread, run a column block at a time (`RowBands`), with enough
        // column blocks for a task count that is a multiple of the thread count (so no thread
        // idles at the end), and not too many tasks.
        if threads > 1 {
            col_blocks = (row_blocks * col_blocks).div_ceil(threads) * threads / row_blocks;
        }
        while row_blocks * col_blocks > MAX_TASKS && col_blocks > 1 {
            col_blocks = col_blocks.div_ceil(2);
        }
        col_blocks = col_blocks.clamp(1, tiles_n);
    }
    let coords = |t: usize| if col_bands { (t % row_blocks, t / row_blocks) } else { bands.coords(t, col_blocks) };
    let task = |t: usize| {
        let (rb, cb) = coords(t);
        let (i0, i1) = even_span(rb, row_blocks, tiles_m, mr, m);
        let (j0, j1) = even_span(cb, col_blocks, tiles_n, nr, n);
        if i0 >= i1 || j0 >= j1 {
            return;
        }
        let shifted = |i: usize, r: usize, j: usize, w: usize| epi.map_or((), |f| f(i0 + i, r, j, w));
        let epi_t = epi.map(|_| &shifted as Epilogue<'_>);
        // Each thread runs a contiguous share of the tasks (`parallel_for`): its next one is
        // most likely the next; its first B panel is prefetched during this one's last pass.
        let next = t + 1;
        let next_j = (next < row_blocks * col_blocks).then(|| even_span(coords(next).1, col_blocks, tiles_n, nr, n).0);
        // SAFETY: tasks own disjoint blocks of C.
        unsafe {
            gemm_direct(
                kern,
                i1 - i0,
                j1 - j0,
                k,
                a.skip_rows(i0),
                b,
                c.skip_rows(i0),
                (j0, next_j),
                threads::slot(),
                epi_t,
                lazy,
            )
        };
    };
    let tasks = row_blocks * col_blocks;
    if threads == 1 {
        (0..tasks).for_each(task);
    } else {
        threads::parallel_for(tasks, &task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_claim_packs_a_second_copies_and_a_finished_chunk_is_read() {
        let states = [const { AtomicU8::new(0) }; LAZY_CHUNKS];
        let lazy = LazyB { states: &states, kcm: 256, kblocks: 4, nr: 32 };
        assert_eq!(lazy.claim(64, 256), Claim::Mine);
        assert_eq!(lazy.claim(64, 256), Claim::Busy);
        // Other chunks are untouched: the next panel, the next k block.
        assert_eq!(lazy.claim(96, 256), Claim::Mine);
        assert_eq!(lazy.claim(64, 512), Claim::Mine);
        lazy.done(64, 256);
        assert_eq!(lazy.claim(64, 256), Claim::Packed);
        assert_eq!(states[2 * 4 + 1].load(Ordering::Relaxed), PACKED);
    }
}
