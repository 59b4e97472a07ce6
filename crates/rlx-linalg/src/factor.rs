//! Ops on one square matrix `[..., n, n]`: `cholesky`, `inv`, `det`, `slogdet`, with JAX's
//! derivatives. Each op's batch rule is the op itself: a leading vmap axis is one more batch dim.

use crate::batch::{self, ItemFn};
use crate::dense::{Lu, cholesky as chol};
use crate::solve::solve;
use crate::util::{Matrix, check_float, matrix_n, samples, trace};
use rlx_cpu::kernels::{Kernel, KernelCtx};
use rlx_ir::custom::{CustomOpDef, op};
use rlx_ir::ops::rules;
use rlx_ir::{Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The square input's `n` (the kernels and references run only on static shapes).
fn n_of(dims: &[usize]) -> usize {
    dims[dims.len() - 1]
}

/// `ct[..., None, None] * m`: a per-matrix scalar cotangent spread over a matrix.
fn scale_matrices(g: &mut Graph, s: NodeId, m: NodeId) -> NodeId {
    let s = g.expand_dims(s, -1);
    let s = g.expand_dims(s, -1);
    g.mul(s, m)
}

/// `inv(a)^T` as nodes.
fn inv_t(g: &mut Graph, a: NodeId) -> NodeId {
    let i = inv(g, a);
    rules::swap_last(g, i)
}

/// The lower Cholesky factor `l` of a symmetric positive definite `a` (`a = l l^T`), reading
/// `(a + a^T) / 2`. Not positive definite: `Error::Eval` naming the batch item.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cholesky {}

impl CustomOpDef for Cholesky {
    const NAME: &'static str = "linalg_cholesky";
}

/// The lower Cholesky factor (see `Cholesky`).
pub fn cholesky(g: &mut Graph, a: NodeId) -> NodeId {
    g.custom(Cholesky {}, &[a])
}

impl Cholesky {
    fn item(n: usize) -> ItemFn {
        Arc::new(move |xs, out| {
            chol(xs[0], n, out).map_err(|p| format!("the matrix is not positive definite (pivot {p} of {n})"))
        })
    }

    /// The constant mask of JAX's `phi`: the lower triangle, its diagonal halved.
    fn phi_mask(g: &mut Graph, x: NodeId) -> NodeId {
        let n = n_of(&rules::dims(g, x));
        let v: Vec<f64> = (0..n * n)
            .map(|i| {
                if i % n < i / n {
                    1.0
                } else if i % n == i / n {
                    0.5
                } else {
                    0.0
                }
            })
            .collect();
        let dt = g.dtype(x);
        g.constant(HostTensor::from_f64(&[n, n], dt, &v).expect("mask"))
    }

    /// `(x + x^T) / 2`.
    fn sym(g: &mut Graph, x: NodeId) -> NodeId {
        let t = rules::swap_last(g, x);
        let s = g.add(x, t);
        let h = g.scalar(0.5, g.dtype(x));
        g.mul(s, h)
    }
}

impl OpDef for Cholesky {
    common!();
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        check_float(ins)?;
        matrix_n(ins[0], "a")?;
        Ok(ins[0].clone())
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        batch::reference(Self::NAME, ins, out, &[2], 2, &Self::item(n_of(&ins[0].dims())))
    }
    fn jvp(&self, g: &mut Graph, _ins: &[NodeId], t: &[Option<NodeId>], l: NodeId) -> Option<NodeId> {
        // dL = L phi(L^-1 sym(dA) L^-T).
        let s = Self::sym(g, t[0]?);
        let y = solve(g, l, s);
        let yt = rules::swap_last(g, y);
        let inner = solve(g, l, yt);
        let mask = Self::phi_mask(g, l);
        let phi = g.mul(inner, mask);
        Some(g.matmul(l, phi))
    }
    fn vjp(&self, g: &mut Graph, _ins: &[NodeId], l: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        // The transpose of the jvp: a_bar = sym(L^-T phi(L^T l_bar) L^-1).
        let ltc = g.matmul_t(l, ct, true, false);
        let mask = Self::phi_mask(g, l);
        let q = g.mul(ltc, mask);
        let lt = rules::swap_last(g, l);
        let w = solve(g, lt, q);
        let wt = rules::swap_last(g, w);
        let v = solve(g, lt, wt);
        Some(vec![Some(Self::sym(g, v))])
    }
    fn samples() -> Vec<Sample> {
        samples(Self::NAME, &op(Cholesky {}), &[&[&[3, 3]], &[&[2, 4, 4]], &[&[1, 1]]], Matrix::Spd)
    }
}

/// `a^-1` by LU. An exactly singular `a` is `Error::Eval` naming the batch item.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Inv {}

impl CustomOpDef for Inv {
    const NAME: &'static str = "linalg_inv";
}

/// `a^-1` (see `Inv`).
pub fn inv(g: &mut Graph, a: NodeId) -> NodeId {
    g.custom(Inv {}, &[a])
}

impl Inv {
    fn item(n: usize) -> ItemFn {
        Arc::new(move |xs, out| {
            let lu = Lu::new(xs[0], n);
            if let Some(p) = lu.zero_pivot() {
                return Err(format!("the matrix is singular (zero pivot {p} of {n})"));
            }
            lu.inverse(out);
            Ok(())
        })
    }
}

impl OpDef for Inv {
    common!();
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        check_float(ins)?;
        matrix_n(ins[0], "a")?;
        Ok(ins[0].clone())
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        batch::reference(Self::NAME, ins, out, &[2], 2, &Self::item(n_of(&ins[0].dims())))
    }
    fn jvp(&self, g: &mut Graph, _ins: &[NodeId], t: &[Option<NodeId>], y: NodeId) -> Option<NodeId> {
        // d(a^-1) = -Y dA Y.
        let yd = g.matmul(y, t[0]?);
        let ydy = g.matmul(yd, y);
        Some(g.neg(ydy))
    }
    fn vjp(&self, g: &mut Graph, _ins: &[NodeId], y: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        // a_bar = -Y^T Y_bar Y^T.
        let l = g.matmul_t(y, ct, true, false);
        let m = g.matmul_t(l, y, false, true);
        Some(vec![Some(g.neg(m))])
    }
    fn samples() -> Vec<Sample> {
        samples(Self::NAME, &op(Inv {}), &[&[&[3, 3]], &[&[2, 3, 3]], &[&[1, 1]]], Matrix::General)
    }
}

/// `det a` (`[..., n, n]` to `[...]`) by LU: the product of the pivots, 0 when singular.
/// Derivatives: `d det = det tr(a^-1 da)`, `a_bar = det_bar det a^-T` (JAX's; undefined at a
/// singular `a`, where `inv` reports the error).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Det {}

impl CustomOpDef for Det {
    const NAME: &'static str = "linalg_det";
}

/// `det a` (see `Det`).
pub fn det(g: &mut Graph, a: NodeId) -> NodeId {
    g.custom(Det {}, &[a])
}

/// `[..., n, n]` to `[...]`.
fn batch_shape(ins: &[&Shape]) -> std::result::Result<Shape, String> {
    let dt = check_float(ins)?;
    matrix_n(ins[0], "a")?;
    let d = &ins[0].dims;
    Ok(Shape::with_dims(d[..d.len() - 2].to_vec(), dt))
}

impl Det {
    fn item(n: usize) -> ItemFn {
        Arc::new(move |xs, out| {
            out[0] = Lu::new(xs[0], n).det();
            Ok(())
        })
    }
}

impl OpDef for Det {
    common!();
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        batch_shape(ins)
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        batch::reference(Self::NAME, ins, out, &[2], 0, &Self::item(n_of(&ins[0].dims())))
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], d: NodeId) -> Option<NodeId> {
        let x = solve(g, ins[0], t[0]?);
        let tr = trace(g, x);
        Some(g.mul(d, tr))
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], d: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let s = g.mul(ct, d);
        let it = inv_t(g, ins[0]);
        Some(vec![Some(scale_matrices(g, s, it))])
    }
    fn samples() -> Vec<Sample> {
        samples(Self::NAME, &op(Det {}), &[&[&[3, 3]], &[&[2, 2, 4, 4]], &[&[1, 1]]], Matrix::General)
    }
}

/// Which output of numpy's `slogdet` an op instance computes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlogdetPart {
    /// The sign of the determinant: -1, 0 or 1 (derivative zero).
    Sign,
    /// `log |det a|` (`-inf` when singular).
    #[default]
    LogAbsDet,
}

/// One output of `slogdet` (`[..., n, n]` to `[...]`): ops have one output, so `slogdet()` makes
/// one node per part. `d log|det| = tr(a^-1 da)`, as JAX's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Slogdet {
    /// The part computed.
    pub part: SlogdetPart,
}

impl CustomOpDef for Slogdet {
    const NAME: &'static str = "linalg_slogdet";
}

/// `(sign, log |det a|)`, numpy's `slogdet`.
pub fn slogdet(g: &mut Graph, a: NodeId) -> (NodeId, NodeId) {
    let s = g.custom(Slogdet { part: SlogdetPart::Sign }, &[a]);
    let l = g.custom(Slogdet { part: SlogdetPart::LogAbsDet }, &[a]);
    (s, l)
}

impl Slogdet {
    fn item(n: usize, part: SlogdetPart) -> ItemFn {
        Arc::new(move |xs, out| {
            let (s, l) = Lu::new(xs[0], n).slogdet();
            out[0] = if part == SlogdetPart::Sign { s } else { l };
            Ok(())
        })
    }
}

impl OpDef for Slogdet {
    common!();
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        batch_shape(ins)
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        batch::reference(Self::NAME, ins, out, &[2], 0, &Self::item(n_of(&ins[0].dims()), self.part))
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], out: NodeId) -> Option<NodeId> {
        if self.part == SlogdetPart::Sign {
            return Some(rules::zeros_like(g, out));
        }
        let x = solve(g, ins[0], t[0]?);
        Some(trace(g, x))
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        if self.part == SlogdetPart::Sign {
            return Some(vec![None]);
        }
        let it = inv_t(g, ins[0]);
        Some(vec![Some(scale_matrices(g, ct, it))])
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        for part in [SlogdetPart::Sign, SlogdetPart::LogAbsDet] {
            let name = format!("{}/{part:?}", Self::NAME).to_lowercase();
            out.extend(samples(&name, &op(Slogdet { part }), &[&[&[3, 3]], &[&[2, 3, 3]]], Matrix::General));
        }
        out
    }
}

/// The CPU kernel of `linalg_cholesky`.
pub(crate) fn cholesky_kernel(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    batch::kernel(Cholesky::NAME, ctx, &[2], 2, Cholesky::item(n_of(&ctx.in_dims(0))))
}

/// The CPU kernel of `linalg_inv`.
pub(crate) fn inv_kernel(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    batch::kernel(Inv::NAME, ctx, &[2], 2, Inv::item(n_of(&ctx.in_dims(0))))
}

/// The CPU kernel of `linalg_det`.
pub(crate) fn det_kernel(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    batch::kernel(Det::NAME, ctx, &[2], 0, Det::item(n_of(&ctx.in_dims(0))))
}

/// The CPU kernel of `linalg_slogdet`.
pub(crate) fn slogdet_kernel(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let rlx_ir::Op::Custom(c) = ctx.op else { return Err(rlx_cpu::kernels::unsupported(ctx)) };
    let Some(s) = c.get::<Slogdet>() else { return Err(rlx_cpu::kernels::unsupported(ctx)) };
    batch::kernel(Slogdet::NAME, ctx, &[2], 0, Slogdet::item(n_of(&ctx.in_dims(0)), s.part))
}
