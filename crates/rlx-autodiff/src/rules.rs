//! Reverse-mode rules kept beside the transforms for composite ops whose generic path (vjp of
//! the decomposition) builds a slower graph: they are tried before `OpDef::vjp`.

use rlx_ir::ops::rules::{dims, sum_to};
use rlx_ir::{Graph, Node, NodeId, Op};

/// The cotangents of `node`'s inputs from a rule here, or None to use the op's own path.
pub(crate) fn vjp(g: &mut Graph, node: &Node, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
    match &node.op {
        Op::LayerNorm(ln) => layer_norm_vjp(g, &node.inputs, ln.eps, ct),
        _ => None,
    }
}

/// LayerNorm's backward in closed form (as PyTorch and XLA emit it): with `xh` the normalized
/// x and `d = ct * gamma`, `dx = r * (d - mean(d) - xh * mean(d * xh))`; every per-row value
/// stays `[..., 1]` and broadcasts inside the elementwise ops, so nothing `[..., n]` is
/// materialized only to be broadcast.
fn layer_norm_vjp(g: &mut Graph, ins: &[NodeId], eps: f64, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
    let (x, gamma) = (ins[0], ins[1]);
    let dt = g.dtype(x);
    let n = *dims(g, gamma).first()?;
    let mean = g.mean(x, &[-1], true);
    let xc = g.sub(x, mean);
    let sq = g.mul(xc, xc);
    let var = g.mean(sq, &[-1], true);
    let e = g.scalar(eps, dt);
    let ve = g.add(var, e);
    let r = g.rsqrt(ve);
    let xh = g.mul(xc, r);
    let d = g.mul(ct, gamma);
    let md = g.mean(d, &[-1], true);
    let dxh = g.mul(d, xh);
    let mdx = g.mean(dxh, &[-1], true);
    let t = g.mul(xh, mdx);
    let u = g.sub(d, md);
    let u = g.sub(u, t);
    let dx = g.mul(u, r);
    let cg = g.mul(ct, xh);
    let dgamma = sum_to(g, cg, &[n]);
    let dbeta = sum_to(g, ct, &[n]);
    Some(vec![Some(dx), Some(dgamma), Some(dbeta)])
}
