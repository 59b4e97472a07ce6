//! `svd`: numpy's reduced SVD (`full_matrices=False`) as three ops, one per output, with JAX's
//! derivative (`svd_jvp_rule`) and its transpose. The derivative of `u` and `vt` is undefined
//! where singular values repeat (it divides by `s_j^2 - s_i^2`) or are zero (it divides by
//! `s`); that of `s` alone stays finite.

use crate::batch::{self, ItemFn};
use crate::decomp;
use crate::util::{Matrix, check_float, eye, samples};
use rlx_cpu::kernels::{Kernel, KernelCtx};
use rlx_ir::custom::{CustomOpDef, op};
use rlx_ir::ops::rules;
use rlx_ir::{Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Which output of the reduced SVD an op instance computes (`k = min(m, n)`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SvdPart {
    /// `u`, `[..., m, k]`; each column's entry of largest magnitude is positive (LAPACK's
    /// signs are arbitrary; the fixtures apply the same rule).
    U,
    /// `s`, `[..., k]`, descending, nonnegative.
    #[default]
    S,
    /// `vt`, `[..., k, n]`, its rows' signs matching `u`'s columns.
    Vt,
}

/// One output of the reduced SVD `a = u diag(s) vt` of `a` (`[..., m, n]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Svd {
    /// The output computed.
    pub part: SvdPart,
}

impl CustomOpDef for Svd {
    const NAME: &'static str = "linalg_svd";
}

/// `(u, s, vt)`, numpy's `svd(a, full_matrices=False)` with signs fixed (see `SvdPart`).
pub fn svd(g: &mut Graph, a: NodeId) -> (NodeId, NodeId, NodeId) {
    let u = g.custom(Svd { part: SvdPart::U }, &[a]);
    let s = g.custom(Svd { part: SvdPart::S }, &[a]);
    let vt = g.custom(Svd { part: SvdPart::Vt }, &[a]);
    (u, s, vt)
}

/// `(m, n)` of `[..., m, n]` dims.
fn mn(d: &[usize]) -> (usize, usize) {
    (d[d.len() - 2], d[d.len() - 1])
}

/// The nodes the derivatives share.
struct Parts {
    u: NodeId,
    v: NodeId,
    /// `s` as `[..., 1, k]` (scales columns) and `[..., k, 1]` (scales rows).
    s_col: NodeId,
    s_row: NodeId,
    /// `F[i, j] = 1 / (s_j^2 - s_i^2)` off the diagonal, 0 on it.
    f: NodeId,
    i: NodeId,
}

impl Svd {
    fn item(m: usize, n: usize, part: SvdPart) -> ItemFn {
        let k = m.min(n);
        Arc::new(move |xs, out| {
            let (mut u, mut s, mut vt) = (vec![0.0; m * k], vec![0.0; k], vec![0.0; k * n]);
            decomp::svd(xs[0], m, n, &mut u, &mut s, &mut vt)?;
            out.copy_from_slice(match part {
                SvdPart::U => &u,
                SvdPart::S => &s,
                SvdPart::Vt => &vt,
            });
            Ok(())
        })
    }

    fn parts(&self, g: &mut Graph, a: NodeId, out: NodeId) -> Parts {
        let mut node = |p: SvdPart| if p == self.part { out } else { g.custom(Svd { part: p }, &[a]) };
        let (u, s, vt) = (node(SvdPart::U), node(SvdPart::S), node(SvdPart::Vt));
        let v = rules::swap_last(g, vt);
        let (m, n) = mn(&rules::dims(g, a));
        let i = eye(g, m.min(n), g.dtype(a));
        let s_col = g.expand_dims(s, -2);
        let s_row = g.expand_dims(s, -1);
        let sj = g.mul(s_col, s_col);
        let si = g.mul(s_row, s_row);
        let d = g.sub(sj, si);
        let d = g.add(d, i);
        let one = g.scalar(1.0, g.dtype(a));
        let r = g.div(one, d);
        let f = g.sub(r, i);
        Parts { u, v, s_col, s_row, f, i }
    }
}

/// `(I - x x^T) y` for `x` with orthonormal columns.
fn project_out(g: &mut Graph, x: NodeId, y: NodeId) -> NodeId {
    let xty = g.matmul_t(x, y, true, false);
    let xxty = g.matmul(x, xty);
    g.sub(y, xxty)
}

impl OpDef for Svd {
    common!();
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let dt = check_float(ins)?;
        let d = &ins[0].dims;
        if d.len() < 2 {
            return Err(format!("a must be [..., m, n], got {}", ins[0]));
        }
        let (m, n) = (d[d.len() - 2].clone(), d[d.len() - 1].clone());
        let k = match (m.fixed(), n.fixed()) {
            (Some(a), Some(b)) => rlx_ir::Dim::Fixed(a.min(b)),
            _ if m == n => m.clone(),
            _ => return Err(format!("svd needs static m and n when they differ, got {}", ins[0])),
        };
        let mut out = d[..d.len() - 2].to_vec();
        match self.part {
            SvdPart::U => out.extend([m, k]),
            SvdPart::S => out.push(k),
            SvdPart::Vt => out.extend([k, n]),
        }
        Ok(Shape::with_dims(out, dt))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let (m, n) = mn(&ins[0].dims());
        let core = if self.part == SvdPart::S { 1 } else { 2 };
        batch::reference(Self::NAME, ins, out, &[2], core, &Self::item(m, n, self.part))
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], out: NodeId) -> Option<NodeId> {
        // dS = u^T da v; ds = diag(dS); dU = u (F * (dS D + D dS^T)) (+ (I - u u^T) da v / s
        // when m > n); dV = v (F * (D dS + dS^T D)) (+ (I - v v^T) da^T u / s when n > m).
        let da = t[0]?;
        let (m, n) = mn(&rules::dims(g, ins[0]));
        let p = self.parts(g, ins[0], out);
        let utda = g.matmul_t(p.u, da, true, false);
        let ds = g.matmul(utda, p.v);
        Some(match self.part {
            SvdPart::S => {
                let x = g.mul(ds, p.i);
                g.sum(x, &[-1], false)
            }
            SvdPart::U => {
                let a = g.mul(ds, p.s_col);
                let at = rules::swap_last(g, a);
                let sy = g.add(a, at);
                let fx = g.mul(p.f, sy);
                let mut du = g.matmul(p.u, fx);
                if m > n {
                    let dav = g.matmul(da, p.v);
                    let pr = project_out(g, p.u, dav);
                    let sc = g.div(pr, p.s_col);
                    du = g.add(du, sc);
                }
                du
            }
            SvdPart::Vt => {
                let a = g.mul(ds, p.s_row);
                let at = rules::swap_last(g, a);
                let sy = g.add(a, at);
                let fx = g.mul(p.f, sy);
                let mut dv = g.matmul(p.v, fx);
                if n > m {
                    let datu = g.matmul_t(da, p.u, true, false);
                    let pr = project_out(g, p.v, datu);
                    let sc = g.div(pr, p.s_col);
                    dv = g.add(dv, sc);
                }
                rules::swap_last(g, dv)
            }
        })
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        // The transpose: a_bar = u K v^T plus the projected terms, with J = F * (x^T x_bar)
        // and K = diag(s_bar) (s), (J + J^T) D (u), D (J + J^T) (vt).
        let (m, n) = mn(&rules::dims(g, ins[0]));
        let p = self.parts(g, ins[0], out);
        let mut extra = None;
        let k = match self.part {
            SvdPart::S => {
                let c = g.expand_dims(ct, -1);
                g.mul(c, p.i)
            }
            SvdPart::U => {
                let x = g.matmul_t(p.u, ct, true, false);
                let j = g.mul(p.f, x);
                let jt = rules::swap_last(g, j);
                let jj = g.add(j, jt);
                if m > n {
                    // (I - u u^T) u_bar D^-1 v^T.
                    let pr = project_out(g, p.u, ct);
                    let sc = g.div(pr, p.s_col);
                    extra = Some(g.matmul_t(sc, p.v, false, true));
                }
                g.mul(jj, p.s_col)
            }
            SvdPart::Vt => {
                let vbar = rules::swap_last(g, ct);
                let x = g.matmul_t(p.v, vbar, true, false);
                let j = g.mul(p.f, x);
                let jt = rules::swap_last(g, j);
                let jj = g.add(j, jt);
                if n > m {
                    // u D^-1 v_bar^T (I - v v^T) = u (D^-1 ((I - v v^T) v_bar)^T).
                    let pr = project_out(g, p.v, vbar);
                    let sc = g.div(pr, p.s_col);
                    extra = Some(g.matmul_t(p.u, sc, false, true));
                }
                g.mul(jj, p.s_row)
            }
        };
        let uk = g.matmul(p.u, k);
        let mut a_bar = g.matmul_t(uk, p.v, false, true);
        if let Some(e) = extra {
            a_bar = g.add(a_bar, e);
        }
        Some(vec![Some(a_bar)])
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        for part in [SvdPart::U, SvdPart::S, SvdPart::Vt] {
            let name = format!("{}/{part:?}", Self::NAME).to_lowercase();
            let cases: &[&[&[usize]]] = &[&[&[4, 3]], &[&[2, 3, 3]], &[&[2, 4]], &[&[1, 1]]];
            out.extend(samples(&name, &op(Svd { part }), cases, Matrix::FullRank));
        }
        out
    }
}

/// The CPU kernel of `linalg_svd`.
pub(crate) fn svd_kernel(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let rlx_ir::Op::Custom(c) = ctx.op else { return Err(rlx_cpu::kernels::unsupported(ctx)) };
    let Some(s) = c.get::<Svd>() else { return Err(rlx_cpu::kernels::unsupported(ctx)) };
    let (m, n) = mn(&ctx.in_dims(0));
    let core = if s.part == SvdPart::S { 1 } else { 2 };
    batch::kernel(Svd::NAME, ctx, &[2], core, Svd::item(m, n, s.part))
}
