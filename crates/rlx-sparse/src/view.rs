//! CSR arrays read in place: the index (`i32` / `i64` / `usize`) and value (`f32` / `f64`)
//! traits the kernels are generic over, the one-pass pattern check, and how rows are split over
//! rlx-cpu's thread pool.

use crate::SparseError;

/// An index type of the CSR arrays.
pub(crate) trait Index: bytemuck::Pod + Send + Sync {
    /// The index as i64 (negative ones stay negative, so the checks catch them).
    fn get(self) -> i64;
}

impl Index for i32 {
    #[inline(always)]
    fn get(self) -> i64 {
        self as i64
    }
}

impl Index for i64 {
    #[inline(always)]
    fn get(self) -> i64 {
        self
    }
}

impl Index for u32 {
    #[inline(always)]
    fn get(self) -> i64 {
        self as i64
    }
}

impl Index for usize {
    #[inline(always)]
    fn get(self) -> i64 {
        // Past i64::MAX cannot be a valid index anyway: saturate so the range check rejects it.
        i64::try_from(self).unwrap_or(i64::MAX)
    }
}

/// A value type of the CSR arrays and dense operands; the kernels accumulate in f64.
pub(crate) trait Real: bytemuck::Pod + Send + Sync {
    /// Widens to f64.
    fn f64(self) -> f64;
    /// Rounds from f64.
    fn of(v: f64) -> Self;
}

impl Real for f32 {
    #[inline(always)]
    fn f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn of(v: f64) -> Self {
        v as f32
    }
}

impl Real for f64 {
    #[inline(always)]
    fn f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn of(v: f64) -> Self {
        v
    }
}

/// Checks scipy's CSR invariants on the arrays as they are (no copy): `indptr` has `nrows + 1`
/// entries running from 0 to `nnz` without decreasing, and every column is in `0..ncols`.
pub(crate) fn validate<P: Index, I: Index>(
    op: &str,
    nrows: usize,
    ncols: usize,
    indptr: &[P],
    indices: &[I],
) -> Result<(), SparseError> {
    check_ends(op, nrows, indptr, indices.len())?;
    let bad = |reason: String| SparseError::Pattern { op: op.into(), reason };
    if let Some(i) = indptr.windows(2).position(|w| w[1].get() < w[0].get()) {
        return Err(bad(format!("indptr decreases at row {i}: {} > {}", indptr[i].get(), indptr[i + 1].get())));
    }
    if let Some(k) = indices.iter().position(|&c| !in_range(c.get(), ncols)) {
        return Err(bad(format!("column index {} at entry {k} is outside 0..{ncols}", indices[k].get())));
    }
    Ok(())
}

/// The cheap part of `validate`: indptr's length and its two ends.
pub(crate) fn check_ends<P: Index>(op: &str, nrows: usize, indptr: &[P], nnz: usize) -> Result<(), SparseError> {
    let bad = |reason: String| SparseError::Pattern { op: op.into(), reason };
    if indptr.len() != nrows + 1 {
        return Err(bad(format!("indptr has {} entries, {nrows} rows need {}", indptr.len(), nrows + 1)));
    }
    let (first, last) = (indptr[0].get(), indptr[nrows].get());
    if first != 0 || last != nnz as i64 {
        return Err(bad(format!("indptr must run from 0 to nnz = {nnz}, got {first} .. {last}")));
    }
    Ok(())
}

/// Whether `c` is in `0..n` (one unsigned compare: a negative `c` wraps past any `n`).
#[inline(always)]
pub(crate) fn in_range(c: i64, n: usize) -> bool {
    (c as u64) < n as u64
}

/// Row `i`'s entry range, if `indptr` is non-decreasing there and inside `0..=nnz`.
#[inline(always)]
pub(crate) fn row<P: Index>(indptr: &[P], i: usize, nnz: usize) -> Option<std::ops::Range<usize>> {
    let (s, e) = (indptr[i].get(), indptr[i + 1].get());
    (0 <= s && s <= e && e <= nnz as i64).then_some(s as usize..e as usize)
}

/// Multiply-adds below which a kernel runs on the calling thread (waking the pool costs more).
const PAR_MIN_WORK: usize = 1 << 15;

/// Row blocks for `work` multiply-adds over `nrows` rows: one block when the work is small or
/// the pool has one thread, else a few per thread so that a slow thread's share gets taken.
pub(crate) fn blocks(nrows: usize, work: usize) -> usize {
    let threads = rlx_cpu::threads::num_threads();
    if work < PAR_MIN_WORK || threads <= 1 || nrows < 2 { 1 } else { (threads * 4).min(nrows) }
}

/// The row bounds of `nb` blocks (`nb + 1` entries from 0 to nrows), balanced by stored entries
/// through binary search on `indptr`. Made non-decreasing whatever indptr holds (the kernels
/// check it), so the blocks always partition the rows and no two tasks share an output row.
pub(crate) fn block_bounds<P: Index>(indptr: &[P], nb: usize) -> Vec<usize> {
    let nrows = indptr.len() - 1;
    let nnz = indptr[nrows].get().max(0) as u128;
    let mut out = vec![0; nb + 1];
    for b in 1..nb {
        let target = (nnz * b as u128 / nb as u128) as i64;
        let by_nnz = indptr[..nrows].partition_point(|p| p.get() < target);
        out[b] = by_nnz.clamp(out[b - 1], nrows);
    }
    out[nb] = nrows;
    out
}

/// A raw output pointer shared by the tasks of a parallel loop, each writing its own range.
pub(crate) struct Out<T>(*mut T);

// SAFETY: tasks write disjoint ranges of one buffer that outlives the parallel loop.
unsafe impl<T> Sync for Out<T> {}

impl<T> Out<T> {
    /// Wraps the output slice.
    pub fn new(s: &mut [T]) -> Self {
        Out(s.as_mut_ptr())
    }

    /// Elements `range` of the output.
    ///
    /// # Safety
    /// The range lies inside the wrapped slice and no other task touches it meanwhile.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range(&self, r: std::ops::Range<usize>) -> &mut [T] {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(r.start), r.end - r.start) }
    }
}
