//! The solve ops: `cg_solve` (conjugate gradient, for symmetric positive definite A) and
//! `splu_solve` (faer's sparse LU, any non-singular A). Both mean `x = M^-1 b` for their `M`,
//! so their reference is one dense direct solve in f64 (independent of the kernels), and both
//! differentiate by the implicit-function rule: the cotangent solves the adjoint system
//! `M^T lambda = g`, then `d b = lambda` and `d M = -lambda x^T` on A's pattern.

use crate::csr::{Pattern, dense_solve};
use crate::ops::{
    CsrMatMul, CsrSddmm, add_opt, batch_columns, floats, infer_operand, infer_pattern, pattern_of, rand_tensor, scale,
};
use rlx_ir::custom::CustomOpDef;
use rlx_ir::{DType, Data, Graph, HostTensor, NodeId, OpDef, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// `x = S^-1 b` by conjugate gradient, where `S = (A + A^T) / 2` is the symmetric part of the
/// square CSR matrix `A` (so `A` itself when it is symmetric) and must be positive definite.
/// Inputs: indptr, indices, values `[nnz]`, b `[n]` or `[n, k]` (one CG per column). Stops at
/// `||r|| <= tol ||b||`; running out of `maxiter` iterations (default `10 n`) is an error naming
/// the iterations and the residual, as is a non-positive curvature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CgSolve {
    /// Size of A (n x n).
    pub n: usize,
    /// Relative residual tolerance.
    pub tol: f64,
    /// Iteration cap; None = `10 n`.
    pub maxiter: Option<usize>,
}

/// `x = op(A)^-1 b` through faer's sparse LU with partial pivoting, `op(A)` being `A` or, with
/// `transpose`, `A^T`. Inputs as `CgSolve`'s; a singular A is an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LuSolve {
    /// Size of A (n x n).
    pub n: usize,
    /// Solve with `A^T`.
    pub transpose: bool,
}

impl CustomOpDef for CgSolve {
    const NAME: &'static str = "cg_solve";
}

impl CustomOpDef for LuSolve {
    const NAME: &'static str = "splu_solve";
}

impl CgSolve {
    /// The iteration cap in effect.
    pub fn max_iterations(&self) -> usize {
        self.maxiter.unwrap_or(10 * self.n.max(1))
    }
}

/// Types of a square solve: values `[nnz]` float, b `[n]` or `[n, k]`; the output is b's type.
fn infer_solve(ins: &[&Shape], n: usize) -> std::result::Result<Shape, String> {
    let nnz = infer_pattern(ins, n)?;
    let dt = ins[2].dtype;
    if !dt.is_float() || ins[2].dims_fixed()? != [nnz] {
        return Err(format!("values must be float [{nnz}] (as indices), got {}", ins[2]));
    }
    infer_operand("b", ins[3], n, dt)?;
    Ok(ins[3].clone())
}

/// The dense `n x n` matrix of a pattern and values, transposed on request.
fn dense(p: &Pattern, v: &[f64], n: usize, transpose: bool) -> Vec<f64> {
    let mut d = vec![0.0; n * n];
    for i in 0..n {
        let r = p.indptr[i]..p.indptr[i + 1];
        for (&c, &x) in p.indices[r.clone()].iter().zip(&v[r]) {
            d[if transpose { c * n + i } else { i * n + c }] += x;
        }
    }
    d
}

/// The reference: a dense direct solve of `M` (from `make`) in f64.
fn reference_solve(
    op: &'static str,
    n: usize,
    ins: &[&HostTensor],
    out: &Shape,
    make: impl Fn(&Pattern, &[f64]) -> Vec<f64>,
) -> Result<HostTensor> {
    let p = pattern_of(op, ins, n, n)?;
    let (v, b) = (floats(op, ins[2])?, floats(op, ins[3])?);
    let k = if ins[3].dims().len() == 2 { ins[3].dims()[1] } else { 1 };
    let x = dense_solve(op, n, &make(&p, &v), &b, k)?;
    HostTensor::new(out.clone(), Data::F(x))
}

impl OpDef for CgSolve {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        if !(self.tol > 0.0 && self.tol < 1.0) {
            return Err(format!("tol must be in (0, 1), got {}", self.tol));
        }
        infer_solve(ins, self.n)
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let n = self.n;
        reference_solve(Self::NAME, n, ins, out, |p, v| {
            let (a, at) = (dense(p, v, n, false), dense(p, v, n, true));
            a.iter().zip(&at).map(|(x, y)| 0.5 * (x + y)).collect()
        })
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], out: NodeId) -> Option<NodeId> {
        // dx = S^-1 (db - dS x), dS x = (dA x + dA^T x) / 2.
        let ds_x = t[2].map(|dv| {
            let mm = |transpose| CsrMatMul { nrows: self.n, ncols: self.n, transpose };
            let a = g.custom(mm(false), &[ins[0], ins[1], dv, out]);
            let b = g.custom(mm(true), &[ins[0], ins[1], dv, out]);
            let s = g.add(a, b);
            scale(g, s, -0.5)
        });
        let rhs = add_opt(g, t[3], ds_x)?;
        Some(g.custom(self.clone(), &[ins[0], ins[1], ins[2], rhs]))
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        // S is symmetric: the adjoint system is another CG solve.
        let lambda = g.custom(self.clone(), &[ins[0], ins[1], ins[2], ct]);
        let s = CsrSddmm { nrows: self.n, ncols: self.n };
        let a = g.custom(s.clone(), &[ins[0], ins[1], lambda, out]);
        let b = g.custom(s, &[ins[0], ins[1], out, lambda]);
        let sum = g.add(a, b);
        let dv = scale(g, sum, -0.5);
        Some(vec![None, None, Some(dv), Some(lambda)])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        // A batch of right-hand sides is one solve with more columns (CG runs one per column).
        batch_columns(g, rlx_ir::custom::op(self.clone()), ins, batched)
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        for (dt, it, k) in [(DType::F64, DType::I64, None), (DType::F32, DType::I32, Some(2))] {
            let (n, indptr, indices, values) = spd_pattern(it, dt, false);
            let b = rand_tensor(&k.map_or(vec![n], |k| vec![n, k]), dt, 21);
            out.push(Sample::new(
                format!("cg_solve/{dt}/{it}/k{}", k.unwrap_or(0)),
                rlx_ir::custom::op(CgSolve { n, tol: 1e-13, maxiter: None }),
                vec![indptr, indices, values, b],
            ));
        }
        out
    }
}

impl OpDef for LuSolve {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        infer_solve(ins, self.n)
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let (n, t) = (self.n, self.transpose);
        reference_solve(Self::NAME, n, ins, out, |p, v| dense(p, v, n, t))
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], out: NodeId) -> Option<NodeId> {
        // dx = M^-1 (db - dM x).
        let dm_x = t[2].map(|dv| {
            let mm = CsrMatMul { nrows: self.n, ncols: self.n, transpose: self.transpose };
            let p = g.custom(mm, &[ins[0], ins[1], dv, out]);
            scale(g, p, -1.0)
        });
        let rhs = add_opt(g, t[3], dm_x)?;
        Some(g.custom(self.clone(), &[ins[0], ins[1], ins[2], rhs]))
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let adjoint = LuSolve { transpose: !self.transpose, ..self.clone() };
        let lambda = g.custom(adjoint, &[ins[0], ins[1], ins[2], ct]);
        // M = A: dA = -lambda x^T; M = A^T: dA = -x lambda^T.
        let (l, r) = if self.transpose { (out, lambda) } else { (lambda, out) };
        let s = g.custom(CsrSddmm { nrows: self.n, ncols: self.n }, &[ins[0], ins[1], l, r]);
        let dv = scale(g, s, -1.0);
        Some(vec![None, None, Some(dv), Some(lambda)])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        // A batch of right-hand sides is one factorization solved for all their columns.
        batch_columns(g, rlx_ir::custom::op(self.clone()), ins, batched)
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        for (dt, it, transpose, k) in [
            (DType::F64, DType::I32, false, None),
            (DType::F64, DType::I64, true, Some(2)),
            (DType::F32, DType::I64, false, Some(3)),
        ] {
            let (n, indptr, indices, values) = spd_pattern(it, dt, true);
            let b = rand_tensor(&k.map_or(vec![n], |k| vec![n, k]), dt, 22);
            out.push(Sample::new(
                format!("splu_solve/{dt}/{it}/t{transpose}/k{}", k.unwrap_or(0)),
                rlx_ir::custom::op(LuSolve { n, transpose }),
                vec![indptr, indices, values, b],
            ));
        }
        out
    }
}

/// A 6x6 diagonally dominant matrix (tridiagonal plus a corner pair): symmetric values unless
/// `unsymmetric`. The margin (diagonal 6, at most 3 off-diagonal entries of at most 1 a row)
/// keeps it positive definite under the perturbations vmap-against-a-loop adds (<= 0.5 each).
fn spd_pattern(it: DType, dt: DType, unsymmetric: bool) -> (usize, HostTensor, HostTensor, HostTensor) {
    let n = 6;
    let off = rlx_ir::ops::util::rand_f64(2 * n, -1.0, 1.0, 17);
    let mut trip = vec![];
    for i in 0..n {
        trip.push((i, i, 6.0 + off[i].abs()));
        if i + 1 < n {
            let v = off[n + i];
            trip.push((i, i + 1, v));
            trip.push((i + 1, i, if unsymmetric { 0.5 * off[i] } else { v }));
        }
    }
    trip.push((0, n - 1, 0.7));
    trip.push((n - 1, 0, if unsymmetric { -0.4 } else { 0.7 }));
    let a = crate::Csr::from_triplets(n, n, &trip).expect("in range");
    let ints = |v: &[usize]| {
        HostTensor::from_i64(&[v.len()], it, &v.iter().map(|&i| i as i64).collect::<Vec<_>>()).expect("ints")
    };
    let values = HostTensor::from_f64(&[a.nnz()], dt, &a.values).expect("floats");
    (n, ints(&a.indptr), ints(&a.indices), values)
}
