//! CPU kernels, one builder per op, for i32 / i64 indices and f32 / f64 values. Every call
//! checks the pattern (indices are data: a bad one is an error, never an out-of-bounds read);
//! arithmetic runs in f64. `splu_solve` goes through faer's sparse LU.

use crate::csr::{Pattern, cg_pattern, product, sampled};
use crate::solve::{CgSolve, LuSolve};
use crate::{CsrMatMul, CsrSddmm, SparseError};
use faer::linalg::solvers::Solve;
use faer::sparse::{SparseColMat, Triplet};
use rlx_cpu::exec::Bufs;
use rlx_cpu::kernels::{Kernel, KernelCtx, unsupported};
use rlx_ir::custom::CustomOpDef;
use rlx_ir::{DType, Error, Op, Result};

/// The op value of a custom-op kernel context, or the backend's "unsupported" error.
fn op_of<'a, T: 'static>(ctx: &'a KernelCtx<'_>) -> Result<&'a T> {
    match ctx.op {
        Op::Custom(c) => c.get::<T>().ok_or_else(|| unsupported(ctx)),
        _ => Err(unsupported(ctx)),
    }
}

/// Reads integer input `i` (i32 or i64) as i64.
fn ints(b: &Bufs<'_>, i: usize, dt: DType) -> Vec<i64> {
    match dt {
        DType::I32 => b.input::<i32>(i).iter().map(|&v| v as i64).collect(),
        _ => b.input::<i64>(i).to_vec(),
    }
}

/// Reads float input `i` (f32 or f64) as f64.
fn reals(b: &Bufs<'_>, i: usize, dt: DType) -> Vec<f64> {
    match dt {
        DType::F32 => b.input::<f32>(i).iter().map(|&v| v as f64).collect(),
        _ => b.input::<f64>(i).to_vec(),
    }
}

/// Writes the output from f64.
fn write(b: &Bufs<'_>, dt: DType, y: &[f64]) {
    match dt {
        DType::F32 => b.output::<f32>().iter_mut().zip(y).for_each(|(o, &v)| *o = v as f32),
        _ => b.output::<f64>().copy_from_slice(y),
    }
}

/// What every kernel needs from its context: index and value dtypes, and the operand's columns.
#[derive(Clone, Copy)]
struct Types {
    idx: [DType; 2],
    val: DType,
    k: usize,
}

fn types(ctx: &KernelCtx<'_>) -> Result<Types> {
    let (idx, val) = ([ctx.ins[0].dtype, ctx.ins[1].dtype], ctx.out.dtype);
    let ok = idx.iter().all(|d| matches!(d, DType::I32 | DType::I64)) && matches!(val, DType::F32 | DType::F64);
    if !ok {
        return Err(unsupported(ctx));
    }
    let d = ctx.in_dims(3);
    Ok(Types { idx, val, k: if d.len() == 2 { d[1] } else { 1 } })
}

fn pattern(op: &str, b: &Bufs<'_>, t: Types, nrows: usize, ncols: usize) -> Result<Pattern> {
    Ok(Pattern::new(op, nrows, ncols, &ints(b, 0, t.idx[0]), &ints(b, 1, t.idx[1]))?)
}

/// `csr_matmul`.
pub(crate) fn matmul(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let op = op_of::<CsrMatMul>(ctx)?.clone();
    let t = types(ctx)?;
    Ok(Box::new(move |b: &Bufs<'_>| {
        let p = pattern(CsrMatMul::NAME, b, t, op.nrows, op.ncols)?;
        let (v, x) = (reals(b, 2, t.val), reals(b, 3, t.val));
        let mut y = vec![0.0; if op.transpose { op.ncols } else { op.nrows } * t.k];
        product(&p.indptr, &p.indices, &v, &x, t.k, op.transpose, &mut y);
        write(b, t.val, &y);
        Ok(())
    }))
}

/// `csr_sddmm`.
pub(crate) fn sddmm(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let op = op_of::<CsrSddmm>(ctx)?.clone();
    let t = types(ctx)?;
    Ok(Box::new(move |b: &Bufs<'_>| {
        let p = pattern(CsrSddmm::NAME, b, t, op.nrows, op.ncols)?;
        let (l, r) = (reals(b, 2, t.val), reals(b, 3, t.val));
        let mut y = vec![0.0; p.indices.len()];
        sampled(&p.indptr, &p.indices, &l, &r, t.k, &mut y);
        write(b, t.val, &y);
        Ok(())
    }))
}

/// `cg_solve`: one CG per right-hand side column.
pub(crate) fn cg(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let op = op_of::<CgSolve>(ctx)?.clone();
    let t = types(ctx)?;
    Ok(Box::new(move |b: &Bufs<'_>| {
        let (n, k) = (op.n, t.k);
        let p = pattern(CgSolve::NAME, b, t, n, n)?;
        let (v, rhs) = (reals(b, 2, t.val), reals(b, 3, t.val));
        let mut x = vec![0.0; n * k];
        for j in 0..k {
            let col: Vec<f64> = (0..n).map(|i| rhs[i * k + j]).collect();
            let info = cg_pattern(CgSolve::NAME, &p.indptr, &p.indices, &v, &col, op.tol, op.max_iterations())?;
            (0..n).for_each(|i| x[i * k + j] = info.x[i]);
        }
        write(b, t.val, &x);
        Ok(())
    }))
}

/// Solves `op(A) X = B` (B row-major, `k` columns) through faer's sparse LU.
pub(crate) fn lu_solve(
    p: &Pattern,
    values: &[f64],
    n: usize,
    transpose: bool,
    rhs: &[f64],
    k: usize,
) -> std::result::Result<Vec<f64>, SparseError> {
    let op = LuSolve::NAME;
    let mut trip = Vec::with_capacity(values.len());
    for i in 0..n {
        let r = p.indptr[i]..p.indptr[i + 1];
        for (&c, &v) in p.indices[r.clone()].iter().zip(&values[r]) {
            trip.push(Triplet::new(i, c, v));
        }
    }
    let faer_err = |what: &str, e: &dyn std::fmt::Debug| SparseError::Backend {
        op: op.into(),
        reason: format!("faer {what}: {e:?}"),
    };
    let a = SparseColMat::<usize, f64>::try_new_from_triplets(n, n, &trip).map_err(|e| faer_err("building", &e))?;
    let lu = a.sp_lu().map_err(|e| match e {
        faer::sparse::linalg::LuError::SymbolicSingular { index } => SparseError::Singular { op: op.into(), index },
        e => faer_err("factorizing", &e),
    })?;
    let mut x = faer::Mat::<f64>::from_fn(n, k, |i, j| rhs[i * k + j]);
    if transpose {
        lu.solve_transpose_in_place(x.as_mut());
    } else {
        lu.solve_in_place(x.as_mut());
    }
    let out: Vec<f64> = (0..n * k).map(|q| x[(q / k, q % k)]).collect();
    // A numerically singular pivot shows up as non-finite entries rather than an error.
    if let Some(q) = out.iter().position(|v| !v.is_finite()) {
        return Err(SparseError::Singular { op: op.into(), index: q / k });
    }
    Ok(out)
}

/// `splu_solve`.
pub(crate) fn splu(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let op = op_of::<LuSolve>(ctx)?.clone();
    let t = types(ctx)?;
    Ok(Box::new(move |b: &Bufs<'_>| {
        let p = pattern(LuSolve::NAME, b, t, op.n, op.n)?;
        let (v, rhs) = (reals(b, 2, t.val), reals(b, 3, t.val));
        let x = lu_solve(&p, &v, op.n, op.transpose, &rhs, t.k).map_err(Error::from)?;
        write(b, t.val, &x);
        Ok(())
    }))
}
