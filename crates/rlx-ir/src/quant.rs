//! Quantization schemes of packed weights: ggml block types (GGUF layout), as used by
//! `Dequantize` and `QMatMul`.

use crate::{Error, Result};
use rlx_gguf::GgmlType;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A ggml block quantization (`Q4_K`, `Q8_0`, ...) that RLX can dequantize. A packed matrix
/// `[n, k]` is stored as U8 `[n, row_bytes(k)]`: one GGUF row of blocks per output feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuantScheme(GgmlType);

impl QuantScheme {
    /// `Q4_0`.
    pub const Q4_0: QuantScheme = QuantScheme(GgmlType::Q4_0);
    /// `Q8_0`.
    pub const Q8_0: QuantScheme = QuantScheme(GgmlType::Q8_0);
    /// `Q4_K`.
    pub const Q4_K: QuantScheme = QuantScheme(GgmlType::Q4_K);
    /// `Q5_K`.
    pub const Q5_K: QuantScheme = QuantScheme(GgmlType::Q5_K);
    /// `Q6_K`.
    pub const Q6_K: QuantScheme = QuantScheme(GgmlType::Q6_K);

    /// The scheme for a ggml type; an error unless it is a block type rlx-gguf can dequantize.
    pub fn new(ty: GgmlType) -> Result<Self> {
        if ty.block_size() > 1 && ty.can_dequantize() {
            Ok(QuantScheme(ty))
        } else {
            Err(Error::eval("quant scheme", format!("ggml type {ty} is not a dequantizable block type")))
        }
    }

    /// The scheme named like ggml (`Q4_K`).
    pub fn from_name(name: &str) -> Result<Self> {
        let ty = GgmlType::ALL
            .iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| Error::eval("quant scheme", format!("unknown ggml type `{name}`")))?;
        Self::new(*ty)
    }

    /// The ggml type.
    pub fn ggml_type(self) -> GgmlType {
        self.0
    }

    /// The ggml name.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        self.0.block_size()
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        self.0.type_size()
    }

    /// Bytes of one packed row of `k` elements; an error unless `k` is a whole number of blocks.
    pub fn row_bytes(self, k: usize) -> std::result::Result<usize, String> {
        if k == 0 || !k.is_multiple_of(self.block_size()) {
            return Err(format!("k = {k} is not a positive multiple of the {} block size {}", self, self.block_size()));
        }
        Ok(k / self.block_size() * self.block_bytes())
    }

    /// Dequantizes whole rows of `k` elements from `packed` into `out` (exact, rlx-gguf's reference).
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
        rlx_gguf::dequantize_into(self.0, packed, out).map_err(|e| Error::eval("dequantize", e.to_string()))
    }

    /// Quantizes rows of `k` f32 values (for tests and writers); only types rlx-gguf can quantize.
    pub fn quantize_rows(self, data: &[f32], k: usize) -> Result<Vec<u8>> {
        self.row_bytes(k).map_err(|e| Error::eval("quantize", e))?;
        if !data.len().is_multiple_of(k) {
            return Err(Error::eval("quantize", format!("{} values are not whole rows of {k}", data.len())));
        }
        rlx_gguf::quantize(self.0, data).map_err(|e| Error::eval("quantize", e.to_string()))
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
    fn sizes_names_and_errors() {
        assert_eq!(QuantScheme::Q4_K.row_bytes(512), Ok(288));
        assert_eq!(QuantScheme::Q8_0.row_bytes(64), Ok(68));
        assert!(QuantScheme::Q4_K.row_bytes(100).unwrap_err().contains("block size 256"));
        assert!(QuantScheme::new(GgmlType::F32).is_err());
        assert!(QuantScheme::new(GgmlType::IQ2_XXS).is_err());
        assert_eq!(QuantScheme::from_name("Q6_K").unwrap(), QuantScheme::Q6_K);
        let json = serde_json::to_string(&QuantScheme::Q5_K).unwrap();
        assert_eq!(json, "\"Q5_K\"");
        assert_eq!(serde_json::from_str::<QuantScheme>(&json).unwrap(), QuantScheme::Q5_K);
        assert!(serde_json::from_str::<QuantScheme>("\"Q9_Z\"").is_err());
    }
}
