//! Legalization: decompose what a backend lacks (or what the dispatch policy says to) until
//! everything is supported, and report it.

use crate::{Backend, CompileOptions};
use rlx_ir::{Error, Graph, NodeId, Op, Result, Shape};
use std::collections::BTreeMap;
use std::fmt;

/// How one op name was dispatched, counted over the graph.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpDispatch {
    /// Nodes run by a native kernel.
    pub native: usize,
    /// Nodes replaced by their decomposition into primitives (the "common IR"): the backend
    /// lacks a kernel, or the dispatch policy asked for it.
    pub decomposed: usize,
    /// Nodes the optimizer's rewrites and fusion removed (folded, merged into a pattern or a
    /// fused region); counted by the compile pipeline, zero from `legalize` alone.
    pub rewritten: usize,
    /// Nodes with neither, with their types (`f32[2,3] <- f16[2,3]`).
    pub missing: Vec<String>,
}

/// Per op: native / decomposed / missing, for one backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DispatchReport {
    /// Backend name.
    pub backend: String,
    /// By op name.
    pub ops: BTreeMap<String, OpDispatch>,
}

impl DispatchReport {
    /// True when nothing is missing.
    pub fn is_complete(&self) -> bool {
        self.ops.values().all(|d| d.missing.is_empty())
    }
}

impl fmt::Display for DispatchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "dispatch report for backend `{}`:", self.backend)?;
        writeln!(f, "  {:<16} {:>7} {:>10} {:>10} {:>8}", "op", "native", "common-ir", "rewritten", "missing")?;
        for (name, d) in &self.ops {
            writeln!(
                f,
                "  {:<16} {:>7} {:>10} {:>10} {:>8}",
                name,
                d.native,
                d.decomposed,
                d.rewritten,
                d.missing.len()
            )?;
            for m in &d.missing {
                writeln!(f, "      missing: {name} {m}")?;
            }
        }
        Ok(())
    }
}

/// Rewrites `g` so every node is natively supported by `backend`, decomposing composites
/// (repeatedly, for composites of composites) under the dispatch policy of
/// `CompileOptions::default()` (`RLX_KERNEL_DISPATCH`). Unsupported leftovers are an
/// `Unsupported` error carrying the report.
pub fn legalize(g: &Graph, backend: &dyn Backend) -> Result<(Graph, DispatchReport)> {
    legalize_with(g, backend, &CompileOptions::default())
}

/// As `legalize`, under `opts`'s dispatch policy: `Common` (or a kind in `force_common`)
/// decomposes a composite even where the backend runs it natively; a kind in `force_native` is
/// never decomposed, so without a native kernel it is reported missing.
pub fn legalize_with(g: &Graph, backend: &dyn Backend, opts: &CompileOptions) -> Result<(Graph, DispatchReport)> {
    g.verify()?;
    let mut report = DispatchReport { backend: backend.name().to_string(), ops: BTreeMap::new() };
    let mut cur = g.clone();
    for _round in 0..16 {
        let (next, changed) = legalize_once(&cur, backend, opts, &mut report)?;
        cur = next;
        if !changed {
            break;
        }
    }
    // Count what remains: native or missing.
    for n in cur.nodes() {
        let ins: Vec<&Shape> = n.inputs.iter().map(|x| &cur.nodes()[x.index()].ty).collect();
        let entry = report.ops.entry(n.op.def().name().to_string()).or_default();
        if is_fed(&n.op) || backend.supports(n, &ins) {
            entry.native += 1;
        } else {
            let tys: Vec<String> = ins.iter().map(|s| s.to_string()).collect();
            let forced = !opts.may_decompose(n.op.kind());
            let why = match backend.missing_reason(n, &ins) {
                Some(r) => format!(": {r}"),
                None if forced => ": kept native by CompileOptions::force_native".into(),
                None => String::new(),
            };
            entry.missing.push(format!("{} <- ({}){why}", n.ty, tys.join(", ")));
        }
    }
    if !report.is_complete() {
        let missing: Vec<String> =
            report.ops.iter().flat_map(|(name, d)| d.missing.iter().map(move |m| format!("`{name}` {m}"))).collect();
        return Err(Error::Unsupported {
            backend: backend.name().into(),
            missing: missing.join("; "),
            report: report.to_string(),
        });
    }
    cur.verify()?;
    Ok((cur, report))
}

fn is_fed(op: &Op) -> bool {
    matches!(op, Op::Input(_) | Op::Param(_))
}

/// One pass: copy supported nodes, expand unsupported ones that have a decomposition.
fn legalize_once(
    g: &Graph,
    backend: &dyn Backend,
    opts: &CompileOptions,
    report: &mut DispatchReport,
) -> Result<(Graph, bool)> {
    let mut out = Graph::new(g.name());
    let mut map: Vec<NodeId> = Vec::with_capacity(g.len());
    let mut changed = false;
    for n in g.nodes() {
        let ins: Vec<NodeId> = n.inputs.iter().map(|x| map[x.index()]).collect();
        let in_tys: Vec<&Shape> = n.inputs.iter().map(|x| &g.nodes()[x.index()].ty).collect();
        let kind = n.op.kind();
        let decompose = !is_fed(&n.op)
            && if backend.supports(n, &in_tys) { opts.decomposes(kind) } else { opts.may_decompose(kind) };
        if decompose {
            let before = out.len();
            if let Some(id) = n.op.def().decompose(&mut out, &ins) {
                out.check()?;
                if out.shape(id) != Some(&n.ty) {
                    return Err(Error::eval(
                        n.op.def().name(),
                        format!(
                            "decomposition produced {} instead of {}",
                            out.shape(id).map(|s| s.to_string()).unwrap_or_default(),
                            n.ty
                        ),
                    ));
                }
                if out.len() > before {
                    report.ops.entry(n.op.def().name().to_string()).or_default().decomposed += 1;
                    changed = true;
                }
                map.push(id);
                continue;
            }
        }
        map.push(out.try_add(n.op.clone(), &ins)?);
    }
    out.set_outputs(g.outputs().iter().map(|o| map[o.index()]).collect());
    Ok((out, changed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Executable;
    use rlx_ir::{DType, Node};

    /// Runs only f32 nodes; says why for the rest.
    struct F32Only;

    impl Backend for F32Only {
        fn name(&self) -> &'static str {
            "f32-only"
        }
        fn supports(&self, node: &Node, _: &[&Shape]) -> bool {
            node.ty.dtype == DType::F32
        }
        fn missing_reason(&self, node: &Node, _: &[&Shape]) -> Option<String> {
            Some(format!("device lacks {}", node.ty.dtype))
        }
        fn compile(&self, _: &crate::CompileRequest<'_>) -> Result<Box<dyn Executable>> {
            Err(Error::eval("compile", "not in this test"))
        }
    }

    #[test]
    fn missing_nodes_carry_the_backends_reason() {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[3], DType::F16));
        let y = g.exp(x);
        g.set_outputs(vec![y]);
        match legalize(&g, &F32Only) {
            Err(Error::Unsupported { missing, report, .. }) => {
                assert_eq!(missing, "`exp` f16[3] <- (f16[3]): device lacks f16");
                assert!(report.contains("missing: exp f16[3] <- (f16[3]): device lacks f16"), "{report}");
            }
            other => panic!("expected Unsupported, got {:?}", other.map(|_| ())),
        }
    }
}
