//! The compiled training step: forward, backward and optimizer update in one graph.

use crate::amp::{self, MixedPrecision};
use crate::module::{NOISE_PREFIX, ParamSpec, ParamStore, noise_tensor};
use crate::optim::{Optimizer, ParamGrad, StepBuilder, clip_by_global_norm};
use rlx_driver::Device;
use rlx_ir::{DType, Error, Graph, HostTensor, NodeId, Result, Shape};
use rlx_runtime::{CompiledGraph, Session};
use std::borrow::Cow;

/// Options of a training step.
#[derive(Debug, Clone, Copy)]
pub struct TrainConfig {
    /// Micro-steps whose gradients are averaged before one update (1 = update every step).
    pub accum: usize,
    /// Clip gradients to this global norm before the optimizer.
    pub clip_norm: Option<f64>,
    /// Seed of the noise inputs (dropout).
    pub seed: u64,
    /// Where to run.
    pub device: Device,
    /// Mixed precision with dynamic loss scaling (None: all f32, unscaled).
    pub amp: Option<MixedPrecision>,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig { accum: 1, clip_norm: None, seed: 0, device: Device::Cpu, amp: None }
    }
}

/// The name of the step counter state (f32 scalar: updates applied so far).
pub const COUNT: &str = "opt.count";
/// The name of the micro-step counter state under gradient accumulation.
pub const MICRO: &str = "opt.micro";

/// The step graph of `model` (outputs `[loss]`): outputs `[loss]` and updates every param and
/// optimizer state in place. Returns the graph and the declared optimizer state.
pub fn build_step_graph(model: &Graph, opt: &dyn Optimizer, cfg: &TrainConfig) -> Result<(Graph, Vec<ParamSpec>)> {
    if cfg.accum == 0 {
        return Err(Error::eval("train_step", "accum must be at least 1"));
    }
    // Under mixed precision the model runs under the policy and its loss is scaled.
    let (model, scale, mut extra) = match &cfg.amp {
        Some(mp) => {
            let (m, s, specs) = amp::scaled_model(model, mp)?;
            (Cow::Owned(m), Some(s), specs)
        }
        None => (Cow::Borrowed(model), None, vec![]),
    };
    let params: Vec<(NodeId, String)> =
        model.params().into_iter().filter(|(_, n)| *n != amp::SCALE).map(|(id, n)| (id, n.to_string())).collect();
    let ids: Vec<NodeId> = params.iter().map(|(id, _)| *id).collect();
    let mut g = rlx_autodiff::grad_with_loss(&model, &ids)?;
    let outs = g.outputs().to_vec();
    let mut loss = outs[0];
    let mut grads = outs[1..].to_vec();
    let mut finite = None;
    if let Some(s) = scale {
        let (l, gr, f) = amp::unscale(&mut g, s, loss, &grads);
        (loss, grads, finite) = (l, gr, Some(f));
    }
    let scalar = Shape::scalar(DType::F32);
    let count = g.param(COUNT, scalar.clone());
    extra.push(ParamSpec { name: COUNT.into(), dims: vec![], init: crate::Init::Zeros });
    let mut pre_updates = vec![];
    let mut gate = None;
    if cfg.accum > 1 {
        // Sum grads over micro-steps; apply their mean on the last one, then reset.
        let micro = g.param(MICRO, scalar.clone());
        extra.push(ParamSpec { name: MICRO.into(), dims: vec![], init: crate::Init::Zeros });
        let one = g.scalar(1.0, DType::F32);
        let k = g.scalar(cfg.accum as f64, DType::F32);
        let next = g.add(micro, one);
        let last = g.ge(next, k);
        let zero = g.scalar(0.0, DType::F32);
        let m2 = g.where_(last, zero, next);
        pre_updates.push((micro, m2));
        for (gr, (_, name)) in grads.iter_mut().zip(&params) {
            let d = rlx_ir::ops::rules::dims(&g, *gr);
            let acc = g.param(&format!("opt.acc.{name}"), Shape::new(&d, DType::F32));
            extra.push(ParamSpec { name: format!("opt.acc.{name}"), dims: d.clone(), init: crate::Init::Zeros });
            let total = g.add(acc, *gr);
            let z = g.full(Shape::new(&d, DType::F32), 0.0);
            let reset = g.where_(last, z, total);
            pre_updates.push((acc, reset));
            *gr = g.div(total, k);
        }
        gate = Some(last);
    }
    if let Some(c) = cfg.clip_norm {
        grads = clip_by_global_norm(&mut g, &grads, c);
    }
    let pg: Vec<ParamGrad> =
        params.iter().zip(&grads).map(|((p, n), gr)| ParamGrad { name: n.clone(), param: *p, grad: *gr }).collect();
    let mut scale_updates = vec![];
    if let (Some(mp), Some(s), Some(f)) = (&cfg.amp, scale, finite) {
        scale_updates.extend(amp::next_scale(&mut g, mp, s, f, gate));
        // Skip the update (params, optimizer state, count) when a grad is not finite.
        gate = Some(match gate {
            Some(last) => g.where_(last, f, last),
            None => f,
        });
    }
    let mut sb = StepBuilder::new(&mut g, count, gate);
    opt.build(&mut sb, &pg)?;
    let one = sb.g.scalar(1.0, DType::F32);
    let c1 = sb.g.add(count, one);
    sb.update(count, c1);
    let (state, updates) = sb.finish();
    extra.extend(state);
    for (p, v) in pre_updates.into_iter().chain(updates).chain(scale_updates) {
        g.update_param(p, v);
    }
    g.set_outputs(vec![loss]);
    g.verify()?;
    Ok((g, extra))
}

/// A compiled training step. Params and optimizer state live in the compiled graph and are
/// updated by every `step`; `state` reads them back (for checkpoints).
pub struct TrainStep {
    exe: CompiledGraph,
    names: Vec<(String, Shape)>,
    noise: Vec<(String, Shape)>,
    seed: u64,
    calls: u64,
}

impl TrainStep {
    /// Compiles the step of `model` (outputs `[loss]`) and loads every param from `store`;
    /// optimizer state comes from `store` when it has it (a resumed checkpoint), else zeros.
    pub fn new(model: &Graph, store: &ParamStore, opt: &dyn Optimizer, cfg: &TrainConfig) -> Result<Self> {
        let (g, extra) = build_step_graph(model, opt, cfg)?;
        let names: Vec<(String, Shape)> = g
            .params()
            .into_iter()
            .map(|(id, n)| (n.to_string(), g.shape(id).cloned().unwrap_or(Shape::scalar(DType::F32))))
            .collect();
        let noise = g
            .inputs()
            .into_iter()
            .filter(|(_, n)| n.starts_with(NOISE_PREFIX))
            .map(|(id, n)| (n.to_string(), g.shape(id).cloned().unwrap_or(Shape::scalar(DType::F32))))
            .collect();
        // Params and optimizer state stay in the backend's arena, updated in place each step.
        let mut exe = Session::new(cfg.device).compile(g)?;
        for (name, shape) in &names {
            let t = match (store.contains(name), extra.iter().find(|s| &s.name == name)) {
                (true, _) => store.get(name)?.clone(),
                (false, Some(spec)) => spec.init.sample(name, &spec.dims, 0)?,
                (false, None) => return Err(store.get(name).unwrap_err()),
            };
            if t.shape != *shape {
                return Err(Error::DataLength {
                    kind: "param",
                    name: name.clone(),
                    shape: shape.clone(),
                    expected: shape.numel().unwrap_or(0),
                    got: t.numel(),
                });
            }
            exe.set_param_tensor(name, &t)?;
        }
        // Noise streams continue where a resumed run stopped: one per micro-step.
        let scalar = |n: &str| -> Result<u64> {
            Ok(if store.contains(n) { store.get(n)?.to_f64_vec()?.first().copied().unwrap_or(0.0) as u64 } else { 0 })
        };
        // A position in the noise streams: wrapping keeps a (checkpointed) huge count from
        // panicking, and the streams stay deterministic.
        let calls = scalar(COUNT)?.wrapping_mul(cfg.accum as u64).wrapping_add(scalar(MICRO)?);
        Ok(TrainStep { exe, names, noise, seed: cfg.seed, calls })
    }

    /// Runs one (micro-)step on named inputs (noise inputs are filled here); returns the loss.
    pub fn step(&mut self, inputs: &[(&str, &HostTensor)]) -> Result<f32> {
        let noise: Vec<(String, HostTensor)> = self
            .noise
            .iter()
            .map(|(n, s)| noise_tensor(s, self.seed, self.calls, n).map(|t| (n.clone(), t)))
            .collect::<Result<_>>()?;
        let mut all: Vec<(&str, &HostTensor)> = inputs.to_vec();
        all.extend(noise.iter().map(|(n, t)| (n.as_str(), t)));
        let outs = self.exe.run_tensors(&all)?;
        self.calls += 1;
        let loss = outs[0].to_f32_vec()?;
        Ok(loss.first().copied().unwrap_or(f32::NAN))
    }

    /// Every param and optimizer state tensor, current.
    pub fn state(&self) -> Result<ParamStore> {
        let mut s = ParamStore::new();
        for (n, _) in &self.names {
            s.insert(n, self.exe.get_param(n)?);
        }
        Ok(s)
    }

    /// Only the model params (names not starting with `opt.`).
    pub fn params(&self) -> Result<ParamStore> {
        let mut s = ParamStore::new();
        for (n, t) in self.state()?.iter() {
            if !n.starts_with("opt.") {
                s.insert(n, t.clone());
            }
        }
        Ok(s)
    }

    /// Updates applied so far (the optimizer's step count).
    pub fn count(&self) -> Result<u64> {
        let c = self.get(COUNT)?.to_f64_vec()?;
        Ok(c.first().copied().unwrap_or(0.0) as u64)
    }

    /// One param or state tensor, current.
    pub fn get(&self, name: &str) -> Result<HostTensor> {
        self.exe.get_param(name)
    }

    /// Names and types of everything the step holds.
    pub fn names(&self) -> &[(String, Shape)] {
        &self.names
    }
}
