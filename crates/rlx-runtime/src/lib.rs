//! rlx-runtime: `Session::new(device).compile(graph)` gives a `CompiledGraph`.
//!
//! Compile verifies the graph, runs the optimizer for the device's backend (`rlx_opt::optimize`:
//! rewrites, legalization under the dispatch policy, fusion, one memory plan), and builds the
//! backend's executable from that plan. `CompileOptions` steer it (their defaults come from the
//! environment: `docs/configuration.md`); the compile cache (`cache`) skips the optimizer for a
//! graph it has seen with the same options and backend.
//!
//! Devices: `Cpu` with the `cpu` cargo feature (on by default); `Wgpu` with the `wgpu` feature
//! (off by default: wgpu takes minutes to build), on the best GPU adapter wgpu finds; `Tpu` with
//! the `tpu` feature, on XLA through a PJRT plugin loaded at run time; `Mlx` with the `mlx` feature
//! (libmlx through a shim built against it). A backend
//! from another crate plugs in through `Session::with_backend`.
#![warn(missing_docs)]

mod auto;
mod cache;
mod compiled;
mod dynamic;

pub use auto::{AutoChoice, DeviceProfile, GraphWork, choose};
pub use cache::{CacheStats, CompileSource, cache_stats, clear_memory_cache};
pub use compiled::CompiledGraph;
pub use dynamic::DynamicGraph;
pub use rlx_driver::{CompileOptions, DispatchPolicy, ExecutionMode, PrecisionPolicy, Reports};

use rlx_driver::{Backend, CompileRequest, Device, DispatchReport, ParamUpdate};
use rlx_ir::{Error, Graph, Result};
use std::sync::Arc;

/// Compiles graphs for one device.
#[derive(Clone)]
pub struct Session {
    device: Device,
    opts: CompileOptions,
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
        #[cfg(feature = "tpu")]
        Device::Tpu.register_probe(rlx_pjrt::probe);
        #[cfg(not(feature = "tpu"))]
        Device::Tpu.register_probe(|| Some("this build of rlx-runtime has no `tpu` feature"));
        #[cfg(feature = "mlx")]
        Device::Mlx.register_probe(rlx_mlx::probe);
        #[cfg(not(feature = "mlx"))]
        Device::Mlx.register_probe(|| Some("this build of rlx-runtime has no `mlx` feature"));
        #[cfg(not(feature = "cpu"))]
        Device::Cpu.register_probe(|| Some("this build of rlx-runtime has no `cpu` feature"));
    });
}

impl Session {
    /// A session for `device`. An unavailable device is reported by `compile`.
    pub fn new(device: Device) -> Self {
        register_backends();
        Session { device, opts: CompileOptions::default(), custom: None }
    }

    /// A session that compiles for `backend` instead of the built-in backend of a device: how a
    /// backend from another crate (a third-party or test backend) plugs in. `device` is only what
    /// `Session::device` reports (say `Device::Cpu` for a backend that runs on the host); every
    /// compile goes through the same pipeline, legalization and dispatch report as the built-in
    /// backends, steered by `backend.capabilities()` and its kernel table.
    pub fn with_backend(device: Device, backend: Arc<dyn Backend>) -> Self {
        register_backends();
        Session { device, opts: CompileOptions::default(), custom: Some(backend) }
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
            #[cfg(feature = "mlx")]
            Device::Mlx if Device::Mlx.is_available() => Ok(Arc::new(rlx_mlx::MlxBackend::new())),
            #[cfg(feature = "tpu")]
            Device::Tpu if Device::Tpu.is_available() => Ok(Arc::new(rlx_pjrt::PjrtBackend::new())),
            Device::Auto => Err(Error::DeviceUnavailable {
                device: "auto".into(),
                reason: "Device::Auto picks a device per graph when it compiles (Session::choose_device names it)"
                    .into(),
            }),
            d => Err(Error::DeviceUnavailable {
                device: d.to_string(),
                reason: d.unavailable_reason().unwrap_or("unknown").into(),
            }),
        }
    }

    /// Sets the options every `compile` of this session uses (precision, dispatch policy,
    /// rewrites and fusion, reports, execution mode, cache).
    pub fn with_options(mut self, opts: CompileOptions) -> Self {
        self.opts = opts;
        self
    }

    /// The options `compile` uses.
    pub fn options(&self) -> &CompileOptions {
        &self.opts
    }

    /// Verifies and optimizes `g` for the backend (or takes the optimized graph from the compile
    /// cache), then builds the backend's executable. Reports and dumps follow the options
    /// (`RLX_DISPATCH_REPORT=1`, `RLX_COMPILE_REPORT=1`, `RLX_DUMP=dir`, `RLX_VERBOSE=1`). A
    /// backend's failure to compile is an `Error::Compile` carrying the dispatch report.
    pub fn compile(&self, g: Graph) -> Result<CompiledGraph> {
        if self.device == Device::Auto && self.custom.is_none() {
            let choice = self.choose_device(&g)?;
            if self.opts.reports.verbose {
                eprintln!("rlx: {choice}");
            }
            return Session { device: choice.device, ..self.clone() }.compile(g);
        }
        let start = std::time::Instant::now();
        let backend = self.backend()?;
        g.verify()?;
        if let Some((node, symbol)) = g.first_symbol() {
            return Err(Error::UnboundDim { symbol, context: format!("node {node} of graph `{}`", g.name()) });
        }
        // State updates travel as trailing outputs through the optimizer.
        let (lowered, update_outputs) = g.lower_updates();
        let lowered_params = lowered.params();
        let updates: Vec<ParamUpdate> = update_outputs
            .iter()
            .filter_map(|(name, output)| {
                let param = lowered_params.iter().position(|(_, n)| n == name)?;
                Some(ParamUpdate { param, output: *output })
            })
            .collect();
        let opts = &self.opts;
        let key = cache::Key::new(&lowered, &updates, opts, backend.as_ref());
        let (o, source) = cache::optimized(&key, opts, backend.as_ref(), || {
            rlx_opt::optimize(lowered.clone(), backend.as_ref(), opts, &updates)
        })?;
        if opts.reports.dispatch {
            eprintln!("{}", o.report.dispatch);
        }
        if opts.reports.compile {
            eprintln!("{}", o.report);
        }
        let req = CompileRequest { graph: &o.graph, updates: &o.updates, memory: &o.report.memory, options: opts };
        let exe = backend.compile(&req).map_err(|e| match e {
            e @ Error::DeviceUnavailable { .. } => e,
            e => Error::Compile {
                backend: backend.name().into(),
                graph: g.name().into(),
                source: Box::new(e),
                report: o.report.dispatch.to_string(),
            },
        })?;
        if opts.reports.verbose {
            let from = match source {
                CompileSource::Memory => "cache hit (memory)",
                CompileSource::Disk => "cache hit (disk)",
                CompileSource::Pipeline => "cache miss",
            };
            eprintln!(
                "rlx: compiled `{}` for {} ({}): {} -> {} nodes, {from}, {:.1} ms",
                g.name(),
                backend.name(),
                self.device,
                lowered.len(),
                o.graph.len(),
                start.elapsed().as_secs_f64() * 1e3
            );
        }
        Ok(CompiledGraph::new(&g, exe, o.report.dispatch.clone(), source, self.device))
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

    /// The device `Device::Auto` would run `g` on, and why: the available device with the lowest
    /// modelled time for the graph's work (each device measured once per process by a short
    /// probe; see `DeviceProfile`).
    pub fn choose_device(&self, g: &Graph) -> Result<AutoChoice> {
        let profiles = auto::profiles();
        auto::choose(GraphWork::of(g), &profiles).ok_or_else(|| {
            let why: Vec<String> =
                profiles.iter().filter_map(|(d, p)| p.as_ref().err().map(|e| format!("{d}: {e}"))).collect();
            Error::DeviceUnavailable {
                device: "auto".into(),
                reason: format!("no device to choose: {}", why.join("; ")),
            }
        })
    }

    /// The dispatch report of legalizing `g` under this session's options, without compiling
    /// (no rewrites, so the `rewritten` column is zero).
    pub fn dispatch_report(&self, g: &Graph) -> Result<DispatchReport> {
        let backend = self.backend()?;
        rlx_driver::legalize_with(g, backend.as_ref(), &self.opts).map(|(_, r)| r)
    }
}
