//! ReLU, ReLU6 and add: TFLite Micro's int8 `ReluQuantized` (a requantizing ReLU), `Relu6Quantized`
//! (a clamp in the input's quantization) and the int8 `Add` reference (both inputs rescaled to a
//! common scale with 20 bits of headroom, summed, then rescaled to the output).

use super::{OutQuant, check_len};
use crate::Error;
use crate::requant::{SHIFTS, requantize};

/// A requantizing ReLU: `out = clamp(zp_out + requant(x - zp_in), act_min, act_max)`, where
/// `act_min` is the output zero point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReluParams {
    /// The input zero point.
    pub input_zero_point: i32,
    /// Q31 multiplier of `s_in / s_out`.
    pub multiplier: i32,
    /// Its shift.
    pub shift: i32,
    /// Output zero point and clamp.
    pub out: OutQuant,
}

/// Runs a requantizing ReLU elementwise.
pub fn relu(p: &ReluParams, input: &[i8], output: &mut [i8]) -> Result<(), Error> {
    check_len("relu", "output", input.len(), output.len())?;
    if !SHIFTS.contains(&p.shift) {
        return Err(Error::Param { op: "relu", what: "shift outside -31..=30" });
    }
    for (y, &x) in output.iter_mut().zip(input) {
        let v = p.out.offset + requantize(x as i32 - p.input_zero_point, p.multiplier, p.shift);
        *y = v.clamp(p.out.act_min, p.out.act_max) as i8;
    }
    Ok(())
}

/// ReLU6 in the input's quantization: clamp to `zero ..= six` (the zero point and the code of 6.0).
pub fn relu6(zero: i8, six: i8, input: &[i8], output: &mut [i8]) -> Result<(), Error> {
    check_len("relu6", "output", input.len(), output.len())?;
    for (y, &x) in output.iter_mut().zip(input) {
        *y = x.clamp(zero, six.max(zero));
    }
    Ok(())
}

/// An int8 add of two equal-shape tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddParams {
    /// The headroom shift applied to both inputs (TFLite uses 20).
    pub left_shift: i32,
    /// Negated zero point of the first input.
    pub input1_offset: i32,
    /// Multiplier of `s1 / (2 max(s1, s2))`.
    pub input1_multiplier: i32,
    /// Its shift (<= 0).
    pub input1_shift: i32,
    /// Negated zero point of the second input.
    pub input2_offset: i32,
    /// Multiplier of `s2 / (2 max(s1, s2))`.
    pub input2_multiplier: i32,
    /// Its shift (<= 0).
    pub input2_shift: i32,
    /// Multiplier of `2 max(s1, s2) / (2^left_shift s_out)`.
    pub output_multiplier: i32,
    /// Its shift.
    pub output_shift: i32,
    /// Output zero point and clamp.
    pub out: OutQuant,
}

/// Runs an int8 add.
pub fn add(p: &AddParams, a: &[i8], b: &[i8], output: &mut [i8]) -> Result<(), Error> {
    check_len("add", "second input", a.len(), b.len())?;
    check_len("add", "output", a.len(), output.len())?;
    let shifts = [p.input1_shift, p.input2_shift, p.output_shift];
    if !(0..=20).contains(&p.left_shift) || !shifts.iter().all(|s| SHIFTS.contains(s)) {
        return Err(Error::Param { op: "add", what: "left shift outside 0..=20 or a shift outside -31..=30" });
    }
    for ((y, &x1), &x2) in output.iter_mut().zip(a).zip(b) {
        let s1 = requantize((x1 as i32 + p.input1_offset) << p.left_shift, p.input1_multiplier, p.input1_shift);
        let s2 = requantize((x2 as i32 + p.input2_offset) << p.left_shift, p.input2_multiplier, p.input2_shift);
        let v = requantize(s1 + s2, p.output_multiplier, p.output_shift);
        *y = p.out.finish(v);
    }
    Ok(())
}
