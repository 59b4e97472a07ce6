//! Device capabilities that decide what runs, checked at legalization: buffer and binding
//! limits, workgroup limits and shader features. A node over a limit is reported missing with
//! the reason (`Backend::missing_reason`), before any kernel is built.

use crate::gpu::Gpu;
use rlx_ir::{DType, Node, Shape};

/// Marks reasons that no adapter can lift (WGSL has no such type); the conformance run lists
/// samples failing only for these as unsupported by design.
pub const BY_DESIGN: &str = "unsupported by design";

/// Threads per workgroup the kernels launch (the largest `@workgroup_size`).
pub const KERNEL_INVOCATIONS: u32 = crate::kernels::WG;
/// Workgroup memory of the largest kernel (matmul's two 16x32 f32 tiles).
pub const KERNEL_WORKGROUP_BYTES: u32 = 2 * 16 * 32 * 4;
/// Storage buffers a kernel binds beyond its inputs and output (an index map, the status words).
const EXTRA_BINDINGS: usize = 2;

/// The limits and features legalization checks, read from the open device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caps {
    /// Largest buffer one binding may cover, in bytes (storage binding size and buffer size).
    pub max_binding: u64,
    /// Storage buffers one compute shader may bind.
    pub max_storage_buffers: u32,
    /// Invocations per workgroup (the smaller of the total and the x dimension).
    pub max_invocations: u32,
    /// Workgroup memory in bytes.
    pub max_workgroup_bytes: u32,
    /// Whether the device computes with f16 (shader-f16).
    pub f16: bool,
    /// Whether kernels use subgroup operations (else the shared-memory paths, same results).
    pub subgroups: bool,
}

impl Caps {
    /// The capabilities of `gpu` as opened (features turned off by env vars count as absent).
    pub fn of(gpu: &Gpu) -> Caps {
        let l = &gpu.limits;
        Caps {
            max_binding: l.max_storage_buffer_binding_size.min(l.max_buffer_size),
            max_storage_buffers: l.max_storage_buffers_per_shader_stage,
            max_invocations: l.max_compute_invocations_per_workgroup.min(l.max_compute_workgroup_size_x),
            max_workgroup_bytes: l.max_compute_workgroup_storage_size,
            f16: gpu.features.contains(wgpu::Features::SHADER_F16),
            subgroups: crate::gpu::has_subgroups(),
        }
    }

    /// Why `node` cannot run within these limits, naming the tensor and sizes; None when it can.
    pub fn limit_gap(&self, node: &Node, inputs: &[&Shape]) -> Option<String> {
        let tensors = std::iter::once(("output", &node.ty)).chain(inputs.iter().map(|s| ("input", *s)));
        for (k, (what, s)) in tensors.enumerate() {
            let Some(host) = s.size_bytes() else { continue };
            let dev = device_bytes(s.dtype, host);
            if dev > self.max_binding {
                let which = if k == 0 { what.to_string() } else { format!("{what} #{}", k - 1) };
                return Some(format!(
                    "{which} {s} needs {dev} bytes on the device, over the adapter's storage binding limit of {} bytes",
                    self.max_binding
                ));
            }
        }
        if node.inputs.is_empty() {
            return None;
        }
        let binds = inputs.len() + 1 + EXTRA_BINDINGS;
        if binds > self.max_storage_buffers as usize {
            return Some(format!(
                "needs up to {binds} storage buffers in one kernel, the adapter allows {}",
                self.max_storage_buffers
            ));
        }
        if self.max_invocations < KERNEL_INVOCATIONS {
            return Some(format!(
                "the adapter allows {} invocations per workgroup, the kernels use {KERNEL_INVOCATIONS}",
                self.max_invocations
            ));
        }
        if self.max_workgroup_bytes < KERNEL_WORKGROUP_BYTES {
            return Some(format!(
                "the adapter has {} bytes of workgroup memory, the kernels use up to {KERNEL_WORKGROUP_BYTES}",
                self.max_workgroup_bytes
            ));
        }
        None
    }
}

/// Why no kernel takes these dtypes, when a dtype is the reason; None for a plain missing kernel.
pub fn dtype_gap(caps: &Caps, node: &Node, inputs: &[&Shape]) -> Option<String> {
    let dts: Vec<DType> = std::iter::once(node.ty.dtype).chain(inputs.iter().map(|s| s.dtype)).collect();
    let has = |d: DType| dts.contains(&d);
    if has(DType::F64) {
        return Some(format!("WGSL has no f64 ({BY_DESIGN})"));
    }
    if has(DType::C64) {
        return Some(format!("WGSL has no complex type ({BY_DESIGN})"));
    }
    if has(DType::I16) {
        return Some(format!("WGSL has no 16-bit integers ({BY_DESIGN})"));
    }
    if has(DType::F16) && !caps.f16 {
        return Some("adapter lacks shader-f16".into());
    }
    None
}

/// Device bytes of a tensor of `host` bytes of `dtype`: bools widen to a u32 each, bf16 to
/// the high half of a u32 (read as f32), everything is padded to whole words.
pub fn device_bytes(dtype: DType, host: usize) -> u64 {
    let b = match dtype {
        DType::Bool => host * 4,
        DType::BF16 => host * 2,
        _ => host,
    };
    (b.max(1).div_ceil(4) * 4) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::Graph;

    fn caps() -> Caps {
        Caps {
            max_binding: 1024,
            max_storage_buffers: 8,
            max_invocations: 256,
            max_workgroup_bytes: 16384,
            f16: false,
            subgroups: false,
        }
    }

    #[test]
    fn limits_name_the_tensor_and_sizes() {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[512], DType::F32));
        let y = g.exp(x);
        let n = &g.nodes()[y.index()];
        let ins = [&g.nodes()[x.index()].ty];
        let why = caps().limit_gap(n, &ins).expect("over the limit");
        assert!(why.contains("output f32[512] needs 2048 bytes") && why.contains("1024"), "{why}");
        let big = Caps { max_binding: 4096, ..caps() };
        assert_eq!(big.limit_gap(n, &ins), None);
        let small_wg = Caps { max_invocations: 64, ..big };
        assert!(small_wg.limit_gap(n, &ins).is_some_and(|w| w.contains("64 invocations")));
    }

    #[test]
    fn dtype_reasons() {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[4], DType::F16));
        let y = g.exp(x);
        let ins = [&g.nodes()[x.index()].ty];
        let n = &g.nodes()[y.index()];
        assert_eq!(dtype_gap(&caps(), n, &ins).as_deref(), Some("adapter lacks shader-f16"));
        assert_eq!(dtype_gap(&Caps { f16: true, ..caps() }, n, &ins), None);
        assert_eq!(device_bytes(DType::BF16, 6), 12);
        assert_eq!(device_bytes(DType::Bool, 3), 12);
        assert_eq!(device_bytes(DType::U8, 5), 8);
    }
}
