//! rlx-mlx: RLX graphs on Apple MLX (`Device::Mlx`): Metal on a Mac, the CPU build of the
//! `mlx[cpu]` wheel on Linux.
//!
//! libmlx is reached through a small C ABI shim (`shim/shim.cpp`) that the build script compiles
//! against an installed MLX and the crate loads at run time, so nothing downstream links libmlx
//! and a build without it still works (`Device::Mlx` then says why it is unavailable). A
//! legalized graph becomes a list of shim calls (`program.rs`), decided per node by the emitter
//! table (`emit.rs`, the backend's kernel table); a run replays the list, which builds MLX's lazy
//! graph, and evaluates the outputs once (`CompileOptions::mode` or `RLX_MLX_MODE` = `eager` evaluates after every op so a
//! failure names its node).
#![warn(missing_docs)]

mod backend;
mod emit;
mod program;
mod quant;
mod shim;

pub use backend::{MlxBackend, probe};
