//! rlx-driver: what every backend implements and what the runtime drives.
//!
//! A backend is a kernel table (`KernelTable`): what it supports is derived from the table, and
//! `legalize` decomposes every op the table lacks until the graph is supported, or reports what
//! is still missing in the dispatch report.
#![warn(missing_docs)]

pub mod alloc_count;
pub mod block_quant;
mod caps;
pub mod config;
mod device;
mod fingerprint;
pub mod huge_pages;
mod legalize;
pub mod memory;
mod movement;
mod options;
mod params;
mod table;

pub use caps::{Capabilities, Execution};
pub use config::config;
pub use device::{Device, Probe};
pub use fingerprint::fnv128;
pub use legalize::{DispatchReport, OpDispatch, legalize, legalize_with};
pub use movement::{is_identity_map, movement_index_map};
pub use options::{CompileOptions, DispatchPolicy, ExecutionMode, PrecisionPolicy, Reports};
pub use params::{
    DeviceBind, DeviceSlot, ParamBuffer, ParamShare, RunGroup, bind_device_share, find_device_share, lock_slot,
    share_device,
};
pub use table::{KernelEntry, KernelTable};

use rlx_ir::{Graph, Node, Result, Shape};

/// A backend: decides what it runs natively and compiles legalized graphs.
pub trait Backend: Send + Sync {
    /// Short name for reports and errors (`cpu`, `wgpu`). Never a key for behavior: code
    /// outside the backend asks `capabilities` or the kernel table instead.
    fn name(&self) -> &'static str;

    /// What passes and the runtime need to know beyond the kernel table (head layout, matmul
    /// flags, execution model). Default: `Capabilities::default()`, the conservative answer.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// What, besides its name and capabilities, decides the graphs the pipeline makes for this
    /// backend (the device and its features, the backend's version): part of the compile cache's
    /// key, so that a cached graph is never reused on a device that would legalize it otherwise.
    /// Default: empty.
    fn cache_key(&self) -> String {
        String::new()
    }

    /// The backend's per-kernel timing table since the last `reset_profile`, when it records
    /// one (the CPU backend does under `RLX_PROFILE=1`); empty otherwise.
    fn profile_report(&self) -> String {
        String::new()
    }

    /// Clears the timings `profile_report` shows. Default: nothing to clear.
    fn reset_profile(&self) {}

    /// How many host threads the backend's kernels run on, when it has a host thread pool (the
    /// CPU backend's is fixed per process at first use). Default: None.
    fn threads(&self) -> Option<usize> {
        None
    }

    /// Whether a native kernel exists for this node with these input types.
    fn supports(&self, node: &Node, inputs: &[&Shape]) -> bool;

    /// Whether a native kernel exists for `op` making `out` from inputs of these types: the probe
    /// passes and loaders use to decide what to form (attention, a half-precision weight).
    fn supports_op(&self, op: rlx_ir::Op, out: Shape, inputs: &[&Shape]) -> bool {
        self.supports(&Node { op, inputs: vec![], ty: out }, inputs)
    }

    /// Why this node has no native kernel, when the reason is a device capability or limit
    /// (`adapter lacks shader-f16`, a buffer over the binding limit) rather than a missing
    /// kernel. Legalization prints it beside the node in the dispatch report. Default: none.
    fn missing_reason(&self, node: &Node, inputs: &[&Shape]) -> Option<String> {
        let _ = (node, inputs);
        None
    }

    /// Compiles a graph that `legalize` has made fully supported, with the pipeline's memory
    /// plan and the options of the compile (see `CompileRequest`).
    fn compile(&self, req: &CompileRequest<'_>) -> Result<Box<dyn Executable>>;
}

/// What a backend compiles: a legalized graph and what the pipeline decided about it.
#[derive(Debug, Clone, Copy)]
pub struct CompileRequest<'a> {
    /// The legalized, optimized graph.
    pub graph: &'a Graph,
    /// Its state updates (`Graph::lower_updates`): after each run, output `u.output` is written
    /// into param `u.param`, and `run` returns only the outputs that are not updates. A backend
    /// without state support returns `unsupported_updates` when this is not empty.
    pub updates: &'a [ParamUpdate],
    /// The memory plan of `graph` (liveness reuse, in place where it can be, updates on their
    /// param's bytes where nothing reads the old value): per-op backends lay their buffers out by
    /// it; whole-graph backends, whose compiler plans memory itself, may ignore it.
    pub memory: &'a memory::MemoryPlan,
    /// The compile's options.
    pub options: &'a CompileOptions,
}

impl CompileRequest<'_> {
    /// The error of a backend that keeps no state across runs, for a request with updates.
    pub fn unsupported_updates(&self, backend: &str) -> rlx_ir::Error {
        unsupported(backend, "param updates (state kept across runs)".into())
    }
}

/// Compiles a legalized `g` on `backend` without state updates, planning its memory and with the
/// built-in options: for tests and tools that drive a backend directly (programs go through the
/// runtime's `Session`, which runs the pipeline first).
pub fn compile_graph(backend: &dyn Backend, g: &Graph) -> Result<Box<dyn Executable>> {
    compile_graph_stateful(backend, g, &[])
}

/// As `compile_graph`, with state updates.
pub fn compile_graph_stateful(
    backend: &dyn Backend,
    g: &Graph,
    updates: &[ParamUpdate],
) -> Result<Box<dyn Executable>> {
    let memory = memory::plan_updates(g, updates)?;
    backend.compile(&CompileRequest { graph: g, updates, memory: &memory, options: &CompileOptions::builtin() })
}

/// A state update of a compiled graph: after each run, param `param` (index in `Graph::params`
/// order) takes the value of output `output` (index in `Graph::outputs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamUpdate {
    /// Index of the param in graph order.
    pub param: usize,
    /// Index of the output holding its new value.
    pub output: usize,
}

/// A compiled graph on one backend. Inputs and params arrive validated and in graph order.
pub trait Executable: Send {
    /// Stores a param's bytes (little-endian, the param's dtype, exact length).
    fn set_param(&mut self, index: usize, bytes: &[u8]) -> Result<()>;

    /// Runs with one byte slice per graph input (graph order), writing each output into the
    /// matching buffer (exact length). Performs no allocation on the CPU backend's hot path.
    fn run(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<()>;

    /// Reads a param's current bytes (they change across runs when the graph updates it).
    fn get_param(&self, index: usize) -> Result<Vec<u8>> {
        Err(rlx_ir::Error::eval("get_param", format!("this backend cannot read back param #{index}")))
    }

    /// Name of the backend, for errors of the default methods below.
    fn backend_name(&self) -> &'static str {
        "this backend"
    }

    /// The buffer that holds param `index`, to bind into another executable (`bind_param`):
    /// both then read and write the same bytes, with no copy.
    fn share_param(&self, index: usize) -> Result<ParamShare> {
        Err(unsupported(self.backend_name(), format!("sharing params (param #{index})")))
    }

    /// Makes param `index` use `share`'s bytes instead of its own (exact length). A writable
    /// share joins this executable to the sharer's `RunGroup`: their runs never overlap.
    fn bind_param(&mut self, index: usize, share: ParamShare) -> Result<()> {
        let _ = share;
        Err(unsupported(self.backend_name(), format!("binding shared params (param #{index})")))
    }
}

fn unsupported(backend: &str, missing: String) -> rlx_ir::Error {
    rlx_ir::Error::Unsupported { backend: backend.into(), missing, report: String::new() }
}

/// Legalizes, compiles and runs `g` once on `backend` with named host tensors (inputs and params).
/// For tests and tools; programs use the runtime's `CompiledGraph`.
pub fn run_host(
    backend: &dyn Backend,
    g: &Graph,
    feeds: &[(&str, rlx_ir::HostTensor)],
) -> Result<Vec<rlx_ir::HostTensor>> {
    let (legal, _) = legalize(g, backend)?;
    let mut exe = compile_graph(backend, &legal)?;
    let find =
        |name: &str| {
            feeds.iter().find(|(n, _)| *n == name).map(|(_, t)| t.to_bytes()).ok_or_else(|| {
                rlx_ir::Error::MissingInput { name: name.into(), shape: Shape::scalar(rlx_ir::DType::F32) }
            })
        };
    for (i, (_, name)) in legal.params().iter().enumerate() {
        exe.set_param(i, &find(name)?)?;
    }
    let inputs = legal.inputs().iter().map(|(_, n)| find(n)).collect::<Result<Vec<_>>>()?;
    let in_refs: Vec<&[u8]> = inputs.iter().map(|b| b.as_slice()).collect();
    let out_tys: Vec<Shape> =
        legal.outputs().iter().map(|&o| legal.shape(o).cloned().unwrap_or(Shape::scalar(rlx_ir::DType::F32))).collect();
    let mut outs: Vec<Vec<u8>> = out_tys.iter().map(|s| vec![0; s.size_bytes().unwrap_or(0)]).collect();
    let mut out_refs: Vec<&mut [u8]> = outs.iter_mut().map(|b| b.as_mut_slice()).collect();
    exe.run(&in_refs, &mut out_refs)?;
    outs.iter().zip(out_tys).map(|(b, s)| rlx_ir::HostTensor::from_bytes(s, b)).collect()
}
