//! Dense linear algebra as custom ops (`rlx_ir::custom`), computed with faer (pure Rust):
//! `solve`, `cholesky`, `inv`, `det`, `slogdet`, `qr` (reduced), `eigh` (symmetric), `svd`
//! (reduced), and `lstsq` (composed from `qr` and `solve`). Leading axes are batch dims, as numpy's; the derivatives are JAX's. `register()` registers the ops and their CPU kernels (f32 and f64; the
//! kernels work in f64 and spread batch items over rlx-cpu's pool).
//!
//! Values without an answer: `solve` and `inv` of an exactly singular matrix (a zero LU pivot)
//! and `cholesky` of a matrix that is not positive definite are `Error::Eval` naming the op and
//! the batch item, where JAX returns NaN silently; `det` / `slogdet` of a singular matrix are 0 /
//! `(0, -inf)`, as numpy's. `cholesky` reads `(a + a^T) / 2`, so its value and its (JAX,
//! symmetrized) derivative agree for any input; so does `eigh`.
//!
//! Decompositions fix their signs so outputs are unique: `qr` has `diag(r) >= 0`, and each
//! eigenvector of `eigh` and each column of `svd`'s `u` has its entry of largest magnitude
//! positive (`vt`'s rows follow `u`'s columns). The derivatives of `eigh`'s eigenvectors and
//! `svd`'s `u`, `vt` are undefined where eigenvalues / singular values repeat (they divide by
//! their differences), and `svd`'s also where a singular value is zero.
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

/// The OpDef items every op here shares: a name, one input, the composite trait, and the batch
/// rule that applies the op to the vmapped input as it is.
macro_rules! common {
    () => {
        fn name(&self) -> &'static str {
            Self::NAME
        }
        fn traits(&self) -> OpTraits {
            OpTraits::COMPOSITE
        }
        fn arity(&self) -> Arity {
            Arity::Exact(1)
        }
        fn batch(&self, g: &mut Graph, ins: &[NodeId], _batched: &[bool], _size: usize) -> Option<NodeId> {
            Some(g.add_node(op(self.clone()), &[ins[0]]))
        }
    };
}

mod batch;
mod decomp;
mod dense;
mod eigh;
mod factor;
mod lstsq;
mod qr;
mod solve;
mod svd;
mod util;

pub use eigh::{Eigh, EighPart, eigh};
pub use factor::{Cholesky, Det, Inv, Slogdet, SlogdetPart, cholesky, det, inv, slogdet};
pub use lstsq::{LstsqError, lstsq};
pub use qr::{Qr, QrPart, qr};
pub use solve::{Solve, solve};
pub use svd::{Svd, SvdPart, svd};

use rlx_cpu::custom::register_kernel;
use rlx_ir::DType;
use rlx_ir::custom::{CustomOpDef, register as register_op};

/// Why `register` failed (shared by the custom-op crates).
pub use rlx_cpu::custom::RegisterError;

/// The dtypes the CPU kernels take.
const DTYPES: &[DType] = &[DType::F32, DType::F64];

/// Registers every op and its CPU kernel (idempotent).
pub fn register() -> Result<(), RegisterError> {
    register_op::<Solve>()?;
    register_op::<Cholesky>()?;
    register_op::<Inv>()?;
    register_op::<Det>()?;
    register_op::<Slogdet>()?;
    register_op::<Qr>()?;
    register_op::<Eigh>()?;
    register_op::<Svd>()?;
    register_kernel(Solve::NAME, DTYPES, solve::cpu_kernel)?;
    register_kernel(Cholesky::NAME, DTYPES, factor::cholesky_kernel)?;
    register_kernel(Inv::NAME, DTYPES, factor::inv_kernel)?;
    register_kernel(Det::NAME, DTYPES, factor::det_kernel)?;
    register_kernel(Slogdet::NAME, DTYPES, factor::slogdet_kernel)?;
    register_kernel(Qr::NAME, DTYPES, qr::qr_kernel)?;
    register_kernel(Eigh::NAME, DTYPES, eigh::eigh_kernel)?;
    register_kernel(Svd::NAME, DTYPES, svd::svd_kernel)?;
    Ok(())
}
