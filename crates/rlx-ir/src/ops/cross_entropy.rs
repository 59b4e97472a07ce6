//! `softmax_cross_entropy`: the per-row loss `logsumexp(x) - x[label]` of logits `[..., C]`
//! against integer labels `[...]`, as one op. Forward needs only the row's max, log-sum-exp and
//! the picked logit; the vjp is the closed form `(softmax(x) - onehot(label)) * ct`, with the
//! log-sum-exp recovered from the op's own output (`lse = loss + x[label]`), so nothing but the
//! loss is saved. Backends without a kernel get `decompose` (max, exp, sum, log, one-hot).

use crate::ops::conv::infers;
use crate::ops::rules::dims;
use crate::ops::util::{rand_f64, rand_i64, require_float};
use crate::{DType, Data, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// Softmax cross-entropy with integer labels over the last axis, one loss per row (no mean).
/// A label outside `0..C` selects no class, exactly as its all-zero one-hot does in
/// `-sum(log_softmax(x) * onehot)`: that row's loss and gradient are 0 (an ignored row).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SoftmaxCrossEntropy {}

/// The loss of one row in f64: `lse - x[label]`, or 0 for a label outside the row.
pub fn cross_entropy_row(x: &[f64], label: i64) -> f64 {
    let Some(&picked) = usize::try_from(label).ok().and_then(|l| x.get(l)) else { return 0.0 };
    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    m + x.iter().map(|v| (v - m).exp()).sum::<f64>().ln() - picked
}

/// 1 where a label lies in `0..classes`, else 0, in `dt` (shaped like the labels).
fn in_range(g: &mut Graph, labels: NodeId, classes: usize, dt: DType) -> NodeId {
    let ldt = g.dtype(labels);
    let (lo, hi) = (g.scalar(0.0, ldt), g.scalar(classes as f64, ldt));
    let (a, b) = (g.ge(labels, lo), g.lt(labels, hi));
    let (a, b) = (g.cast(a, dt), g.cast(b, dt));
    g.mul(a, b)
}

/// `one_hot(labels)` in `dt` on a new last axis of `classes`: `cast(labels[..., None] == iota)`.
pub fn one_hot(g: &mut Graph, labels: NodeId, classes: usize, dt: DType) -> NodeId {
    let l = g.expand_dims(labels, -1);
    let iota = g.arange(0.0, 1.0, classes, g.dtype(labels));
    let hit = g.eq(l, iota);
    g.cast(hit, dt)
}

/// `(softmax(x) - onehot, valid)` from the op's output: `lse = out + sum(x * onehot)`,
/// `softmax = exp(min(x - lse, 0))`. The clamp only bounds ignored rows (whose `out` is 0, so
/// their `lse` is not recovered): `x - lse <= 0` holds for the others. `valid` is `[..., 1]`.
fn probs_minus_one_hot(g: &mut Graph, x: NodeId, labels: NodeId, out: NodeId) -> (NodeId, NodeId) {
    let (classes, dt) = (*dims(g, x).last().unwrap_or(&1), g.dtype(x));
    let oh = one_hot(g, labels, classes, dt);
    let xo = g.mul(x, oh);
    let picked = g.sum(xo, &[-1], true);
    let o = g.expand_dims(out, -1);
    let lse = g.add(o, picked);
    let z = g.sub(x, lse);
    let zero = g.scalar(0.0, dt);
    let z = g.minimum(z, zero);
    let p = g.exp(z);
    let valid = in_range(g, labels, classes, dt);
    (g.sub(p, oh), g.expand_dims(valid, -1))
}

impl OpDef for SoftmaxCrossEntropy {
    fn name(&self) -> &'static str {
        "softmax_cross_entropy"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE | OpTraits::NORMALIZATION | OpTraits::REDUCTION
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let (x, y) = (ins[0], ins[1]);
        require_float(x.dtype)?;
        if !y.dtype.is_int() {
            return Err(format!("labels must have an integer dtype, got {}", y.dtype));
        }
        if x.dims.len() != y.dims.len() + 1 || x.dims[..y.dims.len()] != y.dims[..] {
            return Err(format!("logits must be [..., classes] over labels [...]: got logits {x}, labels {y}"));
        }
        if x.dims.last().and_then(|d| d.fixed()) == Some(0) {
            return Err("logits need at least one class".into());
        }
        Ok(Shape::with_dims(y.dims.clone(), x.dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let Data::F(x) = &ins[0].data else {
            return Err(Error::eval("softmax_cross_entropy", "logits must be a float tensor"));
        };
        let labels = ins[1].to_i64_vec()?;
        let c = ins[0].dims().last().copied().unwrap_or(1);
        let loss = x.chunks_exact(c).zip(&labels).map(|(row, &l)| cross_entropy_row(row, l)).collect();
        HostTensor::new(out.clone(), Data::F(loss))
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        if !infers(self, g, ins) {
            return None;
        }
        let (x, labels) = (ins[0], ins[1]);
        let classes = *dims(g, x).last()?;
        let m = g.max(x, &[-1], true);
        let z = g.sub(x, m);
        let e = g.exp(z);
        let s = g.sum(e, &[-1], true);
        let ls = g.log(s);
        let lse = g.add(m, ls);
        // The picked logit: exact, since the one-hot has at most one non-zero per row.
        let oh = one_hot(g, labels, classes, g.dtype(x));
        let xo = g.mul(x, oh);
        let picked = g.sum(xo, &[-1], true);
        let loss = g.sub(lse, picked);
        let loss = g.squeeze(loss, &[-1]);
        let valid = in_range(g, labels, classes, g.dtype(x));
        Some(g.mul(loss, valid))
    }
    /// `d loss = sum((softmax(x) - onehot) * t)` on rows with a valid label.
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], out: NodeId) -> Option<NodeId> {
        let tx = t[0]?;
        let (d, valid) = probs_minus_one_hot(g, ins[0], ins[1], out);
        let d = g.mul(d, valid);
        let dt = g.mul(d, tx);
        Some(g.sum(dt, &[-1], false))
    }
    /// The closed form `dx = (softmax(x) - onehot(label)) * ct[..., None]` on rows with a valid
    /// label (0 elsewhere); labels get none. Everything `[..., C]` is one elementwise region.
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let (d, valid) = probs_minus_one_hot(g, ins[0], ins[1], out);
        let c = g.expand_dims(ct, -1);
        let c = g.mul(c, valid);
        Some(vec![Some(g.mul(d, c)), None])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        // Rows are independent: with both batched the batch axis is one more leading dim.
        batched.iter().all(|&b| b).then(|| g.add_node(self.clone(), ins))
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        let cases: [(&[usize], DType, DType, f64); 5] = [
            (&[4, 7], DType::F32, DType::I32, 4.0),
            (&[2, 3, 5], DType::F64, DType::I64, 6.0),
            (&[3, 9], DType::F16, DType::I32, 3.0),
            (&[2, 8], DType::BF16, DType::I32, 3.0),
            (&[5], DType::F32, DType::I32, 2.0),
        ];
        for (i, (d, dt, lt, r)) in cases.into_iter().enumerate() {
            let (n, c) = (d.iter().product::<usize>(), *d.last().unwrap_or(&1));
            let seed = 200 + 2 * i as u64;
            let x = HostTensor::from_f64(d, dt, &rand_f64(n, -r, r, seed)).expect("sample");
            let ld = &d[..d.len() - 1];
            let y = HostTensor::from_i64(ld, lt, &rand_i64(n / c, 0, c as i64, seed + 1)).expect("sample");
            out.push(Sample::new(format!("softmax_cross_entropy/{dt}{d:?}"), SoftmaxCrossEntropy {}, vec![x, y]));
        }
        // Large logits (the max must be subtracted) and labels outside the row (no class picked).
        let x =
            HostTensor::from_f32(&[3, 4], &[1000.0, 1001.0, 999.0, 998.0, -5.0, 0.0, 5.0, 1.0, 0.5, 0.25, 0.0, -0.5])
                .expect("sample");
        let y = HostTensor::from_i64(&[3], DType::I32, &[1, -1, 4]).expect("sample");
        out.push(Sample::new("softmax_cross_entropy/large_and_outside", SoftmaxCrossEntropy {}, vec![x, y]));
        out
    }
}

impl Graph {
    /// Per-row softmax cross-entropy of `logits` `[..., C]` against integer `labels` `[...]`:
    /// `logsumexp(logits) - logits[label]`, shaped like `labels`.
    pub fn softmax_cross_entropy(&mut self, logits: NodeId, labels: NodeId) -> NodeId {
        self.add_node(SoftmaxCrossEntropy {}, &[logits, labels])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::evaluate;

    #[test]
    fn hand_computed_rows_and_infer_errors() {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[2, 3], DType::F32));
        let y = g.input("y", Shape::new(&[2], DType::I32));
        let l = g.softmax_cross_entropy(x, y);
        g.set_outputs(vec![l]);
        let xs = HostTensor::from_f32(&[2, 3], &[0.0, 0.0, 0.0, 1.0, 2.0, 3.0]).unwrap();
        let ys = HostTensor::from_i64(&[2], DType::I32, &[2, 0]).unwrap();
        let out = evaluate(&g, &[("x", xs), ("y", ys)]).unwrap()[0].to_f64_vec().unwrap();
        // Row 0: ln 3. Row 1: ln(e + e^2 + e^3) - 1.
        let r1 = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln() - 1.0;
        assert!((out[0] - 3f64.ln()).abs() < 1e-6 && (out[1] - r1).abs() < 1e-5, "{out:?}");

        let mut g = Graph::new("bad");
        let x = g.input("x", Shape::new(&[2, 3], DType::F32));
        let yf = g.input("yf", Shape::new(&[2], DType::F32));
        let y3 = g.input("y3", Shape::new(&[3], DType::I32));
        let e = g.try_add(SoftmaxCrossEntropy {}, &[x, yf]).unwrap_err().to_string();
        assert!(e.contains("labels must have an integer dtype"), "{e}");
        let e = g.try_add(SoftmaxCrossEntropy {}, &[x, y3]).unwrap_err().to_string();
        assert!(e.contains("logits must be [..., classes] over labels [...]"), "{e}");
    }

    #[test]
    fn decomposition_matches_reference_including_labels_outside() {
        for s in SoftmaxCrossEntropy::samples() {
            let mut g = Graph::new("d");
            let ids: Vec<NodeId> =
                s.inputs.iter().enumerate().map(|(i, t)| g.input(&format!("i{i}"), t.shape.clone())).collect();
            let want = g.try_add(s.op.clone(), &ids).unwrap();
            let got = s.op.def().decompose(&mut g, &ids).unwrap();
            g.set_outputs(vec![want, got]);
            let feeds: Vec<(String, HostTensor)> =
                s.inputs.iter().enumerate().map(|(i, t)| (format!("i{i}"), t.clone())).collect();
            let feeds: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
            let out = evaluate(&g, &feeds).unwrap();
            let (a, b) = (out[0].to_f64_vec().unwrap(), out[1].to_f64_vec().unwrap());
            let tol = if s.inputs[0].dtype().size_bytes() <= 2 { 5e-2 } else { 1e-4 };
            for (x, y) in a.iter().zip(&b) {
                assert!((x - y).abs() <= tol * (1.0 + x.abs()), "{}: {a:?} vs {b:?}", s.label);
            }
        }
    }
}
