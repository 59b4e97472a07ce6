#![doc = include_str!("../../../docs/transforms.md")]
#![warn(missing_docs)]

mod api;
mod batch;
pub mod check;
mod coverage;
mod diff;
mod jac;

pub use api::{bind_input, grad, grad_with_loss, hvp, jvp, leaf, vjp};
pub use batch::{BatchedBy, vmap};
pub use coverage::{Coverage, coverage, coverage_table};
pub use jac::{jacfwd, jacrev};
