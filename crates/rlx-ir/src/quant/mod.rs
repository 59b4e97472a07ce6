//! Quantization schemes of packed weights, as used by `Dequantize` and `QMatMul`: the block
//! layouts (ggml's, as stored in GGUF files) and their codecs.
//!
//! The bit layout of each scheme is part of the IR's semantics (the reference interpreter decodes
//! it), so the codecs live here; the GGUF crate maps its tensor types onto these schemes.

mod decode;
mod encode;

use crate::{Error, Result};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

pub use decode::IQ4_NL_VALUES;

/// Elements in one K-quant super-block (`Q2_K` .. `Q8_K`, `IQ4_XS`).
pub const QK_K: usize = 256;

macro_rules! schemes {
    ($($variant:ident = $name:literal, $block:expr, $bytes:expr;)*) => {
        /// A block quantization (`Q4_K`, `Q8_0`, ...) that RLX can dequantize. A packed matrix
        /// `[n, k]` is stored as U8 `[n, row_bytes(k)]`: one row of blocks per output feature.
        /// The layouts are ggml's, so GGUF tensors of these types are used as they are stored.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[allow(non_camel_case_types)]
        #[non_exhaustive]
        pub enum QuantScheme {
            $(
                #[doc = concat!("`", $name, "`: ", stringify!($block), " elements in ", stringify!($bytes), " bytes.")]
                $variant,
            )*
        }

        impl QuantScheme {
            /// Every scheme, in the order of their ggml type ids.
            pub const ALL: &'static [QuantScheme] = &[$(QuantScheme::$variant),*];

            /// The name, as ggml spells it (`Q4_K`); also the text and JSON form.
            pub const fn name(self) -> &'static str {
                match self { $(QuantScheme::$variant => $name,)* }
            }

            /// Elements per block.
            #[inline]
            pub const fn block_size(self) -> usize {
                match self { $(QuantScheme::$variant => $block,)* }
            }

            /// Bytes per block. A `const fn` match, so kernels may call it in inner loops.
            #[inline]
            pub const fn block_bytes(self) -> usize {
                match self { $(QuantScheme::$variant => $bytes,)* }
            }
        }
    };
}

schemes! {
    Q4_0 = "Q4_0", 32, 2 + 16;
    Q4_1 = "Q4_1", 32, 2 + 2 + 16;
    Q5_0 = "Q5_0", 32, 2 + 4 + 16;
    Q5_1 = "Q5_1", 32, 2 + 2 + 4 + 16;
    Q8_0 = "Q8_0", 32, 2 + 32;
    Q8_1 = "Q8_1", 32, 2 + 2 + 32;
    Q2_K = "Q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4;
    Q3_K = "Q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12;
    Q4_K = "Q4_K", QK_K, 2 + 2 + QK_K / 2 + 12;
    Q5_K = "Q5_K", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12;
    Q6_K = "Q6_K", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16;
    Q8_K = "Q8_K", QK_K, 4 + QK_K + QK_K / 8;
    IQ4_NL = "IQ4_NL", 32, 2 + 16;
    IQ4_XS = "IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64;
}

/// Why a block codec rejected its input. Every variant names the scheme.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuantError {
    /// The scheme has a decoder but no quantizer.
    #[error("quantization to {scheme} is not supported")]
    NoQuantizer {
        /// The scheme asked for.
        scheme: QuantScheme,
    },
    /// A buffer that is not a whole number of blocks, or does not match the other's length.
    #[error("{scheme} {what}: expected {expected}, got {got}")]
    Length {
        /// The scheme.
        scheme: QuantScheme,
        /// What was checked (which buffer, in which unit).
        what: &'static str,
        /// The length needed.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A non-finite input to a quantizer.
    #[error("cannot quantize to {scheme}: element {index} is {value}")]
    NonFinite {
        /// The scheme.
        scheme: QuantScheme,
        /// Index of the element.
        index: usize,
        /// The value.
        value: f32,
    },
    /// A block whose scale does not fit the scheme's f16 scale field.
    #[error("cannot quantize to {scheme}: block {block} needs scale {value}, beyond the f16 range")]
    ScaleOverflow {
        /// The scheme.
        scheme: QuantScheme,
        /// Index of the block.
        block: usize,
        /// The scale that overflowed.
        value: f32,
    },
}

impl QuantScheme {
    /// The scheme named `name` (`Q4_K`); an error listing the known names otherwise.
    pub fn from_name(name: &str) -> Result<Self> {
        QuantScheme::ALL.iter().copied().find(|s| s.name() == name).ok_or_else(|| {
            let known: Vec<&str> = QuantScheme::ALL.iter().map(|s| s.name()).collect();
            Error::eval("quant scheme", format!("unknown quant scheme `{name}`; known: {}", known.join(", ")))
        })
    }

    /// Whether [`QuantScheme::quantize_blocks`] can write this scheme (ggml has reference
    /// quantizers for these; the others are only ever read from files).
    pub const fn can_quantize(self) -> bool {
        matches!(self, Self::Q4_0 | Self::Q8_0 | Self::Q4_K | Self::Q5_K | Self::Q6_K | Self::Q8_K)
    }

    /// Bytes of one packed row of `k` elements; an error unless `k` is a whole number of blocks.
    pub fn row_bytes(self, k: usize) -> std::result::Result<usize, String> {
        if k == 0 || !k.is_multiple_of(self.block_size()) {
            return Err(format!("k = {k} is not a positive multiple of the {} block size {}", self, self.block_size()));
        }
        Ok(k / self.block_size() * self.block_bytes())
    }

    /// Decodes whole blocks: `out.len()` elements (a multiple of the block size) from exactly as
    /// many blocks of `packed`. Follows ggml's reference kernels operation for operation, so the
    /// values match gguf-py's dequantizer bit for bit.
    pub fn dequantize_blocks(self, packed: &[u8], out: &mut [f32]) -> std::result::Result<(), QuantError> {
        let blocks = self.whole_blocks(out.len())?;
        let expected = blocks * self.block_bytes();
        if packed.len() != expected {
            return Err(QuantError::Length { scheme: self, what: "packed bytes", expected, got: packed.len() });
        }
        decode::blocks(self, packed, out);
        Ok(())
    }

    /// Encodes `data` (a multiple of the block size, all finite) into blocks, following llama.cpp's
    /// reference quantizers (`quantize_row_*_ref`).
    pub fn quantize_blocks(self, data: &[f32]) -> std::result::Result<Vec<u8>, QuantError> {
        if !self.can_quantize() {
            return Err(QuantError::NoQuantizer { scheme: self });
        }
        let blocks = self.whole_blocks(data.len())?;
        if let Some(index) = data.iter().position(|v| !v.is_finite()) {
            return Err(QuantError::NonFinite { scheme: self, index, value: data[index] });
        }
        let mut out = vec![0u8; blocks * self.block_bytes()];
        encode::blocks(self, data, &mut out)?;
        Ok(out)
    }

    /// The number of blocks in `elements`, or an error when it is not a whole number.
    fn whole_blocks(self, elements: usize) -> std::result::Result<usize, QuantError> {
        let bs = self.block_size();
        if !elements.is_multiple_of(bs) {
            let expected = elements.next_multiple_of(bs);
            return Err(QuantError::Length { scheme: self, what: "element count", expected, got: elements });
        }
        Ok(elements / bs)
    }

    /// Dequantizes whole rows of `k` elements from `packed` into `out` (exact: the reference).
    pub fn dequantize_rows(self, packed: &[u8], k: usize, out: &mut [f32]) -> Result<()> {
        let rb = self.row_bytes(k).map_err(|e| Error::eval("dequantize", e))?;
        if !packed.len().is_multiple_of(rb) || packed.len() / rb * k != out.len() {
            return Err(Error::eval(
                "dequantize",
                format!(
                    "{} packed bytes are not {} rows of {rb} bytes for {} outputs",
                    packed.len(),
                    out.len() / k,
                    out.len()
                ),
            ));
        }
        self.dequantize_blocks(packed, out).map_err(|e| Error::eval("dequantize", e.to_string()))
    }

    /// Quantizes rows of `k` f32 values (for tests and writers); only where [`Self::can_quantize`].
    pub fn quantize_rows(self, data: &[f32], k: usize) -> Result<Vec<u8>> {
        self.row_bytes(k).map_err(|e| Error::eval("quantize", e))?;
        if !data.len().is_multiple_of(k) {
            return Err(Error::eval("quantize", format!("{} values are not whole rows of {k}", data.len())));
        }
        self.quantize_blocks(data).map_err(|e| Error::eval("quantize", e.to_string()))
    }
}

impl fmt::Display for QuantScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for QuantScheme {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for QuantScheme {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        QuantScheme::from_name(&name).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sizes_and_serde() {
        let names: Vec<&str> = QuantScheme::ALL.iter().map(|s| s.name()).collect();
        let want = "Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K IQ4_NL IQ4_XS";
        assert_eq!(names.join(" "), want);
        for &s in QuantScheme::ALL {
            assert_eq!(QuantScheme::from_name(s.name()).unwrap(), s);
            assert_eq!(s.to_string(), s.name());
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<QuantScheme>(&json).unwrap(), s);
        }
        // Sizes of ggml's block structs (ggml-common.h static asserts).
        let bytes = [18, 20, 22, 24, 34, 36, 84, 110, 144, 176, 210, 292, 18, 136];
        let sizes: Vec<usize> = QuantScheme::ALL.iter().map(|s| s.block_bytes()).collect();
        assert_eq!(sizes, bytes);
        assert_eq!(QuantScheme::Q4_K.row_bytes(512), Ok(288));
        assert_eq!(QuantScheme::Q8_0.row_bytes(64), Ok(68));
        assert!(QuantScheme::Q4_K.row_bytes(100).unwrap_err().contains("block size 256"));
        assert!(QuantScheme::Q4_K.row_bytes(0).is_err());
    }

    #[test]
    fn unknown_names_are_errors() {
        for bad in ["Q9_Z", "F32", "IQ2_XXS", "q4_k", ""] {
            let e = QuantScheme::from_name(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("unknown quant scheme `{bad}`")) && e.contains("Q4_K"), "{e}");
        }
        let e = serde_json::from_str::<QuantScheme>("\"Q9_Z\"").unwrap_err().to_string();
        assert!(e.contains("Q9_Z"), "{e}");
    }

    #[test]
    fn codec_errors_name_the_scheme() {
        let e = QuantScheme::Q2_K.quantize_blocks(&[0.0; 256]).unwrap_err();
        assert_eq!(e, QuantError::NoQuantizer { scheme: QuantScheme::Q2_K });
        let e = QuantScheme::Q4_K.quantize_blocks(&[0.0; 255]).unwrap_err();
        assert!(matches!(e, QuantError::Length { expected: 256, got: 255, .. }), "{e}");
        let mut x = vec![0.0; 32];
        x[3] = f32::NAN;
        let e = QuantScheme::Q8_0.quantize_blocks(&x).unwrap_err();
        assert!(matches!(e, QuantError::NonFinite { index: 3, .. }), "{e}");
        let e = QuantScheme::Q8_0.quantize_blocks(&[1e9; 32]).unwrap_err();
        assert!(matches!(e, QuantError::ScaleOverflow { block: 0, .. }), "{e}");
        assert!(e.to_string().starts_with("cannot quantize to Q8_0: block 0 needs scale"), "{e}");
        let e = QuantScheme::Q4_0.dequantize_blocks(&[0; 17], &mut [0.0; 32]).unwrap_err();
        assert!(matches!(e, QuantError::Length { expected: 18, got: 17, .. }), "{e}");
        let e = QuantScheme::Q4_0.dequantize_blocks(&[0; 18], &mut [0.0; 31]).unwrap_err();
        assert!(matches!(e, QuantError::Length { expected: 32, got: 31, .. }), "{e}");
        assert!(QuantScheme::Q6_K.quantize_rows(&[0.0; 256], 128).is_err());
    }

    #[test]
    fn zero_blocks_round_trip_to_zero() {
        for &s in QuantScheme::ALL.iter().filter(|s| s.can_quantize()) {
            let q = s.quantize_rows(&[0.0; 512], 256).unwrap();
            assert_eq!(q.len(), 2 * s.row_bytes(256).unwrap());
            let mut y = vec![1f32; 512];
            s.dequantize_rows(&q, 256, &mut y).unwrap();
            assert!(y.iter().all(|&v| v == 0.0), "{s}");
        }
    }
}
