//! Fully connected, conv2d and depthwise conv2d: TFLite Micro's `FullyConnected(PerChannel)`,
//! `ConvPerChannel` and `DepthwiseConvPerChannel` reference loops (taps in the padding are
//! skipped, which is padding with the input zero point), with the inner dot product on the DSP
//! extension where the target has it.

use super::{Nhwc, OutQuant, Window, check_len, check_requant, tap};
use crate::Error;
use crate::requant::{Requant, requantize};
use crate::simd::{HAS_DSP, dot_s8, pair, read4, sadd16, smlabb, smlatt, sxtb16, sxtb16_ror8};

/// A fully connected layer: `out[b, o] = requant(bias[o] + sum_i w[o, i] * (x[b, i] + input_offset))`.
#[derive(Debug, Clone, Copy)]
pub struct FcParams<'a> {
    /// Rows of the input (batch).
    pub batch: usize,
    /// Input features.
    pub inputs: usize,
    /// Output features.
    pub outputs: usize,
    /// Weights `[outputs, inputs]`, int8 symmetric per output channel.
    pub weights: &'a [i8],
    /// Bias `[outputs]` at scale `s_in * s_w[o]`.
    pub bias: &'a [i32],
    /// The negated input zero point.
    pub input_offset: i32,
    /// Per-output-channel requantization.
    pub requant: Requant<'a>,
    /// Output zero point and activation clamp.
    pub out: OutQuant,
}

/// Runs a fully connected layer on `input` `[batch, inputs]` into `output` `[batch, outputs]`.
pub fn fully_connected(p: &FcParams, input: &[i8], output: &mut [i8]) -> Result<(), Error> {
    const OP: &str = "fully_connected";
    check_len(OP, "weights", p.inputs * p.outputs, p.weights.len())?;
    check_len(OP, "bias", p.outputs, p.bias.len())?;
    check_len(OP, "input", p.batch * p.inputs, input.len())?;
    check_len(OP, "output", p.batch * p.outputs, output.len())?;
    check_requant(OP, &p.requant, p.outputs)?;
    for (x, y) in input.chunks_exact(p.inputs.max(1)).zip(output.chunks_exact_mut(p.outputs.max(1))) {
        for (o, (w, y)) in p.weights.chunks_exact(p.inputs.max(1)).zip(y.iter_mut()).enumerate() {
            let acc = dot_s8(w, x, p.input_offset).wrapping_add(p.bias[o]);
            let (m, s) = p.requant.at(o);
            *y = p.out.finish(requantize(acc, m, s));
        }
    }
    Ok(())
}

/// A 2-D convolution, NHWC input, OHWI weights.
#[derive(Debug, Clone, Copy)]
pub struct ConvParams<'a> {
    /// Input shape.
    pub input: Nhwc,
    /// Output shape (its channels are the weights' O).
    pub output: Nhwc,
    /// Window.
    pub window: Window,
    /// Weights `[out_c, kh, kw, in_c]`.
    pub weights: &'a [i8],
    /// Bias `[out_c]`.
    pub bias: &'a [i32],
    /// The negated input zero point.
    pub input_offset: i32,
    /// Per-output-channel requantization.
    pub requant: Requant<'a>,
    /// Output zero point and activation clamp.
    pub out: OutQuant,
}

/// The largest window (`kh * kw * in_c`) gathered on the stack; larger windows take the
/// row-by-row path, which needs no buffer.
pub const IM2COL: usize = 512;

/// Runs a conv2d.
pub fn conv2d(p: &ConvParams, input: &[i8], output: &mut [i8]) -> Result<(), Error> {
    const OP: &str = "conv2d";
    let (i, o, win) = (p.input, p.output, p.window);
    let [kh, kw] = win.kernel;
    check_len(OP, "weights", o.c * kh * kw * i.c, p.weights.len())?;
    check_len(OP, "bias", o.c, p.bias.len())?;
    check_len(OP, "input", i.len(), input.len())?;
    check_len(OP, "output", o.len(), output.len())?;
    check_len(OP, "batch", i.n, o.n)?;
    check_requant(OP, &p.requant, o.c)?;
    let k = kh * kw * i.c;
    if k <= IM2COL {
        // The window of one output pixel gathered once (CMSIS-NN's im2col), padding taps as the
        // input zero point so that `x + offset` is 0 there, then one dot product of the whole
        // window per output channel: OHWI weights hold each channel's window contiguously.
        let mut col = [0i8; IM2COL];
        let zp = (-p.input_offset).clamp(-128, 127) as i8;
        for n in 0..o.n {
            for oy in 0..o.h {
                for ox in 0..o.w {
                    let mut at = 0;
                    for ky in 0..kh {
                        let iy = tap(oy, ky, win.stride[0], win.dilation[0], win.pad[0], i.h);
                        for kx in 0..kw {
                            let ix = tap(ox, kx, win.stride[1], win.dilation[1], win.pad[1], i.w);
                            let dst = &mut col[at..at + i.c];
                            match (iy, ix) {
                                (Some(iy), Some(ix)) => dst.copy_from_slice(&input[i.at(n, iy, ix, 0)..][..i.c]),
                                _ => dst.fill(zp),
                            }
                            at += i.c;
                        }
                    }
                    let col = &col[..k];
                    let out = &mut output[o.at(n, oy, ox, 0)..][..o.c];
                    for (oc, (y, ws)) in out.iter_mut().zip(p.weights.chunks_exact(k)).enumerate() {
                        let acc = p.bias[oc].wrapping_add(dot_s8(ws, col, p.input_offset));
                        let (m, s) = p.requant.at(oc);
                        *y = p.out.finish(requantize(acc, m, s));
                    }
                }
            }
        }
        return Ok(());
    }
    conv2d_rows(p, input, output);
    Ok(())
}

/// The conv2d path without a buffer: one dot product per kernel row when undilated (adjacent
/// taps are one contiguous run in NHWC / OHWI), else per tap. Lengths are checked by `conv2d`.
fn conv2d_rows(p: &ConvParams, input: &[i8], output: &mut [i8]) {
    let (i, o, win) = (p.input, p.output, p.window);
    let [kh, kw] = win.kernel;
    for n in 0..o.n {
        for oy in 0..o.h {
            for ox in 0..o.w {
                for oc in 0..o.c {
                    let mut acc = p.bias[oc];
                    for ky in 0..kh {
                        let Some(iy) = tap(oy, ky, win.stride[0], win.dilation[0], win.pad[0], i.h) else { continue };
                        if win.dilation[1] == 1 {
                            // Undilated, the in-bounds taps of a kernel row are adjacent pixels, and
                            // NHWC / OHWI make their channels one contiguous run in both tensors:
                            // one dot product per row (the sum is exact in any grouping).
                            let x0 = (ox * win.stride[1]) as isize - win.pad[1] as isize;
                            let kx0 = (-x0).max(0) as usize;
                            let kx1 = (i.w as isize - x0).clamp(0, kw as isize) as usize;
                            if kx0 < kx1 {
                                let len = (kx1 - kx0) * i.c;
                                let xs = &input[i.at(n, iy, (x0 + kx0 as isize) as usize, 0)..][..len];
                                let ws = &p.weights[((oc * kh + ky) * kw + kx0) * i.c..][..len];
                                acc = acc.wrapping_add(dot_s8(ws, xs, p.input_offset));
                            }
                            continue;
                        }
                        for kx in 0..kw {
                            let Some(ix) = tap(ox, kx, win.stride[1], win.dilation[1], win.pad[1], i.w) else {
                                continue;
                            };
                            // The channels of one tap are contiguous in both tensors: one dot product.
                            let xs = &input[i.at(n, iy, ix, 0)..][..i.c];
                            let ws = &p.weights[((oc * kh + ky) * kw + kx) * i.c..][..i.c];
                            acc = acc.wrapping_add(dot_s8(ws, xs, p.input_offset));
                        }
                    }
                    let (m, s) = p.requant.at(oc);
                    output[o.at(n, oy, ox, oc)] = p.out.finish(requantize(acc, m, s));
                }
            }
        }
    }
}

/// A depthwise 2-D convolution: output channel `ic * multiplier + m` reads input channel `ic`.
#[derive(Debug, Clone, Copy)]
pub struct DepthwiseParams<'a> {
    /// Input shape.
    pub input: Nhwc,
    /// Output shape (channels = input channels * multiplier).
    pub output: Nhwc,
    /// Window.
    pub window: Window,
    /// Channel multiplier.
    pub multiplier: usize,
    /// Weights `[1, kh, kw, out_c]`.
    pub weights: &'a [i8],
    /// Bias `[out_c]`.
    pub bias: &'a [i32],
    /// The negated input zero point.
    pub input_offset: i32,
    /// Per-output-channel requantization.
    pub requant: Requant<'a>,
    /// Output zero point and activation clamp.
    pub out: OutQuant,
}

/// Runs a depthwise conv2d: with multiplier 1 on a DSP target four channels at a time
/// (`SMLABB` / `SMLATT`), else one channel at a time.
pub fn depthwise_conv2d(p: &DepthwiseParams, input: &[i8], output: &mut [i8]) -> Result<(), Error> {
    const OP: &str = "depthwise_conv2d";
    let (i, o, win) = (p.input, p.output, p.window);
    let [kh, kw] = win.kernel;
    check_len(OP, "output channels", i.c * p.multiplier, o.c)?;
    check_len(OP, "weights", kh * kw * o.c, p.weights.len())?;
    check_len(OP, "bias", o.c, p.bias.len())?;
    check_len(OP, "input", i.len(), input.len())?;
    check_len(OP, "output", o.len(), output.len())?;
    check_len(OP, "batch", i.n, o.n)?;
    check_requant(OP, &p.requant, o.c)?;
    if HAS_DSP && p.multiplier == 1 {
        depthwise_packed(p, input, output);
    } else {
        depthwise_scalar(p, input, output);
    }
    Ok(())
}

/// The depthwise loop, one output channel at a time (TFLite Micro's order).
fn depthwise_scalar(p: &DepthwiseParams, input: &[i8], output: &mut [i8]) {
    let (i, o, win) = (p.input, p.output, p.window);
    let [kh, kw] = win.kernel;
    for n in 0..o.n {
        for oy in 0..o.h {
            for ox in 0..o.w {
                for ic in 0..i.c {
                    for m in 0..p.multiplier {
                        let oc = ic * p.multiplier + m;
                        let mut acc = p.bias[oc];
                        for ky in 0..kh {
                            let Some(iy) = tap(oy, ky, win.stride[0], win.dilation[0], win.pad[0], i.h) else {
                                continue;
                            };
                            for kx in 0..kw {
                                let Some(ix) = tap(ox, kx, win.stride[1], win.dilation[1], win.pad[1], i.w) else {
                                    continue;
                                };
                                let x = input[i.at(n, iy, ix, ic)] as i32 + p.input_offset;
                                acc = acc.wrapping_add(p.weights[(ky * kw + kx) * o.c + oc] as i32 * x);
                            }
                        }
                        let (mm, s) = p.requant.at(oc);
                        output[o.at(n, oy, ox, oc)] = p.out.finish(requantize(acc, mm, s));
                    }
                }
            }
        }
    }
}

/// Depthwise with multiplier 1, four channels at a time: a tap's four channels are one word in
/// the input and in the weights; `SXTB16` splits each into halfword pairs and `SMLABB` /
/// `SMLATT` accumulate the four channels separately (CMSIS-NN's depthwise form). Channels past
/// the last multiple of four take the scalar loop.
fn depthwise_packed(p: &DepthwiseParams, input: &[i8], output: &mut [i8]) {
    let (i, o, win) = (p.input, p.output, p.window);
    let [kh, kw] = win.kernel;
    let off = pair(p.input_offset);
    for n in 0..o.n {
        for oy in 0..o.h {
            for ox in 0..o.w {
                let mut c = 0;
                while c + 4 <= o.c {
                    let mut acc = [p.bias[c], p.bias[c + 1], p.bias[c + 2], p.bias[c + 3]];
                    for ky in 0..kh {
                        let Some(iy) = tap(oy, ky, win.stride[0], win.dilation[0], win.pad[0], i.h) else { continue };
                        for kx in 0..kw {
                            let Some(ix) = tap(ox, kx, win.stride[1], win.dilation[1], win.pad[1], i.w) else {
                                continue;
                            };
                            let xv = read4(&input[i.at(n, iy, ix, c)..]);
                            let wv = read4(&p.weights[(ky * kw + kx) * o.c + c..]);
                            let (x02, x13) = (sadd16(sxtb16(xv), off), sadd16(sxtb16_ror8(xv), off));
                            let (w02, w13) = (sxtb16(wv), sxtb16_ror8(wv));
                            acc[0] = smlabb(w02, x02, acc[0]);
                            acc[2] = smlatt(w02, x02, acc[2]);
                            acc[1] = smlabb(w13, x13, acc[1]);
                            acc[3] = smlatt(w13, x13, acc[3]);
                        }
                    }
                    for (k, &a) in acc.iter().enumerate() {
                        let (m, s) = p.requant.at(c + k);
                        output[o.at(n, oy, ox, c + k)] = p.out.finish(requantize(a, m, s));
                    }
                    c += 4;
                }
                for oc in c..o.c {
                    let mut acc = p.bias[oc];
                    for ky in 0..kh {
                        let Some(iy) = tap(oy, ky, win.stride[0], win.dilation[0], win.pad[0], i.h) else { continue };
                        for kx in 0..kw {
                            let Some(ix) = tap(ox, kx, win.stride[1], win.dilation[1], win.pad[1], i.w) else {
                                continue;
                            };
                            let x = input[i.at(n, iy, ix, oc)] as i32 + p.input_offset;
                            acc = acc.wrapping_add(p.weights[(ky * kw + kx) * o.c + oc] as i32 * x);
                        }
                    }
                    let (m, s) = p.requant.at(oc);
                    output[o.at(n, oy, ox, oc)] = p.out.finish(requantize(acc, m, s));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_row_path_equals_the_im2col_path() {
        let mut seed = 7u32;
        let mut next = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 24) as u8 as i8
        };
        for dilation in [1, 2] {
            let (input, output) = (Nhwc::new(1, 7, 6, 5), Nhwc::new(1, 4, 3, 3));
            let window = Window { kernel: [3, 3], stride: [2, 2], dilation: [dilation; 2], pad: [1, 1] };
            let w: [i8; 3 * 3 * 3 * 5] = core::array::from_fn(|_| next());
            let x: [i8; 7 * 6 * 5] = core::array::from_fn(|_| next());
            let (m, s) = ([1 << 30, 1 << 29, 3 << 28], [-3, -4, -5]);
            let p = ConvParams {
                input,
                output,
                window,
                weights: &w,
                bias: &[100, -50, 7],
                input_offset: 17,
                requant: Requant { multiplier: &m, shift: &s },
                out: OutQuant::none(-3),
            };
            let (mut a, mut b) = ([0i8; 36], [0i8; 36]);
            conv2d(&p, &x, &mut a).unwrap();
            conv2d_rows(&p, &x, &mut b);
            assert_eq!(a, b, "dilation {dilation}");
            assert!(a.iter().any(|&v| v != a[0]));
        }
    }

    #[test]
    fn the_packed_depthwise_equals_the_scalar_one() {
        let mut seed = 11u32;
        let mut next = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 24) as u8 as i8
        };
        // 10 channels: two packed groups of four and two channels left over.
        let (input, output) = (Nhwc::new(1, 6, 5, 10), Nhwc::new(1, 6, 5, 10));
        let window = Window { kernel: [3, 3], stride: [1, 1], dilation: [1, 1], pad: [1, 1] };
        let w: [i8; 90] = core::array::from_fn(|_| next());
        let x: [i8; 300] = core::array::from_fn(|_| next());
        let b: [i32; 10] = core::array::from_fn(|k| 40 * k as i32 - 200);
        let (m, s) = ([3 << 28; 10], [-6; 10]);
        let p = DepthwiseParams {
            input,
            output,
            window,
            multiplier: 1,
            weights: &w,
            bias: &b,
            input_offset: -9,
            requant: Requant { multiplier: &m, shift: &s },
            out: OutQuant::none(4),
        };
        let (mut a, mut c) = ([0i8; 300], [0i8; 300]);
        depthwise_packed(&p, &x, &mut a);
        depthwise_scalar(&p, &x, &mut c);
        assert_eq!(a, c);
        assert!(a.iter().any(|&v| v != a[0]));
    }
}
