//! Mixed-precision training: the model computes under a `PrecisionPolicy` (matmuls in f16 or
//! bf16) while params and optimizer state stay f32, with dynamic loss scaling inside the step.

use crate::module::ParamSpec;
use rlx_ir::ops::rules::dims;
use rlx_ir::{DType, Error, Graph, NodeId, Result, Shape};
pub use rlx_opt::PrecisionPolicy;

/// The loss-scale state param (f32 scalar).
pub const SCALE: &str = "opt.loss_scale";
/// The count of finite steps since the scale last changed (f32 scalar).
pub const GOOD: &str = "opt.good_steps";

/// Mixed precision with dynamic loss scaling (PyTorch's GradScaler rule): the loss is multiplied
/// by the scale before the backward pass and the grads divided by it; a step whose grads hold
/// an inf or nan is skipped (params and optimizer state unchanged) and halves the scale; after
/// `growth_interval` finite steps in a row the scale doubles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MixedPrecision {
    /// Where the model computes in half precision (`F32` keeps it f32, scaling only).
    pub policy: PrecisionPolicy,
    /// The first loss scale.
    pub init_scale: f64,
    /// Finite steps in a row before the scale doubles.
    pub growth_interval: u32,
}

impl MixedPrecision {
    /// f16 matmuls and elementwise math, scale 2^15 growing every 2000 good steps (as PyTorch).
    pub fn f16() -> Self {
        MixedPrecision { policy: PrecisionPolicy::F16, init_scale: 32768.0, growth_interval: 2000 }
    }

    /// bf16 with the same scaling (bf16 rarely needs it: its range is f32's).
    pub fn bf16() -> Self {
        MixedPrecision { policy: PrecisionPolicy::BF16, ..Self::f16() }
    }

    fn check(&self) -> Result<()> {
        if !(self.init_scale.is_finite() && self.init_scale > 0.0) || self.growth_interval == 0 {
            return Err(Error::eval(
                "train_step",
                format!("mixed precision needs a finite init_scale > 0 and growth_interval >= 1, got {self:?}"),
            ));
        }
        Ok(())
    }
}

/// The model under the policy, its loss multiplied by a new `SCALE` param: returns the graph,
/// the scale node, and the declared state.
pub(crate) fn scaled_model(model: &Graph, mp: &MixedPrecision) -> Result<(Graph, NodeId, Vec<ParamSpec>)> {
    mp.check()?;
    let (mut g, _) = rlx_opt::precision::apply_precision(model, mp.policy)?;
    let outs = g.outputs().to_vec();
    let Some(&loss) = outs.first() else {
        return Err(Error::eval("train_step", "the model graph has no output (its first output is the loss)"));
    };
    if g.dtype(loss) != DType::F32 || !dims(&g, loss).is_empty() {
        return Err(Error::eval("train_step", "mixed precision needs the loss to be an f32 scalar"));
    }
    let scale = g.param(SCALE, Shape::scalar(DType::F32));
    let scaled = g.mul(loss, scale);
    let mut new_outs = vec![scaled];
    new_outs.extend_from_slice(&outs[1..]);
    g.set_outputs(new_outs);
    let specs = vec![
        ParamSpec { name: SCALE.into(), dims: vec![], init: crate::Init::Constant(mp.init_scale) },
        ParamSpec { name: GOOD.into(), dims: vec![], init: crate::Init::Zeros },
    ];
    Ok((g, scale, specs))
}

/// Unscales the scaled loss and grads; returns them with a bool scalar that is true when every
/// grad is finite (an abs-sum per grad, compared with +inf: nan and inf both fail).
pub(crate) fn unscale(g: &mut Graph, scale: NodeId, loss: NodeId, grads: &[NodeId]) -> (NodeId, Vec<NodeId>, NodeId) {
    let one = g.scalar(1.0, DType::F32);
    let inv = g.div(one, scale);
    let loss = g.mul(loss, inv);
    let grads: Vec<NodeId> = grads.iter().map(|&x| g.mul(x, inv)).collect();
    let finite = all_finite(g, &grads);
    (loss, grads, finite)
}

/// A bool scalar that is true when every element of `grads` is finite (an abs-sum per grad,
/// compared with +inf: nan and inf both fail).
pub(crate) fn all_finite(g: &mut Graph, grads: &[NodeId]) -> NodeId {
    let mut total = g.scalar(0.0, DType::F32);
    for &x in grads {
        let a = g.abs(x);
        let axes: Vec<i64> = (0..dims(g, a).len() as i64).collect();
        let s = if axes.is_empty() { a } else { g.sum(a, &axes, false) };
        total = g.add(total, s);
    }
    let inf = g.scalar(f64::INFINITY, DType::F32);
    g.lt(total, inf)
}

/// The next scale and good-step count: halve and reset on a non-finite step, double after
/// `growth_interval` finite ones. With `gate` (the last micro-step) they change only then.
pub(crate) fn next_scale(
    g: &mut Graph,
    mp: &MixedPrecision,
    scale: NodeId,
    finite: NodeId,
    gate: Option<NodeId>,
) -> [(NodeId, NodeId); 2] {
    let good = g.param(GOOD, Shape::scalar(DType::F32));
    let (zero, one) = (g.scalar(0.0, DType::F32), g.scalar(1.0, DType::F32));
    let (two, half) = (g.scalar(2.0, DType::F32), g.scalar(0.5, DType::F32));
    let interval = g.scalar(mp.growth_interval as f64, DType::F32);
    let g1 = g.add(good, one);
    let grow = g.ge(g1, interval);
    let up = g.mul(scale, two);
    let kept = g.where_(grow, up, scale);
    let down = g.mul(scale, half);
    let s2 = g.where_(finite, kept, down);
    let g2 = g.where_(grow, zero, g1);
    let g2 = g.where_(finite, g2, zero);
    match gate {
        Some(last) => {
            let s3 = g.where_(last, s2, scale);
            let g3 = g.where_(last, g2, good);
            [(scale, s3), (good, g3)]
        }
        None => [(scale, s2), (good, g2)],
    }
}
