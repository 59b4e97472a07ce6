//! Int8 softmax: TFLite Micro's int8 reference (`reference_ops::Softmax` for int8 in and out),
//! on gemmlowp's fixed-point `exp_on_negative_values` and `one_over_one_plus_x_for_x_in_0_1`,
//! written here from their definitions. The output has scale 1/256 and zero point -128.

use super::check_len;
use crate::Error;
use crate::requant::{rounding_divide_by_pot as rdbp, srdhm};

/// Integer bits of the scaled input differences (Q5.26).
pub const SCALED_DIFF_INTEGER_BITS: i32 = 5;
const ACCUMULATION_INTEGER_BITS: i32 = 12;

/// Softmax over the last axis of `[rows, depth]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoftmaxParams {
    /// Rows.
    pub rows: usize,
    /// Elements per row.
    pub depth: usize,
    /// Q31 multiplier of `beta * s_in * 2^(31 - 5)` (`PreprocessSoftmaxScaling`).
    pub input_multiplier: i32,
    /// Its left shift (>= 0).
    pub input_left_shift: i32,
    /// Differences below this are treated as exp() = 0 (`-CalculateInputRadius(5, shift)`).
    pub diff_min: i32,
}

/// gemmlowp's `SaturatingRoundingMultiplyByPOT<exponent>` for a run-time exponent.
fn sat_mul_pot(x: i32, exponent: i32) -> i32 {
    if exponent == 0 {
        x
    } else if exponent < 0 {
        rdbp(x, -exponent)
    } else {
        let threshold = ((1i64 << (31 - exponent)) - 1) as i32;
        if x > threshold {
            i32::MAX
        } else if x < -threshold {
            i32::MIN
        } else {
            x << exponent
        }
    }
}

/// gemmlowp's `exp_on_interval_between_negative_one_quarter_and_0_excl` (Q0.31 in and out).
fn exp_on_interval(a: i32) -> i32 {
    const CONSTANT_TERM: i32 = 1895147668; // exp(-1/8)
    const ONE_THIRD: i32 = 715827883;
    let x = a.wrapping_add(1 << 28);
    let x2 = srdhm(x, x);
    let x3 = srdhm(x2, x);
    let x4 = srdhm(x2, x2);
    let x4_over_4 = sat_mul_pot(x4, -2);
    let poly = sat_mul_pot(srdhm(x4_over_4.wrapping_add(x3), ONE_THIRD).wrapping_add(x2), -1);
    CONSTANT_TERM.wrapping_add(srdhm(CONSTANT_TERM, x.wrapping_add(poly)))
}

/// gemmlowp's `exp_on_negative_values` for a Q5.26 input `a <= 0`; the result is Q0.31.
fn exp_on_negative_values(a: i32) -> i32 {
    const FRACTIONAL_BITS: i32 = 31 - SCALED_DIFF_INTEGER_BITS;
    const ONE_QUARTER: i32 = 1 << (FRACTIONAL_BITS - 2);
    let a_mod_quarter_minus_one_quarter = (a & (ONE_QUARTER - 1)).wrapping_sub(ONE_QUARTER);
    // Rescale<0> from 5 integer bits.
    let mut result = exp_on_interval(sat_mul_pot(a_mod_quarter_minus_one_quarter, SCALED_DIFF_INTEGER_BITS));
    let remainder = a_mod_quarter_minus_one_quarter.wrapping_sub(a);
    // exp(-2^k) for k = -2..=4, applied for each bit set in the remainder.
    const BARREL: [(i32, i32); 7] =
        [(-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401), (4, 242)];
    for (exponent, multiplier) in BARREL {
        if SCALED_DIFF_INTEGER_BITS > exponent && remainder & (1 << (FRACTIONAL_BITS + exponent)) != 0 {
            result = srdhm(result, multiplier);
        }
    }
    if a == 0 { i32::MAX } else { result }
}

/// gemmlowp's `RoundingHalfSum` on int32.
fn rounding_half_sum(a: i32, b: i32) -> i32 {
    let sum = a as i64 + b as i64;
    let sign = if sum >= 0 { 1 } else { -1 };
    ((sum + sign) / 2) as i32
}

/// gemmlowp's `one_over_one_plus_x_for_x_in_0_1` (Q0.31 in and out): Newton-Raphson from 48/17 -
/// 32/17 x, three steps, in Q2.29.
fn one_over_one_plus_x(a: i32) -> i32 {
    let half_denominator = rounding_half_sum(a, i32::MAX);
    const C48_17: i32 = 1515870810;
    const CNEG32_17: i32 = -1010580540;
    const ONE_Q2: i32 = 1 << 29;
    let mut x = C48_17.wrapping_add(srdhm(half_denominator, CNEG32_17));
    for _ in 0..3 {
        let half_denominator_times_x = srdhm(half_denominator, x);
        let one_minus = ONE_Q2.wrapping_sub(half_denominator_times_x);
        // Q2 * Q2 is Q4; Rescale<2> multiplies by 2^2 with saturation.
        x = x.wrapping_add(sat_mul_pot(srdhm(x, one_minus), 2));
    }
    // ExactMulByPot<-1> keeps the raw value as Q1; Rescale<0> then doubles it with saturation.
    sat_mul_pot(x, 1)
}

/// TFLite's `GetReciprocal`: `1 / x` for a Q(integer_digits) `x`, as a Q0.31 value and the count
/// of bits above the unit.
fn reciprocal(x: i32, integer_digits: i32) -> (i32, i32) {
    let headroom_plus_one = (x as u32).leading_zeros() as i32;
    let bits_over_unit = integer_digits - headroom_plus_one;
    let shifted_minus_one = ((x as u32) << headroom_plus_one).wrapping_sub(1 << 31) as i32;
    (one_over_one_plus_x(shifted_minus_one), bits_over_unit)
}

/// Runs int8 softmax on `input` `[rows, depth]`.
pub fn softmax(p: &SoftmaxParams, input: &[i8], output: &mut [i8]) -> Result<(), Error> {
    const OP: &str = "softmax";
    check_len(OP, "input", p.rows * p.depth, input.len())?;
    check_len(OP, "output", p.rows * p.depth, output.len())?;
    if p.depth == 0 {
        return Ok(());
    }
    if !(0..=30).contains(&p.input_left_shift) || p.input_multiplier < 0 {
        return Err(Error::Param { op: OP, what: "input left shift outside 0..=30 or a negative multiplier" });
    }
    for (x, y) in input.chunks_exact(p.depth).zip(output.chunks_exact_mut(p.depth)) {
        let max = x.iter().copied().max().unwrap_or(i8::MIN) as i32;
        let scaled = |v: i8| srdhm((v as i32 - max).wrapping_mul(1 << p.input_left_shift), p.input_multiplier);
        let mut sum = 0i32; // Q12.19
        for &v in x.iter() {
            if v as i32 - max >= p.diff_min {
                sum = sum.wrapping_add(sat_mul_pot(exp_on_negative_values(scaled(v)), -ACCUMULATION_INTEGER_BITS));
            }
        }
        let (scale, bits_over_unit) = reciprocal(sum, ACCUMULATION_INTEGER_BITS);
        let exponent = bits_over_unit + 31 - 8;
        if !(0..=31).contains(&exponent) {
            return Err(Error::Param { op: OP, what: "the sum of exponentials is out of range" });
        }
        for (yv, &v) in y.iter_mut().zip(x.iter()) {
            *yv = if v as i32 - max >= p.diff_min {
                let e = exp_on_negative_values(scaled(v));
                let unsat = rdbp(srdhm(scale, e), exponent);
                (unsat - 128).clamp(-128, 127) as i8
            } else {
                i8::MIN
            };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q31(x: f64) -> f64 {
        x / 2f64.powi(31)
    }

    #[test]
    fn fixed_point_exp_and_reciprocal_are_close_to_the_real_ones() {
        for a in [-1.0f64, -0.5, -3.25, -7.9, -0.01] {
            let raw = (a * 2f64.powi(26)) as i32;
            let e = q31(exp_on_negative_values(raw) as f64);
            assert!((e - (raw as f64 / 2f64.powi(26)).exp()).abs() < 1e-6, "exp({a}) = {e}");
        }
        for x in [0.0f64, 0.25, 0.5, 0.99] {
            let r = q31(one_over_one_plus_x((x * 2f64.powi(31)) as i32) as f64);
            assert!((r - 1.0 / (1.0 + x)).abs() < 1e-6, "1/(1+{x}) = {r}");
        }
    }
}
