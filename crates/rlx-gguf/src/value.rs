//! GGUF metadata values: the thirteen value types, including arrays nested to any depth.

use std::fmt;

/// A GGUF metadata value type id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// `uint8`.
    U8 = 0,
    /// `int8`.
    I8 = 1,
    /// `uint16`.
    U16 = 2,
    /// `int16`.
    I16 = 3,
    /// `uint32`.
    U32 = 4,
    /// `int32`.
    I32 = 5,
    /// `float32`.
    F32 = 6,
    /// `bool` (one byte, 0 or 1).
    Bool = 7,
    /// Length-prefixed UTF-8 string.
    String = 8,
    /// Typed, length-prefixed array.
    Array = 9,
    /// `uint64`.
    U64 = 10,
    /// `int64`.
    I64 = 11,
    /// `float64`.
    F64 = 12,
}

impl ValueType {
    /// The type for a raw id, or `None` when unknown.
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Fixed byte size of a scalar of this type; `None` for strings and arrays.
    pub fn scalar_size(self) -> Option<usize> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    /// Lower-case name, as in the GGUF spec.
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `uint8`.
    U8(u8),
    /// `int8`.
    I8(i8),
    /// `uint16`.
    U16(u16),
    /// `int16`.
    I16(i16),
    /// `uint32`.
    U32(u32),
    /// `int32`.
    I32(i32),
    /// `float32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// UTF-8 string.
    String(String),
    /// Array (possibly of arrays).
    Array(Array),
    /// `uint64`.
    U64(u64),
    /// `int64`.
    I64(i64),
    /// `float64`.
    F64(f64),
}

/// A typed metadata array; `Array` elements are arrays themselves, each with its own element type.
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    /// `uint8` elements.
    U8(Vec<u8>),
    /// `int8` elements.
    I8(Vec<i8>),
    /// `uint16` elements.
    U16(Vec<u16>),
    /// `int16` elements.
    I16(Vec<i16>),
    /// `uint32` elements.
    U32(Vec<u32>),
    /// `int32` elements.
    I32(Vec<i32>),
    /// `float32` elements.
    F32(Vec<f32>),
    /// `bool` elements.
    Bool(Vec<bool>),
    /// String elements.
    String(Vec<String>),
    /// Nested arrays.
    Array(Vec<Array>),
    /// `uint64` elements.
    U64(Vec<u64>),
    /// `int64` elements.
    I64(Vec<i64>),
    /// `float64` elements.
    F64(Vec<f64>),
}

impl Value {
    /// The value's type id.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// The type as listed by `inspect`: `u32`, `string`, or `f32[3]` for arrays.
    pub fn type_label(&self) -> String {
        match self {
            Value::Array(a) => format!("{}[{}]", a.element_type().name(), a.len()),
            v => v.value_type().name().to_string(),
        }
    }

    /// The value as an unsigned integer, for any integer type holding a non-negative value.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer, for any integer type that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, for float types.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    /// The string, for string values.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The array, for array values.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl Array {
    /// The element type.
    pub fn element_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Writes at most `limit` elements of a slice, then `... (N total)`.
fn write_list<T: fmt::Debug>(f: &mut fmt::Formatter<'_>, items: &[T], limit: usize) -> fmt::Result {
    f.write_str("[")?;
    for (i, item) in items.iter().take(limit).enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{item:?}")?;
    }
    if items.len() > limit {
        write!(f, ", ... ({} total)", items.len())?;
    }
    f.write_str("]")
}

impl fmt::Display for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const LIMIT: usize = 8;
        match self {
            Array::U8(v) => write_list(f, v, LIMIT),
            Array::I8(v) => write_list(f, v, LIMIT),
            Array::U16(v) => write_list(f, v, LIMIT),
            Array::I16(v) => write_list(f, v, LIMIT),
            Array::U32(v) => write_list(f, v, LIMIT),
            Array::I32(v) => write_list(f, v, LIMIT),
            Array::F32(v) => write_list(f, v, LIMIT),
            Array::Bool(v) => write_list(f, v, LIMIT),
            Array::String(v) => write_list(f, v, LIMIT),
            Array::U64(v) => write_list(f, v, LIMIT),
            Array::I64(v) => write_list(f, v, LIMIT),
            Array::F64(v) => write_list(f, v, LIMIT),
            Array::Array(v) => {
                f.write_str("[")?;
                for (i, a) in v.iter().take(LIMIT).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                if v.len() > LIMIT {
                    write!(f, ", ... ({} total)", v.len())?;
                }
                f.write_str("]")
            }
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v:?}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(v) => write!(f, "{v:?}"),
            Value::Array(a) => write!(f, "{a}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v:?}"),
        }
    }
}
