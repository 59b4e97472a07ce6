//! The wgpu executable: one device buffer per node, kept on the device between runs; params
//! and constants uploaded once; each run is one submission that writes the inputs, runs every
//! dispatch and copies the outputs (and the status words) into one readback buffer.
//! Bools are stored as one u32 per element on the device, bf16 as the high half of a u32 (an
//! f32 with the bf16's value); both are converted at the boundary.

use crate::gpu::Gpu;
use crate::kernels::{Bind, Ctx, Kernel, Plan};
use rlx_driver::KernelTable;
use rlx_driver::{ParamBuffer, ParamShare};
use rlx_ir::{DType, Error, Graph, Node, Op, Result, Shape};
use std::sync::{Arc, Mutex, Weak};
use wgpu::util::DeviceExt;

/// Status words: [first failing node (u32::MAX when none), offending index low, high, unused].
const STATUS_BYTES: u64 = 16;

/// A buffer a dispatch binds: a node's, a constant made at compile time, or the status words.
enum Src {
    Node(usize),
    Aux(wgpu::Buffer),
    Status,
}

enum Step {
    Dispatch { pipeline: Arc<wgpu::ComputePipeline>, bind: wgpu::BindGroup, groups: (u32, u32), srcs: Vec<Src> },
    Copy { src: usize, dst: usize, bytes: u64 },
}

/// The bind group of `srcs` (bindings 0.. in order) for `pipeline`.
fn bind_group(
    dev: &wgpu::Device,
    pipeline: &wgpu::ComputePipeline,
    srcs: &[Src],
    bufs: &[wgpu::Buffer],
    status: &wgpu::Buffer,
    label: &str,
) -> wgpu::BindGroup {
    let entries: Vec<wgpu::BindGroupEntry> = srcs
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let buf = match s {
                Src::Node(j) => &bufs[*j],
                Src::Aux(b) => b,
                Src::Status => status,
            };
            wgpu::BindGroupEntry { binding: k as u32, resource: buf.as_entire_binding() }
        })
        .collect();
    dev.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(label),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    })
}

/// A graph compiled for wgpu.
pub struct WgpuExecutable {
    gpu: Arc<Gpu>,
    bufs: Vec<wgpu::Buffer>,
    bytes: Vec<usize>,
    wide: Vec<Wide>,
    steps: Vec<Step>,
    inputs: Vec<usize>,
    params: Vec<usize>,
    outputs: Vec<usize>,
    names: Vec<&'static str>,
    status: wgpu::Buffer,
    uses_status: bool,
    readback: wgpu::Buffer,
    read_offsets: Vec<u64>,
    scratch: Vec<u8>,
    /// State updates `(value node, param node, staging buffer if the value is an updated param)`.
    updates: Vec<(usize, usize, Option<wgpu::Buffer>)>,
}

/// How a tensor's host bytes sit in device words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wide {
    /// The same bytes (padded to a whole word).
    Same,
    /// One u32 (0 or 1) per bool byte.
    Bool,
    /// One u32 per bf16: its bits in the high half, so the word reads as an f32 of equal value.
    Bf16,
}

impl Wide {
    fn of(dt: DType) -> Wide {
        match dt {
            DType::Bool => Wide::Bool,
            DType::BF16 => Wide::Bf16,
            _ => Wide::Same,
        }
    }

    /// Appends the device words of host bytes `data` to `out`.
    fn widen(self, data: &[u8], out: &mut Vec<u8>) {
        match self {
            Wide::Same => out.extend_from_slice(data),
            Wide::Bool => out.extend(data.iter().flat_map(|&b| [u8::from(b != 0), 0, 0, 0])),
            Wide::Bf16 => out.extend(data.chunks_exact(2).flat_map(|h| [0, 0, h[0], h[1]])),
        }
    }

    /// Writes the host bytes of device words `dev` into `dst` (its length says how many).
    fn narrow(self, dev: &[u8], dst: &mut [u8]) {
        match self {
            Wide::Same => dst.copy_from_slice(&dev[..dst.len()]),
            Wide::Bool => dst.iter_mut().enumerate().for_each(|(e, d)| *d = dev[4 * e]),
            Wide::Bf16 => {
                dst.chunks_exact_mut(2).enumerate().for_each(|(e, d)| d.copy_from_slice(&dev[4 * e + 2..4 * e + 4]))
            }
        }
    }
}

fn gpu_err(op: &str, e: impl std::fmt::Display) -> Error {
    Error::eval(op, format!("wgpu: {e}"))
}

impl WgpuExecutable {
    /// Builds buffers, pipelines and bind groups for a legalized graph. `max_binding` lowers
    /// the adapter's storage binding limit (a node over it is an `Unsupported` error).
    pub fn new(gpu: Arc<Gpu>, g: &Graph, table: &KernelTable<Kernel>, max_binding: Option<u64>) -> Result<Self> {
        let dev = &gpu.device;
        let scope = dev.push_error_scope(wgpu::ErrorFilter::Validation);
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let mut bufs = vec![];
        let mut bytes = vec![];
        let mut wide = vec![];
        let limit = crate::caps::Caps::of(&gpu).max_binding.min(max_binding.unwrap_or(u64::MAX));
        for (i, n) in g.nodes().iter().enumerate() {
            let b = n.ty.size_bytes().ok_or_else(|| Error::UnboundDim {
                symbol: n.ty.symbols().next().unwrap_or("?").into(),
                context: format!("node %{i} ({}) at wgpu compile", n.op.def().name()),
            })?;
            let size = crate::caps::device_bytes(n.ty.dtype, b);
            if size > limit {
                let missing = format!(
                    "`{}` (node %{i}) {} needs {size} bytes on the device, over the adapter's storage \
                     binding limit of {limit} bytes",
                    n.op.def().name(),
                    n.ty
                );
                return Err(Error::Unsupported { backend: "wgpu".into(), missing, report: String::new() });
            }
            bufs.push(dev.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size,
                usage,
                mapped_at_creation: false,
            }));
            bytes.push(b);
            wide.push(Wide::of(n.ty.dtype));
        }
        let status = dev.create_buffer(&wgpu::BufferDescriptor {
            label: Some("rlx status"),
            size: STATUS_BYTES,
            usage,
            mapped_at_creation: false,
        });
        let (mut steps, mut inputs, mut params, mut uses_status) = (vec![], vec![], vec![], false);
        let mut names = vec![];
        for (i, n) in g.nodes().iter().enumerate() {
            match &n.op {
                Op::Input(_) => inputs.push(i),
                Op::Param(_) => params.push(i),
                op if n.inputs.is_empty() => {
                    // Constants, full, arange: evaluated once here and uploaded.
                    let v = op.def().reference(&[], &n.ty)?.to_bytes();
                    let mut w = vec![];
                    wide[i].widen(&v, &mut w);
                    w.resize(bufs[i].size() as usize, 0);
                    let v = w;
                    gpu.queue.write_buffer(&bufs[i], 0, &v);
                }
                op => {
                    let ins: Vec<&Shape> = n.inputs.iter().map(|x| &g.nodes()[x.index()].ty).collect();
                    let ctx = Ctx { op, ins: &ins, out: &n.ty, node: i as u32 };
                    let node = Node { op: op.clone(), inputs: vec![], ty: n.ty.clone() };
                    let k = table
                        .lookup(&node, &ins)
                        .filter(|e| (e.build.accepts)(&ctx))
                        .ok_or_else(|| crate::kernels::unsupported(&ctx, "no kernel in the wgpu table"))?;
                    match (k.build.build)(&ctx)? {
                        Plan::Copy => {
                            let src = n.inputs[0].index();
                            steps.push(Step::Copy { src, dst: i, bytes: bufs[i].size() });
                        }
                        Plan::Dispatches(ds) => {
                            for d in ds {
                                // Nothing to run (an output with a zero-size dim): the shader
                                // text may hold divisions by those zero sizes, which naga rejects.
                                if d.groups == 0 {
                                    continue;
                                }
                                let pipeline = gpu.pipeline(op.def().name(), &d.wgsl)?;
                                let srcs: Vec<Src> = d
                                    .binds
                                    .iter()
                                    .map(|b| match b {
                                        Bind::Input(j) => Src::Node(n.inputs[*j].index()),
                                        Bind::Output => Src::Node(i),
                                        Bind::Aux(words) => {
                                            Src::Aux(dev.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                                                label: Some("rlx index map"),
                                                contents: bytemuck::cast_slice(words),
                                                usage: wgpu::BufferUsages::STORAGE,
                                            }))
                                        }
                                        Bind::Status => Src::Status,
                                    })
                                    .collect();
                                uses_status |= d.binds.iter().any(|b| matches!(b, Bind::Status));
                                let bind = bind_group(dev, &pipeline, &srcs, &bufs, &status, op.def().name());
                                let mx = gpu.max_groups();
                                let groups = if d.groups <= mx { (d.groups, 1) } else { (mx, d.groups.div_ceil(mx)) };
                                if groups.1 > mx {
                                    return Err(Error::eval(
                                        op.def().name(),
                                        format!("node %{i}: too many workgroups"),
                                    ));
                                }
                                steps.push(Step::Dispatch { pipeline, bind, groups, srcs });
                                names.push(op.def().name());
                            }
                        }
                    }
                }
            }
        }
        let outputs: Vec<usize> = g.outputs().iter().map(|o| o.index()).collect();
        let mut read_offsets = vec![];
        let mut top = 0u64;
        for &o in &outputs {
            read_offsets.push(top);
            top += bufs[o].size();
        }
        let readback = dev.create_buffer(&wgpu::BufferDescriptor {
            label: Some("rlx readback"),
            size: top + STATUS_BYTES,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(gpu_err("compile", e));
        }
        let read_offsets_done = read_offsets;
        Ok(WgpuExecutable {
            gpu,
            bufs,
            bytes,
            wide,
            steps,
            inputs,
            params,
            outputs,
            names,
            status,
            uses_status,
            readback,
            read_offsets: read_offsets_done,
            scratch: vec![],
            updates: vec![],
        })
    }

    /// Like `new`, for a graph whose trailing outputs are state updates: after each run the GPU
    /// copies each value into its param's buffer (through a staging buffer when the value is
    /// itself an updated param, as in a swap); `run` returns only the other outputs.
    pub fn new_stateful(
        gpu: Arc<Gpu>,
        g: &Graph,
        table: &KernelTable<Kernel>,
        updates: &[rlx_driver::ParamUpdate],
        max_binding: Option<u64>,
    ) -> Result<Self> {
        let mut exe = Self::new(gpu, g, table, max_binding)?;
        let params = g.params();
        let mut pairs = vec![];
        for u in updates {
            match (params.get(u.param), g.outputs().get(u.output)) {
                (Some(&(p, _)), Some(&v)) => pairs.push((v.index(), p.index())),
                _ => return Err(Error::eval("wgpu compile", format!("bad param update {u:?}"))),
            }
        }
        let dev = &exe.gpu.device;
        exe.updates = pairs
            .iter()
            .filter(|(v, p)| v != p)
            .map(|&(v, p)| {
                let staged = pairs.iter().any(|&(_, q)| q == v).then(|| {
                    dev.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("rlx update staging"),
                        size: exe.bufs[v].size(),
                        usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    })
                });
                (v, p, staged)
            })
            .collect();
        let keep: Vec<usize> = (0..exe.outputs.len()).filter(|o| !updates.iter().any(|u| u.output == *o)).collect();
        exe.read_offsets = keep.iter().map(|&k| exe.read_offsets[k]).collect();
        exe.outputs = keep.iter().map(|&k| exe.outputs[k]).collect();
        Ok(exe)
    }

    /// Records the state-update copies: staged values first, then direct copies, then staging.
    fn record_updates(&self, enc: &mut wgpu::CommandEncoder) {
        for (v, _, st) in &self.updates {
            if let Some(st) = st {
                enc.copy_buffer_to_buffer(&self.bufs[*v], 0, st, 0, st.size());
            }
        }
        for (v, p, st) in &self.updates {
            if st.is_none() {
                enc.copy_buffer_to_buffer(&self.bufs[*v], 0, &self.bufs[*p], 0, self.bufs[*p].size());
            }
        }
        for (_, p, st) in &self.updates {
            if let Some(st) = st {
                enc.copy_buffer_to_buffer(st, 0, &self.bufs[*p], 0, st.size());
            }
        }
    }

    /// Reads one node's buffer back to the host (bools narrowed to bytes).
    fn read_node(&self, node: usize) -> Result<Vec<u8>> {
        let (dev, queue) = (&self.gpu.device, &self.gpu.queue);
        let size = self.bufs[node].size();
        let rb = dev.create_buffer(&wgpu::BufferDescriptor {
            label: Some("rlx get_param"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("rlx read") });
        enc.copy_buffer_to_buffer(&self.bufs[node], 0, &rb, 0, size);
        queue.submit([enc.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        rb.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        dev.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| gpu_err("get_param", e))?;
        rx.recv().map_err(|e| gpu_err("get_param", e))?.map_err(|e| gpu_err("get_param", e))?;
        let view = rb.get_mapped_range(..).map_err(|e| gpu_err("get_param", e))?;
        let mut out = vec![0; self.bytes[node]];
        self.wide[node].narrow(&view, &mut out);
        drop(view);
        rb.unmap();
        Ok(out)
    }

    fn upload(&mut self, node: usize, data: &[u8], what: &str) -> Result<()> {
        let want = self.bytes[node];
        if data.len() != want {
            return Err(Error::eval(what, format!("needs {want} bytes, got {}", data.len())));
        }
        if self.wide[node] == Wide::Same && data.len().is_multiple_of(4) && !data.is_empty() {
            self.gpu.queue.write_buffer(&self.bufs[node], 0, data);
        } else {
            self.scratch.clear();
            self.wide[node].widen(data, &mut self.scratch);
            self.scratch.resize(self.bufs[node].size() as usize, 0);
            self.gpu.queue.write_buffer(&self.bufs[node], 0, &self.scratch);
        }
        Ok(())
    }

    /// Number of compute dispatches one run records.
    pub fn dispatches(&self) -> usize {
        self.names.len()
    }
}

/// Device buffers handed out by `share_param`, keyed by the handle's address: a `ParamShare`
/// carries host bytes, so a wgpu share is an empty handle that names a buffer here.
type Shared = Vec<(Weak<ParamBuffer>, wgpu::Buffer)>;
static SHARED: Mutex<Shared> = Mutex::new(Vec::new());

fn shared() -> std::sync::MutexGuard<'static, Shared> {
    let mut s = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    s.retain(|(w, _)| w.strong_count() > 0);
    s
}

impl WgpuExecutable {
    /// Points param node `node` at `buf` and rebuilds the bind groups that read it.
    fn rebind(&mut self, node: usize, buf: wgpu::Buffer) {
        self.bufs[node] = buf;
        let (dev, bufs, status) = (&self.gpu.device, &self.bufs, &self.status);
        for step in &mut self.steps {
            if let Step::Dispatch { pipeline, bind, srcs, .. } = step
                && srcs.iter().any(|s| matches!(s, Src::Node(j) if *j == node))
            {
                *bind = bind_group(dev, pipeline, srcs, bufs, status, "rebound param");
            }
        }
    }

    fn param_node(&self, index: usize, what: &str) -> Result<usize> {
        self.params.get(index).copied().ok_or_else(|| Error::eval(what, format!("no param #{index}")))
    }
}

impl rlx_driver::Executable for WgpuExecutable {
    fn backend_name(&self) -> &'static str {
        "wgpu"
    }

    /// The param's device buffer, for `bind_param` of another wgpu executable (no copy; runs
    /// on the one queue never overlap). Other backends refuse the handle (it has no bytes).
    fn share_param(&self, index: usize) -> Result<ParamShare> {
        let node = self.param_node(index, "share_param")?;
        let handle = Arc::new(ParamBuffer::zeroed(0));
        shared().push((Arc::downgrade(&handle), self.bufs[node].clone()));
        Ok(ParamShare { buffer: handle, group: None })
    }

    /// A wgpu share binds the same device buffer; read-only host bytes (a memory-mapped file)
    /// are uploaded once; writable host bytes are refused (the GPU cannot see their writes).
    fn bind_param(&mut self, index: usize, share: ParamShare) -> Result<()> {
        let node = self.param_node(index, "bind_param")?;
        let key = Arc::as_ptr(&share.buffer);
        let found = shared().iter().find(|(w, _)| std::ptr::eq(w.as_ptr(), key)).map(|(_, b)| b.clone());
        if let Some(buf) = found {
            if buf.size() != self.bufs[node].size() {
                let why = format!(
                    "param #{index} has {} device bytes, the shared buffer {}",
                    self.bufs[node].size(),
                    buf.size()
                );
                return Err(Error::eval("bind_param", why));
            }
            self.rebind(node, buf);
            return Ok(());
        }
        if share.buffer.is_writable() {
            let why = format!(
                "param #{index}: a writable host buffer cannot back a wgpu param (the GPU would not see \
                 its writes); share between wgpu executables or use set_param"
            );
            return Err(Error::Unsupported { backend: "wgpu".into(), missing: why, report: String::new() });
        }
        self.upload(node, &share.buffer.to_vec(), &format!("bind_param #{index}"))
    }

    fn set_param(&mut self, index: usize, bytes: &[u8]) -> Result<()> {
        let node = *self.params.get(index).ok_or_else(|| Error::eval("set_param", format!("no param #{index}")))?;
        self.upload(node, bytes, &format!("set_param #{index}"))
    }

    fn get_param(&self, index: usize) -> Result<Vec<u8>> {
        let node = *self.params.get(index).ok_or_else(|| Error::eval("get_param", format!("no param #{index}")))?;
        self.read_node(node)
    }

    fn run(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<()> {
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return Err(Error::eval("run", "wrong number of input or output buffers"));
        }
        for (k, data) in inputs.iter().enumerate() {
            self.upload(self.inputs[k], data, &format!("input #{k}"))?;
        }
        for (k, dst) in outputs.iter().enumerate() {
            let want = self.bytes[self.outputs[k]];
            if dst.len() != want {
                return Err(Error::eval("run", format!("output #{k} needs {want} bytes, got {}", dst.len())));
            }
        }
        let (dev, queue) = (&self.gpu.device, &self.gpu.queue);
        let scope = dev.push_error_scope(wgpu::ErrorFilter::Validation);
        if self.uses_status {
            queue.write_buffer(&self.status, 0, bytemuck::cast_slice(&[u32::MAX, 0, 0, 0]));
        }
        let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("rlx run") });
        let mut i = 0;
        while i < self.steps.len() {
            match &self.steps[i] {
                Step::Copy { src, dst, bytes } => {
                    enc.copy_buffer_to_buffer(&self.bufs[*src], 0, &self.bufs[*dst], 0, *bytes);
                    i += 1;
                }
                Step::Dispatch { .. } => {
                    // Consecutive dispatches share one pass; wgpu orders their buffer accesses.
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                    while let Some(Step::Dispatch { pipeline, bind, groups, .. }) = self.steps.get(i) {
                        pass.set_pipeline(pipeline);
                        pass.set_bind_group(0, bind, &[]);
                        pass.dispatch_workgroups(groups.0, groups.1, 1);
                        i += 1;
                    }
                }
            }
        }
        for (k, &o) in self.outputs.iter().enumerate() {
            enc.copy_buffer_to_buffer(&self.bufs[o], 0, &self.readback, self.read_offsets[k], self.bufs[o].size());
        }
        self.record_updates(&mut enc);
        let status_at = self.readback.size() - STATUS_BYTES;
        enc.copy_buffer_to_buffer(&self.status, 0, &self.readback, status_at, STATUS_BYTES);
        queue.submit([enc.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        self.readback.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        dev.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| gpu_err("run", e))?;
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(gpu_err("run", e));
        }
        rx.recv().map_err(|e| gpu_err("run", e))?.map_err(|e| gpu_err("run", e))?;
        let result = (|| -> Result<()> {
            let view = self.readback.get_mapped_range(..).map_err(|e| gpu_err("run", e))?;
            for (k, dst) in outputs.iter_mut().enumerate() {
                let off = self.read_offsets[k] as usize;
                self.wide[self.outputs[k]].narrow(&view[off..], dst);
            }
            let st: &[u32] = bytemuck::cast_slice(&view[status_at as usize..]);
            if self.uses_status && st[0] != u32::MAX {
                let v = ((st[2] as u64) << 32 | st[1] as u64) as i64;
                return Err(Error::eval(
                    "gather",
                    format!("node %{}: index {v} is out of range (checked on the device)", st[0]),
                ));
            }
            Ok(())
        })();
        self.readback.unmap();
        result
    }
}
