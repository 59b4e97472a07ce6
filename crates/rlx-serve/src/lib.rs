//! `rlx serve`: an OpenAI-compatible HTTP server for Qwen3 / Llama models (GGUF files or Hugging
//! Face checkpoint folders).
//!
//! - `server`: start-up, the axum router (`/v1/completions`, `/v1/chat/completions`,
//!   `/v1/models`, `/health`, `/metrics`), server-sent events, SIGINT / SIGTERM.
//! - `api`: request fields checked one by one (400s name the field) and the response bodies.
//! - `engine`: the `Engine` trait, the seam where scheduling plugs in, and `BatchEngine`, one
//!   worker thread running rlx-models' `BatchScheduler` (paged KV cache, continuous batching)
//!   from a bounded queue.
//! - `chat`: ChatML / Llama 3 prompts recognized from the GGUF's chat template, and a plain
//!   fallback.
//! - `stop`: stop strings held back while they may still match; UTF-8 joined across tokens.
//! - `metrics`: Prometheus text.

pub mod api;
pub mod chat;
pub mod engine;
pub mod error;
pub mod metrics;
pub mod server;
pub mod stop;

pub use engine::{BatchEngine, Engine, Event, FinishReason, GenRequest, SubmitError};
pub use error::{ApiError, ServeError};
pub use server::{ServeConfig, Server};
