//! The crate's one error type: every variant names the file offset, tensor or key involved.

use crate::GgmlType;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while reading, writing, quantizing or dequantizing GGUF data.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O error on a named file.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file involved.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An I/O error while writing to a stream.
    #[error("I/O error while writing GGUF: {0}")]
    Write(#[from] std::io::Error),
    /// The file ended before a field could be read.
    #[error("truncated GGUF: reading {what} at offset {offset} needs {needed} bytes, but the file has {len} bytes")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Byte offset of the field.
        offset: u64,
        /// Bytes the field needs.
        needed: u64,
        /// Total file length.
        len: u64,
    },
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: magic at offset 0 is {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The four bytes found.
        found: [u8; 4],
    },
    /// A version this reader does not know (including big-endian files).
    #[error("unsupported GGUF version {version} (0x{version:08x}) at offset 4{hint}")]
    UnsupportedVersion {
        /// The raw little-endian version field.
        version: u32,
        /// Extra explanation, such as a big-endian file.
        hint: &'static str,
    },
    /// A metadata value type id outside 0..=12.
    #[error("invalid metadata value type {raw} at offset {offset}")]
    InvalidValueType {
        /// Byte offset of the type field.
        offset: u64,
        /// The raw id.
        raw: u32,
    },
    /// A boolean byte that is neither 0 nor 1.
    #[error("invalid bool byte {value} at offset {offset}")]
    InvalidBool {
        /// Byte offset of the value.
        offset: u64,
        /// The raw byte.
        value: u8,
    },
    /// A string that is not valid UTF-8.
    #[error("string at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// Byte offset of the string's bytes.
        offset: u64,
    },
    /// Arrays nested deeper than the reader allows.
    #[error("metadata arrays nested deeper than {max} levels at offset {offset}")]
    NestingTooDeep {
        /// Byte offset of the innermost array header.
        offset: u64,
        /// The limit.
        max: usize,
    },
    /// The same metadata key appears twice.
    #[error("duplicate metadata key {key:?} at offset {offset}")]
    DuplicateKey {
        /// The key.
        key: String,
        /// Byte offset of the second occurrence (0 when writing).
        offset: u64,
    },
    /// A metadata key holds a value of the wrong type.
    #[error("metadata key {key:?} has type {found}, expected {expected}")]
    WrongMetadataType {
        /// The key.
        key: String,
        /// The type required.
        expected: &'static str,
        /// The type found.
        found: String,
    },
    /// `general.alignment` is zero or not a power of two.
    #[error("invalid alignment {value}: must be a non-zero power of two")]
    BadAlignment {
        /// The value given.
        value: u64,
    },
    /// A tensor with more dimensions than ggml supports.
    #[error("tensor {tensor:?} at offset {offset} has {n_dims} dimensions; at most {max} are supported")]
    TooManyDims {
        /// Tensor name.
        tensor: String,
        /// Byte offset of the dimension count.
        offset: u64,
        /// The count found.
        n_dims: u32,
        /// The limit.
        max: usize,
    },
    /// A tensor type id that is not a known ggml type.
    #[error("tensor {tensor:?} has unknown ggml type id {raw} at offset {offset}")]
    UnknownTensorType {
        /// Tensor name.
        tensor: String,
        /// Byte offset of the type field.
        offset: u64,
        /// The raw id.
        raw: u32,
    },
    /// A tensor whose element or byte count overflows.
    #[error("tensor {tensor:?} has dimensions {dims:?} whose size overflows")]
    SizeOverflow {
        /// Tensor name.
        tensor: String,
        /// The dimensions, innermost first.
        dims: Vec<u64>,
    },
    /// A tensor whose innermost dimension is not a multiple of its type's block size.
    #[error("tensor {tensor:?}: innermost dimension {ne0} is not a multiple of the {ty} block size {block}")]
    BlockMismatch {
        /// Tensor name.
        tensor: String,
        /// Its type.
        ty: GgmlType,
        /// The innermost dimension.
        ne0: u64,
        /// The block size.
        block: usize,
    },
    /// The same tensor name appears twice.
    #[error("duplicate tensor name {tensor:?}")]
    DuplicateTensor {
        /// Tensor name.
        tensor: String,
    },
    /// A tensor offset that is not a multiple of the alignment.
    #[error("tensor {tensor:?} has data offset {offset}, not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        /// Tensor name.
        tensor: String,
        /// Offset relative to the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// Tensor data that runs past the end of the file.
    #[error("tensor {tensor:?} data spans bytes {start}..{end} of the file, but the file has {len} bytes")]
    TensorOutOfBounds {
        /// Tensor name.
        tensor: String,
        /// Absolute start offset.
        start: u64,
        /// Absolute end offset.
        end: u64,
        /// File length.
        len: u64,
    },
    /// No tensor of that name.
    #[error("no tensor named {name:?}")]
    TensorNotFound {
        /// The name asked for.
        name: String,
    },
    /// Dequantization of a type this crate does not implement.
    #[error("dequantization of ggml type {0} is not supported")]
    UnsupportedDequant(GgmlType),
    /// Quantization to a type this crate does not implement.
    #[error("quantization to ggml type {0} is not supported")]
    UnsupportedQuant(GgmlType),
    /// A buffer whose length does not fit the element count and type.
    #[error("{what}: expected {expected} bytes/elements, got {got}")]
    LengthMismatch {
        /// What was checked.
        what: String,
        /// Expected length.
        expected: usize,
        /// Actual length.
        got: usize,
    },
    /// A non-finite input to a quantizer.
    #[error("cannot quantize to {ty}: element {index} is {value}")]
    NonFinite {
        /// Target type.
        ty: GgmlType,
        /// Index of the element.
        index: usize,
        /// The value.
        value: f32,
    },
    /// A block whose scale does not fit the type's f16 scale field.
    #[error("cannot quantize to {ty}: block {block} needs scale {value}, beyond the f16 range")]
    ScaleOverflow {
        /// Target type.
        ty: GgmlType,
        /// Index of the block.
        block: usize,
        /// The scale that overflowed.
        value: f32,
    },
    /// A value that cannot be stored in the chosen GGUF version (e.g. a count above u32 in v1).
    #[error("cannot write GGUF v{version}: {what}")]
    NotRepresentable {
        /// The version being written.
        version: u32,
        /// What does not fit.
        what: String,
    },
}

impl Error {
    /// The error of an IR block codec, for the ggml type `ty` whose scheme it was running.
    pub(crate) fn from_codec(ty: GgmlType, e: rlx_ir::quant::QuantError) -> Self {
        use rlx_ir::quant::QuantError;
        match e {
            QuantError::NoQuantizer { .. } => Error::UnsupportedQuant(ty),
            QuantError::Length { what, expected, got, .. } => {
                Error::LengthMismatch { what: format!("{ty} {what}"), expected, got }
            }
            QuantError::NonFinite { index, value, .. } => Error::NonFinite { ty, index, value },
            QuantError::ScaleOverflow { block, value, .. } => Error::ScaleOverflow { ty, block, value },
        }
    }
}
