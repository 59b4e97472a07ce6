//! Data-parallel training: each rank computes the gradients of the loss on its shard of the global
//! batch, the gradients are averaged over the ranks (one all-reduce of one flat buffer), and every
//! rank applies the same update, so params stay equal on every rank.
//!
//! Two compiled graphs share the params: the *grad graph* (the model's loss and its gradients,
//! unscaled under mixed precision) and the *update graph* (averaged gradients in; finiteness check,
//! clipping, the optimizer and the counters as state updates, as in [`TrainStep`](crate::TrainStep)).
//! The update graph owns every param and optimizer state tensor; the grad graph binds the model
//! params (and the loss scale) to the same buffers (`CompiledGraph::share_params_from`), so it reads
//! what the last update wrote.

use crate::amp::{self, SCALE};
use crate::module::{NOISE_PREFIX, ParamSpec, ParamStore, noise_tensor};
use crate::optim::{Optimizer, ParamGrad, StepBuilder, clip_by_global_norm};
use crate::train::{COUNT, TrainConfig};
use rlx_dist::{Collective, DistError};
use rlx_ir::{DType, Error, Graph, HostTensor, NodeId, Shape};
use rlx_runtime::{CompiledGraph, Session};
use std::borrow::Cow;
use std::time::{Duration, Instant};

/// The update graph's input holding the averaged gradient of param `name` is `grad:{name}`.
pub const GRAD_PREFIX: &str = "grad:";

/// Errors of the data-parallel step.
#[derive(Debug, thiserror::Error)]
pub enum DpError {
    /// Building, compiling or running a graph failed.
    #[error(transparent)]
    Graph(#[from] Error),
    /// A collective failed.
    #[error(transparent)]
    Dist(#[from] DistError),
    /// The global batch does not split into equal shards.
    #[error("input `{name}`: a global batch of {rows} rows does not split evenly over {ranks} ranks")]
    Uneven {
        /// The input.
        name: String,
        /// Its rows (first dim).
        rows: usize,
        /// Ranks.
        ranks: usize,
    },
    /// An input whose dims are not the model's with the batch multiplied by the rank count.
    #[error("input `{name}`: got dims {got:?}, expected {expected:?} (the model's per-rank batch times {ranks} ranks)")]
    BatchShape {
        /// The input.
        name: String,
        /// Its dims.
        got: Vec<usize>,
        /// The dims of the global batch.
        expected: Vec<usize>,
        /// Ranks.
        ranks: usize,
    },
    /// An input neither graph has.
    #[error("input `{name}` is not an input of the model or of the optimizer step (known: {known:?})")]
    UnknownInput {
        /// The input.
        name: String,
        /// The inputs there are.
        known: Vec<String>,
    },
    /// A param's gradient that is not f32.
    #[error("the grad of param `{name}` is {dtype}; data-parallel training all-reduces f32 grads")]
    NotF32 {
        /// The param.
        name: String,
        /// Its dtype.
        dtype: DType,
    },
    /// An input the step needs was not given.
    #[error("input `{name}` was not given")]
    MissingInput {
        /// The input.
        name: String,
    },
    /// Params differ between ranks.
    #[error(
        "rank {rank}: params and optimizer state differ from rank 0's (hash {mine:016x}, rank 0 {root:016x}); {differing} of {size} ranks differ"
    )]
    OutOfSync {
        /// This rank.
        rank: usize,
        /// Its hash.
        mine: u64,
        /// Rank 0's.
        root: u64,
        /// How many ranks differ from rank 0.
        differing: usize,
        /// Ranks.
        size: usize,
    },
}

/// Result of the data-parallel step.
pub type DpResult<T> = std::result::Result<T, DpError>;

/// Timings of the all-reduce, for scaling figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct DpStats {
    /// Updates applied (all-reduces run).
    pub updates: u64,
    /// Time spent in the all-reduce, summed over updates.
    pub allreduce: Duration,
    /// The last update's all-reduce.
    pub last_allreduce: Duration,
    /// Bytes each rank contributes per update (the grads and the loss, f32).
    pub bytes_per_update: usize,
}

/// The grad graph of `model` (outputs `[loss]`): outputs `[loss, grad of each param]`, unscaled
/// under mixed precision. Returns it with the params in grad order and their types, and the state
/// mixed precision declares.
/// Names and types of params.
type Typed = Vec<(String, Shape)>;

fn build_grad_graph(model: &Graph, cfg: &TrainConfig) -> DpResult<(Graph, Typed, Vec<ParamSpec>)> {
    let (model, scale, extra) = match &cfg.amp {
        Some(mp) => {
            let (m, s, specs) = amp::scaled_model(model, mp)?;
            (Cow::Owned(m), Some(s), specs)
        }
        None => (Cow::Borrowed(model), None, vec![]),
    };
    let params: Vec<(NodeId, String)> =
        model.params().into_iter().filter(|(_, n)| *n != SCALE).map(|(id, n)| (id, n.to_string())).collect();
    let ids: Vec<NodeId> = params.iter().map(|(id, _)| *id).collect();
    let mut g = rlx_autodiff::grad_with_loss(&model, &ids)?;
    let outs = g.outputs().to_vec();
    let (mut loss, mut grads) = (outs[0], outs[1..].to_vec());
    if let Some(s) = scale {
        // Finiteness is checked after the average, in the update graph: every rank then skips alike.
        let (l, gr, _) = amp::unscale(&mut g, s, loss, &grads);
        (loss, grads) = (l, gr);
    }
    // The loss shares the flat f32 buffer with the grads.
    if g.dtype(loss) != DType::F32 || !rlx_ir::ops::rules::dims(&g, loss).is_empty() {
        return Err(Error::eval("data_parallel", "the model's first output (the loss) must be an f32 scalar").into());
    }
    let mut typed = vec![];
    for ((id, name), gr) in params.iter().zip(&grads) {
        if g.dtype(*gr) != DType::F32 {
            return Err(DpError::NotF32 { name: name.clone(), dtype: g.dtype(*gr) });
        }
        typed.push((name.clone(), model.shape(*id).cloned().unwrap_or(Shape::scalar(DType::F32))));
    }
    let mut o = vec![loss];
    o.extend(grads);
    g.set_outputs(o);
    g.verify()?;
    Ok((g, typed, extra))
}

/// The update graph: inputs `grad:{name}` (averaged grads) and whatever the optimizer reads
/// (`lr` for `Schedule::Input`); updates params, optimizer state, the step count and (mixed
/// precision) the loss scale, as `TrainStep` does; outputs the next step count. Returns it with
/// the state it declares.
fn build_update_graph(
    params: &[(String, Shape)],
    opt: &dyn Optimizer,
    cfg: &TrainConfig,
) -> DpResult<(Graph, Vec<ParamSpec>)> {
    let mut g = Graph::new("dp-update");
    let scalar = Shape::scalar(DType::F32);
    let mut pg = vec![];
    for (name, shape) in params {
        let p = g.param(name, shape.clone());
        let gr = g.input(&format!("{GRAD_PREFIX}{name}"), shape.clone());
        pg.push(ParamGrad { name: name.clone(), param: p, grad: gr });
    }
    let count = g.param(COUNT, scalar.clone());
    let mut extra = vec![ParamSpec { name: COUNT.into(), dims: vec![], init: crate::Init::Zeros }];
    let mut gate = None;
    let mut scale_updates = vec![];
    if let Some(mp) = &cfg.amp {
        let scale = g.param(SCALE, scalar);
        let grads: Vec<NodeId> = pg.iter().map(|p| p.grad).collect();
        let finite = amp::all_finite(&mut g, &grads);
        scale_updates.extend(amp::next_scale(&mut g, mp, scale, finite, None));
        // Skip the update (params, optimizer state, count) when a grad is not finite.
        gate = Some(finite);
    }
    if let Some(c) = cfg.clip_norm {
        let grads: Vec<NodeId> = pg.iter().map(|p| p.grad).collect();
        for (p, gr) in pg.iter_mut().zip(clip_by_global_norm(&mut g, &grads, c)) {
            p.grad = gr;
        }
    }
    let mut sb = StepBuilder::new(&mut g, count, gate);
    opt.build(&mut sb, &pg)?;
    let one = sb.g.scalar(1.0, DType::F32);
    let c1 = sb.g.add(count, one);
    sb.update(count, c1);
    let (state, updates) = sb.finish();
    extra.extend(state);
    for (p, v) in updates.into_iter().chain(scale_updates) {
        g.update_param(p, v);
    }
    g.set_outputs(vec![c1]);
    g.verify()?;
    Ok((g, extra))
}

/// Rows `[rank * n / size, (rank + 1) * n / size)` of `t` (first dim `n`) as bytes, `t`'s dtype.
pub fn shard_rows(name: &str, t: &HostTensor, rank: usize, size: usize) -> DpResult<Vec<u8>> {
    let dims = t.dims();
    let rows = dims.first().copied().unwrap_or(1);
    if size == 0 || !rows.is_multiple_of(size) {
        return Err(DpError::Uneven { name: name.into(), rows, ranks: size });
    }
    let bytes = t.to_bytes();
    let per = bytes.len() / rows.max(1) * (rows / size);
    Ok(bytes[rank * per..(rank + 1) * per].to_vec())
}

/// Where the update graph's input comes from.
enum UpdateInput {
    /// Bytes of the flat buffer (an averaged grad).
    Grad(std::ops::Range<usize>),
    /// An input the caller gives (`lr`).
    Given(String),
}

/// `given`'s bytes in the input order of `exe`; every input must be given.
fn in_graph_order<'a>(exe: &CompiledGraph, given: &'a [(String, Vec<u8>)]) -> DpResult<Vec<&'a [u8]>> {
    exe.inputs()
        .iter()
        .map(|(n, _)| {
            given
                .iter()
                .find(|(m, _)| m == n)
                .map(|(_, b)| b.as_slice())
                .ok_or(DpError::MissingInput { name: n.clone() })
        })
        .collect()
}

/// A data-parallel training step over the ranks of a [`Collective`].
pub struct DataParallelStep {
    grad: CompiledGraph,
    update: CompiledGraph,
    comm: Box<dyn Collective>,
    /// Grad-graph inputs the caller gives (sharded): name and per-rank type.
    batch_inputs: Vec<(String, Shape)>,
    noise: Vec<(String, Shape)>,
    /// Update-graph inputs other than grads (given whole to every rank).
    opt_inputs: Vec<String>,
    /// The update graph's inputs in its order.
    update_inputs: Vec<UpdateInput>,
    /// Params in grad order, with element counts.
    grads: Vec<(String, usize)>,
    /// Everything the update graph holds.
    names: Vec<(String, Shape)>,
    accum: usize,
    micro: usize,
    seed: u64,
    calls: u64,
    /// `[loss, grads...]` of the current micro-step, and their sum over micro-steps.
    flat: Vec<f32>,
    acc: Vec<f32>,
    stats: DpStats,
}

impl DataParallelStep {
    /// Compiles the step of `model` (outputs `[loss]`, built for the *per-rank* batch: the global
    /// batch divided by `comm.size()`), loads params and optimizer state from `store` on rank 0
    /// (zeros for state it lacks) and broadcasts them, so every rank starts equal.
    pub fn new(
        model: &Graph,
        store: &ParamStore,
        opt: &dyn Optimizer,
        cfg: &TrainConfig,
        comm: Box<dyn Collective>,
    ) -> DpResult<Self> {
        if cfg.accum == 0 {
            return Err(Error::eval("train_step", "accum must be at least 1").into());
        }
        let (gg, params, mut extra) = build_grad_graph(model, cfg)?;
        let (ug, state) = build_update_graph(&params, opt, cfg)?;
        extra.extend(state);
        let ty = |g: &Graph, id: NodeId| g.shape(id).cloned().unwrap_or(Shape::scalar(DType::F32));
        let names: Vec<(String, Shape)> = ug.params().into_iter().map(|(id, n)| (n.to_string(), ty(&ug, id))).collect();
        let opt_inputs: Vec<String> =
            ug.inputs().into_iter().map(|(_, n)| n.to_string()).filter(|n| !n.starts_with(GRAD_PREFIX)).collect();
        let (mut batch_inputs, mut noise) = (vec![], vec![]);
        for (id, n) in gg.inputs() {
            let entry = (n.to_string(), ty(&gg, id));
            if n.starts_with(NOISE_PREFIX) { noise.push(entry) } else { batch_inputs.push(entry) }
        }
        let grad_params: Vec<String> = gg.params().into_iter().map(|(_, n)| n.to_string()).collect();
        let session = Session::new(cfg.device);
        let mut update = session.compile(ug)?;
        for (name, shape) in &names {
            let t = match (store.contains(name), extra.iter().find(|s| &s.name == name)) {
                (true, _) => store.get(name)?.clone(),
                (false, Some(spec)) => spec.init.sample(name, &spec.dims, 0)?,
                (false, None) => return Err(store.get(name).unwrap_err().into()),
            };
            if t.shape != *shape {
                let (expected, got) = (shape.numel().unwrap_or(0), t.numel());
                let e = Error::DataLength { kind: "param", name: name.clone(), shape: shape.clone(), expected, got };
                return Err(e.into());
            }
            update.set_param_tensor(name, &t)?;
        }
        let mut grad = session.compile(gg)?;
        let shared: Vec<&str> = grad_params.iter().map(String::as_str).collect();
        grad.share_params_from(&update, &shared)?;
        let grads: Vec<(String, usize)> = params.iter().map(|(n, s)| (n.clone(), s.numel().unwrap_or(0))).collect();
        // Byte ranges of the grads in the flat buffer `[loss, grads...]`.
        let mut ranges = vec![];
        let mut at = 4;
        for (_, n) in &grads {
            ranges.push(at..at + n * 4);
            at += n * 4;
        }
        let update_inputs = update
            .inputs()
            .iter()
            .map(|(n, _)| match n.strip_prefix(GRAD_PREFIX).and_then(|p| grads.iter().position(|g| g.0 == p)) {
                Some(i) => UpdateInput::Grad(ranges[i].clone()),
                None => UpdateInput::Given(n.clone()),
            })
            .collect();
        let len = 1 + grads.iter().map(|g| g.1).sum::<usize>();
        let stats = DpStats { bytes_per_update: len * 4, ..DpStats::default() };
        let mut step = DataParallelStep {
            grad,
            update,
            comm,
            batch_inputs,
            noise,
            opt_inputs,
            update_inputs,
            grads,
            names,
            accum: cfg.accum,
            micro: 0,
            seed: cfg.seed,
            calls: 0,
            flat: vec![0.0; len],
            acc: vec![0.0; if cfg.accum > 1 { len } else { 0 }],
            stats,
        };
        step.broadcast_state()?;
        // Noise streams continue where a resumed run stopped, as in `TrainStep`.
        step.calls = step.count()?.wrapping_mul(cfg.accum as u64);
        Ok(step)
    }

    /// Copies rank 0's params and optimizer state to every other rank (one broadcast).
    pub fn broadcast_state(&mut self) -> DpResult<()> {
        let mut bytes = vec![];
        if self.comm.rank() == 0 {
            for (n, _) in &self.names {
                bytes.extend(self.update.get_param(n)?.to_bytes());
            }
        }
        self.comm.broadcast_bytes(0, &mut bytes)?;
        if self.comm.rank() != 0 {
            let mut at = 0;
            for (n, shape) in &self.names {
                let len = shape.numel().unwrap_or(0) * shape.dtype.size_bytes();
                let chunk = bytes.get(at..at + len).ok_or_else(|| {
                    Error::eval(
                        "broadcast_state",
                        format!("rank 0 sent {} bytes, fewer than the state holds", bytes.len()),
                    )
                })?;
                self.update.set_param_tensor(n, &HostTensor::from_bytes(shape.clone(), chunk)?)?;
                at += len;
            }
        }
        Ok(())
    }

    /// A hash of every param and optimizer state tensor on this rank.
    pub fn state_hash(&self) -> DpResult<u64> {
        let mut bytes = vec![];
        for (n, _) in &self.names {
            bytes.extend(self.update.get_param(n)?.to_bytes());
        }
        Ok(rlx_dist::fnv1a(&bytes))
    }

    /// Checks that every rank holds the same params and optimizer state as rank 0 (a hash
    /// broadcast and one all-reduce): every rank gets the same answer.
    pub fn check_in_sync(&self) -> DpResult<()> {
        let mine = self.state_hash()?;
        let mut root = mine.to_le_bytes().to_vec();
        self.comm.broadcast_bytes(0, &mut root)?;
        let root = u64::from_le_bytes(root.try_into().map_err(|_| Error::eval("check_in_sync", "bad hash length"))?);
        let mut differ = [if mine == root { 0.0f32 } else { 1.0 }];
        self.comm.all_reduce_sum_f32(&mut differ)?;
        let differing = differ[0] as usize;
        if differing > 0 {
            let (rank, size) = (self.comm.rank(), self.comm.size());
            return Err(DpError::OutOfSync { rank, mine, root, differing, size });
        }
        Ok(())
    }

    /// Runs one micro-step on the *global* batch (this rank takes its rows of every batch input;
    /// noise inputs are filled here, the rows of the global noise). On the last micro-step of an
    /// update the gradients are averaged over micro-steps and ranks and applied: returns the mean
    /// loss over them, the same on every rank; `None` on the micro-steps before.
    pub fn step(&mut self, inputs: &[(&str, &HostTensor)]) -> DpResult<Option<f32>> {
        let (rank, size) = (self.comm.rank(), self.comm.size());
        let mut grad_in: Vec<(String, Vec<u8>)> = vec![];
        let mut opt_in: Vec<(String, Vec<u8>)> = vec![];
        for &(name, t) in inputs {
            if self.opt_inputs.iter().any(|n| n == name) {
                opt_in.push((name.to_string(), t.to_bytes()));
                continue;
            }
            let Some((_, shape)) = self.batch_inputs.iter().find(|(n, _)| n == name) else {
                let known = self.batch_inputs.iter().map(|(n, _)| n.clone()).chain(self.opt_inputs.clone()).collect();
                return Err(DpError::UnknownInput { name: name.into(), known });
            };
            let local = shape.dims_fixed().map_err(|e| Error::eval("data_parallel", e))?;
            let mut expected = local.clone();
            if let Some(d) = expected.first_mut() {
                *d *= size;
            }
            let got = t.dims();
            if got != expected {
                if got.len() == expected.len() && got.first().is_some_and(|r| !r.is_multiple_of(size)) {
                    return Err(DpError::Uneven { name: name.into(), rows: got[0], ranks: size });
                }
                return Err(DpError::BatchShape { name: name.into(), got, expected, ranks: size });
            }
            grad_in.push((name.to_string(), shard_rows(name, t, rank, size)?));
        }
        for (name, shape) in &self.noise {
            let mut dims = shape.dims_fixed().map_err(|e| Error::eval("noise", e))?;
            if let Some(d) = dims.first_mut() {
                *d *= size;
            }
            let global = noise_tensor(&Shape::new(&dims, shape.dtype), self.seed, self.calls, name)?;
            grad_in.push((name.clone(), shard_rows(name, &global, rank, size)?));
        }
        let ins = in_graph_order(&self.grad, &grad_in)?;
        // The loss and the grads land straight in the flat buffer the all-reduce takes.
        let mut outs: Vec<&mut [u8]> = Vec::with_capacity(self.grads.len() + 1);
        let mut rest: &mut [u8] = bytemuck::cast_slice_mut(&mut self.flat[..]);
        for n in std::iter::once(1).chain(self.grads.iter().map(|g| g.1)) {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(n * 4);
            outs.push(head);
            rest = tail;
        }
        self.grad.run_into(&ins, &mut outs)?;
        self.calls += 1;
        self.micro += 1;
        if self.accum > 1 {
            self.acc.iter_mut().zip(&self.flat).for_each(|(a, x)| *a += x);
            if self.micro < self.accum {
                return Ok(None);
            }
            let k = self.accum as f32;
            for (f, a) in self.flat.iter_mut().zip(self.acc.iter_mut()) {
                *f = *a / k;
                *a = 0.0;
            }
        }
        self.micro = 0;
        let t = Instant::now();
        self.comm.all_reduce_mean_f32(&mut self.flat)?;
        self.stats.last_allreduce = t.elapsed();
        self.stats.allreduce += self.stats.last_allreduce;
        self.stats.updates += 1;
        // The update graph reads the averaged grads from the flat buffer, with no copy.
        let flat: &[u8] = bytemuck::cast_slice(&self.flat);
        let mut ins: Vec<&[u8]> = Vec::with_capacity(self.update_inputs.len());
        for src in &self.update_inputs {
            ins.push(match src {
                UpdateInput::Grad(bytes) => &flat[bytes.clone()],
                UpdateInput::Given(name) => match opt_in.iter().find(|(n, _)| n == name) {
                    Some((_, b)) => b,
                    None => return Err(DpError::MissingInput { name: name.clone() }),
                },
            });
        }
        let mut count = [0u8; 4];
        self.update.run_into(&ins, &mut [&mut count[..]])?;
        Ok(Some(self.flat[0]))
    }

    /// The collective this step runs on.
    pub fn comm(&self) -> &dyn Collective {
        self.comm.as_ref()
    }

    /// All-reduce timings so far.
    pub fn stats(&self) -> DpStats {
        self.stats
    }

    /// Every param and optimizer state tensor, current.
    pub fn state(&self) -> DpResult<ParamStore> {
        let mut s = ParamStore::new();
        for (n, _) in &self.names {
            s.insert(n, self.update.get_param(n)?);
        }
        Ok(s)
    }

    /// Only the model params (names not starting with `opt.`).
    pub fn params(&self) -> DpResult<ParamStore> {
        let mut s = ParamStore::new();
        for (n, _) in &self.names {
            if !n.starts_with("opt.") {
                s.insert(n, self.update.get_param(n)?);
            }
        }
        Ok(s)
    }

    /// Updates applied so far (the optimizer's step count).
    pub fn count(&self) -> DpResult<u64> {
        let c = self.update.get_param(COUNT)?.to_f64_vec()?;
        Ok(c.first().copied().unwrap_or(0.0) as u64)
    }

    /// Names and types of everything the step holds.
    pub fn names(&self) -> &[(String, Shape)] {
        &self.names
    }

    /// Overwrites one param or state tensor on this rank only: the ranks differ until the next
    /// [`broadcast_state`](Self::broadcast_state) (for tests of [`check_in_sync`](Self::check_in_sync)).
    pub fn set(&mut self, name: &str, t: &HostTensor) -> DpResult<()> {
        Ok(self.update.set_param_tensor(name, t)?)
    }
}
