//! `CompileOptions`: everything a compile may be told, in one value that the pipeline, the
//! compile cache and the backend all receive.

use crate::config::config;
use rlx_ir::OpKind;
use std::path::PathBuf;

/// Which float precision the compiled graph computes in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PrecisionPolicy {
    /// As built (no casts inserted).
    #[default]
    F32,
    /// Contractions (matmul, attention, conv) and elementwise math in f16; reductions, norms
    /// and softmax in f32.
    F16,
    /// As `F16`, in bf16.
    BF16,
    /// Contractions in bf16; everything else in f32.
    Auto,
}

/// How legalization chooses between a backend's native kernel and an op's decomposition into
/// primitives (the "common IR").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum DispatchPolicy {
    /// A native kernel where the backend has one; the decomposition otherwise.
    #[default]
    PreferNative,
    /// Every composite with a decomposition is decomposed, native kernel or not: the graph the
    /// backend gets is primitives only (to check a fused kernel against its definition, or to
    /// run on a backend whose composite kernels are suspect).
    Common,
}

/// How a backend that can run a graph more than one way runs it (MLX). Backends with one way
/// ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExecutionMode {
    /// Build the whole computation, evaluate once at the end.
    Lazy,
    /// Evaluate after every op (easiest to debug, slowest).
    Eager,
    /// Trace once into the backend's own compiled function, then call that.
    Compiled,
}

/// What reports a compile prints on stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Reports {
    /// The dispatch report (native / common-ir / rewritten / missing per op).
    pub dispatch: bool,
    /// The pipeline report (stages, fusion, memory plan).
    pub compile: bool,
    /// What fused and what could not.
    pub fusion: bool,
    /// One line per compile (backend, nodes, cache hit or miss, time).
    pub verbose: bool,
}

/// Options of one compile. `CompileOptions::default()` takes its defaults from the environment
/// (`RLX_KERNEL_DISPATCH`, `RLX_DUMP`, the report switches, ...: see `docs/configuration.md`);
/// `CompileOptions::builtin()` ignores it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// Float precision.
    pub precision: PrecisionPolicy,
    /// Native kernels or decompositions.
    pub dispatch: DispatchPolicy,
    /// Op kinds always decomposed, whatever `dispatch` says.
    pub force_common: Vec<OpKind>,
    /// Op kinds never decomposed: without a native kernel they are reported missing (to make sure
    /// a hot op runs the backend's kernel, or fail).
    pub force_native: Vec<OpKind>,
    /// Run the rewrite rule sets.
    pub simplify: bool,
    /// Fuse elementwise regions, matmul epilogues and norm prologues.
    pub fuse: bool,
    /// Merge sibling matmuls into `stacked_matmul` (with `fuse`).
    pub merge_matmuls: bool,
    /// Let attention and rope read `[batch, seq, heads, dim]` values in place on backends whose
    /// capabilities prefer it.
    pub head_layout: bool,
    /// Write the graph after every stage (and backend lowerings) into this directory.
    pub dump: Option<PathBuf>,
    /// Reports printed on stderr.
    pub reports: Reports,
    /// The most host threads this graph's kernels run on at once (None: the backend's whole
    /// pool), so that several graphs can share the cores.
    pub threads: Option<usize>,
    /// How a multi-mode backend runs the graph (None: the backend's default).
    pub mode: Option<ExecutionMode>,
    /// Use the compile cache (in memory, and on disk under `cache_dir`).
    pub cache: bool,
    /// The on-disk compile cache's directory.
    pub cache_dir: Option<PathBuf>,
}

impl Default for CompileOptions {
    fn default() -> Self {
        let c = config();
        let c = &c.compile;
        CompileOptions {
            dispatch: c.dispatch,
            merge_matmuls: c.merge_matmuls,
            head_layout: c.head_layout,
            dump: c.dump.clone(),
            reports: Reports {
                dispatch: c.dispatch_report,
                compile: c.compile_report,
                fusion: c.fusion_report,
                verbose: c.verbose,
            },
            cache_dir: c.cache_dir.clone(),
            ..Self::builtin()
        }
    }
}

impl CompileOptions {
    /// The built-in defaults, whatever the environment says.
    pub fn builtin() -> Self {
        CompileOptions {
            precision: PrecisionPolicy::F32,
            dispatch: DispatchPolicy::PreferNative,
            force_common: vec![],
            force_native: vec![],
            simplify: true,
            fuse: true,
            merge_matmuls: true,
            head_layout: true,
            dump: None,
            reports: Reports::default(),
            threads: None,
            mode: None,
            cache: true,
            cache_dir: None,
        }
    }

    /// These options with `precision`.
    pub fn with_precision(mut self, precision: PrecisionPolicy) -> Self {
        self.precision = precision;
        self
    }

    /// These options with `dispatch`.
    pub fn with_dispatch(mut self, dispatch: DispatchPolicy) -> Self {
        self.dispatch = dispatch;
        self
    }

    /// Whether legalization decomposes `kind` even where the backend runs it natively.
    pub fn decomposes(&self, kind: OpKind) -> bool {
        !self.force_native.contains(&kind)
            && (self.dispatch == DispatchPolicy::Common || self.force_common.contains(&kind))
    }

    /// Whether legalization may decompose `kind` when the backend lacks it.
    pub fn may_decompose(&self, kind: OpKind) -> bool {
        !self.force_native.contains(&kind)
    }

    /// The parts that change what a compile produces (for the compile cache's key): everything
    /// but the reports and the dump directory, which change only what is printed or written.
    pub fn fingerprint_text(&self) -> String {
        format!(
            "precision={:?} dispatch={:?} common={:?} native={:?} simplify={} fuse={} merge={} heads={} threads={:?} mode={:?}",
            self.precision,
            self.dispatch,
            self.force_common,
            self.force_native,
            self.simplify,
            self.fuse,
            self.merge_matmuls,
            self.head_layout,
            self.threads,
            self.mode
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_choose_decompositions() {
        let mut o = CompileOptions::builtin();
        assert!(!o.decomposes(OpKind::Softmax) && o.may_decompose(OpKind::Softmax));
        o.force_common.push(OpKind::Softmax);
        assert!(o.decomposes(OpKind::Softmax) && !o.decomposes(OpKind::Attention));
        o.dispatch = DispatchPolicy::Common;
        o.force_native.push(OpKind::Attention);
        assert!(!o.decomposes(OpKind::Attention) && !o.may_decompose(OpKind::Attention));
        assert!(o.decomposes(OpKind::LayerNorm));
    }

    #[test]
    fn reports_do_not_change_the_fingerprint() {
        let a = CompileOptions::builtin();
        let mut b = a.clone();
        b.reports.dispatch = true;
        b.dump = Some("/tmp/x".into());
        assert_eq!(a.fingerprint_text(), b.fingerprint_text());
        assert_ne!(a.fingerprint_text(), a.clone().with_precision(PrecisionPolicy::BF16).fingerprint_text());
    }
}
