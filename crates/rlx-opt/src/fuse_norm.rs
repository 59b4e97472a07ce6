//! Prologue fusion into norms: the elementwise region (or single op) that makes a layer_norm's
//! or rms_norm's input, when nothing else reads it, becomes part of one `fused_norm` node. The
//! residual add before a norm then runs row by row into the norm, and its buffer disappears.
//! Other reductions have no prologue kernel yet; the report says so for each candidate.

use crate::fuse::{admissible, as_program, candidate, emit_absorbing, op_count, use_counts};
use crate::report::{FusionKind, FusionReport, Reason};
use rlx_ir::ops::{Fused, FusedNorm, NormKind};
use rlx_ir::{Graph, Node, NodeId, Op, OpTraits, Result, Shape};
use std::collections::HashMap;

/// The norm kind and eps of a plain norm node.
fn norm_of(op: &Op) -> Option<(NormKind, f64)> {
    match op {
        Op::LayerNorm(o) => Some((NormKind::LayerNorm, o.eps)),
        Op::RmsNorm(o) => Some((NormKind::RmsNorm, o.eps)),
        _ => None,
    }
}

/// Fuses single-use elementwise producers into the norms that read them. `supports` says
/// whether the backend runs the `fused_norm` with these input types natively.
pub fn fuse_norm_prologues(
    g: &Graph,
    supports: &dyn Fn(&Node, &[&Shape]) -> bool,
    report: &mut FusionReport,
) -> Result<Graph> {
    let nodes = g.nodes();
    let uses = use_counts(g);
    let kind = FusionKind::NormPrologue;
    // norm node -> (producer, fused op, inputs)
    let mut plan: HashMap<usize, (usize, FusedNorm, Vec<NodeId>)> = HashMap::new();
    for (i, nd) in nodes.iter().enumerate() {
        let Some(&x) = nd.inputs.first() else { continue };
        let xn = &nodes[x.index()];
        if !candidate(xn) {
            continue;
        }
        let traits = nd.op.def().traits();
        let Some((norm, eps)) = norm_of(&nd.op) else {
            if traits.intersects(OpTraits::REDUCTION | OpTraits::NORMALIZATION) && uses[x.index()] == 1 {
                let reason = Reason::ConsumerIsReduction(nd.op.def().name().to_string());
                report.reject(x.index(), xn.op.def().name(), kind, reason);
            }
            continue;
        };
        if uses[x.index()] != 1 {
            // The residual stream: the sum is read again later, so it is stored anyway.
            report.reject(x.index(), xn.op.def().name(), kind, Reason::MultipleConsumers(uses[x.index()]));
            continue;
        }
        let Some(program) = as_program(xn) else { continue };
        let op = FusedNorm { prologue: Fused { program }, norm, eps };
        let mut ins = xn.inputs.clone();
        ins.extend_from_slice(&nd.inputs[1..]);
        if !admissible(&op, &ins, nd, nodes, x.index(), kind, supports, report) {
            continue;
        }
        plan.insert(i, (x.index(), op, ins));
    }
    emit_absorbing(g, &plan, |x, _| op_count(&nodes[x]), kind, report)
}
