//! vmap: adds a leading batch axis to named inputs, driven by each op's batching rule
//! (`OpDef::batch`), else its decomposition, else an unrolled loop over the batch.

use crate::api::leaf;
use rlx_ir::ops::rules::{add_batch, dims};
use rlx_ir::{Error, Graph, NodeId, Op, Result, Shape};
use std::collections::HashMap;

/// A traced value: its node in the new graph and whether it carries the leading batch axis.
type Val = (NodeId, bool);

/// Vectorizes `g` over a new leading axis of size `batch` on the named inputs (params stay
/// shared). Every output gains the leading axis.
pub fn vmap(g: &Graph, batched: &[&str], batch: usize) -> Result<Graph> {
    crate::api::require_static(g, "vmap")?;
    let mut out = Graph::new(g.name());
    let mut env: HashMap<NodeId, Val> = HashMap::new();
    for name in batched {
        let id = leaf(g, name)?;
        if !matches!(g.node(id).map(|n| &n.op), Some(Op::Input(_))) {
            return Err(Error::InvalidGraph {
                graph: g.name().into(),
                reason: format!("vmap: `{name}` is a param; params are shared, only inputs can be batched"),
            });
        }
    }
    for (i, node) in g.nodes().iter().enumerate() {
        let id = NodeId(i as u32);
        if let Op::Input(x) = &node.op
            && batched.contains(&x.name.as_str())
        {
            let mut d = vec![batch];
            d.extend(x.shape.fixed_dims().ok_or_else(|| unbound(g, &x.shape))?);
            let nid = out.input(&x.name, Shape::new(&d, x.shape.dtype));
            env.insert(id, (nid, true));
        }
    }
    trace(g, 0..g.len(), &mut out, &mut env, batch)?;
    let mut outs = vec![];
    for o in g.outputs() {
        let (v, b) = env[o];
        outs.push(if b { v } else { add_batch(&mut out, v, batch) });
    }
    out.set_outputs(outs);
    out.verify()?;
    Ok(out)
}

fn unbound(g: &Graph, s: &Shape) -> Error {
    let symbol = s.symbols().next().unwrap_or("?").to_string();
    Error::UnboundDim { symbol, context: format!("vmap of graph `{}`", g.name()) }
}

/// Copies nodes `range` of `src` into `dst`, batching those that depend on batched values.
fn trace(
    src: &Graph,
    range: std::ops::Range<usize>,
    dst: &mut Graph,
    env: &mut HashMap<NodeId, Val>,
    size: usize,
) -> Result<()> {
    for i in range {
        let id = NodeId(i as u32);
        if env.contains_key(&id) {
            continue;
        }
        let node = &src.nodes()[i];
        let ins: Vec<Val> = node.inputs.iter().map(|x| env[x]).collect();
        let (ids, flags): (Vec<NodeId>, Vec<bool>) = ins.iter().copied().unzip();
        if !flags.iter().any(|&b| b) {
            env.insert(id, (dst.try_add(node.op.clone(), &ids)?, false));
            continue;
        }
        let v = batch_node(src, id, dst, &ids, &flags, size)?;
        let mut want = vec![size];
        want.extend(node.ty.fixed_dims().ok_or_else(|| unbound(src, &node.ty))?);
        let got = dst.shape(v).cloned();
        if got != Some(Shape::new(&want, node.ty.dtype)) {
            dst.check()?;
            return Err(Error::Transform {
                transform: "vmap",
                op: node.op.def().name().into(),
                node: id.0,
                reason: format!("the batch rule gave {got:?}, expected {:?} {:?}", want, node.ty.dtype),
            });
        }
        env.insert(id, (v, true));
    }
    Ok(())
}

/// How one node was batched (for the coverage table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchedBy {
    /// The op's own batching rule.
    Rule,
    /// Through the op's decomposition.
    Decomposed,
    /// An unrolled loop over the batch.
    Loop,
}

fn batch_node(src: &Graph, id: NodeId, dst: &mut Graph, ins: &[NodeId], flags: &[bool], size: usize) -> Result<NodeId> {
    Ok(batch_node_how(src, id, dst, ins, flags, size)?.0)
}

/// Batches one node: rule, else decomposition (traced on per-example types), else a loop.
pub(crate) fn batch_node_how(
    src: &Graph,
    id: NodeId,
    dst: &mut Graph,
    ins: &[NodeId],
    flags: &[bool],
    size: usize,
) -> Result<(NodeId, BatchedBy)> {
    let node = &src.nodes()[id.index()];
    let def = node.op.def();
    // Control flow batches its bodies (a scan stays one scan of the batched body).
    if let Some(r) = def.nested().and_then(|n| n.batch_nested(dst, ins, flags, size, &crate::diff::Ad)) {
        return Ok((r?, BatchedBy::Rule));
    }
    if let Some(v) = def.batch(dst, ins, flags, size) {
        return Ok((v, BatchedBy::Rule));
    }
    // Decompose on a scratch graph with the per-example input types, then trace it batched.
    let mut tmp = Graph::new("decompose");
    let mut tins = vec![];
    for (k, x) in node.inputs.iter().enumerate() {
        let s = src.shape(*x).cloned().unwrap_or_else(|| unreachable!("verified"));
        tins.push(tmp.input(&format!("arg{k}"), s));
    }
    if let Some(d) = def.decompose(&mut tmp, &tins) {
        tmp.check()?;
        let mut env: HashMap<NodeId, Val> =
            tins.iter().zip(ins.iter().zip(flags)).map(|(&t, (&v, &b))| (t, (v, b))).collect();
        trace(&tmp, 0..tmp.len(), dst, &mut env, size)?;
        let (v, b) = env[&d];
        return Ok((if b { v } else { add_batch(dst, v, size) }, BatchedBy::Decomposed));
    }
    if size == 0 {
        return Err(Error::Transform {
            transform: "vmap",
            op: def.name().into(),
            node: id.0,
            reason: "no batch rule or decomposition, and a batch of 0 cannot be unrolled".into(),
        });
    }
    // Unroll: apply the op to each example and stack the results.
    let mut ys = vec![];
    for b in 0..size {
        let mut xs = vec![];
        for (&x, &f) in ins.iter().zip(flags) {
            xs.push(if f {
                let d = dims(dst, x);
                let s = dst.slice_axis(x, 0, b, b + 1);
                dst.reshape(s, &d[1..])
            } else {
                x
            });
        }
        let y = dst.try_add(node.op.clone(), &xs)?;
        ys.push(dst.expand_dims(y, 0));
    }
    Ok((dst.concat(&ys, 0), BatchedBy::Loop))
}
