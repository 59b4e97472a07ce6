//! Devices a graph can run on.

use std::fmt;

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
}

impl Device {
    /// Every device kind.
    pub const ALL: [Device; 7] =
        [Device::Cpu, Device::Wgpu, Device::Mlx, Device::Tpu, Device::Cuda, Device::Rocm, Device::Metal];

    /// Whether this build can run graphs on the device.
    pub fn is_available(self) -> bool {
        self.unavailable_reason().is_none()
    }

    /// Why the device cannot be used, or None when it can.
    pub fn unavailable_reason(self) -> Option<&'static str> {
        match self {
            Device::Cpu => None,
            _ => Some("this build of RLX has no backend for it yet"),
        }
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
        };
        f.write_str(s)
    }
}
