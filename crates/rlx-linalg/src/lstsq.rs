//! `lstsq`: least squares by QR, composed from the `qr` and `solve` ops (so its kernels and
//! derivatives are theirs): `x = r^-1 q^T b` for a tall `a`, the minimum-norm `x = q r^-T b`
//! from `a^T = q r` for a wide one.

use crate::qr::qr;
use crate::solve::solve;
use rlx_ir::{Graph, NodeId};

/// Why `lstsq` cannot build its graph.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LstsqError {
    /// `a` or `b` has no static shape, or not the ranks numpy's `lstsq` takes.
    #[error("linalg_lstsq: a must be [m, n] and b [m] or [m, k] with static dims, got {a} and {b}")]
    Shape {
        /// `a`'s shape, as text.
        a: String,
        /// `b`'s shape, as text.
        b: String,
    },
}

/// The least squares solution of `a x = b` (numpy's `lstsq(a, b)[0]`): `a` is `[m, n]` of full
/// rank, `b` is `[m]` or `[m, k]`. For `m >= n` by QR, `x = r^-1 q^T b` (not the normal
/// equations, which square the condition number); for `m < n` numpy's minimum-norm solution,
/// `x = q r^-T b` with `a^T = q r`. The derivative is that of `qr` and `solve`, which for a
/// full-rank `a` equals JAX's (pinv-based) one. An exactly rank-deficient `a` makes `solve`
/// report a singular `r` at run time (numpy and JAX cut small singular values instead).
pub fn lstsq(g: &mut Graph, a: NodeId, b: NodeId) -> Result<NodeId, LstsqError> {
    let shape_err = |g: &Graph| LstsqError::Shape {
        a: g.shape(a).map_or_else(|| "?".into(), |s| s.to_string()),
        b: g.shape(b).map_or_else(|| "?".into(), |s| s.to_string()),
    };
    let ad = g.shape(a).and_then(|s| s.fixed_dims()).ok_or_else(|| shape_err(g))?;
    let bd = g.shape(b).and_then(|s| s.fixed_dims()).ok_or_else(|| shape_err(g))?;
    if ad.len() != 2 || !(1..=2).contains(&bd.len()) || bd[0] != ad[0] {
        return Err(shape_err(g));
    }
    let (m, n) = (ad[0], ad[1]);
    if m < n {
        let at = g.transpose(a, &[1, 0]);
        let (q, r) = qr(g, at);
        let rt = g.transpose(r, &[1, 0]);
        let y = solve(g, rt, b);
        return Ok(if bd.len() == 1 {
            // q y for a vector y: sum_j q[:, j] y[j].
            let yr = g.expand_dims(y, 0);
            let p = g.mul(q, yr);
            g.sum(p, &[1], false)
        } else {
            g.matmul(q, y)
        });
    }
    let (q, r) = qr(g, a);
    let qtb = if bd.len() == 1 {
        // q^T b for a vector b: sum_i q[i, :] b[i].
        let bc = g.expand_dims(b, -1);
        let p = g.mul(q, bc);
        g.sum(p, &[0], false)
    } else {
        g.matmul_t(q, b, true, false)
    };
    Ok(solve(g, r, qtb))
}
