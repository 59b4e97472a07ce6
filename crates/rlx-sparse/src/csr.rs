//! The Rust-side CSR matrix (`Csr`) and the plain-Rust f64 numerics the op references share:
//! the checked pattern, products and a dense direct solve (the oracle).

use crate::SparseError;
use rlx_ir::{DType, Graph, HostTensor, NodeId, Shape};

/// A compressed-sparse-row matrix in f64 with scipy's layout: row `i` holds the entries
/// `indptr[i]..indptr[i + 1]` of `indices` (columns) and `values`.
#[derive(Debug, Clone, PartialEq)]
pub struct Csr {
    /// Rows.
    pub nrows: usize,
    /// Columns.
    pub ncols: usize,
    /// Row starts, `nrows + 1` entries, from 0 to `nnz`, non-decreasing.
    pub indptr: Vec<usize>,
    /// Column of each stored entry.
    pub indices: Vec<usize>,
    /// Value of each stored entry.
    pub values: Vec<f64>,
}

/// The graph nodes of a CSR matrix: its three arrays, with the dense shape kept on the ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CsrNodes {
    /// Row starts (i32 or i64).
    pub indptr: NodeId,
    /// Column indices (i32 or i64).
    pub indices: NodeId,
    /// Stored values (f32 or f64): the differentiable part.
    pub values: NodeId,
    /// The dense shape `[nrows, ncols]`.
    pub shape: [usize; 2],
}

impl Csr {
    /// From scipy-like arrays (`indptr`, `indices`, `data`), checked: the pattern must be valid.
    pub fn from_arrays(
        nrows: usize,
        ncols: usize,
        indptr: &[i64],
        indices: &[i64],
        values: &[f64],
    ) -> Result<Csr, SparseError> {
        let p = Pattern::new("Csr::from_arrays", nrows, ncols, indptr, indices)?;
        if values.len() != p.indices.len() {
            return Err(SparseError::Pattern {
                op: "Csr::from_arrays".into(),
                reason: format!("{} values for {} indices", values.len(), p.indices.len()),
            });
        }
        Ok(Csr { nrows, ncols, indptr: p.indptr, indices: p.indices, values: values.to_vec() })
    }

    /// From (row, col, value) triplets; entries at the same position are summed (as scipy's
    /// `coo_matrix.tocsr()`), columns come out sorted within each row.
    pub fn from_triplets(nrows: usize, ncols: usize, triplets: &[(usize, usize, f64)]) -> Result<Csr, SparseError> {
        let mut t = triplets.to_vec();
        if let Some(&(r, c, _)) = t.iter().find(|&&(r, c, _)| r >= nrows || c >= ncols) {
            return Err(SparseError::Pattern {
                op: "Csr::from_triplets".into(),
                reason: format!("entry ({r}, {c}) is outside the {nrows}x{ncols} matrix"),
            });
        }
        t.sort_by_key(|&(r, c, _)| (r, c));
        let (mut indptr, mut indices, mut values) = (vec![0usize; nrows + 1], vec![], vec![]);
        let mut last = None;
        for (r, c, v) in t {
            if last == Some((r, c)) {
                *values.last_mut().expect("an entry before") += v;
                continue;
            }
            last = Some((r, c));
            indptr[r + 1] += 1;
            indices.push(c);
            values.push(v);
        }
        for i in 0..nrows {
            indptr[i + 1] += indptr[i];
        }
        Ok(Csr { nrows, ncols, indptr, indices, values })
    }

    /// The checked pattern (the fields are public, so a hand-built `Csr` may break it).
    pub(crate) fn pattern(&self, op: &str) -> Result<Pattern, SparseError> {
        let ints = |v: &[usize]| v.iter().map(|&i| i as i64).collect::<Vec<_>>();
        let p = Pattern::new(op, self.nrows, self.ncols, &ints(&self.indptr), &ints(&self.indices))?;
        if self.values.len() != p.indices.len() {
            return Err(SparseError::Pattern {
                op: op.into(),
                reason: format!("{} values for {} indices", self.values.len(), p.indices.len()),
            });
        }
        Ok(p)
    }

    /// Stored entries.
    pub fn nnz(&self) -> usize {
        self.values.len()
    }

    /// The dense matrix, row-major (entries at the same place summed).
    pub fn to_dense(&self) -> Result<Vec<f64>, SparseError> {
        let p = self.pattern("Csr::to_dense")?;
        let mut d = vec![0.0; self.nrows * self.ncols];
        for i in 0..self.nrows {
            for k in p.indptr[i]..p.indptr[i + 1] {
                d[i * self.ncols + p.indices[k]] += self.values[k];
            }
        }
        Ok(d)
    }

    /// `A x` for a vector `x` of `ncols`.
    pub fn matvec(&self, x: &[f64]) -> Result<Vec<f64>, SparseError> {
        if x.len() != self.ncols {
            return Err(SparseError::Shape {
                op: "Csr::matvec".into(),
                reason: format!("x has {} entries, A is {}x{}", x.len(), self.nrows, self.ncols),
            });
        }
        let mut y = vec![0.0; self.nrows];
        let a = crate::prod::CsrRef {
            indptr: &self.indptr,
            indices: &self.indices,
            values: &self.values,
            nrows: self.nrows,
            ncols: self.ncols,
        };
        a.matmul("Csr::matvec", x, 1, &mut y)?;
        Ok(y)
    }

    /// Graph inputs named `{name}.indptr`, `{name}.indices` (i64) and `{name}.values` (`dtype`),
    /// shaped for this matrix; `feeds` gives the tensors to bind them to.
    pub fn inputs(&self, g: &mut Graph, name: &str, dtype: DType) -> CsrNodes {
        CsrNodes {
            indptr: g.input(&format!("{name}.indptr"), Shape::new(&[self.nrows + 1], DType::I64)),
            indices: g.input(&format!("{name}.indices"), Shape::new(&[self.nnz()], DType::I64)),
            values: g.input(&format!("{name}.values"), Shape::new(&[self.nnz()], dtype)),
            shape: [self.nrows, self.ncols],
        }
    }

    /// The tensors for `inputs(g, name, dtype)`.
    pub fn feeds(&self, name: &str, dtype: DType) -> Vec<(String, HostTensor)> {
        let ints = |v: &[usize]| v.iter().map(|&i| i as i64).collect::<Vec<_>>();
        let t = |dims: usize, v: Vec<i64>| HostTensor::from_i64(&[dims], DType::I64, &v).expect("sized");
        vec![
            (format!("{name}.indptr"), t(self.nrows + 1, ints(&self.indptr))),
            (format!("{name}.indices"), t(self.nnz(), ints(&self.indices))),
            (format!("{name}.values"), HostTensor::from_f64(&[self.nnz()], dtype, &self.values).expect("sized")),
        ]
    }
}

/// A checked sparsity pattern (indices as usize).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pattern {
    pub indptr: Vec<usize>,
    pub indices: Vec<usize>,
}

impl Pattern {
    /// Checks scipy's invariants; `op` names the caller in the error.
    pub fn new(op: &str, nrows: usize, ncols: usize, indptr: &[i64], indices: &[i64]) -> Result<Pattern, SparseError> {
        crate::view::validate(op, nrows, ncols, indptr, indices)?;
        Ok(Pattern {
            indptr: indptr.iter().map(|&i| i as usize).collect(),
            indices: indices.iter().map(|&i| i as usize).collect(),
        })
    }
}

/// `y (+)= op(A) x` with `x` holding `k` columns row-major; `transpose` uses `A^T`. `y` must be
/// zeroed by the caller (rows of A for the plain product, columns for the transpose).
pub(crate) fn product(
    indptr: &[usize],
    indices: &[usize],
    values: &[f64],
    x: &[f64],
    k: usize,
    transpose: bool,
    y: &mut [f64],
) {
    for i in 0..indptr.len() - 1 {
        for p in indptr[i]..indptr[i + 1] {
            let (c, v) = (indices[p], values[p]);
            if transpose {
                for j in 0..k {
                    y[c * k + j] += v * x[i * k + j];
                }
            } else {
                for j in 0..k {
                    y[i * k + j] += v * x[c * k + j];
                }
            }
        }
    }
}

/// `out[p] = <left[row p], right[col p]>` over the pattern, rows of `k` entries.
pub(crate) fn sampled(indptr: &[usize], indices: &[usize], left: &[f64], right: &[f64], k: usize, out: &mut [f64]) {
    for i in 0..indptr.len() - 1 {
        for p in indptr[i]..indptr[i + 1] {
            let c = indices[p];
            out[p] = (0..k).map(|j| left[i * k + j] * right[c * k + j]).sum();
        }
    }
}

/// Solves `M X = B` for a dense row-major `n x n` `M` and `B` of `k` columns, by Gaussian
/// elimination with partial pivoting: the naive oracle the sparse kernels are checked against.
pub(crate) fn dense_solve(op: &str, n: usize, m: &[f64], b: &[f64], k: usize) -> Result<Vec<f64>, SparseError> {
    let (mut a, mut x) = (m.to_vec(), b.to_vec());
    let scale = a.iter().fold(0.0f64, |s, v| s.max(v.abs()));
    for col in 0..n {
        let piv = (col..n).max_by(|&i, &j| a[i * n + col].abs().total_cmp(&a[j * n + col].abs())).expect("rows");
        if a[piv * n + col].abs() <= scale * 1e-14 {
            return Err(SparseError::Singular { op: op.into(), index: col });
        }
        for j in 0..n {
            a.swap(col * n + j, piv * n + j);
        }
        for j in 0..k {
            x.swap(col * k + j, piv * k + j);
        }
        for r in col + 1..n {
            let f = a[r * n + col] / a[col * n + col];
            for j in col..n {
                a[r * n + j] -= f * a[col * n + j];
            }
            for j in 0..k {
                x[r * k + j] -= f * x[col * k + j];
            }
        }
    }
    for col in (0..n).rev() {
        for j in 0..k {
            let s: f64 = (col + 1..n).map(|c| a[col * n + c] * x[c * k + j]).sum();
            x[col * k + j] = (x[col * k + j] - s) / a[col * n + col];
        }
    }
    Ok(x)
}
