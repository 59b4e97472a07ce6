//! Kernel parameters from float scales and zero points, computed as TFLite Micro's `Prepare`
//! functions compute them (`QuantizeMultiplier`, `PreprocessSoftmaxScaling`, the add's 20-bit
//! headroom), so a model quantized with given scales runs bit for bit as it does there. Only
//! `core` float arithmetic: usable by the exporter and, if need be, on the device.

use crate::kernels::softmax::SCALED_DIFF_INTEGER_BITS;
use crate::kernels::{AddParams, OutQuant, ReluParams, SoftmaxParams};

/// `x` split as `q * 2^e` with `q` in `[0.5, 1)` (C's `frexp`), for finite non-zero normal `x`;
/// zero and subnormals give `(0.0, 0)`.
fn frexp(x: f64) -> (f64, i32) {
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if x == 0.0 || exp == 0 || exp == 0x7ff {
        return (0.0, 0);
    }
    let q = f64::from_bits((bits & !(0x7ffu64 << 52)) | (1022u64 << 52));
    (q, exp - 1022)
}

/// C's `round` (half away from zero) for `|x| < 2^62`, by truncation, which `core` has.
fn round(x: f64) -> i64 {
    let t = x as i64;
    let frac = x - t as f64;
    if frac >= 0.5 {
        t + 1
    } else if frac <= -0.5 {
        t - 1
    } else {
        t
    }
}

/// TFLite's `QuantizeMultiplier` (double-rounding build): `x = m * 2^(shift - 31)` with the
/// Q31 `m` rounded half away from zero; multipliers under `2^-32` become `(0, 0)`.
pub fn quantize_multiplier(x: f64) -> (i32, i32) {
    let (q, mut shift) = frexp(x);
    if q == 0.0 {
        return (0, 0);
    }
    let mut q_fixed = round(q * (1i64 << 31) as f64);
    if q_fixed == 1i64 << 31 {
        q_fixed /= 2;
        shift += 1;
    }
    if shift < -31 {
        return (0, 0);
    }
    (q_fixed as i32, shift)
}

/// The per-channel multiplier of a conv / fully connected output channel:
/// `s_in * s_w / s_out` in double precision (TFLite's per-channel form).
pub fn channel_multiplier(s_in: f32, s_w: f32, s_out: f32) -> (i32, i32) {
    quantize_multiplier(s_in as f64 * s_w as f64 / s_out as f64)
}

/// The per-tensor multiplier of a fully connected layer: TFLite's `GetQuantizedConvolutionMultipler`
/// forms `s_in * s_w` in single precision first.
pub fn tensor_multiplier(s_in: f32, s_w: f32, s_out: f32) -> (i32, i32) {
    quantize_multiplier((s_in * s_w) as f64 / s_out as f64)
}

/// C's `round` of an `f32` as TFLite's activation ranges use it (`roundf`).
fn roundf(x: f32) -> i32 {
    round(x as f64) as i32
}

/// The int8 clamp of a fused activation (`CalculateActivationRangeQuantized`): none, ReLU or
/// ReLU6, for an output of scale `s` and zero point `zp`.
pub fn activation_range(act: Activation, s: f32, zp: i32) -> (i32, i32) {
    let q = |v: f32| zp + roundf(v / s);
    match act {
        Activation::None => (-128, 127),
        Activation::Relu => (q(0.0).max(-128), 127),
        Activation::Relu6 => (q(0.0).max(-128), q(6.0).min(127)),
    }
}

/// A fused activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// None.
    None,
    /// ReLU.
    Relu,
    /// ReLU6.
    Relu6,
}

/// The output quantization of a layer with fused activation `act`.
pub fn out_quant(act: Activation, s_out: f32, zp_out: i32) -> OutQuant {
    let (act_min, act_max) = activation_range(act, s_out, zp_out);
    OutQuant { offset: zp_out, act_min, act_max }
}

/// A standalone requantizing ReLU (`ReluPrepare`).
pub fn relu_params(s_in: f32, zp_in: i32, s_out: f32, zp_out: i32) -> ReluParams {
    let (multiplier, shift) = quantize_multiplier(s_in as f64 / s_out as f64);
    ReluParams { input_zero_point: zp_in, multiplier, shift, out: out_quant(Activation::Relu, s_out, zp_out) }
}

/// ReLU6's bounds in the input's quantization (`Relu6Prepare`): the zero point and the code of
/// 6.0, clamped to int8.
pub fn relu6_bounds(s: f32, zp: i32) -> (i8, i8) {
    let six = (roundf(6.0f32 / s) + zp).clamp(-128, 127);
    (zp.clamp(-128, 127) as i8, six as i8)
}

/// An int8 add (`PrepareAdd` / `CalculateOpDataAdd`).
pub fn add_params(s1: f32, zp1: i32, s2: f32, zp2: i32, s_out: f32, zp_out: i32, act: Activation) -> AddParams {
    const LEFT_SHIFT: i32 = 20;
    let twice_max = 2.0 * if s1 > s2 { s1 } else { s2 } as f64;
    let (input1_multiplier, input1_shift) = quantize_multiplier(s1 as f64 / twice_max);
    let (input2_multiplier, input2_shift) = quantize_multiplier(s2 as f64 / twice_max);
    let (output_multiplier, output_shift) = quantize_multiplier(twice_max / ((1 << LEFT_SHIFT) as f64 * s_out as f64));
    AddParams {
        left_shift: LEFT_SHIFT,
        input1_offset: -zp1,
        input1_multiplier,
        input1_shift,
        input2_offset: -zp2,
        input2_multiplier,
        input2_shift,
        output_multiplier,
        output_shift,
        out: out_quant(act, s_out, zp_out),
    }
}

/// Softmax over `[rows, depth]` with `beta` on an input of scale `s_in` (`SoftmaxPrepare`:
/// `PreprocessSoftmaxScaling` and `CalculateInputRadius`). The output is fixed at scale 1/256
/// and zero point -128.
pub fn softmax_params(rows: usize, depth: usize, beta: f32, s_in: f32) -> SoftmaxParams {
    let max_real = ((1i64 << 31) - 1) as f64;
    let real = beta as f64 * s_in as f64 * (1i64 << (31 - SCALED_DIFF_INTEGER_BITS)) as f64;
    let (input_multiplier, input_left_shift) = quantize_multiplier(if real < max_real { real } else { max_real });
    let radius = ((1i64 << SCALED_DIFF_INTEGER_BITS) - 1) as f64 * (1i64 << (31 - SCALED_DIFF_INTEGER_BITS)) as f64
        / (1i64 << input_left_shift) as f64;
    // floor of a positive value: truncation.
    let diff_min = -(radius as i64 as i32);
    SoftmaxParams { rows, depth, input_multiplier, input_left_shift, diff_min }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_multiplier_matches_frexp_and_round() {
        assert_eq!(quantize_multiplier(0.5), (1 << 30, 0));
        assert_eq!(quantize_multiplier(1.0), (1 << 30, 1));
        assert_eq!(quantize_multiplier(0.75), (3 << 29, 0));
        assert_eq!(quantize_multiplier(0.0), (0, 0));
        // Rounds up to 2^31, which is renormalized.
        assert_eq!(quantize_multiplier(1.0 - 1e-12), (1 << 30, 1));
        let (m, s) = quantize_multiplier(0.0123);
        assert!(((m as f64) * 2f64.powi(s - 31) - 0.0123).abs() < 1e-11);
        assert_eq!(quantize_multiplier(1e-12), (0, 0));
    }
}
