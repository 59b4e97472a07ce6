//! Optimizers as graph builders, with optax semantics: SGD (momentum, Nesterov), Adam, AdamW
//! (decoupled weight decay, bias correction), global-norm clipping and learning-rate schedules.

use crate::init::Init;
use crate::module::ParamSpec;
use rlx_ir::ops::rules::dims;
use rlx_ir::{DType, Graph, NodeId, Result, Shape};

/// The input name of the learning rate when the schedule is `Schedule::Input`.
pub const LR_INPUT: &str = "lr";

/// A learning rate as a function of the step count (0-based, optax's `count`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Schedule {
    /// The same rate every step.
    Constant(f64),
    /// Fed every step as the f32 scalar input `lr`.
    Input,
    /// Linear from `from` to `to` over `steps` steps, then `to` (optax `linear_schedule`).
    Linear {
        /// Rate at step 0.
        from: f64,
        /// Rate from `steps` on.
        to: f64,
        /// Length of the ramp.
        steps: usize,
    },
    /// Linear warm-up from 0 to `peak` over `warmup` steps, then cosine decay to `end` at
    /// `total` steps (optax `warmup_cosine_decay_schedule` with init 0).
    WarmupCosine {
        /// Rate at the end of warm-up.
        peak: f64,
        /// Warm-up steps.
        warmup: usize,
        /// Step at which the decay reaches `end` (includes warm-up).
        total: usize,
        /// Final rate.
        end: f64,
    },
}

impl Schedule {
    /// The rate at step `count` (f32 scalar node) as a graph node.
    pub fn build(&self, g: &mut Graph, count: NodeId) -> NodeId {
        let c = |g: &mut Graph, v: f64| g.scalar(v, DType::F32);
        match *self {
            Schedule::Constant(lr) => c(g, lr),
            Schedule::Input => g.input(LR_INPUT, Shape::scalar(DType::F32)),
            Schedule::Linear { from, to, steps } => {
                let n = c(g, steps.max(1) as f64);
                let t = g.div(count, n);
                let one = c(g, 1.0);
                let t = g.minimum(t, one);
                let d = c(g, to - from);
                let f = c(g, from);
                let dt = g.mul(d, t);
                g.add(f, dt)
            }
            Schedule::WarmupCosine { peak, warmup, total, end } => {
                // warm: peak * count / warmup; decay: end + (peak - end) * 0.5 * (1 + cos(pi * t)).
                let w = c(g, warmup.max(1) as f64);
                let p = c(g, peak);
                let frac = g.div(count, w);
                let warm = g.mul(p, frac);
                let wn = c(g, warmup as f64);
                let since = g.sub(count, wn);
                let span = c(g, total.saturating_sub(warmup).max(1) as f64);
                let t = g.div(since, span);
                let (zero, one) = (c(g, 0.0), c(g, 1.0));
                let t = g.maximum(t, zero);
                let t = g.minimum(t, one);
                let pi = c(g, std::f64::consts::PI);
                let a = g.mul(pi, t);
                let cos = g.cos(a);
                let cos1 = g.add(cos, one);
                let half = c(g, 0.5 * (peak - end));
                let dec = g.mul(half, cos1);
                let e = c(g, end);
                let decay = g.add(e, dec);
                let in_warm = g.lt(count, wn);
                g.where_(in_warm, warm, decay)
            }
        }
    }
}

/// Collects optimizer state params and the updates of one training step.
pub struct StepBuilder<'a> {
    /// The step graph.
    pub g: &'a mut Graph,
    /// Steps applied so far (f32 scalar, before this one).
    pub count: NodeId,
    gate: Option<NodeId>,
    state: Vec<ParamSpec>,
    updates: Vec<(NodeId, NodeId)>,
}

impl<'a> StepBuilder<'a> {
    /// A builder over `g`; `gate` (a bool scalar), when given, makes every update conditional
    /// (gradient accumulation: apply only on the last micro-step).
    pub fn new(g: &'a mut Graph, count: NodeId, gate: Option<NodeId>) -> Self {
        StepBuilder { g, count, gate, state: vec![], updates: vec![] }
    }

    /// Declares a zero-initialised f32 state param `name` of `dims`.
    pub fn state(&mut self, name: &str, dims: &[usize]) -> NodeId {
        self.state.push(ParamSpec { name: name.to_string(), dims: dims.to_vec(), init: Init::Zeros });
        self.g.param(name, Shape::new(dims, DType::F32))
    }

    /// After the step, `target` (a param) holds `value` (kept unchanged when the gate is off).
    pub fn update(&mut self, target: NodeId, value: NodeId) {
        let v = match self.gate {
            Some(gate) => self.g.where_(gate, value, target),
            None => value,
        };
        self.updates.push((target, v));
    }

    /// The declared state and the updates.
    pub fn finish(self) -> (Vec<ParamSpec>, Vec<(NodeId, NodeId)>) {
        (self.state, self.updates)
    }
}

/// A trainable param with its gradient node.
#[derive(Debug, Clone)]
pub struct ParamGrad {
    /// Full param name.
    pub name: String,
    /// The param node.
    pub param: NodeId,
    /// Its gradient (same type).
    pub grad: NodeId,
}

/// An optimizer writes its update rule into the step graph.
pub trait Optimizer {
    /// Declares state and updates for every param (`sb.count` is the step count before this step).
    fn build(&self, sb: &mut StepBuilder, params: &[ParamGrad]) -> Result<()>;
}

/// Stochastic gradient descent with optional (Nesterov) momentum, as `optax.sgd`.
#[derive(Debug, Clone, Copy)]
pub struct Sgd {
    /// Learning rate.
    pub lr: Schedule,
    /// Momentum decay (0 = plain SGD, no state).
    pub momentum: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
}

impl Optimizer for Sgd {
    fn build(&self, sb: &mut StepBuilder, params: &[ParamGrad]) -> Result<()> {
        let lr = self.lr.build(sb.g, sb.count);
        for p in params {
            let mut u = p.grad;
            if self.momentum != 0.0 {
                let d = dims(sb.g, p.param);
                let tr = sb.state(&format!("opt.trace.{}", p.name), &d);
                let mu = sb.g.scalar(self.momentum, DType::F32);
                let decayed = sb.g.mul(mu, tr);
                let nt = sb.g.add(p.grad, decayed);
                sb.update(tr, nt);
                u = if self.nesterov {
                    let m2 = sb.g.mul(mu, nt);
                    sb.g.add(p.grad, m2)
                } else {
                    nt
                };
            }
            let step = sb.g.mul(lr, u);
            let np = sb.g.sub(p.param, step);
            sb.update(p.param, np);
        }
        Ok(())
    }
}

/// Adam and AdamW as in optax (`scale_by_adam` with bias correction, then decoupled weight
/// decay `wd * param` for params the mask selects, then `-lr`).
#[derive(Debug, Clone, Copy)]
pub struct Adam {
    /// Learning rate.
    pub lr: Schedule,
    /// First-moment decay.
    pub b1: f64,
    /// Second-moment decay.
    pub b2: f64,
    /// Added to the root of the second moment.
    pub eps: f64,
    /// Decoupled weight decay (0 for Adam).
    pub weight_decay: f64,
    /// Which params decay (by name); `None` decays all, as optax's default.
    pub decay_mask: Option<fn(&str) -> bool>,
}

impl Adam {
    /// Adam with optax defaults (b1 0.9, b2 0.999, eps 1e-8).
    #[allow(clippy::self_named_constructors)]
    pub fn adam(lr: Schedule) -> Self {
        Adam { lr, b1: 0.9, b2: 0.999, eps: 1e-8, weight_decay: 0.0, decay_mask: None }
    }

    /// AdamW with optax defaults and decay `wd`.
    pub fn adamw(lr: Schedule, wd: f64) -> Self {
        Adam { weight_decay: wd, ..Adam::adam(lr) }
    }
}

impl Optimizer for Adam {
    fn build(&self, sb: &mut StepBuilder, params: &[ParamGrad]) -> Result<()> {
        let lr = self.lr.build(sb.g, sb.count);
        let one = sb.g.scalar(1.0, DType::F32);
        let t = sb.g.add(sb.count, one);
        let (b1, b2) = (sb.g.scalar(self.b1, DType::F32), sb.g.scalar(self.b2, DType::F32));
        let (c1, c2) = (sb.g.scalar(1.0 - self.b1, DType::F32), sb.g.scalar(1.0 - self.b2, DType::F32));
        let p1 = sb.g.pow(b1, t);
        let bc1 = sb.g.sub(one, p1);
        let p2 = sb.g.pow(b2, t);
        let bc2 = sb.g.sub(one, p2);
        let eps = sb.g.scalar(self.eps, DType::F32);
        let wd = sb.g.scalar(self.weight_decay, DType::F32);
        for p in params {
            let d = dims(sb.g, p.param);
            let m = sb.state(&format!("opt.mu.{}", p.name), &d);
            let v = sb.state(&format!("opt.nu.{}", p.name), &d);
            let g = &mut *sb.g;
            let (bm, cg) = (g.mul(b1, m), g.mul(c1, p.grad));
            let nm = g.add(bm, cg);
            let g2 = g.square(p.grad);
            let (bv, cv) = (g.mul(b2, v), g.mul(c2, g2));
            let nv = g.add(bv, cv);
            let mh = g.div(nm, bc1);
            let vh = g.div(nv, bc2);
            let r = g.sqrt(vh);
            let den = g.add(r, eps);
            let mut u = g.div(mh, den);
            if self.weight_decay != 0.0 && self.decay_mask.is_none_or(|f| f(&p.name)) {
                let dp = g.mul(wd, p.param);
                u = g.add(u, dp);
            }
            let s = g.mul(lr, u);
            let np = g.sub(p.param, s);
            sb.update(m, nm);
            sb.update(v, nv);
            sb.update(p.param, np);
        }
        Ok(())
    }
}

/// Scales `grads` so that their global L2 norm is at most `max_norm` (optax
/// `clip_by_global_norm`: unchanged when the norm is below).
pub fn clip_by_global_norm(g: &mut Graph, grads: &[NodeId], max_norm: f64) -> Vec<NodeId> {
    if grads.is_empty() {
        return vec![];
    }
    let mut total: Option<NodeId> = None;
    for &x in grads {
        let sq = g.square(x);
        let axes: Vec<i64> = (0..dims(g, x).len() as i64).collect();
        let s = if axes.is_empty() { sq } else { g.sum(sq, &axes, false) };
        total = Some(match total {
            Some(t) => g.add(t, s),
            None => s,
        });
    }
    let norm = g.sqrt(total.unwrap_or_else(|| unreachable!("grads is not empty")));
    let m = g.scalar(max_norm, DType::F32);
    let ratio = g.div(m, norm);
    let one = g.scalar(1.0, DType::F32);
    let below = g.lt(norm, m);
    let scale = g.where_(below, one, ratio);
    grads.iter().map(|&x| g.mul(x, scale)).collect()
}
