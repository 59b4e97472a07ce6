//! RLX: a machine-learning compiler and runtime.
//!
//! Cargo features pick the backends and layers built in: `cpu` (default, `Device::Cpu`),
//! `wgpu` (alias `gpu`; `Device::Wgpu` on Vulkan, Metal or DX12), `tpu` (`Device::Tpu`, XLA through
//! a PJRT plugin), `mlx` (`Device::Mlx`), `nn` (default, `rlx::nn`), `models` (default,
//! `rlx::models`) and `gguf` (default, `rlx::gguf`). A backend from another crate plugs in through
//! `Session::with_backend`.
//!
//! ```
//! use rlx::prelude::*;
//!
//! fn main() -> rlx::Result<()> {
//!     let mut g = Graph::new("hello");
//!     let x = g.input("x", Shape::new(&[1, 4], DType::F32));
//!     let w = g.param("w", Shape::new(&[4, 2], DType::F32));
//!     let y = g.matmul(x, w); // output type inferred: [1, 2] f32
//!     g.set_outputs(vec![y]);
//!
//!     let mut compiled = Session::new(Device::Cpu).compile(g)?;
//!     compiled.set_param("w", &[1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0])?;
//!     let out = compiled.run(&[("x", &[1.0, 2.0, 3.0, 4.0])])?;
//!     assert_eq!(out, vec![vec![4.0, 6.0]]);
//!     Ok(())
//! }
//! ```
#![warn(missing_docs)]

pub use rlx_autodiff as autodiff;
pub use rlx_driver as driver;
pub use rlx_ir as ir;
pub use rlx_runtime as runtime;

/// Layers, losses, optimizers and `TrainStep` (the `nn` feature).
#[cfg(feature = "nn")]
pub use rlx_nn as nn;

/// BERT-family embeddings and Qwen3 / Llama from GGUF (the `models` feature).
#[cfg(feature = "models")]
pub use rlx_models as models;

/// The GGUF reader and writer, ggml tensor types and (de)quantization of their data (the `gguf`
/// feature). The block codecs themselves are the IR's: `rlx::ir::QuantScheme`.
#[cfg(feature = "gguf")]
pub use rlx_gguf as gguf;

/// Dense linear algebra as registered custom ops (`linalg` feature).
#[cfg(feature = "linalg")]
pub use rlx_linalg as linalg;

pub use rlx_ir::{Error, Result};

/// Everything a typical program needs: `use rlx::prelude::*`.
pub mod prelude {
    pub use rlx_autodiff::{grad, grad_with_loss, hvp, jacfwd, jacrev, jvp, vjp, vmap};
    pub use rlx_driver::{Device, DispatchReport};
    pub use rlx_ir::{DType, Dim, Error, Graph, HostTensor, MaskKind, NodeId, Result, Shape};
    pub use rlx_runtime::{CompileOptions, CompiledGraph, DispatchPolicy, ExecutionMode, PrecisionPolicy, Session};
}
