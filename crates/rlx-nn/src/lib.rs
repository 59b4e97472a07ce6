//! rlx-nn: neural-network building blocks on the RLX graph.
//!
//! Layers declare named, seeded params on a [`Builder`] (flax-style scopes); losses and
//! optimizers are graph builders with optax semantics; [`TrainStep`] compiles forward,
//! backward and the optimizer update into one graph whose params and optimizer state stay in
//! the compiled arena; [`checkpoint`] saves and loads them as safetensors.
#![warn(missing_docs)]

pub mod amp;
pub mod checkpoint;
pub mod data;
pub mod gpt;
pub mod init;
pub mod layers;
pub mod loss;
pub mod mamba;
pub mod module;
pub mod optim;
pub mod quant;
pub mod train;
pub mod train_dp;

pub use amp::{MixedPrecision, PrecisionPolicy};
pub use init::{Init, Rng};
pub use layers::{Activation, Conv2d, Embedding, LayerNorm, Linear, Mlp, RmsNorm, SelfAttention, SwiGlu};
pub use mamba::Mamba;
pub use module::{Builder, ParamSpec, ParamStore};
pub use optim::{Adam, Optimizer, Schedule, Sgd};
pub use train::{TrainConfig, TrainStep};
pub use train_dp::{DataParallelStep, DpError};
