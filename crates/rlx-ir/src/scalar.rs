//! The scalar arithmetic that elementwise ops are written in, generic over the element type.
//!
//! One expression per op (see `ops/unary.rs`) drives the reference interpreter (f64), the CPU
//! kernels (f32, f64, f16, bf16) and, through a symbolic implementation, generated GPU code.

use half::{bf16, f16};
use std::ops::{Add, Div, Mul, Neg, Sub};

/// Arithmetic every elementwise expression may use.
pub trait Scalar:
    Copy + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self> + Neg<Output = Self>
{
    /// A constant of this type (the receiver only selects the type or context).
    fn c(self, v: f64) -> Self;
    /// e^x.
    fn exp(self) -> Self;
    /// Natural log.
    fn ln(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Sine.
    fn sin(self) -> Self;
    /// Cosine.
    fn cos(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// Error function.
    fn erf(self) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// Round toward -inf.
    fn floor(self) -> Self;
    /// Round half to even (numpy's `round`).
    fn round(self) -> Self;
    /// Larger of two (NaN propagates).
    fn max(self, o: Self) -> Self;
    /// Smaller of two (NaN propagates).
    fn min(self, o: Self) -> Self;
    /// self^o.
    fn pow(self, o: Self) -> Self;
    /// -1, 0 or 1 by the sign of self (0 for 0 and NaN).
    fn sign(self) -> Self;
}

macro_rules! impl_native {
    ($t:ty, $erf:path) => {
        impl Scalar for $t {
            #[inline(always)]
            fn c(self, v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            #[inline(always)]
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            #[inline(always)]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            #[inline(always)]
            fn round(self) -> Self {
                <$t>::round_ties_even(self)
            }
            #[inline(always)]
            fn max(self, o: Self) -> Self {
                if self.is_nan() || o.is_nan() {
                    <$t>::NAN
                } else if self >= o {
                    self
                } else {
                    o
                }
            }
            #[inline(always)]
            fn min(self, o: Self) -> Self {
                if self.is_nan() || o.is_nan() {
                    <$t>::NAN
                } else if self <= o {
                    self
                } else {
                    o
                }
            }
            #[inline(always)]
            fn pow(self, o: Self) -> Self {
                <$t>::powf(self, o)
            }
            #[inline(always)]
            fn sign(self) -> Self {
                if self > 0.0 {
                    1.0
                } else if self < 0.0 {
                    -1.0
                } else {
                    0.0
                }
            }
        }
    };
}

impl_native!(f32, libm::erff);
impl_native!(f64, libm::erf);

macro_rules! impl_via_f32 {
    ($t:ty) => {
        impl Scalar for $t {
            fn c(self, v: f64) -> Self {
                <$t>::from_f64(v)
            }
            fn exp(self) -> Self {
                <$t>::from_f32(Scalar::exp(self.to_f32()))
            }
            fn ln(self) -> Self {
                <$t>::from_f32(Scalar::ln(self.to_f32()))
            }
            fn sqrt(self) -> Self {
                <$t>::from_f32(Scalar::sqrt(self.to_f32()))
            }
            fn sin(self) -> Self {
                <$t>::from_f32(Scalar::sin(self.to_f32()))
            }
            fn cos(self) -> Self {
                <$t>::from_f32(Scalar::cos(self.to_f32()))
            }
            fn tanh(self) -> Self {
                <$t>::from_f32(Scalar::tanh(self.to_f32()))
            }
            fn erf(self) -> Self {
                <$t>::from_f32(Scalar::erf(self.to_f32()))
            }
            fn abs(self) -> Self {
                <$t>::from_f32(Scalar::abs(self.to_f32()))
            }
            fn floor(self) -> Self {
                <$t>::from_f32(Scalar::floor(self.to_f32()))
            }
            fn round(self) -> Self {
                <$t>::from_f32(Scalar::round(self.to_f32()))
            }
            fn max(self, o: Self) -> Self {
                <$t>::from_f32(Scalar::max(self.to_f32(), o.to_f32()))
            }
            fn min(self, o: Self) -> Self {
                <$t>::from_f32(Scalar::min(self.to_f32(), o.to_f32()))
            }
            fn pow(self, o: Self) -> Self {
                <$t>::from_f32(Scalar::pow(self.to_f32(), o.to_f32()))
            }
            fn sign(self) -> Self {
                <$t>::from_f32(Scalar::sign(self.to_f32()))
            }
        }
    };
}

impl_via_f32!(f16);
impl_via_f32!(bf16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_is_half_to_even_and_max_propagates_nan() {
        assert_eq!(Scalar::round(2.5f64), 2.0);
        assert_eq!(Scalar::round(-0.5f32), -0.0);
        assert!(Scalar::max(f32::NAN, 1.0).is_nan());
        assert!((Scalar::erf(1.0f64) - 0.8427007929497149).abs() < 1e-15);
    }
}
