//! K-quant and Q8_0 weights repacked once per param version (`packed.rs` shares the copy;
//! decode here and in `x8.rs`, prefill in `x8gemm.rs` / `x8q80.rs`): groups of eight rows
//! interleaved block by block, so one pass streams one contiguous buffer, each activation load
//! serves eight rows, and the 6-bit scales come unpacked to bytes. Each row's integer sums and
//! float steps are those of `dot.rs`, so results match the row path bit for bit.
//!
//! Q4_K group block (1184 bytes, 8 x 144 + 32): `d[8]`, `dmin[8]` (f16), `sc[j][r]` (u8),
//! `min[j / 2][r][j % 2]` (u8), then `qs[c][g][r][i]` = byte `32c + 4g + i` of row r's values.
//! Q5_K group block (1440 bytes, 8 x 176 + 32): as Q4_K with `qh[g][r][i]` = byte `4g + i` of
//! row r's high bits between the minima and the values.
//! Q6_K group block (1696 bytes, 8 x 210 + 16 of padding, so loads stay 32-byte aligned): `d[8]`
//! (f16), `sc[g / 2][r][g % 2]` (i8), padding, then 16 quads of 96 bytes (one per 16-value group:
//! low nibbles of values 0-3 | 4-7 << 4, of 8-11 | 12-15 << 4, the four 2-bit highs). Scales come
//! first in both layouts: read before the values, they must not wait on the prefetcher. Q8_0:
//! see `x8q80.rs` (32-value blocks).

use super::dot::{Q8K, scales_mins_k4};
#[cfg(target_arch = "x86_64")]
use super::x8;
use super::{Isa, OutPtr};
use crate::threads::parallel_for;
use rlx_ir::QuantScheme;

/// Rows per interleaved group.
pub const ROWS: usize = 8;
/// Bytes of one Q4_K block of one group.
pub const Q4K_GB: usize = 1184;
/// Bytes of one Q6_K block of one group.
pub const Q6K_GB: usize = 1696;
/// Bytes of one Q5_K block of one group, and where its high bits and values start.
pub const Q5K_GB: usize = 1440;
pub const Q5K_QH: usize = 160;
pub const Q5K_QS: usize = 416;
/// Q6_K: where the block scales, the 16-value scales and the values start.
pub const Q6K_D: usize = 0;
pub const Q6K_SC: usize = 16;
pub const Q6K_QS: usize = 160;
/// Tasks per thread of the threaded matvec: each task streams one contiguous run of groups
/// (long runs suit the prefetcher), a few per thread to even out a preempted thread.
const TASKS_PER_THREAD: usize = 4;

/// Bytes of one block of one group of `s`, or None when `s` has no repacked layout.
pub fn group_block_bytes(s: QuantScheme) -> Option<usize> {
    match s {
        QuantScheme::Q4_K => Some(Q4K_GB),
        QuantScheme::Q6_K => Some(Q6K_GB),
        QuantScheme::Q5_K => Some(Q5K_GB),
        QuantScheme::Q8_0 => Some(super::x8q80::Q80_GB),
        _ => None,
    }
}

/// Repacks `n` rows of `k` values of `s` into `out` (`group_block_bytes` per group and block);
/// rows past `n` in the last group are zero (scale 0: they add nothing).
pub fn repack(s: QuantScheme, w: &[u8], n: usize, k: usize, out: &mut [u8]) {
    let (nb, bb) = (k / s.block_size(), s.block_bytes());
    let gb = group_block_bytes(s).expect("a scheme with a repacked layout");
    let groups = n.div_ceil(ROWS);
    assert!(w.len() >= n * nb * bb && out.len() >= groups * nb * gb, "repack: buffer sizes");
    let dst = BytePtr(out.as_mut_ptr());
    parallel_for(groups, &|gi| {
        // SAFETY: group gi's bytes lie inside `out` (asserted) and belong to this task only.
        let o = unsafe { std::slice::from_raw_parts_mut(dst.at(gi * nb * gb), nb * gb) };
        // Rows past n and the padding stay zero, also when a new version overwrites a copy.
        o.fill(0);
        for r in 0..ROWS.min(n - gi * ROWS) {
            let row = &w[(gi * ROWS + r) * nb * bb..(gi * ROWS + r + 1) * nb * bb];
            for (b, blk) in row.chunks_exact(bb).enumerate() {
                let ob = &mut o[b * gb..(b + 1) * gb];
                if s == QuantScheme::Q4_K {
                    put_q4k(blk, r, ob);
                } else if s == QuantScheme::Q5_K {
                    put_q5k(blk, r, ob);
                } else if s == QuantScheme::Q8_0 {
                    ob[2 * r..2 * r + 2].copy_from_slice(&blk[0..2]);
                    for g in 0..8 {
                        ob[16 + 32 * g + 4 * r..16 + 32 * g + 4 * r + 4].copy_from_slice(&blk[2 + 4 * g..6 + 4 * g]);
                    }
                } else {
                    put_q6k(blk, r, ob);
                }
            }
        }
    });
}

/// The repacked buffer, shared by tasks that write disjoint groups.
#[derive(Clone, Copy)]
struct BytePtr(*mut u8);
// SAFETY: every task writes its own group's bytes, and `parallel_for` joins before return.
unsafe impl Send for BytePtr {}
unsafe impl Sync for BytePtr {}

impl BytePtr {
    /// Byte `i` (a method, so closures capture the whole `Sync` wrapper).
    fn at(self, i: usize) -> *mut u8 {
        self.0.wrapping_add(i)
    }
}

/// The little-endian u32 at byte `at`.
#[inline(always)]
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Row `r`'s d, dmin, scales and mins of a Q4_K or Q5_K group block (the same 16-byte block
/// header and group layout in both).
fn put_k4_header(blk: &[u8], r: usize, o: &mut [u8]) {
    o[2 * r..2 * r + 2].copy_from_slice(&blk[0..2]);
    o[16 + 2 * r..16 + 2 * r + 2].copy_from_slice(&blk[2..4]);
    let (sc, m) = scales_mins_k4(&blk[4..16]);
    for j in 0..8 {
        o[32 + 8 * j + r] = sc[j];
        o[96 + 16 * (j / 2) + 2 * r + j % 2] = m[j];
    }
}

/// Row `r` of a Q4_K group block from one 144-byte block.
fn put_q4k(blk: &[u8], r: usize, o: &mut [u8]) {
    put_k4_header(blk, r, o);
    for c in 0..4 {
        for g in 0..8 {
            let at = 160 + 256 * c + 32 * g + 4 * r;
            o[at..at + 4].copy_from_slice(&blk[16 + 32 * c + 4 * g..16 + 32 * c + 4 * g + 4]);
        }
    }
}

/// Row `r` of a Q5_K group block from one 176-byte block.
fn put_q5k(blk: &[u8], r: usize, o: &mut [u8]) {
    put_k4_header(blk, r, o);
    for g in 0..8 {
        let at = Q5K_QH + 32 * g + 4 * r;
        o[at..at + 4].copy_from_slice(&blk[16 + 4 * g..16 + 4 * g + 4]);
        for c in 0..4 {
            let at = Q5K_QS + 256 * c + 32 * g + 4 * r;
            o[at..at + 4].copy_from_slice(&blk[48 + 32 * c + 4 * g..48 + 32 * c + 4 * g + 4]);
        }
    }
}

/// The 256 values (0..63, before the -32 offset) of a 210-byte Q6_K block, in order.
pub fn q6_values(blk: &[u8]) -> [u8; 256] {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { q6_values_avx2(blk) };
    }
    q6_values_scalar(blk)
}

/// `q6_values` with AVX2 (32 values per step, the same bit operations).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn q6_values_avx2(blk: &[u8]) -> [u8; 256] {
    use std::arch::x86_64::*;
    assert!(blk.len() >= 192);
    let mut v = [0u8; 256];
    let (m4, m2) = (_mm256_set1_epi8(0xF), _mm256_set1_epi8(3));
    let hb = |x: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(x, m2));
    let nib = |x: __m256i| _mm256_and_si256(x, m4);
    for h in 0..2 {
        // SAFETY: 32 bytes at 64h, 64h + 32 and 128 + 32h < 192 (asserted); stores inside `v`.
        unsafe {
            let ld = |at: usize| _mm256_loadu_si256(blk.as_ptr().add(at) as *const __m256i);
            let (ql0, ql1, qh) = (ld(64 * h), ld(64 * h + 32), ld(128 + 32 * h));
            let out = [
                _mm256_or_si256(nib(ql0), hb(qh)),
                _mm256_or_si256(nib(ql1), hb(_mm256_srli_epi16::<2>(qh))),
                _mm256_or_si256(nib(_mm256_srli_epi16::<4>(ql0)), hb(_mm256_srli_epi16::<4>(qh))),
                _mm256_or_si256(nib(_mm256_srli_epi16::<4>(ql1)), hb(_mm256_srli_epi16::<6>(qh))),
            ];
            for (i, o) in out.into_iter().enumerate() {
                _mm256_storeu_si256(v.as_mut_ptr().add(128 * h + 32 * i) as *mut __m256i, o);
            }
        }
    }
    v
}

/// `q6_values` in portable Rust.
pub fn q6_values_scalar(blk: &[u8]) -> [u8; 256] {
    let mut v = [0u8; 256];
    for h in 0..2 {
        for l in 0..32 {
            let (ql0, ql1, qh) = (blk[64 * h + l], blk[64 * h + 32 + l], blk[128 + 32 * h + l]);
            v[128 * h + l] = (ql0 & 0xF) | ((qh & 3) << 4);
            v[128 * h + 32 + l] = (ql1 & 0xF) | (((qh >> 2) & 3) << 4);
            v[128 * h + 64 + l] = (ql0 >> 4) | (((qh >> 4) & 3) << 4);
            v[128 * h + 96 + l] = (ql1 >> 4) | (((qh >> 6) & 3) << 4);
        }
    }
    v
}

/// Row `r` of a Q6_K group block from one 210-byte block: four values per u32 step.
fn put_q6k(blk: &[u8], r: usize, o: &mut [u8]) {
    const LO: u32 = 0x0f0f_0f0f;
    const HI: u32 = 0x0303_0303;
    let vals = q6_values(blk);
    for g in 0..16 {
        let w: [u32; 4] = std::array::from_fn(|i| u32_at(&vals, 16 * g + 4 * i));
        let a = (w[0] & LO) | ((w[1] & LO) << 4);
        let b = (w[2] & LO) | ((w[3] & LO) << 4);
        let h = ((w[0] >> 4) & HI) | (((w[1] >> 4) & HI) << 2) | (((w[2] >> 4) & HI) << 4) | (((w[3] >> 4) & HI) << 6);
        let at = Q6K_QS + 96 * g + 4 * r;
        o[at..at + 4].copy_from_slice(&a.to_le_bytes());
        o[at + 32..at + 36].copy_from_slice(&b.to_le_bytes());
        o[at + 64..at + 68].copy_from_slice(&h.to_le_bytes());
        o[Q6K_SC + 16 * (g / 2) + 2 * r + g % 2] = blk[192 + g];
    }
    o[Q6K_D + 2 * r..Q6K_D + 2 * r + 2].copy_from_slice(&blk[208..210]);
}

/// Q4_K activations: per block, the sums of each 32 values in pairs `(j = 2p, 2p + 1)` as i16
/// halves of one i32, for the minima term.
pub fn pair_sums(a: &[Q8K], out: &mut [[i32; 4]]) {
    for (o, a) in out.iter_mut().zip(a) {
        for (p, o) in o.iter_mut().enumerate() {
            let s = |j: usize| (a.bsums[2 * j] as i32 + a.bsums[2 * j + 1] as i32) as u16 as u32;
            *o = (s(2 * p) | (s(2 * p + 1) << 16)) as i32;
        }
    }
}

/// `pair_sums` for the kernels of `scheme` that read them (Q4_K and Q5_K; Q6_K has no mins).
pub fn pair_sums_for(scheme: QuantScheme, a: &[Q8K], out: &mut [[i32; 4]]) {
    if scheme != QuantScheme::Q6_K {
        pair_sums(a, out);
    }
}

/// `y[j] = row j . act` for all `n` rows from repacked weights, threaded over groups of rows.
#[allow(clippy::too_many_arguments)]
pub fn matvec(isa: Isa, s: QuantScheme, packed: &[u8], act: &[Q8K], ps: &[[i32; 4]], n: usize, k: usize, y: OutPtr) {
    let gb = group_block_bytes(s).expect("a scheme with a repacked layout") * (k / 256);
    let groups = n.div_ceil(ROWS);
    assert!(packed.len() >= groups * gb && act.len() == k / 256 && ps.len() == k / 256);
    let per = groups.div_ceil(crate::threads::num_threads() * TASKS_PER_THREAD).max(4);
    parallel_for(groups.div_ceil(per), &|t| {
        for gi in t * per..((t + 1) * per).min(groups) {
            let w = &packed[gi * gb..(gi + 1) * gb];
            let mut out = [0f32; ROWS];
            group_dot(isa, s, w, act, ps, &mut out);
            for (r, &v) in out.iter().enumerate().take(n - gi * ROWS) {
                // SAFETY: row gi * 8 + r < n, written by this task only.
                unsafe { *y.at(gi * ROWS + r) = v };
            }
        }
    });
}

/// The eight rows of one group against the activations (`ps` feeds the x86 kernels only).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn group_dot(isa: Isa, s: QuantScheme, w: &[u8], act: &[Q8K], ps: &[[i32; 4]], out: &mut [f32; ROWS]) {
    match (isa, s) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::detect` chose this path only when the CPU has the features; `matvec`
        // checked the sizes.
        (Isa::Vnni, QuantScheme::Q4_K) => unsafe { x8::vnni::q4k::<false>(w, act, ps, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        (Isa::Vnni, QuantScheme::Q5_K) => unsafe { x8::vnni::q4k::<true>(w, act, ps, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        (Isa::Vnni, _) => unsafe { x8::vnni::q6k(w, act, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        (Isa::Avx2, QuantScheme::Q4_K) => unsafe { x8::avx2::q4k::<false>(w, act, ps, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        (Isa::Avx2, QuantScheme::Q5_K) => unsafe { x8::avx2::q4k::<true>(w, act, ps, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        (Isa::Avx2, _) => unsafe { x8::avx2::q6k(w, act, out) },
        _ => scalar(s, w, act, out),
    }
}

/// The repacked layout read back value by value (the portable path, and the tests' check of it):
/// row r's integer sums and float steps as `dot::q4k` / `dot::q5k` / `dot::q6k`.
pub fn scalar(s: QuantScheme, w: &[u8], act: &[Q8K], out: &mut [f32; ROWS]) {
    let gb = group_block_bytes(s).expect("a scheme with a repacked layout");
    let h = |b: &[u8], at: usize| super::dot::half_at(b, at);
    for (r, o) in out.iter_mut().enumerate() {
        let mut acc = 0f32;
        for (b, a) in w.chunks_exact(gb).zip(act) {
            if s != QuantScheme::Q6_K {
                let (q5, qs) = (s == QuantScheme::Q5_K, if s == QuantScheme::Q5_K { Q5K_QS } else { 160 });
                let (mut isum, mut msum) = (0i32, 0i32);
                for j in 0..8 {
                    let (c, hi) = (j / 2, j % 2);
                    let dot: i32 = (0..32)
                        .map(|l| {
                            let at = 32 * (l / 4) + 4 * r + l % 4;
                            let high = if q5 { ((b[Q5K_QH + at] >> j) & 1) << 4 } else { 0 };
                            (((b[qs + 256 * c + at] >> (4 * hi)) & 0xF) | high) as i32 * a.qs[32 * j + l] as i32
                        })
                        .sum();
                    isum += b[32 + 8 * j + r] as i32 * dot;
                    let m = b[96 + 16 * (j / 2) + 2 * r + j % 2] as i32;
                    msum += m * (a.bsums[2 * j] as i32 + a.bsums[2 * j + 1] as i32);
                }
                acc = super::dot::combine_k(acc, a.d, h(b, 2 * r), h(b, 16 + 2 * r), isum, msum);
            } else {
                let (mut isum, mut off) = (0i32, 0i32);
                for g in 0..16 {
                    let q = &b[Q6K_QS + 96 * g..Q6K_QS + 96 * (g + 1)];
                    let dot: i32 = (0..16)
                        .map(|e| {
                            let (i, t) = (e / 4, e % 4);
                            let low = (q[32 * (i / 2) + 4 * r + t] >> (4 * (i % 2))) & 0xF;
                            let high = (q[64 + 4 * r + t] >> (2 * i)) & 3;
                            (low | (high << 4)) as i32 * a.qs[16 * g + e] as i32
                        })
                        .sum();
                    let sc = b[Q6K_SC + 16 * (g / 2) + 2 * r + g % 2] as i8 as i32;
                    isum += sc * dot;
                    off += sc * a.bsums[g] as i32;
                }
                acc = super::dot::combine_k(acc, a.d, h(b, Q6K_D + 2 * r), 0.0, isum - 32 * off, 0);
            }
        }
        *o = acc;
    }
}
