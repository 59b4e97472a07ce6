//! `MlxBackend`: the `rlx_driver::Backend` over the shim.

use crate::emit::EMITTERS;
use crate::program::{Prog, V};
use crate::shim::{Array, shim};
use rlx_driver::{Backend, Capabilities, Executable, Execution, ParamBuffer, ParamShare, ParamUpdate};
use rlx_ir::{DType, Error, Graph, Node, Op, Result, Shape};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// When a run evaluates: once at the end (`Lazy`, the default) or after every op (`Eager`, so a
/// failure names its node). `RLX_MLX_MODE=lazy|eager` picks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Build the whole graph, evaluate once.
    Lazy,
    /// Evaluate after each op.
    Eager,
}

impl Mode {
    /// `RLX_MLX_MODE`, else `Lazy`; an unknown value is an error naming the choices.
    pub fn from_env() -> Result<Mode> {
        match std::env::var("RLX_MLX_MODE").as_deref() {
            Err(_) | Ok("") | Ok("lazy") => Ok(Mode::Lazy),
            Ok("eager") => Ok(Mode::Eager),
            Ok(other) => Err(Error::eval("RLX_MLX_MODE", format!("unknown mode `{other}`; use lazy or eager"))),
        }
    }
}

/// Apple MLX through libmlx (`Device::Mlx`).
#[derive(Default)]
pub struct MlxBackend;

impl MlxBackend {
    /// The backend (the shim is loaded at the first compile).
    pub fn new() -> Self {
        MlxBackend
    }
}

/// Why `Device::Mlx` is unavailable (no libmlx at build time, the shim not loadable), or None.
pub fn probe() -> Option<&'static str> {
    shim().err()
}

impl Backend for MlxBackend {
    fn name(&self) -> &'static str {
        "mlx"
    }

    fn capabilities(&self) -> Capabilities {
        // MLX schedules and fuses the lazy graph itself.
        Capabilities { execution: Execution::WholeGraph, ..Capabilities::default() }
    }

    fn supports(&self, node: &Node, inputs: &[&Shape]) -> bool {
        let Some(entry) = EMITTERS.lookup(node, inputs) else { return false };
        let Some(out) = node.ty.fixed_dims() else { return false };
        let mut vals = vec![];
        for (i, s) in inputs.iter().enumerate() {
            let Some(d) = s.fixed_dims() else { return false };
            vals.push(V { id: i, dims: d, dt: s.dtype });
        }
        // An emitter says whether it takes these attributes by emitting into a scratch program.
        (entry.build)(&mut Prog { fed: inputs.len(), ..Prog::default() }, node, &vals, &out).is_some()
    }

    fn missing_reason(&self, node: &Node, inputs: &[&Shape]) -> Option<String> {
        if node.ty.dtype == DType::C64 || inputs.iter().any(|s| s.dtype == DType::C64) {
            return Some("rlx-mlx has no complex (c64) lowering yet".into());
        }
        match &node.op {
            Op::Unary(u) if node.ty.dtype == DType::F64 && crate::emit::f32_precise_only(u.kind) => {
                Some(format!("MLX evaluates f64 {} in f32 precision (unsupported by design)", u.kind.name()))
            }
            Op::MatMul(_) => Some("MLX's matmul takes floating-point operands only (unsupported by design)".into()),
            Op::Dequantize(_) => Some("rlx-mlx has no dequantize lowering yet".into()),
            _ => None,
        }
    }

    fn compile(&self, g: &Graph) -> Result<Box<dyn Executable>> {
        self.compile_stateful(g, &[])
    }

    fn compile_stateful(&self, g: &Graph, updates: &[ParamUpdate]) -> Result<Box<dyn Executable>> {
        let shim = shim().map_err(|why| Error::DeviceUnavailable { device: "mlx".into(), reason: why.into() })?;
        let mode = Mode::from_env()?;
        let shape = |id: rlx_ir::NodeId| g.shape(id).cloned().unwrap_or(Shape::scalar(DType::F32));
        let fixed =
            |s: &Shape| s.fixed_dims().ok_or_else(|| Error::eval("mlx compile", format!("dynamic dims in {s}")));
        let fed = g.inputs().len() + g.params().len();
        let mut prog = Prog { fed, ..Prog::default() };
        let mut vals: Vec<Option<V>> = vec![None; g.len()];
        for (k, (id, _)) in g.inputs().iter().chain(g.params().iter()).enumerate() {
            let s = shape(*id);
            vals[id.index()] = Some(V { id: k, dims: fixed(&s)?, dt: s.dtype });
        }
        for (i, n) in g.nodes().iter().enumerate() {
            if matches!(n.op, Op::Input(_) | Op::Param(_)) {
                continue;
            }
            let ins: Vec<V> =
                n.inputs.iter().map(|x| vals[x.index()].clone()).collect::<Option<_>>().ok_or_else(|| {
                    Error::eval("mlx compile", format!("node %{i} reads a value that was not lowered"))
                })?;
            let in_tys: Vec<&Shape> = n.inputs.iter().map(|x| &g.nodes()[x.index()].ty).collect();
            let entry = EMITTERS.lookup(n, &in_tys).ok_or_else(|| {
                Error::eval(n.op.def().name(), format!("node %{i}: rlx-mlx has no lowering for {}", n.ty))
            })?;
            prog.node = i;
            let v = (entry.build)(&mut prog, n, &ins, &fixed(&n.ty)?).ok_or_else(|| {
                Error::eval(n.op.def().name(), format!("node %{i}: rlx-mlx cannot lower it with these attributes"))
            })?;
            vals[i] = Some(v);
        }
        let outputs: Vec<usize> = g
            .outputs()
            .iter()
            .map(|o| vals[o.index()].as_ref().map(|v| v.id))
            .collect::<Option<_>>()
            .ok_or_else(|| Error::eval("mlx compile", "an output was not lowered"))?;
        let consts = prog
            .consts
            .iter()
            .zip(prog.steps.iter().filter(|s| s.op == "@const"))
            .map(|(bytes, step)| {
                let n = &g.nodes()[step.node];
                shim.upload(n.ty.dtype, &fixed(&n.ty)?, bytes)
            })
            .collect::<Result<Vec<Array>>>()?;
        let params: Vec<Shape> = g.params().iter().map(|(id, _)| shape(*id)).collect();
        Ok(Box::new(MlxExecutable {
            prog,
            consts,
            mode,
            inputs: g.inputs().iter().map(|(id, _)| shape(*id)).collect(),
            param_names: g.params().iter().map(|(_, n)| n.to_string()).collect(),
            slots: params.iter().map(|_| Arc::new(Mutex::new(None))).collect(),
            params,
            outputs,
            out_shapes: g.outputs().iter().map(|o| shape(*o)).collect(),
            updates: updates.to_vec(),
            node_names: g.nodes().iter().map(|n| n.op.def().name()).collect(),
        }))
    }
}

/// A param's array, shared by every executable bound to it: a state update replaces the array
/// in the slot, so all of them see the new value.
type Slot = Arc<Mutex<Option<Array>>>;
type Shared = Vec<(Weak<ParamBuffer>, Slot, Shape)>;
static SHARED: Mutex<Shared> = Mutex::new(Vec::new());

fn shared() -> MutexGuard<'static, Shared> {
    let mut s = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    s.retain(|(w, _, _)| w.strong_count() > 0);
    s
}

fn lock(slot: &Slot) -> MutexGuard<'_, Option<Array>> {
    slot.lock().unwrap_or_else(|e| e.into_inner())
}

struct MlxExecutable {
    prog: Prog,
    consts: Vec<Array>,
    mode: Mode,
    inputs: Vec<Shape>,
    params: Vec<Shape>,
    param_names: Vec<String>,
    slots: Vec<Slot>,
    outputs: Vec<usize>,
    out_shapes: Vec<Shape>,
    updates: Vec<ParamUpdate>,
    node_names: Vec<&'static str>,
}

fn dims(s: &Shape) -> Vec<usize> {
    s.fixed_dims().unwrap_or_default()
}

impl Executable for MlxExecutable {
    fn set_param(&mut self, index: usize, bytes: &[u8]) -> Result<()> {
        let s = self.params.get(index).ok_or_else(|| Error::eval("set_param", format!("no param #{index}")))?;
        let a = shim().map_err(|e| Error::eval("mlx", e))?.upload(s.dtype, &dims(s), bytes)?;
        *lock(&self.slots[index]) = Some(a);
        Ok(())
    }

    fn get_param(&self, index: usize) -> Result<Vec<u8>> {
        let not_set = || Error::ParamNotSet {
            name: self.param_names.get(index).cloned().unwrap_or_default(),
            shape: self.params.get(index).cloned().unwrap_or(Shape::scalar(DType::F32)),
        };
        let slot = self.slots.get(index).ok_or_else(not_set)?;
        let g = lock(slot);
        let a = g.as_ref().ok_or_else(not_set)?;
        let mut v = vec![0u8; self.params[index].size_bytes().unwrap_or(0)];
        a.download(&mut v)?;
        Ok(v)
    }

    fn backend_name(&self) -> &'static str {
        "mlx"
    }

    fn share_param(&self, index: usize) -> Result<ParamShare> {
        let slot = self.slots.get(index).ok_or_else(|| Error::eval("share_param", format!("no param #{index}")))?;
        let handle = Arc::new(ParamBuffer::zeroed(0));
        shared().push((Arc::downgrade(&handle), slot.clone(), self.params[index].clone()));
        Ok(ParamShare { buffer: handle, group: None })
    }

    fn bind_param(&mut self, index: usize, share: ParamShare) -> Result<()> {
        let want =
            self.params.get(index).ok_or_else(|| Error::eval("bind_param", format!("no param #{index}")))?.clone();
        let key = Arc::as_ptr(&share.buffer);
        let found =
            shared().iter().find(|(w, _, _)| std::ptr::eq(w.as_ptr(), key)).map(|(_, s, t)| (s.clone(), t.clone()));
        if let Some((slot, shape)) = found {
            if shape != want {
                return Err(Error::eval("bind_param", format!("param #{index} is {want}, the shared array {shape}")));
            }
            self.slots[index] = slot;
            return Ok(());
        }
        if share.buffer.is_writable() {
            let why = format!(
                "param #{index}: a writable host buffer cannot back an MLX param; share between MLX executables or use set_param"
            );
            return Err(Error::Unsupported { backend: "mlx".into(), missing: why, report: String::new() });
        }
        self.set_param(index, &share.buffer.to_vec())
    }

    fn run(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<()> {
        let shim = shim().map_err(|e| Error::eval("mlx", e))?;
        let fed = self.prog.fed;
        let mut vals: Vec<Option<Array>> = Vec::with_capacity(fed + self.prog.steps.len());
        for (s, b) in self.inputs.iter().zip(inputs) {
            vals.push(Some(shim.upload(s.dtype, &dims(s), b)?));
        }
        for (i, slot) in self.slots.iter().enumerate() {
            let g = lock(slot);
            let a = g.as_ref().ok_or_else(|| Error::ParamNotSet {
                name: self.param_names[i].clone(),
                shape: self.params[i].clone(),
            })?;
            vals.push(Some(shim.op("identity", &[a], &[], &[], DType::F32)?));
        }
        let mut k = 0;
        for step in &self.prog.steps {
            let out = if step.op == "@const" {
                let c = &self.consts[k];
                k += 1;
                shim.op("identity", &[c], &[], &[], step.dt)?
            } else {
                let ins: Vec<&Array> =
                    step.ins.iter().map(|&i| vals[i].as_ref().expect("computed before use")).collect();
                shim.op(step.op, &ins, &step.ints, &step.floats, step.dt).map_err(|e| self.name(step.node, e))?
            };
            if self.mode == Mode::Eager {
                shim.eval(&[&out]).map_err(|e| self.name(step.node, e))?;
            }
            vals.push(Some(out));
        }
        let get = |i: usize| vals[i].as_ref().expect("computed");
        let mut all: Vec<&Array> = self.outputs.iter().map(|&o| get(o)).collect();
        all.extend(self.prog.checks.iter().map(|(c, _)| get(*c)));
        shim.eval(&all)?;
        for (c, msg) in &self.prog.checks {
            let mut flag = [0u8];
            get(*c).download(&mut flag)?;
            if flag[0] != 0 {
                return Err(Error::eval("mlx run", msg.clone()));
            }
        }
        let mut next = 0;
        for (o, (&v, s)) in self.outputs.iter().zip(&self.out_shapes).enumerate() {
            if self.updates.iter().any(|u| u.output == o) {
                continue;
            }
            let dst = outputs.get_mut(next).ok_or_else(|| Error::eval("mlx run", "too few output buffers"))?;
            let want = s.size_bytes().unwrap_or(0);
            if dst.len() != want {
                return Err(Error::eval("mlx run", format!("output {o} ({s}) needs {want} bytes, got {}", dst.len())));
            }
            get(v).download(dst)?;
            next += 1;
        }
        for u in &self.updates {
            let a = shim.op("identity", &[get(self.outputs[u.output])], &[], &[], DType::F32)?;
            *lock(&self.slots[u.param]) = Some(a);
        }
        Ok(())
    }
}

impl MlxExecutable {
    /// An error of a step, naming its node.
    fn name(&self, node: usize, e: Error) -> Error {
        Error::eval(self.node_names.get(node).copied().unwrap_or("?"), format!("node %{node} on MLX: {e}"))
    }
}
