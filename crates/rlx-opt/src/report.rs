//! The fusion report: every fusion the pipeline made, and every candidate it left alone with
//! the reason. `RLX_FUSION_REPORT=1` prints it on every compile (`pipeline::compile_with`).

use std::fmt;

/// What kind of fusion a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FusionKind {
    /// A chain of elementwise ops became one `fused` region.
    Elementwise,
    /// A matmul absorbed its elementwise consumer (`fused_matmul`).
    MatMulEpilogue,
    /// A norm absorbed the elementwise ops that make its input (`fused_norm`).
    NormPrologue,
    /// Sibling matmuls sharing their left input became one `stacked_matmul`.
    StackedMatMul,
    /// A reduction absorbed the elementwise ops that make its input (`fused_reduce`).
    ReducePrologue,
    /// Sibling matmuls whose products one epilogue joins (SwiGLU's gate and up) became one
    /// combining `stacked_matmul`.
    CombinedMatMul,
}

impl fmt::Display for FusionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FusionKind::Elementwise => "elementwise region",
            FusionKind::MatMulEpilogue => "matmul epilogue",
            FusionKind::NormPrologue => "norm prologue",
            FusionKind::StackedMatMul => "stacked matmul",
            FusionKind::ReducePrologue => "reduction prologue",
            FusionKind::CombinedMatMul => "combined matmul",
        })
    }
}

/// One fused node of the final graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fusion {
    /// What fused.
    pub kind: FusionKind,
    /// The node in the final graph.
    pub node: u32,
    /// Elementwise ops folded into it (for a stacked matmul: the matmuls merged).
    pub ops: usize,
    /// Its inputs (values read from memory).
    pub inputs: usize,
}

/// Why a candidate stayed out of a fusion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The value has several consumers, so it must be stored anyway.
    MultipleConsumers(usize),
    /// The producer is smaller than its region: fusing would repeat it per broadcast element.
    Broadcast {
        /// The producer's type.
        from: String,
        /// The region's type.
        to: String,
    },
    /// A cast (or an op of another dtype) sits between the candidate and its region.
    DtypeChange {
        /// The dtype on the producer side.
        from: String,
        /// The dtype on the consumer side.
        to: String,
    },
    /// The consumer is a reduction without a prologue kernel (only norms take one).
    ConsumerIsReduction(String),
    /// The backend has no kernel for the fused op with these types.
    BackendLacksKernel(String),
    /// The fused op would not infer to the same type as the nodes it replaces.
    TypeWouldChange,
    /// A sibling matmul that cannot join its siblings' stacked matmul, and why.
    NotMergeable(String),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::MultipleConsumers(n) => write!(f, "multiple consumers ({n}): stored for them"),
            Reason::Broadcast { from, to } => {
                write!(f, "broadcast: {from} into a {to} region would repeat it per element")
            }
            Reason::DtypeChange { from, to } => write!(f, "dtype change ({from} -> {to})"),
            Reason::ConsumerIsReduction(op) => write!(f, "consumer is a reduction (`{op}`) without a prologue kernel"),
            Reason::BackendLacksKernel(what) => write!(f, "backend lacks fused kernel: {what}"),
            Reason::TypeWouldChange => write!(f, "the fused op would change the type"),
            Reason::NotMergeable(why) => write!(f, "not merged with its siblings: {why}"),
        }
    }
}

/// A candidate that did not fuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotFused {
    /// The candidate in the final graph (the node that stayed on its own, or the node it ended in).
    pub node: u32,
    /// Its op name when it was rejected.
    pub op: String,
    /// Which fusion tried it.
    pub kind: FusionKind,
    /// Why not.
    pub reason: Reason,
}

/// What fused, and what could not and why. Node ids are ids of the final graph.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FusionReport {
    /// Fused nodes, in node order.
    pub fused: Vec<Fusion>,
    /// Candidates left unfused, with the reason.
    pub not_fused: Vec<NotFused>,
}

impl FusionReport {
    /// Fused nodes of one kind.
    pub fn of_kind(&self, kind: FusionKind) -> impl Iterator<Item = &Fusion> {
        self.fused.iter().filter(move |f| f.kind == kind)
    }

    /// Number of fused nodes of one kind.
    pub fn count(&self, kind: FusionKind) -> usize {
        self.of_kind(kind).count()
    }

    /// Rejections whose reason matches `pred`.
    pub fn rejected(&self, pred: impl Fn(&Reason) -> bool) -> usize {
        self.not_fused.iter().filter(|n| pred(&n.reason)).count()
    }

    /// Renumbers node ids after a pass: `map[old]` is the new id of node `old` (or of the node
    /// that absorbed it).
    pub(crate) fn remap(&mut self, map: &[u32]) {
        for f in &mut self.fused {
            f.node = map[f.node as usize];
        }
        for n in &mut self.not_fused {
            n.node = map[n.node as usize];
        }
        self.fused.sort_by_key(|f| f.node);
    }

    /// Adds a rejection (the same node and reason are recorded once).
    pub(crate) fn reject(&mut self, node: usize, op: &str, kind: FusionKind, reason: Reason) {
        let n = NotFused { node: node as u32, op: op.to_string(), kind, reason };
        if !self.not_fused.contains(&n) {
            self.not_fused.push(n);
        }
    }
}

impl fmt::Display for FusionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let matmuls = [FusionKind::StackedMatMul, FusionKind::CombinedMatMul];
        let ops: usize = self.fused.iter().filter(|r| !matmuls.contains(&r.kind)).map(|r| r.ops).sum();
        let stacked = match self.count(FusionKind::StackedMatMul) {
            0 => String::new(),
            c => format!(", {c} stacked matmuls"),
        };
        let stacked = match self.count(FusionKind::CombinedMatMul) {
            0 => stacked,
            c => format!("{stacked}, {c} combined matmuls"),
        };
        let stacked = match self.count(FusionKind::ReducePrologue) {
            0 => stacked,
            c => format!("{stacked}, {c} reduction prologues"),
        };
        writeln!(
            f,
            "fusion: {} elementwise regions, {} matmul epilogues, {} norm prologues{stacked} ({ops} elementwise ops fused)",
            self.count(FusionKind::Elementwise),
            self.count(FusionKind::MatMulEpilogue),
            self.count(FusionKind::NormPrologue),
        )?;
        for r in &self.fused {
            writeln!(f, "  fused %{}: {}, {} ops, {} inputs", r.node, r.kind, r.ops, r.inputs)?;
        }
        for n in &self.not_fused {
            writeln!(f, "  not fused %{} ({}) for {}: {}", n.node, n.op, n.kind, n.reason)?;
        }
        Ok(())
    }
}
