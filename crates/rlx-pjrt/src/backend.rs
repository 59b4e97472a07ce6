//! `PjrtBackend`: the `rlx_driver::Backend` over a PJRT client. The emitter table is its kernel
//! table; compile lowers the whole legalized graph to one StableHLO module.

use crate::error::PjrtError;
use crate::lower::{self, Ctx, EMITTERS, V};
use crate::plugin::{Buffer, Client, LoadedExecutable, default_client};
use rlx_driver::{
    Backend, Capabilities, CompileRequest, DeviceBind, DeviceSlot, Executable, Execution, ParamShare, ParamUpdate,
    bind_device_share, lock_slot, share_device,
};
use rlx_ir::{DType, Error, Node, Result, Shape};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// Per-run timings of every PJRT executable in the process (the last `KEEP` runs), for
/// `profile_report`: what a run spends copying in, in the plugin's execute, and copying out.
static TIMINGS: Mutex<Vec<[f64; 3]>> = Mutex::new(Vec::new());
const KEEP: usize = 4096;

fn record(t: [f64; 3]) {
    let mut v = TIMINGS.lock().unwrap_or_else(|e| e.into_inner());
    if v.len() == KEEP {
        v.remove(0);
    }
    v.push(t);
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { f64::NAN } else { v[v.len() / 2] }
}

/// XLA through a PJRT plugin (`Device::Tpu`).
pub struct PjrtBackend {
    client: std::result::Result<Arc<Client>, PjrtError>,
}

impl Default for PjrtBackend {
    fn default() -> Self {
        PjrtBackend { client: default_client() }
    }
}

impl PjrtBackend {
    /// The backend on the process-wide client of the default plugin (`RLX_PJRT_PLUGIN`, else
    /// libtpu). A missing plugin is reported by `compile`, and by `probe` before it.
    pub fn new() -> Self {
        Self::default()
    }

    /// The client, or why there is none.
    pub fn client(&self) -> Result<&Arc<Client>> {
        self.client.as_ref().map_err(|e| e.clone().into())
    }
}

/// Why `Device::Tpu` is unavailable (no plugin, a plugin too old), or None when it works.
pub fn probe() -> Option<&'static str> {
    static WHY: OnceLock<Option<&'static str>> = OnceLock::new();
    *WHY.get_or_init(|| default_client().err().map(|e| &*Box::leak(e.to_string().into_boxed_str())))
}

/// The PJRT buffer type of a dtype.
fn buffer_type(dt: DType) -> i32 {
    use crate::ffi::buffer_type::*;
    match dt {
        DType::F32 => F32,
        DType::F64 => F64,
        DType::F16 => F16,
        DType::BF16 => BF16,
        DType::I8 => S8,
        DType::I16 => S16,
        DType::I32 => S32,
        DType::I64 => S64,
        DType::U8 => U8,
        DType::U32 => U32,
        DType::Bool => PRED,
        DType::C64 => C64,
    }
}

impl Backend for PjrtBackend {
    fn name(&self) -> &'static str {
        "pjrt"
    }

    fn capabilities(&self) -> Capabilities {
        // XLA fuses and lays out the whole graph itself: hand it the graph as built.
        Capabilities { execution: Execution::WholeGraph, in_place_state: true, ..Capabilities::default() }
    }

    fn profile_report(&self) -> String {
        let v = TIMINGS.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if v.is_empty() {
            return String::new();
        }
        let col = |i: usize| median(v.iter().map(|t| t[i]).collect());
        format!(
            "pjrt: {} runs, median ms: upload {:.3}, execute {:.3}, download {:.3}\n",
            v.len(),
            col(0),
            col(1),
            col(2)
        )
    }

    fn reset_profile(&self) {
        TIMINGS.lock().unwrap_or_else(|e| e.into_inner()).clear();
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
            vals.push(V { name: format!("%in{i}"), dims: d, dt: s.dtype });
        }
        // Emitting into a scratch function is how an emitter says whether it takes these
        // attributes: the text is cheap and the decision stays in one place.
        (entry.build)(&mut Ctx::default(), node, &vals, &out).is_some()
    }

    fn missing_reason(&self, node: &Node, inputs: &[&Shape]) -> Option<String> {
        let complex = node.ty.dtype == DType::C64 || inputs.iter().any(|s| s.dtype == DType::C64);
        complex.then(|| "rlx-pjrt has no complex (c64) emitters yet".into())
    }

    fn compile(&self, req: &CompileRequest<'_>) -> Result<Box<dyn Executable>> {
        let (g, updates) = (req.graph, req.updates);
        let client = self.client()?.clone();
        let aliases: Vec<(usize, usize)> = updates.iter().map(|u| (u.param, u.output)).collect();
        let lowered = lower::lower_aliased(g, &aliases)?;
        if let Some(dir) = &req.options.dump {
            let path = dir.join(format!("{}.stablehlo.mlir", g.name()));
            std::fs::create_dir_all(dir)
                .and_then(|_| std::fs::write(&path, &lowered.text))
                .map_err(|e| Error::eval("dump", format!("cannot write {}: {e}", path.display())))?;
        }
        let cache_dir = req.options.cache_dir.as_deref().filter(|_| req.options.cache);
        let exe = match cache_dir.and_then(|d| crate::cache::load(d, &client, &lowered.text)) {
            Some(exe) => exe,
            None => {
                let exe = client.compile(g.name(), &lowered.text)?;
                if let Some(d) = cache_dir {
                    crate::cache::store(d, &client, &lowered.text, &exe);
                }
                exe
            }
        };
        let n_out = lowered.outputs.len() + lowered.checks.len();
        if exe.num_outputs != n_out {
            return Err(Error::eval(
                "pjrt compile",
                format!("the executable has {} outputs, the module {n_out}", exe.num_outputs),
            ));
        }
        let shape = |id: rlx_ir::NodeId| g.shape(id).cloned().unwrap_or(Shape::scalar(DType::F32));
        let params: Vec<Shape> = g.params().iter().map(|(id, _)| shape(*id)).collect();
        Ok(Box::new(PjrtExecutable {
            client,
            exe,
            inputs: g.inputs().iter().map(|(id, _)| shape(*id)).collect(),
            param_names: g.params().iter().map(|(_, n)| n.to_string()).collect(),
            param_bufs: params.iter().map(|_| Arc::new(Mutex::new(None))).collect(),
            params,
            outputs: lowered.outputs,
            checks: lowered.checks.into_iter().map(|c| c.message).collect(),
            updates: updates.to_vec(),
        }))
    }
}

type Slot = DeviceSlot<Buffer>;

fn lock(slot: &Slot) -> MutexGuard<'_, Option<Buffer>> {
    lock_slot(slot)
}

/// A compiled graph: the loaded executable and the params' device buffers.
struct PjrtExecutable {
    client: Arc<Client>,
    exe: LoadedExecutable,
    inputs: Vec<Shape>,
    params: Vec<Shape>,
    param_names: Vec<String>,
    param_bufs: Vec<Slot>,
    outputs: Vec<Shape>,
    checks: Vec<String>,
    updates: Vec<ParamUpdate>,
}

fn dims_i64(s: &Shape) -> Vec<i64> {
    s.fixed_dims().unwrap_or_default().into_iter().map(|d| d as i64).collect()
}

impl PjrtExecutable {
    fn upload(&self, s: &Shape, bytes: &[u8]) -> Result<Buffer> {
        Ok(self.client.upload(bytes, buffer_type(s.dtype), &dims_i64(s))?)
    }
}

impl Executable for PjrtExecutable {
    fn set_param(&mut self, index: usize, bytes: &[u8]) -> Result<()> {
        let s = self.params.get(index).ok_or_else(|| Error::eval("set_param", format!("no param #{index}")))?.clone();
        let b = self.upload(&s, bytes)?;
        *lock(&self.param_bufs[index]) = Some(b);
        Ok(())
    }

    /// The param's device buffer slot, for `bind_param` of another PJRT executable (no copy).
    fn share_param(&self, index: usize) -> Result<ParamShare> {
        let slot =
            self.param_bufs.get(index).ok_or_else(|| Error::eval("share_param", format!("no param #{index}")))?;
        Ok(share_device(slot, &self.params[index]))
    }

    /// Binds another PJRT executable's slot (no copy), or uploads read-only host bytes once
    /// (`rlx_driver::bind_device_share`).
    fn bind_param(&mut self, index: usize, share: ParamShare) -> Result<()> {
        let want =
            self.params.get(index).ok_or_else(|| Error::eval("bind_param", format!("no param #{index}")))?.clone();
        match bind_device_share::<Slot>(&share, index, &want, "pjrt")? {
            DeviceBind::Slot(slot) => {
                self.param_bufs[index] = slot;
                Ok(())
            }
            DeviceBind::Upload(bytes) => self.set_param(index, &bytes),
        }
    }

    fn run(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<()> {
        let t0 = Instant::now();
        let mut uploaded = Vec::with_capacity(inputs.len());
        for (s, b) in self.inputs.iter().zip(inputs) {
            uploaded.push(self.upload(s, b)?);
        }
        let guards: Vec<MutexGuard<'_, Option<Buffer>>> = self.param_bufs.iter().map(lock).collect();
        let mut args: Vec<&Buffer> = uploaded.iter().collect();
        for (i, p) in guards.iter().enumerate() {
            let p = p.as_ref().ok_or_else(|| Error::ParamNotSet {
                name: self.param_names[i].clone(),
                shape: self.params[i].clone(),
            })?;
            args.push(p);
        }
        let t1 = Instant::now();
        let mut outs: Vec<Option<Buffer>> = self.exe.execute(&args)?.into_iter().map(Some).collect();
        drop(args);
        drop(guards);
        let t2 = Instant::now();
        for (k, msg) in self.checks.iter().enumerate() {
            let flag = outs[self.outputs.len() + k].as_ref().map(|b| b.to_vec(1)).transpose()?;
            if flag.is_some_and(|f| f[0] != 0) {
                return Err(Error::eval("pjrt run", msg.clone()));
            }
        }
        let mut next = 0;
        for (o, shape) in self.outputs.iter().enumerate() {
            if self.updates.iter().any(|u| u.output == o) {
                continue;
            }
            let dst = outputs.get_mut(next).ok_or_else(|| Error::eval("pjrt run", "too few output buffers"))?;
            let want = shape.size_bytes().unwrap_or(0);
            if dst.len() != want {
                return Err(Error::eval(
                    "pjrt run",
                    format!("output {o} ({shape}) needs {want} bytes, got {}", dst.len()),
                ));
            }
            if let Some(b) = &outs[o] {
                b.download(dst)?;
            }
            next += 1;
        }
        // State stays on the device: the update's output buffer becomes the param.
        for u in &self.updates {
            *lock(&self.param_bufs[u.param]) = outs[u.output].take();
        }
        let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
        record([ms(t0, t1), ms(t1, t2), ms(t2, Instant::now())]);
        Ok(())
    }

    fn get_param(&self, index: usize) -> Result<Vec<u8>> {
        let not_set = || Error::ParamNotSet {
            name: self.param_names.get(index).cloned().unwrap_or_default(),
            shape: self.params.get(index).cloned().unwrap_or(Shape::scalar(DType::F32)),
        };
        let slot = self.param_bufs.get(index).ok_or_else(not_set)?;
        let b = lock(slot);
        let b = b.as_ref().ok_or_else(not_set)?;
        Ok(b.to_vec(self.params[index].size_bytes().unwrap_or(0))?)
    }

    fn backend_name(&self) -> &'static str {
        "pjrt"
    }
}
