//! Prologue fusion into reductions: the elementwise region (or single op) that makes a sum, mean,
//! max, min or prod's input, when nothing else reads it, becomes one `fused_reduce` node
//! (`mean(x * x)`, `sum(exp(x - m))`): the region is evaluated inline while reducing and its
//! buffer disappears. Reductions over trailing axes (rows) fuse; the report says why others not.

use crate::fuse::{admissible, as_program, candidate, emit_absorbing, op_count, use_counts};
use crate::report::{FusionKind, FusionReport, Reason};
use rlx_ir::ops::{Fused, FusedReduce};
use rlx_ir::shape::normalize_axes;
use rlx_ir::{Graph, Node, NodeId, Op, Result, Shape};
use std::collections::HashMap;

/// Whether the (normalized, sorted) axes are the last `axes.len()` axes of a rank-`rank` value.
pub fn trailing(axes: &[usize], rank: usize) -> bool {
    !axes.is_empty() && axes.iter().enumerate().all(|(i, &a)| a == rank - axes.len() + i)
}

/// Fuses single-use elementwise producers into the plain reductions that read them. `supports`
/// says whether the backend runs the `fused_reduce` with these input types natively.
pub fn fuse_reduce_prologues(
    g: &Graph,
    supports: &dyn Fn(&Node, &[&Shape]) -> bool,
    report: &mut FusionReport,
) -> Result<Graph> {
    let nodes = g.nodes();
    let uses = use_counts(g);
    let kind = FusionKind::ReducePrologue;
    // reduction node -> (producer, fused op, inputs)
    let mut plan: HashMap<usize, (usize, FusedReduce, Vec<NodeId>)> = HashMap::new();
    for (i, nd) in nodes.iter().enumerate() {
        let Op::Reduce(r) = &nd.op else { continue };
        let x = nd.inputs[0];
        let xn = &nodes[x.index()];
        if !candidate(xn) {
            continue;
        }
        let name = xn.op.def().name();
        if uses[x.index()] != 1 {
            report.reject(x.index(), name, kind, Reason::MultipleConsumers(uses[x.index()]));
            continue;
        }
        let rank = xn.ty.rank();
        let mut axes = normalize_axes(&r.axes, rank).unwrap_or_default();
        axes.sort_unstable();
        if !trailing(&axes, rank) {
            let what = format!("{} over non-trailing axes {axes:?} of {}", r.kind.name(), xn.ty);
            report.reject(x.index(), name, kind, Reason::ConsumerIsReduction(what));
            continue;
        }
        let Some(program) = as_program(xn) else { continue };
        let op = FusedReduce { prologue: Fused { program }, reduce: r.clone() };
        let ins = xn.inputs.clone();
        if !admissible(&op, &ins, nd, nodes, x.index(), kind, supports, report) {
            continue;
        }
        plan.insert(i, (x.index(), op, ins));
    }
    emit_absorbing(g, &plan, |x, _| op_count(&nodes[x]), kind, report)
}
