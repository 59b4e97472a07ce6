//! Micro-kernels: an MR x NR tile of C from packed panels of A and B. AVX-512 and AVX2+FMA when
//! the CPU has them (checked at run time), NEON on aarch64 (always present there), a portable
//! loop otherwise; `f32_kernels` and `f64_kernels` list the ones this CPU runs, best first.

use super::{KC, Kernel};

/// The AVX-512 f32 tile (rows, columns): 24 zmm accumulators and 2 for B.
#[cfg(target_arch = "x86_64")]
const AVX512_F32: (usize, usize) = (12, 32);

/// The AVX-512 f64 tile: the f32 tile's registers and bytes per k step, half the lanes.
#[cfg(target_arch = "x86_64")]
const AVX512_F64: (usize, usize) = (12, 16);

/// The deepest k block of the AVX-512 tiles. Where a zmm FMA runs as two 256-bit halves (AMD
/// Zen 4), a deep block (fewer passes over C) whose 64 KiB B micro-panel streams from L2 measured
/// best (512 against 192, 256 or 384). Where two full-width zmm FMAs issue per cycle (Intel, Zen
/// 5), the kernel needs B in L1, so 256 (session 10 in docs/benchmarks-history.md).
#[cfg(target_arch = "x86_64")]
fn avx512_kc() -> usize {
    if zmm_fma_split() { 512 } else { 256 }
}

/// Whether the CPU runs 512-bit FMAs as two 256-bit halves: AMD before family 0x1A (Zen 5).
#[cfg(target_arch = "x86_64")]
pub(crate) fn zmm_fma_split() -> bool {
    amd_family().is_some_and(|family| family < 0x1a)
}

/// Whether the in-place A tiles prefetch A's rows with the non-temporal hint (AMD) or into L2
/// (everyone else; see `avx512_full::a_rows_hint`).
#[cfg(target_arch = "x86_64")]
pub(crate) fn a_rows_non_temporal() -> bool {
    amd_family().is_some()
}

/// The CPU family on AMD ("AuthenticAMD" in `cpuid` leaf 0), None on other vendors. Read once:
/// `cpuid` traps to the hypervisor in a VM.
#[cfg(target_arch = "x86_64")]
fn amd_family() -> Option<u32> {
    static FAMILY: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *FAMILY.get_or_init(|| {
        let (vendor, sig) = (std::arch::x86_64::__cpuid(0), std::arch::x86_64::__cpuid(1));
        let amd = (vendor.ebx, vendor.edx, vendor.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
        let base = (sig.eax >> 8) & 0xf;
        amd.then(|| if base == 0xf { base + ((sig.eax >> 20) & 0xff) } else { base })
    })
}

/// `PackTileFn` for the AVX-512 12 x 32 f32 tile (`f32_packb_full`).
///
/// # Safety
/// As `PackTileFn`: a full 12 x 32 tile, A and B row-major, the CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
unsafe fn f32_pack_tile(
    kc: usize,
    a: super::APanel<f32>,
    b: super::MatRef<f32>,
    bd: *mut f32,
    c: *mut f32,
    rs: isize,
    acc: bool,
) {
    // SAFETY: forwarded; the strides are non-negative for row-major views.
    unsafe { super::f32_packb_full(kc, a.ptr, a.rs as usize, b.ptr, b.rs as usize, bd, c, rs as usize, acc) }
}

/// f32 micro-kernels this CPU can run, best first; the portable one is always last.
#[allow(clippy::vec_init_then_push)] // The pushes before the last are per architecture.
pub fn f32_kernels() -> Vec<Kernel<f32>> {
    let mut v = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        let (mr, nr) = AVX512_F32;
        if has_avx512() {
            let kc = avx512_kc();
            v.push(Kernel {
                name: "avx512-12x32",
                mr,
                nr,
                kc,
                micro: super::avx512::f32_tile::<12, 2>,
                stream: Some(super::avx512::f32_tile_stream::<12, 2>),
                pack_tile: Some(f32_pack_tile),
            });
        }
        if has_avx2() {
            v.push(Kernel::plain("avx2-6x16", 6, 16, KC, x86::f32_6x16));
        }
    }
    #[cfg(target_arch = "aarch64")]
    v.push(Kernel::plain("neon-8x12", 8, 12, KC, super::neon::f32_8x12));
    v.push(Kernel::plain("portable-6x16", 6, 16, KC, generic::<f32, 6, 16>));
    v
}

/// f64 micro-kernels this CPU can run, best first; the portable one is always last.
#[allow(clippy::vec_init_then_push)] // The pushes before the last are per architecture.
pub fn f64_kernels() -> Vec<Kernel<f64>> {
    let mut v = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        let (mr, nr) = AVX512_F64;
        if has_avx512() {
            let kc = avx512_kc();
            v.push(Kernel {
                name: "avx512-12x16",
                mr,
                nr,
                kc,
                micro: super::avx512::f64_tile::<12, 2>,
                stream: Some(super::avx512::f64_tile_stream::<12, 2>),
                pack_tile: None,
            });
        }
        if has_avx2() {
            v.push(Kernel::plain("avx2-6x8", 6, 8, KC, x86::f64_6x8));
        }
    }
    #[cfg(target_arch = "aarch64")]
    v.push(Kernel::plain("neon-6x8", 6, 8, KC, super::neon::f64_6x8));
    v.push(Kernel::plain("portable-6x8", 6, 8, KC, generic::<f64, 6, 8>));
    v
}

/// Whether the CPU has AVX2 and FMA (std caches the answer).
#[cfg(target_arch = "x86_64")]
pub fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

/// Whether the CPU has AVX-512F besides AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
pub fn has_avx512() -> bool {
    std::is_x86_feature_detected!("avx512f") && has_avx2()
}

/// Portable micro-kernel over any element type.
///
/// # Safety
/// As `GemmElem::micro`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn generic<T: super::GemmElem, const MR: usize, const NR: usize>(
    kc: usize,
    a: super::APanel<T>,
    b: *const T,
    c: *mut T,
    rs: isize,
    m: usize,
    n: usize,
    accumulate: bool,
) {
    let mut acc = [[T::default(); NR]; MR];
    for p in 0..kc {
        for (i, row) in acc.iter_mut().enumerate() {
            // SAFETY: rows past `m` read row m - 1 (discarded); A covers m x kc.
            let av = unsafe { *a.ptr.offset(i.min(m - 1) as isize * a.rs + p as isize * a.cs) };
            for (j, v) in row.iter_mut().enumerate() {
                *v = *v + av * unsafe { *b.add(p * NR + j) };
            }
        }
    }
    // SAFETY: the tile of C covers m x n.
    unsafe { write_tile(acc.as_flattened(), NR, c, rs, m, n, accumulate) };
}

/// Writes (or adds, with `accumulate`) the first m x n entries of a finished tile held in
/// `tile` (rows `nr` apart) into C: the edge tiles of every micro-kernel.
///
/// # Safety
/// C at row stride `rs` covers m x n; `tile` holds m rows of `nr` >= n.
#[inline(always)]
pub(super) unsafe fn write_tile<T: super::GemmElem>(
    tile: &[T],
    nr: usize,
    c: *mut T,
    rs: isize,
    m: usize,
    n: usize,
    accumulate: bool,
) {
    for (i, row) in tile.chunks_exact(nr).enumerate().take(m) {
        for (j, &v) in row.iter().enumerate().take(n) {
            // SAFETY: (i, j) lies inside the tile of C.
            let dst = unsafe { &mut *c.offset(i as isize * rs + j as isize) };
            *dst = if accumulate { *dst + v } else { v };
        }
    }
}

/// f32 tile 6 x 16.
///
/// # Safety
/// As `GemmElem::micro`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn micro_f32(
    kc: usize,
    a: super::APanel<f32>,
    b: *const f32,
    c: *mut f32,
    rs: isize,
    m: usize,
    n: usize,
    acc: bool,
) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the features are present.
        return unsafe { x86::f32_6x16(kc, a, b, c, rs, m, n, acc) };
    }
    unsafe { generic::<f32, 6, 16>(kc, a, b, c, rs, m, n, acc) }
}

/// f64 tile 6 x 8.
///
/// # Safety
/// As `GemmElem::micro`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn micro_f64(
    kc: usize,
    a: super::APanel<f64>,
    b: *const f64,
    c: *mut f64,
    rs: isize,
    m: usize,
    n: usize,
    acc: bool,
) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the features are present.
        return unsafe { x86::f64_6x8(kc, a, b, c, rs, m, n, acc) };
    }
    unsafe { generic::<f64, 6, 8>(kc, a, b, c, rs, m, n, acc) }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    // Intrinsics code: every statement is unsafe; the functions document the contract.
    #![allow(unsafe_op_in_unsafe_fn)]
    use std::arch::x86_64::*;

    /// Writes (or adds) a full register tile into C, or a partial one through a stack buffer.
    macro_rules! store_tile {
        ($t:ty, $lanes:expr, $regs:expr, $store:ident, $load:ident, $add:ident, $c:expr, $rs:expr, $m:expr, $n:expr, $acc:expr) => {{
            const NR: usize = 2 * $lanes;
            if $m == 6 && $n == NR {
                for (i, row) in $regs.iter().enumerate() {
                    let dst = $c.offset(i as isize * $rs);
                    for (h, &v) in row.iter().enumerate() {
                        let p = dst.add(h * $lanes);
                        let v = if $acc { $add($load(p), v) } else { v };
                        $store(p, v);
                    }
                }
            } else {
                let mut tmp = [0 as $t; 6 * NR];
                for (i, row) in $regs.iter().enumerate() {
                    for (h, &v) in row.iter().enumerate() {
                        $store(tmp.as_mut_ptr().add(i * NR + h * $lanes), v);
                    }
                }
                super::write_tile(&tmp, NR, $c, $rs, $m, $n, $acc);
            }
        }};
    }

    /// A 6 x (2 * lanes) AVX2+FMA micro-kernel: 12 accumulator registers, B loaded once per k,
    /// each A value broadcast once per k.
    macro_rules! avx2_kernel {
        ($name:ident, $t:ty, $lanes:expr, $zero:ident, $load:ident, $bcast:ident, $fma:ident, $store:ident, $add:ident) => {
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            pub unsafe fn $name(
                kc: usize,
                a: super::super::APanel<$t>,
                b: *const $t,
                c: *mut $t,
                rs: isize,
                m: usize,
                n: usize,
                acc: bool,
            ) {
                const NR: usize = 2 * $lanes;
                // Pull the C tile towards L1 while the products run (it is read or written last).
                for i in 0..m {
                    let row = c.offset(i as isize * rs) as *const i8;
                    // Both ends of the row: 64 bytes, not necessarily aligned.
                    _mm_prefetch::<_MM_HINT_T0>(row);
                    _mm_prefetch::<_MM_HINT_T0>(row.add(NR * std::mem::size_of::<$t>() - 1));
                }
                let mut r = [[$zero(); 2]; 6];
                // Row offsets; rows past m re-read row m - 1 (never out of bounds, discarded).
                let off: [isize; 6] = std::array::from_fn(|i| i.min(m - 1) as isize * a.rs);
                let mut ap = a.ptr;
                let mut bp = b;
                for _ in 0..kc {
                    let b0 = $load(bp);
                    let b1 = $load(bp.add($lanes));
                    for (i, row) in r.iter_mut().enumerate() {
                        let av = $bcast(&*ap.offset(off[i]));
                        row[0] = $fma(av, b0, row[0]);
                        row[1] = $fma(av, b1, row[1]);
                    }
                    ap = ap.offset(a.cs);
                    bp = bp.add(NR);
                }
                store_tile!($t, $lanes, r, $store, $load, $add, c, rs, m, n, acc);
            }
        };
    }

    avx2_kernel!(
        f32_6x16,
        f32,
        8,
        _mm256_setzero_ps,
        _mm256_loadu_ps,
        _mm256_broadcast_ss,
        _mm256_fmadd_ps,
        _mm256_storeu_ps,
        _mm256_add_ps
    );
    avx2_kernel!(
        f64_6x8,
        f64,
        4,
        _mm256_setzero_pd,
        _mm256_loadu_pd,
        _mm256_broadcast_sd,
        _mm256_fmadd_pd,
        _mm256_storeu_pd,
        _mm256_add_pd
    );
}
