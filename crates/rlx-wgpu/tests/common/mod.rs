//! Shared by the wgpu tests: the adapter check.

use rlx_wgpu::WgpuBackend;

/// True when the wgpu tests should not run (`RLX_WGPU_SKIP=1`, an explicit opt-out for
/// machines without Vulkan); otherwise panics when no adapter is usable, so CI fails loudly.
pub fn require_gpu() -> bool {
    if std::env::var("RLX_WGPU_SKIP").is_ok_and(|v| v == "1") {
        eprintln!("wgpu tests SKIPPED: RLX_WGPU_SKIP=1");
        return true;
    }
    if let Err(why) = WgpuBackend::availability() {
        panic!("no wgpu adapter: {why}\n(set RLX_WGPU_SKIP=1 to skip the wgpu tests on a machine without Vulkan)");
    }
    let info = WgpuBackend::adapter_info().expect("adapter");
    eprintln!("wgpu adapter: {} ({:?}, {:?}, driver {})", info.name, info.device_type, info.backend, info.driver_info);
    false
}
