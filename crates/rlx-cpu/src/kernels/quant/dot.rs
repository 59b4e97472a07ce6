//! Activation blocks quantized to 8 bits, and the portable (scalar) row dot products. The SIMD
//! paths (`x86.rs`) compute the same integer sums, and every path combines them in floats the same
//! way, so all paths give bit-identical results.

use half::f16;

/// 256 activations quantized to i8 with one scale (ggml's `block_q8_K`), with sums per 16.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub struct Q8K {
    /// The values.
    pub qs: [i8; 256],
    /// Sums of each 16 values.
    pub bsums: [i16; 16],
    /// The scale: value = d * q.
    pub d: f32,
}

impl Default for Q8K {
    fn default() -> Self {
        Q8K { qs: [0; 256], bsums: [0; 16], d: 0.0 }
    }
}

/// 32 activations quantized to i8 with one scale (ggml's `block_q8_0`, f32 scale), with their sum.
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
pub struct Q80 {
    /// The values.
    pub qs: [i8; 32],
    /// The scale.
    pub d: f32,
    /// Sum of the values.
    pub sum: i32,
}

/// Quantizes `x` to i8 `qs` with one scale (AVX2 when the CPU has it, bit for bit the same).
fn quantize_block(x: &[f32], qs: &mut [i8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if x.len().is_multiple_of(32) && std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2; callers pass equal lengths.
        return unsafe { super::x86::quantize_block_avx2(x, qs) };
    }
    quantize_block_scalar(x, qs)
}

/// `quantize_block` in portable Rust.
pub fn quantize_block_scalar(x: &[f32], qs: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 {
        qs.fill(0);
        return 0.0;
    }
    let iscale = 127.0 / amax;
    for (q, v) in qs.iter_mut().zip(x) {
        *q = (v * iscale).round().clamp(-127.0, 127.0) as i8;
    }
    amax / 127.0
}

/// Quantizes one row of activations to Q8_K blocks.
pub fn quantize_q8k(x: &[f32], out: &mut [Q8K]) {
    for (b, xs) in out.iter_mut().zip(x.chunks_exact(256)) {
        b.d = quantize_block(xs, &mut b.qs);
        for (s, q) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
            *s = q.iter().map(|&v| v as i16).sum();
        }
    }
}

/// Quantizes one row of activations to Q8_0 blocks. The scale is rounded to f16, as ggml
/// stores it, so dot products match llama.cpp's.
pub fn quantize_q80(x: &[f32], out: &mut [Q80]) {
    for (b, xs) in out.iter_mut().zip(x.chunks_exact(32)) {
        b.d = f16::from_f32(quantize_block(xs, &mut b.qs)).to_f32();
        b.sum = b.qs.iter().map(|&v| v as i32).sum();
    }
}

/// The f16 at byte `at`.
#[inline(always)]
pub fn half_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// The eight 6-bit (scale, min) pairs of a Q4_K / Q5_K block (ggml's 32-bit unpacking).
#[inline(always)]
pub fn scales_mins_k4(q: &[u8]) -> ([u8; 8], [u8; 8]) {
    const K1: u32 = 0x3f3f_3f3f;
    const K2: u32 = 0x0f0f_0f0f;
    const K3: u32 = 0x0303_0303;
    let u = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let (u0, u1, u2) = (u(0), u(1), u(2));
    let sc = [u0 & K1, (u2 & K2) | (((u0 >> 6) & K3) << 4)];
    let m = [u1 & K1, ((u2 >> 4) & K2) | (((u1 >> 6) & K3) << 4)];
    let b = |v: [u32; 2]| {
        let (a, c) = (v[0].to_le_bytes(), v[1].to_le_bytes());
        [a[0], a[1], a[2], a[3], c[0], c[1], c[2], c[3]]
    };
    (b(sc), b(m))
}

/// The minima term of a Q4_K / Q5_K block: sum over sub-blocks of min * (sum of activations).
#[inline(always)]
pub fn min_sum(m: &[u8; 8], a: &Q8K) -> i32 {
    (0..8).map(|j| m[j] as i32 * (a.bsums[2 * j] as i32 + a.bsums[2 * j + 1] as i32)).sum()
}

/// Adds one K-quant block's contribution (shared by every path, so results match bit for bit).
#[inline(always)]
pub fn combine_k(acc: f32, a_d: f32, d: f32, dmin: f32, isum: i32, msum: i32) -> f32 {
    acc + (a_d * d) * isum as f32 - (a_d * dmin) * msum as f32
}

/// Q4_K row . Q8_K activations.
pub fn q4k(w: &[u8], a: &[Q8K]) -> f32 {
    let mut acc = 0f32;
    for (b, a) in w.chunks_exact(144).zip(a) {
        let (sc, m) = scales_mins_k4(&b[4..16]);
        let qs = &b[16..144];
        let mut isum = 0i32;
        for (sub, &scale) in sc.iter().enumerate() {
            let (chunk, shift) = (sub / 2, 4 * (sub % 2));
            let dot: i32 =
                (0..32).map(|l| ((qs[chunk * 32 + l] >> shift) & 0xF) as i32 * a.qs[sub * 32 + l] as i32).sum();
            isum += scale as i32 * dot;
        }
        acc = combine_k(acc, a.d, half_at(b, 0), half_at(b, 2), isum, min_sum(&m, a));
    }
    acc
}

/// Q5_K row . Q8_K activations.
pub fn q5k(w: &[u8], a: &[Q8K]) -> f32 {
    let mut acc = 0f32;
    for (b, a) in w.chunks_exact(176).zip(a) {
        let (sc, m) = scales_mins_k4(&b[4..16]);
        let (qh, qs) = (&b[16..48], &b[48..176]);
        let mut isum = 0i32;
        for (sub, &scale) in sc.iter().enumerate() {
            let (chunk, shift) = (sub / 2, 4 * (sub % 2));
            let dot: i32 = (0..32)
                .map(|l| {
                    let q = ((qs[chunk * 32 + l] >> shift) & 0xF) | (((qh[l] >> sub) & 1) << 4);
                    q as i32 * a.qs[sub * 32 + l] as i32
                })
                .sum();
            isum += scale as i32 * dot;
        }
        acc = combine_k(acc, a.d, half_at(b, 0), half_at(b, 2), isum, min_sum(&m, a));
    }
    acc
}

/// The offset term of a Q6_K block: 32 * sum over groups of 16 of scale * (sum of activations).
#[inline(always)]
pub fn q6k_offset(scales: &[u8], a: &Q8K) -> i32 {
    32 * (0..16).map(|g| scales[g] as i8 as i32 * a.bsums[g] as i32).sum::<i32>()
}

/// Q6_K row . Q8_K activations.
pub fn q6k(w: &[u8], a: &[Q8K]) -> f32 {
    let mut acc = 0f32;
    for (b, a) in w.chunks_exact(210).zip(a) {
        let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
        let mut isum = 0i32;
        for (g, &scale) in scales.iter().enumerate() {
            let dot: i32 = (g * 16..g * 16 + 16)
                .map(|e| {
                    let (h, r) = (e / 128, e % 128);
                    let low = (ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
                    let high = (qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
                    (low | (high << 4)) as i32 * a.qs[e] as i32
                })
                .sum();
            isum += scale as i8 as i32 * dot;
        }
        acc = combine_k(acc, a.d, half_at(b, 208), 0.0, isum - q6k_offset(scales, a), 0);
    }
    acc
}

/// Adds one 32-block's contribution (shared by every path).
#[inline(always)]
pub fn combine_0(acc: f32, a_d: f32, d: f32, isum: i32) -> f32 {
    acc + (a_d * d) * isum as f32
}

/// Q8_0 row . Q8_0 activations.
pub fn q8_0(w: &[u8], a: &[Q80]) -> f32 {
    let mut acc = 0f32;
    for (b, a) in w.chunks_exact(34).zip(a) {
        let isum: i32 = (0..32).map(|l| b[2 + l] as i8 as i32 * a.qs[l] as i32).sum();
        acc = combine_0(acc, a.d, half_at(b, 0), isum);
    }
    acc
}

/// Q4_0 row . Q8_0 activations.
pub fn q4_0(w: &[u8], a: &[Q80]) -> f32 {
    let mut acc = 0f32;
    for (b, a) in w.chunks_exact(18).zip(a) {
        let qs = &b[2..18];
        let dot: i32 =
            (0..16).map(|l| (qs[l] & 0xF) as i32 * a.qs[l] as i32 + (qs[l] >> 4) as i32 * a.qs[l + 16] as i32).sum();
        acc = combine_0(acc, a.d, half_at(b, 0), dot - 8 * a.sum);
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn simd_activation_quantization_matches_the_portable_one() {
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        let mut x: Vec<f32> =
            rlx_ir::ops::util::rand_f64(256 * 8, -3.0, 3.0, 5).into_iter().map(|v| v as f32).collect();
        // Exact halves (ties round away from zero), NaN, infinities, zeros, tiny values.
        x[0] = 127.0;
        for (i, v) in x[1..64].iter_mut().enumerate() {
            *v = (i as f32 - 31.0) * 0.5;
        }
        x[300] = f32::NAN;
        x[600] = f32::INFINITY;
        x[1024..1280].fill(0.0);
        x[1300..1556].iter_mut().for_each(|v| *v *= 1e-30);
        for (b, c) in x.chunks_exact(256).enumerate() {
            let (mut q0, mut q1) = ([0i8; 256], [0i8; 256]);
            let d0 = quantize_block_scalar(c, &mut q0);
            // SAFETY: the CPU has AVX2.
            let d1 = unsafe { super::super::x86::quantize_block_avx2(c, &mut q1) };
            assert_eq!(d0.to_bits(), d1.to_bits(), "block {b}");
            assert_eq!(q0, q1, "block {b}");
        }
    }

    #[test]
    fn packed_scale_unpacking_matches_the_definition() {
        let mut seed = 12345u32;
        for _ in 0..1000 {
            let q: Vec<u8> = (0..12)
                .map(|_| {
                    seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
                    (seed >> 24) as u8
                })
                .collect();
            let (sc, m) = scales_mins_k4(&q);
            for j in 0..8 {
                let want = if j < 4 {
                    (q[j] & 63, q[j + 4] & 63)
                } else {
                    ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
                };
                assert_eq!((sc[j], m[j]), want, "{q:?} sub-block {j}");
            }
        }
    }
}
