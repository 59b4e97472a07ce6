//! The public transforms: jvp, vjp, grad, grad_with_loss, hvp.

use crate::diff::{differentiable, get_or_zeros, pull_cotangents, push_tangents};
use rlx_ir::{Error, Graph, NodeId, Op, Result};
use std::collections::HashMap;

fn invalid(g: &Graph, reason: String) -> Error {
    Error::InvalidGraph { graph: g.name().to_string(), reason }
}

/// The input or param called `name`.
pub fn leaf(g: &Graph, name: &str) -> Result<NodeId> {
    let all: Vec<(NodeId, &str)> = g.inputs().into_iter().chain(g.params()).collect();
    all.iter().find(|(_, n)| *n == name).map(|(id, _)| *id).ok_or_else(|| Error::UnknownName {
        kind: "input or param",
        name: name.into(),
        known: all.iter().map(|(_, n)| n.to_string()).collect(),
    })
}

/// Transforms need static shapes: a dynamic dim left in the graph is an `UnboundDim` error.
pub(crate) fn require_static(g: &Graph, transform: &str) -> Result<()> {
    g.verify()?;
    match g.first_symbol() {
        Some((node, symbol)) => Err(Error::UnboundDim { symbol, context: format!("{transform} at node {node}") }),
        None => Ok(()),
    }
}

fn check_wrt(g: &Graph, transform: &str, wrt: NodeId) -> Result<()> {
    match g.node(wrt) {
        None => Err(invalid(g, format!("{transform}: wrt node {wrt} does not exist"))),
        Some(n) if !n.ty.dtype.is_float() => {
            Err(invalid(g, format!("{transform}: wrt node {wrt} has dtype {}; only floats are differentiable", n.ty)))
        }
        Some(_) => Ok(()),
    }
}

/// Forward mode: adds an input `tangent_<name>` (same type) per name in `wrt` (inputs or params);
/// outputs `[primal outputs..., tangent outputs...]`.
pub fn jvp(g: &Graph, wrt: &[&str]) -> Result<Graph> {
    require_static(g, "jvp")?;
    let mut out = g.clone();
    let n = out.len();
    let mut tan = HashMap::new();
    for name in wrt {
        let id = leaf(g, name)?;
        check_wrt(g, "jvp", id)?;
        let s = out.shape(id).cloned().unwrap_or_else(|| unreachable!("leaf exists"));
        let t = out.input(&format!("tangent_{name}"), s);
        tan.insert(id, t);
    }
    push_tangents(&mut out, 0..n, &mut tan)?;
    let mut outs = g.outputs().to_vec();
    for &o in g.outputs() {
        let t = get_or_zeros(&mut out, &tan, o);
        outs.push(t);
    }
    out.set_outputs(outs);
    out.verify()?;
    Ok(out)
}

/// Reverse mode for any outputs: adds an input `cotangent_<i>` per output; outputs
/// `[primal outputs..., vjp wrt_0, vjp wrt_1, ...]`.
pub fn vjp(g: &Graph, wrt: &[NodeId]) -> Result<Graph> {
    require_static(g, "vjp")?;
    let mut out = g.clone();
    let n = out.len();
    let mut seeds = vec![];
    for (i, &o) in g.outputs().iter().enumerate() {
        let s = out.shape(o).cloned().unwrap_or_else(|| unreachable!("verified"));
        seeds.push((o, out.input(&format!("cotangent_{i}"), s)));
    }
    backward(g, out, n, seeds, wrt, "vjp")
}

fn backward(
    g: &Graph,
    mut out: Graph,
    n: usize,
    seeds: Vec<(NodeId, NodeId)>,
    wrt: &[NodeId],
    name: &str,
) -> Result<Graph> {
    for &w in wrt {
        check_wrt(g, name, w)?;
    }
    let mut ct: HashMap<NodeId, NodeId> = HashMap::new();
    for (o, c) in seeds {
        if differentiable(&out, o) {
            let v = match ct.get(&o) {
                Some(&old) => out.add(old, c),
                None => c,
            };
            ct.insert(o, v);
        }
    }
    pull_cotangents(&mut out, 0..n, &mut ct)?;
    let mut outs = g.outputs().to_vec();
    for &w in wrt {
        outs.push(get_or_zeros(&mut out, &ct, w));
    }
    out.set_outputs(outs);
    out.verify()?;
    Ok(out)
}

/// Gradient of a scalar loss (the graph's one output, shape `[]` or `[1]`): keeps the inputs
/// and params and outputs `[loss, dloss/dwrt_0, ...]`.
pub fn grad_with_loss(g: &Graph, wrt: &[NodeId]) -> Result<Graph> {
    require_static(g, "grad")?;
    let [loss] = g.outputs() else {
        return Err(invalid(
            g,
            format!("grad needs exactly one output (the loss), the graph has {}", g.outputs().len()),
        ));
    };
    let s = g.shape(*loss).cloned().unwrap_or_else(|| unreachable!("verified"));
    if !s.dtype.is_float() || s.numel() != Some(1) || s.rank() > 1 {
        return Err(invalid(g, format!("grad needs a scalar float loss (shape [] or [1]), got {s}")));
    }
    let mut out = g.clone();
    let n = out.len();
    let one = out.full(s, 1.0);
    backward(g, out, n, vec![(*loss, one)], wrt, "grad")
}

/// Like `grad_with_loss`, without the loss: outputs `[dloss/dwrt_0, ...]`.
pub fn grad(g: &Graph, wrt: &[NodeId]) -> Result<Graph> {
    let mut out = grad_with_loss(g, wrt)?;
    let outs = out.outputs()[1..].to_vec();
    out.set_outputs(outs);
    Ok(out)
}

/// Hessian-vector product of a scalar loss (forward over reverse): adds `tangent_<name>` per
/// name; outputs `[loss, grad_<name>..., hvp_<name>...]` in `wrt` order.
pub fn hvp(g: &Graph, wrt: &[&str]) -> Result<Graph> {
    let ids = wrt.iter().map(|n| leaf(g, n)).collect::<Result<Vec<_>>>()?;
    let gr = grad_with_loss(g, &ids)?;
    let mut j = jvp(&gr, wrt)?;
    let k = wrt.len();
    let o = j.outputs().to_vec();
    let mut outs = o[..=k].to_vec();
    outs.extend_from_slice(&o[k + 2..]);
    j.set_outputs(outs);
    Ok(j)
}

/// A copy of `g` where the input `name` is replaced by a constant.
pub fn bind_input(g: &Graph, name: &str, value: rlx_ir::HostTensor) -> Result<Graph> {
    let id = leaf(g, name)?;
    let mut out = Graph::new(g.name());
    for (i, node) in g.nodes().iter().enumerate() {
        if i == id.index() {
            out.try_add(rlx_ir::ops::Constant { value: value.clone() }, &[])?;
            continue;
        }
        let op: Op = node.op.clone();
        out.try_add(op, &node.inputs)?;
    }
    out.set_outputs(g.outputs().to_vec());
    out.verify()?;
    Ok(out)
}
