//! Decoders of the block layouts, following ggml's reference kernels operation for operation, so
//! results match gguf-py's numpy dequantizer bit for bit.

use half::f16;

use super::{QK_K, QuantScheme};

/// The IQ4_NL / IQ4_XS non-linear code book.
pub const IQ4_NL_VALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// Decodes `data` (whole blocks, already checked against `out`) into `out`.
pub(super) fn blocks(s: QuantScheme, data: &[u8], out: &mut [f32]) {
    let f: fn(&[u8], &mut [f32]) = match s {
        QuantScheme::Q4_0 => q4_0,
        QuantScheme::Q4_1 => q4_1,
        QuantScheme::Q5_0 => q5_0,
        QuantScheme::Q5_1 => q5_1,
        QuantScheme::Q8_0 => q8_0,
        QuantScheme::Q8_1 => q8_1,
        QuantScheme::Q2_K => q2_k,
        QuantScheme::Q3_K => q3_k,
        QuantScheme::Q4_K => q4_k,
        QuantScheme::Q5_K => q5_k,
        QuantScheme::Q6_K => q6_k,
        QuantScheme::Q8_K => q8_k,
        QuantScheme::IQ4_NL => iq4_nl,
        QuantScheme::IQ4_XS => iq4_xs,
    };
    for (block, y) in data.chunks_exact(s.block_bytes()).zip(out.chunks_exact_mut(s.block_size())) {
        f(block, y);
    }
}

fn half(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = half(b, 0);
    for (j, &q) in b[2..18].iter().enumerate() {
        y[j] = d * ((q & 0xF) as i32 - 8) as f32;
        y[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
    }
}

fn q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (half(b, 0), half(b, 2));
    for (j, &q) in b[4..20].iter().enumerate() {
        y[j] = d * (q & 0xF) as f32 + m;
        y[j + 16] = d * (q >> 4) as f32 + m;
    }
}

fn q5_0(b: &[u8], y: &mut [f32]) {
    let d = half(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    for (j, &q) in b[6..22].iter().enumerate() {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        y[j] = d * (((q & 0xF) as u32 | h0) as i32 - 16) as f32;
        y[j + 16] = d * (((q >> 4) as u32 | h1) as i32 - 16) as f32;
    }
}

fn q5_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (half(b, 0), half(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    for (j, &q) in b[8..24].iter().enumerate() {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        y[j] = d * ((q & 0xF) as u32 | h0) as f32 + m;
        y[j + 16] = d * ((q >> 4) as u32 | h1) as f32 + m;
    }
}

fn q8_0(b: &[u8], y: &mut [f32]) {
    let d = half(b, 0);
    for (j, &q) in b[2..34].iter().enumerate() {
        y[j] = (q as i8) as f32 * d;
    }
}

fn q8_1(b: &[u8], y: &mut [f32]) {
    // Layout: d (f16), s = d * sum(q) (f16, unused here), 32 x i8.
    let d = half(b, 0);
    for (j, &q) in b[4..36].iter().enumerate() {
        y[j] = (q as i8) as f32 * d;
    }
}

fn q2_k(b: &[u8], y: &mut [f32]) {
    // Layout: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin.
    let (scales, qs) = (&b[0..16], &b[16..80]);
    let (d, dmin) = (half(b, 80), half(b, 82));
    for e in 0..QK_K {
        let (h, s, l) = (e / 128, (e / 32) % 4, e % 32);
        let q = (qs[h * 32 + l] >> (2 * s)) & 3;
        let sc = scales[e / 16];
        let dl = d * (sc & 0xF) as f32;
        let ml = dmin * (sc >> 4) as f32;
        y[e] = dl * q as f32 - ml;
    }
}

fn q3_k(b: &[u8], y: &mut [f32]) {
    // Layout: hmask[32], qs[64], scales[12] (16 six-bit scales), d.
    let (hmask, qs, sc) = (&b[0..32], &b[32..96], &b[96..108]);
    let d = half(b, 108);
    let mut scale = [0f32; 16];
    for (i, s) in scale.iter_mut().enumerate() {
        let low = (sc[i % 8] >> (4 * (i / 8))) & 0xF;
        let high = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
        *s = d * ((low | (high << 4)) as i8 - 32) as f32;
    }
    for e in 0..QK_K {
        let (h, s, l) = (e / 128, (e / 32) % 4, e % 32);
        let low = ((qs[h * 32 + l] >> (2 * s)) & 3) as i8;
        let high_set = (hmask[e % 32] >> (e / 32)) & 1 == 1;
        let q = low - if high_set { 0 } else { 4 };
        y[e] = scale[e / 16] * q as f32;
    }
}

/// Unpacks the eight 6-bit (scale, min) pairs of Q4_K / Q5_K.
pub(super) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

fn q4_k(b: &[u8], y: &mut [f32]) {
    // Layout: d, dmin, scales[12], qs[128].
    let (d, dmin) = (half(b, 0), half(b, 2));
    let (scales, qs) = (&b[4..16], &b[16..144]);
    for sub in 0..8 {
        let (sc, m) = scale_min_k4(sub, scales);
        let (d1, m1) = (d * sc as f32, dmin * m as f32);
        let (chunk, shift) = (sub / 2, 4 * (sub % 2));
        for l in 0..32 {
            let q = (qs[chunk * 32 + l] >> shift) & 0xF;
            y[sub * 32 + l] = d1 * q as f32 - m1;
        }
    }
}

fn q5_k(b: &[u8], y: &mut [f32]) {
    // Layout: d, dmin, scales[12], qh[32], qs[128].
    let (d, dmin) = (half(b, 0), half(b, 2));
    let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
    for sub in 0..8 {
        let (sc, m) = scale_min_k4(sub, scales);
        let (d1, m1) = (d * sc as f32, dmin * m as f32);
        let (chunk, shift) = (sub / 2, 4 * (sub % 2));
        for l in 0..32 {
            let low = (qs[chunk * 32 + l] >> shift) & 0xF;
            let high = (qh[l] >> sub) & 1;
            y[sub * 32 + l] = d1 * (low | (high << 4)) as f32 - m1;
        }
    }
}

fn q6_k(b: &[u8], y: &mut [f32]) {
    // Layout: ql[128], qh[64], scales[16] (i8), d.
    let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = half(b, 208);
    for e in 0..QK_K {
        let (h, r) = (e / 128, e % 128);
        let low = (ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
        let high = (qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
        let q = (low | (high << 4)) as i8 - 32;
        y[e] = (d * (scales[e / 16] as i8) as f32) * q as f32;
    }
}

fn q8_k(b: &[u8], y: &mut [f32]) {
    // Layout: d (f32), qs[256] (i8), bsums[16] (i16, unused here).
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (j, &q) in b[4..260].iter().enumerate() {
        y[j] = d * (q as i8) as f32;
    }
}

fn iq4_nl(b: &[u8], y: &mut [f32]) {
    let d = half(b, 0);
    for (j, &q) in b[2..18].iter().enumerate() {
        y[j] = d * IQ4_NL_VALUES[(q & 0xF) as usize] as f32;
        y[j + 16] = d * IQ4_NL_VALUES[(q >> 4) as usize] as f32;
    }
}

fn iq4_xs(b: &[u8], y: &mut [f32]) {
    // Layout: d, scales_h (u16), scales_l[4], qs[128].
    let d = half(b, 0);
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    let (scales_l, qs) = (&b[4..8], &b[8..136]);
    for ib in 0..8 {
        let low = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
        let high = ((scales_h >> (2 * ib)) & 3) as u8;
        let dl = d * ((low | (high << 4)) as i8 - 32) as f32;
        for j in 0..16 {
            let q = qs[ib * 16 + j];
            y[ib * 32 + j] = dl * IQ4_NL_VALUES[(q & 0xF) as usize] as f32;
            y[ib * 32 + j + 16] = dl * IQ4_NL_VALUES[(q >> 4) as usize] as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dequantize(s: QuantScheme, b: &[u8], n: usize) -> Vec<f32> {
        let mut y = vec![0f32; n];
        s.dequantize_blocks(b, &mut y).unwrap();
        y
    }

    #[test]
    fn q8_0_block_by_hand() {
        let mut b = vec![0u8; 34];
        b[..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        for j in 0..32 {
            b[2 + j] = (j as i8 - 16) as u8;
        }
        let y = dequantize(QuantScheme::Q8_0, &b, 32);
        for (j, v) in y.iter().enumerate() {
            assert_eq!(*v, (j as f32 - 16.0) * 0.5);
        }
    }

    #[test]
    fn q8_k_and_q8_1_by_hand() {
        let mut b = vec![0u8; 292];
        b[..4].copy_from_slice(&0.25f32.to_le_bytes());
        for j in 0..256 {
            b[4 + j] = (j as u8).wrapping_sub(128);
        }
        let y = dequantize(QuantScheme::Q8_K, &b, 256);
        for (j, v) in y.iter().enumerate() {
            assert_eq!(*v, ((j as u8).wrapping_sub(128) as i8) as f32 * 0.25);
        }
        let mut b = vec![0u8; 36];
        b[..2].copy_from_slice(&f16::from_f32(2.0).to_le_bytes());
        b[2..4].copy_from_slice(&f16::from_f32(99.0).to_le_bytes());
        b[4] = (-3i8) as u8;
        b[35] = 7;
        let y = dequantize(QuantScheme::Q8_1, &b, 32);
        assert_eq!((y[0], y[1], y[31]), (-6.0, 0.0, 14.0));
    }
}
