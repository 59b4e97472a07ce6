//! f16/bf16 GEMM with f32 accumulation: A and B are widened to f32 while they are packed into
//! the f32 micro-kernel's panels (all of k per panel), the f32 micro-kernel sums each tile over
//! all of k in registers, and the tile is rounded once (to nearest even) into C. bf16 on a CPU
//! where `vdpbf16ps` pays (Zen 4, `half_bf16::enabled`) is packed as bf16 pairs instead.
//! A row block of packed A and one B panel stay in L2 while a task walks its tiles. Packing
//! scratch belongs to the calling thread (a slot per pool worker, a thread-local elsewhere),
//! grown once and reused, so a warm call allocates nothing.

use super::half_convert::widen;
use super::slots::PackSlots;
use super::{APanel, GemmElem, Kernel, MatMut, MatRef, half_gemv};
use crate::threads;
use std::cell::RefCell;

pub use super::half_convert::{HalfElem, narrow_isa, simd, widen_isa};

/// Largest f32 tile (mr * nr) held in the stack buffer of `tiles`.
const MAX_TILE: usize = 1024;
/// Bytes of packed A one task keeps in L2 (its row block, all of k).
const A_BLOCK_BYTES: usize = 384 << 10;
/// Widest column block of one task, in B panels.
const MAX_COL_PANELS: usize = 16;
/// Elements widened at a time when a row or column is scattered into a panel.
const CHUNK: usize = 128;

/// Packed A and B (f32) of the calls made on each pool worker.
static PACK: PackSlots<f32> = PackSlots::new();

thread_local! {
    /// Packed A and B of the calls made on a thread outside the pool: callers never share
    /// (and never wait on each other's) buffers.
    static LOCAL: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// f32 elements of packed A and B (`packed_b`: B comes packed) for an m x k times k x n product.
fn pack_sizes(m: usize, n: usize, k: usize, packed_b: bool) -> (usize, usize) {
    let mr = kernel().mr;
    (m.div_ceil(mr) * mr * k, if packed_b { 0 } else { packed_b_len(k, n) })
}

/// Grows a pair of packing buffers to the sizes `pack_sizes` gives (never shrinks them).
fn grow(a: &mut Vec<f32>, b: &mut Vec<f32>, (na, nb): (usize, usize)) {
    if a.len() < na {
        a.resize(na, 0.0);
    }
    if b.len() < nb {
        b.resize(nb, 0.0);
    }
}

/// Runs `f` with this thread's packing buffers (`PackSlots::with`), grown to `sizes`.
fn with_pack<R>(sizes: (usize, usize), f: impl FnOnce(&mut [f32], &mut [f32]) -> R) -> R {
    PACK.with(&LOCAL, threads::slot(), |a, b| {
        grow(a, b, sizes);
        f(a, b)
    })
}

/// Grows every pool thread's packing buffers for an m x k times k x n product ahead of a
/// `parallel_for` whose tasks call `gemm_src(.., threaded: false)`, so that no task allocates.
pub fn reserve_all(m: usize, n: usize, k: usize, packed_b: bool) {
    if m >= 4 {
        let (na, nb) = pack_sizes(m, n, k, packed_b);
        PACK.grow_all(&LOCAL, na, nb);
    }
}

/// `slots::PackSlots::spread` for the half-precision packing buffers.
pub(crate) fn spread_pack_buffers() {
    PACK.spread(&LOCAL);
    #[cfg(target_arch = "x86_64")]
    super::half_amx::spread_pack_buffers();
}

/// The f32 micro-kernel: the one the f32 GEMM picked at start-up (AVX-512 or AVX2), or the
/// portable-width one if its tile would not fit the stack buffer.
fn kernel() -> Kernel<f32> {
    let k = *<f32 as GemmElem>::kernel();
    if k.mr * k.nr <= MAX_TILE {
        return k;
    }
    let (mr, nr) = (<f32 as GemmElem>::MR, <f32 as GemmElem>::NR);
    Kernel::plain("gemm-elem", mr, nr, usize::MAX, <f32 as GemmElem>::micro)
}

/// f32 elements `pack_b_full` writes for a k x n B (room for the AMX layout where it runs).
pub fn packed_b_len(k: usize, n: usize) -> usize {
    let nr = kernel().nr;
    let widened = n.div_ceil(nr) * nr * k;
    #[cfg(target_arch = "x86_64")]
    if super::half_amx::available() {
        return widened.max(super::half_amx::packed_len(k, n).div_ceil(2));
    }
    widened
}

/// C = A * B (m x k times k x n), f16/bf16 in and out, f32 sums; split across the thread pool.
///
/// # Safety
/// The views cover their matrices; C does not alias A or B.
pub unsafe fn gemm<H: HalfElem>(m: usize, n: usize, k: usize, a: MatRef<H>, b: MatRef<H>, c: MatMut<H>) {
    // SAFETY: forwarded.
    unsafe { gemm_src(m, n, k, a, b, None, c, true) }
}

/// `gemm` with B optionally packed ahead of time (`pack_b_full`, from this same `b`), and the
/// choice to stay on the calling thread (`threaded == false`, for callers that split a batch
/// across the pool themselves).
///
/// # Safety
/// As `gemm`; a packed B holds `packed_b_len(k, n)` elements.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_src<H: HalfElem>(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<H>,
    b: MatRef<H>,
    packed_b: Option<*const f32>,
    c: MatMut<H>,
    threaded: bool,
) {
    // SAFETY: forwarded.
    unsafe { gemm_src_epi(m, n, k, a, b, packed_b, c, threaded, None) }
}

/// A callback on each finished f32 row of C before it is rounded: `(row, first column, values)`,
/// called from the GEMM's threads (a fused bias and activation).
pub type TileEpilogue<'a> = &'a (dyn Fn(usize, usize, &mut [f32]) + Sync);

/// A callback on a finished f32 run of a (batched) output before it is rounded:
/// `(first flat index, values)`.
pub type FlatEpilogue<'a> = &'a (dyn Fn(usize, &mut [f32]) + Sync);

/// `gemm_src` with an epilogue on the f32 sums of every output row run before the rounding.
///
/// # Safety
/// As `gemm_src`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_src_epi<H: HalfElem>(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<H>,
    b: MatRef<H>,
    packed_b: Option<*const f32>,
    c: MatMut<H>,
    threaded: bool,
    epi: Option<TileEpilogue<'_>>,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        let mut zeros = [0f32; CHUNK];
        for i in 0..m {
            for j in (0..n).step_by(CHUNK) {
                let w = CHUNK.min(n - j);
                zeros[..w].fill(0.0);
                if let Some(f) = epi {
                    f(i, j, &mut zeros[..w]);
                }
                // SAFETY: row i of C has n elements.
                unsafe { super::half_convert::narrow(zeros.as_ptr(), w, c.ptr.offset(i as isize * c.rs + j as isize)) };
            }
        }
        return;
    }
    let flops = 2.0 * (m * n) as f64 * k as f64;
    let threads = if threaded && flops >= super::SERIAL_FLOPS { threads::num_threads() } else { 1 };
    if m < 4 && packed_b.is_none() && epi.is_none() {
        // Decode shapes: stream B once per row instead of packing it.
        let tasks = threads.min(n.div_ceil(64)).max(1);
        let per = n.div_ceil(tasks).div_ceil(16) * 16;
        for i in 0..m {
            let (ai, ci) = (a.skip_rows(i), c.skip_rows(i));
            let task = |t: usize| {
                let (j0, j1) = ((t * per).min(n), ((t + 1) * per).min(n));
                // SAFETY: tasks own disjoint column ranges of row i.
                unsafe { half_gemv::gemv_cols(k, ai, b, ci, j0, j1) };
            };
            run(tasks, &task);
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if amx::<H>() {
        // H is bf16 (checked): the casts keep the element layout.
        let cast = |x: MatRef<H>| MatRef { ptr: x.ptr as *const ::half::bf16, rs: x.rs, cs: x.cs };
        let cb = MatMut { ptr: c.ptr as *mut ::half::bf16, rs: c.rs };
        let pb = packed_b.map(|p| p as *const u16);
        // SAFETY: AMX is available; a packed B was packed by `pack_b_full` in the AMX layout.
        return unsafe { super::half_amx::gemm(m, n, k, cast(a), cast(b), pb, cb, threads, epi) };
    }
    let kern = kernel();
    let (mr, nr) = (kern.mr, kern.nr);
    let pairs = bf16_pairs::<H>();
    with_pack(pack_sizes(m, n, k, packed_b.is_some()), |pa, pb| {
        let (pa, pb_own) = (pa.as_mut_ptr() as usize, pb.as_mut_ptr() as usize);
        // Pack A's and (unless packed already) B's panels, split into `parts` tasks each.
        let (pan_a, pan_b) = (m.div_ceil(mr), if packed_b.is_some() { 0 } else { n.div_ceil(nr) });
        let parts = if threads == 1 { 1 } else { 2 * threads };
        let (per_a, per_b) = (pan_a.div_ceil(parts), pan_b.div_ceil(parts).max(1));
        let pack = |t: usize| {
            let (t, is_b) = if t < parts { (t, false) } else { (t - parts, true) };
            let (per, pans) = if is_b { (per_b, pan_b) } else { (per_a, pan_a) };
            let (p0, p1) = ((t * per).min(pans), ((t + 1) * per).min(pans));
            for p in p0..p1 {
                if pairs {
                    // SAFETY: as below; H is bf16 and the pair panels take half the bytes.
                    unsafe {
                        pack_pairs(
                            is_b,
                            if is_b { b } else { a },
                            p,
                            if is_b { n } else { m },
                            k,
                            if is_b { pb_own } else { pa },
                        )
                    };
                } else if is_b {
                    let out = (pb_own as *mut f32).wrapping_add(p * nr * k);
                    // SAFETY: panel p lies inside B and inside the buffer; tasks write disjoint panels.
                    unsafe { pack_b_panel(b, p * nr, nr.min(n - p * nr), nr, k, out) };
                } else {
                    let out = (pa as *mut f32).wrapping_add(p * mr * k);
                    // SAFETY: as above, for A.
                    unsafe { pack_a_panel(a, p * mr, mr.min(m - p * mr), mr, k, out) };
                }
            }
        };
        run(if pan_b > 0 { 2 * parts } else { parts }, &pack);
        let pb = packed_b.unwrap_or(pb_own as *const f32);
        // Tasks: a grid of (row block, column block); a row block's packed A fits L2.
        // Packed A takes 4 bytes per element, 2 as bf16 pairs.
        let a_bytes = if pairs { 2 } else { 4 };
        let rb = (A_BLOCK_BYTES / (mr * k * a_bytes)).clamp(1, 16) * mr;
        let row_blocks = m.div_ceil(rb);
        let tiles_n = n.div_ceil(nr);
        let mut cw = MAX_COL_PANELS.min(tiles_n);
        while cw > 1 && row_blocks * tiles_n.div_ceil(cw) < 3 * threads {
            cw = cw.div_ceil(2);
        }
        let col_blocks = tiles_n.div_ceil(cw);
        let (pb, cptr) = (pb as usize, c.ptr as usize);
        let task = |t: usize| {
            let (i0, jp0) = ((t / col_blocks) * rb, (t % col_blocks) * cw);
            let (i1, jp1) = ((i0 + rb).min(m), (jp0 + cw).min(tiles_n));
            let c = MatMut { ptr: cptr as *mut H, rs: c.rs };
            // SAFETY: tasks own disjoint blocks of C; the panels hold all of k.
            unsafe { tiles(&kern, pairs, k, pa as *const f32, pb as *const f32, c, i0..i1, jp0..jp1, n, epi) };
        };
        run(row_blocks * col_blocks, &task);
    })
}

/// Whether products of `H` run on AMX tiles (`half_amx`): H is bf16 and the CPU and OS allow it.
#[cfg(target_arch = "x86_64")]
fn amx<H: HalfElem>() -> bool {
    std::any::TypeId::of::<H>() == std::any::TypeId::of::<::half::bf16>() && super::half_amx::available()
}

/// Whether products of `H` run on bf16 pair tiles (`half_bf16`): H is bf16 and the CPU has
/// AVX-512 BF16. Packed panels then hold bf16 pairs in the f32 buffers (half their bytes).
fn bf16_pairs<H: HalfElem>() -> bool {
    let bf16 = std::any::TypeId::of::<H>() == std::any::TypeId::of::<::half::bf16>();
    bf16 && bf16_dot_enabled()
}

/// `half_bf16::enabled()` on x86-64 (the only place the pair tiles exist), else false.
fn bf16_dot_enabled() -> bool {
    #[cfg(target_arch = "x86_64")]
    return super::half_bf16::enabled();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Packs pair panel `p` of B (`is_b`: x is B, `lines` its columns) or of A (x is A, `lines`
/// its rows) into the buffer at address `buf`.
///
/// # Safety
/// H is bf16 (`bf16_pairs`); the panel lies inside x; the buffer holds the panel at the pair
/// layout's offset (within the f32 sizes `pack_sizes` gives).
unsafe fn pack_pairs<H: HalfElem>(is_b: bool, x: MatRef<H>, p: usize, lines: usize, k: usize, buf: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use super::half_bf16::{MR, NR, pack_a, pack_b, pairs};
        let x = MatRef { ptr: x.ptr as *const ::half::bf16, rs: x.rs, cs: x.cs };
        let np = pairs(k);
        // SAFETY: forwarded; H is bf16, so the cast keeps the element layout.
        unsafe {
            if is_b {
                pack_b(x, p * NR, NR.min(lines - p * NR), k, (buf as *mut u16).add(p * NR * 2 * np));
            } else {
                pack_a(x, p * MR, MR.min(lines - p * MR), k, (buf as *mut u32).add(p * MR * np));
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (is_b, x, p, lines, k, buf);
}

/// The bf16 pair tile of rows from `i` and column panel `jp` into `tile` (`half_bf16::tile`).
///
/// # Safety
/// `bf16_pairs` holds; `pa` and `pb` hold the pair panels; `tile` is writable for MR x NR.
unsafe fn pair_tile(k: usize, pa: *const f32, pb: *const f32, i: usize, jp: usize, tile: *mut f32) {
    #[cfg(target_arch = "x86_64")]
    {
        use super::half_bf16::{NR, pairs, tile as run};
        let np = pairs(k);
        let (a, b) = ((pa as *const u32).wrapping_add(i * np), (pb as *const u16).wrapping_add(jp * NR * 2 * np));
        // SAFETY: forwarded (`enabled()` checked by `bf16_pairs`).
        unsafe { run(np, a, b, tile) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (k, pa, pb, i, jp, tile);
}

/// Runs `f` for tasks `0..tasks`: on the pool when there are several.
fn run(tasks: usize, f: &(impl Fn(usize) + Sync)) {
    if tasks == 1 { f(0) } else { threads::parallel_for(tasks, f) }
}

/// Computes the tiles of rows `rows` and B panels `panels` of C: each tile summed over all of k
/// (in the kernel's k blocks) by the f32 micro-kernel, passed row by row to `epi`, then rounded
/// into C.
///
/// # Safety
/// `pa` holds the packed A panels of these rows, `pb` the packed B panels (all of k each, in
/// `kern`'s widths); the block lies inside C (n columns).
#[allow(clippy::too_many_arguments)]
unsafe fn tiles<H: HalfElem>(
    kern: &Kernel<f32>,
    pairs: bool,
    k: usize,
    pa: *const f32,
    pb: *const f32,
    c: MatMut<H>,
    rows: std::ops::Range<usize>,
    panels: std::ops::Range<usize>,
    n: usize,
    epi: Option<TileEpilogue<'_>>,
) {
    let (mr, nr, kc) = (kern.mr, kern.nr, kern.kc.max(1));
    let mut tile = [0f32; MAX_TILE];
    let m = rows.end;
    for jp in panels {
        let bp = pb.wrapping_add(jp * nr * k);
        let (j, w) = (jp * nr, nr.min(n - jp * nr));
        for i in rows.clone().step_by(mr) {
            let ap = pa.wrapping_add(i * k);
            if pairs {
                // SAFETY: the pair panels of these rows and this column panel are packed; the
                // tile buffer holds MR x NR.
                unsafe { pair_tile(k, pa, pb, i, jp, tile.as_mut_ptr()) };
            } else {
                for pc in (0..k).step_by(kc) {
                    let a = APanel { ptr: ap.wrapping_add(pc * mr), rs: 1, cs: mr as isize };
                    // SAFETY: the panels hold mr x k and k x nr (zero padded); the tile is mr x nr.
                    unsafe {
                        (kern.micro)(
                            kc.min(k - pc),
                            a,
                            bp.wrapping_add(pc * nr),
                            tile.as_mut_ptr(),
                            nr as isize,
                            mr,
                            nr,
                            pc > 0,
                        )
                    };
                }
            }
            for (r, row) in tile.chunks_exact_mut(nr).take(mr.min(m - i)).enumerate() {
                if let Some(f) = epi {
                    f(i + r, j, &mut row[..w]);
                }
                // SAFETY: row i + r, columns j..j+w lie inside C.
                unsafe {
                    super::half_convert::narrow(row.as_ptr(), w, c.ptr.offset((i + r) as isize * c.rs + j as isize))
                };
            }
        }
    }
}

/// Packs rows `i0..i0+rows` (at most `mr`) of A, all k columns, widened to f32: element (r, p)
/// at `out[p * mr + r]`, rows past `rows` zero.
///
/// # Safety
/// The rows lie inside A; `out` is writable for `mr * k` elements.
unsafe fn pack_a_panel<H: HalfElem>(a: MatRef<H>, i0: usize, rows: usize, mr: usize, k: usize, out: *mut f32) {
    // SAFETY (whole function): every access stays inside the block and `out`.
    unsafe {
        let base = a.ptr.offset(i0 as isize * a.rs);
        if a.rs == 1 && rows == mr {
            // Column-major A (transposed): each k step is mr contiguous elements.
            for p in 0..k {
                widen(base.offset(p as isize * a.cs), mr, out.add(p * mr));
            }
        } else {
            scatter(base, a.rs, a.cs, rows, k, mr, out);
        }
    }
}

/// Packs columns `j0..j0+cols` (at most `nr`) of B, all k rows, widened to f32: element (p, c)
/// at `out[p * nr + c]`, columns past `cols` zero.
///
/// # Safety
/// The columns lie inside B; `out` is writable for `nr * k` elements.
unsafe fn pack_b_panel<H: HalfElem>(b: MatRef<H>, j0: usize, cols: usize, nr: usize, k: usize, out: *mut f32) {
    // SAFETY (whole function): every access stays inside the block and `out`.
    unsafe {
        let base = b.ptr.offset(j0 as isize * b.cs);
        if b.cs == 1 {
            // Row-major B: each k step is `cols` contiguous elements.
            for p in 0..k {
                let dst = out.add(p * nr);
                widen(base.offset(p as isize * b.rs), cols, dst);
                std::slice::from_raw_parts_mut(dst.add(cols), nr - cols).fill(0.0);
            }
        } else {
            scatter(base, b.cs, b.rs, cols, k, nr, out);
        }
    }
}

/// Writes `lines` lines of k elements (line l, element p at `src[l * ls + p * ps]`) into a
/// panel of `width` lines: element (l, p) at `out[p * width + l]`, lines past `lines` zero.
/// Contiguous lines are widened a chunk at a time.
///
/// # Safety
/// The lines lie inside the matrix; `out` is writable for `width * k` elements.
unsafe fn scatter<H: HalfElem>(
    src: *const H,
    ls: isize,
    ps: isize,
    lines: usize,
    k: usize,
    width: usize,
    out: *mut f32,
) {
    let mut buf = [0f32; CHUNK];
    // SAFETY (whole function): every access stays inside the lines and `out`.
    unsafe {
        for l in 0..width {
            if l >= lines {
                (0..k).for_each(|p| *out.add(p * width + l) = 0.0);
                continue;
            }
            let line = src.offset(l as isize * ls);
            if ps == 1 {
                for p0 in (0..k).step_by(CHUNK) {
                    let len = CHUNK.min(k - p0);
                    widen(line.add(p0), len, buf.as_mut_ptr());
                    for (p, &v) in buf[..len].iter().enumerate() {
                        *out.add((p0 + p) * width + l) = v;
                    }
                }
            } else {
                (0..k).for_each(|p| *out.add(p * width + l) = (*line.offset(p as isize * ps)).to_f32());
            }
        }
    }
}

/// Packs all of B (k x n) into f32 panels for `gemm_src`, on the thread pool. `out` should start
/// on a 64-byte boundary: the AMX path packs a B off one again on every call.
///
/// # Safety
/// The view covers k x n; `out` holds at least `packed_b_len(k, n)` elements.
pub unsafe fn pack_b_full<H: HalfElem>(k: usize, n: usize, b: MatRef<H>, out: &mut [f32]) {
    assert!(out.len() >= packed_b_len(k, n), "packed B buffer too small");
    #[cfg(target_arch = "x86_64")]
    if amx::<H>() {
        // SAFETY: H is bf16 (checked by `amx`); the buffer holds the AMX panels (`packed_b_len`),
        // seen as u16.
        let out = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u16, 2 * out.len()) };
        let b = MatRef { ptr: b.ptr as *const ::half::bf16, rs: b.rs, cs: b.cs };
        // SAFETY: forwarded.
        return unsafe { super::half_amx::pack_b_full(b, k, n, out, threads::num_threads()) };
    }
    let nr = kernel().nr;
    let panels = n.div_ceil(nr);
    let tasks = if k * n < 1 << 16 { 1 } else { panels.div_ceil(4).min(4 * threads::num_threads()) };
    let per = panels.div_ceil(tasks.max(1));
    let base = out.as_mut_ptr() as usize;
    let pairs = bf16_pairs::<H>();
    run(tasks.max(1), &|t| {
        for p in (t * per).min(panels)..((t + 1) * per).min(panels) {
            if pairs {
                // SAFETY: as below, in the pair layout `gemm_src` reads when `pairs` is set.
                unsafe { pack_pairs(true, b, p, n, k, base) };
                continue;
            }
            // SAFETY: tasks write disjoint panels of `out`; the panel lies inside B.
            unsafe { pack_b_panel(b, p * nr, nr.min(n - p * nr), nr, k, (base as *mut f32).add(p * nr * k)) };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::half::{bf16, f16};

    /// Values in [-2, 2) from a fixed sequence, already rounded to H.
    fn data<H: HalfElem>(len: usize, seed: u64) -> Vec<H> {
        let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (0..len)
            .map(|_| {
                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                H::from_f32(((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0)
            })
            .collect()
    }

    /// Spacing of H just above |x| (x finite and in range).
    fn ulp<H: HalfElem + Into<f64>>(x: f64, bits: impl Fn(H) -> u16, from: impl Fn(u16) -> H) -> f64 {
        let v = H::from_f32(x.abs() as f32);
        from(bits(v) + 1).into() - v.into()
    }

    /// C = A * B through `gemm_src` in all four operand layouts plus a padded (strided) one, B as
    /// a view and packed ahead of time, threaded and not: every output within half an ulp of H
    /// (the one rounding) plus the f32 summation bound of the exact product of the H inputs.
    fn check<H: HalfElem + Into<f64>>(
        m: usize,
        n: usize,
        k: usize,
        bits: impl Fn(H) -> u16 + Copy,
        from: impl Fn(u16) -> H + Copy,
    ) {
        let (a, b): (Vec<H>, Vec<H>) = (data(m * k, 1 + m as u64), data(k * n, 7 + n as u64));
        let (af, bf): (Vec<f64>, Vec<f64>) =
            (a.iter().map(|&x| x.into()).collect(), b.iter().map(|&x| x.into()).collect());
        // Layouts: row-major, transposed, and padded row-major (row stride past the width).
        let at: Vec<H> = (0..m * k).map(|i| a[(i % m) * k + i / m]).collect();
        let bt: Vec<H> = (0..k * n).map(|i| b[(i % k) * n + i / k]).collect();
        let ap: Vec<H> = (0..m * (k + 3))
            .map(|i| if i % (k + 3) < k { a[i / (k + 3) * k + i % (k + 3)] } else { H::default() })
            .collect();
        let avs = [
            MatRef { ptr: a.as_ptr(), rs: k as isize, cs: 1 },
            MatRef { ptr: at.as_ptr(), rs: 1, cs: m as isize },
            MatRef { ptr: ap.as_ptr(), rs: (k + 3) as isize, cs: 1 },
        ];
        let bvs =
            [MatRef { ptr: b.as_ptr(), rs: n as isize, cs: 1 }, MatRef { ptr: bt.as_ptr(), rs: 1, cs: k as isize }];
        // Strided both ways: B read through its transpose's transpose with a step of 2.
        let b2: Vec<H> = (0..2 * k * n).map(|i| if i % 2 == 0 { b[i / 2] } else { H::default() }).collect();
        let bvs = [bvs[0], bvs[1], MatRef { ptr: b2.as_ptr(), rs: 2 * n as isize, cs: 2 }];
        for (ia, &av) in avs.iter().enumerate() {
            for (ib, &bv) in bvs.iter().enumerate() {
                let mut packed = vec![f32::NAN; packed_b_len(k, n)];
                unsafe { pack_b_full(k, n, bv, &mut packed) };
                for (src, threaded) in [(None, true), (None, false), (Some(packed.as_ptr()), true)] {
                    let mut c = vec![from(0x7e00); m * n];
                    unsafe { gemm_src(m, n, k, av, bv, src, MatMut { ptr: c.as_mut_ptr(), rs: n as isize }, threaded) };
                    for i in 0..m {
                        for j in 0..n {
                            let (exact, mag) = (0..k).fold((0.0, 0.0), |(s, t), p| {
                                let x = af[i * k + p] * bf[p * n + j];
                                (s + x, t + x.abs())
                            });
                            let got: f64 = c[i * n + j].into();
                            let tol = 0.5 * ulp(exact, bits, from) + 2.0 * k as f64 * mag * f32::EPSILON as f64;
                            let what = format!("{m}x{n}x{k} a{ia} b{ib} packed {} threaded {threaded}", src.is_some());
                            assert!((got - exact).abs() <= tol, "{what} ({i}, {j}): {got} vs {exact}");
                        }
                    }
                }
            }
        }
    }

    const SHAPES: &[(usize, usize, usize)] = &[
        (1, 1, 1),
        (1, 700, 300),
        (2, 33, 17),
        (3, 40, 9),
        (1, 37, 1100),
        (7, 17, 5),
        (13, 33, 300),
        (100, 70, 257),
        (97, 300, 3),
        (6, 16, 0),
        (5, 1, 1),
        (4, 1, 900),
        (130, 35, 1200),
        (37, 530, 64),
    ];

    #[test]
    fn f16_matches_exact_product_within_one_rounding() {
        for &(m, n, k) in SHAPES {
            check::<f16>(m, n, k, f16::to_bits, f16::from_bits);
        }
    }

    #[test]
    fn bf16_matches_exact_product_within_one_rounding() {
        for &(m, n, k) in SHAPES {
            check::<bf16>(m, n, k, bf16::to_bits, bf16::from_bits);
        }
    }

    /// A sum that f16 accumulation would lose: 4096 ones plus 1/4 each step round to 4096 in
    /// f16 (spacing 4 there), while f32 sums give 5120, exactly representable.
    #[test]
    fn sums_are_kept_in_f32_until_the_store() {
        let k = 4096;
        for m in [1, 8] {
            let a = vec![f16::from_f32(1.25); m * k];
            let b = vec![f16::ONE; k * 3];
            let mut c = vec![f16::ZERO; m * 3];
            let (av, bv) =
                (MatRef { ptr: a.as_ptr(), rs: k as isize, cs: 1 }, MatRef { ptr: b.as_ptr(), rs: 3, cs: 1 });
            unsafe { gemm(m, 3, k, av, bv, MatMut { ptr: c.as_mut_ptr(), rs: 3 }) };
            assert!(c.iter().all(|&x| x.to_f32() == 5120.0), "m={m}: {c:?}");
        }
    }
}
