//! Prefill: a batched int8 matmul. A few weight rows at a time are unpacked once per call into a
//! small tile (unsigned 8-bit values, i16 scales per 16 values, f32 block scales and offsets) that
//! every activation row then reuses; micro-kernels take MR activation rows times NR weight rows,
//! with `maddubs` + `madd` (AVX2) or `maddubs` + `vpdpwssd` / `vpdpbusd` (VNNI).

use super::dot::{Q8K, Q80, half_at, scales_mins_k4};
use super::{Isa, OutPtr};
use crate::threads::parallel_for;
use rlx_ir::QuantScheme;
use std::arch::x86_64::*;
use std::sync::Mutex;

/// Unpacked weight rows (`NR` at most), laid out for the micro-kernels.
#[derive(Default)]
pub struct Tile {
    /// Per row, `k` unsigned values (0..63 for K-quants, 0..255 for Q8_0 + 128, 0..15 for Q4_0).
    u: Vec<u8>,
    /// K-quants, per row, `k / 2` i16: for each 32 values, 8 copies of each of its two 16-group scales.
    sc: Vec<i16>,
    /// Per row, the f32 scale of each block (256 values for K-quants, 32 otherwise).
    d: Vec<f32>,
    /// K-quants, per row, `k / 16` offsets: `c * (activation scale * sum of the 16 values)` is subtracted.
    c: Vec<f32>,
}

impl Tile {
    fn reset(&mut self, rows: usize, k: usize) {
        self.u.resize(rows * k, 0);
        self.sc.resize(rows * k / 2, 0);
        self.d.resize(rows * k / 32, 0.0);
        self.c.resize(rows * k / 16, 0.0);
    }
}

/// Unpacks K-quant row `w` into tile row `r` of a tile of rows of `k` values.
#[target_feature(enable = "avx2,f16c")]
fn unpack_k(s: QuantScheme, w: &[u8], k: usize, t: &mut Tile, r: usize) {
    let nb = k / 256;
    let bb = s.block_bytes();
    assert!(w.len() >= nb * bb && t.u.len() >= (r + 1) * k && t.sc.len() >= (r + 1) * k / 2);
    let (m4, m2, one) = (_mm256_set1_epi8(0xF), _mm256_set1_epi8(3), _mm256_set1_epi8(1));
    for b in 0..nb {
        let blk = &w[b * bb..(b + 1) * bb];
        // SAFETY: the assert above: 256 values and 128 scales of block b of row r.
        let (u, sc) = unsafe { (t.u.as_mut_ptr().add(r * k + 256 * b), t.sc.as_mut_ptr().add(r * k / 2 + 128 * b)) };
        let c = &mut t.c[(r * nb + b) * 16..(r * nb + b + 1) * 16];
        let ld = |at: usize| {
            // SAFETY: 32 bytes at `at` inside the block (callers stay below its size).
            unsafe { _mm256_loadu_si256(blk.as_ptr().add(at) as *const __m256i) }
        };
        // SAFETY: 32 bytes at `at` of this block's values or scales.
        let st = |p: *mut u8, v: __m256i| unsafe { _mm256_storeu_si256(p as *mut __m256i, v) };
        if s == QuantScheme::Q6_K {
            for h in 0..2 {
                let (ql0, ql1, qh) = (ld(64 * h), ld(64 * h + 32), ld(128 + 32 * h));
                let hb = |v: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(v, m2));
                let qs = [
                    _mm256_or_si256(_mm256_and_si256(ql0, m4), hb(qh)),
                    _mm256_or_si256(_mm256_and_si256(ql1, m4), hb(_mm256_srli_epi16::<2>(qh))),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4), hb(_mm256_srli_epi16::<4>(qh))),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4), hb(_mm256_srli_epi16::<6>(qh))),
                ];
                for (i, q) in qs.into_iter().enumerate() {
                    st(u.wrapping_add(128 * h + 32 * i), q);
                }
            }
            let dd = half_at(blk, 208);
            for g in 0..8 {
                let (lo, hi) = (blk[192 + 2 * g] as i8, blk[193 + 2 * g] as i8);
                let v = _mm256_set_m128i(_mm_set1_epi16(hi as i16), _mm_set1_epi16(lo as i16));
                st(sc.wrapping_add(16 * g) as *mut u8, v);
                (c[2 * g], c[2 * g + 1]) = (32.0 * dd * lo as f32, 32.0 * dd * hi as f32);
            }
            t.d[r * nb + b] = dd;
        } else {
            let q5 = s == QuantScheme::Q5_K;
            let (qs, qh) = if q5 { (48, ld(16)) } else { (16, _mm256_setzero_si256()) };
            for ch in 0..4 {
                let q = ld(qs + 32 * ch);
                let (mut lo, mut hi) = (_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4));
                if q5 {
                    let bit = |sh: usize| {
                        let v = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(sh as i32)), one);
                        _mm256_slli_epi16::<4>(v)
                    };
                    (lo, hi) = (_mm256_or_si256(lo, bit(2 * ch)), _mm256_or_si256(hi, bit(2 * ch + 1)));
                }
                st(u.wrapping_add(64 * ch), lo);
                st(u.wrapping_add(64 * ch + 32), hi);
            }
            let (scs, ms) = scales_mins_k4(&blk[4..16]);
            let dmin = half_at(blk, 2);
            for j in 0..8 {
                st(sc.wrapping_add(16 * j) as *mut u8, _mm256_set1_epi16(scs[j] as i16));
                (c[2 * j], c[2 * j + 1]) = (dmin * ms[j] as f32, dmin * ms[j] as f32);
            }
            t.d[r * nb + b] = half_at(blk, 0);
        }
    }
}

/// Unpacks Q8_0 (values + 128) or Q4_0 row `w` into tile row `r`.
fn unpack_0(s: QuantScheme, w: &[u8], k: usize, t: &mut Tile, r: usize) {
    let nb = k / 32;
    for b in 0..nb {
        let u = &mut t.u[r * k + 32 * b..r * k + 32 * (b + 1)];
        if s == QuantScheme::Q8_0 {
            let blk = &w[34 * b..34 * (b + 1)];
            for (u, &q) in u.iter_mut().zip(&blk[2..]) {
                *u = q ^ 0x80;
            }
            t.d[r * nb + b] = half_at(blk, 0);
        } else {
            let blk = &w[18 * b..18 * (b + 1)];
            for l in 0..16 {
                u[l] = blk[2 + l] & 0xF;
                u[l + 16] = blk[2 + l] >> 4;
            }
            t.d[r * nb + b] = half_at(blk, 0);
        }
    }
}

/// The sum of 8 f32 lanes.
#[target_feature(enable = "avx2")]
#[inline]
fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

macro_rules! gemm_isa {
    ($m:ident, $feat:literal, $udot:path, $macc:path, $MR:literal, $NR:literal) => {
        /// Micro-kernels for one instruction set.
        pub mod $m {
            use super::*;

            /// Activation rows per micro-kernel call.
            pub const MR: usize = $MR;
            /// Weight rows per tile.
            pub const NR: usize = $NR;

            #[target_feature(enable = $feat)]
            #[inline]
            unsafe fn load(p: *const u8) -> __m256i {
                // SAFETY: callers pass pointers with 32 readable bytes.
                unsafe { _mm256_loadu_si256(p as *const __m256i) }
            }

            /// `y[i, r]` for `MR2` activation rows (Q8_K blocks `act`, `nb` per row, and their
            /// scaled 16-sums `bsf`) times the `NR2` rows of K-quant tile `t`; `y` at (0, 0), `n` wide.
            ///
            /// # Safety
            /// The CPU must support the module's features; every pointer covers its rows.
            #[target_feature(enable = $feat)]
            pub unsafe fn ktile<const MR2: usize, const NR2: usize>(
                act: &[Q8K],
                bsf: &[f32],
                nb: usize,
                t: &Tile,
                y: OutPtr,
                n: usize,
            ) {
                let k = nb * 256;
                assert!(act.len() >= MR2 * nb && bsf.len() >= MR2 * nb * 16 && t.u.len() >= NR2 * k);
                let mut facc = [[_mm256_setzero_ps(); NR2]; MR2];
                for b in 0..nb {
                    let mut acc = [[_mm256_setzero_si256(); NR2]; MR2];
                    let ap: [*const u8; MR2] = std::array::from_fn(|i| act[i * nb + b].qs.as_ptr() as *const u8);
                    for q in 0..8 {
                        // SAFETY: 32 activations at 32q of block b of row i.
                        let av: [__m256i; MR2] = std::array::from_fn(|i| unsafe { load(ap[i].add(32 * q)) });
                        for r in 0..NR2 {
                            // SAFETY: value 256b + 32q of tile row r, and its 16 scales.
                            let (uv, sv) = unsafe {
                                (
                                    load(t.u.as_ptr().add(r * k + 256 * b + 32 * q)),
                                    load(t.sc.as_ptr().add(r * k / 2 + 128 * b + 16 * q) as *const u8),
                                )
                            };
                            for i in 0..MR2 {
                                acc[i][r] = $macc(acc[i][r], _mm256_maddubs_epi16(uv, av[i]), sv);
                            }
                        }
                    }
                    for i in 0..MR2 {
                        let ad = act[i * nb + b].d;
                        // SAFETY: 16 floats per block of row i.
                        let (b0, b1) = unsafe {
                            let p = bsf.as_ptr().add((i * nb + b) * 16);
                            (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
                        };
                        for r in 0..NR2 {
                            let f = _mm256_set1_ps(t.d[r * nb + b] * ad);
                            // SAFETY: 16 offsets per block of tile row r.
                            let (c0, c1) = unsafe {
                                let p = t.c.as_ptr().add((r * nb + b) * 16);
                                (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
                            };
                            let v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][r]), f, facc[i][r]);
                            facc[i][r] = _mm256_fnmadd_ps(c1, b1, _mm256_fnmadd_ps(c0, b0, v));
                        }
                    }
                }
                for i in 0..MR2 {
                    for r in 0..NR2 {
                        // SAFETY: (i, r) lies in this call's part of the output, written by this task only.
                        unsafe { *y.at(i * n + r) = hsum_ps(facc[i][r]) };
                    }
                }
            }

            /// As `ktile` for Q8_0 / Q4_0 tiles (32-blocks; `off` is the value offset, 128 or 8).
            ///
            /// # Safety
            /// As `ktile`.
            #[target_feature(enable = $feat)]
            pub unsafe fn ztile<const MR2: usize, const NR2: usize>(
                act: &[Q80],
                nb: usize,
                off: i32,
                t: &Tile,
                y: OutPtr,
                n: usize,
            ) {
                let k = nb * 32;
                assert!(act.len() >= MR2 * nb && t.u.len() >= NR2 * k && t.d.len() >= NR2 * nb);
                let mut facc = [[_mm256_setzero_ps(); NR2]; MR2];
                for b in 0..nb {
                    let a: [&Q80; MR2] = std::array::from_fn(|i| &act[i * nb + b]);
                    // SAFETY: 32 activations.
                    let av: [__m256i; MR2] = std::array::from_fn(|i| unsafe { load(a[i].qs.as_ptr() as *const u8) });
                    let corr: [__m256i; MR2] =
                        std::array::from_fn(|i| _mm256_setr_epi32(-off * a[i].sum, 0, 0, 0, 0, 0, 0, 0));
                    for r in 0..NR2 {
                        // SAFETY: block b of tile row r.
                        let uv = unsafe { load(t.u.as_ptr().add(r * k + 32 * b)) };
                        let dr = t.d[r * nb + b];
                        for i in 0..MR2 {
                            let dot = _mm256_add_epi32($udot(uv, av[i]), corr[i]);
                            facc[i][r] =
                                _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dr * a[i].d), facc[i][r]);
                        }
                    }
                }
                for i in 0..MR2 {
                    for r in 0..NR2 {
                        // SAFETY: as in `ktile`.
                        unsafe { *y.at(i * n + r) = hsum_ps(facc[i][r]) };
                    }
                }
            }
        }
    };
}

gemm_isa!(avx2, "avx2,fma,f16c", super::super::x86::udot_avx2, super::super::blocks4::macc_avx2, 4, 1);
gemm_isa!(
    vnni,
    "avx2,fma,f16c,avx512vnni,avx512vl",
    super::super::x86::udot_vnni,
    super::super::blocks4::macc_vnni,
    4,
    2
);

/// Whether `scheme` on `isa` has a batched path (AVX2 Q8_0 would overflow `maddubs`: row path).
pub fn supported(scheme: QuantScheme, isa: Isa) -> bool {
    match isa {
        Isa::Vnni => matches!(
            scheme,
            QuantScheme::Q4_K | QuantScheme::Q5_K | QuantScheme::Q6_K | QuantScheme::Q8_0 | QuantScheme::Q4_0
        ),
        Isa::Avx2 => matches!(scheme, QuantScheme::Q4_K | QuantScheme::Q5_K | QuantScheme::Q6_K | QuantScheme::Q4_0),
        Isa::Scalar => false,
    }
}

/// Per-kernel scratch, allocated when the kernel is built so that runs allocate nothing: the
/// activations' scaled 16-sums and one tile per pool thread (a task takes any free one).
pub struct Scratch {
    bsf: Vec<f32>,
    tiles: Vec<Mutex<Tile>>,
}

impl Scratch {
    /// Scratch for `m` activation rows of `k` values.
    pub fn new(m: usize, k: usize) -> Scratch {
        let tile = || {
            let mut t = Tile::default();
            t.reset(vnni::NR.max(avx2::NR), k);
            Mutex::new(t)
        };
        Scratch { bsf: vec![0.0; m * k / 16], tiles: (0..crate::threads::num_threads()).map(|_| tile()).collect() }
    }

    /// Runs `f` with a free tile (at most one task per pool thread runs at a time, so one is free).
    fn with_tile(&self, f: impl FnOnce(&mut Tile)) {
        loop {
            for t in &self.tiles {
                if let Ok(mut t) = t.try_lock() {
                    return f(&mut t);
                }
            }
            std::thread::yield_now();
        }
    }
}

/// Weight rows per task (a multiple of every NR).
const ROWS_PER_TASK: usize = 16;
/// Activation rows per pass over a tile: at most 64 x k bytes of activations, which stay in L2.
const M_BLOCK: usize = 64;

/// Calls `$f::<mr, nr>` for run-time `mr <= MR` and `nr <= NR` (tails of m and n).
macro_rules! dispatch {
    ($isa:ident, $f:ident, $mr:expr, $nr:expr, $($arg:expr),*) => {{
        // SAFETY: `supported` checked the CPU's features; the callers size every slice.
        unsafe {
            match ($mr, $nr) {
                (4, 2) => $isa::$f::<4, 2>($($arg),*),
                (3, 2) => $isa::$f::<3, 2>($($arg),*),
                (2, 2) => $isa::$f::<2, 2>($($arg),*),
                (1, 2) => $isa::$f::<1, 2>($($arg),*),
                (4, _) => $isa::$f::<4, 1>($($arg),*),
                (3, _) => $isa::$f::<3, 1>($($arg),*),
                (2, _) => $isa::$f::<2, 1>($($arg),*),
                _ => $isa::$f::<1, 1>($($arg),*),
            }
        }
    }};
}

/// `y[m, n] = act[m, k] . w[n, k]^T` for K-quant `w` (rows of `rb` bytes) and Q8_K activations.
#[allow(clippy::too_many_arguments)]
pub fn gemm_k(
    isa: Isa,
    s: QuantScheme,
    act: &[Q8K],
    (m, k): (usize, usize),
    w: &[u8],
    rb: usize,
    n: usize,
    y: OutPtr,
    scratch: &mut Scratch,
) {
    let nb = k / 256;
    // Activation scale times each 16-sum, once per call.
    for (a, out) in act.iter().zip(scratch.bsf.chunks_exact_mut(16)) {
        for (o, &v) in out.iter_mut().zip(&a.bsums) {
            *o = a.d * v as f32;
        }
    }
    let scratch = &*scratch;
    let bsf = &scratch.bsf;
    let (mr, nr) = if isa == Isa::Vnni { (vnni::MR, vnni::NR) } else { (avx2::MR, avx2::NR) };
    parallel_for(n.div_ceil(ROWS_PER_TASK), &|task| {
        scratch.with_tile(|t| {
            let (j0, j1) = (task * ROWS_PER_TASK, ((task + 1) * ROWS_PER_TASK).min(n));
            // Blocks of activation rows small enough to stay in L2 (a tile is re-unpacked per block).
            for (j, i0) in (j0..j1).step_by(nr).flat_map(|j| (0..m).step_by(M_BLOCK).map(move |i0| (j, i0))) {
                let rows = nr.min(j1 - j);
                t.reset(rows, k);
                for r in 0..rows {
                    // SAFETY: `supported` admits only CPUs with AVX2 and F16C.
                    unsafe { unpack_k(s, &w[(j + r) * rb..(j + r + 1) * rb], k, t, r) };
                }
                for i in (i0..(i0 + M_BLOCK).min(m)).step_by(mr) {
                    let mr = mr.min(m - i);
                    let (a, bs, yy) = (&act[i * nb..], &bsf[i * nb * 16..], OutPtr(y.at(i * n + j)));
                    if isa == Isa::Vnni {
                        dispatch!(vnni, ktile, mr, rows, a, bs, nb, t, yy, n);
                    } else {
                        dispatch!(avx2, ktile, mr, rows, a, bs, nb, t, yy, n);
                    }
                }
            }
        })
    });
}

/// As `gemm_k` for Q8_0 / Q4_0 weights and Q8_0 activations.
#[allow(clippy::too_many_arguments)]
pub fn gemm_0(
    isa: Isa,
    s: QuantScheme,
    act: &[Q80],
    (m, k): (usize, usize),
    w: &[u8],
    rb: usize,
    n: usize,
    y: OutPtr,
    scratch: &Scratch,
) {
    let nb = k / 32;
    let off = if s == QuantScheme::Q8_0 { 128 } else { 8 };
    let (mr, nr) = if isa == Isa::Vnni { (vnni::MR, vnni::NR) } else { (avx2::MR, avx2::NR) };
    parallel_for(n.div_ceil(ROWS_PER_TASK), &|task| {
        scratch.with_tile(|t| {
            let (j0, j1) = (task * ROWS_PER_TASK, ((task + 1) * ROWS_PER_TASK).min(n));
            for (j, i0) in (j0..j1).step_by(nr).flat_map(|j| (0..m).step_by(M_BLOCK).map(move |i0| (j, i0))) {
                let rows = nr.min(j1 - j);
                t.reset(rows, k);
                for r in 0..rows {
                    unpack_0(s, &w[(j + r) * rb..(j + r + 1) * rb], k, t, r);
                }
                for i in (i0..(i0 + M_BLOCK).min(m)).step_by(mr) {
                    let mr = mr.min(m - i);
                    let (a, yy) = (&act[i * nb..], OutPtr(y.at(i * n + j)));
                    if isa == Isa::Vnni {
                        dispatch!(vnni, ztile, mr, rows, a, nb, off, t, yy, n);
                    } else {
                        dispatch!(avx2, ztile, mr, rows, a, nb, off, t, yy, n);
                    }
                }
            }
        })
    });
}
