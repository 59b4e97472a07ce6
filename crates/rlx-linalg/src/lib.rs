//! Dense linear algebra as custom ops (`rlx_ir::custom`), computed with faer (pure Rust):
//! `solve`, `cholesky`, `inv`, `det`, `slogdet`. Leading axes are batch dims, as numpy's; the
//! derivatives are JAX's. `register()` registers the ops and their CPU kernels (f32 and f64; the
//! kernels work in f64 and spread batch items over rlx-cpu's pool).
//!
//! Values without an answer: `solve` and `inv` of an exactly singular matrix (a zero LU pivot)
//! and `cholesky` of a matrix that is not positive definite are `Error::Eval` naming the op and
//! the batch item, where JAX returns NaN silently; `det` / `slogdet` of a singular matrix are 0 /
//! `(0, -inf)`, as numpy's. `cholesky` reads `(a + a^T) / 2`, so its value and its (JAX,
//! symmetrized) derivative agree for any input.
//!
//! ```
//! use rlx_ir::{DType, Graph, Shape};
//! rlx_linalg::register().unwrap();
//! let mut g = Graph::new("demo");
//! let a = g.input("a", Shape::new(&[4, 3, 3], DType::F64));
//! let b = g.input("b", Shape::new(&[3], DType::F64));
//! let x = rlx_linalg::solve(&mut g, a, b);
//! assert_eq!(g.shape(x).unwrap().fixed_dims(), Some(vec![4, 3]));
//! ```
#![warn(missing_docs)]

mod batch;
mod dense;
mod factor;
mod solve;
mod util;

pub use factor::{Cholesky, Det, Inv, Slogdet, SlogdetPart, cholesky, det, inv, slogdet};
pub use solve::{Solve, solve};

use rlx_cpu::custom::{KernelRegistryError, register_kernel};
use rlx_ir::DType;
use rlx_ir::custom::{CustomOpDef, RegistryError, register as register_op};

/// Why `register` failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// An op's name is taken.
    #[error(transparent)]
    Op(#[from] RegistryError),
    /// Another CPU kernel holds an op's name.
    #[error(transparent)]
    Kernel(#[from] KernelRegistryError),
}

/// The dtypes the CPU kernels take.
const DTYPES: &[DType] = &[DType::F32, DType::F64];

/// Registers every op and its CPU kernel (idempotent).
pub fn register() -> Result<(), RegisterError> {
    register_op::<Solve>()?;
    register_op::<Cholesky>()?;
    register_op::<Inv>()?;
    register_op::<Det>()?;
    register_op::<Slogdet>()?;
    register_kernel(Solve::NAME, DTYPES, solve::cpu_kernel)?;
    register_kernel(Cholesky::NAME, DTYPES, factor::cholesky_kernel)?;
    register_kernel(Inv::NAME, DTYPES, factor::inv_kernel)?;
    register_kernel(Det::NAME, DTYPES, factor::det_kernel)?;
    register_kernel(Slogdet::NAME, DTYPES, factor::slogdet_kernel)?;
    Ok(())
}
