//! The product ops: `csr_matmul` (`op(A) X` for a CSR `A`, X a vector or a matrix) and
//! `csr_sddmm` (row-by-row dot products sampled on A's pattern, the values' cotangent). The two
//! are each other's derivatives, so every order of differentiation stays on sparse kernels.

use crate::SparseError;
use crate::csr::{Pattern, product, sampled};
use rlx_ir::custom::CustomOpDef;
use rlx_ir::{DType, Data, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// `op(A) X` where `A` is the CSR matrix `(indptr, indices, values)` of dense shape
/// `[nrows, ncols]` and `op(A)` is `A` or, with `transpose`, `A^T`. Inputs: indptr, indices
/// (i32 or i64), values `[nnz]`, X `[n]` or `[n, k]` (float, the values' dtype); output
/// `[m]` or `[m, k]`. Differentiable in values and X.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CsrMatMul {
    /// Rows of A.
    pub nrows: usize,
    /// Columns of A.
    pub ncols: usize,
    /// Multiply by `A^T` instead of `A`.
    pub transpose: bool,
}

/// `out[p] = sum_j L[row(p), j] R[col(p), j]` over A's pattern: inputs indptr, indices, L
/// `[nrows]` or `[nrows, k]`, R `[ncols]` or `[ncols, k]`; output `[nnz]`. With vectors, this is
/// the outer product `L R^T` gathered on the pattern (the cotangent of A's values).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CsrSddmm {
    /// Rows of A.
    pub nrows: usize,
    /// Columns of A.
    pub ncols: usize,
}

impl CustomOpDef for CsrMatMul {
    const NAME: &'static str = "csr_matmul";
}

impl CustomOpDef for CsrSddmm {
    const NAME: &'static str = "csr_sddmm";
}

/// Checks the two pattern inputs' types; returns nnz.
pub(crate) fn infer_pattern(ins: &[&Shape], nrows: usize) -> std::result::Result<usize, String> {
    for (i, what) in [(0, "indptr"), (1, "indices")] {
        if !ins[i].dtype.is_int() || ins[i].rank() != 1 {
            return Err(format!("{what} must be a 1-D integer tensor, got {}", ins[i]));
        }
    }
    let d0 = ins[0].dims_fixed()?;
    if d0[0] != nrows + 1 {
        return Err(format!("indptr has {} entries, {nrows} rows need {}", d0[0], nrows + 1));
    }
    Ok(ins[1].dims_fixed()?[0])
}

/// Checks a float operand of `rows` rows (1-D or 2-D); returns its column count (1 for a vector).
pub(crate) fn infer_operand(what: &str, s: &Shape, rows: usize, dtype: DType) -> std::result::Result<usize, String> {
    let d = s.dims_fixed()?;
    if s.dtype != dtype {
        return Err(format!("{what} has dtype {}, the values {dtype}", s.dtype));
    }
    match d.as_slice() {
        [r] if *r == rows => Ok(1),
        [r, k] if *r == rows => Ok(*k),
        _ => Err(format!("{what} must be [{rows}] or [{rows}, k], got {s}")),
    }
}

/// Reads a pattern from the two index tensors (for references).
pub(crate) fn pattern_of(op: &str, ins: &[&HostTensor], nrows: usize, ncols: usize) -> Result<Pattern> {
    Pattern::new(op, nrows, ncols, &ins[0].to_i64_vec()?, &ins[1].to_i64_vec()?).map_err(Error::from)
}

/// The f64 values of a float tensor.
pub(crate) fn floats(op: &str, t: &HostTensor) -> Result<Vec<f64>> {
    match &t.data {
        Data::F(v) => Ok(v.clone()),
        _ => Err(Error::eval(op, "needs a float tensor")),
    }
}

impl From<SparseError> for Error {
    fn from(e: SparseError) -> Error {
        Error::eval(e.op().to_string(), e.to_string())
    }
}

/// Adds two optional terms (None = zero).
pub(crate) fn add_opt(g: &mut Graph, a: Option<NodeId>, b: Option<NodeId>) -> Option<NodeId> {
    match (a, b) {
        (Some(a), Some(b)) => Some(g.add(a, b)),
        (a, b) => a.or(b),
    }
}

/// The batching rule of an op whose only batched input is its last, a dense operand `[B, r]` or
/// `[B, r, k]` with one result column per operand column (`csr_matmul`, the solves): the batch
/// moves into the columns, `[r, B k]`, one call of the op handles all of it, and the result
/// `[m, B k]` moves back to `[B, m(, k)]`. None (unroll) when the matrix itself is batched.
pub(crate) fn batch_columns(g: &mut Graph, op: rlx_ir::Op, ins: &[NodeId], batched: &[bool]) -> Option<NodeId> {
    if batched.len() != 4 || batched[..3].iter().any(|&b| b) || !batched[3] {
        return None;
    }
    let d = rlx_ir::ops::rules::dims(g, ins[3]);
    let (x, k) = match d.as_slice() {
        [_, _] => (g.transpose(ins[3], &[1, 0]), None),
        [b, r, k] => {
            let t = g.transpose(ins[3], &[1, 0, 2]);
            (g.reshape(t, &[*r, b * k]), Some(*k))
        }
        _ => return None,
    };
    let y = g.add_node(op, &[ins[0], ins[1], ins[2], x]);
    let m = rlx_ir::ops::rules::dims(g, y)[0];
    Some(match k {
        None => g.transpose(y, &[1, 0]),
        Some(k) => {
            let r = g.reshape(y, &[m, d[0], k]);
            g.transpose(r, &[1, 0, 2])
        }
    })
}

/// `c * x` for a constant `c`.
pub(crate) fn scale(g: &mut Graph, x: NodeId, c: f64) -> NodeId {
    let s = g.scalar(c, g.dtype(x));
    g.mul(x, s)
}

impl OpDef for CsrMatMul {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn traits(&self) -> OpTraits {
        OpTraits::CONTRACTION
    }
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let nnz = infer_pattern(ins, self.nrows)?;
        let dt = ins[2].dtype;
        if !dt.is_float() || ins[2].dims_fixed()? != [nnz] {
            return Err(format!("values must be float [{nnz}] (as indices), got {}", ins[2]));
        }
        let (inner, outer) = if self.transpose { (self.nrows, self.ncols) } else { (self.ncols, self.nrows) };
        let k = infer_operand("x", ins[3], inner, dt)?;
        Ok(if ins[3].rank() == 1 { Shape::new(&[outer], dt) } else { Shape::new(&[outer, k], dt) })
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let p = pattern_of(Self::NAME, ins, self.nrows, self.ncols)?;
        let (v, x) = (floats(Self::NAME, ins[2])?, floats(Self::NAME, ins[3])?);
        let k = if ins[3].dims().len() == 2 { ins[3].dims()[1] } else { 1 };
        let mut y = vec![0.0; out.numel().unwrap_or(0)];
        product(&p.indptr, &p.indices, &v, &x, k, self.transpose, &mut y);
        HostTensor::new(out.clone(), Data::F(y))
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], _out: NodeId) -> Option<NodeId> {
        // Bilinear in (values, x): the product rule.
        let dv = t[2].map(|dv| g.custom(self.clone(), &[ins[0], ins[1], dv, ins[3]]));
        let dx = t[3].map(|dx| g.custom(self.clone(), &[ins[0], ins[1], ins[2], dx]));
        add_opt(g, dv, dx)
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let t = CsrMatMul { transpose: !self.transpose, ..self.clone() };
        let dx = g.custom(t, &[ins[0], ins[1], ins[2], ct]);
        let s = CsrSddmm { nrows: self.nrows, ncols: self.ncols };
        // y = A x: dA = ct x^T; y = A^T x: dA = x ct^T; both gathered on the pattern.
        let (l, r) = if self.transpose { (ins[3], ct) } else { (ct, ins[3]) };
        let dv = g.custom(s, &[ins[0], ins[1], l, r]);
        Some(vec![None, None, Some(dv), Some(dx)])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        // A batch of operands against one matrix is one spmm over their columns.
        batch_columns(g, rlx_ir::custom::op(self.clone()), ins, batched)
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        for (dt, it, transpose, k) in [
            (DType::F32, DType::I32, false, None),
            (DType::F64, DType::I64, true, None),
            (DType::F32, DType::I64, false, Some(3)),
            (DType::F64, DType::I32, true, Some(2)),
        ] {
            let (m, n, indptr, indices) = rect_pattern(it);
            let nnz = indices.numel();
            let rows = if transpose { m } else { n };
            let xd = k.map_or(vec![rows], |k| vec![rows, k]);
            let x = rand_tensor(&xd, dt, 5);
            out.push(Sample::new(
                format!("csr_matmul/{dt}/{it}/t{transpose}/k{}", k.unwrap_or(0)),
                rlx_ir::custom::op(CsrMatMul { nrows: m, ncols: n, transpose }),
                vec![indptr, indices, rand_tensor(&[nnz], dt, 3), x],
            ));
        }
        out
    }
}

impl OpDef for CsrSddmm {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let nnz = infer_pattern(ins, self.nrows)?;
        let dt = ins[2].dtype;
        if !dt.is_float() {
            return Err(format!("left must be float, got {}", ins[2]));
        }
        let k = infer_operand("left", ins[2], self.nrows, dt)?;
        let k2 = infer_operand("right", ins[3], self.ncols, dt)?;
        if k != k2 || ins[2].rank() != ins[3].rank() {
            return Err(format!("left {} and right {} must have the same columns", ins[2], ins[3]));
        }
        Ok(Shape::new(&[nnz], dt))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let p = pattern_of(Self::NAME, ins, self.nrows, self.ncols)?;
        let (l, r) = (floats(Self::NAME, ins[2])?, floats(Self::NAME, ins[3])?);
        let k = if ins[2].dims().len() == 2 { ins[2].dims()[1] } else { 1 };
        let mut y = vec![0.0; p.indices.len()];
        sampled(&p.indptr, &p.indices, &l, &r, k, &mut y);
        HostTensor::new(out.clone(), Data::F(y))
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], _out: NodeId) -> Option<NodeId> {
        let dl = t[2].map(|d| g.custom(self.clone(), &[ins[0], ins[1], d, ins[3]]));
        let dr = t[3].map(|d| g.custom(self.clone(), &[ins[0], ins[1], ins[2], d]));
        add_opt(g, dl, dr)
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        // dL = C R and dR = C^T L, where C is the matrix with the cotangent as its values.
        let mm = |transpose| CsrMatMul { nrows: self.nrows, ncols: self.ncols, transpose };
        let dl = g.custom(mm(false), &[ins[0], ins[1], ct, ins[3]]);
        let dr = g.custom(mm(true), &[ins[0], ins[1], ct, ins[2]]);
        Some(vec![None, None, Some(dl), Some(dr)])
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        for (dt, it, k) in [(DType::F64, DType::I32, None), (DType::F32, DType::I64, Some(2))] {
            let (m, n, indptr, indices) = rect_pattern(it);
            let dims = |r: usize| k.map_or(vec![r], |k| vec![r, k]);
            out.push(Sample::new(
                format!("csr_sddmm/{dt}/{it}/k{}", k.unwrap_or(0)),
                rlx_ir::custom::op(CsrSddmm { nrows: m, ncols: n }),
                vec![indptr, indices, rand_tensor(&dims(m), dt, 8), rand_tensor(&dims(n), dt, 9)],
            ));
        }
        out
    }
}

/// A 4x5 pattern with an empty row and unsorted columns in a row (scipy allows both).
fn rect_pattern(it: DType) -> (usize, usize, HostTensor, HostTensor) {
    let indptr = [0, 2, 2, 5, 6];
    let indices = [3, 1, 0, 4, 2, 1];
    let t = |v: &[i64]| HostTensor::from_i64(&[v.len()], it, v).expect("ints");
    (4, 5, t(&indptr), t(&indices))
}

/// Uniform floats in [-1, 1].
pub(crate) fn rand_tensor(dims: &[usize], dt: DType, seed: u64) -> HostTensor {
    let n = dims.iter().product();
    HostTensor::from_f64(dims, dt, &rlx_ir::ops::util::rand_f64(n, -1.0, 1.0, seed)).expect("sample")
}
