//! f16/bf16 storage computed in f32: a chunk is widened with SIMD (F16C, or a 16-bit shift for
//! bf16), run through the vectorized f32 loops of `vec32.rs`, and narrowed back with one
//! round-to-nearest-even. Generic kernels call these through `TypeId` checks, as `vec32` does.

use super::math::Compute;
use crate::gemm::half::{self as half_convert, HalfElem};
use half::{bf16, f16};
use rlx_ir::ops::UnaryKind;
use std::any::TypeId;

/// Elements converted at a time (stack buffers that stay in L1).
pub const CHUNK: usize = 256;

/// `x` as a slice of `H` when `T` is `H`.
#[inline(always)]
pub fn cast<T: 'static, H: 'static>(x: &[T]) -> Option<&[H]> {
    // SAFETY: T is H (checked by TypeId), so the layout is identical.
    (TypeId::of::<T>() == TypeId::of::<H>()).then(|| unsafe { &*(x as *const [T] as *const [H]) })
}

/// `x` as a mutable slice of `H` when `T` is `H`.
#[inline(always)]
pub fn cast_mut<T: 'static, H: 'static>(x: &mut [T]) -> Option<&mut [H]> {
    // SAFETY: as above.
    (TypeId::of::<T>() == TypeId::of::<H>()).then(|| unsafe { &mut *(x as *mut [T] as *mut [H]) })
}

/// Whether `T` is f16 or bf16.
#[inline(always)]
pub fn is_half<T: 'static>() -> bool {
    TypeId::of::<T>() == TypeId::of::<f16>() || TypeId::of::<T>() == TypeId::of::<bf16>()
}

/// `dst[i] = src[i]` widened exactly to f32 (SIMD when the CPU has it; `simd` false forces the
/// portable loop). The slices have the same length.
#[inline]
pub fn widen_with<H: HalfElem>(simd: bool, src: &[H], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "widen: length mismatch");
    // SAFETY: both slices hold src.len() elements.
    unsafe { half_convert::widen_isa(simd, src.as_ptr(), src.len(), dst.as_mut_ptr()) }
}

/// `dst[i] = H::from_f32(src[i])`, rounding to nearest even (SIMD when the CPU has it).
#[inline]
pub fn narrow_with<H: HalfElem>(simd: bool, src: &[f32], dst: &mut [H]) {
    assert_eq!(src.len(), dst.len(), "narrow: length mismatch");
    // SAFETY: both slices hold src.len() elements.
    unsafe { half_convert::narrow_isa(simd, src.as_ptr(), src.len(), dst.as_mut_ptr()) }
}

/// `widen_with` on the ISA detected at start-up.
#[inline]
pub fn widen<H: HalfElem>(src: &[H], dst: &mut [f32]) {
    widen_with(half_convert::simd(), src, dst)
}

/// `narrow_with` on the ISA detected at start-up.
#[inline]
pub fn narrow<H: HalfElem>(src: &[f32], dst: &mut [H]) {
    narrow_with(half_convert::simd(), src, dst)
}

/// Widens `src` into `dst` when `T` is f16/bf16 and returns true; false (and `dst` untouched)
/// for other types.
#[inline]
pub fn widen_any<T: 'static>(src: &[T], dst: &mut [f32]) -> bool {
    if let Some(s) = cast::<T, f16>(src) {
        widen(s, dst);
    } else if let Some(s) = cast::<T, bf16>(src) {
        widen(s, dst);
    } else {
        return false;
    }
    true
}

/// `dst[i] = src[i].load()`: widened with SIMD when `T` is f16/bf16, a plain loop otherwise.
#[inline]
pub fn load<T: Compute>(src: &[T], dst: &mut [T::C]) {
    if let Some(d) = cast_mut::<T::C, f32>(dst) {
        if let Some(s) = cast::<T, f16>(src) {
            return widen(s, d);
        }
        if let Some(s) = cast::<T, bf16>(src) {
            return widen(s, d);
        }
    }
    dst.iter_mut().zip(src).for_each(|(d, &s)| *d = s.load());
}

/// `dst[i] = T::store(src[i])`: narrowed with SIMD when `T` is f16/bf16.
#[inline]
pub fn store<T: Compute>(src: &[T::C], dst: &mut [T]) {
    if let Some(s) = cast::<T::C, f32>(src) {
        if let Some(d) = cast_mut::<T, f16>(dst) {
            return narrow(s, d);
        }
        if let Some(d) = cast_mut::<T, bf16>(dst) {
            return narrow(s, d);
        }
    }
    dst.iter_mut().zip(src).for_each(|(d, &s)| *d = T::store(s));
}

/// `out = u(x)` in f32 when `T` is f16/bf16 (false otherwise: the caller runs its own loop).
pub fn unary<T: 'static>(u: UnaryKind, x: &[T], out: &mut [T]) -> bool {
    if let (Some(x), Some(o)) = (cast::<T, f16>(x), cast_mut::<T, f16>(out)) {
        unary_h(u, x, o);
    } else if let (Some(x), Some(o)) = (cast::<T, bf16>(x), cast_mut::<T, bf16>(out)) {
        unary_h(u, x, o);
    } else {
        return false;
    }
    true
}

fn unary_h<H: HalfElem>(u: UnaryKind, x: &[H], out: &mut [H]) {
    let (mut a, mut b) = ([0f32; CHUNK], [0f32; CHUNK]);
    for (xc, oc) in x.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
        let n = xc.len();
        widen(xc, &mut a[..n]);
        super::vec32::unary(u, &a[..n], &mut b[..n]);
        narrow(&b[..n], oc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::Scalar;

    /// Every bit pattern, forced through the portable and the SIMD conversions, matches `half`
    /// (narrowing bit for bit, NaN included).
    #[test]
    fn portable_and_simd_conversions_match_half_bit_for_bit() {
        let f: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let b: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        let mut src: Vec<f32> = (0..100_003u32).map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761))).collect();
        src.extend([f32::MIN_POSITIVE / 3.0, -1e-40, 65504.0, 65520.0, f32::NAN, -f32::NAN, f32::INFINITY]);
        for simd in [false, half_convert::simd()] {
            let mut w = vec![0f32; f.len()];
            // NaN widens to NaN (`half` quiets a signalling bf16 NaN; the shift keeps its payload).
            let same = |x: f32, y: f32| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
            widen_with(simd, &f, &mut w);
            assert!(f.iter().zip(&w).all(|(x, &y)| same(x.to_f32(), y)), "f16 widen simd={simd}");
            widen_with(simd, &b, &mut w);
            assert!(b.iter().zip(&w).all(|(x, &y)| same(x.to_f32(), y)), "bf16 widen simd={simd}");
            // Odd lengths: the vector body and the scalar tail.
            for len in [src.len(), 13, 7, 1] {
                let s = &src[..len];
                let (mut nf, mut nb) = (vec![f16::ZERO; len], vec![bf16::ZERO; len]);
                narrow_with(simd, s, &mut nf);
                narrow_with(simd, s, &mut nb);
                for (i, &x) in s.iter().enumerate() {
                    assert_eq!(nf[i].to_bits(), f16::from_f32(x).to_bits(), "f16 of {x:e} simd={simd}");
                    assert_eq!(nb[i].to_bits(), bf16::from_f32(x).to_bits(), "bf16 of {x:e} simd={simd}");
                }
            }
        }
    }

    /// A half unary op equals the f32 op on the widened input, rounded once.
    #[test]
    fn unary_rounds_the_f32_result_once() {
        let x: Vec<bf16> = (0..1000).map(|i| bf16::from_f32((i as f32 - 500.0) * 0.013)).collect();
        let mut out = vec![bf16::ZERO; x.len()];
        assert!(unary(UnaryKind::Exp, &x, &mut out));
        for (o, v) in out.iter().zip(&x) {
            let want = Scalar::exp(v.to_f32() as f64);
            assert!((o.to_f64() - want).abs() <= want * 2f64.powi(-8) * 1.01, "exp({v}) = {o}, want {want}");
        }
        let mut f = vec![0f32; 3];
        assert!(!unary(UnaryKind::Exp, &[1f32, 2.0, 3.0], &mut f), "f32 is not a half type");
    }
}
