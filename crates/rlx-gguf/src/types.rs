//! ggml tensor types: ids as stored in GGUF, block sizes and byte sizes.

use rlx_ir::QuantScheme;
use std::fmt;

/// Elements in one K-quant super-block.
pub use rlx_ir::quant::QK_K;

macro_rules! ggml_types {
    ($($variant:ident = $id:literal, $name:literal, $block:expr, $bytes:expr;)*) => {
        /// A ggml tensor element type, as identified in GGUF tensor infos.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[allow(non_camel_case_types)]
        pub enum GgmlType {
            $(
                #[doc = concat!("ggml `", $name, "` (id ", stringify!($id), ").")]
                $variant = $id,
            )*
        }

        impl GgmlType {
            /// Every known type, in id order.
            pub const ALL: &'static [GgmlType] = &[$(GgmlType::$variant),*];

            /// The type for a GGUF type id, or `None` when the id is unknown.
            pub fn from_id(id: u32) -> Option<Self> {
                match id {
                    $($id => Some(GgmlType::$variant),)*
                    _ => None,
                }
            }

            /// The ggml name, e.g. `Q4_K`.
            pub fn name(self) -> &'static str {
                match self { $(GgmlType::$variant => $name,)* }
            }

            /// Elements per block (1 for plain types).
            pub fn block_size(self) -> usize {
                match self { $(GgmlType::$variant => $block,)* }
            }

            /// Bytes per block.
            pub fn type_size(self) -> usize {
                match self { $(GgmlType::$variant => $bytes,)* }
            }
        }
    };
}

ggml_types! {
    F32 = 0, "F32", 1, 4;
    F16 = 1, "F16", 1, 2;
    Q4_0 = 2, "Q4_0", 32, 2 + 16;
    Q4_1 = 3, "Q4_1", 32, 2 + 2 + 16;
    Q5_0 = 6, "Q5_0", 32, 2 + 4 + 16;
    Q5_1 = 7, "Q5_1", 32, 2 + 2 + 4 + 16;
    Q8_0 = 8, "Q8_0", 32, 2 + 32;
    Q8_1 = 9, "Q8_1", 32, 2 + 2 + 32;
    Q2_K = 10, "Q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4;
    Q3_K = 11, "Q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12;
    Q4_K = 12, "Q4_K", QK_K, 2 + 2 + QK_K / 2 + 12;
    Q5_K = 13, "Q5_K", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12;
    Q6_K = 14, "Q6_K", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16;
    Q8_K = 15, "Q8_K", QK_K, 4 + QK_K + QK_K / 8;
    IQ2_XXS = 16, "IQ2_XXS", QK_K, 2 + QK_K / 4;
    IQ2_XS = 17, "IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32;
    IQ3_XXS = 18, "IQ3_XXS", QK_K, 2 + QK_K / 4 + QK_K / 8;
    IQ1_S = 19, "IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16;
    IQ4_NL = 20, "IQ4_NL", 32, 2 + 16;
    IQ3_S = 21, "IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4;
    IQ2_S = 22, "IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16;
    IQ4_XS = 23, "IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64;
    I8 = 24, "I8", 1, 1;
    I16 = 25, "I16", 1, 2;
    I32 = 26, "I32", 1, 4;
    I64 = 27, "I64", 1, 8;
    F64 = 28, "F64", 1, 8;
    IQ1_M = 29, "IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32;
    BF16 = 30, "BF16", 1, 2;
    TQ1_0 = 34, "TQ1_0", QK_K, 2 + 4 * 13;
    TQ2_0 = 35, "TQ2_0", QK_K, 2 + 64;
    MXFP4 = 39, "MXFP4", 32, 1 + 16;
}

impl GgmlType {
    /// The GGUF type id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// Bytes needed for `n_elements` elements, or `None` when `n_elements` is not a whole number
    /// of blocks or the size overflows.
    pub fn bytes_for(self, n_elements: u64) -> Option<u64> {
        let block = self.block_size() as u64;
        if n_elements % block != 0 {
            return None;
        }
        (n_elements / block).checked_mul(self.type_size() as u64)
    }

    /// The IR's scheme for this block type, or `None` for plain types and block types RLX cannot
    /// decode. The IR owns the block codecs; this table is where GGUF's ids meet them.
    pub fn scheme(self) -> Option<QuantScheme> {
        use GgmlType::*;
        Some(match self {
            Q4_0 => QuantScheme::Q4_0,
            Q4_1 => QuantScheme::Q4_1,
            Q5_0 => QuantScheme::Q5_0,
            Q5_1 => QuantScheme::Q5_1,
            Q8_0 => QuantScheme::Q8_0,
            Q8_1 => QuantScheme::Q8_1,
            Q2_K => QuantScheme::Q2_K,
            Q3_K => QuantScheme::Q3_K,
            Q4_K => QuantScheme::Q4_K,
            Q5_K => QuantScheme::Q5_K,
            Q6_K => QuantScheme::Q6_K,
            Q8_K => QuantScheme::Q8_K,
            IQ4_NL => QuantScheme::IQ4_NL,
            IQ4_XS => QuantScheme::IQ4_XS,
            _ => return None,
        })
    }

    /// The ggml type that stores `scheme`, or `None` for an IR scheme that is not a ggml layout.
    pub fn from_scheme(scheme: QuantScheme) -> Option<Self> {
        GgmlType::ALL.iter().copied().find(|t| t.scheme() == Some(scheme))
    }

    /// Whether [`crate::dequantize`] supports this type: the float types and every IR scheme.
    pub fn can_dequantize(self) -> bool {
        matches!(self, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) || self.scheme().is_some()
    }

    /// Whether [`crate::quantize`] supports this type: the float types and the IR schemes that
    /// have a quantizer.
    pub fn can_quantize(self) -> bool {
        matches!(self, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
            || self.scheme().is_some_and(QuantScheme::can_quantize)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_sizes_match_ggml() {
        for &t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
        }
        // Sizes of ggml's block structs (ggml-common.h static asserts).
        assert_eq!(GgmlType::Q4_K.type_size(), 144);
        assert_eq!(GgmlType::Q5_K.type_size(), 176);
        assert_eq!(GgmlType::Q6_K.type_size(), 210);
        assert_eq!(GgmlType::Q8_K.type_size(), 292);
        assert_eq!(GgmlType::Q2_K.type_size(), 84);
        assert_eq!(GgmlType::Q3_K.type_size(), 110);
        assert_eq!(GgmlType::IQ4_XS.type_size(), 136);
        assert_eq!(GgmlType::Q8_1.type_size(), 36);
        assert_eq!(GgmlType::from_id(4), None);
        assert_eq!(GgmlType::from_id(31), None);
        assert_eq!(GgmlType::Q4_0.bytes_for(64), Some(36));
        assert_eq!(GgmlType::Q4_0.bytes_for(33), None);
    }

    #[test]
    fn schemes_match_the_ggml_table() {
        for &t in GgmlType::ALL {
            if let Some(s) = t.scheme() {
                assert_eq!((s.name(), s.block_size(), s.block_bytes()), (t.name(), t.block_size(), t.type_size()));
                assert_eq!(GgmlType::from_scheme(s), Some(t));
            }
        }
        // Every IR scheme is a ggml block type, in the same (id) order.
        let back: Vec<GgmlType> = QuantScheme::ALL.iter().map(|&s| GgmlType::from_scheme(s).unwrap()).collect();
        let blocks: Vec<GgmlType> = GgmlType::ALL.iter().copied().filter(|t| t.scheme().is_some()).collect();
        assert_eq!(back, blocks);
        let quantizable: Vec<&str> = GgmlType::ALL.iter().filter(|t| t.can_quantize()).map(|t| t.name()).collect();
        assert_eq!(quantizable.join(" "), "F32 F16 Q4_0 Q8_0 Q4_K Q5_K Q6_K Q8_K BF16");
        let decodable = GgmlType::ALL.iter().filter(|t| t.can_dequantize()).count();
        assert_eq!(decodable, 17);
    }
}
