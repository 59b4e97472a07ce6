//! Conjugate gradient on the symmetric part `S = (A + A^T) / 2` of a square CSR matrix. `S` is
//! built once per solve as its own CSR (f64 values, u32 columns), so that each iteration is one
//! row-parallel product instead of a product and a scatter; the vectors are f64 whatever A's
//! value type, so an f32 A still reaches tight tolerances.

use crate::SparseError;
use crate::csr::Csr;
use crate::prod::CsrRef;
use crate::view::{Index, Real, validate};

/// Result of `cg`: the solution and how it got there.
#[derive(Debug, Clone, PartialEq)]
pub struct CgInfo {
    /// The solution.
    pub x: Vec<f64>,
    /// Iterations taken.
    pub iterations: usize,
    /// `||b - S x|| / ||b||` at the end (by the recurrence).
    pub residual: f64,
}

/// `S = (A + A^T) / 2` as CSR: row `i` holds A's row `i` and A's column `i`, each halved
/// (duplicates are summed by the product, not merged).
pub(crate) struct Sym {
    indptr: Vec<usize>,
    indices: Vec<u32>,
    values: Vec<f64>,
    n: usize,
}

impl Sym {
    /// Checks the pattern of the `n x n` A and builds S.
    pub fn new<P: Index, I: Index, V: Real>(
        op: &str,
        n: usize,
        indptr: &[P],
        indices: &[I],
        values: &[V],
    ) -> Result<Sym, SparseError> {
        validate(op, n, n, indptr, indices)?;
        if values.len() != indices.len() {
            let reason = format!("{} values for {} indices", values.len(), indices.len());
            return Err(SparseError::Pattern { op: op.into(), reason });
        }
        if n > u32::MAX as usize {
            let reason = format!("{n} rows: conjugate gradient takes at most {} (u32 columns)", u32::MAX);
            return Err(SparseError::Shape { op: op.into(), reason });
        }
        // validate() checked every index, so the casts below are in range.
        let at = |i: usize| indptr[i].get() as usize;
        let mut count = vec![0usize; n + 1];
        for i in 0..n {
            count[i + 1] += at(i + 1) - at(i);
        }
        for c in indices {
            count[c.get() as usize + 1] += 1;
        }
        for i in 0..n {
            count[i + 1] += count[i];
        }
        let total = count[n];
        let (mut next, mut cols, mut vals) = (count.clone(), vec![0u32; total], vec![0.0f64; total]);
        for i in 0..n {
            for p in at(i)..at(i + 1) {
                let (c, v) = (indices[p].get() as usize, 0.5 * values[p].f64());
                (cols[next[i]], vals[next[i]]) = (c as u32, v);
                next[i] += 1;
                (cols[next[c]], vals[next[c]]) = (i as u32, v);
                next[c] += 1;
            }
        }
        Ok(Sym { indptr: count, indices: cols, values: vals, n })
    }

    /// `y = S x`.
    fn apply(&self, op: &str, x: &[f64], y: &mut [f64]) -> Result<(), SparseError> {
        let a =
            CsrRef { indptr: &self.indptr, indices: &self.indices, values: &self.values, nrows: self.n, ncols: self.n };
        a.matmul(op, x, 1, y)
    }

    /// Solves `S x = b` by CG from zero: stops when `||r|| <= tol ||b||` (scipy's `rtol`,
    /// `atol = 0`); `SparseError::NotConverged` after `maxiter` iterations otherwise.
    pub fn solve(&self, op: &str, b: &[f64], tol: f64, maxiter: usize) -> Result<CgInfo, SparseError> {
        let n = b.len();
        let dot = |u: &[f64], v: &[f64]| u.iter().zip(v).map(|(a, b)| a * b).sum::<f64>();
        let bnorm = dot(b, b).sqrt();
        let mut x = vec![0.0; n];
        if bnorm == 0.0 {
            return Ok(CgInfo { x, iterations: 0, residual: 0.0 });
        }
        let (mut r, mut p, mut q) = (b.to_vec(), b.to_vec(), vec![0.0; n]);
        let mut rr = dot(&r, &r);
        for it in 0..maxiter {
            self.apply(op, &p, &mut q)?;
            let pq = dot(&p, &q);
            // A non-positive curvature means S is not positive definite: CG's assumption fails.
            if pq <= 0.0 || !pq.is_finite() {
                return Err(SparseError::NotPositiveDefinite { op: op.into(), iterations: it });
            }
            let alpha = rr / pq;
            x.iter_mut().zip(&p).for_each(|(x, p)| *x += alpha * p);
            r.iter_mut().zip(&q).for_each(|(r, q)| *r -= alpha * q);
            let rr_new = dot(&r, &r);
            if rr_new.sqrt() <= tol * bnorm {
                return Ok(CgInfo { x, iterations: it + 1, residual: rr_new.sqrt() / bnorm });
            }
            let beta = rr_new / rr;
            rr = rr_new;
            p.iter_mut().zip(&r).for_each(|(p, r)| *p = r + beta * *p);
        }
        Err(SparseError::NotConverged { op: op.into(), iterations: maxiter, residual: rr.sqrt() / bnorm, tol })
    }
}

/// Conjugate gradient for `S x = b` where `S = (A + A^T) / 2` (equal to `A` for a symmetric
/// `A`): stops when `||r|| <= tol ||b||` (scipy's `rtol`, `atol = 0`); `SparseError::NotConverged`
/// after `maxiter` iterations otherwise. Starts from zero.
pub fn cg(a: &Csr, b: &[f64], tol: f64, maxiter: usize) -> Result<CgInfo, SparseError> {
    if a.nrows != a.ncols || b.len() != a.nrows {
        return Err(SparseError::Shape {
            op: "cg".into(),
            reason: format!("needs a square A and b of its size, got {}x{} and {}", a.nrows, a.ncols, b.len()),
        });
    }
    Sym::new("cg", a.nrows, &a.indptr, &a.indices, &a.values)?.solve("cg", b, tol, maxiter)
}
