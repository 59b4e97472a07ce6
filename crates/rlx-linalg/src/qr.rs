//! `qr`: numpy's reduced QR (`mode='reduced'`) as two ops, one per factor, with JAX's derivative
//! (defined for `m >= n`, as JAX's). `diag(r) >= 0`, so the factors of a full-rank matrix are
//! unique (LAPACK's signs are arbitrary; the fixtures apply the same convention to numpy's).

use crate::batch::{self, ItemFn};
use crate::decomp;
use crate::solve::solve;
use crate::util::{Matrix, check_float, samples};
use rlx_cpu::kernels::{Kernel, KernelCtx};
use rlx_ir::custom::{CustomOpDef, op};
use rlx_ir::ops::rules;
use rlx_ir::{Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Which factor of the reduced QR an op instance computes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QrPart {
    /// `q`, `[..., m, k]` with orthonormal columns, `k = min(m, n)`.
    #[default]
    Q,
    /// `r`, `[..., k, n]`, upper triangular with a nonnegative diagonal.
    R,
}

/// One factor of the reduced QR of `a` (`[..., m, n]`): `a = q r`. Ops have one output, so
/// `qr()` makes one node per factor. Derivatives: JAX's `qr_jvp_rule` and its transpose, for
/// a full-rank `a` (for `m < n`, JAX's split `a = [a1 a2]` with `a1` square).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Qr {
    /// The factor computed.
    pub part: QrPart,
}

impl CustomOpDef for Qr {
    const NAME: &'static str = "linalg_qr";
}

/// `(q, r)`, numpy's `qr(a, mode='reduced')` with `diag(r) >= 0`.
pub fn qr(g: &mut Graph, a: NodeId) -> (NodeId, NodeId) {
    let q = g.custom(Qr { part: QrPart::Q }, &[a]);
    let r = g.custom(Qr { part: QrPart::R }, &[a]);
    (q, r)
}

/// `(m, n)` of a `[..., m, n]` buffer's dims.
fn mn(dims: &[usize]) -> (usize, usize) {
    (dims[dims.len() - 2], dims[dims.len() - 1])
}

/// A `[k, k]` constant mask: 1 where `keep(row, col)`.
fn mask(g: &mut Graph, k: usize, like: NodeId, keep: impl Fn(usize, usize) -> bool) -> NodeId {
    let v: Vec<f64> = (0..k * k).map(|i| f64::from(u8::from(keep(i / k, i % k)))).collect();
    let dt = g.dtype(like);
    g.constant(HostTensor::from_f64(&[k, k], dt, &v).expect("mask"))
}

impl Qr {
    fn item(m: usize, n: usize, part: QrPart) -> ItemFn {
        let k = m.min(n);
        Arc::new(move |xs, out| {
            let (mut q, mut r) = (vec![0.0; m * k], vec![0.0; k * n]);
            decomp::qr(xs[0], m, n, &mut q, &mut r);
            out.copy_from_slice(if part == QrPart::Q { &q } else { &r });
            Ok(())
        })
    }

    /// Both factors as nodes, `out` being this op's.
    fn factors(&self, g: &mut Graph, a: NodeId, out: NodeId) -> (NodeId, NodeId) {
        match self.part {
            QrPart::Q => (out, g.custom(Qr { part: QrPart::R }, &[a])),
            QrPart::R => (g.custom(Qr { part: QrPart::Q }, &[a]), out),
        }
    }

    /// `(m, n)` from the input's static dims.
    fn dims(g: &Graph, a: NodeId) -> (usize, usize) {
        mn(&rules::dims(g, a))
    }
}

/// JAX's `_thin_qr_jvp` for a square or tall `a = q r` (`r` is `k x k`): with
/// `C = q^T da r^-1` and `o = tril(C, -1) - tril(C, -1)^T`, `dq = q (o - C) + da r^-1` and
/// `dr = (C - o) r`.
fn thin_jvp(g: &mut Graph, q: NodeId, r: NodeId, da: NodeId, k: usize) -> (NodeId, NodeId) {
    let rt = rules::swap_last(g, r);
    let dat = rules::swap_last(g, da);
    let x = solve(g, rt, dat);
    let da_rinv = rules::swap_last(g, x);
    let c = g.matmul_t(q, da_rinv, true, false);
    let low = mask(g, k, c, |i, j| j < i);
    let cl = g.mul(c, low);
    let clt = rules::swap_last(g, cl);
    let o = g.sub(cl, clt);
    let oc = g.sub(o, c);
    let qoc = g.matmul(q, oc);
    let dq = g.add(qoc, da_rinv);
    let co = g.sub(c, o);
    (dq, g.matmul(co, r))
}

/// The transpose of `thin_jvp`: with `G = r_bar r^T - q^T q_bar` and
/// `H = triu(G) + tril(G^T, -1)`, `a_bar = (q_bar + q H) r^-T`.
fn thin_vjp(g: &mut Graph, q: NodeId, r: NodeId, q_bar: Option<NodeId>, r_bar: Option<NodeId>, k: usize) -> NodeId {
    let qtq = q_bar.map(|qb| g.matmul_t(q, qb, true, false));
    let rrt = r_bar.map(|rb| g.matmul_t(rb, r, false, true));
    let gm = match (rrt, qtq) {
        (Some(a), Some(b)) => g.sub(a, b),
        (Some(a), None) => a,
        (None, Some(b)) => g.neg(b),
        (None, None) => {
            let z = g.matmul_t(q, q, true, false);
            rules::zeros_like(g, z)
        }
    };
    let up = mask(g, k, gm, |i, j| j >= i);
    let low = mask(g, k, gm, |i, j| j < i);
    let gu = g.mul(gm, up);
    let gt = rules::swap_last(g, gm);
    let gl = g.mul(gt, low);
    let h = g.add(gu, gl);
    let mut lhs = g.matmul(q, h);
    if let Some(qb) = q_bar {
        lhs = g.add(qb, lhs);
    }
    // lhs r^-T = (r^-1 lhs^T)^T.
    let lt = rules::swap_last(g, lhs);
    let y = solve(g, r, lt);
    rules::swap_last(g, y)
}

impl OpDef for Qr {
    common!();
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let dt = check_float(ins)?;
        let d = &ins[0].dims;
        if d.len() < 2 {
            return Err(format!("a must be [..., m, n], got {}", ins[0]));
        }
        let (m, n) = (d[d.len() - 2].clone(), d[d.len() - 1].clone());
        let (mf, nf) = (m.fixed(), n.fixed());
        let k = match (mf, nf) {
            (Some(a), Some(b)) => rlx_ir::Dim::Fixed(a.min(b)),
            _ if m == n => m.clone(),
            _ => return Err(format!("qr needs static m and n when they differ, got {}", ins[0])),
        };
        let mut out = d[..d.len() - 2].to_vec();
        match self.part {
            QrPart::Q => out.extend([m, k]),
            QrPart::R => out.extend([k, n]),
        }
        Ok(Shape::with_dims(out, dt))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let (m, n) = mn(&ins[0].dims());
        batch::reference(Self::NAME, ins, out, &[2], 2, &Self::item(m, n, self.part))
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], out: NodeId) -> Option<NodeId> {
        let da = t[0]?;
        let (m, n) = Self::dims(g, ins[0]);
        let (q, r) = self.factors(g, ins[0], out);
        if m >= n {
            let (dq, dr) = thin_jvp(g, q, r, da, n);
            return Some(if self.part == QrPart::Q { dq } else { dr });
        }
        // Wide, as JAX: a = [a1 a2], r = [r1 r2] with a1 = q r1 square, r2 = q^T a2, so
        // (dq, dr1) is the square rule's and dr2 = dq^T a2 + q^T da2.
        let da1 = g.slice_axis(da, -1, 0, m);
        let r1 = g.slice_axis(r, -1, 0, m);
        let (dq, dr1) = thin_jvp(g, q, r1, da1, m);
        if self.part == QrPart::Q {
            return Some(dq);
        }
        let a2 = g.slice_axis(ins[0], -1, m, n);
        let da2 = g.slice_axis(da, -1, m, n);
        let x = g.matmul_t(dq, a2, true, false);
        let y = g.matmul_t(q, da2, true, false);
        let dr2 = g.add(x, y);
        Some(g.concat(&[dr1, dr2], -1))
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let (m, n) = Self::dims(g, ins[0]);
        let (q, r) = self.factors(g, ins[0], out);
        let (q_bar, r_bar) = match self.part {
            QrPart::Q => (Some(ct), None),
            QrPart::R => (None, Some(ct)),
        };
        if m >= n {
            return Some(vec![Some(thin_vjp(g, q, r, q_bar, r_bar, n))]);
        }
        // Wide: the transpose of the jvp's split. a2_bar = q r2_bar, and dr2's dq^T a2 term
        // adds a2 r2_bar^T to q_bar.
        let r1 = g.slice_axis(r, -1, 0, m);
        let a2 = g.slice_axis(ins[0], -1, m, n);
        let (a1_bar, a2_bar) = match r_bar {
            None => {
                let a1 = thin_vjp(g, q, r1, q_bar, None, m);
                (a1, rules::zeros_like(g, a2))
            }
            Some(rb) => {
                let rb1 = g.slice_axis(rb, -1, 0, m);
                let rb2 = g.slice_axis(rb, -1, m, n);
                let extra = g.matmul_t(a2, rb2, false, true);
                let a1 = thin_vjp(g, q, r1, Some(extra), Some(rb1), m);
                (a1, g.matmul(q, rb2))
            }
        };
        Some(vec![Some(g.concat(&[a1_bar, a2_bar], -1))])
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        for part in [QrPart::Q, QrPart::R] {
            let name = format!("{}/{part:?}", Self::NAME).to_lowercase();
            let cases: &[&[&[usize]]] = &[&[&[4, 3]], &[&[2, 3, 3]], &[&[5, 2]], &[&[1, 1]], &[&[2, 4]]];
            out.extend(samples(&name, &op(Qr { part }), cases, Matrix::FullRank));
        }
        out
    }
}

/// The CPU kernel of `linalg_qr`.
pub(crate) fn qr_kernel(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let rlx_ir::Op::Custom(c) = ctx.op else { return Err(rlx_cpu::kernels::unsupported(ctx)) };
    let Some(s) = c.get::<Qr>() else { return Err(rlx_cpu::kernels::unsupported(ctx)) };
    let (m, n) = mn(&ctx.in_dims(0));
    batch::kernel(Qr::NAME, ctx, &[2], 2, Qr::item(m, n, s.part))
}
