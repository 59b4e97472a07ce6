//! `eigh`: the eigendecomposition of a symmetric matrix as two ops, one per output, with JAX's
//! derivative. The input is symmetrized, `(a + a^T) / 2`, as JAX's `eigh` does (numpy reads
//! only the lower triangle, UPLO='L'; the two agree on symmetric inputs), so the value and the
//! (symmetric) derivative agree for any input.

use crate::batch::{self, ItemFn};
use crate::decomp;
use crate::util::{Matrix, check_float, eye, matrix_n, samples};
use rlx_cpu::kernels::{Kernel, KernelCtx};
use rlx_ir::custom::{CustomOpDef, op};
use rlx_ir::ops::rules;
use rlx_ir::{Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Which output of `eigh` an op instance computes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EighPart {
    /// The eigenvalues `w`, `[..., n]`, ascending.
    #[default]
    Values,
    /// The eigenvectors, the columns of `v` (`[..., n, n]`), each with its entry of largest
    /// magnitude positive (LAPACK's signs are arbitrary; the fixtures apply the same rule).
    Vectors,
}

/// One output of the eigendecomposition `a = v diag(w) v^T` of `(a + a^T) / 2` (`a` is
/// `[..., n, n]`). Derivatives: JAX's `eigh_jvp_rule` and its transpose. They are undefined
/// where eigenvalues repeat: the eigenvectors' derivative divides by `w_j - w_i` (the
/// eigenvalues' derivative alone stays finite, as in JAX).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Eigh {
    /// The output computed.
    pub part: EighPart,
}

impl CustomOpDef for Eigh {
    const NAME: &'static str = "linalg_eigh";
}

/// `(w, v)`, numpy's `eigh` of `(a + a^T) / 2` with the eigenvector signs fixed (see `EighPart`).
pub fn eigh(g: &mut Graph, a: NodeId) -> (NodeId, NodeId) {
    let w = g.custom(Eigh { part: EighPart::Values }, &[a]);
    let v = g.custom(Eigh { part: EighPart::Vectors }, &[a]);
    (w, v)
}

/// `(x + x^T) / 2`.
fn sym(g: &mut Graph, x: NodeId) -> NodeId {
    let t = rules::swap_last(g, x);
    let s = g.add(x, t);
    let h = g.scalar(0.5, g.dtype(x));
    g.mul(s, h)
}

impl Eigh {
    fn item(n: usize, part: EighPart) -> ItemFn {
        Arc::new(move |xs, out| {
            let (mut w, mut v) = (vec![0.0; n], vec![0.0; n * n]);
            decomp::eigh(xs[0], n, &mut w, &mut v)?;
            out.copy_from_slice(if part == EighPart::Values { &w } else { &v });
            Ok(())
        })
    }

    /// `(w, v, I, F)` as nodes, `F[i, j] = 1 / (w_j - w_i)` off the diagonal and 0 on it.
    fn parts(&self, g: &mut Graph, a: NodeId, out: NodeId) -> (NodeId, NodeId, NodeId, NodeId) {
        let (w, v) = match self.part {
            EighPart::Values => (out, g.custom(Eigh { part: EighPart::Vectors }, &[a])),
            EighPart::Vectors => (g.custom(Eigh { part: EighPart::Values }, &[a]), out),
        };
        let d = rules::dims(g, a);
        let i = eye(g, d[d.len() - 1], g.dtype(a));
        let wj = g.expand_dims(w, -2);
        let wi = g.expand_dims(w, -1);
        let diff = g.sub(wj, wi);
        let diff = g.add(diff, i);
        let one = g.scalar(1.0, g.dtype(a));
        let rec = g.div(one, diff);
        let f = g.sub(rec, i);
        (w, v, i, f)
    }
}

impl OpDef for Eigh {
    common!();
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let dt = check_float(ins)?;
        matrix_n(ins[0], "a")?;
        let d = &ins[0].dims;
        Ok(match self.part {
            EighPart::Values => Shape::with_dims(d[..d.len() - 1].to_vec(), dt),
            EighPart::Vectors => ins[0].clone(),
        })
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let d = ins[0].dims();
        let out_core = if self.part == EighPart::Values { 1 } else { 2 };
        batch::reference(Self::NAME, ins, out, &[2], out_core, &Self::item(d[d.len() - 1], self.part))
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], out: NodeId) -> Option<NodeId> {
        // X = v^T sym(da) v; dw = diag(X), dv = v (F * X).
        let da = sym(g, t[0]?);
        let (_w, v, i, f) = self.parts(g, ins[0], out);
        let vt_da = g.matmul_t(v, da, true, false);
        let x = g.matmul(vt_da, v);
        Some(match self.part {
            EighPart::Values => {
                let xd = g.mul(x, i);
                g.sum(xd, &[-1], false)
            }
            EighPart::Vectors => {
                let fx = g.mul(f, x);
                g.matmul(v, fx)
            }
        })
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        // The transpose: a_bar = sym(v Y v^T), Y = diag(w_bar) + F * (v^T v_bar).
        let (_w, v, i, f) = self.parts(g, ins[0], out);
        let y = match self.part {
            EighPart::Values => {
                let c = g.expand_dims(ct, -1);
                g.mul(c, i)
            }
            EighPart::Vectors => {
                let vtc = g.matmul_t(v, ct, true, false);
                g.mul(f, vtc)
            }
        };
        let vy = g.matmul(v, y);
        let a_bar = g.matmul_t(vy, v, false, true);
        Some(vec![Some(sym(g, a_bar))])
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        for part in [EighPart::Values, EighPart::Vectors] {
            let name = format!("{}/{part:?}", Self::NAME).to_lowercase();
            let cases: &[&[&[usize]]] = &[&[&[3, 3]], &[&[2, 4, 4]], &[&[1, 1]]];
            out.extend(samples(&name, &op(Eigh { part }), cases, Matrix::Symmetric));
        }
        out
    }
}

/// The CPU kernel of `linalg_eigh`.
pub(crate) fn eigh_kernel(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let rlx_ir::Op::Custom(c) = ctx.op else { return Err(rlx_cpu::kernels::unsupported(ctx)) };
    let Some(s) = c.get::<Eigh>() else { return Err(rlx_cpu::kernels::unsupported(ctx)) };
    let d = ctx.in_dims(0);
    let out_core = if s.part == EighPart::Values { 1 } else { 2 };
    batch::kernel(Eigh::NAME, ctx, &[2], out_core, Eigh::item(d[d.len() - 1], s.part))
}
