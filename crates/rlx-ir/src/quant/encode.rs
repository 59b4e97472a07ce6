//! Quantizers following the semantics of llama.cpp's reference (`quantize_row_*_ref`) quantizers:
//! Q4_0, Q8_0, Q4_K, Q5_K, Q6_K and Q8_K.

use half::f16;

use super::decode::scale_min_k4;
use super::{QK_K, QuantError, QuantScheme};

/// Amplitude under which a group counts as all zero (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// Encodes `data` (whole blocks of finite values, already checked against `out`) into `out`.
pub(super) fn blocks(s: QuantScheme, data: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    let f: fn(&[f32], &mut [u8]) -> Option<f32> = match s {
        QuantScheme::Q4_0 => q4_0,
        QuantScheme::Q8_0 => q8_0,
        QuantScheme::Q4_K => |x, b| qkx_k(x, b, 15),
        QuantScheme::Q5_K => |x, b| qkx_k(x, b, 31),
        QuantScheme::Q6_K => q6_k,
        QuantScheme::Q8_K => q8_k,
        scheme => return Err(QuantError::NoQuantizer { scheme }),
    };
    for (block, (x, b)) in data.chunks_exact(s.block_size()).zip(out.chunks_exact_mut(s.block_bytes())).enumerate() {
        // A block returns the f32 scale it could not store as a finite f16.
        if let Some(value) = f(x, b) {
            return Err(QuantError::ScaleOverflow { scheme: s, block, value });
        }
    }
    Ok(())
}

/// Round to nearest, ties to even, exactly as ggml's `nearest_int` (valid for |x| <= 4194303).
fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Converts a scale to f16, or reports it when it overflows.
fn to_f16(v: f32) -> std::result::Result<f16, f32> {
    let h = f16::from_f32(v);
    if h.is_infinite() && v.is_finite() { Err(v) } else { Ok(h) }
}

/// The element with the largest magnitude, with its sign (first one on ties).
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

fn q4_0(x: &[f32], b: &mut [u8]) -> Option<f32> {
    let (_, max) = signed_absmax(x);
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let dh = match to_f16(d) {
        Ok(h) => h,
        Err(v) => return Some(v),
    };
    b[..2].copy_from_slice(&dh.to_le_bytes());
    for j in 0..16 {
        // Truncation toward zero, as C's float-to-int8 cast.
        let q0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
        let q1 = ((x[j + 16] * id + 8.5) as i8).min(15) as u8;
        b[2 + j] = q0 | (q1 << 4);
    }
    None
}

fn q8_0(x: &[f32], b: &mut [u8]) -> Option<f32> {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let dh = match to_f16(d) {
        Ok(h) => h,
        Err(v) => return Some(v),
    };
    b[..2].copy_from_slice(&dh.to_le_bytes());
    for j in 0..32 {
        b[2 + j] = ((x[j] * id).round() as i8) as u8;
    }
    None
}

fn q8_k(x: &[f32], b: &mut [u8]) -> Option<f32> {
    let (amax, max) = signed_absmax(x);
    b.fill(0);
    if amax == 0.0 {
        return None;
    }
    let iscale = -127.0 / max;
    let mut qs = [0i8; QK_K];
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = nearest_int(iscale * v).min(127) as i8;
    }
    b[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    for (j, q) in qs.iter().enumerate() {
        b[4 + j] = *q as u8;
    }
    for g in 0..QK_K / 16 {
        let sum: i16 = qs[g * 16..g * 16 + 16].iter().map(|&q| q as i16).sum();
        b[260 + 2 * g..262 + 2 * g].copy_from_slice(&sum.to_le_bytes());
    }
    None
}

/// Weighted asymmetric quantization of one group to `0..=nmax` with a scale and a min, searching
/// `nstep + 1` candidate scales (ggml's `make_qkx2_quants`). Returns (scale, -min).
#[allow(clippy::too_many_arguments)]
fn make_qkx2(x: &[f32], w: &[f32], nmax: i32, l_out: &mut [u8], rmin: f32, rdelta: f32, nstep: i32) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = w[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        min = min.min(x[i]);
        max = max.max(x[i]);
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    let mut aux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            aux[i] = l as u8;
            let lf = l as f32;
            sum_l += w[i] * lf;
            sum_l2 += w[i] * lf * lf;
            sum_xl += w[i] * lf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                let diff = this_scale * aux[i] as f32 + this_min - x[i];
                cur_error += w[i] * (diff * diff);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&aux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Q4_K (`nmax` 15) and Q5_K (`nmax` 31): eight groups of 32 with 6-bit scales and mins.
fn qkx_k(x: &[f32], b: &mut [u8], nmax: i32) -> Option<f32> {
    let (rmin, nstep) = if nmax == 15 { (-1.0, 20) } else { (-0.5, 15) };
    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    let mut weights = [0f32; 32];
    for j in 0..8 {
        let g = &x[32 * j..32 * j + 32];
        let sum_x2: f32 = g.iter().fold(0.0, |s, v| s + v * v);
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, v) in weights.iter_mut().zip(g) {
            *w = av_x + v.abs();
        }
        let (s, m) = make_qkx2(g, &weights, nmax, &mut levels[32 * j..32 * j + 32], rmin, 0.1, nstep);
        (scales[j], mins[j]) = (s, m);
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut sc = [0u8; 12];
    for j in 0..8 {
        // Truncating to u8 before the clamp, as the reference does.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    let (d, dmin) = match (to_f16(max_scale / 63.0), to_f16(max_min / 63.0)) {
        (Ok(d), Ok(m)) => (d, m),
        (Err(v), _) | (_, Err(v)) => return Some(v),
    };
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, &sc);
        let dl = d.to_f32() * s as f32;
        if dl == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * m as f32;
        for i in 0..32 {
            levels[32 * j + i] = nearest_int((x[32 * j + i] + dm) / dl).clamp(0, nmax) as u8;
        }
    }
    b.fill(0);
    b[0..2].copy_from_slice(&d.to_le_bytes());
    b[2..4].copy_from_slice(&dmin.to_le_bytes());
    b[4..16].copy_from_slice(&sc);
    if nmax == 15 {
        let qs = &mut b[16..144];
        for (c, chunk) in levels.chunks_exact(64).enumerate() {
            for l in 0..32 {
                qs[c * 32 + l] = chunk[l] | (chunk[l + 32] << 4);
            }
        }
    } else {
        let (qh, qs) = b[16..176].split_at_mut(32);
        for (c, chunk) in levels.chunks_exact(64).enumerate() {
            for l in 0..32 {
                let (mut l1, mut l2) = (chunk[l], chunk[l + 32]);
                if l1 > 15 {
                    l1 -= 16;
                    qh[l] |= 1 << (2 * c);
                }
                if l2 > 15 {
                    l2 -= 16;
                    qh[l] |= 2 << (2 * c);
                }
                qs[c * 32 + l] = l1 | (l2 << 4);
            }
        }
    }
    None
}

/// Symmetric quantization of one group to `-nmax..nmax-1` weighted by x^2, trying 19 scales
/// (ggml's `make_qx_quants` with `rmse_type` 1 and no importance weights). Returns the scale.
fn make_qx(x: &[f32], nmax: i32, l_out: &mut [i8]) -> f32 {
    let (amax, max) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let nm = nmax as f32;
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &v in x {
            let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let fill = |iscale: f32, l_out: &mut [i8]| {
        for (o, &v) in l_out.iter_mut().zip(x) {
            *o = (nmax + nearest_int(iscale * v).clamp(-nmax, nmax - 1)) as i8;
        }
    };
    let iscale = -nm / max;
    fill(iscale, l_out);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        let iscale = -(nm + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            fill(iscale, l_out);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

fn q6_k(x: &[f32], b: &mut [u8]) -> Option<f32> {
    let mut levels = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
    for ib in 0..16 {
        let s = make_qx(&x[16 * ib..16 * ib + 16], 32, &mut levels[16 * ib..16 * ib + 16]);
        scales[ib] = s;
        if s.abs() > max_abs_scale {
            max_abs_scale = s.abs();
            max_scale = s;
        }
    }
    b.fill(0);
    if max_abs_scale < GROUP_MAX_EPS {
        return None;
    }
    let iscale = -128.0 / max_scale;
    let d = match to_f16(1.0 / iscale) {
        Ok(d) => d,
        Err(v) => return Some(v),
    };
    let mut sc = [0i8; 16];
    for (s, &v) in sc.iter_mut().zip(&scales) {
        *s = nearest_int(iscale * v).min(127) as i8;
    }
    for j in 0..16 {
        let dl = d.to_f32() * sc[j] as f32;
        if dl == 0.0 {
            continue;
        }
        for i in 0..16 {
            levels[16 * j + i] = (nearest_int(x[16 * j + i] / dl).clamp(-32, 31) + 32) as i8;
        }
    }
    let (ql, rest) = b.split_at_mut(128);
    let (qh, rest) = rest.split_at_mut(64);
    for h in 0..2 {
        let lv = &levels[h * 128..h * 128 + 128];
        for l in 0..32 {
            let q = |k: usize| lv[l + 32 * k] as u8;
            ql[h * 64 + l] = (q(0) & 0xF) | ((q(2) & 0xF) << 4);
            ql[h * 64 + l + 32] = (q(1) & 0xF) | ((q(3) & 0xF) << 4);
            qh[h * 32 + l] = (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
        }
    }
    for (o, s) in rest[..16].iter_mut().zip(sc) {
        *o = s as u8;
    }
    rest[16..18].copy_from_slice(&d.to_le_bytes());
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!([nearest_int(0.5), nearest_int(1.5), nearest_int(-2.5), nearest_int(2.6)], [0, 2, -2, 3]);
    }
}
