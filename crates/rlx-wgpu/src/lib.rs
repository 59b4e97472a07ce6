//! rlx-wgpu: the wgpu backend. Runs graphs on any Vulkan, Metal or DX12 GPU (and on Mesa's
//! lavapipe, a Vulkan CPU device, in CI).
//!
//! A kernel table like the CPU's: elementwise ops and fused regions get WGSL generated from the
//! ops' own scalar expressions (`wexpr`); matmul, reductions, softmax, norms, gather and rope
//! have hand-written WGSL; data movement uses index maps derived from the ops' references.
//! Floats compute in f32: f16 buffers (where the device has shader-f16) are read into f32 and
//! rounded at the store; bf16 is emulated as f32 words holding bf16 values, rounded to nearest
//! even at every store and converted at upload and readback. i32/u32 run natively; i64 as word
//! pairs in casts, compares, indexing and movement; u8/i8 packed four to a word. Packed GGUF
//! weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) stay packed and are decoded inside the `dequantize` /
//! `qmatmul` kernels. Row combines use subgroup operations where the adapter has them
//! (`gpu::set_subgroups(false)` forces shared memory). Composites without a kernel (attention,
//! conv, pools, gelu...) run through their decompositions, and what is left is an
//! `Unsupported` error with the dispatch report (no host fallback). Device capabilities
//! (`caps`: binding and workgroup limits, shader-f16) are checked at legalization, so the
//! report says why a node is missing (`adapter lacks shader-f16`, a buffer over the binding
//! limit, `WGSL has no f64`).
#![warn(missing_docs)]

pub mod caps;
pub mod exec;
pub mod gpu;
pub mod kernels;
pub mod wexpr;

use kernels::{Ctx, Kernel};
use rlx_driver::{Backend, Executable, KernelTable};
use rlx_ir::{Node, Result, Shape};

/// The wgpu backend. Creating it is cheap; the device opens on first compile.
pub struct WgpuBackend {
    table: KernelTable<Kernel>,
    max_binding: Option<u64>,
}

impl Default for WgpuBackend {
    fn default() -> Self {
        WgpuBackend { table: kernels::table(), max_binding: None }
    }
}

impl WgpuBackend {
    /// A backend with the full wgpu kernel table.
    pub fn new() -> Self {
        Self::default()
    }

    /// A backend that takes `bytes` as the storage binding limit where it is below the
    /// adapter's (to exercise the over-limit report on any device).
    pub fn with_max_binding(bytes: u64) -> Self {
        WgpuBackend { max_binding: Some(bytes), ..Self::default() }
    }

    /// The device capabilities legalization checks: the adapter's, with this backend's limit.
    pub fn caps(&self) -> Option<caps::Caps> {
        let mut c = caps::Caps::of(&*gpu::gpu().ok()?);
        if let Some(b) = self.max_binding {
            c.max_binding = c.max_binding.min(b);
        }
        Some(c)
    }

    /// Whether a GPU adapter is usable here; the reason when it is not.
    pub fn availability() -> std::result::Result<(), String> {
        gpu::available()
    }

    /// The adapter in use (name, driver, backend), opening the device if needed.
    pub fn adapter_info() -> Result<wgpu::AdapterInfo> {
        Ok(gpu::gpu()?.info.clone())
    }
}

impl Backend for WgpuBackend {
    fn name(&self) -> &'static str {
        "wgpu"
    }

    fn cache_key(&self) -> String {
        // The adapter and the limits legalization checks decide what is native.
        match (gpu::gpu(), self.caps()) {
            (Ok(g), Some(c)) => format!("{} {} {:?} {:?}", g.info.name, g.info.driver_info, g.info.backend, c),
            _ => String::new(),
        }
    }

    fn capabilities(&self) -> rlx_driver::Capabilities {
        rlx_driver::Capabilities {
            // The WGSL attention and rope kernels read `[batch, heads, seq, dim]` only.
            head_layout: rlx_ir::ops::HeadLayout::Bhsd,
            // The WGSL matmul reads row-major operands; transposes stay explicit nodes.
            matmul_transpose_flags: false,
            // `fused_matmul` runs its epilogue in the WGSL matmul.
            matmul_epilogues: true,
            // Models keep f32 caches here, as before capabilities existed.
            half_kv_cache: false,
            execution: rlx_driver::Execution::PerOpKernels,
            // Updates are copied into the param buffers on the GPU after each run.
            in_place_state: false,
        }
    }

    fn supports(&self, node: &Node, inputs: &[&Shape]) -> bool {
        // Leaves (constants, full, arange) are evaluated on the host at compile time.
        if node.inputs.is_empty() {
            return true;
        }
        // Device limits first: a node over them has no kernel, whatever the table says.
        if self.caps().is_some_and(|c| c.limit_gap(node, inputs).is_some()) {
            return false;
        }
        let ctx = Ctx { op: &node.op, ins: inputs, out: &node.ty, node: 0 };
        self.table.lookup(node, inputs).is_some_and(|e| (e.build.accepts)(&ctx))
    }

    fn missing_reason(&self, node: &Node, inputs: &[&Shape]) -> Option<String> {
        let Some(c) = self.caps() else {
            return gpu::available().err().map(|why| format!("no wgpu device: {why}"));
        };
        c.limit_gap(node, inputs).or_else(|| caps::dtype_gap(&c, node, inputs))
    }

    fn compile(&self, req: &rlx_driver::CompileRequest<'_>) -> Result<Box<dyn Executable>> {
        let gpu = gpu::gpu()?;
        Ok(Box::new(exec::WgpuExecutable::new_stateful(gpu, req.graph, &self.table, req.updates, self.max_binding)?))
    }
}
