//! Requantization: the int32 accumulator times a real multiplier `M = m * 2^(shift - 31)`, with
//! `m` a Q31 integer in `[2^30, 2^31)` and `shift` in `-31..=30`.
//!
//! The rounding is CMSIS-NN's default `arm_nn_requantize` (built without
//! `CMSIS_NN_USE_SINGLE_ROUNDING`), which is TFLite Micro's double-rounding
//! `MultiplyByQuantizedMultiplier`: gemmlowp's `SaturatingRoundingDoublingHighMul` (the high half
//! of `2 * a * b`, rounded to nearest with ties upward) after a left shift, then
//! `RoundingDivideByPOT` (an arithmetic right shift rounded half away from zero) for a negative
//! shift. Both are written here from those definitions and checked against TFLite Micro's
//! reference kernels by the fixtures in `tests/tflm.rs`.

/// gemmlowp's `SaturatingRoundingDoublingHighMul`: `a * b / 2^31` rounded to nearest, ties upward
/// (its nudge is `2^30` for a non-negative product and `1 - 2^30` for a negative one, then C's
/// division truncates toward zero); the one overflowing case (`a == b == i32::MIN`) saturates to `i32::MAX`.
#[inline(always)]
pub fn srdhm(a: i32, b: i32) -> i32 {
    if a == b && a == i32::MIN {
        return i32::MAX;
    }
    let ab = a as i64 * b as i64;
    let nudge: i64 = if ab >= 0 { 1 << 30 } else { 1 - (1 << 30) };
    // C's division truncates toward zero; so does Rust's on signed integers.
    ((ab + nudge) / (1i64 << 31)) as i32
}

/// gemmlowp's `RoundingDivideByPOT`: `x / 2^exponent` rounded to nearest, ties away from zero.
/// `exponent` is in `0..=31`.
#[inline(always)]
pub fn rounding_divide_by_pot(x: i32, exponent: i32) -> i32 {
    let mask = ((1i64 << exponent) - 1) as i32;
    let remainder = x & mask;
    let threshold = (mask >> 1) + (x < 0) as i32;
    (x >> exponent) + (remainder > threshold) as i32
}

/// The shifts [`requantize`] accepts (TFLite's `QuantizeMultiplier` gives `-31..=30`).
pub const SHIFTS: core::ops::RangeInclusive<i32> = -31..=30;

/// `x * m * 2^(shift - 31)`, rounded as CMSIS-NN's `arm_nn_requantize` and TFLite Micro's
/// `MultiplyByQuantizedMultiplier` (double rounding). A positive `shift` is a left shift of `x`
/// before the product (the caller's scales keep `x << shift` inside i32, as in TFLite).
#[inline(always)]
pub fn requantize(x: i32, multiplier: i32, shift: i32) -> i32 {
    let left = if shift > 0 { shift } else { 0 };
    let right = if shift > 0 { 0 } else { -shift };
    rounding_divide_by_pot(srdhm(x.wrapping_mul(1 << left), multiplier), right)
}

/// Per-channel requantization parameters: one `(multiplier, shift)` per output channel, or one
/// for all channels when the slices hold a single element.
#[derive(Debug, Clone, Copy)]
pub struct Requant<'a> {
    /// Q31 multipliers.
    pub multiplier: &'a [i32],
    /// Shifts (positive: left).
    pub shift: &'a [i32],
}

impl<'a> Requant<'a> {
    /// The number of channels these parameters cover (1 means all channels share one).
    pub fn channels(&self) -> usize {
        self.multiplier.len()
    }

    /// `(multiplier, shift)` of channel `c`.
    #[inline(always)]
    pub fn at(&self, c: usize) -> (i32, i32) {
        if self.multiplier.len() == 1 {
            (self.multiplier[0], self.shift[0])
        } else {
            (self.multiplier[c], self.shift[c])
        }
    }

    /// Whether the parameters fit `channels` output channels.
    pub fn fits(&self, channels: usize) -> bool {
        self.multiplier.len() == self.shift.len() && (self.multiplier.len() == 1 || self.multiplier.len() == channels)
    }

    /// Whether every shift is in [`SHIFTS`] and every multiplier non-negative (a shift outside
    /// would overflow the shifts in [`requantize`]).
    pub fn in_range(&self) -> bool {
        self.shift.iter().all(|s| SHIFTS.contains(s)) && self.multiplier.iter().all(|&m| m >= 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srdhm_rounds_half_away_from_zero() {
        // 0.5 * 0.5 in Q31 is 0.25.
        assert_eq!(srdhm(1 << 30, 1 << 30), 1 << 29);
        assert_eq!(srdhm(i32::MIN, i32::MIN), i32::MAX);
        assert_eq!(srdhm(-1, 1 << 30), 0); // -0.5 rounds up
        assert_eq!(srdhm(1, 1 << 30), 1);
        assert_eq!(srdhm(-3, 1 << 29), -1); // -0.75 -> -1
    }

    #[test]
    fn rounding_divide_by_pot_rounds_ties_away_from_zero() {
        assert_eq!(rounding_divide_by_pot(5, 1), 3);
        assert_eq!(rounding_divide_by_pot(-5, 1), -3);
        assert_eq!(rounding_divide_by_pot(-6, 2), -2);
        assert_eq!(rounding_divide_by_pot(6, 2), 2);
        assert_eq!(rounding_divide_by_pot(7, 0), 7);
        assert_eq!(rounding_divide_by_pot(i32::MIN, 31), -1);
    }

    #[test]
    fn requantize_by_one_half() {
        // m = 2^30 (0.5 in Q31), shift 0: x / 2.
        assert_eq!(requantize(101, 1 << 30, 0), 51);
        assert_eq!(requantize(-101, 1 << 30, 0), -50);
        // shift -3: x / 16.
        assert_eq!(requantize(1000, 1 << 30, -3), 63);
        // shift +2: x * 2.
        assert_eq!(requantize(7, 1 << 30, 2), 14);
    }
}
