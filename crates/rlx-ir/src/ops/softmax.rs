//! softmax and log_softmax along one axis: composites with a numerically stable decomposition.

use crate::ops::util::{rand_f64, require_float, unravel};
use crate::shape::normalize_axis;
use crate::{DType, Data, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// Applies `f` to every 1-D lane along `axis` of a float tensor.
pub fn map_lanes(x: &HostTensor, axis: usize, f: impl Fn(&[f64]) -> Vec<f64>) -> Result<Vec<f64>> {
    let Data::F(v) = &x.data else {
        return Err(Error::eval("lanes", "needs a float tensor"));
    };
    let dims = x.dims();
    let len = dims[axis];
    let stride: usize = dims[axis + 1..].iter().product();
    let mut out = vec![0.0; v.len()];
    for start in 0..v.len() {
        if unravel(start, &dims)[axis] != 0 {
            continue;
        }
        let lane: Vec<f64> = (0..len).map(|i| v[start + i * stride]).collect();
        for (i, y) in f(&lane).into_iter().enumerate() {
            out[start + i * stride] = y;
        }
    }
    Ok(out)
}

fn softmax_lane(l: &[f64]) -> Vec<f64> {
    let m = l.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = l.iter().map(|x| (x - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

fn log_softmax_lane(l: &[f64]) -> Vec<f64> {
    let m = l.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = l.iter().map(|x| (x - m).exp()).sum();
    l.iter().map(|x| x - m - s.ln()).collect()
}

macro_rules! lane_op {
    ($t:ident, $name:literal, $lane:ident, $decomp:ident) => {
        #[doc = concat!("`", $name, "` along one axis.")]
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        pub struct $t {
            /// The axis, possibly negative.
            pub axis: i64,
        }

        impl OpDef for $t {
            fn name(&self) -> &'static str {
                $name
            }
            fn traits(&self) -> OpTraits {
                OpTraits::COMPOSITE | OpTraits::NORMALIZATION
            }
            fn arity(&self) -> Arity {
                Arity::Exact(1)
            }
            fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
                require_float(ins[0].dtype)?;
                ins[0].axis(self.axis)?;
                Ok(ins[0].clone())
            }
            fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
                let a = normalize_axis(self.axis, ins[0].dims().len()).map_err(|e| Error::eval($name, e))?;
                HostTensor::new(out.clone(), Data::F(map_lanes(ins[0], a, $lane)?))
            }
            fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
                Some($decomp(g, ins[0], self.axis))
            }
            fn jvp(&self, g: &mut Graph, _ins: &[NodeId], t: &[Option<NodeId>], out: NodeId) -> Option<NodeId> {
                Some(lane_rule($name == "softmax", g, self.axis, out, t[0]?))
            }
            fn vjp(&self, g: &mut Graph, _ins: &[NodeId], out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
                // Both are self-adjoint in the tangent: J is symmetric for softmax; for
                // log_softmax J^T ct = ct - softmax * sum(ct).
                Some(vec![Some(lane_vjp($name == "softmax", g, self.axis, out, ct))])
            }
            fn batch(&self, g: &mut Graph, ins: &[NodeId], _batched: &[bool], _size: usize) -> Option<NodeId> {
                let r = crate::ops::rules::dims(g, ins[0]).len() - 1;
                Some(g.add_node($t { axis: crate::ops::rules::shift_axis(self.axis, r) }, &[ins[0]]))
            }
            fn samples() -> Vec<Sample> {
                let mut out = vec![];
                for (dims, axis, dt) in
                    [(vec![2, 5], -1i64, DType::F32), (vec![3, 4, 2], 1, DType::F64), (vec![4, 3], 0, DType::F32)]
                {
                    let x = HostTensor::from_f64(&dims, dt, &rand_f64(dims.iter().product(), -4.0, 4.0, 5))
                        .expect("sample");
                    out.push(Sample::new(format!("{}/{dt}{dims:?}@{axis}", $name), $t { axis }, vec![x]));
                }
                // Large logits: the decomposition must subtract the max.
                let big = HostTensor::from_f32(&[1, 3], &[1000.0, 1001.0, 999.0]).expect("sample");
                out.push(Sample::new(format!("{}/large", $name), $t { axis: -1 }, vec![big]));
                out
            }
        }
    };
}

lane_op!(Softmax, "softmax", softmax_lane, decompose_softmax);
lane_op!(LogSoftmax, "log_softmax", log_softmax_lane, decompose_log_softmax);

/// JVP of softmax (`y * (t - sum(t * y))`) or log_softmax (`t - sum(t * softmax)`), given the output.
fn lane_rule(softmax: bool, g: &mut Graph, axis: i64, y: NodeId, t: NodeId) -> NodeId {
    let p = if softmax { y } else { g.exp(y) };
    let tp = g.mul(t, p);
    let s = g.sum(tp, &[axis], true);
    let d = g.sub(t, s);
    if softmax { g.mul(y, d) } else { d }
}

/// VJP of softmax (its Jacobian is symmetric) or log_softmax (`ct - softmax * sum(ct)`).
fn lane_vjp(softmax: bool, g: &mut Graph, axis: i64, y: NodeId, ct: NodeId) -> NodeId {
    if softmax {
        return lane_rule(true, g, axis, y, ct);
    }
    let p = g.exp(y);
    let s = g.sum(ct, &[axis], true);
    let ps = g.mul(p, s);
    g.sub(ct, ps)
}

fn decompose_softmax(g: &mut Graph, x: NodeId, axis: i64) -> NodeId {
    let m = g.max(x, &[axis], true);
    let z = g.sub(x, m);
    let e = g.exp(z);
    let s = g.sum(e, &[axis], true);
    g.div(e, s)
}

fn decompose_log_softmax(g: &mut Graph, x: NodeId, axis: i64) -> NodeId {
    let m = g.max(x, &[axis], true);
    let z = g.sub(x, m);
    let e = g.exp(z);
    let s = g.sum(e, &[axis], true);
    let l = g.log(s);
    g.sub(z, l)
}

impl Graph {
    /// Softmax along `axis`.
    pub fn softmax(&mut self, x: NodeId, axis: i64) -> NodeId {
        self.add_node(Softmax { axis }, &[x])
    }
    /// Log-softmax along `axis`.
    pub fn log_softmax(&mut self, x: NodeId, axis: i64) -> NodeId {
        self.add_node(LogSoftmax { axis }, &[x])
    }
}
