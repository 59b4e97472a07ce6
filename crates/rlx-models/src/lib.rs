//! rlx-models: models built as rlx graphs from their published weights.
//!
//! - The BERT family (MiniLM, BGE, ...) as sentence-transformers embedders, from memory-mapped
//!   safetensors (F32/F16/BF16) and a `tokenizer.json`.
//! - Qwen3 and Llama from GGUF files or Hugging Face checkpoint folders (`llm`): quantized
//!   weights stay packed (`qmatmul`), float ones are memory-mapped (and may be quantized to
//!   Q8_0 / Q4_K on load), a KV cache written in place, batched decode, sampling (`sampling`)
//!   and the model's tokenizer (`LlmTokenizer`: the one embedded in the GGUF file, or the
//!   folder's `tokenizer.json` with its special tokens and chat template).
//!
//! Nothing is downloaded: the caller gives a model directory or file.
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
//!
//! ```no_run
//! use rlx_models::{GenerateOptions, LlmModel, SamplerConfig, generate, load_tokenizer};
//! use rlx_driver::Device;
//!
//! // A `.gguf` file, or a Hugging Face folder (config.json, *.safetensors, tokenizer.json).
//! let path = "Qwen3-0.6B";
//! let mut m = LlmModel::load(path, Device::Cpu, 512)?;
//! let tok = load_tokenizer(path)?;
//! let prompt = tok.encode("The capital of France is")?;
//! let opts = GenerateOptions { max_tokens: 32, sampler: SamplerConfig::default(), stop_tokens: tok.stop_tokens() };
//! let out = generate(&mut m, &prompt, &opts, |t| {
//!     print!("{}", String::from_utf8_lossy(&tok.piece_bytes(t)));
//!     true
//! })?;
//! println!("\n{:.1} tok/s", out.decode_tok_s());
//! # Ok::<(), rlx_ir::Error>(())
//! ```
#![warn(missing_docs)]

pub mod bert;
pub mod embedder;
pub mod gguf_tokenizer;
pub mod hf_tokenizer;
pub mod llm;
pub mod llm_tokenizer;
pub mod safetensors;
pub mod sampling;
pub mod tokenizer;

pub use bert::{BertConfig, BertWeight, Pooling, SentenceOptions, bert_graph};
pub use embedder::SentenceEmbedder;
pub use gguf_tokenizer::GgufTokenizer;
pub use hf_tokenizer::HfTokenizer;
pub use llm::{GenerateOptions, GenerateStats, LlmConfig, LlmModel, LoadOptions, generate, generate_batch};
pub use llm_tokenizer::{LlmTokenizer, load_tokenizer};
pub use safetensors::{SafetensorsFile, TensorEntry};
pub use sampling::{Sampler, SamplerConfig};
pub use tokenizer::{TextTokenizer, TokenBatch};
