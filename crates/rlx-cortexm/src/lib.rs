//! INT8 inference for ARM Cortex-M microcontrollers (`thumbv7em-none-eabihf`: Cortex-M4F / M7),
//! `no_std`, no allocation: kernels on the TFLite Micro quantization scheme and a [`Model`] that
//! runs a layer table laid out over one static arena planned at export (`rlx export cortexm`).
//!
//! The scheme: weights int8 symmetric per output channel (zero point 0), activations int8
//! asymmetric (scale and zero point per tensor), bias int32 at scale `s_in * s_w[c]`, and each
//! output requantized by a Q31 multiplier and a shift with CMSIS-NN's rounding (see
//! [`requant`]). Results are bit-exact with TFLite Micro's reference kernels; the inner int8 dot
//! product runs on the DSP extension's `SXTB16` / `SMLAD` where the target has it ([`simd`]).
//!
//! The same code builds for the host, where the tests check it against TFLite Micro's reference
//! kernels (`tests/tflm.rs`, fixtures from `tools/tflm_fixtures.py`) and the exporter's tests
//! check it against rlx's INT8 reference graph.
//!
//! On a device: `rlx export cortexm --model CKPT --out DIR` writes `model.rs` (a `static MODEL`
//! and `ARENA_SIZE`); a firmware `include!`s it, fills `MODEL.input_mut(arena)`, calls
//! `MODEL.invoke(arena)` and reads `MODEL.output(arena)`. `firmware/` is such a firmware for the
//! digits models on QEMU's mps2-an386, and `.ci/cortexm.sh` builds and runs it (Debian's Rust
//! toolchain, `-Z build-std=core`, target `thumbv7em-none-eabihf`).

#![no_std]
#![warn(missing_docs)]

pub mod kernels;
pub mod model;
pub mod params;
pub mod requant;
pub mod simd;

pub use model::{Layer, Model, Op, Slot};

/// Why a kernel or a model refused to run. Kernels check every length they index with, so bad
/// parameters are an error, never a panic or an out-of-bounds read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// A buffer or parameter has the wrong length.
    Shape {
        /// The kernel.
        op: &'static str,
        /// Which buffer or parameter.
        what: &'static str,
        /// The length the other parameters imply.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A parameter is out of its range.
    Param {
        /// The kernel.
        op: &'static str,
        /// What is wrong.
        what: &'static str,
    },
    /// The arena is smaller than the model's plan.
    Arena {
        /// Bytes the plan needs.
        need: usize,
        /// Bytes given.
        got: usize,
    },
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Shape { op, what, expected, got } => {
                write!(f, "{op}: {what} has {got} elements, expected {expected}")
            }
            Error::Param { op, what } => write!(f, "{op}: {what}"),
            Error::Arena { need, got } => write!(f, "arena of {got} bytes, the model needs {need}"),
        }
    }
}

impl core::error::Error for Error {}
