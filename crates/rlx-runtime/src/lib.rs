//! rlx-runtime: `Session::new(device).compile(graph)` gives a `CompiledGraph`.
//!
//! Compile verifies the graph, legalizes it for the device's backend (decomposing what the
//! backend lacks), and builds the backend's executable. `RLX_DISPATCH_REPORT=1` prints the
//! dispatch report on every compile.
//!
//! Devices: `Cpu` with the `cpu` cargo feature (on by default); `Wgpu` with the `wgpu` feature
//! (off by default: wgpu takes minutes to build), on the best GPU adapter wgpu finds. A backend
//! from another crate plugs in through `Session::with_backend`.
#![warn(missing_docs)]

mod compiled;
mod dynamic;

pub use compiled::CompiledGraph;
pub use dynamic::DynamicGraph;

use rlx_driver::{Backend, Device, DispatchReport};
use rlx_ir::{Error, Graph, Result};
use std::sync::Arc;

/// Compiles graphs for one device.
#[derive(Clone)]
pub struct Session {
    device: Device,
    opts: rlx_opt::PipelineOptions,
    /// A backend given by the caller (`with_backend`); None picks the built-in one for `device`.
    custom: Option<Arc<dyn Backend>>,
}

/// Registers the availability probes of the backends this build has, so that
/// `Device::is_available` answers for them. `Session::new` calls it; it is idempotent.
pub fn register_backends() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        #[cfg(feature = "wgpu")]
        Device::Wgpu.register_probe(rlx_wgpu::gpu::probe);
        #[cfg(not(feature = "wgpu"))]
        Device::Wgpu.register_probe(|| Some("this build of rlx-runtime has no `wgpu` feature"));
        #[cfg(not(feature = "cpu"))]
        Device::Cpu.register_probe(|| Some("this build of rlx-runtime has no `cpu` feature"));
    });
}

impl Session {
    /// A session for `device`. An unavailable device is reported by `compile`.
    pub fn new(device: Device) -> Self {
        register_backends();
        Session { device, opts: rlx_opt::PipelineOptions::default(), custom: None }
    }

    /// A session that compiles for `backend` instead of the built-in backend of a device: how a
    /// backend from another crate (a third-party or test backend) plugs in. `device` is only what
    /// `Session::device` reports (say `Device::Cpu` for a backend that runs on the host); every
    /// compile goes through the same pipeline, legalization and dispatch report as the built-in
    /// backends, steered by `backend.capabilities()` and its kernel table.
    pub fn with_backend(device: Device, backend: Arc<dyn Backend>) -> Self {
        register_backends();
        Session { device, opts: rlx_opt::PipelineOptions::default(), custom: Some(backend) }
    }

    /// The device.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The backend this session compiles for: the one given to `with_backend`, else the device's
    /// built-in backend (an error naming why when the device is unavailable in this build).
    pub fn backend(&self) -> Result<Arc<dyn Backend>> {
        if let Some(b) = &self.custom {
            return Ok(b.clone());
        }
        match self.device {
            #[cfg(feature = "cpu")]
            Device::Cpu => Ok(Arc::new(rlx_cpu::CpuBackend::new())),
            #[cfg(feature = "wgpu")]
            Device::Wgpu if Device::Wgpu.is_available() => Ok(Arc::new(rlx_wgpu::WgpuBackend::new())),
            d => Err(Error::DeviceUnavailable {
                device: d.to_string(),
                reason: d.unavailable_reason().unwrap_or("unknown").into(),
            }),
        }
    }

    /// Sets the optimizer options (precision, rewrites, fusion) used by `compile`.
    pub fn with_pipeline(mut self, opts: rlx_opt::PipelineOptions) -> Self {
        self.opts = opts;
        self
    }

    /// Verifies, optimizes and legalizes `g` (`rlx_opt::compile_with`), then compiles it.
    /// `RLX_DISPATCH_REPORT=1` prints the dispatch report, `RLX_COMPILE_REPORT=1` the pipeline
    /// report (stages, fusion, memory plan), `RLX_DUMP=dir` writes the graph after every stage.
    pub fn compile(&self, g: Graph) -> Result<CompiledGraph> {
        let backend = self.backend()?;
        g.verify()?;
        if let Some((node, symbol)) = g.first_symbol() {
            return Err(Error::UnboundDim { symbol, context: format!("node {node} of graph `{}`", g.name()) });
        }
        // State updates travel as trailing outputs through the optimizer.
        let (lowered, update_outputs) = g.lower_updates();
        let (opt, mut report) = rlx_opt::compile_with(lowered, backend.as_ref(), self.opts)?;
        // The report's memory plan, as the CPU executor lays it out: updates in place where they can be.
        let opt_params = opt.params();
        let pairs: Vec<(rlx_ir::NodeId, rlx_ir::NodeId)> = update_outputs
            .iter()
            .filter_map(|(name, o)| Some((opt_params.iter().find(|(_, n)| n == name)?.0, *opt.outputs().get(*o)?)))
            .collect();
        if !pairs.is_empty() {
            report.memory = rlx_opt::memory::plan_with_updates(&opt, &rlx_opt::memory::fused_in_place, &pairs)?;
        }
        if std::env::var("RLX_DISPATCH_REPORT").is_ok_and(|v| v == "1") {
            eprintln!("{}", report.dispatch);
        }
        if std::env::var("RLX_COMPILE_REPORT").is_ok_and(|v| v == "1") {
            eprintln!("{report}");
        }
        let params = g.params();
        let updates: Vec<rlx_driver::ParamUpdate> = update_outputs
            .iter()
            .filter_map(|(name, output)| {
                let param = params.iter().position(|(_, n)| n == name)?;
                Some(rlx_driver::ParamUpdate { param, output: *output })
            })
            .collect();
        let exe = backend.compile_stateful(&opt, &updates)?;
        Ok(CompiledGraph::new(&g, exe, report.dispatch))
    }

    /// The backend's per-kernel timing table since the last `reset_profile` (the CPU backend
    /// records one under `RLX_PROFILE=1`); empty when it records none or the device is
    /// unavailable.
    pub fn profile_report(&self) -> String {
        self.backend().map(|b| b.profile_report()).unwrap_or_default()
    }

    /// Clears the timings `profile_report` shows.
    pub fn reset_profile(&self) {
        if let Ok(b) = self.backend() {
            b.reset_profile();
        }
    }

    /// How many host threads the backend's kernels use (the CPU backend's pool, fixed per
    /// process at first use: `RLX_NUM_THREADS` or every CPU the process may use); None for a
    /// backend without a host pool or an unavailable device.
    pub fn threads(&self) -> Option<usize> {
        self.backend().ok()?.threads()
    }

    /// The dispatch report `compile` would produce, without compiling.
    pub fn dispatch_report(&self, g: &Graph) -> Result<DispatchReport> {
        let backend = self.backend()?;
        rlx_driver::legalize(g, backend.as_ref()).map(|(_, r)| r)
    }
}
