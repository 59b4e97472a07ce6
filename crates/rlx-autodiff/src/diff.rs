//! Forward and reverse mode over a graph, driven by the rules on each op (`OpDef::jvp`,
//! `OpDef::vjp`); ops without a rule are linear (applied to tangents) or differentiate through
//! their decomposition.

use rlx_ir::ops::rules::{self, zeros_like};
use rlx_ir::{Error, Graph, NodeId, OpTraits, Result};
use std::collections::HashMap;
use std::ops::Range;

/// The transforms as control-flow rules need them for their bodies (`ops::control::Transforms`).
pub(crate) struct Ad;

impl rlx_ir::ops::control::Transforms for Ad {
    fn jvp(&self, g: &Graph, wrt: &[usize]) -> Result<Graph> {
        let inputs = g.inputs();
        let names: Vec<&str> = wrt.iter().filter_map(|&k| inputs.get(k).map(|(_, n)| *n)).collect();
        crate::api::jvp(g, &names)
    }
    fn vjp(&self, g: &Graph, wrt: &[usize]) -> Result<Graph> {
        let inputs = g.inputs();
        let ids: Vec<NodeId> = wrt.iter().filter_map(|&k| inputs.get(k).map(|(id, _)| *id)).collect();
        crate::api::vjp(g, &ids)
    }
    fn vmap(&self, g: &Graph, batched: &[usize], size: usize) -> Result<Graph> {
        let inputs = g.inputs();
        let names: Vec<&str> = batched.iter().filter_map(|&k| inputs.get(k).map(|(_, n)| *n)).collect();
        crate::batch::vmap(g, &names, size)
    }
}

/// Whether the transforms treat node `id` as differentiable (a float value of a differentiable op).
pub(crate) fn differentiable(g: &Graph, id: NodeId) -> bool {
    g.node(id).is_some_and(|n| n.ty.dtype.is_float() && !n.op.def().traits().contains(OpTraits::NON_DIFFERENTIABLE))
}

fn no_rule(transform: &'static str, g: &Graph, id: NodeId) -> Error {
    let op = g.node(id).map(|n| n.op.def().name().to_string()).unwrap_or_default();
    Error::Transform {
        transform,
        op,
        node: id.0,
        reason: format!("the op has no {transform} rule and no decomposition"),
    }
}

/// Propagates tangents through nodes `range` of `g` (appending the tangent nodes to `g`).
/// `tan` maps a node to its tangent; absent means zero.
pub(crate) fn push_tangents(g: &mut Graph, range: Range<usize>, tan: &mut HashMap<NodeId, NodeId>) -> Result<()> {
    for i in range {
        let id = NodeId(i as u32);
        let node = g.nodes()[i].clone();
        if node.inputs.is_empty() || !differentiable(g, id) {
            continue;
        }
        let ts: Vec<Option<NodeId>> =
            node.inputs.iter().map(|x| tan.get(x).copied().filter(|_| differentiable(g, *x))).collect();
        if ts.iter().all(Option::is_none) {
            continue;
        }
        let def = node.op.def();
        let nested = def.nested().and_then(|n| n.jvp_nested(g, &node.inputs, &ts, id, &Ad));
        let t = if let Some(t) = nested {
            t?
        } else if let Some(t) = def.jvp(g, &node.inputs, &ts, id) {
            t
        } else if def.traits().contains(OpTraits::LINEAR) {
            // A linear op applied to the tangents (zeros where absent; index inputs stay primal).
            let mut ins = vec![];
            for (&x, t) in node.inputs.iter().zip(&ts) {
                ins.push(if g.dtype(x).is_float() { rules::or_zeros(g, *t, x) } else { x });
            }
            g.try_add(node.op.clone(), &ins)?
        } else {
            let start = g.len();
            let Some(d) = def.decompose(g, &node.inputs) else { return Err(no_rule("jvp", g, id)) };
            let end = g.len();
            push_tangents(g, start..end, tan)?;
            match tan.get(&d) {
                Some(&t) => t,
                None => continue,
            }
        };
        tan.insert(id, t);
    }
    Ok(())
}

/// Pulls cotangents back through nodes `range` of `g` in reverse (appending nodes to `g`).
/// `ct` maps a node to its accumulated cotangent; absent means zero.
pub(crate) fn pull_cotangents(g: &mut Graph, range: Range<usize>, ct: &mut HashMap<NodeId, NodeId>) -> Result<()> {
    let lo = range.start;
    for i in range.rev() {
        let id = NodeId(i as u32);
        let Some(&c) = ct.get(&id) else { continue };
        let node = g.nodes()[i].clone();
        if node.inputs.is_empty() || !differentiable(g, id) {
            continue;
        }
        let def = node.op.def();
        let nested = match def.nested() {
            Some(n) => {
                // Other results of the same loop whose cotangents are complete are pulled back
                // with this one, in one reverse loop.
                let sibs = siblings(g, i, lo, ct, n);
                let joint = if sibs.is_empty() {
                    None
                } else {
                    let mut results = vec![(node.op.clone(), c)];
                    results.extend(sibs.iter().map(|&j| (g.nodes()[j].op.clone(), ct[&NodeId(j as u32)])));
                    n.vjp_joint(g, &node.inputs, id, &results, &Ad)
                };
                match joint {
                    Some(r) => {
                        for j in sibs {
                            ct.remove(&NodeId(j as u32));
                        }
                        Some(r)
                    }
                    None => n.vjp_nested(g, &node.inputs, id, c, &Ad),
                }
            }
            None => None,
        }
        .transpose()?;
        let Some(cts) = nested.or_else(|| def.vjp(g, &node.inputs, id, c)) else {
            let start = g.len();
            let Some(d) = def.decompose(g, &node.inputs) else { return Err(no_rule("vjp", g, id)) };
            let end = g.len();
            accumulate(g, ct, d, c);
            pull_cotangents(g, start..end, ct)?;
            continue;
        };
        for (&x, cx) in node.inputs.iter().zip(cts) {
            if let Some(cx) = cx
                && differentiable(g, x)
            {
                accumulate(g, ct, x, cx);
            }
        }
    }
    Ok(())
}

/// Nodes before `i` (from `lo`) that `n` says are other results of node `i`'s op on the same
/// operands and whose cotangents are complete: every user comes after `i`, so was pulled back.
fn siblings(
    g: &Graph,
    i: usize,
    lo: usize,
    ct: &HashMap<NodeId, NodeId>,
    n: &dyn rlx_ir::ops::control::NestedRules,
) -> Vec<usize> {
    let node = &g.nodes()[i];
    (lo..i)
        .filter(|&j| {
            let id = NodeId(j as u32);
            let m = &g.nodes()[j];
            m.inputs == node.inputs
                && ct.contains_key(&id)
                && differentiable(g, id)
                && n.joins(&m.op)
                && !g.nodes()[j + 1..i].iter().any(|u| u.inputs.contains(&id))
        })
        .collect()
}

fn accumulate(g: &mut Graph, ct: &mut HashMap<NodeId, NodeId>, x: NodeId, c: NodeId) {
    let v = match ct.get(&x) {
        Some(&old) => g.add(old, c),
        None => c,
    };
    ct.insert(x, v);
}

/// The tangent (or cotangent) of `x`, zeros when it has none.
pub(crate) fn get_or_zeros(g: &mut Graph, m: &HashMap<NodeId, NodeId>, x: NodeId) -> NodeId {
    match m.get(&x) {
        Some(&t) => t,
        None => zeros_like(g, x),
    }
}
