//! 3D Gaussian splatting as custom ops (`rlx_ir::custom`): `splat_render` rasterizes N
//! anisotropic Gaussians (means, log-scales, quaternions, opacity logits, RGB colors) through a
//! pinhole camera into an `[H, W, 3]` image, as the 3DGS paper and gsplat do (EWA projection,
//! 3-sigma squares, 16-pixel tiles, depth sort, front-to-back alpha compositing), and
//! `splat_render_grad` is its native backward (the per-pixel reverse walk, chained to the 3-D
//! parameters), wired in as the VJP so `rlx_autodiff::grad` differentiates through rendering.
//!
//! Both run in f64 inside (f32 graphs are widened and narrowed at the edges). Differences from
//! gsplat, on purpose: a Gaussian touches only pixels whose centers lie in its 3-sigma square
//! (gsplat draws it on every pixel of its tiles), so tiles never change the image; the
//! projection's Jacobian is not clamped to 1.3x the field of view; no spherical harmonics.
//!
//! ```
//! use rlx_ir::{DType, Graph, Shape};
//! use rlx_splat::{Camera, SplatRender};
//! rlx_splat::register().unwrap();
//! let mut g = Graph::new("demo");
//! let n = 2;
//! let ins: Vec<_> = [("m", 3), ("s", 3), ("q", 4), ("o", 0), ("c", 3)]
//!     .iter()
//!     .map(|&(name, k)| {
//!         let dims = if k == 0 { vec![n] } else { vec![n, k] };
//!         g.input(name, Shape::new(&dims, DType::F32))
//!     })
//!     .collect();
//! let img = rlx_splat::splat_render(&mut g, SplatRender::new(Camera::pinhole(32, 24, 30.0, 4.0)), &ins);
//! g.set_outputs(vec![img]);
//! assert_eq!(g.shape(img).unwrap().to_string(), "f32[24,32,3]");
//! ```
#![warn(missing_docs)]

mod kernels;
mod ops;
mod raster;

pub use ops::{Camera, SplatRender, SplatRenderGrad};
pub use raster::{Scene, backward, render};

use rlx_ir::custom::CustomOpDef;
use rlx_ir::{DType, Graph, NodeId};

/// What went wrong; each variant names the op and, where one is at fault, the input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SplatError {
    /// An input's size does not fit the others.
    #[error("{op}: {input} {reason}")]
    Shape {
        /// The op.
        op: String,
        /// The input at fault.
        input: String,
        /// What is wrong.
        reason: String,
    },
    /// An input holds an unusable value (not finite, a zero quaternion).
    #[error("{op}: {input}: {reason}")]
    Value {
        /// The op.
        op: String,
        /// The input at fault.
        input: String,
        /// What is wrong.
        reason: String,
    },
    /// The op's attributes are invalid.
    #[error("{op}: bad attributes: {reason}")]
    Attr {
        /// The op.
        op: String,
        /// What is wrong.
        reason: String,
    },
}

impl SplatError {
    /// The op the error names.
    pub fn op(&self) -> &str {
        match self {
            SplatError::Shape { op, .. } | SplatError::Value { op, .. } | SplatError::Attr { op, .. } => op,
        }
    }
}

impl From<SplatError> for rlx_ir::Error {
    fn from(e: SplatError) -> rlx_ir::Error {
        rlx_ir::Error::eval(e.op().to_string(), e.to_string())
    }
}

/// Why `register` failed (shared by the custom-op crates).
pub use rlx_cpu::custom::RegisterError;

/// Registers both ops and their f32 / f64 CPU kernels (idempotent).
pub fn register() -> Result<(), RegisterError> {
    const TYPES: &[DType] = &[DType::F32, DType::F64];
    rlx_ir::custom::register::<SplatRender>()?;
    rlx_ir::custom::register::<SplatRenderGrad>()?;
    rlx_cpu::custom::register_kernel(SplatRender::NAME, TYPES, kernels::render)?;
    rlx_cpu::custom::register_kernel(SplatRenderGrad::NAME, TYPES, kernels::render_grad)?;
    Ok(())
}

/// Adds `splat_render` over the five scene nodes (means, log-scales, quaternions, opacity
/// logits, colors).
pub fn splat_render(g: &mut Graph, op: SplatRender, scene: &[NodeId]) -> NodeId {
    g.custom(op, scene)
}

/// A random scene of `n` Gaussians within `extent` of the origin (means, log-scales,
/// quaternions, opacity logits, colors, flat), deterministic in `seed`: for samples and examples.
pub fn random_scene(n: usize, seed: u64, extent: f64) -> Vec<Vec<f64>> {
    use rlx_ir::ops::util::rand_f64;
    let means = rand_f64(3 * n, -extent, extent, seed);
    let log_scales = rand_f64(3 * n, -2.3, -1.2, seed + 1).iter().map(|v| v + extent.ln()).collect();
    let quats = rand_f64(4 * n, -1.0, 1.0, seed + 2);
    let opacity = rand_f64(n, -0.5, 2.0, seed + 3);
    let colors = rand_f64(3 * n, 0.0, 1.0, seed + 4);
    vec![means, log_scales, quats, opacity, colors]
}
