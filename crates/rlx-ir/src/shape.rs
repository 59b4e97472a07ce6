//! Tensor types: a dtype plus dimensions, each static or a named dynamic symbol.

use crate::DType;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// One dimension: a fixed size, or a named symbol bound to a size at compile time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A known size.
    Fixed(usize),
    /// A dynamic size named by a symbol (for example `batch` or `seq`).
    Sym(String),
}

impl Dim {
    /// The size when fixed.
    pub fn fixed(&self) -> Option<usize> {
        match self {
            Dim::Fixed(n) => Some(*n),
            Dim::Sym(_) => None,
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

impl From<usize> for Dim {
    fn from(n: usize) -> Self {
        Dim::Fixed(n)
    }
}

/// The type of a tensor: its dtype and its dimensions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Dimensions, outermost first.
    pub dims: Vec<Dim>,
    /// Element type.
    pub dtype: DType,
}

impl Shape {
    /// A shape with fixed dims.
    pub fn new(dims: &[usize], dtype: DType) -> Self {
        Shape { dims: dims.iter().map(|&d| Dim::Fixed(d)).collect(), dtype }
    }

    /// A shape from dims that may be symbolic.
    pub fn with_dims(dims: Vec<Dim>, dtype: DType) -> Self {
        Shape { dims, dtype }
    }

    /// A rank-0 shape.
    pub fn scalar(dtype: DType) -> Self {
        Shape { dims: vec![], dtype }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// The fixed dims, or None if any is symbolic.
    pub fn fixed_dims(&self) -> Option<Vec<usize>> {
        self.dims.iter().map(Dim::fixed).collect()
    }

    /// True when every dim is fixed.
    pub fn is_static(&self) -> bool {
        self.dims.iter().all(|d| d.fixed().is_some())
    }

    /// The fixed dims, or an inference error naming the first symbol.
    pub fn dims_fixed(&self) -> Result<Vec<usize>, String> {
        self.fixed_dims().ok_or_else(|| format!("this op needs static dims, got {self}"))
    }

    /// Element count when static (no allocation: run paths call it).
    pub fn numel(&self) -> Option<usize> {
        self.dims.iter().map(Dim::fixed).product()
    }

    /// Size in bytes when static.
    pub fn size_bytes(&self) -> Option<usize> {
        self.numel().map(|n| n * self.dtype.size_bytes())
    }

    /// The same dims with another dtype.
    pub fn with_dtype(&self, dtype: DType) -> Shape {
        Shape { dims: self.dims.clone(), dtype }
    }

    /// Normalizes a possibly negative axis against this rank.
    pub fn axis(&self, axis: i64) -> Result<usize, String> {
        normalize_axis(axis, self.rank())
    }

    /// The symbols used by this shape.
    pub fn symbols(&self) -> impl Iterator<Item = &str> {
        self.dims.iter().filter_map(|d| match d {
            Dim::Sym(s) => Some(s.as_str()),
            Dim::Fixed(_) => None,
        })
    }
}

/// Normalizes a numpy-style axis (negative counts from the end).
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r { Err(format!("axis {axis} is out of range for rank {rank}")) } else { Ok(a as usize) }
}

/// Normalizes a list of axes, rejecting duplicates; the result is sorted.
pub fn normalize_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    let mut out = axes.iter().map(|&a| normalize_axis(a, rank)).collect::<Result<Vec<_>, _>>()?;
    out.sort_unstable();
    if out.windows(2).any(|w| w[0] == w[1]) {
        return Err(format!("axes {axes:?} repeat an axis"));
    }
    Ok(out)
}

/// numpy broadcasting of two dim lists.
pub fn broadcast_dims(a: &[Dim], b: &[Dim]) -> Result<Vec<Dim>, String> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let da = if i + a.len() >= n { &a[i + a.len() - n] } else { &Dim::Fixed(1) };
        let db = if i + b.len() >= n { &b[i + b.len() - n] } else { &Dim::Fixed(1) };
        let d = match (da, db) {
            (x, y) if x == y => x.clone(),
            (Dim::Fixed(1), y) => y.clone(),
            (x, Dim::Fixed(1)) => x.clone(),
            _ => return Err(format!("cannot broadcast dim {da} against {db}")),
        };
        out.push(d);
    }
    Ok(out)
}

/// Row-major strides of fixed dims.
pub fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl FromStr for Shape {
    type Err = String;
    /// Parses `f32[2,batch,4]`.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let open = s.find('[').ok_or_else(|| format!("expected `dtype[dims]`, got `{s}`"))?;
        if !s.ends_with(']') {
            return Err(format!("expected `dtype[dims]`, got `{s}`"));
        }
        let dtype = DType::from_name(&s[..open]).ok_or_else(|| format!("unknown dtype `{}`", &s[..open]))?;
        let inner = &s[open + 1..s.len() - 1];
        let mut dims = vec![];
        for part in inner.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if let Ok(n) = part.parse::<usize>() {
                dims.push(Dim::Fixed(n));
            } else if part.chars().all(|c| c.is_alphanumeric() || c == '_')
                && !part.starts_with(|c: char| c.is_ascii_digit())
            {
                dims.push(Dim::Sym(part.to_string()));
            } else {
                return Err(format!("bad dim `{part}` in `{s}`"));
            }
        }
        Ok(Shape { dims, dtype })
    }
}

impl Serialize for Shape {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip() {
        let s = Shape::with_dims(vec![Dim::Sym("batch".into()), Dim::Fixed(4)], DType::BF16);
        assert_eq!(s.to_string(), "bf16[batch,4]");
        assert_eq!(s.to_string().parse::<Shape>().unwrap(), s);
        assert_eq!("f32[]".parse::<Shape>().unwrap(), Shape::scalar(DType::F32));
        assert!("q9[1]".parse::<Shape>().is_err());
        assert!("f32[1".parse::<Shape>().is_err());
    }

    #[test]
    fn broadcasting() {
        let f = |v: &[usize]| v.iter().map(|&d| Dim::Fixed(d)).collect::<Vec<_>>();
        assert_eq!(broadcast_dims(&f(&[2, 1, 3]), &f(&[4, 1])).unwrap(), f(&[2, 4, 3]));
        assert!(broadcast_dims(&f(&[2]), &f(&[3])).is_err());
        let b = vec![Dim::Sym("b".into()), Dim::Fixed(3)];
        assert_eq!(broadcast_dims(&b, &f(&[1, 3])).unwrap(), b);
    }
}
