//! Host tensors: the values the reference interpreter computes on and tests compare.
//!
//! Values are stored widened (floats as f64, integers as i64) but always rounded to their dtype,
//! so an f32 tensor holds exactly the f32 values.

use crate::{DType, DTypeClass, Error, Result, Shape};
use half::{bf16, f16};
use serde::{Deserialize, Serialize};

/// Widened element storage; the variant follows the dtype's class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Data {
    /// Real floats (f16, bf16, f32, f64), rounded to the dtype.
    F(#[serde(with = "float_vec")] Vec<f64>),
    /// Integers, wrapped to the dtype's range.
    I(Vec<i64>),
    /// Booleans.
    B(Vec<bool>),
    /// Complex numbers as (re, im), each rounded to f32 for c64.
    C(Vec<[f64; 2]>),
}

impl Data {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Data::F(v) => v.len(),
            Data::I(v) => v.len(),
            Data::B(v) => v.len(),
            Data::C(v) => v.len(),
        }
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Zeros of the class of `dtype`.
    pub fn zeros(dtype: DType, n: usize) -> Data {
        match dtype.class() {
            DTypeClass::Float => Data::F(vec![0.0; n]),
            DTypeClass::Int => Data::I(vec![0; n]),
            DTypeClass::Bool => Data::B(vec![false; n]),
            DTypeClass::Complex => Data::C(vec![[0.0; 2]; n]),
        }
    }

    /// Writes elements by index: `self[idx[i]] = vals[i]` (same variant; others are ignored).
    pub fn scatter(&mut self, idx: &[usize], vals: &Data) {
        match (self, vals) {
            (Data::F(d), Data::F(v)) => idx.iter().zip(v).for_each(|(&i, &x)| d[i] = x),
            (Data::I(d), Data::I(v)) => idx.iter().zip(v).for_each(|(&i, &x)| d[i] = x),
            (Data::B(d), Data::B(v)) => idx.iter().zip(v).for_each(|(&i, &x)| d[i] = x),
            (Data::C(d), Data::C(v)) => idx.iter().zip(v).for_each(|(&i, &x)| d[i] = x),
            _ => {}
        }
    }

    /// Picks elements by index: `out[i] = self[idx[i]]`.
    pub fn gather(&self, idx: &[usize]) -> Data {
        match self {
            Data::F(v) => Data::F(idx.iter().map(|&i| v[i]).collect()),
            Data::I(v) => Data::I(idx.iter().map(|&i| v[i]).collect()),
            Data::B(v) => Data::B(idx.iter().map(|&i| v[i]).collect()),
            Data::C(v) => Data::C(idx.iter().map(|&i| v[i]).collect()),
        }
    }

    /// Concatenates several data of the same class.
    pub fn concat(parts: &[&Data]) -> Option<Data> {
        let first = parts.first()?;
        macro_rules! cat {
            ($var:ident) => {{
                let mut out = vec![];
                for p in parts {
                    match p {
                        Data::$var(v) => out.extend_from_slice(v),
                        _ => return None,
                    }
                }
                Data::$var(out)
            }};
        }
        Some(match first {
            Data::F(_) => cat!(F),
            Data::I(_) => cat!(I),
            Data::B(_) => cat!(B),
            Data::C(_) => cat!(C),
        })
    }
}

/// A tensor on the host with a static shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostTensor {
    /// Type; always static.
    pub shape: Shape,
    /// Elements in row-major order.
    pub data: Data,
}

/// Rounds a widened float to `dtype`'s precision.
pub fn round_float(v: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F32 | DType::C64 => v as f32 as f64,
        DType::F16 => f16::from_f64(v).to_f64(),
        DType::BF16 => bf16::from_f64(v).to_f64(),
        _ => v,
    }
}

/// Wraps a widened integer to `dtype`'s range (two's complement, as a cast would).
pub fn wrap_int(v: i64, dtype: DType) -> i64 {
    match dtype {
        DType::I8 => v as i8 as i64,
        DType::I16 => v as i16 as i64,
        DType::I32 => v as i32 as i64,
        DType::U8 => v as u8 as i64,
        DType::U32 => v as u32 as i64,
        _ => v,
    }
}

impl HostTensor {
    /// Builds a tensor, checking the element count and class, and rounding to the dtype.
    pub fn new(shape: Shape, data: Data) -> Result<Self> {
        let n = shape.numel().ok_or_else(|| Error::UnboundDim {
            symbol: shape.symbols().next().unwrap_or("?").to_string(),
            context: "a host tensor".into(),
        })?;
        let class_ok = matches!(
            (&data, shape.dtype.class()),
            (Data::F(_), DTypeClass::Float)
                | (Data::I(_), DTypeClass::Int)
                | (Data::B(_), DTypeClass::Bool)
                | (Data::C(_), DTypeClass::Complex)
        );
        if !class_ok || data.len() != n {
            return Err(Error::eval(
                "tensor",
                format!("data ({} elements of the wrong class or count) does not fit {shape}", data.len()),
            ));
        }
        let mut t = HostTensor { shape, data };
        t.round_in_place();
        Ok(t)
    }

    /// An f32 tensor.
    pub fn from_f32(dims: &[usize], v: &[f32]) -> Result<Self> {
        Self::new(Shape::new(dims, DType::F32), Data::F(v.iter().map(|&x| x as f64).collect()))
    }

    /// A float tensor of any float dtype, from f64 values (rounded).
    pub fn from_f64(dims: &[usize], dtype: DType, v: &[f64]) -> Result<Self> {
        Self::new(Shape::new(dims, dtype), Data::F(v.to_vec()))
    }

    /// An integer tensor of any integer dtype.
    pub fn from_i64(dims: &[usize], dtype: DType, v: &[i64]) -> Result<Self> {
        Self::new(Shape::new(dims, dtype), Data::I(v.to_vec()))
    }

    /// A bool tensor.
    pub fn from_bool(dims: &[usize], v: &[bool]) -> Result<Self> {
        Self::new(Shape::new(dims, DType::Bool), Data::B(v.to_vec()))
    }

    /// Zeros of a static shape.
    pub fn zeros(shape: &Shape) -> Result<Self> {
        let n = shape.numel().unwrap_or(0);
        Self::new(shape.clone(), Data::zeros(shape.dtype, n))
    }

    /// Every element set to `value` (converted to the dtype).
    pub fn full(shape: &Shape, value: f64) -> Result<Self> {
        let n = shape.numel().unwrap_or(0);
        let data = match shape.dtype.class() {
            DTypeClass::Float => Data::F(vec![value; n]),
            DTypeClass::Int => Data::I(vec![float_to_int(value); n]),
            DTypeClass::Bool => Data::B(vec![value != 0.0; n]),
            DTypeClass::Complex => Data::C(vec![[value, 0.0]; n]),
        };
        Self::new(shape.clone(), data)
    }

    /// The static dims.
    pub fn dims(&self) -> Vec<usize> {
        self.shape.fixed_dims().unwrap_or_default()
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.shape.dtype
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// Rounds floats and wraps integers to the dtype.
    pub fn round_in_place(&mut self) {
        let dt = self.shape.dtype;
        match &mut self.data {
            Data::F(v) if dt != DType::F64 => v.iter_mut().for_each(|x| *x = round_float(*x, dt)),
            Data::I(v) => v.iter_mut().for_each(|x| *x = wrap_int(*x, dt)),
            Data::C(v) => v.iter_mut().for_each(|c| *c = [round_float(c[0], dt), round_float(c[1], dt)]),
            _ => {}
        }
    }

    /// Elements as f64 (bools as 0/1). Complex tensors are an error.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        Ok(match &self.data {
            Data::F(v) => v.clone(),
            Data::I(v) => v.iter().map(|&x| x as f64).collect(),
            Data::B(v) => v.iter().map(|&b| b as u8 as f64).collect(),
            Data::C(_) => return Err(Error::eval("to_f64", "complex tensor has no real view")),
        })
    }

    /// Elements as f32 (see `to_f64_vec`).
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        Ok(self.to_f64_vec()?.into_iter().map(|x| x as f32).collect())
    }

    /// Elements as i64 (floats truncated); used for indices.
    pub fn to_i64_vec(&self) -> Result<Vec<i64>> {
        Ok(match &self.data {
            Data::I(v) => v.clone(),
            Data::F(v) => v.iter().map(|&x| float_to_int(x)).collect(),
            Data::B(v) => v.iter().map(|&b| b as i64).collect(),
            Data::C(_) => return Err(Error::eval("to_i64", "complex tensor has no integer view")),
        })
    }

    /// Converts to another dtype with numpy-like cast semantics (float to int truncates and saturates).
    pub fn cast(&self, to: DType) -> HostTensor {
        let n = self.numel();
        let data = match (&self.data, to.class()) {
            (Data::F(v), DTypeClass::Float) => Data::F(v.clone()),
            (Data::F(v), DTypeClass::Int) => Data::I(v.iter().map(|&x| float_to_int(x)).collect()),
            (Data::F(v), DTypeClass::Bool) => Data::B(v.iter().map(|&x| x != 0.0).collect()),
            (Data::F(v), DTypeClass::Complex) => Data::C(v.iter().map(|&x| [x, 0.0]).collect()),
            (Data::I(v), DTypeClass::Float) => Data::F(v.iter().map(|&x| x as f64).collect()),
            (Data::I(v), DTypeClass::Int) => Data::I(v.clone()),
            (Data::I(v), DTypeClass::Bool) => Data::B(v.iter().map(|&x| x != 0).collect()),
            (Data::I(v), DTypeClass::Complex) => Data::C(v.iter().map(|&x| [x as f64, 0.0]).collect()),
            (Data::B(v), DTypeClass::Float) => Data::F(v.iter().map(|&b| b as u8 as f64).collect()),
            (Data::B(v), DTypeClass::Int) => Data::I(v.iter().map(|&b| b as i64).collect()),
            (Data::B(v), DTypeClass::Bool) => Data::B(v.clone()),
            (Data::B(v), DTypeClass::Complex) => Data::C(v.iter().map(|&b| [b as u8 as f64, 0.0]).collect()),
            (Data::C(v), DTypeClass::Float) => Data::F(v.iter().map(|c| c[0]).collect()),
            (Data::C(v), DTypeClass::Int) => Data::I(v.iter().map(|c| float_to_int(c[0])).collect()),
            (Data::C(v), DTypeClass::Bool) => Data::B(v.iter().map(|c| c[0] != 0.0 || c[1] != 0.0).collect()),
            (Data::C(v), DTypeClass::Complex) => Data::C(v.clone()),
        };
        debug_assert_eq!(data.len(), n);
        let mut t = HostTensor { shape: self.shape.with_dtype(to), data };
        t.round_in_place();
        t
    }

    /// Decodes little-endian bytes of `shape`'s dtype.
    pub fn from_bytes(shape: Shape, bytes: &[u8]) -> Result<Self> {
        let dt = shape.dtype;
        let n = shape.numel().unwrap_or(0);
        if bytes.len() != n * dt.size_bytes() {
            return Err(Error::eval(
                "from_bytes",
                format!("{shape} needs {} bytes, got {}", n * dt.size_bytes(), bytes.len()),
            ));
        }
        let ch = |k: usize| bytes.chunks_exact(k);
        let data = match dt {
            DType::F32 => Data::F(ch(4).map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64).collect()),
            DType::F64 => Data::F(ch(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect()),
            DType::F16 => Data::F(ch(2).map(|b| f16::from_le_bytes(b.try_into().unwrap()).to_f64()).collect()),
            DType::BF16 => Data::F(ch(2).map(|b| bf16::from_le_bytes(b.try_into().unwrap()).to_f64()).collect()),
            DType::I8 => Data::I(bytes.iter().map(|&b| b as i8 as i64).collect()),
            DType::U8 => Data::I(bytes.iter().map(|&b| b as i64).collect()),
            DType::I16 => Data::I(ch(2).map(|b| i16::from_le_bytes(b.try_into().unwrap()) as i64).collect()),
            DType::I32 => Data::I(ch(4).map(|b| i32::from_le_bytes(b.try_into().unwrap()) as i64).collect()),
            DType::U32 => Data::I(ch(4).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as i64).collect()),
            DType::I64 => Data::I(ch(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect()),
            DType::Bool => Data::B(bytes.iter().map(|&b| b != 0).collect()),
            DType::C64 => Data::C(
                ch(8)
                    .map(|b| {
                        let re = f32::from_le_bytes(b[..4].try_into().unwrap());
                        let im = f32::from_le_bytes(b[4..].try_into().unwrap());
                        [re as f64, im as f64]
                    })
                    .collect(),
            ),
        };
        Self::new(shape, data)
    }

    /// Encodes as little-endian bytes of the dtype.
    pub fn to_bytes(&self) -> Vec<u8> {
        let dt = self.shape.dtype;
        let mut out = Vec::with_capacity(self.numel() * dt.size_bytes());
        match &self.data {
            Data::F(v) => {
                for &x in v {
                    match dt {
                        DType::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
                        DType::F16 => out.extend_from_slice(&f16::from_f64(x).to_le_bytes()),
                        DType::BF16 => out.extend_from_slice(&bf16::from_f64(x).to_le_bytes()),
                        _ => out.extend_from_slice(&x.to_le_bytes()),
                    }
                }
            }
            Data::I(v) => {
                for &x in v {
                    match dt {
                        DType::I8 | DType::U8 => out.push(x as u8),
                        DType::I16 => out.extend_from_slice(&(x as i16).to_le_bytes()),
                        DType::I32 | DType::U32 => out.extend_from_slice(&(x as u32).to_le_bytes()),
                        _ => out.extend_from_slice(&x.to_le_bytes()),
                    }
                }
            }
            Data::B(v) => out.extend(v.iter().map(|&b| b as u8)),
            Data::C(v) => {
                for c in v {
                    out.extend_from_slice(&(c[0] as f32).to_le_bytes());
                    out.extend_from_slice(&(c[1] as f32).to_le_bytes());
                }
            }
        }
        out
    }
}

/// Float to integer as a cast does: truncate toward zero, saturate, NaN to 0.
pub fn float_to_int(x: f64) -> i64 {
    x as i64
}

/// Serializes float vectors with non-finite values as strings ("inf", "-inf", "nan").
pub mod float_vec {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum F {
        N(f64),
        S(String),
    }

    /// Serializes.
    pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
        let items: Vec<F> = v.iter().map(|&x| to_item(x)).collect();
        items.serialize(s)
    }

    /// Deserializes.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        let items = Vec::<F>::deserialize(d)?;
        items.into_iter().map(from_item).collect::<Result<_, _>>().map_err(serde::de::Error::custom)
    }

    fn to_item(x: f64) -> F {
        if x.is_finite() {
            F::N(x)
        } else if x.is_nan() {
            F::S("nan".into())
        } else if x > 0.0 {
            F::S("inf".into())
        } else {
            F::S("-inf".into())
        }
    }

    fn from_item(f: F) -> Result<f64, String> {
        match f {
            F::N(x) => Ok(x),
            F::S(s) => match s.as_str() {
                "nan" => Ok(f64::NAN),
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                _ => Err(format!("bad float `{s}`")),
            },
        }
    }

    /// The same for one f64 attribute.
    pub mod one {
        use super::*;
        /// Serializes.
        pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
            to_item(*v).serialize(s)
        }
        /// Deserializes.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
            from_item(F::deserialize(d)?).map_err(serde::de::Error::custom)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_every_dtype() {
        for dt in DType::ALL {
            let t = HostTensor::full(&Shape::new(&[3], dt), 2.0).unwrap();
            let b = t.to_bytes();
            assert_eq!(b.len(), 3 * dt.size_bytes());
            assert_eq!(HostTensor::from_bytes(t.shape.clone(), &b).unwrap(), t, "{dt}");
        }
    }

    #[test]
    fn rounding_and_wrapping() {
        let t = HostTensor::from_f64(&[1], DType::F16, &[1.0 + 1e-5]).unwrap();
        assert_eq!(t.data, Data::F(vec![1.0]));
        let t = HostTensor::from_i64(&[1], DType::I8, &[200]).unwrap();
        assert_eq!(t.data, Data::I(vec![-56]));
        assert!(HostTensor::from_f32(&[2], &[1.0]).is_err());
    }

    #[test]
    fn non_finite_serde() {
        let t = HostTensor::from_f32(&[3], &[f32::INFINITY, f32::NEG_INFINITY, 1.5]).unwrap();
        let s = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<HostTensor>(&s).unwrap(), t);
    }
}
