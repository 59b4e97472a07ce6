//! Decoder-only language models (Qwen3, Llama) from GGUF files: config, weights (quantized
//! weights stay packed), the graph, a KV cache that grows in place, and generation.

pub mod config;
pub mod generate;
pub mod graph;
pub mod model;
pub mod weights;

pub use config::{Arch, LlmConfig};
pub use generate::{GenerateOptions, GenerateStats, generate, generate_batch};
pub use graph::{GraphSpec, k_cache_name, llm_graph, v_cache_name};
pub use model::LlmModel;
pub use weights::{LayerWeight, LlmWeight, LlmWeights, ParamKind};
