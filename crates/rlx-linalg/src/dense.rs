//! The numeric cores on faer, in f64, on row-major buffers: one matrix (or matrix and right-hand
//! side) at a time. The reference evaluations and the CPU kernels both call these, so the kernels
//! are checked against numpy's fixtures through the same code.
//!
//! A row-major `n x n` buffer read column-major is the transpose, so `Lu` factors `A^T` straight
//! from the buffer (one copy, no transposition) and answers `A x = b` with faer's transposed solve.

use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::lu::partial_pivoting::{factor, solve};
use faer::{Mat, MatRef, Par, Side};

/// The LU factorization (partial pivoting) of `A^T`, for a row-major `A`.
pub(crate) struct Lu {
    lu: Mat<f64>,
    perm: Vec<usize>,
    perm_inv: Vec<usize>,
    transpositions: usize,
}

impl Lu {
    /// Factors the row-major `n x n` matrix `a` (single-threaded: kernels parallelize over the
    /// batch instead, so a batch never oversubscribes the cores).
    pub(crate) fn new(a: &[f64], n: usize) -> Lu {
        let mut lu = MatRef::from_column_major_slice(a, n, n).to_owned();
        let (mut perm, mut perm_inv) = (vec![0usize; n], vec![0usize; n]);
        let mut mem = MemBuffer::new(factor::lu_in_place_scratch::<usize, f64>(n, n, Par::Seq, Default::default()));
        let (info, _) = factor::lu_in_place(
            lu.as_mut(),
            &mut perm,
            &mut perm_inv,
            Par::Seq,
            MemStack::new(&mut mem),
            Default::default(),
        );
        Lu { lu, perm, perm_inv, transpositions: info.transposition_count }
    }

    /// The index of the first exactly zero pivot: the matrix is singular and has no solve or
    /// inverse.
    pub(crate) fn zero_pivot(&self) -> Option<usize> {
        (0..self.lu.nrows()).find(|&i| self.lu[(i, i)] == 0.0)
    }

    /// Solves `A x = b` for the row-major `n x k` `b`, into the row-major `out`.
    pub(crate) fn solve(&self, b: &[f64], k: usize, out: &mut [f64]) {
        let n = self.lu.nrows();
        let mut x = Mat::from_fn(n, k, |i, j| b[i * k + j]);
        let perm = faer::perm::PermRef::new_checked(&self.perm, &self.perm_inv, n);
        let mut mem = MemBuffer::new(solve::solve_transpose_in_place_scratch::<usize, f64>(n, k, Par::Seq));
        solve::solve_transpose_in_place(
            self.lu.as_ref(),
            self.lu.as_ref(),
            perm,
            x.as_mut(),
            Par::Seq,
            MemStack::new(&mut mem),
        );
        for i in 0..n {
            for j in 0..k {
                out[i * k + j] = x[(i, j)];
            }
        }
    }

    /// `A^-1`, row-major, into `out`.
    pub(crate) fn inverse(&self, out: &mut [f64]) {
        let n = self.lu.nrows();
        let eye: Vec<f64> = (0..n * n).map(|i| if i / n == i % n { 1.0 } else { 0.0 }).collect();
        self.solve(&eye, n, out);
    }

    /// `(sign, log|det A|)` as numpy's slogdet: `(0, -inf)` for a singular matrix.
    pub(crate) fn slogdet(&self) -> (f64, f64) {
        let mut sign = if self.transpositions.is_multiple_of(2) { 1.0 } else { -1.0 };
        let mut log = 0.0;
        for i in 0..self.lu.nrows() {
            let d = self.lu[(i, i)];
            if d == 0.0 {
                return (0.0, f64::NEG_INFINITY);
            }
            sign *= d.signum();
            log += d.abs().ln();
        }
        (sign, log)
    }

    /// `det A`: the product of the pivots (not `exp(logabsdet)`, which loses digits).
    pub(crate) fn det(&self) -> f64 {
        let sign = if self.transpositions.is_multiple_of(2) { 1.0 } else { -1.0 };
        (0..self.lu.nrows()).fold(sign, |p, i| p * self.lu[(i, i)])
    }
}

/// The lower Cholesky factor of `(A + A^T) / 2` for the row-major `n x n` `a`, row-major into
/// `out` (upper triangle zero). Err(index of the failing pivot) when it is not positive definite.
pub(crate) fn cholesky(a: &[f64], n: usize, out: &mut [f64]) -> Result<(), usize> {
    // Symmetrized so the value matches the derivative (JAX's rule symmetrizes the tangent).
    let sym = Mat::from_fn(n, n, |i, j| 0.5 * (a[i * n + j] + a[j * n + i]));
    let llt = sym.llt(Side::Lower).map_err(|e| match e {
        faer::linalg::cholesky::llt::factor::LltError::NonPositivePivot { index } => index,
    })?;
    let l = llt.L();
    for i in 0..n {
        for j in 0..n {
            out[i * n + j] = if j <= i { l[(i, j)] } else { 0.0 };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_cases_by_hand() {
        // A = [[2, 1], [1, 3]]: det 5, A^-1 = [[3, -1], [-1, 2]] / 5.
        let a = [2.0, 1.0, 1.0, 3.0];
        let lu = Lu::new(&a, 2);
        assert!((lu.det() - 5.0).abs() < 1e-12);
        let mut inv = [0.0; 4];
        lu.inverse(&mut inv);
        for (g, w) in inv.iter().zip([0.6, -0.2, -0.2, 0.4]) {
            assert!((g - w).abs() < 1e-12, "{inv:?}");
        }
        // A x = [3, 4] -> x = [1, 1]; a non-symmetric A checks the transposed solve.
        let b = [[1.0, 2.0], [3.0, 4.0]].concat();
        let mut x = [0.0; 2];
        Lu::new(&b, 2).solve(&[5.0, 11.0], 1, &mut x);
        assert!((x[0] - 1.0).abs() < 1e-12 && (x[1] - 2.0).abs() < 1e-12, "{x:?}");
        assert_eq!(Lu::new(&[1.0, 2.0, 2.0, 4.0], 2).zero_pivot(), Some(1));
        assert_eq!(Lu::new(&[0.0, 1.0, 1.0, 0.0], 2).slogdet(), (-1.0, 0.0));
        let mut l = [0.0; 4];
        cholesky(&[4.0, 2.0, 2.0, 5.0], 2, &mut l).unwrap();
        assert_eq!(l, [2.0, 0.0, 1.0, 2.0]);
        assert_eq!(cholesky(&[1.0, 2.0, 2.0, 1.0], 2, &mut l), Err(1));
    }
}
