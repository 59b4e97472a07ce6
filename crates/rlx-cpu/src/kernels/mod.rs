//! The CPU kernel table. Each file registers its kernels in `register`.

mod attention;
pub(crate) mod control;
mod cross_entropy;
mod elementwise;
mod epilogue;
mod fft;
mod fused;
mod fused_norm;
mod half_fused;
mod half_vec;
mod indexing;
mod math;
mod matmul;
mod movement;
mod nn;
pub mod profile;
mod quant;
mod reduce;
mod rows;
mod scratch;
mod selective_scan;
mod stacked_matmul;
mod vec32;

/// Repacked quantized weights (one copy per param version): copies made, and bytes of their
/// memory-mapped sources released from resident memory, since the process started.
pub use quant::{released_bytes as quant_released_bytes, repacks as quant_repacks};

pub use control::LoopGroup;

use crate::exec::Bufs;
use rlx_driver::KernelTable;
use rlx_ir::{DType, Op, Result, Shape};

/// A compiled kernel: reads its inputs and writes its output in the arena.
pub type Kernel = Box<dyn FnMut(&Bufs<'_>) -> Result<()> + Send>;

/// What a kernel builder sees: the op and its static input and output types.
pub struct KernelCtx<'a> {
    /// The op with its attributes.
    pub op: &'a Op,
    /// Input types (static).
    pub ins: &'a [Shape],
    /// Output type (static).
    pub out: &'a Shape,
    /// For a node that is one result of a loop whose other results are other nodes (a scan's
    /// carries and stacked outputs): the group and this node's place in it (0 runs first).
    pub group: Option<(&'a control::LoopGroup, usize)>,
}

impl KernelCtx<'_> {
    /// Static dims of input `i`.
    pub fn in_dims(&self, i: usize) -> Vec<usize> {
        self.ins[i].fixed_dims().unwrap_or_default()
    }
    /// Static dims of the output.
    pub fn out_dims(&self) -> Vec<usize> {
        self.out.fixed_dims().unwrap_or_default()
    }
}

/// Builds a kernel for a node the table accepted.
pub type KernelBuilder = fn(&KernelCtx<'_>) -> Result<Kernel>;

/// Real float dtypes.
pub const FLOATS: &[DType] = &DType::FLOATS;
/// Floats and integers.
pub const NUMERIC: &[DType] = &DType::NUMERIC;
/// Floats, integers and bool.
pub const REAL_AND_BOOL: &[DType] = &DType::REAL_AND_BOOL;
/// Every dtype.
pub const ALL: &[DType] = &DType::ALL;

/// The CPU's kernel table.
pub fn table() -> KernelTable<KernelBuilder> {
    let mut t = KernelTable::new();
    elementwise::register(&mut t);
    fused::register(&mut t);
    fused_norm::register(&mut t);
    indexing::register(&mut t);
    fft::register(&mut t);
    selective_scan::register(&mut t);
    t.register(rlx_ir::OpKind::Custom, ALL, crate::custom::build);
    reduce::register(&mut t);
    matmul::register(&mut t);
    movement::register(&mut t);
    quant::register(&mut t);
    nn::register(&mut t);
    cross_entropy::register(&mut t);
    attention::register(&mut t);
    stacked_matmul::register(&mut t);
    control::register(&mut t);
    t
}

/// Grows the per-thread buffers that tasks grow on first use (GEMM packing, AMX weight
/// panels) on every pool thread to the longest any reached. Called after each run of a compiled
/// graph, so warm runs allocate nothing whichever thread takes which task.
pub(crate) fn spread_thread_buffers() {
    crate::gemm::spread_pack_buffers();
    quant::spread_thread_buffers();
}

/// An error for a kernel builder reached with a type it does not handle.
pub fn unsupported(ctx: &KernelCtx<'_>) -> rlx_ir::Error {
    rlx_ir::Error::Unsupported {
        backend: "cpu".into(),
        missing: format!("`{}` for {}", ctx.op.def().name(), ctx.out),
        report: String::new(),
    }
}
