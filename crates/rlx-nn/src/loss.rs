//! Losses, each reduced to a scalar mean.

use rlx_ir::ops::rules::dims;
use rlx_ir::{DType, Error, Graph, NodeId};

/// Mean squared error over every element.
pub fn mse(g: &mut Graph, pred: NodeId, target: NodeId) -> NodeId {
    let d = g.sub(pred, target);
    let sq = g.square(d);
    let axes: Vec<i64> = (0..dims(g, sq).len() as i64).collect();
    g.mean(sq, &axes, false)
}

/// One-hot encoding of integer `labels` against `classes` on a new last axis (f32).
pub fn one_hot(g: &mut Graph, labels: NodeId, classes: usize) -> NodeId {
    let l = g.expand_dims(labels, -1);
    let dt = g.dtype(labels);
    let iota = g.arange(0.0, 1.0, classes, dt);
    let hit = g.eq(l, iota);
    g.cast(hit, DType::F32)
}

/// Softmax cross-entropy of `logits` `[..., classes]` against integer `labels` `[...]`, as the
/// fused `softmax_cross_entropy` op (stable for any logits; its gradient is the closed form
/// `softmax - onehot`), mean over the leading axes. Matches optax's
/// `softmax_cross_entropy_with_integer_labels(...).mean()`.
pub fn cross_entropy(g: &mut Graph, logits: NodeId, labels: NodeId) -> NodeId {
    let ld = dims(g, logits);
    let yd = dims(g, labels);
    if ld.len() != yd.len() + 1 || ld[..yd.len()] != yd[..] || !g.dtype(labels).is_int() {
        let reason = format!(
            "cross_entropy needs logits [..., classes] and integer labels [...] with the same leading dims; got logits {ld:?}, labels {yd:?} ({})",
            g.dtype(labels)
        );
        g.record(Error::InvalidGraph { graph: g.name().to_string(), reason });
        return logits;
    }
    let nll = g.softmax_cross_entropy(logits, labels);
    let axes: Vec<i64> = (0..yd.len() as i64).collect();
    if axes.is_empty() { nll } else { g.mean(nll, &axes, false) }
}

/// Binary cross-entropy on logits (stable): mean of `softplus(x) - x * t`, targets in [0, 1].
pub fn bce_with_logits(g: &mut Graph, logits: NodeId, targets: NodeId) -> NodeId {
    let sp = g.softplus(logits);
    let xt = g.mul(logits, targets);
    let l = g.sub(sp, xt);
    let axes: Vec<i64> = (0..dims(g, l).len() as i64).collect();
    g.mean(l, &axes, false)
}

/// Binary cross-entropy on probabilities, clipped to [eps, 1 - eps] with eps = 1e-7:
/// mean of `-(t log p + (1 - t) log(1 - p))`.
pub fn bce(g: &mut Graph, probs: NodeId, targets: NodeId) -> NodeId {
    let lo = g.scalar(1e-7, DType::F32);
    let hi = g.scalar(1.0 - 1e-7, DType::F32);
    let p = g.maximum(probs, lo);
    let p = g.minimum(p, hi);
    let one = g.scalar(1.0, DType::F32);
    let lp = g.log(p);
    let q = g.sub(one, p);
    let lq = g.log(q);
    let a = g.mul(targets, lp);
    let nt = g.sub(one, targets);
    let b = g.mul(nt, lq);
    let s = g.add(a, b);
    let axes: Vec<i64> = (0..dims(g, s).len() as i64).collect();
    let m = g.mean(s, &axes, false);
    g.neg(m)
}
