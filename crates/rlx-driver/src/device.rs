//! Devices a graph can run on.

use std::fmt;
use std::sync::RwLock;

/// Says whether a device works here: None when it does, else why not. Backend crates provide
/// one and the runtime registers it, so this crate needs no GPU library.
pub type Probe = fn() -> Option<&'static str>;

static PROBES: RwLock<Vec<(Device, Probe)>> = RwLock::new(Vec::new());

/// A place to run graphs. Only `Cpu` is built in today; the others arrive with their backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    /// The host CPU.
    Cpu,
    /// Any GPU through wgpu (Vulkan, Metal, DX12).
    Wgpu,
    /// Apple MLX (libmlx).
    Mlx,
    /// TPU or any PJRT plugin, through StableHLO.
    Tpu,
    /// NVIDIA CUDA.
    Cuda,
    /// AMD ROCm.
    Rocm,
    /// Apple Metal.
    Metal,
    /// Not a device: the runtime picks, per graph, the available device with the lowest
    /// modelled time (and says why under `RLX_VERBOSE=1`).
    Auto,
}

impl Device {
    /// Every device kind (`Auto` is a choice among them, not one of them).
    pub const ALL: [Device; 7] =
        [Device::Cpu, Device::Wgpu, Device::Mlx, Device::Tpu, Device::Cuda, Device::Rocm, Device::Metal];

    /// Whether this build can run graphs on the device.
    pub fn is_available(self) -> bool {
        self.unavailable_reason().is_none()
    }

    /// Why the device cannot be used, or None when it can. Devices ask the probe registered for
    /// them (see `register_probe`); the CPU is available unless a probe says otherwise (a
    /// runtime built without its `cpu` feature registers one). The runtime registers its
    /// backends' probes when the first `Session` is created (or on
    /// `rlx_runtime::register_backends()`): ask after that, since this crate cannot reach the
    /// backends itself.
    pub fn unavailable_reason(self) -> Option<&'static str> {
        if self == Device::Auto {
            // A choice among the others: available when one of them is.
            return match Device::ALL.iter().all(|d| !d.is_available()) {
                true => Some("no device is available to choose from"),
                false => None,
            };
        }
        let probe = PROBES.read().unwrap_or_else(|e| e.into_inner()).iter().find(|(d, _)| *d == self).map(|p| p.1);
        match probe {
            Some(p) => p(),
            None if self == Device::Cpu => None,
            None => Some(
                "no backend for it is registered in this program (rlx-runtime registers the backends it \
                 was built with, such as wgpu with its `wgpu` feature, when a Session is created)",
            ),
        }
    }

    /// The device named `name` (`cpu`, `wgpu`, ..., `auto`; any case), or an error listing the
    /// names.
    pub fn from_name(name: &str) -> Result<Device, String> {
        let all = || Device::ALL.into_iter().chain([Device::Auto]);
        all().find(|d| d.to_string().eq_ignore_ascii_case(name)).ok_or_else(|| {
            let known: Vec<String> = all().map(|d| d.to_string()).collect();
            format!("unknown device `{name}`; devices are {}", known.join(", "))
        })
    }

    /// Registers the availability probe of this device's backend (the last one wins).
    pub fn register_probe(self, probe: Probe) {
        let mut v = PROBES.write().unwrap_or_else(|e| e.into_inner());
        v.retain(|(d, _)| *d != self);
        v.push((self, probe));
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Device::Cpu => "cpu",
            Device::Wgpu => "wgpu",
            Device::Mlx => "mlx",
            Device::Tpu => "tpu",
            Device::Cuda => "cuda",
            Device::Rocm => "rocm",
            Device::Metal => "metal",
            Device::Auto => "auto",
        };
        f.write_str(s)
    }
}
