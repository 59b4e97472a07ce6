//! bf16 GEMM on AMX tiles (`tdpbf16ps`): each instruction sums a 16 x 16 f32 block over 32 k of
//! bf16 products, sixteen times the sums of a zmm FMA. A is copied per 32-row block into
//! zero-padded rows of whole 32-k chunks, B into 16-column pair panels (row p of a panel: the
//! pairs (2p, 2p + 1) of its 16 columns, the layout `tdpbf16ps` reads), both from 64-byte
//! boundaries (tile rows across two lines load at 0.4x). A task takes a chunk of row blocks and
//! runs them over groups of column blocks whose B stays in L2; it holds a 32 x 32 block of C in
//! four tiles over all of k, then each row of a group goes through the epilogue and is rounded
//! once into C. Products are exact and the sums f32, as on the other paths; only their order
//! differs, and the instruction flushes f32 denormals to zero.

// Intrinsics and asm code: every statement is unsafe; the functions document the contract.
#![allow(unsafe_op_in_unsafe_fn)]

use super::half::TileEpilogue;
use super::slots::PackSlots;
use super::{MatMut, MatRef};
use ::half::bf16;
use std::arch::asm;
use std::cell::RefCell;

/// Rows (and columns) of one tile; a task's block is two by two tiles.
pub(crate) const T: usize = 16;
/// k per tile step (16 pairs of bf16).
pub(crate) const KT: usize = 32;

/// Whether bf16 products run here: the CPU has AMX-TILE and AMX-BF16, the kernel grants this
/// process the tile state, and `RLX_BF16_AMX=0` is not set. Asked once.
pub fn available() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        if !rlx_driver::config().cpu.bf16_amx {
            return false;
        }
        // CPUID.(7, 0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
        if std::arch::x86_64::__get_cpuid_max(0).0 < 7 {
            return false;
        }
        let leaf = std::arch::x86_64::__cpuid_count(7, 0);
        if leaf.edx & (1 << 22) == 0 || leaf.edx & (1 << 24) == 0 {
            return false;
        }
        request_tile_state()
    })
}

/// Asks Linux for the AMX tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)`);
/// without it the first tile instruction faults.
fn request_tile_state() -> bool {
    #[cfg(target_os = "linux")]
    {
        const SYS_ARCH_PRCTL: i64 = 158;
        const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
        const XFEATURE_XTILEDATA: i64 = 18;
        let ret: i64;
        // SAFETY: a plain syscall with integer arguments; it only changes this process's
        // permitted xsave features.
        unsafe {
            asm!("syscall", inlateout("rax") SYS_ARCH_PRCTL => ret, in("rdi") ARCH_REQ_XCOMP_PERM,
                 in("rsi") XFEATURE_XTILEDATA, lateout("rcx") _, lateout("r11") _, options(nostack));
        }
        ret == 0
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// The tile configuration (palette 1): tmm0-3 the C tiles, tmm4-5 A, tmm6-7 B, each 16 rows of
/// 64 bytes.
#[repr(C, align(64))]
struct Config {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

/// Elements per B pair panel of k: 16 columns x 2 over k / 2 (rounded up to 16) pair rows.
pub(crate) fn panel_len(k: usize) -> usize {
    k.div_ceil(KT) * KT * T
}

/// Elements of a k x n B packed for `gemm` (an even number of panels).
pub fn packed_len(k: usize, n: usize) -> usize {
    n.div_ceil(2 * T) * 2 * panel_len(k)
}

/// Packs B once for later products (`gemm` with `packed_b`), as `gemm` packs it per call.
///
/// # Safety
/// B covers k x n; `out` holds `packed_len(k, n)` elements.
pub unsafe fn pack_b_full(b: MatRef<bf16>, k: usize, n: usize, out: &mut [u16], threads: usize) {
    let len = packed_len(k, n);
    out[len - panel_len(k)..len].fill(0);
    pack_b(b, k, n, out, threads);
}

/// Packs B's 16-column panels as pairs: panel q, pair row p, column c holds B(2p, 16q + c) and
/// B(2p + 1, 16q + c); zero past k and past n.
///
/// # Safety
/// B covers k x n; `out` holds `n.div_ceil(16) * panel_len(k)` elements.
unsafe fn pack_b(b: MatRef<bf16>, k: usize, n: usize, out: &mut [u16], threads: usize) {
    let (len, panels) = (panel_len(k), n.div_ceil(T));
    let base = out.as_mut_ptr() as usize;
    // Captured whole (a view is Sync, its raw pointer field alone is not).
    let b = &b;
    let panel_at = |q: usize| (base as *mut u16).add(q * len);
    let src = |q: usize, kk: usize| b.ptr.offset(kk as isize * b.rs + (q * T) as isize * b.cs) as *const u16;
    // Pair rows from `from` on of panel q, one element at a time (tails, strided B).
    let scalar = |q: usize, from: usize| {
        // SAFETY: tasks write disjoint panels of `out`.
        let panel = std::slice::from_raw_parts_mut(panel_at(q), len);
        let cols = T.min(n - q * T);
        for (p, row) in panel.chunks_exact_mut(2 * T).enumerate().skip(from) {
            for h in 0..2 {
                let kk = 2 * p + h;
                let s = src(q, kk.min(k - 1));
                for c in 0..T {
                    row[2 * c + h] = if c < cols && kk < k { *s.offset(c as isize * b.cs) } else { 0 };
                }
            }
        }
    };
    // A task packs a group of panels; a row-major B goes 16 pair rows at a time across the group
    // (the source lines of 32 rows stay in L1 while the group's panels take their columns).
    let groups = panels.div_ceil(PACK_GROUP);
    let pack = |g: usize| {
        let qs = g * PACK_GROUP..((g + 1) * PACK_GROUP).min(panels);
        let full = qs.clone().filter(|&q| q * T + T <= n);
        let pairs = if b.cs == 1 { k / 2 } else { 0 };
        for p0 in (0..pairs).step_by(T) {
            for q in full.clone() {
                interleave_pairs(src(q, 2 * p0), b.rs, T.min(pairs - p0), panel_at(q).add(p0 * 2 * T));
            }
        }
        for q in qs {
            scalar(q, if q * T + T <= n { pairs } else { 0 });
        }
    };
    if threads > 1 && groups > 1 {
        crate::threads::parallel_for(groups, &pack);
    } else {
        (0..groups).for_each(pack);
    }
}

/// Panels one packing task takes (their 32-byte slices of a B row share its cache lines).
const PACK_GROUP: usize = 16;

/// Writes `pairs` pair rows of a B panel: row p interleaves 16 bf16 of source rows 2p and 2p + 1
/// (B(2p, 0), B(2p + 1, 0), B(2p, 1), ...), source rows `rs` elements apart from `src`.
///
/// # Safety
/// The source rows hold 16 elements each, `out` holds `32 * pairs`; the CPU has AVX-512BW (every
/// AMX CPU does).
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn interleave_pairs(src: *const u16, rs: isize, pairs: usize, out: *mut u16) {
    use std::arch::x86_64::*;
    // Lane 2c takes lane c (the even row), lane 2c + 1 lane 16 + c (the odd row).
    let idx = _mm512_set_epi16(
        31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
        16, 0,
    );
    for p in 0..pairs {
        let even = src.offset(2 * p as isize * rs);
        let both = _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_loadu_si256(even as *const __m256i)),
            _mm256_loadu_si256(even.offset(rs) as *const __m256i),
        );
        _mm512_storeu_si512(out.add(p * 2 * T) as *mut __m512i, _mm512_permutexvar_epi16(idx, both));
    }
}

/// Copies rows `i0..i0 + 32` of A (zero past m) into `out`, rows of `k32` bf16 (zero past k).
///
/// # Safety
/// A covers m x k; `out` holds `2 * T * k32` elements.
unsafe fn pack_a(a: MatRef<bf16>, i0: usize, m: usize, k: usize, k32: usize, out: &mut [u16]) {
    for (r, row) in out.chunks_exact_mut(k32).take(2 * T).enumerate() {
        let i = i0 + r;
        if i >= m {
            row.fill(0);
            continue;
        }
        let src = a.ptr.offset(i as isize * a.rs);
        if a.cs == 1 {
            // A contiguous row: its bits copied at once (bf16 is a u16 underneath).
            std::ptr::copy_nonoverlapping(src as *const u16, row.as_mut_ptr(), k);
        } else {
            (0..k).for_each(|p| row[p] = (*src.offset(p as isize * a.cs)).to_bits());
        }
        row[k..].fill(0);
    }
}

/// The 32 x 32 f32 block `A_rows * B_panels` over `k32` values into `out` (rows of 32): A rows
/// from `a` (its first row and row stride in bf16), B panels `b0` and `b1` (pair rows of 64
/// bytes).
///
/// # Safety
/// AMX is `available()` and this thread loaded `Config`; the buffers hold what is said above.
/// `pf`: lines to ask into L2 along the way (`pf.1` from `pf.0`, a share per k step).
pub(crate) unsafe fn block(
    k32: usize,
    (a, lda_elems): (*const u16, usize),
    b0: *const u16,
    b1: *const u16,
    out: *mut f32,
    ldo: usize,
    pf: (*const u8, usize),
) {
    let lda = lda_elems * 2;
    let a1 = a.add(T * lda_elems);
    let per_step = pf.1.div_ceil((k32 / KT).max(1));
    asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack));
    for kk in (0..k32).step_by(KT) {
        let first = kk / KT * per_step;
        for l in first..(first + per_step).min(pf.1) {
            crate::prefetch::to_l2(pf.0 as usize + l * 64);
        }
        // Pair rows kk / 2 .. + 16 of each B panel: 64 bytes apart.
        let (pb0, pb1) = (b0.add(kk * T), b1.add(kk * T));
        asm!(
            "tileloadd tmm4, [{a0} + {lda} * 1]",
            "tileloadd tmm5, [{a1} + {lda} * 1]",
            "tileloadd tmm6, [{b0} + {ldb} * 1]",
            "tileloadd tmm7, [{b1} + {ldb} * 1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            a0 = in(reg) a.add(kk),
            a1 = in(reg) a1.add(kk),
            b0 = in(reg) pb0,
            b1 = in(reg) pb1,
            lda = in(reg) lda,
            ldb = in(reg) 64usize,
            options(nostack, readonly),
        );
    }
    let ldc = ldo * 4;
    asm!(
        "tilestored [{c0} + {ldc} * 1], tmm0",
        "tilestored [{c1} + {ldc} * 1], tmm1",
        "tilestored [{c2} + {ldc} * 1], tmm2",
        "tilestored [{c3} + {ldc} * 1], tmm3",
        c0 = in(reg) out,
        c1 = in(reg) out.add(T),
        c2 = in(reg) out.add(T * ldo),
        c3 = in(reg) out.add(T * ldo + T),
        ldc = in(reg) ldc,
        options(nostack),
    );
}

/// `block` for 16 rows of A (a last row block of at most 16 rows): the 16 x 32 block into the
/// first 16 rows of `out`, half the tile work.
///
/// # Safety
/// As `block`; A needs only 16 rows.
pub(crate) unsafe fn block16(
    k32: usize,
    (a, lda_elems): (*const u16, usize),
    b0: *const u16,
    b1: *const u16,
    out: *mut f32,
    ldo: usize,
) {
    asm!("tilezero tmm0", "tilezero tmm1", options(nostack));
    for kk in (0..k32).step_by(KT) {
        asm!(
            "tileloadd tmm4, [{a0} + {lda} * 1]",
            "tileloadd tmm6, [{b0} + {ldb} * 1]",
            "tileloadd tmm7, [{b1} + {ldb} * 1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            a0 = in(reg) a.add(kk),
            b0 = in(reg) b0.add(kk * T),
            b1 = in(reg) b1.add(kk * T),
            lda = in(reg) lda_elems * 2,
            ldb = in(reg) 64usize,
            options(nostack, readonly),
        );
    }
    asm!(
        "tilestored [{c0} + {ldc} * 1], tmm0",
        "tilestored [{c1} + {ldc} * 1], tmm1",
        c0 = in(reg) out,
        c1 = in(reg) out.add(T),
        ldc = in(reg) ldo * 4,
        options(nostack),
    );
}

/// Loads the tile configuration `block` uses (eight tiles of 16 rows of 64 bytes) on this
/// thread; `release_tiles` ends it.
///
/// # Safety
/// `available()` returned true.
pub(crate) unsafe fn configure_tiles() {
    let cfg = Config {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        colsb: std::array::from_fn(|t| if t < 8 { 64 } else { 0 }),
        rows: std::array::from_fn(|t| if t < 8 { T as u8 } else { 0 }),
    };
    asm!("ldtilecfg [{0}]", in(reg) &cfg, options(nostack, readonly));
}

/// Releases this thread's tile state (after `configure_tiles`).
///
/// # Safety
/// `available()` returned true.
pub(crate) unsafe fn release_tiles() {
    asm!("tilerelease", options(nostack));
}

/// The packed B of the products the pool threads run (the B half of each pair), grown once and
/// reused: warm calls allocate nothing (`PackSlots::spread`).
static B_SLOTS: PackSlots<u16> = PackSlots::new();
/// The A blocks of the tasks the pool threads run (the A half of each pair), likewise.
static A_SLOTS: PackSlots<u16> = PackSlots::new();

thread_local! {
    /// `B_SLOTS` and `A_SLOTS` of a thread outside the pool.
    static B_LOCAL: RefCell<(Vec<u16>, Vec<u16>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    static A_LOCAL: RefCell<(Vec<u16>, Vec<u16>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// `PackSlots::spread` for the AMX packing buffers.
pub(crate) fn spread_pack_buffers() {
    B_SLOTS.spread(&B_LOCAL);
    A_SLOTS.spread(&A_LOCAL);
}

/// C = A * B for bf16 A (m x k), B (k x n) and C, sums in f32 on AMX; `epi(row, first column,
/// values)` on each finished f32 row run before it is rounded. B comes from `packed_b` when
/// packed ahead of time (`pack_b_full`), else is packed here. Splits the 32-row blocks of C
/// over the pool when `threads > 1`.
///
/// # Safety
/// `available()`; the views cover their matrices; C does not alias A or B; a packed B holds
/// `packed_len(k, n)` elements packed from this B.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<bf16>,
    b: MatRef<bf16>,
    packed_b: Option<*const u16>,
    c: MatMut<bf16>,
    threads: usize,
    epi: Option<TileEpilogue<'_>>,
) {
    let len = packed_len(k, n);
    let row_blocks = m.div_ceil(2 * T);
    B_SLOTS.with(&B_LOCAL, crate::threads::slot(), |_, own| {
        // Tile rows that straddle cache lines load far slower (session 14 in
        // docs/benchmarks-history.md): a packed B off a 64-byte boundary is packed again here.
        let pb = match packed_b {
            Some(p) if (p as usize).is_multiple_of(64) => p as usize,
            _ => {
                let own = super::aligned_buf(own, len);
                pack_b_full(b, k, n, own, threads);
                own.as_ptr() as usize
            }
        };
        let c_addr = c.ptr as usize;
        // A task: a chunk of row blocks (their A about half of L2) over a share of the column
        // blocks (all of them once there are enough row blocks for the threads; a short product
        // splits its columns).
        let col_blocks = n.div_ceil(2 * T);
        let parts = if threads > 1 && row_blocks < 2 * threads { threads.min(col_blocks) } else { 1 };
        let chunk = if parts > 1 {
            row_blocks
        } else {
            blocks_in(CHUNK_A_BYTES, k).max(MIN_CHUNK_BLOCKS).min(row_blocks.div_ceil(threads))
        };
        let chunks = row_blocks.div_ceil(chunk);
        let task = |t: usize| {
            let c = MatMut { ptr: c_addr as *mut bf16, rs: c.rs };
            let (ch, part) = (t / parts, t % parts);
            let rbs = ch * chunk..((ch + 1) * chunk).min(row_blocks);
            let cbs = part * col_blocks / parts..(part + 1) * col_blocks / parts;
            // SAFETY: forwarded; tasks own disjoint blocks of C.
            A_SLOTS.with(&A_LOCAL, crate::threads::slot(), |pa, _| unsafe {
                rows(rbs, cbs, m, n, k, a, pb as *const u16, pa, c, epi)
            })
        };
        let tasks = chunks * parts;
        if threads > 1 && tasks > 1 {
            crate::threads::parallel_for(tasks, &task);
        } else {
            (0..tasks).for_each(task);
        }
    });
}

/// Sums of 32 rows over a group of column blocks, on a 64-byte boundary (for `tilestored`).
#[repr(C, align(64))]
struct Aligned([f32; 2 * T * GROUP_COLS]);

/// Widest column group: its f32 sums (32 KiB) stay in L1 for the epilogue.
const GROUP_COLS: usize = 256;

/// Bytes of A a task copies and keeps in L2 while the column groups pass by.
const CHUNK_A_BYTES: usize = 512 << 10;
/// Fewest row blocks in a chunk: each pass of B from L3 then serves at least two (past k = 4096,
/// where one row block fills `CHUNK_A_BYTES`; two ran faster at k = 5632 and 8192: session 17 in
/// docs/benchmarks-history.md).
const MIN_CHUNK_BLOCKS: usize = 2;
/// Bytes of B a column group spans: it stays in L2 while every row block of the task reads it
/// (read once per row block from L3, B is far slower than from L2).
const GROUP_B_BYTES: usize = 512 << 10;

/// 32-row (or 32-column) blocks of all k whose bf16 fit in `bytes`, at least one.
fn blocks_in(bytes: usize, k: usize) -> usize {
    (bytes / (2 * T * k.div_ceil(KT) * KT * 2)).max(1)
}

/// Row blocks `rbs` (rows 32 rb ..) of C over column blocks `cbs` (32 columns each): A copied
/// into `pa`, each 32 x 32 block summed on the tiles, passed row by row to `epi` and rounded into
/// C. The column blocks go by in groups whose B stays in L2 across the row blocks.
///
/// # Safety
/// As `gemm`; `pb` holds B packed by `pack_b` (an even number of panels).
#[allow(clippy::too_many_arguments)]
unsafe fn rows(
    rbs: std::ops::Range<usize>,
    cbs: std::ops::Range<usize>,
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<bf16>,
    pb: *const u16,
    pa: &mut Vec<u16>,
    c: MatMut<bf16>,
    epi: Option<TileEpilogue<'_>>,
) {
    let k32 = k.div_ceil(KT) * KT;
    let block_len = 2 * T * k32;
    // From a 64-byte boundary, as every tile's rows must be (see `gemm`).
    let pa = super::aligned_buf(pa, rbs.len() * block_len);
    for (q, rb) in rbs.clone().enumerate() {
        pack_a(a, rb * 2 * T, m, k, k32, &mut pa[q * block_len..(q + 1) * block_len]);
    }
    configure_tiles();
    // A row block's sums over a group of column blocks, then the epilogue and rounding on
    // whole group rows (one call per row, not per 32 columns).
    let mut out = Aligned([0f32; 2 * T * GROUP_COLS]);
    let out = &mut out.0;
    let group = blocks_in(GROUP_B_BYTES, k).min(GROUP_COLS / (2 * T));
    for g0 in cbs.clone().step_by(group) {
        let g1 = (g0 + group).min(cbs.end);
        let (j0, w) = (g0 * 2 * T, (g1 * 2 * T).min(n) - g0 * 2 * T);
        for (q, rb) in rbs.clone().enumerate() {
            let i0 = rb * 2 * T;
            // This row block's share of the next group's B, asked into L2 while its blocks run
            // (the first row block of a group reads B from L3 otherwise).
            let next = (g1 + group).min(cbs.end);
            let (next_at, next_lines) =
                (pb.add(2 * g1 * panel_len(k)) as *const u8, (next - g1) * 4 * panel_len(k) / 64);
            let share = next_lines.div_ceil(rbs.len());
            let (from, to) = ((q * share).min(next_lines), ((q + 1) * share).min(next_lines));
            let per_block = (to - from).div_ceil(g1 - g0);
            for cb in g0..g1 {
                let (b0, b1) = (pb.add(2 * cb * panel_len(k)), pb.add((2 * cb + 1) * panel_len(k)));
                let at = out.as_mut_ptr().add((cb - g0) * 2 * T);
                let l0 = (from + (cb - g0) * per_block).min(to);
                let pf = (next_at.add(l0 * 64), per_block.min(to - l0));
                block(k32, (pa.as_ptr().add(q * block_len), k32), b0, b1, at, GROUP_COLS, pf);
            }
            for r in 0..(2 * T).min(m - i0) {
                let row = &mut out[r * GROUP_COLS..r * GROUP_COLS + w];
                if let Some(f) = epi {
                    f(i0 + r, j0, row);
                }
                super::half_convert::narrow(row.as_ptr(), w, c.ptr.offset((i0 + r) as isize * c.rs + j0 as isize));
            }
        }
    }
    release_tiles();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// C = A * B through `gemm` for every thread count and B packed ahead (on a 64-byte boundary
    /// and off one) or not, against f64 sums of the same bf16 products.
    fn check(m: usize, n: usize, k: usize) {
        let a: Vec<bf16> = (0..m * k).map(|i| bf16::from_f32(((i * 7 % 13) as f32 - 6.0) / 3.0)).collect();
        let b: Vec<bf16> = (0..k * n).map(|i| bf16::from_f32(((i * 5 % 11) as f32 - 5.0) / 7.0)).collect();
        let want: Vec<f64> = (0..m * n)
            .map(|ij| (0..k).map(|p| a[ij / n * k + p].to_f64() * b[p * n + ij % n].to_f64()).sum())
            .collect();
        let mut c = vec![bf16::from_f32(f32::NAN); m * n];
        let len = packed_len(k, n);
        let mut store = vec![1u16; len + 33];
        let skip = store.as_ptr().align_offset(64);
        for (threads, packed) in [(1, None), (2, None), (1, Some(skip)), (2, Some(skip)), (2, Some(skip + 1))] {
            let pb = packed.map(|at| {
                let out = &mut store[at..at + len];
                // SAFETY: the buffer holds the packed size; B covers k x n.
                unsafe { pack_b_full(MatRef { ptr: b.as_ptr(), rs: n as isize, cs: 1 }, k, n, out, 2) };
                out.as_ptr()
            });
            // SAFETY: AMX is available; the buffers hold the matrices.
            unsafe {
                gemm(
                    m,
                    n,
                    k,
                    MatRef { ptr: a.as_ptr(), rs: k as isize, cs: 1 },
                    MatRef { ptr: b.as_ptr(), rs: n as isize, cs: 1 },
                    pb,
                    MatMut { ptr: c.as_mut_ptr(), rs: n as isize },
                    threads,
                    None,
                )
            };
            for (ij, (&got, &want)) in c.iter().zip(&want).enumerate() {
                // One bf16 rounding of the f32 sum (relative 2^-8), plus the f32 sums.
                let tol = want.abs() * 4e-3 + 1e-3 * (k as f64 / 32.0).max(1.0);
                let got = got.to_f64();
                let (i, j) = (ij / n, ij % n);
                assert!(
                    (got - want).abs() <= tol,
                    "{m}x{n}x{k} {threads} threads, B {packed:?}: ({i}, {j}) {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn matches_f64_sums_of_the_bf16_products() {
        if !available() {
            eprintln!("no AMX here: skipped");
            return;
        }
        for (m, n, k) in [(32, 32, 32), (5, 17, 7), (1, 1, 1), (45, 70, 100), (64, 48, 33), (70, 64, 31)] {
            check(m, n, k);
        }
    }

    #[test]
    fn chunks_and_column_groups_cover_every_block() {
        if !available() {
            eprintln!("no AMX here: skipped");
            return;
        }
        // k = 4096: chunks of 2 row blocks, groups of 2 column blocks (`blocks_in`), with tails.
        assert_eq!((blocks_in(CHUNK_A_BYTES, 4096), blocks_in(GROUP_B_BYTES, 4096)), (2, 2));
        check(150, 176, 4096);
        // k = 8192: one row block fills a chunk's bytes; chunks still take two (`MIN_CHUNK_BLOCKS`).
        assert_eq!(blocks_in(CHUNK_A_BYTES, 8192), 1);
        check(100, 80, 8192);
    }
}
