//! The op x transform coverage table, derived from the rules each op actually has (run on every
//! op's samples), not written by hand.

use crate::batch::{BatchedBy, batch_node_how};
use crate::diff::{Ad, differentiable};
use rlx_ir::{Graph, NodeId, Op, OpTraits, Shape, testkit};
use std::collections::BTreeMap;

/// How each transform handles one op: "rule", "linear" (the op applied to tangents),
/// "forward-only" (reverse mode refused with an error, as for `while_loop` in JAX),
/// "decomposed", "loop" (unrolled batch), "zero (non-diff)" / "zero (int)" (zero tangents for
/// non-differentiable ops or integer samples), "n/a" (leaf) or "missing".
#[derive(Debug, Clone, Default)]
pub struct Coverage {
    /// Forward mode.
    pub jvp: String,
    /// Reverse mode.
    pub vjp: String,
    /// Batching.
    pub vmap: String,
    /// Samples the row was derived from.
    pub samples: usize,
}

fn merge(into: &mut String, v: &str) {
    if !into.split('+').any(|x| x == v) {
        if !into.is_empty() {
            into.push('+');
        }
        into.push_str(v);
    }
}

/// One row per op name (family members separately), over every sample in `Op::all_samples()`.
pub fn coverage() -> BTreeMap<String, Coverage> {
    let mut rows: BTreeMap<String, Coverage> = BTreeMap::new();
    for s in Op::all_samples() {
        let Ok((g, _)) = testkit::sample_graph(&s) else { continue };
        let out = g.outputs()[0];
        let def = s.op.def();
        let ins: Vec<NodeId> = g.nodes()[out.index()].inputs.clone();
        let row = rows.entry(def.name().to_string()).or_default();
        row.samples += 1;
        let float_in = ins.iter().any(|&x| differentiable(&g, x));
        let (j, v) = if ins.is_empty() {
            ("n/a", "n/a")
        } else if def.traits().contains(OpTraits::NON_DIFFERENTIABLE) {
            ("zero (non-diff)", "zero (non-diff)")
        } else if !differentiable(&g, out) || !float_in {
            ("zero (int)", "zero (int)")
        } else {
            let mut h = g.clone();
            let ts: Vec<Option<NodeId>> = ins.iter().map(|&x| g.dtype(x).is_float().then_some(x)).collect();
            let nested_j = def.nested().and_then(|n| n.jvp_nested(&mut h, &ins, &ts, out, &Ad));
            let j = if nested_j.is_some_and(|r| r.is_ok()) || def.jvp(&mut h, &ins, &ts, out).is_some() {
                "rule"
            } else if def.traits().contains(OpTraits::LINEAR) {
                "linear"
            } else if def.decompose(&mut h, &ins).is_some() {
                "decomposed"
            } else {
                "missing"
            };
            let mut h = g.clone();
            let nested_v = def.nested().and_then(|n| n.vjp_nested(&mut h, &ins, out, out, &Ad));
            let v = if matches!(nested_v, Some(Err(_))) {
                "forward-only"
            } else if nested_v.is_some() || def.vjp(&mut h, &ins, out, out).is_some() {
                "rule"
            } else if def.decompose(&mut h, &ins).is_some() {
                "decomposed"
            } else {
                "missing"
            };
            (j, v)
        };
        merge(&mut row.jvp, j);
        merge(&mut row.vjp, v);
        let b = if ins.is_empty() {
            "n/a".to_string()
        } else {
            let mut dst = Graph::new("vmap");
            let bins: Vec<NodeId> = ins
                .iter()
                .enumerate()
                .map(|(k, &x)| {
                    let s = g.shape(x).cloned().unwrap_or(Shape::scalar(rlx_ir::DType::F32));
                    let mut d = vec![2];
                    d.extend(s.fixed_dims().unwrap_or_default());
                    dst.input(&format!("b{k}"), Shape::new(&d, s.dtype))
                })
                .collect();
            match batch_node_how(&g, out, &mut dst, &bins, &vec![true; bins.len()], 2) {
                Ok((_, BatchedBy::Rule)) => "rule".into(),
                Ok((_, BatchedBy::Decomposed)) => "decomposed".into(),
                Ok((_, BatchedBy::Loop)) => "loop".into(),
                Err(e) => format!("error: {e}"),
            }
        };
        merge(&mut row.vmap, &b);
    }
    rows
}

/// The coverage table as markdown.
pub fn coverage_table() -> String {
    let mut s = String::from("| op | jvp | vjp | vmap | samples |\n|---|---|---|---|---|\n");
    for (name, c) in coverage() {
        s.push_str(&format!("| {name} | {} | {} | {} | {} |\n", c.jvp, c.vjp, c.vmap, c.samples));
    }
    s
}
