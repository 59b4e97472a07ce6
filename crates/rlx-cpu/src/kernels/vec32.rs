//! Vectorized f32 elementwise loops for fused regions. The ops' own `Scalar` expressions drive
//! them, evaluated on `V32`: an f32 whose exp, tanh and erf are branch-free polynomials (so the
//! loops vectorize), compiled for AVX2+FMA when the CPU has it.

/// The clamped polynomial part of erf for one vector width: `xc g(xc^2)` with xc = x clamped to
/// +-`ERF_LIM` (`erf8` and `erf16` add the +-1 past the limit their own way).
#[cfg(target_arch = "x86_64")]
macro_rules! erf_clamped_poly {
    ($x:expr, $splat:ident, $min:ident, $max:ident, $mul:ident, $fmadd:ident) => {{
        use $crate::kernels::vec32::{ERF_LIM, ERF_POLY, ERF_T_SCALE};
        // max/min return their second operand when either is NaN: NaN passes through the clamps.
        let xc = $min($splat(ERF_LIM), $max($splat(-ERF_LIM), $x));
        let t = $fmadd($mul(xc, xc), $splat(ERF_T_SCALE), $splat(-1.0));
        let mut g = $splat(ERF_POLY[14]);
        for &c in ERF_POLY[..14].iter().rev() {
            g = $fmadd(g, t, $splat(c));
        }
        $mul(xc, g)
    }};
}

/// The range reduction and polynomial of exp for one vector width: `(n, p)` with exp(x) = p * 2^n
/// for x clamped to [-87.34, 88.38] (`exp8` and `exp16` scale by 2^n and handle the ends their own
/// way). `math::exp_f32`'s constants with fused multiply-adds: both widths give the same bits.
#[cfg(target_arch = "x86_64")]
macro_rules! exp_poly {
    ($x:expr, $splat:ident, $min:ident, $max:ident, $add:ident, $sub:ident, $mul:ident, $fmadd:ident, $fnmadd:ident) => {{
        // max/min return their second operand when either is NaN: NaN passes through the clamps.
        let xc = $min($splat(88.376_26), $max($splat(-87.336_55), $x));
        let round = $splat(12_582_912.0);
        let n = $sub($fmadd(xc, $splat(std::f32::consts::LOG2_E), round), round);
        let r = $fnmadd(n, $splat(0.693_359_4), xc);
        let r = $fmadd(n, $splat(2.121_944_4e-4), r);
        let mut p = $splat(1.987_569_1e-4);
        for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5] {
            p = $fmadd(p, r, $splat(c));
        }
        (n, $add($fmadd($mul(p, r), r, r), $splat(1.0)))
    }};
}

pub(crate) mod simd16;
pub(crate) mod simd8;

use super::math::{avx2_fma, exp_f32};
use rlx_ir::Scalar;
use rlx_ir::ops::{BinaryKind, UnaryKind};
use std::any::TypeId;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// An f32 with vectorizable transcendental functions (within ~3e-7 of the exact value).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct V32(pub f32);

macro_rules! arith {
    ($($tr:ident $f:ident $op:tt),*) => {$(
        impl $tr for V32 {
            type Output = V32;
            #[inline(always)]
            fn $f(self, o: V32) -> V32 {
                V32(self.0 $op o.0)
            }
        }
    )*};
}
arith!(Add add +, Sub sub -, Mul mul *, Div div /);

impl Neg for V32 {
    type Output = V32;
    #[inline(always)]
    fn neg(self) -> V32 {
        V32(-self.0)
    }
}

/// `tanh` without calls: a Taylor series below 0.3, else `(1 - e) / (1 + e)` with `e = exp(-2|x|)`.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let e = exp_f32(-2.0 * a);
    let big = (1.0 - e) / (1.0 + e);
    let x2 = x * x;
    let small = x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (62.0 / 2835.0)))));
    let big = if x < 0.0 { -big } else { big };
    let y = if a < 0.3 { small } else { big };
    if x.is_nan() { x } else { y }
}

/// `erf(x) = x g(x^2)` for |x| <= `ERF_LIM`, with g a degree-14 polynomial in
/// `t = x^2 / 7 - 1` (a Chebyshev fit of erf(x)/x over x^2 in [0, 14], made by
/// tools/fit_erf.py): at most 1.9e-7 absolute, 2.4e-7 relative error. Beyond the limit, +-1.
pub(crate) const ERF_POLY: [f32; 15] = [
    3.7789539e-01,
    -1.8843356e-01,
    1.395248e-01,
    -1.12056255e-01,
    9.06959e-02,
    -7.147495e-02,
    5.347885e-02,
    -3.6949355e-02,
    2.4360323e-02,
    -1.6623495e-02,
    9.407031e-03,
    -2.8335634e-03,
    1.5181145e-03,
    -2.187784e-03,
    9.3979033e-04,
];
/// Largest |x| the polynomial covers (sqrt 14); erf rounds to +-1 within 1.6e-7 past it.
pub(crate) const ERF_LIM: f32 = 3.741_657_5;
/// `t = x^2 * ERF_T_SCALE - 1` maps x^2 in [0, 14] to [-1, 1].
pub(crate) const ERF_T_SCALE: f32 = 2.0 / 14.0;

/// `erf` without calls or branches on the value: one polynomial (`ERF_POLY`), then +-1 past
/// `ERF_LIM`.
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    let xc = x.clamp(-ERF_LIM, ERF_LIM);
    let t = xc * xc * ERF_T_SCALE - 1.0;
    let g = ERF_POLY.iter().rev().fold(0.0, |acc, &c| acc * t + c);
    // NaN fails the comparison and stays NaN through the polynomial.
    if x.abs() > ERF_LIM { 1f32.copysign(x) } else { xc * g }
}

impl Scalar for V32 {
    #[inline(always)]
    fn c(self, v: f64) -> V32 {
        V32(v as f32)
    }
    #[inline(always)]
    fn exp(self) -> V32 {
        V32(exp_f32(self.0))
    }
    #[inline(always)]
    fn tanh(self) -> V32 {
        V32(tanh_f32(self.0))
    }
    #[inline(always)]
    fn erf(self) -> V32 {
        V32(erf_f32(self.0))
    }
    #[inline(always)]
    fn ln(self) -> V32 {
        V32(Scalar::ln(self.0))
    }
    #[inline(always)]
    fn sqrt(self) -> V32 {
        V32(self.0.sqrt())
    }
    #[inline(always)]
    fn sin(self) -> V32 {
        V32(Scalar::sin(self.0))
    }
    #[inline(always)]
    fn cos(self) -> V32 {
        V32(Scalar::cos(self.0))
    }
    #[inline(always)]
    fn abs(self) -> V32 {
        V32(self.0.abs())
    }
    #[inline(always)]
    fn floor(self) -> V32 {
        V32(Scalar::floor(self.0))
    }
    #[inline(always)]
    fn round(self) -> V32 {
        V32(Scalar::round(self.0))
    }
    #[inline(always)]
    fn max(self, o: V32) -> V32 {
        V32(Scalar::max(self.0, o.0))
    }
    #[inline(always)]
    fn min(self, o: V32) -> V32 {
        V32(Scalar::min(self.0, o.0))
    }
    #[inline(always)]
    fn pow(self, o: V32) -> V32 {
        V32(Scalar::pow(self.0, o.0))
    }
    #[inline(always)]
    fn sign(self) -> V32 {
        V32(Scalar::sign(self.0))
    }
}

/// `T`'s elements as f32 when `T` is f32.
#[inline(always)]
pub(super) fn as_f32<T: 'static>(x: &[T]) -> Option<&[f32]> {
    // SAFETY: T is f32 (checked by TypeId), so the layout is identical.
    (TypeId::of::<T>() == TypeId::of::<f32>()).then(|| unsafe { &*(x as *const [T] as *const [f32]) })
}

#[inline(always)]
pub(super) fn as_f32_mut<T: 'static>(x: &mut [T]) -> Option<&mut [f32]> {
    // SAFETY: as above.
    (TypeId::of::<T>() == TypeId::of::<f32>()).then(|| unsafe { &mut *(x as *mut [T] as *mut [f32]) })
}

/// `out = u(x)` when `T` is f32 (returns false otherwise, and the caller runs its own loop).
pub fn unary<T: 'static>(u: UnaryKind, x: &[T], out: &mut [T]) -> bool {
    match (as_f32(x), as_f32_mut(out)) {
        (Some(x), Some(out)) => {
            unary_simd(avx2_fma(), u, x, out);
            true
        }
        _ => false,
    }
}

/// `out = op(a, b)` when `T` is f32 (returns false otherwise).
pub fn binary<T: 'static>(op: BinaryKind, a: &[T], b: &[T], out: &mut [T]) -> bool {
    match (as_f32(a), as_f32(b), as_f32_mut(out)) {
        (Some(a), Some(b), Some(out)) => {
            binary_simd(avx2_fma(), op, a, b, out);
            true
        }
        _ => false,
    }
}

crate::simd_entry!(unary_simd = unary_body<>(u: UnaryKind, x: &[f32], out: &mut [f32]));
crate::simd_entry!(binary_simd = binary_body<>(op: BinaryKind, a: &[f32], b: &[f32], out: &mut [f32]));
crate::simd_entry!(pub(super) unary_in_place = unary_in_place_body<>(u: UnaryKind, x: &mut [f32]));

/// `x = u(x)`, with the same loops (so the same results) as `unary_body`.
#[inline(always)]
fn unary_in_place_body<const FMA: bool>(u: UnaryKind, x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if FMA {
        // SAFETY: as in `unary_body`.
        if (simd16::avx512() && unsafe { simd16::unary_in_place(u, x) }) || unsafe { simd8::unary_in_place(u, x) } {
            return;
        }
    }
    macro_rules! each {
        ($($k:ident),*) => {
            match u {
                $(UnaryKind::$k => x.iter_mut().for_each(|o| *o = UnaryKind::$k.eval(V32(*o)).0),)*
                _ => x.iter_mut().for_each(|o| *o = u.eval(*o)),
            }
        };
    }
    each!(Neg, Abs, Exp, Sqrt, Rsqrt, Recip, Square, Tanh, Sigmoid, Relu, Gelu, GeluTanh, Silu, Erf);
}

/// One loop per hot op, so that its expression is inlined and vectorized; others run `eval`.
/// With AVX2 + FMA, exp, erf, tanh, the GELUs, sigmoid and SiLU run hand-written 8-lane loops
/// (`simd8.rs`; 16 lanes on AVX-512 for some, `simd16.rs`).
#[inline(always)]
fn unary_body<const FMA: bool>(u: UnaryKind, x: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if FMA {
        // SAFETY: avx512() checked the CPU; FMA is only set inside code compiled for AVX2 + FMA on
        // a CPU that has them.
        if (simd16::avx512() && unsafe { simd16::unary(u, x, out) }) || unsafe { simd8::unary(u, x, out) } {
            return;
        }
    }
    macro_rules! each {
        ($($k:ident),*) => {
            match u {
                $(UnaryKind::$k => {
                    for (o, &v) in out.iter_mut().zip(x) {
                        *o = UnaryKind::$k.eval(V32(v)).0;
                    }
                })*
                _ => {
                    for (o, &v) in out.iter_mut().zip(x) {
                        *o = u.eval(v);
                    }
                }
            }
        };
    }
    each!(Neg, Abs, Exp, Sqrt, Rsqrt, Recip, Square, Tanh, Sigmoid, Relu, Gelu, GeluTanh, Silu, Erf);
}

#[inline(always)]
fn binary_body<const FMA: bool>(op: BinaryKind, a: &[f32], b: &[f32], out: &mut [f32]) {
    macro_rules! each {
        ($($k:ident),*) => {
            match op {
                $(BinaryKind::$k => {
                    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                        *o = BinaryKind::$k.eval(V32(x), V32(y)).0;
                    }
                })*
                _ => {
                    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                        *o = op.eval(x, y);
                    }
                }
            }
        };
    }
    each!(Add, Sub, Mul, Div, Maximum, Minimum);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worst(f: impl Fn(f32) -> f32, g: impl Fn(f64) -> f64) -> f64 {
        (-6000..6000).map(|i| i as f32 * 1.37e-3).map(|x| (f(x) as f64 - g(x as f64)).abs()).fold(0.0, f64::max)
    }

    #[test]
    fn tanh_and_erf_are_within_f32_tolerance_everywhere() {
        assert!(worst(tanh_f32, f64::tanh) < 4e-7, "tanh {}", worst(tanh_f32, f64::tanh));
        assert!(worst(erf_f32, Scalar::erf) < 4e-7, "erf {}", worst(erf_f32, Scalar::erf));
        // Tiny inputs keep their relative accuracy.
        assert!((tanh_f32(1e-6) - 1e-6).abs() < 1e-12);
        assert!((erf_f32(1e-6) as f64 - Scalar::erf(1e-6f64)).abs() < 1e-12);
        assert_eq!((tanh_f32(50.0), tanh_f32(-50.0), erf_f32(9.0), erf_f32(-9.0)), (1.0, -1.0, 1.0, -1.0));
        assert!(tanh_f32(f32::NAN).is_nan() && erf_f32(f32::NAN).is_nan());
    }

    #[test]
    fn simd_and_portable_loops_match_the_scalar_expressions() {
        let x: Vec<f32> = (0..300).map(|i| (i as f32 - 150.0) * 0.05).collect();
        let y: Vec<f32> = (0..300).map(|i| 0.5 + i as f32 * 0.01).collect();
        for u in [UnaryKind::Gelu, UnaryKind::GeluTanh, UnaryKind::Exp, UnaryKind::Silu, UnaryKind::Sin] {
            for simd in [false, avx2_fma()] {
                let mut out = vec![0.0; x.len()];
                unary_simd(simd, u, &x, &mut out);
                for (&o, &v) in out.iter().zip(&x) {
                    let want = u.eval(v as f64);
                    assert!((o as f64 - want).abs() <= 1e-6 + 1e-5 * want.abs(), "{u:?}({v}) = {o}, want {want}");
                }
            }
        }
        for op in [BinaryKind::Add, BinaryKind::Div, BinaryKind::Maximum, BinaryKind::Pow] {
            let mut out = vec![0.0; x.len()];
            binary_simd(avx2_fma(), op, &x, &y, &mut out);
            for ((&o, &a), &b) in out.iter().zip(&x).zip(&y) {
                let want = op.eval(a as f64, b as f64);
                let ok = (o as f64 - want).abs() <= 1e-6 + 1e-5 * want.abs() || (o.is_nan() && want.is_nan());
                assert!(ok, "{op:?}({a}, {b}) = {o}, want {want}");
            }
        }
    }
}
