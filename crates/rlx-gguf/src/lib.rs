//! GGUF for RLX: a reader for GGUF v1, v2 and v3 (memory-mapped, zero-copy tensor views, every
//! metadata type including nested arrays), a writer, and (de)quantization of tensor data. The
//! block layouts' codecs belong to the IR ([`rlx_ir::QuantScheme`]); [`GgmlType::scheme`] maps a
//! GGUF type onto them.
//!
//! Every offset and count read from a file is checked against the file's length before use, so a
//! truncated or hostile file gives an [`Error`] naming the offset, never a panic or a huge allocation.
//!
//! ```
//! use rlx_gguf::{GgmlType, GgufFile, GgufWriter, Value, quantize};
//! let weights: Vec<f32> = (0..256).map(|i| (i as f32 * 0.1).sin()).collect();
//! let mut w = GgufWriter::new();
//! w.add_metadata("general.architecture", Value::String("llama".into()))?;
//! w.add_tensor("w", &[256], GgmlType::Q8_0, quantize(GgmlType::Q8_0, &weights)?)?;
//! let file = GgufFile::from_bytes(w.to_bytes()?)?;
//! let back = file.tensor("w")?.to_f32()?;
//! assert!(back.iter().zip(&weights).all(|(a, b)| (a - b).abs() < 0.01));
//! # Ok::<(), rlx_gguf::Error>(())
//! ```

#![warn(missing_docs)]

mod dequant;
mod error;
mod inspect;
mod quant;
mod reader;
mod types;
mod value;
mod writer;

pub use dequant::{IQ4_NL_VALUES, dequantize, dequantize_into};
pub use error::{Error, Result};
pub use inspect::{inspect, inspect_file};
pub use quant::quantize;
pub use reader::{
    ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, Gguf, GgufFile, MAX_ARRAY_DEPTH, MAX_DIMS, TensorInfo, TensorView,
};
pub use types::{GgmlType, QK_K};
pub use value::{Array, Value, ValueType};
pub use writer::GgufWriter;
