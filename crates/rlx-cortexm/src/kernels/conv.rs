//! Fully connected, conv2d and depthwise conv2d: TFLite Micro's `FullyConnected(PerChannel)`,
//! `ConvPerChannel` and `DepthwiseConvPerChannel` reference loops (taps in the padding are
//! skipped, which is padding with the input zero point), with the inner dot product on the DSP
//! extension where the target has it.

use super::{Nhwc, OutQuant, Window, check_len, tap};
use crate::Error;
use crate::requant::{Requant, requantize};
use crate::simd::dot_s8;

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
    if !p.requant.fits(p.outputs) {
        return Err(Error::Shape { op: OP, what: "requant", expected: p.outputs, got: p.requant.channels() });
    }
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
    if !p.requant.fits(o.c) {
        return Err(Error::Shape { op: OP, what: "requant", expected: o.c, got: p.requant.channels() });
    }
    for n in 0..o.n {
        for oy in 0..o.h {
            for ox in 0..o.w {
                for oc in 0..o.c {
                    let mut acc = p.bias[oc];
                    for ky in 0..kh {
                        let Some(iy) = tap(oy, ky, win.stride[0], win.dilation[0], win.pad[0], i.h) else { continue };
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
    Ok(())
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

/// Runs a depthwise conv2d. The channels of one tap are strided by the multiplier, so the loop
/// is scalar on every target (CMSIS-NN's SIMD depthwise form needs a scratch buffer).
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
    if !p.requant.fits(o.c) {
        return Err(Error::Shape { op: OP, what: "requant", expected: o.c, got: p.requant.channels() });
    }
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
    Ok(())
}
