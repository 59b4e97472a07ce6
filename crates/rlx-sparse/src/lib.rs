//! Sparse matrices in RLX graphs, as custom ops (`rlx_ir::custom`): a CSR matrix is its three
//! arrays (indptr, indices: i32 or i64; values: f32 or f64, differentiable) with its dense shape
//! kept on the op, so the sparsity pattern is data but the shape is static.
//!
//! Ops (each with a plain-Rust f64 reference, a CPU kernel, jvp / vjp rules and samples):
//! - `csr_matmul`: `A x`, `A X`, `A^T x` (`spmv`, `spmm`, `spmv_t`);
//! - `csr_sddmm`: dot products sampled on A's pattern (the values' cotangent);
//! - `cg_solve`: conjugate gradient on the symmetric part of A, differentiated through the
//!   adjoint solve (another CG);
//! - `splu_solve`: faer's sparse LU, differentiated the same way with `A^T`.
//!
//! The CPU kernels read the arrays in place (one instance per index and value type), check the
//! pattern in the same pass as the arithmetic, and split rows over rlx-cpu's pool when the work
//! is large enough.
//!
//! Batching: a batch of dense operands against one matrix (`csr_matmul`'s x, the solves' b)
//! becomes one call over their columns (one spmm, one factorization); a batched matrix (pattern
//! or values) and `csr_sddmm` unroll.
//!
//! ```
//! use rlx_ir::{DType, Graph, Shape};
//! use rlx_sparse::Csr;
//! rlx_sparse::register().unwrap();
//! let a = Csr::from_triplets(2, 2, &[(0, 0, 4.0), (0, 1, 1.0), (1, 0, 1.0), (1, 1, 3.0)]).unwrap();
//! let mut g = Graph::new("demo");
//! let an = a.inputs(&mut g, "A", DType::F64);
//! let b = g.input("b", Shape::new(&[2], DType::F64));
//! let x = rlx_sparse::cg_solve(&mut g, an, b, 1e-12, None);
//! g.set_outputs(vec![x]);
//! let mut feeds = a.feeds("A", DType::F64);
//! feeds.push(("b".into(), rlx_ir::HostTensor::from_f64(&[2], DType::F64, &[1.0, 2.0]).unwrap()));
//! let feeds: Vec<(&str, _)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
//! let x = rlx_driver::run_host(&rlx_cpu::CpuBackend::new(), &g, &feeds).unwrap();
//! let x = x[0].to_f64_vec().unwrap();
//! assert!((4.0 * x[0] + x[1] - 1.0).abs() < 1e-10 && (x[0] + 3.0 * x[1] - 2.0).abs() < 1e-10);
//! ```
#![warn(missing_docs)]

mod cg;
mod csr;
mod kernels;
mod ops;
mod prod;
mod solve;
mod view;

pub use cg::{CgInfo, cg};
pub use csr::{Csr, CsrNodes};
pub use ops::{CsrMatMul, CsrSddmm};
pub use solve::{CgSolve, LuSolve};

use rlx_ir::custom::CustomOpDef;
use rlx_ir::{DType, Graph, NodeId};

/// What went wrong in a sparse computation; each variant names the op (or function).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SparseError {
    /// The CSR arrays break scipy's invariants.
    #[error("{op}: invalid CSR pattern: {reason}")]
    Pattern {
        /// The op or function.
        op: String,
        /// What is wrong.
        reason: String,
    },
    /// Operand sizes do not fit.
    #[error("{op}: {reason}")]
    Shape {
        /// The op or function.
        op: String,
        /// What is wrong.
        reason: String,
    },
    /// CG ran out of iterations.
    #[error(
        "{op}: conjugate gradient did not converge in {iterations} iterations (relative residual {residual:e} > tol {tol:e})"
    )]
    NotConverged {
        /// The op or function.
        op: String,
        /// Iterations run.
        iterations: usize,
        /// `||r|| / ||b||` at the end.
        residual: f64,
        /// The tolerance asked for.
        tol: f64,
    },
    /// CG met a direction of non-positive curvature: the matrix is not positive definite.
    #[error("{op}: the matrix is not positive definite (non-positive curvature at iteration {iterations})")]
    NotPositiveDefinite {
        /// The op or function.
        op: String,
        /// The iteration.
        iterations: usize,
    },
    /// A direct solve found no usable pivot.
    #[error("{op}: the matrix is singular (no pivot at column {index})")]
    Singular {
        /// The op or function.
        op: String,
        /// The column.
        index: usize,
    },
    /// faer reported an error other than singularity.
    #[error("{op}: {reason}")]
    Backend {
        /// The op or function.
        op: String,
        /// faer's message.
        reason: String,
    },
}

impl SparseError {
    /// The op or function the error names.
    pub fn op(&self) -> &str {
        match self {
            SparseError::Pattern { op, .. }
            | SparseError::Shape { op, .. }
            | SparseError::NotConverged { op, .. }
            | SparseError::NotPositiveDefinite { op, .. }
            | SparseError::Singular { op, .. }
            | SparseError::Backend { op, .. } => op,
        }
    }
}

/// Why `register` failed (shared by the custom-op crates).
pub use rlx_cpu::custom::RegisterError;

/// Registers the four ops and their CPU kernels (idempotent).
pub fn register() -> Result<(), RegisterError> {
    const TYPES: &[DType] = &[DType::I32, DType::I64, DType::F32, DType::F64];
    rlx_ir::custom::register::<CsrMatMul>()?;
    rlx_ir::custom::register::<CsrSddmm>()?;
    rlx_ir::custom::register::<CgSolve>()?;
    rlx_ir::custom::register::<LuSolve>()?;
    rlx_cpu::custom::register_kernel(CsrMatMul::NAME, TYPES, kernels::matmul)?;
    rlx_cpu::custom::register_kernel(CsrSddmm::NAME, TYPES, kernels::sddmm)?;
    rlx_cpu::custom::register_kernel(CgSolve::NAME, TYPES, kernels::cg)?;
    rlx_cpu::custom::register_kernel(LuSolve::NAME, TYPES, kernels::splu)?;
    Ok(())
}

fn product(g: &mut Graph, a: CsrNodes, x: NodeId, transpose: bool) -> NodeId {
    let op = CsrMatMul { nrows: a.shape[0], ncols: a.shape[1], transpose };
    g.custom(op, &[a.indptr, a.indices, a.values, x])
}

/// `A x` for a vector `x` (also accepts a matrix, as `spmm`).
pub fn spmv(g: &mut Graph, a: CsrNodes, x: NodeId) -> NodeId {
    product(g, a, x, false)
}

/// `A X` for a matrix `X` `[ncols, k]`.
pub fn spmm(g: &mut Graph, a: CsrNodes, x: NodeId) -> NodeId {
    product(g, a, x, false)
}

/// `A^T x` (vector or matrix).
pub fn spmv_t(g: &mut Graph, a: CsrNodes, x: NodeId) -> NodeId {
    product(g, a, x, true)
}

/// `x = S^-1 b` by CG, `S` the symmetric part of the square `A` (see `CgSolve`).
pub fn cg_solve(g: &mut Graph, a: CsrNodes, b: NodeId, tol: f64, maxiter: Option<usize>) -> NodeId {
    g.custom(CgSolve { n: a.shape[0], tol, maxiter }, &[a.indptr, a.indices, a.values, b])
}

/// `x = A^-1 b` by faer's sparse LU (see `LuSolve`).
pub fn splu_solve(g: &mut Graph, a: CsrNodes, b: NodeId) -> NodeId {
    g.custom(LuSolve { n: a.shape[0], transpose: false }, &[a.indptr, a.indices, a.values, b])
}

/// Solves `A x = b` outside a graph through faer's sparse LU (the `splu_solve` kernel).
pub fn splu(a: &Csr, b: &[f64]) -> Result<Vec<f64>, SparseError> {
    if a.nrows != a.ncols || b.len() != a.nrows {
        return Err(SparseError::Shape {
            op: "splu".into(),
            reason: format!("needs a square A and b of its size, got {}x{} and {}", a.nrows, a.ncols, b.len()),
        });
    }
    let p = a.pattern("splu")?;
    kernels::lu_solve_pattern(&p, &a.values, a.nrows, b)
}
