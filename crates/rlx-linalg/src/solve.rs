//! `linalg_solve(a, b)`: `x` with `a x = b`, numpy 2's `np.linalg.solve`. `a` is `[..., n, n]`;
//! `b` is a vector only when 1-D (`[n]`, then `x` is `a`'s batch dims + `[n]`), else `[..., n, k]`
//! with batch dims broadcasting against `a`'s. Derivatives as JAX's: `dx = a^-1 (db - da x)`,
//! `b_bar = a^-T x_bar`, `a_bar = -b_bar x^T`.

use crate::batch::{self, ItemFn};
use crate::dense::Lu;
use crate::util::{Matrix, check_float, matrix_n, rank, samples};
use rlx_ir::custom::CustomOpDef;
use rlx_ir::ops::rules;
use rlx_ir::shape::broadcast_dims;
use rlx_ir::{Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Solves `a x = b` by LU with partial pivoting. An exactly singular `a` (a zero pivot) is an
/// `Error::Eval` naming the batch item; a merely ill-conditioned one gives large values, as LAPACK.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Solve {}

impl CustomOpDef for Solve {
    const NAME: &'static str = "linalg_solve";
}

/// `x` with `a x = b` (see `Solve`).
pub fn solve(g: &mut Graph, a: NodeId, b: NodeId) -> NodeId {
    g.custom(Solve {}, &[a, b])
}

impl Solve {
    /// Trailing core axes of (a, b, x): b and x are vectors when b is 1-D.
    fn cores(b_rank: usize) -> [usize; 3] {
        if b_rank == 1 { [2, 1, 1] } else { [2, 2, 2] }
    }

    fn item(n: usize, k: usize) -> ItemFn {
        Arc::new(move |xs, out| {
            let lu = Lu::new(xs[0], n);
            if let Some(p) = lu.zero_pivot() {
                return Err(format!("the matrix is singular (zero pivot {p} of {n})"));
            }
            lu.solve(xs[1], k, out);
            Ok(())
        })
    }

    /// (n, k) from the input dims.
    fn nk(a: &[usize], b: &[usize]) -> (usize, usize) {
        let n = a[a.len() - 1];
        (n, if b.len() == 1 { 1 } else { b[b.len() - 1] })
    }
}

impl OpDef for Solve {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let dt = check_float(ins)?;
        let n = matrix_n(ins[0], "a")?;
        let (a, b) = (&ins[0].dims, &ins[1].dims);
        if b.is_empty() {
            return Err(format!("b must be [n] or [..., n, k], got {}", ins[1]));
        }
        if b.len() == 1 {
            if b[0] != n {
                return Err(format!("b {} does not match a {}", ins[1], ins[0]));
            }
            let mut d = a[..a.len() - 1].to_vec();
            d[a.len() - 2] = n;
            return Ok(Shape::with_dims(d, dt));
        }
        if b[b.len() - 2] != n {
            return Err(format!("b {} does not match a {} (rows)", ins[1], ins[0]));
        }
        let mut d = broadcast_dims(&a[..a.len() - 2], &b[..b.len() - 2])?;
        d.extend_from_slice(&b[b.len() - 2..]);
        Ok(Shape::with_dims(d, dt))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let (ad, bd) = (ins[0].dims(), ins[1].dims());
        let (n, k) = Self::nk(&ad, &bd);
        let c = Self::cores(bd.len());
        batch::reference(Self::NAME, ins, out, &c[..2], c[2], &Self::item(n, k))
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], out: NodeId) -> Option<NodeId> {
        let (a, vector) = (ins[0], rank(g, ins[1]) == 1);
        // In matrix form throughout: a 1-D b's batch would otherwise read as a matrix.
        let x = if vector { g.expand_dims(out, -1) } else { out };
        let da_x = t[0].map(|da| g.matmul(da, x));
        let db = t[1].map(|db| if vector { g.expand_dims(db, -1) } else { db });
        let rhs = match (db, da_x) {
            (Some(db), Some(dax)) => g.sub(db, dax),
            (Some(db), None) => db,
            (None, Some(dax)) => g.neg(dax),
            (None, None) => return None,
        };
        let dx = solve(g, a, rhs);
        let dx = if vector { g.squeeze(dx, &[-1]) } else { dx };
        // A tangent of b alone may lack a's batch dims.
        Some(rules::broadcast_to(g, dx, &rules::dims(g, out)))
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let (a, b, vector) = (ins[0], ins[1], rank(g, ins[1]) == 1);
        let (x, ct) = if vector { (g.expand_dims(out, -1), g.expand_dims(ct, -1)) } else { (out, ct) };
        let at = rules::swap_last(g, a);
        let gb = solve(g, at, ct);
        let ga = g.matmul_t(gb, x, false, true);
        let ga = g.neg(ga);
        let ga = rules::sum_to(g, ga, &rules::dims(g, a));
        let gb = if vector { g.squeeze(gb, &[-1]) } else { gb };
        let gb = rules::sum_to(g, gb, &rules::dims(g, b));
        Some(vec![Some(ga), Some(gb)])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        let per = |g: &Graph, i: usize| rank(g, ins[i]) - usize::from(batched[i]);
        if per(g, 1) != 1 {
            return rules::elementwise_batch(g, rlx_ir::custom::op(self.clone()), ins, batched);
        }
        if !batched[1] {
            // An unbatched vector b broadcasts against a's batch dims as it is.
            return Some(solve(g, ins[0], ins[1]));
        }
        // A batched vector b is `[S, n]`: solve it as the matrix `[S, .., n, 1]`.
        let bm = g.expand_dims(ins[1], -1);
        let r = per(g, 0).max(2);
        let a = if batched[0] { rules::lift(g, ins[0], r) } else { ins[0] };
        let bm = rules::lift(g, bm, r);
        let x = solve(g, a, bm);
        Some(g.squeeze(x, &[-1]))
    }
    fn samples() -> Vec<Sample> {
        let cases: [&[&[usize]]; 5] = [
            &[&[3, 3], &[3]],
            &[&[2, 4, 4], &[2, 4, 2]],
            &[&[2, 3, 3], &[3, 1]],
            &[&[3, 3], &[2, 3, 2]],
            &[&[2, 3, 3], &[3]],
        ];
        samples(Self::NAME, &rlx_ir::custom::op(Solve {}), &cases, Matrix::General)
    }
}

/// The CPU kernel (f32 and f64).
pub(crate) fn cpu_kernel(ctx: &rlx_cpu::kernels::KernelCtx<'_>) -> Result<rlx_cpu::kernels::Kernel> {
    let (ad, bd) = (ctx.in_dims(0), ctx.in_dims(1));
    let (n, k) = Solve::nk(&ad, &bd);
    let c = Solve::cores(bd.len());
    batch::kernel(Solve::NAME, ctx, &c[..2], c[2], Solve::item(n, k))
}
