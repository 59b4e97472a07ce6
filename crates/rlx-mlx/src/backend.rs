//! `MlxBackend`: the `rlx_driver::Backend` over the shim.

use crate::emit::EMITTERS;
use crate::program::{Prog, V};
use crate::shim::{Array, Compiled, RawArray, shim};
use rlx_driver::{
    Backend, Capabilities, CompileRequest, DeviceBind, DeviceSlot, Executable, Execution, ExecutionMode as Mode,
    ParamShare, ParamUpdate, bind_device_share, lock_slot, share_device,
};
use rlx_ir::{DType, Error, Node, Op, Result, Shape};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

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
        // Leaves (constants, full, arange) take any attributes of a listed dtype; asking their
        // emitter would copy a constant's bytes on every legalization round.
        if node.inputs.is_empty() {
            return true;
        }
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
            Op::Dequantize(d) => Some(format!("rlx-mlx dequantizes Q8_0, Q4_0, Q4_K, Q5_K and Q6_K, not {}", d.scheme)),
            _ => None,
        }
    }

    fn compile(&self, req: &CompileRequest<'_>) -> Result<Box<dyn Executable>> {
        let (g, updates) = (req.graph, req.updates);
        let shim = shim().map_err(|why| Error::DeviceUnavailable { device: "mlx".into(), reason: why.into() })?;
        // When a run evaluates: once at the end (`Lazy`, the default), after every op (`Eager`,
        // so a failure names its node), or as one `mx::compile`d function (`Compiled`).
        let mode = req.options.mode.or(rlx_driver::config().mlx.mode).unwrap_or(Mode::Lazy);
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
            .map(|(bytes, dims, dt)| shim.upload(*dt, dims, bytes))
            .collect::<Result<Vec<Array>>>()?;
        let params: Vec<Shape> = g.params().iter().map(|(id, _)| shape(*id)).collect();
        let wanted: Vec<usize> = outputs.iter().copied().chain(prog.checks.iter().map(|(c, _)| *c)).collect();
        let trace = Box::new(Trace {
            prog,
            consts,
            wanted,
            node_names: g.nodes().iter().map(|n| n.op.def().name()).collect(),
            failure: Mutex::new(None),
        });
        let compiled = if mode == Mode::Compiled {
            let user = &*trace as *const Trace as *mut c_void;
            // SAFETY: `trace_program` reads `user` as the boxed `Trace`, which the executable
            // keeps alive (and unmoved) for as long as the compiled function (dropped first).
            Some(unsafe { shim.compile(trace_program, user, trace.wanted.len()) }?)
        } else {
            None
        };
        Ok(Box::new(MlxExecutable {
            compiled,
            trace,
            mode,
            inputs: g.inputs().iter().map(|(id, _)| shape(*id)).collect(),
            param_names: g.params().iter().map(|(_, n)| n.to_string()).collect(),
            slots: params.iter().map(|_| Arc::new(Mutex::new(None))).collect(),
            params,
            out_shapes: g.outputs().iter().map(|o| shape(*o)).collect(),
            updates: updates.to_vec(),
        }))
    }
}

type Slot = DeviceSlot<Array>;

fn lock(slot: &Slot) -> MutexGuard<'_, Option<Array>> {
    lock_slot(slot)
}

/// What a run replays: the program, its constants, and the values it returns (outputs, then
/// check flags). Boxed so a compiled function can point at it.
struct Trace {
    prog: Prog,
    consts: Vec<Array>,
    wanted: Vec<usize>,
    node_names: Vec<&'static str>,
    /// The error of a failed trace (MLX only learns that the callback failed).
    failure: Mutex<Option<Error>>,
}

impl Trace {
    /// An error of a step, naming its node.
    fn name(&self, node: usize, e: Error) -> Error {
        Error::eval(self.node_names.get(node).copied().unwrap_or("?"), format!("node %{node} on MLX: {e}"))
    }

    /// Replays the steps over the fed arrays (inputs, then params); returns every value.
    fn replay(&self, fed: Vec<Array>, eager: bool) -> Result<Vec<Array>> {
        let shim = shim().map_err(|e| Error::eval("mlx", e))?;
        let mut vals = fed;
        for step in &self.prog.steps {
            let out = if step.op == "@const" {
                // The step names its constant by index.
                let c = &self.consts[step.ints[0] as usize];
                shim.op("identity", &[c], &[], &[], step.dt)?
            } else {
                let ins: Vec<&Array> = step.ins.iter().map(|&i| &vals[i]).collect();
                shim.op(step.op, &ins, &step.ints, &step.floats, step.dt).map_err(|e| self.name(step.node, e))?
            };
            if eager {
                shim.eval(&[&out]).map_err(|e| self.name(step.node, e))?;
            }
            vals.push(out);
        }
        Ok(vals)
    }
}

/// MLX's trace callback of a compiled program: `user` is the executable's `Trace`.
unsafe extern "C" fn trace_program(
    user: *mut c_void,
    ins: *const *mut RawArray,
    n_in: usize,
    outs: *mut *mut RawArray,
    n_out: usize,
) -> i32 {
    // SAFETY: `user` is the boxed Trace the executable keeps alive (see `compile_stateful`).
    let t = unsafe { &*(user as *const Trace) };
    let run = || -> Result<()> {
        let shim = shim().map_err(|e| Error::eval("mlx", e))?;
        // SAFETY: `ins` holds `n_in` live handles lent for this call.
        let fed = (0..n_in).map(|i| unsafe { Array::from_borrowed(shim, *ins.add(i)) }).collect::<Result<Vec<_>>>()?;
        let vals = t.replay(fed, false)?;
        for (k, &w) in t.wanted.iter().enumerate().take(n_out) {
            let h = shim.op("identity", &[&vals[w]], &[], &[], DType::F32)?.into_raw();
            // SAFETY: `outs` has room for `n_out` handles, which the shim takes over.
            unsafe { *outs.add(k) = h };
        }
        Ok(())
    };
    // No panic may unwind into C++.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            *t.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            1
        }
        Err(_) => 1,
    }
}

struct MlxExecutable {
    /// Dropped before `trace`, which it points at.
    compiled: Option<Compiled>,
    trace: Box<Trace>,
    mode: Mode,
    inputs: Vec<Shape>,
    params: Vec<Shape>,
    param_names: Vec<String>,
    slots: Vec<Slot>,
    out_shapes: Vec<Shape>,
    updates: Vec<ParamUpdate>,
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
        Ok(share_device(slot, &self.params[index]))
    }

    /// Binds another MLX executable's slot (no copy), or uploads read-only host bytes once
    /// (`rlx_driver::bind_device_share`).
    fn bind_param(&mut self, index: usize, share: ParamShare) -> Result<()> {
        let want =
            self.params.get(index).ok_or_else(|| Error::eval("bind_param", format!("no param #{index}")))?.clone();
        match bind_device_share::<Slot>(&share, index, &want, "mlx")? {
            DeviceBind::Slot(slot) => {
                self.slots[index] = slot;
                Ok(())
            }
            DeviceBind::Upload(bytes) => self.set_param(index, &bytes),
        }
    }

    fn run(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<()> {
        let shim = shim().map_err(|e| Error::eval("mlx", e))?;
        let mut fed: Vec<Array> = Vec::with_capacity(self.trace.prog.fed);
        for (s, b) in self.inputs.iter().zip(inputs) {
            fed.push(shim.upload(s.dtype, &dims(s), b)?);
        }
        for (i, slot) in self.slots.iter().enumerate() {
            let g = lock(slot);
            let a = g.as_ref().ok_or_else(|| Error::ParamNotSet {
                name: self.param_names[i].clone(),
                shape: self.params[i].clone(),
            })?;
            fed.push(shim.op("identity", &[a], &[], &[], DType::F32)?);
        }
        // The returned values: outputs, then check flags.
        let got: Vec<Array> = match &self.compiled {
            Some(c) => {
                let refs: Vec<&Array> = fed.iter().collect();
                c.call(&refs)
                    .map_err(|e| self.trace.failure.lock().unwrap_or_else(|p| p.into_inner()).take().unwrap_or(e))?
            }
            None => {
                let vals = self.trace.replay(fed, self.mode == Mode::Eager)?;
                // Second handles (no copy), so a value wanted twice (an output that is also a
                // state update) needs no bookkeeping.
                self.trace
                    .wanted
                    .iter()
                    .map(|&w| shim.op("identity", &[&vals[w]], &[], &[], DType::F32))
                    .collect::<Result<Vec<Array>>>()?
            }
        };
        let refs: Vec<&Array> = got.iter().collect();
        shim.eval(&refs)?;
        let n_out = self.out_shapes.len();
        for (k, (_, msg)) in self.trace.prog.checks.iter().enumerate() {
            let mut flag = [0u8];
            got[n_out + k].download(&mut flag)?;
            if flag[0] != 0 {
                return Err(Error::eval("mlx run", msg.clone()));
            }
        }
        let mut next = 0;
        for (o, s) in self.out_shapes.iter().enumerate() {
            if self.updates.iter().any(|u| u.output == o) {
                continue;
            }
            let dst = outputs.get_mut(next).ok_or_else(|| Error::eval("mlx run", "too few output buffers"))?;
            let want = s.size_bytes().unwrap_or(0);
            if dst.len() != want {
                return Err(Error::eval("mlx run", format!("output {o} ({s}) needs {want} bytes, got {}", dst.len())));
            }
            got[o].download(dst)?;
            next += 1;
        }
        for u in &self.updates {
            let a = shim.op("identity", &[&got[u.output]], &[], &[], DType::F32)?;
            *lock(&self.slots[u.param]) = Some(a);
        }
        Ok(())
    }
}
