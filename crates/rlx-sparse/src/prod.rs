//! The product kernels on CSR arrays read in place: `A X`, `A^T X` and the sampled products
//! (`csr_sddmm`), generic over the index and value types, accumulating in f64, with the pattern
//! checked in the same pass as the arithmetic and rows split over rlx-cpu's pool when the work
//! is large enough. A check that fails stops the kernel, which then runs `validate` for the
//! typed error (the first bad entry, as the serial check names it).

use crate::SparseError;
use crate::view::{Index, Out, Real, block_bounds, blocks, check_ends, in_range, row, validate};
use std::sync::atomic::{AtomicBool, Ordering};

/// Columns of X one pass over a row accumulates (a register-sized block of f64 sums).
const CHUNK: usize = 16;

/// A CSR matrix as borrowed arrays.
pub(crate) struct CsrRef<'a, P, I, V> {
    /// Row starts (`nrows + 1`).
    pub indptr: &'a [P],
    /// Columns.
    pub indices: &'a [I],
    /// Values (as many as indices).
    pub values: &'a [V],
    /// Rows.
    pub nrows: usize,
    /// Columns.
    pub ncols: usize,
}

/// The fused check found something wrong; the caller finds out what with `validate`.
struct Bad;

impl<P: Index, I: Index, V: Real> CsrRef<'_, P, I, V> {
    /// The typed error for a pattern the fused check rejected.
    fn error(&self, op: &str) -> SparseError {
        match validate(op, self.nrows, self.ncols, self.indptr, self.indices) {
            Err(e) => e,
            // Unreachable for a consistent check; kept as an error rather than a panic.
            Ok(()) => SparseError::Pattern { op: op.into(), reason: "inconsistent pattern".into() },
        }
    }

    /// Checks the array lengths against each other and the operands'.
    fn check_sizes(
        &self,
        op: &str,
        x: usize,
        xrows: usize,
        y: usize,
        yrows: usize,
        k: usize,
    ) -> Result<(), SparseError> {
        check_ends(op, self.nrows, self.indptr, self.indices.len())?;
        let shape = |reason: String| SparseError::Shape { op: op.into(), reason };
        if self.values.len() != self.indices.len() {
            return Err(shape(format!("{} values for {} indices", self.values.len(), self.indices.len())));
        }
        if x != xrows * k || y != yrows * k {
            return Err(shape(format!("operands of {x} and {y} entries for {xrows} and {yrows} rows of {k}")));
        }
        Ok(())
    }

    /// `y[rows] = A[rows] x` for the rows of one block (`y` holds just those rows).
    fn rows_into<X: Real>(&self, x: &[X], k: usize, rows: std::ops::Range<usize>, y: &mut [X]) -> Result<(), Bad> {
        let nnz = self.indices.len();
        for i in rows.clone() {
            let r = row(self.indptr, i, nnz).ok_or(Bad)?;
            let (cols, vals) = (&self.indices[r.clone()], &self.values[r]);
            let yi = &mut y[(i - rows.start) * k..][..k];
            if k == 1 {
                let mut acc = 0.0;
                for (c, v) in cols.iter().zip(vals) {
                    let c = c.get();
                    if !in_range(c, self.ncols) {
                        return Err(Bad);
                    }
                    // SAFETY: x has ncols entries (check_sizes) and c < ncols.
                    acc += v.f64() * unsafe { x.get_unchecked(c as usize) }.f64();
                }
                yi[0] = X::of(acc);
                continue;
            }
            if cols.iter().any(|c| !in_range(c.get(), self.ncols)) {
                return Err(Bad);
            }
            for j0 in (0..k).step_by(CHUNK) {
                let w = (k - j0).min(CHUNK);
                let mut acc = [0.0f64; CHUNK];
                for (c, v) in cols.iter().zip(vals) {
                    let (xr, v) = (&x[c.get() as usize * k + j0..][..w], v.f64());
                    acc[..w].iter_mut().zip(xr).for_each(|(a, xv)| *a += v * xv.f64());
                }
                yi[j0..j0 + w].iter_mut().zip(&acc[..w]).for_each(|(o, a)| *o = X::of(*a));
            }
        }
        Ok(())
    }

    /// `y = A x`, `x` `[ncols, k]` and `y` `[nrows, k]` row-major.
    pub fn matmul<X: Real>(&self, op: &str, x: &[X], k: usize, y: &mut [X]) -> Result<(), SparseError> {
        self.check_sizes(op, x.len(), self.ncols, y.len(), self.nrows, k)?;
        let nb = blocks(self.nrows, self.indices.len() * k);
        if nb == 1 {
            return self.rows_into(x, k, 0..self.nrows, y).map_err(|_| self.error(op));
        }
        let bounds = block_bounds(self.indptr, nb);
        let (out, bad) = (Out::new(y), AtomicBool::new(false));
        rlx_cpu::threads::parallel_for(nb, &|b| {
            let rows = bounds[b]..bounds[b + 1];
            // SAFETY: the blocks partition the rows, so each task writes its own rows of y.
            let yb = unsafe { out.range(rows.start * k..rows.end * k) };
            if self.rows_into(x, k, rows, yb).is_err() {
                bad.store(true, Ordering::Relaxed);
            }
        });
        if bad.load(Ordering::Relaxed) { Err(self.error(op)) } else { Ok(()) }
    }

    /// `acc += A[rows]^T x[rows]`, `acc` `[ncols, k]` in f64.
    fn scatter<X: Real>(&self, x: &[X], k: usize, rows: std::ops::Range<usize>, acc: &mut [f64]) -> Result<(), Bad> {
        let nnz = self.indices.len();
        for i in rows {
            let r = row(self.indptr, i, nnz).ok_or(Bad)?;
            let xi = &x[i * k..][..k];
            for (c, v) in self.indices[r.clone()].iter().zip(&self.values[r]) {
                let (c, v) = (c.get(), v.f64());
                if !in_range(c, self.ncols) {
                    return Err(Bad);
                }
                let ar = &mut acc[c as usize * k..][..k];
                ar.iter_mut().zip(xi).for_each(|(a, xv)| *a += v * xv.f64());
            }
        }
        Ok(())
    }

    /// `y = A^T x`, `x` `[nrows, k]` and `y` `[ncols, k]`: each thread scatters its rows into a
    /// private f64 sum (threads would race on shared output rows), then the sums are added.
    pub fn matmul_t<X: Real>(&self, op: &str, x: &[X], k: usize, y: &mut [X]) -> Result<(), SparseError> {
        self.check_sizes(op, x.len(), self.nrows, y.len(), self.ncols, k)?;
        let len = self.ncols * k;
        let threads = rlx_cpu::threads::num_threads();
        let parts = if blocks(self.nrows, self.indices.len() * k) == 1 { 1 } else { threads.min(self.nrows) };
        let mut sums = vec![0.0f64; parts * len];
        if parts == 1 {
            self.scatter(x, k, 0..self.nrows, &mut sums).map_err(|_| self.error(op))?;
            y.iter_mut().zip(&sums).for_each(|(o, s)| *o = X::of(*s));
            return Ok(());
        }
        let bounds = block_bounds(self.indptr, parts);
        let bad = AtomicBool::new(false);
        {
            let out = Out::new(&mut sums);
            rlx_cpu::threads::parallel_for(parts, &|p| {
                // SAFETY: part p owns its own `len` sums.
                let acc = unsafe { out.range(p * len..(p + 1) * len) };
                if self.scatter(x, k, bounds[p]..bounds[p + 1], acc).is_err() {
                    bad.store(true, Ordering::Relaxed);
                }
            });
        }
        if bad.load(Ordering::Relaxed) {
            return Err(self.error(op));
        }
        let (out, sums) = (Out::new(y), &sums);
        let nb = (threads * 4).min(len.max(1));
        rlx_cpu::threads::parallel_for(nb, &|b| {
            let r = len * b / nb..len * (b + 1) / nb;
            // SAFETY: the chunks partition y.
            let yb = unsafe { out.range(r.clone()) };
            for (j, o) in r.zip(yb.iter_mut()) {
                *o = X::of((0..parts).map(|p| sums[p * len + j]).sum());
            }
        });
        Ok(())
    }
}

/// `out[p] = <left[row p], right[col p]>` (rows of `k`) over the pattern `indptr`, `indices` of
/// an `nrows x ncols` matrix, in place and in parallel like `matmul`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sddmm<P: Index, I: Index, X: Real>(
    op: &str,
    (nrows, ncols): (usize, usize),
    indptr: &[P],
    indices: &[I],
    left: &[X],
    right: &[X],
    k: usize,
    out: &mut [X],
) -> Result<(), SparseError> {
    let nnz = indices.len();
    let a = CsrRef::<P, I, X> { indptr, indices, values: &[], nrows, ncols };
    check_ends(op, nrows, indptr, nnz)?;
    if left.len() != nrows * k || right.len() != ncols * k || out.len() != nnz {
        let reason = format!(
            "left of {}, right of {} and {} outputs for {nrows}x{ncols}, k {k}, nnz {nnz}",
            left.len(),
            right.len(),
            out.len()
        );
        return Err(SparseError::Shape { op: op.into(), reason });
    }
    let nb = blocks(nrows, nnz * k);
    let bounds = block_bounds(indptr, nb);
    // Each block writes the entries between its first and last row start: those must be ordered
    // before the blocks run, so that the blocks' entries never overlap.
    let starts: Vec<i64> = bounds.iter().map(|&r| indptr[r].get()).collect();
    if starts.windows(2).any(|w| w[1] < w[0]) || starts.iter().any(|&s| !(0..=nnz as i64).contains(&s)) {
        return Err(a.error(op));
    }
    let block = |rows: std::ops::Range<usize>, o: &mut [X], base: usize| -> Result<(), Bad> {
        for i in rows {
            let r = row(indptr, i, nnz).ok_or(Bad)?;
            if r.start < base || r.end > base + o.len() {
                return Err(Bad);
            }
            let li = &left[i * k..][..k];
            for (p, c) in r.clone().zip(&indices[r]) {
                let c = c.get();
                if !in_range(c, ncols) {
                    return Err(Bad);
                }
                let rc = &right[c as usize * k..][..k];
                o[p - base] = X::of(li.iter().zip(rc).map(|(l, r)| l.f64() * r.f64()).sum());
            }
        }
        Ok(())
    };
    let bad = AtomicBool::new(false);
    let outp = Out::new(out);
    let run = |b: usize| {
        let (s, e) = (starts[b] as usize, starts[b + 1] as usize);
        // SAFETY: the starts are ordered and inside 0..=nnz, so the blocks' ranges are disjoint.
        let o = unsafe { outp.range(s..e) };
        if block(bounds[b]..bounds[b + 1], o, s).is_err() {
            bad.store(true, Ordering::Relaxed);
        }
    };
    if nb == 1 {
        run(0);
    } else {
        rlx_cpu::threads::parallel_for(nb, &run);
    }
    if bad.load(Ordering::Relaxed) { Err(a.error(op)) } else { Ok(()) }
}
