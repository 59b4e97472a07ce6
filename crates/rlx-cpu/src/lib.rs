//! rlx-cpu: the CPU backend. A kernel table over one arena planned at compile time; kernels are
//! chosen at compile time and `run` performs no allocation.
//!
//! softmax, log_softmax, layer_norm, rms_norm, rope and attention have native kernels
//! (`kernels/nn.rs`, `kernels/attention.rs`); other composites run through their decompositions
//! (see `rlx_driver::legalize`). `RLX_PROFILE=1` times every kernel (`kernels::profile`).
#![warn(missing_docs)]

pub mod custom;
pub mod elem;
pub mod exec;
pub mod gemm;
pub mod kernels;
pub mod peak;
mod prefetch;
pub mod threads;

use kernels::{KernelBuilder, KernelCtx};
use rlx_driver::{Backend, Capabilities, CompileRequest, Executable, Execution, KernelTable};
use rlx_ir::{Node, Op, Result, Shape};

/// The CPU backend.
pub struct CpuBackend {
    table: KernelTable<KernelBuilder>,
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend { table: kernels::table() }
    }
}

impl CpuBackend {
    /// A backend with the full CPU kernel table; starts the shared thread pool.
    pub fn new() -> Self {
        threads::start();
        Self::default()
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // The attention and rope kernels read `[batch, seq, heads, dim]` in place.
            head_layout: rlx_ir::ops::HeadLayout::Bshd,
            // The packed GEMM reads either operand through strides.
            matmul_transpose_flags: true,
            matmul_epilogues: true,
            // Attention widens f16 / bf16 K and V per block under f32 queries.
            half_kv_cache: true,
            execution: Execution::PerOpKernels,
            // The memory plan puts eligible updates on the param's bytes (`plan_with_updates`).
            in_place_state: true,
        }
    }

    fn profile_report(&self) -> String {
        kernels::profile::report()
    }

    fn reset_profile(&self) {
        kernels::profile::reset()
    }

    fn threads(&self) -> Option<usize> {
        Some(threads::num_threads())
    }

    fn supports(&self, node: &Node, inputs: &[&Shape]) -> bool {
        // A custom op is supported only where a kernel is registered under its name (the table's
        // one `Custom` entry dispatches by name), so legalization decomposes the others.
        node.inputs.is_empty()
            || match &node.op {
                Op::Custom(_) => custom::lookup(node, inputs).is_some(),
                _ => self.table.lookup(node, inputs).is_some(),
            }
    }

    fn compile(&self, req: &CompileRequest<'_>) -> Result<Box<dyn Executable>> {
        // Kernels split their work for the threads this graph may use.
        let threads = req.options.threads;
        let mut exe = threads::with_thread_cap(threads, || {
            exec::CpuExecutable::new_stateful(req.graph, req.updates, req.memory, |ctx: &KernelCtx<'_>| {
                build_kernel(&self.table, ctx)
            })
        })?;
        exe.set_thread_cap(threads);
        Ok(Box::new(exe))
    }
}

/// The kernel for one node from `table` (profiled under `RLX_PROFILE=1`).
pub(crate) fn build_kernel(table: &KernelTable<KernelBuilder>, ctx: &KernelCtx<'_>) -> Result<kernels::Kernel> {
    let node = Node { op: ctx.op.clone(), inputs: vec![], ty: ctx.out.clone() };
    let ins: Vec<&Shape> = ctx.ins.iter().collect();
    match table.lookup(&node, &ins) {
        Some(e) => (e.build)(ctx).map(|k| kernels::profile::wrap(ctx, k)),
        None => Err(kernels::unsupported(ctx)),
    }
}
