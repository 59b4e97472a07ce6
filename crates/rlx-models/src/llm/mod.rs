//! Decoder-only language models (Qwen3, Llama) from GGUF files or Hugging Face checkpoint
//! folders: config, weights (quantized weights stay packed; float ones may be quantized on
//! load), the graph, a KV cache that grows in place, and generation.

pub mod batch;
pub mod config;
pub mod generate;
pub mod graph;
pub mod hf;
pub mod model;
pub mod paged;
pub mod weights;

pub use batch::{BatchEvent, BatchFinish, BatchRequest, BatchScheduler, BatchStats, RequestId, generate_paged};
pub use config::{Arch, LlmConfig, RopeScaling};
pub use generate::{GenerateOptions, GenerateStats, generate, generate_batch};
pub use graph::{GraphSpec, k_cache_name, llm_graph, v_cache_name};
pub use hf::{HfCheckpoint, HfConfig, read_config};
pub use model::{LlmModel, LoadOptions};
pub use paged::{PagedConfig, PagedModel, SeqId, k_pages_name, paged_graph, v_pages_name};
pub use weights::{LayerWeight, LlmWeight, LlmWeights, ParamKind, WeightOptions};
