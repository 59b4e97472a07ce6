//! Shared pieces of the native composite kernels (nn.rs, attention.rs): the compute type of each
//! storage dtype, a vectorizable `exp`, run-time SIMD selection and a pointer that tasks share.

use crate::elem::FloatElem;
use half::{bf16, f16};
use std::ops::{Add, Div, Mul, Sub};
use std::sync::OnceLock;

/// The arithmetic type of a kernel: f32 (for f32, f16, bf16 storage) or f64.
pub trait Real:
    Copy
    + Send
    + Sync
    + 'static
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// Negative infinity.
    const NEG_INF: Self;
    /// Not a number.
    const NAN: Self;
    /// Whether this is NaN.
    fn is_nan(self) -> bool;
    /// `e^x`: a polynomial that vectorizes for f32 (within 2 ulp), the std one for f64.
    fn exp(self) -> Self;
    /// `ln(1 + e^x)`: without calls for f32 (so loops vectorize), libm's for f64.
    fn softplus(self) -> Self;
    /// Natural log (scalar; used once per row).
    fn ln(self) -> Self;
    /// Square root (scalar; used once per row).
    fn sqrt(self) -> Self;
    /// From f64 (rounded).
    fn from_f64(v: f64) -> Self;
    /// To f64 (exact).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // Only the x86 dense attention reads it.
    fn to_f64(self) -> f64;
    /// `a * b + c`, fused when `FMA` (only set inside code compiled with the FMA feature).
    fn madd<const FMA: bool>(a: Self, b: Self, c: Self) -> Self;
    /// The larger of two values; NaN in `b` wins, so a NaN row stays NaN.
    #[inline(always)]
    fn max_nan(a: Self, b: Self) -> Self {
        if b > a || Self::is_nan(b) { b } else { a }
    }
}

impl Real for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    const NEG_INF: f32 = f32::NEG_INFINITY;
    const NAN: f32 = f32::NAN;
    #[inline(always)]
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    #[inline(always)]
    fn exp(self) -> f32 {
        exp_f32(self)
    }
    #[inline(always)]
    fn softplus(self) -> f32 {
        softplus_f32(self)
    }
    fn ln(self) -> f32 {
        f32::ln(self)
    }
    fn sqrt(self) -> f32 {
        f32::sqrt(self)
    }
    #[inline(always)]
    fn from_f64(v: f64) -> f32 {
        v as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
        if FMA { a.mul_add(b, c) } else { a * b + c }
    }
}

impl Real for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    const NEG_INF: f64 = f64::NEG_INFINITY;
    const NAN: f64 = f64::NAN;
    #[inline(always)]
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    #[inline(always)]
    fn exp(self) -> f64 {
        f64::exp(self)
    }
    #[inline(always)]
    fn softplus(self) -> f64 {
        self.max(0.0) + (-self.abs()).exp().ln_1p()
    }
    fn ln(self) -> f64 {
        f64::ln(self)
    }
    fn sqrt(self) -> f64 {
        f64::sqrt(self)
    }
    #[inline(always)]
    fn from_f64(v: f64) -> f64 {
        v
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn madd<const FMA: bool>(a: f64, b: f64, c: f64) -> f64 {
        if FMA { a.mul_add(b, c) } else { a * b + c }
    }
}

/// `ln(1 + e^x)` in f32 without calls, so loops vectorize: `max(x, 0) + ln(1 + y)` with
/// `y = e^-|x|` in (0, 1], and `ln(1 + y) = 2 atanh(s)`, `s = y / (2 + y) <= 1/3`, by its odd
/// series to `s^15` (truncation below 4e-10, so f32 rounding dominates). NaN stays NaN.
#[inline(always)]
pub fn softplus_f32(x: f32) -> f32 {
    let y = exp_f32(-x.abs());
    let s = y / (2.0 + y);
    let s2 = s * s;
    let mut p = 1.0 / 15.0;
    for c in [1.0 / 13.0, 1.0 / 11.0, 1.0 / 9.0, 1.0 / 7.0, 1.0 / 5.0, 1.0 / 3.0, 1.0] {
        p = p * s2 + c;
    }
    x.max(0.0) + 2.0 * s * p
}

/// `e^x` in f32 without branches or calls, so loops over it vectorize: Cephes' range reduction
/// and degree-6 polynomial. Overflow gives inf, underflow (below -87.3) gives 0, NaN stays NaN.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // 1.5 * 2^23: adding and subtracting it rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let xc = if x > 88.376_26 { 88.376_26 } else { x };
    let xc = if xc < -87.336_55 { -87.336_55 } else { xc };
    let t = xc * LOG2E + ROUND;
    let n = t - ROUND;
    // The integer n read off t's low mantissa bits: `n as i32` saturates, which LLVM does not
    // vectorize (each lane went through a general register, slowing the softmax op: session 18
    // in docs/benchmarks-history.md).
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = xc - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    let scale = f32::from_bits((ni.wrapping_add(127) as u32) << 23);
    // Underflow is zeroed before the scaling: the product would be subnormal (a microcode assist
    // on Intel).
    let y = if x < -87.336_55 { 0.0 } else { y };
    let y = y * scale;
    if x > 88.722_83 { f32::INFINITY } else { y }
}

/// Sum of `f(x)` over a lane with 8 independent partial sums (vectorizes, and keeps the
/// rounding error low).
#[inline(always)]
pub fn sum8<C: Real>(v: &[C], f: impl Fn(C) -> C) -> C {
    let mut acc = [C::ZERO; 8];
    let mut chunks = v.chunks_exact(8);
    for c in &mut chunks {
        for k in 0..8 {
            acc[k] = acc[k] + f(c[k]);
        }
    }
    let mut s = C::ZERO;
    for &x in chunks.remainder() {
        s = s + f(x);
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + s
}

/// 32 partial sums folded to one.
#[inline(always)]
fn fold32<C: Real>(x: [C; 32]) -> C {
    let mut r = [C::ZERO; 8];
    for (k, &y) in x.iter().enumerate() {
        r[k % 8] = r[k % 8] + y;
    }
    ((r[0] + r[4]) + (r[1] + r[5])) + ((r[2] + r[6]) + (r[3] + r[7]))
}

/// `sum f(x)` over `v` with 32 partial sums: four independent 8-lane chains, so a long row is
/// not bound by the add latency (`sum8` has one chain). Vectorizes.
#[inline(always)]
pub fn sum32<C: Real>(v: &[C], f: impl Fn(C) -> C) -> C {
    let mut a = [C::ZERO; 32];
    let mut chunks = v.chunks_exact(32);
    for c in &mut chunks {
        for k in 0..32 {
            a[k] = a[k] + f(c[k]);
        }
    }
    fold32(a) + sum8(chunks.remainder(), f)
}

/// `(sum f(x), sum g(x))` over `v` in one pass, as `sum32`.
#[inline(always)]
pub fn sum32x2<C: Real>(v: &[C], f: impl Fn(C) -> C, g: impl Fn(C) -> C) -> (C, C) {
    let (mut a, mut b) = ([C::ZERO; 32], [C::ZERO; 32]);
    let mut chunks = v.chunks_exact(32);
    for c in &mut chunks {
        for k in 0..32 {
            a[k] = a[k] + f(c[k]);
            b[k] = b[k] + g(c[k]);
        }
    }
    let rest = chunks.remainder();
    (fold32(a) + sum8(rest, &f), fold32(b) + sum8(rest, &g))
}

/// The largest value of a lane (-inf when empty); NaN if any value is NaN. Vectorizes.
#[inline(always)]
pub fn max8<C: Real>(v: &[C]) -> C {
    let mut acc = [C::NEG_INF; 8];
    let mut chunks = v.chunks_exact(8);
    for c in &mut chunks {
        for k in 0..8 {
            acc[k] = C::max_nan(acc[k], c[k]);
        }
    }
    let mut m = C::NEG_INF;
    for &x in chunks.remainder().iter().chain(&acc) {
        m = C::max_nan(m, x);
    }
    m
}

/// `v[i] = exp(v[i] - m)` (vectorizes for f32).
#[inline(always)]
pub fn exp_shift<C: Real>(v: &mut [C], m: C) {
    for x in v.iter_mut() {
        *x = (*x - m).exp();
    }
}

/// A storage dtype and its compute type.
pub trait Compute: FloatElem {
    /// The arithmetic type.
    type C: Real;
    /// Widens to the compute type.
    fn load(self) -> Self::C;
    /// Rounds from the compute type.
    fn store(c: Self::C) -> Self;
    /// Widens `src` into `dst` (equal lengths); f16 overrides it with the vector conversion.
    #[inline(always)]
    fn load_slice(src: &[Self], dst: &mut [Self::C]) {
        dst.iter_mut().zip(src).for_each(|(d, &s)| *d = s.load());
    }
}

impl Compute for f32 {
    type C = f32;
    #[inline(always)]
    fn load(self) -> f32 {
        self
    }
    #[inline(always)]
    fn store(c: f32) -> f32 {
        c
    }
}

impl Compute for f64 {
    type C = f64;
    #[inline(always)]
    fn load(self) -> f64 {
        self
    }
    #[inline(always)]
    fn store(c: f64) -> f64 {
        c
    }
}

impl Compute for f16 {
    type C = f32;
    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn store(c: f32) -> f16 {
        f16::from_f32(c)
    }
    /// `half`'s slice conversion takes F16C eight at a time where the CPU has it; element by
    /// element, each value is a call.
    #[inline(always)]
    fn load_slice(src: &[f16], dst: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        src.convert_to_f32_slice(dst);
    }
}

impl Compute for bf16 {
    type C = f32;
    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn store(c: f32) -> bf16 {
        bf16::from_f32(c)
    }
}

/// Whether the AVX2+FMA paths run: detected once; `RLX_CPU_SIMD=scalar` forces the portable path.
pub fn avx2_fma() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        if rlx_driver::config().cpu.simd == rlx_driver::config::IsaCap::Scalar {
            return false;
        }
        #[cfg(target_arch = "x86_64")]
        {
            std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Defines `fn $name(simd, args..)` that runs `$body::<.., true>` compiled for AVX2+FMA when
/// `simd` (the caller checked `avx2_fma()`), else the portable `$body::<.., false>`. `$body`
/// must be `#[inline(always)]` so that it is compiled inside the feature-enabled function.
#[macro_export]
#[doc(hidden)]
macro_rules! simd_entry {
    ($v:vis $name:ident = $body:ident <$($g:ident: $b:path),*> ($($a:ident: $t:ty),*)) => {
        #[allow(clippy::too_many_arguments)]
        $v fn $name<$($g: $b),*>(simd: bool, $($a: $t),*) {
            #[cfg(target_arch = "x86_64")]
            if simd {
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn fast<$($g: $b),*>($($a: $t),*) {
                    $body::<$($g,)* true>($($a),*)
                }
                // SAFETY: `simd` is only true when the CPU has AVX2 and FMA (`avx2_fma`).
                return unsafe { fast::<$($g),*>($($a),*) };
            }
            let _ = simd;
            $body::<$($g,)* false>($($a),*)
        }
    };
}

/// A raw pointer that tasks of one `parallel_for` share; each task touches a disjoint range.
#[derive(Clone, Copy)]
pub struct SharedMut<T>(pub *mut T);

// SAFETY: tasks write disjoint ranges and the owner waits for all of them (`parallel_for`).
unsafe impl<T: Send> Sync for SharedMut<T> {}
unsafe impl<T: Send> Send for SharedMut<T> {}

impl<T> SharedMut<T> {
    /// Writes element `i`.
    ///
    /// # Safety
    /// `i` lies inside the allocation and no other live reference covers it.
    #[inline(always)]
    pub unsafe fn write(&self, i: usize, v: T) {
        // SAFETY: the caller's contract.
        unsafe { *self.0.add(i) = v }
    }

    /// Elements `start..start + len`.
    ///
    /// # Safety
    /// The range lies inside the allocation and no other live reference overlaps it.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_f32_is_within_two_ulp_and_handles_the_edges() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let (got, want) = (exp_f32(x) as f64, (x as f64).exp());
            worst = worst.max(((got - want) / want).abs());
            x += 0.0137;
        }
        assert!(worst < 2.5e-7, "worst relative error {worst}");
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-100.0), 0.0);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(0.0), 1.0);
    }
}
