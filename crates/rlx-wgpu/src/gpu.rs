//! The process-wide GPU: adapter choice, device, queue, and a cache of compiled pipelines.

use rlx_ir::{Error, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A wgpu device and queue on the best adapter found, shared by every compiled graph.
pub struct Gpu {
    /// The device.
    pub device: wgpu::Device,
    /// Its queue.
    pub queue: wgpu::Queue,
    /// The adapter's name, driver and backend.
    pub info: wgpu::AdapterInfo,
    /// The limits granted (the adapter's own).
    pub limits: wgpu::Limits,
    /// Optional features enabled on the device (SHADER_F16 where the adapter has it).
    pub features: wgpu::Features,
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
}

static GPU: OnceLock<std::result::Result<Arc<Gpu>, String>> = OnceLock::new();

/// Rank of an adapter type: discrete GPUs first, software rasterizers (lavapipe) last.
fn rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

fn open() -> std::result::Result<Arc<Gpu>, String> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let mut adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    // Compute needs storage buffers in compute shaders; GL adapters may lack them.
    adapters.retain(|a| a.get_downlevel_capabilities().flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS));
    adapters.sort_by_key(|a| rank(a.get_info().device_type));
    // RLX_WGPU_ADAPTER=text picks the first adapter whose name contains it (any case).
    let cfg = rlx_driver::config();
    if let Some(want) = &cfg.wgpu.adapter {
        let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
        adapters.retain(|a| a.get_info().name.to_lowercase().contains(&want.to_lowercase()));
        if adapters.is_empty() {
            return Err(format!("RLX_WGPU_ADAPTER={want} matches none of the adapters {names:?}"));
        }
    }
    let Some(adapter) = adapters.into_iter().next() else {
        return Err("no GPU adapter with compute shaders was found (wgpu saw no Vulkan, Metal or DX12 \
                    device; on Linux without a GPU, install Mesa's lavapipe: apt-get install mesa-vulkan-drivers)"
            .into());
    };
    let info = adapter.get_info();
    let limits = adapter.limits();
    // f16 storage and arithmetic where the adapter has them; RLX_WGPU_F16=0 turns them off
    // (to test the error an adapter without them gives).
    let mut features = adapter.features() & wgpu::Features::SHADER_F16;
    if !cfg.wgpu.f16 {
        features = wgpu::Features::empty();
    }
    // Subgroup operations where the adapter has them with subgroups that fill a 64-thread
    // workgroup evenly (RLX_WGPU_SUBGROUPS=0 turns them off).
    let sg_fits = (4..=64).contains(&info.subgroup_min_size) && info.subgroup_max_size <= 64;
    if sg_fits && cfg.wgpu.subgroups {
        features |= adapter.features() & wgpu::Features::SUBGROUP;
    }
    let desc = wgpu::DeviceDescriptor {
        label: Some("rlx"),
        required_features: features,
        required_limits: limits.clone(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&desc))
        .map_err(|e| format!("adapter `{}` refused a device: {e}", info.name))?;
    Ok(Arc::new(Gpu { device, queue, info, limits, features, pipelines: Mutex::new(HashMap::new()) }))
}

/// The shared GPU, opened on first use; a clear `DeviceUnavailable` error when there is none.
pub fn gpu() -> Result<Arc<Gpu>> {
    GPU.get_or_init(open).clone().map_err(|reason| Error::DeviceUnavailable { device: "wgpu".into(), reason })
}

/// Whether a usable adapter exists (opens the device once, then answers from the cache).
pub fn available() -> std::result::Result<(), String> {
    GPU.get_or_init(open).as_ref().map(|_| ()).map_err(Clone::clone)
}

/// Whether the device computes with f16 (wgpu's SHADER_F16); false without an adapter.
pub fn has_f16() -> bool {
    GPU.get_or_init(open).as_ref().is_ok_and(|g| g.features.contains(wgpu::Features::SHADER_F16))
}

/// Whether kernels use subgroup operations (the device has them and `set_subgroups` left them on).
pub fn has_subgroups() -> bool {
    SUBGROUPS_ON.load(Ordering::Relaxed)
        && GPU.get_or_init(open).as_ref().is_ok_and(|g| g.features.contains(wgpu::Features::SUBGROUP))
}

static SUBGROUPS_ON: AtomicBool = AtomicBool::new(true);

/// Turns subgroup operations in kernels compiled from now on off (false) or back on where the
/// device has them (true): the shared-memory path is then used, as on adapters without them.
/// For tests and benchmarks comparing both paths; graphs compiled earlier keep their kernels.
pub fn set_subgroups(enabled: bool) {
    SUBGROUPS_ON.store(enabled, Ordering::Relaxed);
}

/// The availability probe for `rlx_driver::Device::Wgpu`: None when a device opened, else why not.
pub fn probe() -> Option<&'static str> {
    GPU.get_or_init(open).as_ref().err().map(String::as_str)
}

impl Gpu {
    /// The pipeline for a WGSL compute shader with entry point `main`, compiled once per source.
    /// Shader or pipeline errors come back as an error naming `op`, with the WGSL.
    pub fn pipeline(&self, op: &str, wgsl: &str) -> Result<Arc<wgpu::ComputePipeline>> {
        if let Some(p) = self.lock().get(wgsl) {
            return Ok(p.clone());
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(op),
            source: wgpu::ShaderSource::Wgsl(wgsl.into()),
        });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(op),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::eval(op, format!("wgpu rejected the generated kernel: {e}\n--- WGSL ---\n{wgsl}")));
        }
        let p = Arc::new(pipeline);
        self.lock().insert(wgsl.to_string(), p.clone());
        Ok(p)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<wgpu::ComputePipeline>>> {
        self.pipelines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The most workgroups one dispatch dimension may have.
    pub fn max_groups(&self) -> u32 {
        self.limits.max_compute_workgroups_per_dimension
    }
}
