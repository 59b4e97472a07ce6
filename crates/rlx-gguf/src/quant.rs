//! Quantization of f32 data to GGUF tensor types: F32/F16/BF16 conversion here, the block types
//! (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, Q8_K) through the IR's codecs ([`rlx_ir::QuantScheme`]), which
//! follow llama.cpp's reference quantizers.

use half::{bf16, f16};

use crate::GgmlType;
use crate::error::{Error, Result};

/// Quantizes `data` to `ty`; its length must be a multiple of the type's block size.
pub fn quantize(ty: GgmlType, data: &[f32]) -> Result<Vec<u8>> {
    if !ty.can_quantize() {
        return Err(Error::UnsupportedQuant(ty));
    }
    let block = ty.block_size();
    if data.len() % block != 0 {
        return Err(Error::LengthMismatch {
            what: format!("{ty} quantizer input (must be a multiple of {block})"),
            expected: data.len().next_multiple_of(block),
            got: data.len(),
        });
    }
    if let Some(scheme) = ty.scheme() {
        return scheme.quantize_blocks(data).map_err(|e| Error::from_codec(ty, e));
    }
    // Float types store non-finite values as they are, so there is nothing to refuse here.
    Ok(match ty {
        GgmlType::F32 => data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => data.iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect(),
        GgmlType::BF16 => data.iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes()).collect(),
        other => return Err(Error::UnsupportedQuant(other)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(quantize(GgmlType::Q4_K, &[0.0; 255]), Err(Error::LengthMismatch { .. })));
        let mut x = vec![0.0; 32];
        x[3] = f32::NAN;
        assert!(matches!(quantize(GgmlType::Q8_0, &x), Err(Error::NonFinite { ty: GgmlType::Q8_0, index: 3, .. })));
        assert!(matches!(quantize(GgmlType::Q2_K, &[0.0; 256]), Err(Error::UnsupportedQuant(GgmlType::Q2_K))));
        assert!(matches!(quantize(GgmlType::IQ2_XXS, &[0.0; 256]), Err(Error::UnsupportedQuant(GgmlType::IQ2_XXS))));
        let big = vec![1e9f32; 32];
        assert!(matches!(
            quantize(GgmlType::Q8_0, &big),
            Err(Error::ScaleOverflow { ty: GgmlType::Q8_0, block: 0, .. })
        ));
    }

    #[test]
    fn floats_keep_non_finite_values() {
        let x = [1.0, f32::INFINITY, f32::NAN, -0.5];
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            let y = crate::dequantize(ty, &quantize(ty, &x).unwrap(), 4).unwrap();
            assert_eq!((y[0], y[1], y[3]), (1.0, f32::INFINITY, -0.5), "{ty}");
            assert!(y[2].is_nan(), "{ty}");
        }
    }

    #[test]
    fn zero_blocks_quantize_to_zero() {
        for ty in [GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K] {
            let q = quantize(ty, &[0.0; 256]).unwrap();
            let y = crate::dequantize(ty, &q, 256).unwrap();
            assert!(y.iter().all(|&v| v == 0.0), "{ty}");
        }
    }
}
