//! CPU kernels for custom ops (`rlx_ir::custom`), registered by the op's name. A custom op with
//! no kernel here runs through its decomposition; with neither, legalization fails with
//! `Error::Unsupported` naming the op.

use crate::kernels::{Kernel, KernelBuilder, KernelCtx, unsupported};
use rlx_ir::{DType, Node, Op, Result, Shape};
use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};

/// Why a kernel registration failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelRegistryError {
    /// Another builder is already registered for this name and one of these dtypes.
    #[error("custom op `{name}`: a different CPU kernel is already registered for {dtype}")]
    Clash {
        /// The op name.
        name: String,
        /// A dtype both registrations cover.
        dtype: DType,
    },
}

/// Why a crate's `register()` (its ops and their CPU kernels) failed: the shared error of the
/// custom-op crates.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// An op's name is taken.
    #[error(transparent)]
    Op(#[from] rlx_ir::custom::RegistryError),
    /// Another CPU kernel holds a name.
    #[error(transparent)]
    Kernel(#[from] KernelRegistryError),
}

struct Entry {
    dtypes: &'static [DType],
    build: KernelBuilder,
}

fn kernels() -> &'static RwLock<HashMap<&'static str, Vec<Entry>>> {
    static K: OnceLock<RwLock<HashMap<&'static str, Vec<Entry>>>> = OnceLock::new();
    K.get_or_init(Default::default)
}

/// Registers `build` as the CPU kernel of custom op `name` when every input and the output have
/// a dtype in `dtypes`. Registering the same builder again is a no-op; a different builder for an
/// overlapping dtype is `KernelRegistryError::Clash`. Backends made before or after see it.
pub fn register_kernel(
    name: &'static str,
    dtypes: &'static [DType],
    build: KernelBuilder,
) -> std::result::Result<(), KernelRegistryError> {
    let mut k = kernels().write().unwrap_or_else(|e| e.into_inner());
    let list = k.entry(name).or_default();
    for e in list.iter() {
        if let Some(&dtype) = e.dtypes.iter().find(|d| dtypes.contains(d)) {
            if std::ptr::fn_addr_eq(e.build, build) {
                continue;
            }
            return Err(KernelRegistryError::Clash { name: name.into(), dtype });
        }
    }
    if !list.iter().any(|e| std::ptr::fn_addr_eq(e.build, build) && e.dtypes == dtypes) {
        list.push(Entry { dtypes, build });
    }
    Ok(())
}

/// The kernel registered for a custom-op node with these input types (None for other ops).
pub(crate) fn lookup(node: &Node, inputs: &[&Shape]) -> Option<KernelBuilder> {
    let Op::Custom(c) = &node.op else { return None };
    let k = kernels().read().unwrap_or_else(|e| e.into_inner());
    let fits = |e: &&Entry| e.dtypes.contains(&node.ty.dtype) && inputs.iter().all(|s| e.dtypes.contains(&s.dtype));
    k.get(c.name())?.iter().find(fits).map(|e| e.build)
}

/// The kernel table's one entry for `Op::Custom`: the builder registered under the op's name.
pub(crate) fn build(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let node = Node { op: ctx.op.clone(), inputs: vec![], ty: ctx.out.clone() };
    let ins: Vec<&Shape> = ctx.ins.iter().collect();
    match lookup(&node, &ins) {
        Some(build) => build(ctx),
        None => Err(unsupported(ctx)),
    }
}
