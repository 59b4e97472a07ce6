//! Dequantization of GGUF tensor data to f32: the float types here, the block types through the
//! IR's codecs ([`rlx_ir::QuantScheme`]), which follow ggml's reference kernels bit for bit.

use half::{bf16, f16};

use crate::GgmlType;
use crate::error::{Error, Result};

/// The IQ4_NL / IQ4_XS non-linear code book.
pub use rlx_ir::quant::IQ4_NL_VALUES;

/// Dequantizes `n_elements` elements of type `ty` from packed `data`.
pub fn dequantize(ty: GgmlType, data: &[u8], n_elements: usize) -> Result<Vec<f32>> {
    let mut out = vec![0f32; checked_len(ty, data, n_elements)?];
    dequantize_into(ty, data, &mut out)?;
    Ok(out)
}

/// Checks that `data` holds exactly `n_elements` of `ty`, before any allocation.
fn checked_len(ty: GgmlType, data: &[u8], n_elements: usize) -> Result<usize> {
    if !ty.can_dequantize() {
        return Err(Error::UnsupportedDequant(ty));
    }
    let block = ty.block_size();
    if n_elements % block != 0 {
        return Err(Error::LengthMismatch {
            what: format!("{ty} element count (must be a multiple of {block})"),
            expected: n_elements.next_multiple_of(block),
            got: n_elements,
        });
    }
    let expected = n_elements / block * ty.type_size();
    if data.len() != expected {
        return Err(Error::LengthMismatch {
            what: format!("{ty} data for {n_elements} elements"),
            expected,
            got: data.len(),
        });
    }
    Ok(n_elements)
}

/// Dequantizes packed `data` of type `ty` into `out`, whose length sets the element count.
pub fn dequantize_into(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<()> {
    checked_len(ty, data, out.len())?;
    if let Some(scheme) = ty.scheme() {
        // The lengths were checked above with the same block sizes, so the codec cannot refuse.
        return scheme.dequantize_blocks(data, out).map_err(|e| Error::from_codec(ty, e));
    }
    let f: fn(&[u8]) -> f32 = match ty {
        GgmlType::F32 => |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        GgmlType::F16 => |b| f16::from_le_bytes([b[0], b[1]]).to_f32(),
        GgmlType::BF16 => |b| bf16::from_le_bytes([b[0], b[1]]).to_f32(),
        other => return Err(Error::UnsupportedDequant(other)),
    };
    for (b, y) in data.chunks_exact(ty.type_size()).zip(out.iter_mut()) {
        *y = f(b);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_types_go_to_the_ir_codec() {
        // The bits are rlx-ir's to test (quant/decode.rs); here only that a block type reaches it.
        let mut b = vec![0u8; 34];
        b[..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        b[2] = 4;
        assert_eq!(dequantize(GgmlType::Q8_0, &b, 32).unwrap()[..2], [2.0, 0.0]);
    }

    #[test]
    fn float_types_by_hand() {
        let b: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(dequantize(GgmlType::F32, &b, 2).unwrap(), [1.5, -2.0]);
        let b: Vec<u8> = [0.25f32, 3.0].iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect();
        assert_eq!(dequantize(GgmlType::F16, &b, 2).unwrap(), [0.25, 3.0]);
        let b: Vec<u8> = [0.5f32, -4.0].iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes()).collect();
        assert_eq!(dequantize(GgmlType::BF16, &b, 2).unwrap(), [0.5, -4.0]);
    }

    #[test]
    fn unsupported_and_bad_lengths_are_errors() {
        let e = dequantize(GgmlType::IQ2_XXS, &[0; 66], 256).unwrap_err();
        assert!(e.to_string().contains("IQ2_XXS"), "{e}");
        assert!(matches!(dequantize(GgmlType::Q4_0, &[0; 17], 32), Err(Error::LengthMismatch { .. })));
        assert!(matches!(dequantize(GgmlType::Q4_0, &[0; 18], 31), Err(Error::LengthMismatch { .. })));
        assert!(matches!(dequantize(GgmlType::F16, &[0; 3], 2), Err(Error::LengthMismatch { .. })));
    }
}
