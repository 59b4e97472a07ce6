//! The compile pipeline: simplify, legalize for the backend, simplify again, fuse, plan memory.
//! `CompileOptions::dump` (`RLX_DUMP=dir`) writes the graph text after every stage;
//! `reports.fusion` (`RLX_FUSION_REPORT=1`) prints the fusion report (what fused, and what could
//! not and why) on every compile.

use crate::engine::RuleSet;
use crate::engine::{RewriteStats, rewrite};
use crate::fuse::{fuse_elementwise, fuse_matmul_epilogues};
use crate::fuse_norm::fuse_norm_prologues;
use crate::memory::{MemoryPlan, plan_updates};
use crate::merge_matmul::merge_sibling_matmuls;
use crate::report::{FusionKind, FusionReport};
use crate::rules::{MATMUL, SIMPLIFY};
use rlx_driver::{
    Backend, CompileOptions, DispatchPolicy, DispatchReport, ParamUpdate, PrecisionPolicy, legalize_with,
};
use rlx_ir::{Error, Graph, OpKind, Result};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// One stage: its name, node counts and what fired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageReport {
    /// Stage name (`simplify`, `legalize`, `fuse`, ...).
    pub name: &'static str,
    /// Nodes before the stage.
    pub nodes_before: usize,
    /// Nodes after the stage.
    pub nodes_after: usize,
    /// Rules fired (rule name: count), for rewrite stages.
    pub detail: String,
}

/// Everything the pipeline reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileReport {
    /// Stages in order.
    pub stages: Vec<StageReport>,
    /// Per op: native / decomposed / missing.
    pub dispatch: DispatchReport,
    /// What fused.
    pub fusion: FusionReport,
    /// The memory plan of the final graph (`rlx_driver::memory::plan_updates`): the one the
    /// backend receives.
    pub memory: MemoryPlan,
    /// Bytes of the arenas of the loop and branch bodies the backend runs natively
    /// (`rlx_driver::memory::body_arena_bytes`): a scan's per-step values live there.
    pub body_bytes: usize,
}

impl CompileReport {
    /// The compile's peak arena bytes: the graph's arena (stacked loop outputs included) plus
    /// every loop body's.
    pub fn peak_arena_bytes(&self) -> usize {
        self.memory.arena_bytes + self.body_bytes
    }
}

impl fmt::Display for CompileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "compile pipeline:")?;
        for s in &self.stages {
            writeln!(f, "  {:<12} {:>5} -> {:>5} nodes  {}", s.name, s.nodes_before, s.nodes_after, s.detail)?;
        }
        write!(f, "{}", self.fusion)?;
        writeln!(f, "{}", self.memory)?;
        writeln!(
            f,
            "peak arena bytes: {} (graph {} + loop bodies {})",
            self.peak_arena_bytes(),
            self.memory.arena_bytes,
            self.body_bytes
        )
    }
}

fn stats_detail(s: &RewriteStats) -> String {
    let mut parts: Vec<String> = s.fired.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    if s.cse_merged > 0 {
        parts.push(format!("cse:{}", s.cse_merged));
    }
    parts.join(" ")
}

/// Writes stage graphs when `CompileOptions::dump` names a directory.
struct Dumper {
    dir: Option<PathBuf>,
    count: usize,
}

impl Dumper {
    fn new(dir: Option<PathBuf>) -> Self {
        Dumper { dir, count: 0 }
    }

    fn dump(&mut self, stage: &str, g: &Graph) -> Result<()> {
        self.count += 1;
        self.write(g.name(), &format!("{:02}.{stage}.rlx", self.count - 1), &g.to_text())
    }

    /// Writes `text` as `<graph>.<suffix>` in the dump directory.
    fn write(&self, graph: &str, suffix: &str, text: &str) -> Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let fail = |e: std::io::Error| Error::eval("dump", format!("cannot write to {}: {e}", dir.display()));
        std::fs::create_dir_all(dir).map_err(fail)?;
        let name: String = graph.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        std::fs::write(dir.join(format!("{name}.{suffix}")), text).map_err(fail)
    }
}

/// Whether the backend runs f32 attention natively (then the attention pattern is worth forming).
pub fn supports_attention(backend: &dyn Backend) -> bool {
    let q = rlx_ir::Shape::new(&[1, 2, 4, 8], rlx_ir::DType::F32);
    backend.supports_op(rlx_ir::ops::Attention::new(rlx_ir::ops::MaskKind::None, 1.0).into(), q.clone(), &[&q, &q, &q])
}

/// Whether the backend's attention and rope kernels prefer `HeadLayout::Bshd` values (its
/// `Capabilities::head_layout`) and it runs attention natively: then the head transposes fold in.
pub fn honors_head_layout(backend: &dyn Backend) -> bool {
    backend.capabilities().head_layout == rlx_ir::ops::HeadLayout::Bshd && supports_attention(backend)
}

/// Whether the backend's matmul kernels honor `transpose_a` / `transpose_b` (its
/// `Capabilities::matmul_transpose_flags`; the table lookup cannot tell, since it keys on op
/// kind and dtypes).
pub fn honors_matmul_flags(backend: &dyn Backend) -> bool {
    backend.capabilities().matmul_transpose_flags
}

/// Adds the decomposition counts of an earlier legalization to a later report.
fn merge_decomposed(into: &mut DispatchReport, from: &DispatchReport) {
    for (name, d) in &from.ops {
        if d.decomposed > 0 {
            into.ops.entry(name.clone()).or_default().decomposed += d.decomposed;
        }
    }
}

/// Nodes per op name.
fn op_counts(g: &Graph) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for n in g.nodes() {
        *m.entry(n.op.def().name()).or_default() += 1;
    }
    m
}

/// Counts, as `rewritten`, the nodes of each op that a rewrite or fusion stage removed.
fn count_rewritten(into: &mut BTreeMap<&'static str, usize>, before: &Graph, after: &Graph) {
    let after = op_counts(after);
    for (name, n) in op_counts(before) {
        let left = after.get(name).copied().unwrap_or(0);
        if n > left {
            *into.entry(name).or_default() += n - left;
        }
    }
}

/// Compiles `g` for `backend` with the default options and `precision`.
pub fn compile_pipeline(g: Graph, backend: &dyn Backend, precision: PrecisionPolicy) -> Result<(Graph, CompileReport)> {
    compile_with(g, backend, &CompileOptions { precision, ..Default::default() })
}

/// The pipeline with explicit options, for a graph without state updates. The result is verified,
/// fully supported by `backend` (or an `Unsupported` error carrying the dispatch report), and
/// planned.
pub fn compile_with(g: Graph, backend: &dyn Backend, opts: &CompileOptions) -> Result<(Graph, CompileReport)> {
    optimize(g, backend, opts, &[]).map(|o| (o.graph, o.report))
}

/// What `optimize` returns.
#[derive(Debug, Clone)]
pub struct Optimized {
    /// The optimized, legalized graph.
    pub graph: Graph,
    /// The state updates, as indices of `graph`'s params and outputs.
    pub updates: Vec<ParamUpdate>,
    /// Stages, dispatch, fusion and the memory plan (made with the updates).
    pub report: CompileReport,
}

/// The whole pipeline: precision, simplify (with the named patterns the backend runs),
/// legalize under the dispatch policy, simplify again, fuse, and one memory plan. `updates` are
/// state updates of `g` (param and output indices in `g`'s order, as `Graph::lower_updates` makes
/// them); they are placed on their params' bytes where the plan allows it.
pub fn optimize(g: Graph, backend: &dyn Backend, opts: &CompileOptions, updates: &[ParamUpdate]) -> Result<Optimized> {
    g.verify()?;
    let named: Vec<(String, usize)> = updates
        .iter()
        .map(|u| {
            let name = g.params().get(u.param).map(|(_, n)| n.to_string());
            name.map(|n| (n, u.output)).ok_or_else(|| {
                Error::eval("optimize", format!("state update {u:?}: graph `{}` has no param #{}", g.name(), u.param))
            })
        })
        .collect::<Result<_>>()?;
    let mut dump = Dumper::new(opts.dump.clone());
    let mut stages = vec![];
    let mut rewritten = BTreeMap::new();
    dump.dump("input", &g)?;
    let mut cur = g;
    if opts.precision != PrecisionPolicy::F32 {
        let before = cur.len();
        let (next, st) = crate::precision::apply_precision(&cur, opts.precision)?;
        stages.push(StageReport {
            name: "precision",
            nodes_before: before,
            nodes_after: next.len(),
            detail: format!("{:?} lowered:{} casts:{}", opts.precision, st.lowered, st.casts),
        });
        dump.dump("precision", &next)?;
        cur = next;
    }
    // Matmul transpose flags are folded only for backends whose matmul kernels read them.
    let sets: Vec<RuleSet> =
        SIMPLIFY.iter().copied().filter(|s| s.name != MATMUL.name || honors_matmul_flags(backend)).collect();
    let simplify = |cur: &mut Graph,
                    name: &'static str,
                    sets: &[RuleSet],
                    stages: &mut Vec<StageReport>,
                    dump: &mut Dumper,
                    rewritten: &mut BTreeMap<&'static str, usize>| {
        let (next, st) = rewrite(cur, sets)?;
        stages.push(StageReport {
            name,
            nodes_before: st.nodes_before,
            nodes_after: st.nodes_after,
            detail: stats_detail(&st),
        });
        dump.dump(name, &next)?;
        count_rewritten(rewritten, cur, &next);
        *cur = next;
        Ok::<(), Error>(())
    };
    if opts.simplify {
        // Named patterns only before legalize (a decomposed attention is never re-formed), and
        // only for ops the dispatch policy lets run natively.
        let native = |kind: OpKind| !opts.decomposes(kind);
        let mut with_patterns = sets.clone();
        let attention = native(OpKind::Attention) && supports_attention(backend);
        with_patterns.extend(attention.then_some(crate::patterns::ATTENTION));
        with_patterns.extend(
            (attention && opts.head_layout && honors_head_layout(backend)).then_some(crate::patterns::HEAD_LAYOUT),
        );
        with_patterns.extend(
            (native(OpKind::SoftmaxCrossEntropy) && crate::cross_entropy::supports_cross_entropy(backend))
                .then_some(crate::cross_entropy::SOFTMAX_CROSS_ENTROPY),
        );
        simplify(&mut cur, "simplify", &with_patterns, &mut stages, &mut dump, &mut rewritten)?;
    }
    let before = cur.len();
    let (legal, first) = legalize_with(&cur, backend, opts)?;
    let decomposed: usize = first.ops.values().map(|d| d.decomposed).sum();
    stages.push(StageReport {
        name: "legalize",
        nodes_before: before,
        nodes_after: legal.len(),
        detail: format!("decomposed:{decomposed}"),
    });
    dump.dump("legalize", &legal)?;
    // Bodies the backend runs as loops or branches get the pipeline too (once per compile).
    cur = crate::bodies::optimize_bodies(&legal, backend, opts)?;
    if opts.simplify {
        simplify(&mut cur, "simplify-2", &sets, &mut stages, &mut dump, &mut rewritten)?;
    }
    let mut fusion = FusionReport::default();
    if opts.fuse {
        let before = cur.len();
        let supports = |n: &rlx_ir::Node, ins: &[&rlx_ir::Shape]| backend.supports(n, ins);
        let (fused, mut rep) = fuse_elementwise(&cur, &supports)?;
        let fused = fuse_matmul_epilogues(&fused, &supports, &mut rep)?;
        let fused = crate::fuse_reduce::fuse_reduce_prologues(&fused, &supports, &mut rep)?;
        let fused = fuse_norm_prologues(&fused, &supports, &mut rep)?;
        // After epilogue fusion: siblings carry their bias and activation into the stacked op.
        let fused = if opts.merge_matmuls { merge_sibling_matmuls(&fused, &supports, &mut rep)? } else { fused };
        stages.push(StageReport {
            name: "fuse",
            nodes_before: before,
            nodes_after: fused.len(),
            detail: format!(
                "regions:{} epilogues:{} prologues:{} stacked:{} combined:{}",
                rep.count(FusionKind::Elementwise),
                rep.count(FusionKind::MatMulEpilogue),
                rep.count(FusionKind::NormPrologue),
                rep.count(FusionKind::StackedMatMul),
                rep.count(FusionKind::CombinedMatMul)
            ),
        });
        dump.dump("fuse", &fused)?;
        count_rewritten(&mut rewritten, &cur, &fused);
        cur = fused;
        fusion = rep;
    }
    // The final graph must be fully native (what the pipeline formed included, whatever the
    // policy said of the input); this also gives the per-op counts.
    let check = CompileOptions { dispatch: DispatchPolicy::PreferNative, force_common: vec![], ..opts.clone() };
    let (last, mut dispatch) = legalize_with(&cur, backend, &check)?;
    if last.len() != cur.len() {
        return Err(Error::eval("compile_pipeline", "the optimized graph needed further decomposition"));
    }
    merge_decomposed(&mut dispatch, &first);
    for (name, n) in rewritten {
        dispatch.ops.entry(name.to_string()).or_default().rewritten += n;
    }
    let params = cur.params();
    let updates = named
        .iter()
        .map(|(name, output)| {
            let param = params.iter().position(|(_, n)| n == name).ok_or_else(|| {
                Error::eval(
                    "optimize",
                    format!("param `{name}` of a state update vanished from graph `{}`", cur.name()),
                )
            })?;
            Ok(ParamUpdate { param, output: *output })
        })
        .collect::<Result<Vec<_>>>()?;
    let memory = plan_updates(&cur, &updates)?;
    let body_bytes = rlx_driver::memory::body_arena_bytes(&cur, backend)?;
    dump.dump("final", &cur)?;
    dump.write(cur.name(), "fusion.txt", &fusion.to_string())?;
    if opts.reports.fusion {
        eprintln!("{}: {fusion}", cur.name());
    }
    Ok(Optimized { graph: cur, updates, report: CompileReport { stages, dispatch, fusion, memory, body_bytes } })
}
