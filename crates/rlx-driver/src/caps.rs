//! What passes and the runtime may ask of a backend beyond its kernel table.
//!
//! The kernel table answers "is there a kernel for this op over these dtypes"; it cannot say how
//! a kernel reads its operands (a head layout, matmul transpose flags) or how the backend runs a
//! whole graph. Those answers live here, so no pass ever matches a backend's name.

use rlx_ir::ops::HeadLayout;

/// How a backend turns a legalized graph into work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Execution {
    /// One kernel per node (or fused region), dispatched in order over a planned buffer set
    /// (the CPU and wgpu backends).
    #[default]
    PerOpKernels,
    /// The whole graph is handed to a compiler that makes one executable of it (PJRT, MLX); the
    /// backend's own compiler then fuses and plans memory.
    WholeGraph,
}

/// Properties of a backend that the compile pipeline and the runtime read instead of its name.
///
/// `Capabilities::default()` is the conservative answer: a backend that states nothing gets the
/// graph in the layout it was built in, matmuls without transpose flags, and copied state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Capabilities {
    /// The axis order the backend's attention and rope kernels prefer for per-head values. With
    /// `HeadLayout::Bshd` the pipeline folds the head transposes around attention and rope into
    /// the ops' `Bshd` layout (the kernels must then read `Bshd` values); with the default
    /// `Bhsd` graphs keep the layout they were built in.
    pub head_layout: HeadLayout,
    /// Whether the matmul kernels honor `transpose_a` / `transpose_b`: then the pipeline folds
    /// transposes of matmul operands into those flags instead of materializing them.
    pub matmul_transpose_flags: bool,
    /// Whether the matmul kernels apply fused epilogues (bias, residual, activation) on their
    /// output. Fusion still asks the kernel table per node; this is the summary for reports and
    /// for a backend choosing between per-op and whole-graph lowering.
    pub matmul_epilogues: bool,
    /// Whether attention reads f16 / bf16 keys and values under f32 queries natively, so that
    /// models keep KV caches in f16 by default (half the memory and the bytes each decode step
    /// reads, as llama.cpp does); without it they default to f32 caches.
    pub half_kv_cache: bool,
    /// Whether the backend runs per-op kernels or compiles whole graphs.
    pub execution: Execution,
    /// Whether state updates (`Graph::update_param`) are written into the param's own storage
    /// when nothing reads the old value, rather than copied after the run.
    pub in_place_state: bool,
}
