//! Prefill on AMX (`tdpbf16ps`) over the repacked eight-row groups (`repack.rs`): a task takes a
//! band of weight rows, dequantizes them into bf16 pair panels that stay in its L2 (16 rows per
//! panel; pair row p holds values 2p and 2p + 1 of each row, the layout the tiles read), and
//! multiplies every activation row by them, 32 x 32 outputs per `half_amx::block`. Activations are
//! rounded once to bf16 (as the int8 paths quantize them to 8 bits); weights are `d * sc * q - m`
//! in f32 rounded to bf16; the sums are f32. Where AMX is missing (or `RLX_QUANT_AMX=0`) the int8
//! kernels run instead.

// Intrinsics code: every statement is unsafe; the functions document the contract.
#![allow(unsafe_op_in_unsafe_fn)]

use super::OutPtr;
use super::repack::{Q5K_QH, Q5K_QS, Q6K_D, Q6K_QS, Q6K_SC, ROWS, group_block_bytes};
use crate::gemm::aligned_buf;
use crate::gemm::half_amx::{self, T, block, block16, configure_tiles, panel_len, release_tiles};
use crate::gemm::slots::PackSlots;
use crate::threads::parallel_for;
use rlx_ir::QuantScheme;
use std::arch::x86_64::*;

/// Fewest activation rows that take this path: below it the int8 kernels (no weight
/// dequantization per call) are faster (2 threads, weights in cache: 0.5-0.8x at 8 rows, 1.0-1.1x
/// at 16, 1.3-1.4x at 24).
pub const MIN_ROWS: usize = 16;

/// Weight rows whose bf16 panels a task keeps (in its L2) while every activation row passes:
/// this many bytes of panels, 32 to 256 rows.
const BAND_BYTES: usize = 1 << 20;

/// Whether this CPU runs the AMX path: AMX-BF16 with the tile state granted (`half_amx`), and
/// AVX512-BF16 and BW for the conversions.
pub fn available() -> bool {
    is_x86_feature_detected!("avx512bf16") && is_x86_feature_detected!("avx512bw") && half_amx::available()
}

/// Whether `s` has a dequantizer here (the schemes with a repacked layout).
pub fn supported(s: QuantScheme) -> bool {
    group_block_bytes(s).is_some()
}

/// Weight rows per task for rows of `k` values: a multiple of 32.
fn band_rows(k: usize) -> usize {
    (BAND_BYTES / (2 * k)).clamp(32, 256) / 32 * 32
}

/// The weight panels of the tasks the pool threads run (the A half of each pair), grown once
/// per thread and spread to all (`PackSlots::spread`).
static PANELS: PackSlots<u16> = PackSlots::new();

thread_local! {
    /// `PANELS` of a thread outside the pool.
    static PANELS_LOCAL: std::cell::RefCell<(Vec<u16>, Vec<u16>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// `PackSlots::spread` for the weight panels.
pub(crate) fn spread_panels() {
    PANELS.spread(&PANELS_LOCAL);
}

/// Elements of the bf16 activation buffer `gemm` takes for `m` rows of `k` (whole 32-row blocks
/// of rows `act_stride(k)` long, plus the slack `aligned_buf` needs to start on a cache line):
/// reserved ahead, no run grows it.
pub fn act_buffer_len(m: usize, k: usize) -> usize {
    m.div_ceil(2 * T) * 2 * T * act_stride(k) + 64 / std::mem::size_of::<u16>()
}

/// Row stride of the bf16 activations: one cache line past k. Rows 4 KiB apart (k = 2048) put
/// all 32 rows of an A tile pair in one L1 set, more than its ways; the padded rows speed up
/// prefill (session 18 in docs/benchmarks-history.md).
fn act_stride(k: usize) -> usize {
    k + 32
}

/// `y[m, n] = x[m, k] @ W^T` for `n` weight rows of scheme `s` repacked in `packed`; `a` holds the
/// activations in bf16 between calls (grown once).
///
/// # Safety
/// `available()` and `supported(s)`; `packed` holds `n.div_ceil(8)` groups of `k` values, `x`
/// `m * k` values, `y` room for `m * n`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm(
    s: QuantScheme,
    packed: &[u8],
    x: &[f32],
    m: usize,
    k: usize,
    n: usize,
    y: OutPtr,
    a: &mut Vec<u16>,
) {
    let gb = group_block_bytes(s).expect("a scheme with a repacked layout") * (k / s.block_size());
    assert!(k.is_multiple_of(2 * T) && x.len() >= m * k && packed.len() >= n.div_ceil(ROWS) * gb);
    let ka = act_stride(k);
    let (row_blocks, block_len) = (m.div_ceil(2 * T), 2 * T * ka);
    let a = aligned_buf(a, row_blocks * block_len).as_mut_ptr() as usize;
    let xs = x.as_ptr() as usize;
    parallel_for(row_blocks, &|rb| {
        for r in 0..2 * T {
            let (i, dst) = (rb * 2 * T + r, (a as *mut u16).add(rb * block_len + r * ka));
            if i < m {
                to_bf16((xs as *const f32).add(i * k), k, dst);
            } else {
                std::ptr::write_bytes(dst, 0, k);
            }
        }
    });
    let band = band_rows(k);
    parallel_for(n.div_ceil(band), &|t| {
        let (j0, j1) = (t * band, ((t + 1) * band).min(n.div_ceil(2 * T) * 2 * T));
        PANELS.with(&PANELS_LOCAL, crate::threads::slot(), |panels, _| {
            let plen = panel_len(k);
            let panels = aligned_buf(panels, band / T * plen);
            for (q, j) in (j0..j1).step_by(T).enumerate() {
                let group = |g: usize| (g < n.div_ceil(ROWS)).then(|| &packed[g * gb..(g + 1) * gb]);
                dequant_panel(s, group(j / ROWS), group(j / ROWS + 1), k, panels[q * plen..].as_mut_ptr());
            }
            configure_tiles();
            let mut edge = Edge([0f32; 4 * T * T]);
            for rb in 0..row_blocks {
                let ab = (a as *const u16).add(rb * block_len);
                let i0 = rb * 2 * T;
                for (q, j) in (j0..j1).step_by(2 * T).enumerate() {
                    let (b0, b1) = (panels[2 * q * plen..].as_ptr(), panels[(2 * q + 1) * plen..].as_ptr());
                    let short = m - i0 <= T;
                    if !short && i0 + 2 * T <= m && j + 2 * T <= n {
                        block(k, (ab, ka), b0, b1, y.at(i0 * n + j), n, (std::ptr::null(), 0));
                    } else {
                        // An edge block: sums into a buffer, the part inside y copied out (16 rows
                        // of tiles where at most 16 are left).
                        if short {
                            block16(k, (ab, ka), b0, b1, edge.0.as_mut_ptr(), 2 * T);
                        } else {
                            block(k, (ab, ka), b0, b1, edge.0.as_mut_ptr(), 2 * T, (std::ptr::null(), 0));
                        }
                        for r in 0..(m - i0).min(2 * T) {
                            let w = (n - j).min(2 * T);
                            std::ptr::copy_nonoverlapping(edge.0.as_ptr().add(r * 2 * T), y.at((i0 + r) * n + j), w);
                        }
                    }
                }
            }
            release_tiles();
        });
    });
}

/// A 32 x 32 f32 block on a cache line (tile stores of whole lines).
#[repr(C, align(64))]
struct Edge([f32; 4 * T * T]);

/// `n` f32 at `src` rounded to bf16 at `dst` (round to nearest even).
#[target_feature(enable = "avx512f,avx512bf16,avx512bw")]
unsafe fn to_bf16(src: *const f32, n: usize, dst: *mut u16) {
    let mut i = 0;
    while i + 32 <= n {
        let v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src.add(i + 16)), _mm512_loadu_ps(src.add(i)));
        _mm512_storeu_si512(dst.add(i) as *mut __m512i, std::mem::transmute::<__m512bh, __m512i>(v));
        i += 32;
    }
    for j in i..n {
        *dst.add(j) = ::half::bf16::from_f32(*src.add(j)).to_bits();
    }
}

/// One 16-row pair panel of all `k` values from two eight-row groups (`lo` rows 0-7, `hi` rows
/// 8-15; None: rows past the weights, zero).
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,f16c")]
unsafe fn dequant_panel(s: QuantScheme, lo: Option<&[u8]>, hi: Option<&[u8]>, k: usize, out: *mut u16) {
    static ZERO: [u8; 2048] = [0; 2048];
    let bgb = group_block_bytes(s).expect("a scheme with a repacked layout");
    let bs = s.block_size();
    for b in 0..k / bs {
        let at = |g: Option<&[u8]>| g.map_or(ZERO.as_ptr(), |g| g.as_ptr().add(b * bgb));
        let (pa, pb, o) = (at(lo), at(hi), out.add(b * bs * T));
        match s {
            QuantScheme::Q4_K => k4_block::<false>(pa, pb, o),
            QuantScheme::Q5_K => k4_block::<true>(pa, pb, o),
            QuantScheme::Q6_K => q6k_block(pa, pb, o),
            _ => q80_block(pa, pb, o),
        }
    }
}

/// The 32 bytes at `a` (rows 0-7) and at `b` (rows 8-15) as one vector: lane `4r + i`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn rows16(a: *const u8, b: *const u8) -> __m512i {
    let lo = _mm512_castsi256_si512(_mm256_loadu_si256(a as *const __m256i));
    _mm512_inserti64x4::<1>(lo, _mm256_loadu_si256(b as *const __m256i))
}

/// Per-row factors of 16 rows spread to the four vectors of `emit4` (lane `4r' + i` of vector t:
/// row `4t + r'`).
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn spread(v: __m512) -> [__m512; 4] {
    std::array::from_fn(|t| {
        let base = 4 * t as i32;
        let idx = _mm512_set_epi32(
            base + 3,
            base + 3,
            base + 3,
            base + 3,
            base + 2,
            base + 2,
            base + 2,
            base + 2,
            base + 1,
            base + 1,
            base + 1,
            base + 1,
            base,
            base,
            base,
            base,
        );
        _mm512_permutexvar_ps(idx, v)
    })
}

/// Four values of 16 rows (`q`: lane `4r + i`, u8, or i8 with `SIGNED`) as `q * scale + offset`
/// (per row) in bf16: the two pair rows at `out` (values 0-1, then 2-3, of each row).
#[target_feature(enable = "avx512f,avx512bf16,avx512bw")]
#[inline]
unsafe fn emit4<const SIGNED: bool>(q: __m512i, scale: &[__m512; 4], offset: &[__m512; 4], out: *mut u16) {
    let quarter = |t: usize| {
        let b = match t {
            0 => _mm512_extracti32x4_epi32::<0>(q),
            1 => _mm512_extracti32x4_epi32::<1>(q),
            2 => _mm512_extracti32x4_epi32::<2>(q),
            _ => _mm512_extracti32x4_epi32::<3>(q),
        };
        let i = if SIGNED { _mm512_cvtepi8_epi32(b) } else { _mm512_cvtepu8_epi32(b) };
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), scale[t], offset[t])
    };
    let bits = |v: __m512bh| std::mem::transmute::<__m512bh, __m512i>(v);
    let rows0_7 = bits(_mm512_cvtne2ps_pbh(quarter(1), quarter(0)));
    let rows8_15 = bits(_mm512_cvtne2ps_pbh(quarter(3), quarter(2)));
    // Pair row h: (row c, value 2h + e) from lane 4c + 2h + e of rows 0-7 (c < 8) or 8-15.
    let pick = |h: i16| {
        let idx: [i16; 32] = std::array::from_fn(|l| {
            let (c, e) = ((l / 2) as i16, (l % 2) as i16);
            if c < 8 { 4 * c + 2 * h + e } else { 32 + 4 * (c - 8) + 2 * h + e }
        });
        _mm512_loadu_si512(idx.as_ptr() as *const __m512i)
    };
    _mm512_storeu_si512(out as *mut __m512i, _mm512_permutex2var_epi16(rows0_7, pick(0), rows8_15));
    _mm512_storeu_si512(out.add(2 * T) as *mut __m512i, _mm512_permutex2var_epi16(rows0_7, pick(1), rows8_15));
}

/// The f16 at byte `at` of each of 16 rows (`a` rows 0-7, `b` rows 8-15, 2 bytes apart).
#[target_feature(enable = "avx512f,f16c")]
#[inline]
unsafe fn halves16(a: *const u8, b: *const u8, at: usize) -> __m512 {
    let lo = _mm_loadu_si128(a.add(at) as *const __m128i);
    _mm512_cvtph_ps(_mm256_set_m128i(_mm_loadu_si128(b.add(at) as *const __m128i), lo))
}

/// The u8 at byte `at + r` of each of 16 rows, as f32.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn bytes16(a: *const u8, b: *const u8, at: usize) -> __m512 {
    let (lo, hi) = ((a.add(at) as *const i64).read_unaligned(), (b.add(at) as *const i64).read_unaligned());
    _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_set_epi64x(hi, lo)))
}

/// Byte `at + 2r + ODD` of each of 16 rows (u8, or i8 with `SIGNED`), as f32.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn every_other16<const ODD: bool, const SIGNED: bool>(a: *const u8, b: *const u8, at: usize) -> __m512 {
    let lo = _mm_loadu_si128(a.add(at) as *const __m128i);
    let w = _mm512_cvtepu16_epi32(_mm256_set_m128i(_mm_loadu_si128(b.add(at) as *const __m128i), lo));
    // The wanted byte moved to the top of each 32-bit lane, then shifted down (with its sign).
    let top = if ODD { _mm512_slli_epi32::<16>(w) } else { _mm512_slli_epi32::<24>(w) };
    let v = if SIGNED { _mm512_srai_epi32::<24>(top) } else { _mm512_srli_epi32::<24>(top) };
    _mm512_cvtepi32_ps(v)
}

/// One Q4_K (Q5_K with `Q5`) block of 16 rows into 128 pair rows: value `64c + 32h + 4g + i` of
/// row r is nibble h of `qs[c][g][r][i]` (plus bit `2c + h` of `qh[g][r][i]` times 16 for Q5_K),
/// times `d * sc[j]` minus `dmin * min[j]`, j = 2c + h.
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,f16c")]
unsafe fn k4_block<const Q5: bool>(a: *const u8, b: *const u8, out: *mut u16) {
    let (d, dmin) = (halves16(a, b, 0), halves16(a, b, 16));
    let qs = if Q5 { Q5K_QS } else { 160 };
    let m4 = _mm512_set1_epi8(0xF);
    for c in 0..4 {
        // Sub-blocks 2c and 2c + 1: scales `d * sc[j]`, offsets `-dmin * min[j]` (the minima of
        // j = 2c, 2c + 1 alternate in one run of bytes).
        let scale = |j: usize| spread(_mm512_mul_ps(d, bytes16(a, b, 32 + 8 * j)));
        let (s0, s1) = (scale(2 * c), scale(2 * c + 1));
        let neg = |v: __m512| spread(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(dmin, v)));
        let (o0, o1) = (
            neg(every_other16::<false, false>(a, b, 96 + 16 * c)),
            neg(every_other16::<true, false>(a, b, 96 + 16 * c)),
        );
        for g in 0..8 {
            let q = rows16(a.add(qs + 256 * c + 32 * g), b.add(qs + 256 * c + 32 * g));
            let (mut lo, mut hi) = (_mm512_and_si512(q, m4), _mm512_and_si512(_mm512_srli_epi16::<4>(q), m4));
            if Q5 {
                let qh = rows16(a.add(Q5K_QH + 32 * g), b.add(Q5K_QH + 32 * g));
                let one = _mm512_set1_epi8(1);
                let bit = |j: usize| {
                    let v = _mm512_and_si512(_mm512_srl_epi16(qh, _mm_cvtsi32_si128(j as i32)), one);
                    _mm512_slli_epi16::<4>(v)
                };
                lo = _mm512_or_si512(lo, bit(2 * c));
                hi = _mm512_or_si512(hi, bit(2 * c + 1));
            }
            // Values 64c + 4g .. (sub-block 2c), then 64c + 32 + 4g .. (2c + 1): pair rows v / 2.
            emit4::<false>(lo, &s0, &o0, out.add((32 * c + 2 * g) * 2 * T));
            emit4::<false>(hi, &s1, &o1, out.add((32 * c + 16 + 2 * g) * 2 * T));
        }
    }
}

/// One Q6_K block of 16 rows: value `16g + 4i + t` of row r is nibble `i % 2` of
/// `quad[g][32 (i / 2) + 4r + t]` plus bits `2i..2i + 1` of `quad[g][64 + 4r + t]` times 16,
/// minus 32, times `d * sc[g]`.
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,f16c")]
unsafe fn q6k_block(a: *const u8, b: *const u8, out: *mut u16) {
    let d = halves16(a, b, Q6K_D);
    let (m4, m2) = (_mm512_set1_epi8(0xF), _mm512_set1_epi8(3));
    for g in 0..16 {
        // `d * sc[g]` (the i8 scales of g = 2h, 2h + 1 alternate in one run of bytes), and -32 times it.
        let at = Q6K_SC + 16 * (g / 2);
        let sc =
            if g % 2 == 0 { every_other16::<false, true>(a, b, at) } else { every_other16::<true, true>(a, b, at) };
        let f = _mm512_mul_ps(d, sc);
        let (scale, offset) = (spread(f), spread(_mm512_mul_ps(f, _mm512_set1_ps(-32.0))));
        let quad = |at: usize| rows16(a.add(Q6K_QS + 96 * g + at), b.add(Q6K_QS + 96 * g + at));
        let (q01, q23, qh) = (quad(0), quad(32), quad(64));
        for i in 0..4 {
            let low = if i < 2 { q01 } else { q23 };
            let low =
                if i % 2 == 0 { _mm512_and_si512(low, m4) } else { _mm512_and_si512(_mm512_srli_epi16::<4>(low), m4) };
            let high = _mm512_and_si512(_mm512_srl_epi16(qh, _mm_cvtsi32_si128(2 * i as i32)), m2);
            let q = _mm512_or_si512(low, _mm512_slli_epi16::<4>(high));
            emit4::<false>(q, &scale, &offset, out.add((8 * g + 2 * i) * 2 * T));
        }
    }
}

/// One Q8_0 block (32 values) of 16 rows: value `4g + i` of row r is `qs[g][r][i]` times `d`.
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,f16c")]
unsafe fn q80_block(a: *const u8, b: *const u8, out: *mut u16) {
    let scale = spread(halves16(a, b, 0));
    let zero = [_mm512_setzero_ps(); 4];
    for g in 0..8 {
        let q = rows16(a.add(16 + 32 * g), b.add(16 + 32 * g));
        emit4::<true>(q, &scale, &zero, out.add(2 * g * 2 * T));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every scheme through the AMX path against the dequantized rows times the bf16-rounded
    /// activations (f64 sums), over edge shapes (m and n off the 32 x 32 blocks).
    #[test]
    fn amx_prefill_matches_dequantized_rows() {
        if !available() {
            eprintln!("skipped: no AMX-BF16 here");
            return;
        }
        for s in [QuantScheme::Q4_K, QuantScheme::Q5_K, QuantScheme::Q6_K, QuantScheme::Q8_0] {
            for (m, n, k) in
                [(16, 32, 256), (45, 70, 512), (33, 8, 256), (64, 300, 1024), (32, 160, 4096), (128, 288, 4096)]
            {
                check(s, m, n, k);
            }
        }
    }

    fn check(s: QuantScheme, m: usize, n: usize, k: usize) {
        let wf: Vec<f32> =
            (0..n * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0 * (1.0 + (i / k) as f32 / 8.0)).collect();
        let w = s.quantize_rows(&wf, k).unwrap();
        let mut deq = vec![0f32; n * k];
        s.dequantize_rows(&w, k, &mut deq).unwrap();
        let gb = group_block_bytes(s).unwrap() * (k / s.block_size());
        let mut packed = vec![0u8; n.div_ceil(ROWS) * gb];
        super::super::repack::repack(s, &w, n, k, &mut packed);
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 13 % 29) as f32 - 14.0) / 9.0).collect();
        let mut y = vec![f32::NAN; m * n];
        let mut a = Vec::new();
        unsafe { gemm(s, &packed, &x, m, k, n, OutPtr(y.as_mut_ptr()), &mut a) };
        for i in 0..m {
            for j in 0..n {
                let bf = |v: f32| ::half::bf16::from_f32(v).to_f64();
                let want: f64 = (0..k).map(|p| bf(x[i * k + p]) * bf(deq[j * k + p])).sum();
                let scale: f64 = (0..k).map(|p| (x[i * k + p] as f64 * deq[j * k + p] as f64).abs()).sum();
                let got = y[i * n + j] as f64;
                assert!(
                    (got - want).abs() <= 1e-4 * scale + 1e-6,
                    "{s} {m}x{n}x{k} at ({i}, {j}): {got} against {want}"
                );
            }
        }
    }
}
