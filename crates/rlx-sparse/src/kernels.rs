//! CPU kernels, one builder per op, for i32 / i64 indices and f32 / f64 values: each reads its
//! buffers in place through the generic kernels of `prod` and `cg` (one instance per index and
//! value type), which check the pattern as they go (indices are data: a bad one is an error,
//! never an out-of-bounds read). `splu_solve` goes through faer's sparse LU.

use crate::cg::Sym;
use crate::csr::Pattern;
use crate::prod::{CsrRef, sddmm as sddmm_kernel};
use crate::solve::{CgSolve, LuSolve};
use crate::view::{Index, Real, validate};
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

/// Calls `$f::<P, I, V>(args)` for the kernel's index types (P: indptr, I: indices) and value type.
macro_rules! typed {
    ($op:expr, $t:expr, $f:ident ( $($a:expr),* )) => {{
        use DType::{F32, F64, I32, I64};
        match ($t.idx[0], $t.idx[1], $t.val) {
            (I32, I32, F32) => $f::<i32, i32, f32>($($a),*),
            (I32, I64, F32) => $f::<i32, i64, f32>($($a),*),
            (I64, I32, F32) => $f::<i64, i32, f32>($($a),*),
            (I64, I64, F32) => $f::<i64, i64, f32>($($a),*),
            (I32, I32, F64) => $f::<i32, i32, f64>($($a),*),
            (I32, I64, F64) => $f::<i32, i64, f64>($($a),*),
            (I64, I32, F64) => $f::<i64, i32, f64>($($a),*),
            (I64, I64, F64) => $f::<i64, i64, f64>($($a),*),
            (p, i, v) => Err(Error::eval($op, format!("no kernel for indptr {p}, indices {i}, values {v}"))),
        }
    }};
}

fn matmul_typed<P: Index, I: Index, V: Real>(op: &CsrMatMul, b: &Bufs<'_>, k: usize) -> Result<()> {
    let a = CsrRef {
        indptr: b.input::<P>(0),
        indices: b.input::<I>(1),
        values: b.input::<V>(2),
        nrows: op.nrows,
        ncols: op.ncols,
    };
    let (x, y) = (b.input::<V>(3), b.output::<V>());
    let r = if op.transpose { a.matmul_t(CsrMatMul::NAME, x, k, y) } else { a.matmul(CsrMatMul::NAME, x, k, y) };
    Ok(r?)
}

/// `csr_matmul`.
pub(crate) fn matmul(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let op = op_of::<CsrMatMul>(ctx)?.clone();
    let t = types(ctx)?;
    Ok(Box::new(move |b: &Bufs<'_>| typed!(CsrMatMul::NAME, t, matmul_typed(&op, b, t.k))))
}

fn sddmm_typed<P: Index, I: Index, V: Real>(op: &CsrSddmm, b: &Bufs<'_>, k: usize) -> Result<()> {
    let (indptr, indices) = (b.input::<P>(0), b.input::<I>(1));
    let (l, r) = (b.input::<V>(2), b.input::<V>(3));
    Ok(sddmm_kernel(CsrSddmm::NAME, (op.nrows, op.ncols), indptr, indices, l, r, k, b.output::<V>())?)
}

/// `csr_sddmm`.
pub(crate) fn sddmm(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let op = op_of::<CsrSddmm>(ctx)?.clone();
    let t = types(ctx)?;
    Ok(Box::new(move |b: &Bufs<'_>| typed!(CsrSddmm::NAME, t, sddmm_typed(&op, b, t.k))))
}

/// Column `j` of the row-major `[n, k]` `m`, in f64.
fn column<V: Real>(m: &[V], k: usize, j: usize) -> Vec<f64> {
    m.iter().skip(j).step_by(k).map(|v| v.f64()).collect()
}

/// One column's CG result, filled by the task that solved it.
type Slot = std::sync::Mutex<Option<std::result::Result<Vec<f64>, SparseError>>>;

fn cg_typed<P: Index, I: Index, V: Real>(op: &CgSolve, b: &Bufs<'_>, k: usize) -> Result<()> {
    let name = CgSolve::NAME;
    let s = Sym::new(name, op.n, b.input::<P>(0), b.input::<I>(1), b.input::<V>(2))?;
    let (rhs, out) = (b.input::<V>(3), b.output::<V>());
    if k == 1 {
        let info = s.solve(name, &column(rhs, 1, 0), op.tol, op.max_iterations())?;
        out.iter_mut().zip(&info.x).for_each(|(o, &v)| *o = V::of(v));
        return Ok(());
    }
    // Columns are independent solves: spread over the pool (their products then run inline).
    let results: Vec<Slot> = (0..k).map(|_| Default::default()).collect();
    rlx_cpu::threads::parallel_for(k, &|j| {
        let r = s.solve(name, &column(rhs, k, j), op.tol, op.max_iterations()).map(|i| i.x);
        *results[j].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
    });
    for (j, r) in results.into_iter().enumerate() {
        let x = r.into_inner().unwrap_or_else(|e| e.into_inner()).unwrap_or_else(|| Ok(vec![0.0; op.n]))?;
        x.iter().enumerate().for_each(|(i, &v)| out[i * k + j] = V::of(v));
    }
    Ok(())
}

/// `cg_solve`: one CG per right-hand side column.
pub(crate) fn cg(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let op = op_of::<CgSolve>(ctx)?.clone();
    let t = types(ctx)?;
    Ok(Box::new(move |b: &Bufs<'_>| typed!(CgSolve::NAME, t, cg_typed(&op, b, t.k))))
}

/// Solves `op(A) X = B` (B row-major, `k` columns) through faer's sparse LU; the pattern must
/// have been validated.
pub(crate) fn lu_solve<P: Index, I: Index, V: Real>(
    (indptr, indices, values): (&[P], &[I], &[V]),
    n: usize,
    transpose: bool,
    rhs: &[f64],
    k: usize,
) -> std::result::Result<Vec<f64>, SparseError> {
    let op = LuSolve::NAME;
    let mut trip = Vec::with_capacity(values.len());
    for i in 0..n {
        let r = indptr[i].get() as usize..indptr[i + 1].get() as usize;
        for (c, v) in indices[r.clone()].iter().zip(&values[r]) {
            trip.push(Triplet::new(i, c.get() as usize, v.f64()));
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

/// `lu_solve` for a checked `Pattern` (the `Csr` entry point).
pub(crate) fn lu_solve_pattern(
    p: &Pattern,
    values: &[f64],
    n: usize,
    rhs: &[f64],
) -> std::result::Result<Vec<f64>, SparseError> {
    lu_solve((&p.indptr[..], &p.indices[..], values), n, false, rhs, 1)
}

fn splu_typed<P: Index, I: Index, V: Real>(op: &LuSolve, b: &Bufs<'_>, k: usize) -> Result<()> {
    let (indptr, indices, values) = (b.input::<P>(0), b.input::<I>(1), b.input::<V>(2));
    validate(LuSolve::NAME, op.n, op.n, indptr, indices)?;
    if values.len() != indices.len() {
        let reason = format!("{} values for {} indices", values.len(), indices.len());
        return Err(SparseError::Pattern { op: LuSolve::NAME.into(), reason }.into());
    }
    let rhs: Vec<f64> = b.input::<V>(3).iter().map(|v| v.f64()).collect();
    let x = lu_solve((indptr, indices, values), op.n, op.transpose, &rhs, k)?;
    b.output::<V>().iter_mut().zip(&x).for_each(|(o, &v)| *o = V::of(v));
    Ok(())
}

/// `splu_solve`.
pub(crate) fn splu(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let op = op_of::<LuSolve>(ctx)?.clone();
    let t = types(ctx)?;
    Ok(Box::new(move |b: &Bufs<'_>| typed!(LuSolve::NAME, t, splu_typed(&op, b, t.k))))
}
