//! rlx-models: models built as rlx graphs from their published weights.
//!
//! Today: the BERT family (MiniLM, BGE, ...) as sentence-transformers embedders, from
//! memory-mapped safetensors (F32/F16/BF16) and a `tokenizer.json`. Nothing is downloaded:
//! the caller gives a model directory.
//!
//! ```no_run
//! use rlx_models::SentenceEmbedder;
//! use rlx_driver::Device;
//!
//! let mut m = SentenceEmbedder::load("path/to/all-MiniLM-L6-v2", Device::Cpu)?;
//! let e = m.embed(&["a sentence", "another, longer sentence"])?;
//! assert_eq!(e[0].len(), 384);
//! # Ok::<(), rlx_ir::Error>(())
//! ```
#![warn(missing_docs)]

pub mod bert;
pub mod embedder;
pub mod safetensors;
pub mod tokenizer;

pub use bert::{BertConfig, BertWeight, Pooling, SentenceOptions, bert_graph};
pub use embedder::SentenceEmbedder;
pub use safetensors::{SafetensorsFile, TensorEntry};
pub use tokenizer::{TextTokenizer, TokenBatch};
