//! The compile pipeline: simplify, legalize for the backend, simplify again, fuse, plan memory.
//! `RLX_DUMP=dir` writes the graph text after every stage; `RLX_FUSION_REPORT=1` prints the
//! fusion report (what fused, and what could not and why) on every compile.

use crate::engine::RuleSet;
use crate::engine::{RewriteStats, rewrite};
use crate::fuse::{fuse_elementwise, fuse_matmul_epilogues};
use crate::fuse_norm::fuse_norm_prologues;
use crate::memory::{MemoryPlan, fused_in_place, plan};
use crate::merge_matmul::merge_sibling_matmuls;
use crate::report::{FusionKind, FusionReport};
use crate::rules::{MATMUL, SIMPLIFY};
use rlx_driver::{Backend, DispatchReport, legalize};
use rlx_ir::{Error, Graph, Result};
use std::fmt;
use std::path::PathBuf;

/// Which float precision the compiled graph computes in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PrecisionPolicy {
    /// As built (no casts inserted).
    #[default]
    F32,
    /// Contractions (matmul, attention, conv) and elementwise math in f16; reductions, norms
    /// and softmax in f32 (see `precision`).
    F16,
    /// As `F16`, in bf16.
    BF16,
    /// Contractions in bf16; everything else in f32.
    Auto,
}

/// Options of the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelineOptions {
    /// Float precision.
    pub precision: PrecisionPolicy,
    /// Run the rewrite rule sets.
    pub simplify: bool,
    /// Fuse elementwise regions.
    pub fuse: bool,
    /// Merge sibling matmuls into `stacked_matmul` (with `fuse`; `RLX_MERGE_MATMUL=0` also
    /// turns it off, for A/B runs).
    pub merge_matmuls: bool,
    /// Let attention and rope read `[batch, seq, heads, dim]` values in place on backends that
    /// honor it (`RLX_HEAD_LAYOUT=0` also turns it off, for A/B runs).
    pub head_layout: bool,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            precision: PrecisionPolicy::F32,
            simplify: true,
            fuse: true,
            merge_matmuls: true,
            head_layout: true,
        }
    }
}

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
    /// The memory plan of the final graph (with the CPU's in-place rule).
    pub memory: MemoryPlan,
}

impl fmt::Display for CompileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "compile pipeline:")?;
        for s in &self.stages {
            writeln!(f, "  {:<12} {:>5} -> {:>5} nodes  {}", s.name, s.nodes_before, s.nodes_after, s.detail)?;
        }
        write!(f, "{}", self.fusion)?;
        writeln!(f, "{}", self.memory)
    }
}

fn stats_detail(s: &RewriteStats) -> String {
    let mut parts: Vec<String> = s.fired.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    if s.cse_merged > 0 {
        parts.push(format!("cse:{}", s.cse_merged));
    }
    parts.join(" ")
}

/// Writes stage graphs when `RLX_DUMP` names a directory.
struct Dumper {
    dir: Option<PathBuf>,
    count: usize,
}

impl Dumper {
    fn from_env() -> Self {
        Dumper { dir: std::env::var_os("RLX_DUMP").filter(|d| !d.is_empty()).map(PathBuf::from), count: 0 }
    }

    fn dump(&mut self, stage: &str, g: &Graph) -> Result<()> {
        self.count += 1;
        self.write(g.name(), &format!("{:02}.{stage}.rlx", self.count - 1), &g.to_text())
    }

    /// Writes `text` as `<graph>.<suffix>` in the dump directory.
    fn write(&self, graph: &str, suffix: &str, text: &str) -> Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let fail = |e: std::io::Error| Error::eval("RLX_DUMP", format!("cannot write to {}: {e}", dir.display()));
        std::fs::create_dir_all(dir).map_err(fail)?;
        let name: String = graph.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        std::fs::write(dir.join(format!("{name}.{suffix}")), text).map_err(fail)
    }
}

/// Whether the backend runs f32 attention natively (then the attention pattern is worth forming).
pub fn supports_attention(backend: &dyn Backend) -> bool {
    let q = rlx_ir::Shape::new(&[1, 2, 4, 8], rlx_ir::DType::F32);
    let node = rlx_ir::Node {
        op: rlx_ir::ops::Attention::new(rlx_ir::ops::MaskKind::None, 1.0).into(),
        inputs: vec![],
        ty: q.clone(),
    };
    backend.supports(&node, &[&q, &q, &q])
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

/// Compiles `g` for `backend` with the default options and `precision`.
pub fn compile_pipeline(g: Graph, backend: &dyn Backend, precision: PrecisionPolicy) -> Result<(Graph, CompileReport)> {
    compile_with(g, backend, PipelineOptions { precision, ..Default::default() })
}

/// The pipeline with explicit options. The result is verified, fully supported by `backend`
/// (or an `Unsupported` error carrying the dispatch report), and planned.
pub fn compile_with(g: Graph, backend: &dyn Backend, opts: PipelineOptions) -> Result<(Graph, CompileReport)> {
    g.verify()?;
    let mut dump = Dumper::from_env();
    let mut stages = vec![];
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
    let simplify = |cur: &mut Graph, name: &'static str, stages: &mut Vec<StageReport>, dump: &mut Dumper| {
        let (next, st) = rewrite(cur, &sets)?;
        stages.push(StageReport {
            name,
            nodes_before: st.nodes_before,
            nodes_after: st.nodes_after,
            detail: stats_detail(&st),
        });
        dump.dump(name, &next)?;
        *cur = next;
        Ok::<(), Error>(())
    };
    if opts.simplify {
        // Named patterns only before legalize: a decomposed attention is never re-formed.
        let mut with_patterns = sets.clone();
        with_patterns.extend(supports_attention(backend).then_some(crate::patterns::ATTENTION));
        let head_layout = opts.head_layout && std::env::var("RLX_HEAD_LAYOUT").map_or(true, |v| v != "0");
        with_patterns.extend((head_layout && honors_head_layout(backend)).then_some(crate::patterns::HEAD_LAYOUT));
        with_patterns.extend(
            crate::cross_entropy::supports_cross_entropy(backend)
                .then_some(crate::cross_entropy::SOFTMAX_CROSS_ENTROPY),
        );
        if with_patterns.len() > sets.len() {
            let (next, st) = rewrite(&cur, &with_patterns)?;
            stages.push(StageReport {
                name: "simplify",
                nodes_before: st.nodes_before,
                nodes_after: st.nodes_after,
                detail: stats_detail(&st),
            });
            dump.dump("simplify", &next)?;
            cur = next;
        } else {
            simplify(&mut cur, "simplify", &mut stages, &mut dump)?;
        }
    }
    let before = cur.len();
    let (legal, first) = legalize(&cur, backend)?;
    let decomposed: usize = first.ops.values().map(|d| d.decomposed).sum();
    stages.push(StageReport {
        name: "legalize",
        nodes_before: before,
        nodes_after: legal.len(),
        detail: format!("decomposed:{decomposed}"),
    });
    dump.dump("legalize", &legal)?;
    cur = legal;
    if opts.simplify {
        simplify(&mut cur, "simplify-2", &mut stages, &mut dump)?;
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
        let merge = opts.merge_matmuls && std::env::var("RLX_MERGE_MATMUL").map_or(true, |v| v != "0");
        let fused = if merge { merge_sibling_matmuls(&fused, &supports, &mut rep)? } else { fused };
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
        cur = fused;
        fusion = rep;
    }
    // The final graph must be fully native; this also gives the per-op counts.
    let (last, mut dispatch) = legalize(&cur, backend)?;
    if last.len() != cur.len() {
        return Err(Error::eval("compile_pipeline", "the optimized graph needed further decomposition"));
    }
    merge_decomposed(&mut dispatch, &first);
    let memory = plan(&cur, &fused_in_place)?;
    dump.dump("final", &cur)?;
    dump.write(cur.name(), "fusion.txt", &fusion.to_string())?;
    if std::env::var("RLX_FUSION_REPORT").is_ok_and(|v| v == "1") {
        eprintln!("{}: {fusion}", cur.name());
    }
    Ok((cur, CompileReport { stages, dispatch, fusion, memory }))
}
