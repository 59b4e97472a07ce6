//! Kernel tables: (op kind, dtypes) -> kernel builder. A backend's support is read from its table.

use rlx_ir::{DType, Node, OpKind, OpTraits, Shape};
use std::collections::HashMap;

/// One registration: an op kind, the dtypes its inputs and output may have, and a builder.
pub struct KernelEntry<B> {
    /// The op variant (unused for trait entries).
    pub kind: OpKind,
    /// Every input dtype and the output dtype must be in this list.
    pub dtypes: &'static [DType],
    /// Builds the kernel (backend-specific type).
    pub build: B,
}

/// A backend's kernels, looked up by op kind and dtypes.
pub struct KernelTable<B> {
    entries: HashMap<OpKind, Vec<KernelEntry<B>>>,
    by_trait: Vec<(OpTraits, KernelEntry<B>)>,
}

impl<B> Default for KernelTable<B> {
    fn default() -> Self {
        KernelTable { entries: HashMap::new(), by_trait: vec![] }
    }
}

impl<B> KernelTable<B> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a kernel builder for `kind` over `dtypes`.
    pub fn register(&mut self, kind: OpKind, dtypes: &'static [DType], build: B) -> &mut Self {
        self.entries.entry(kind).or_default().push(KernelEntry { kind, dtypes, build });
        self
    }

    /// Registers a kernel builder for every op whose traits contain `traits` (for example one
    /// kernel for all DATA_MOVEMENT ops). Kind entries are preferred over trait entries.
    pub fn register_trait(&mut self, traits: OpTraits, dtypes: &'static [DType], build: B) -> &mut Self {
        let kind = OpKind::Input;
        self.by_trait.push((traits, KernelEntry { kind, dtypes, build }));
        self
    }

    /// The first entry accepting this node's op kind (or traits) and dtypes.
    pub fn lookup(&self, node: &Node, inputs: &[&Shape]) -> Option<&KernelEntry<B>> {
        let fits = |e: &&KernelEntry<B>| {
            e.dtypes.contains(&node.ty.dtype) && inputs.iter().all(|s| e.dtypes.contains(&s.dtype))
        };
        let by_kind = self.entries.get(&node.op.kind()).and_then(|v| v.iter().find(fits));
        by_kind.or_else(|| {
            let t = node.op.def().traits();
            self.by_trait.iter().filter(|(need, _)| t.contains(*need)).map(|(_, e)| e).find(fits)
        })
    }

    /// Op kinds with at least one kernel.
    pub fn kinds(&self) -> impl Iterator<Item = OpKind> + '_ {
        self.entries.keys().copied()
    }
}
