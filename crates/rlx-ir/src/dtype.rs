//! Element types and numpy-like type promotion.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// bfloat16.
    BF16,
    /// 64-bit IEEE float.
    F64,
    /// Signed 8-bit integer.
    I8,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 32-bit integer.
    U32,
    /// Boolean (one byte, 0 or 1).
    Bool,
    /// Complex with f32 real and imaginary parts.
    C64,
}

/// The broad class a dtype belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DTypeClass {
    /// Boolean.
    Bool,
    /// Signed or unsigned integer.
    Int,
    /// Real floating point.
    Float,
    /// Complex.
    Complex,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 12] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U32,
        DType::Bool,
        DType::C64,
    ];
    /// The real floating dtypes.
    pub const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
    /// The integer dtypes.
    pub const INTS: [DType; 6] = [DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::U32];
    /// Floats and integers (the dtypes arithmetic kernels take).
    pub const NUMERIC: [DType; 10] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U32,
    ];
    /// Floats, integers and bool (everything but complex).
    pub const REAL_AND_BOOL: [DType; 11] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U32,
        DType::Bool,
    ];

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::C64 => 8,
        }
    }

    /// The class (bool, int, float, complex).
    pub fn class(self) -> DTypeClass {
        match self {
            DType::Bool => DTypeClass::Bool,
            DType::I8 | DType::I16 | DType::I32 | DType::I64 | DType::U8 | DType::U32 => DTypeClass::Int,
            DType::F32 | DType::F16 | DType::BF16 | DType::F64 => DTypeClass::Float,
            DType::C64 => DTypeClass::Complex,
        }
    }

    /// True for real floating types.
    pub fn is_float(self) -> bool {
        self.class() == DTypeClass::Float
    }

    /// True for integer types (not bool).
    pub fn is_int(self) -> bool {
        self.class() == DTypeClass::Int
    }

    /// True for unsigned integer types.
    pub fn is_unsigned(self) -> bool {
        matches!(self, DType::U8 | DType::U32)
    }

    /// Short lowercase name, as in the text form (`f32`, `bf16`, `bool`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::Bool => "bool",
            DType::C64 => "c64",
        }
    }

    /// Parses a short name (`f32`, ...).
    pub fn from_name(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Range of an integer dtype as (min, max); None for others.
    pub fn int_range(self) -> Option<(i64, i64)> {
        Some(match self {
            DType::I8 => (i8::MIN as i64, i8::MAX as i64),
            DType::I16 => (i16::MIN as i64, i16::MAX as i64),
            DType::I32 => (i32::MIN as i64, i32::MAX as i64),
            DType::I64 => (i64::MIN, i64::MAX),
            DType::U8 => (0, u8::MAX as i64),
            DType::U32 => (0, u32::MAX as i64),
            _ => return None,
        })
    }

    /// numpy-like promotion of two dtypes: bool < ints < floats < complex; within a class the
    /// wider type wins; signed/unsigned mixes go to a signed type wide enough; f16 with bf16 gives f32.
    pub fn promote(a: DType, b: DType) -> DType {
        use DTypeClass as C;
        if a == b {
            return a;
        }
        match (a.class(), b.class()) {
            (C::Complex, _) | (_, C::Complex) => DType::C64,
            (C::Bool, _) => b,
            (_, C::Bool) => a,
            (C::Float, C::Float) => {
                let rank = |d| match d {
                    DType::F16 | DType::BF16 => 1,
                    DType::F32 => 2,
                    _ => 3,
                };
                match (rank(a), rank(b)) {
                    (1, 1) => DType::F32,
                    (ra, rb) if ra >= rb => a,
                    _ => b,
                }
            }
            (C::Float, C::Int) => a,
            (C::Int, C::Float) => b,
            (C::Int, C::Int) => {
                let (amin, amax) = a.int_range().unwrap_or((0, 0));
                let (bmin, bmax) = b.int_range().unwrap_or((0, 0));
                let (lo, hi) = (amin.min(bmin), amax.max(bmax));
                [DType::U8, DType::I8, DType::I16, DType::U32, DType::I32, DType::I64]
                    .into_iter()
                    .find(|d| {
                        let (dl, dh) = d.int_range().unwrap_or((0, 0));
                        dl <= lo && dh >= hi
                    })
                    .unwrap_or(DType::I64)
            }
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_follows_numpy() {
        assert_eq!(DType::promote(DType::F32, DType::F64), DType::F64);
        assert_eq!(DType::promote(DType::I32, DType::F32), DType::F32);
        assert_eq!(DType::promote(DType::Bool, DType::I8), DType::I8);
        assert_eq!(DType::promote(DType::U8, DType::I8), DType::I16);
        assert_eq!(DType::promote(DType::U32, DType::I32), DType::I64);
        assert_eq!(DType::promote(DType::F16, DType::BF16), DType::F32);
        assert_eq!(DType::promote(DType::C64, DType::F64), DType::C64);
    }

    #[test]
    fn promotion_is_commutative() {
        for a in DType::ALL {
            for b in DType::ALL {
                assert_eq!(DType::promote(a, b), DType::promote(b, a), "{a} {b}");
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
    }
}
