//! Element types as Rust types, and macros that pick the type from a `DType`.

use half::{bf16, f16};
use rlx_ir::Scalar;

/// A plain element stored in the arena.
pub trait Elem: bytemuck::Pod + Send + Sync + 'static {}

/// A real float element: computes through the shared `Scalar` expressions.
pub trait FloatElem: Elem + Scalar + PartialOrd {
    /// Widens to f64.
    fn to_f64(self) -> f64;
    /// Narrows from f64 (round to nearest).
    fn from_f64(v: f64) -> Self;
}

/// An integer element.
pub trait IntElem: Elem + Ord {
    /// Widens to i64.
    fn to_i64(self) -> i64;
    /// Narrows from i64, wrapping as a cast does.
    fn from_i64(v: i64) -> Self;
}

macro_rules! float_elem {
    ($($t:ty: $to:expr, $from:expr;)*) => {$(
        impl Elem for $t {}
        impl FloatElem for $t {
            #[inline(always)]
            fn to_f64(self) -> f64 { ($to)(self) }
            #[inline(always)]
            fn from_f64(v: f64) -> Self { ($from)(v) }
        }
    )*};
}

float_elem! {
    f32: |x: f32| x as f64, |v: f64| v as f32;
    f64: |x: f64| x, |v: f64| v;
    f16: |x: f16| x.to_f64(), f16::from_f64;
    bf16: |x: bf16| x.to_f64(), bf16::from_f64;
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {}
        impl IntElem for $t {
            #[inline(always)]
            fn to_i64(self) -> i64 { self as i64 }
            #[inline(always)]
            fn from_i64(v: i64) -> Self { v as $t }
        }
    )*};
}

int_elem!(i8, i16, i32, i64, u8, u32);

/// Runs `$body` with `$T` bound to the float type of `$dt`; `$else` otherwise.
#[macro_export]
macro_rules! with_float {
    ($dt:expr, $T:ident => $body:expr, else $else:expr) => {
        match $dt {
            rlx_ir::DType::F32 => {
                type $T = f32;
                $body
            }
            rlx_ir::DType::F64 => {
                type $T = f64;
                $body
            }
            rlx_ir::DType::F16 => {
                type $T = half::f16;
                $body
            }
            rlx_ir::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            _ => $else,
        }
    };
}

/// Runs `$body` with `$T` bound to the integer type of `$dt`; `$else` otherwise.
#[macro_export]
macro_rules! with_int {
    ($dt:expr, $T:ident => $body:expr, else $else:expr) => {
        match $dt {
            rlx_ir::DType::I8 => {
                type $T = i8;
                $body
            }
            rlx_ir::DType::I16 => {
                type $T = i16;
                $body
            }
            rlx_ir::DType::I32 => {
                type $T = i32;
                $body
            }
            rlx_ir::DType::I64 => {
                type $T = i64;
                $body
            }
            rlx_ir::DType::U8 => {
                type $T = u8;
                $body
            }
            rlx_ir::DType::U32 => {
                type $T = u32;
                $body
            }
            _ => $else,
        }
    };
}
