//! Derivatives of ops that hold graphs. Their rules transform the bodies, which needs the
//! transforms themselves: rlx-autodiff hands them in as a `Transforms` (rlx-ir cannot depend on
//! it). A scan's JVP is one forward scan over (carries, tangents); its VJP saves the carry of
//! every step (a forward scan stacking them) and runs the body's VJP in a reverse scan, so
//! neither unrolls and the derivative's node count does not depend on the trip count.

use super::{Scan, ScanOutput, WhileLoop};
use crate::ops::rules::zeros_like;
use crate::{Error, Graph, NodeId, Op, Result, Shape};

/// Graph-to-graph transforms, as the rules of control-flow ops need them for their bodies.
pub trait Transforms {
    /// Forward mode of `g` along its inputs `wrt` (indices into `g.inputs()`): a graph whose
    /// inputs are `g`'s then one tangent per `wrt` entry, and whose outputs are `g`'s outputs
    /// then one tangent per output.
    fn jvp(&self, g: &Graph, wrt: &[usize]) -> Result<Graph>;
    /// Reverse mode of `g` for its inputs `wrt`: a graph whose inputs are `g`'s then one
    /// cotangent per output, and whose outputs are `g`'s outputs then one cotangent per `wrt`.
    fn vjp(&self, g: &Graph, wrt: &[usize]) -> Result<Graph>;
    /// `g` batched over a new leading axis of `size` on its inputs `batched`: every output gains
    /// the axis. The inputs may come out in another order (they keep their names).
    fn vmap(&self, g: &Graph, batched: &[usize], size: usize) -> Result<Graph>;
}

/// Transform rules of an op that holds graphs (`OpDef::nested`). Each returns None to let the
/// transform fall back to the op's decomposition, or the rule's result (an error where the
/// transform does not apply, as reverse mode through `while_loop`).
pub trait NestedRules {
    /// Forward mode: the output tangent from input tangents (None = zero).
    fn jvp_nested(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        tangents: &[Option<NodeId>],
        out: NodeId,
        tx: &dyn Transforms,
    ) -> Option<Result<NodeId>>;
    /// Reverse mode: one cotangent per input (None = zero or not differentiable).
    fn vjp_nested(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        out: NodeId,
        cotangent: NodeId,
        tx: &dyn Transforms,
    ) -> Option<Result<Vec<Option<NodeId>>>>;
    /// Batching: inputs flagged in `batched` carry a leading axis of `size`; the output gets
    /// it too. None: the transform falls back to the decomposition.
    fn batch_nested(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        batched: &[bool],
        size: usize,
        tx: &dyn Transforms,
    ) -> Option<Result<NodeId>> {
        let _ = (g, ins, batched, size, tx);
        None
    }
    /// Whether `other`, on the same operands, is another result of this op (a scan's carries
    /// and stacked outputs are nodes of one loop): reverse mode then pulls their cotangents
    /// back together (`vjp_joint`), in one reverse loop instead of one per result.
    fn joins(&self, other: &Op) -> bool {
        let _ = other;
        false
    }
    /// Reverse mode for several results at once: each result's op (this one's first) with its
    /// cotangent. None: each result goes through `vjp_nested` alone.
    fn vjp_joint(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        out: NodeId,
        results: &[(Op, NodeId)],
        tx: &dyn Transforms,
    ) -> Option<Result<Vec<Option<NodeId>>>> {
        let _ = (g, ins, out, results, tx);
        None
    }
}

/// `g` with its inputs created in `order` (`order[k]` is the old index of new input `k`); the
/// rest of the graph is unchanged. Inputs have no operands, so moving them first keeps the
/// graph topological.
pub fn reorder_inputs(g: &Graph, order: &[usize]) -> Graph {
    let inputs = g.inputs();
    let mut out = Graph::new(g.name());
    let mut map: Vec<Option<NodeId>> = vec![None; g.len()];
    for &k in order {
        if let Some(&(id, name)) = inputs.get(k) {
            let s = g.shape(id).cloned().unwrap_or(Shape::scalar(crate::DType::F32));
            map[id.index()] = Some(out.input(name, s));
        }
    }
    for (i, n) in g.nodes().iter().enumerate() {
        if map[i].is_some() {
            continue;
        }
        let ins: Vec<NodeId> = n.inputs.iter().map(|x| map[x.index()].unwrap_or(*x)).collect();
        map[i] = Some(out.add_node(n.op.clone(), &ins));
    }
    out.set_outputs(g.outputs().iter().map(|o| map[o.index()].unwrap_or(*o)).collect());
    out
}

pub(super) fn transform_err(transform: &'static str, out: NodeId, reason: String) -> Error {
    Error::Transform { transform, op: "scan".into(), node: out.0, reason }
}

/// Result `output` / `index` of the loop `s` on `ins`.
pub(super) fn add(g: &mut Graph, s: &Scan, output: ScanOutput, index: usize, ins: &[NodeId]) -> Result<NodeId> {
    g.try_add(s.with_output(output, index), ins)
}

fn float(g: &Graph, id: NodeId) -> bool {
    g.dtype(id).is_float()
}

pub(super) fn float_at(s: &Shape) -> bool {
    s.dtype.is_float()
}

/// The float stacked outputs (types `ys`) that `cts` gives a cotangent.
pub(super) fn given_ys(ys: &[Shape], cts: &[(ScanOutput, usize, NodeId)]) -> Vec<usize> {
    let given = |j: usize| cts.iter().any(|&(o, i, _)| o == ScanOutput::Ys && i == j);
    (0..ys.len()).filter(|&j| float_at(&ys[j]) && given(j)).collect()
}

/// Positions of `v` in `list`.
fn pos(list: &[usize], v: usize) -> Option<usize> {
    list.iter().position(|&x| x == v)
}

impl Scan {
    pub(super) fn body_shapes(&self) -> (Vec<Shape>, Vec<Shape>) {
        let b = &self.body;
        let ins = b
            .inputs()
            .iter()
            .map(|(id, _)| b.shape(*id).cloned().unwrap_or(Shape::scalar(crate::DType::F32)))
            .collect();
        let outs =
            b.outputs().iter().map(|o| b.shape(*o).cloned().unwrap_or(Shape::scalar(crate::DType::F32))).collect();
        (ins, outs)
    }

    fn jvp_rule(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        t: &[Option<NodeId>],
        out: NodeId,
        tx: &dyn Transforms,
    ) -> Result<NodeId> {
        let (nc, nx) = (self.num_carry, self.num_xs);
        let nb = self.body.inputs().len();
        let ny = self.num_ys();
        let (bins, bouts) = self.body_shapes();
        // Every float carry gets a tangent (a const's tangent reaches it after one step);
        // sequences and consts only where they have one.
        let cf: Vec<usize> = (0..nc).filter(|&i| float_at(&bins[i])).collect();
        let xt: Vec<usize> = (nc..nc + nx).filter(|&i| t[i].is_some() && float(g, ins[i])).collect();
        let kt: Vec<usize> = (nc + nx..nb).filter(|&i| t[i].is_some() && float(g, ins[i])).collect();
        let yf: Vec<usize> = (0..ny).filter(|&j| float_at(&bouts[nc + j])).collect();
        let wrt: Vec<usize> = cf.iter().chain(&xt).chain(&kt).copied().collect();
        let j = tx.jvp(&self.body, &wrt)?;
        // The jvp body's inputs: [c, x, k, tc, tx, tk]; the scan wants [c, tc, x, tx, k, tk].
        let (a, b, c) = (nb, nb + cf.len(), nb + cf.len() + xt.len());
        let mut order: Vec<usize> = (0..nc).collect();
        order.extend(a..b);
        order.extend(nc..nc + nx);
        order.extend(b..c);
        order.extend(nc + nx..nb);
        order.extend(c..c + kt.len());
        let mut body = reorder_inputs(&j, &order);
        // Its outputs: [c', y, tangents of every output]; the scan wants [c', tc', y, ty].
        let o = body.outputs().to_vec();
        let mut outs: Vec<NodeId> = o[..nc].to_vec();
        outs.extend(cf.iter().map(|&i| o[nc + ny + i]));
        outs.extend_from_slice(&o[nc..nc + ny]);
        outs.extend(yf.iter().map(|&jj| o[nc + ny + nc + jj]));
        body.set_outputs(outs);
        let len = trips_of(self, g, ins).map_err(|e| transform_err("jvp", out, e))?;
        let s = Scan {
            body: Box::new(body),
            output: ScanOutput::Carry,
            index: 0,
            num_carry: nc + cf.len(),
            num_xs: nx + xt.len(),
            reverse: self.reverse,
            length: Some(len),
            checkpoint: self.checkpoint,
        };
        let mut args: Vec<NodeId> = ins[..nc].to_vec();
        for &i in &cf {
            args.push(crate::ops::rules::or_zeros(g, t[i], ins[i]));
        }
        args.extend_from_slice(&ins[nc..nc + nx]);
        args.extend(xt.iter().map(|&i| t[i].unwrap_or(ins[i])));
        args.extend_from_slice(&ins[nc + nx..]);
        args.extend(kt.iter().map(|&i| t[i].unwrap_or(ins[i])));
        match self.output {
            ScanOutput::Carry => {
                let p = pos(&cf, self.index).ok_or_else(|| transform_err("jvp", out, "an integer carry".into()))?;
                add(g, &s, ScanOutput::Carry, nc + p, &args)
            }
            ScanOutput::Ys => {
                let p = pos(&yf, self.index).ok_or_else(|| transform_err("jvp", out, "an integer output".into()))?;
                add(g, &s, ScanOutput::Ys, ny + p, &args)
            }
        }
    }

    /// The VJP for the results `cts` (which result, its cotangent) of this loop.
    pub(super) fn vjp_rule(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        out: NodeId,
        cts: &[(ScanOutput, usize, NodeId)],
        tx: &dyn Transforms,
    ) -> Result<Vec<Option<NodeId>>> {
        let (nc, nx) = (self.num_carry, self.num_xs);
        let nb = self.body.inputs().len();
        let np = nb - nc - nx;
        let ny = self.num_ys();
        let (bins, bouts) = self.body_shapes();
        let len = trips_of(self, g, ins).map_err(|e| transform_err("vjp", out, e))?;
        let cf: Vec<usize> = (0..nc).filter(|&i| float_at(&bins[i])).collect();
        let xf: Vec<usize> = (0..nx).filter(|&j| float_at(&bins[nc + j])).collect();
        let kf: Vec<usize> = (0..np).filter(|&k| float_at(&bins[nc + nx + k])).collect();
        // Only the stacked outputs given a cotangent enter the reverse loop (as sequences); the
        // body makes the others' zeros per step instead of the graph stacking `T` steps of them.
        let yf = given_ys(&bouts[nc..], cts);
        let mut result = vec![None; ins.len()];
        if cf.is_empty() && xf.is_empty() && kf.is_empty() {
            return Ok(result);
        }
        // 1. The body's VJP, whose first nodes are the body's own (the forward it recomputes).
        let wrt: Vec<usize> =
            cf.iter().copied().chain(xf.iter().map(|j| nc + j)).chain(kf.iter().map(|k| nc + nx + k)).collect();
        let v = tx.vjp(&self.body, &wrt)?;
        let res = residuals(&self.body, &v, nc + nx);
        // 2. The carry entering every step and the residuals, stacked: the same loop with them
        //    as extra ys, so the reverse loop reads the forward's values instead of recomputing.
        let mut save = (*self.body).clone();
        let mut souts = save.outputs().to_vec();
        souts.extend(save.inputs().iter().take(nc).map(|(id, _)| *id));
        souts.extend(res.iter().map(|&i| NodeId(i as u32)));
        save.set_outputs(souts);
        // (Same fields otherwise: backends that run loops see the loop being differentiated.)
        let saver = Scan { body: Box::new(save), ..self.clone() };
        let saved: Vec<NodeId> = (0..nc).map(|i| add(g, &saver, ScanOutput::Ys, ny + i, ins)).collect::<Result<_>>()?;
        let stacked: Vec<NodeId> =
            (0..res.len()).map(|p| add(g, &saver, ScanOutput::Ys, ny + nc + p, ins)).collect::<Result<_>>()?;
        // 3. The reverse body: carries (ct of float carries, accumulated ct of float consts),
        //    sequences (saved carries, xs, ct of float ys, residuals), consts; gives the
        //    carries' next values and the cotangents of the float xs.
        let mut r = Graph::new(format!("{}_vjp", self.body.name()));
        let ct_c: Vec<NodeId> = cf.iter().map(|&i| r.input(&format!("ct_c{i}"), bins[i].clone())).collect();
        let acc: Vec<NodeId> = kf.iter().map(|&k| r.input(&format!("acc_k{k}"), bins[nc + nx + k].clone())).collect();
        let c_t: Vec<NodeId> = (0..nc).map(|i| r.input(&format!("c{i}"), bins[i].clone())).collect();
        let x_t: Vec<NodeId> = (0..nx).map(|j| r.input(&format!("x{j}"), bins[nc + j].clone())).collect();
        let ct_y: Vec<NodeId> = yf.iter().map(|&j| r.input(&format!("ct_y{j}"), bouts[nc + j].clone())).collect();
        let mut given_at: Vec<Option<NodeId>> = vec![None; v.len()];
        for &i in &res {
            let ty = v.nodes()[i].ty.clone();
            given_at[i] = Some(r.input(&format!("res{i}"), ty));
        }
        let k_r: Vec<NodeId> = (0..np).map(|k| r.input(&format!("k{k}"), bins[nc + nx + k].clone())).collect();
        let mut args: Vec<NodeId> = c_t.iter().chain(&x_t).chain(&k_r).copied().collect();
        // The body's output cotangents: the carries' and ys' where float, zeros elsewhere.
        for (o, ty) in bouts.iter().enumerate() {
            let found = if o < nc { pos(&cf, o).map(|p| ct_c[p]) } else { pos(&yf, o - nc).map(|p| ct_y[p]) };
            args.push(match found {
                Some(c) => c,
                None => r.full(ty.clone(), 0.0),
            });
        }
        let outs = inline_given(&mut r, &v, &args, &given_at)
            .ok_or_else(|| transform_err("vjp", out, "the body has params".into()))?;
        let grads = &outs[nc + ny..];
        let mut routs: Vec<NodeId> = grads[..cf.len()].to_vec();
        for (p, &a) in acc.iter().enumerate() {
            let gk = grads[cf.len() + xf.len() + p];
            routs.push(r.add(a, gk));
        }
        routs.extend_from_slice(&grads[cf.len()..cf.len() + xf.len()]);
        r.set_outputs(routs);
        r.check()?;
        // What the reverse body computes from the consts alone (the transposed weights of its
        // products) is computed once, before the loop, and enters as more consts.
        let first_const = cf.len() + kf.len() + nc + nx + yf.len() + res.len();
        let (r, hoisted) = hoist_invariants(&r, first_const, g, &ins[nc + nx..])?;
        let rev = Scan {
            body: Box::new(r),
            output: ScanOutput::Carry,
            index: 0,
            num_carry: cf.len() + kf.len(),
            num_xs: nc + nx + yf.len() + res.len(),
            reverse: !self.reverse,
            length: Some(len),
            checkpoint: None,
        };
        // 4. Its operands: the given cotangents where they belong, zeros elsewhere.
        let mut rins = vec![];
        for &i in &cf {
            let c = given(g, cts, ScanOutput::Carry, i);
            rins.push(c.unwrap_or_else(|| zeros_like(g, ins[i])));
        }
        for &k in &kf {
            rins.push(zeros_like(g, ins[nc + nx + k]));
        }
        rins.extend_from_slice(&saved);
        rins.extend_from_slice(&ins[nc..nc + nx]);
        for &j in &yf {
            let mut d = vec![len];
            d.extend(bouts[nc + j].fixed_dims().unwrap_or_default());
            let c = given(g, cts, ScanOutput::Ys, j);
            rins.push(c.unwrap_or_else(|| g.full(Shape::new(&d, bouts[nc + j].dtype), 0.0)));
        }
        rins.extend_from_slice(&stacked);
        rins.extend_from_slice(&ins[nc + nx..]);
        rins.extend_from_slice(&hoisted);
        for (p, &i) in cf.iter().enumerate() {
            result[i] = Some(add(g, &rev, ScanOutput::Carry, p, &rins)?);
        }
        for (p, &k) in kf.iter().enumerate() {
            result[nc + nx + k] = Some(add(g, &rev, ScanOutput::Carry, cf.len() + p, &rins)?);
        }
        for (p, &j) in xf.iter().enumerate() {
            result[nc + j] = Some(add(g, &rev, ScanOutput::Ys, p, &rins)?);
        }
        Ok(result)
    }
}

impl Scan {
    /// vmap as one scan of the batched body: every carry batched (a batched sequence or const
    /// reaches the carries after a step), batched sequences `[B, T, ..]` scanned as `[T, B, ..]`,
    /// stacked outputs `[T, B, ..]` turned back to `[B, T, ..]`.
    fn batch_rule(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        batched: &[bool],
        size: usize,
        tx: &dyn Transforms,
    ) -> Result<NodeId> {
        let (nc, nx) = (self.num_carry, self.num_xs);
        let nb = self.body.inputs().len();
        let swap01 = |g: &mut Graph, x: NodeId| {
            let mut perm: Vec<usize> = (0..crate::ops::rules::dims(g, x).len()).collect();
            perm.swap(0, 1);
            g.transpose(x, &perm)
        };
        let mut args = vec![];
        for (i, &x) in ins.iter().enumerate() {
            args.push(match (i < nc, i < nc + nx, batched[i]) {
                (true, _, false) => crate::ops::rules::add_batch(g, x, size),
                (false, true, true) => swap01(g, x),
                _ => x,
            });
        }
        let wrt: Vec<usize> = (0..nb).filter(|&i| i < nc || batched[i]).collect();
        let body = super::inputs_as(&tx.vmap(&self.body, &wrt, size)?, &self.body);
        let y = g.try_add(Scan { body: Box::new(body), ..self.clone() }, &args)?;
        Ok(match self.output {
            ScanOutput::Carry => y,
            ScanOutput::Ys => swap01(g, y),
        })
    }
}

/// The residuals of a loop body's VJP `v` (whose nodes start with the body's own): body nodes
/// that vary per trip (they depend on one of the first `varying` inputs, the carries and
/// sequences) and that the backward part of `v` reads. The reverse loop reads them stacked
/// instead of recomputing the forward every trip; a body input is already at hand, and a
/// node of the consts alone is the same every trip.
fn residuals(body: &Graph, v: &Graph, varying: usize) -> Vec<usize> {
    let n = body.len();
    let mut varies = vec![false; n];
    let mut seen_inputs = 0;
    for (i, node) in body.nodes().iter().enumerate() {
        varies[i] = match node.op {
            Op::Input(_) => {
                seen_inputs += 1;
                seen_inputs <= varying
            }
            _ => node.inputs.iter().any(|x| varies[x.index()]),
        };
    }
    let mut read = vec![false; n];
    for node in &v.nodes()[n.min(v.len())..] {
        for x in &node.inputs {
            if x.index() < n {
                read[x.index()] = true;
            }
        }
    }
    (0..n).filter(|&i| read[i] && varies[i] && !matches!(body.nodes()[i].op, Op::Input(_))).collect()
}

/// Loop-invariant code motion: the nodes of `body` that depend on its consts alone (inputs from
/// `first_const` on, the loop's operands `consts` in `g`) and that a varying node or an output
/// reads are computed in `g` instead, and enter the new body as consts after the old ones.
/// Returns the new body and those values in `g`. Constants without operands stay inside (the
/// backend computes them once at compile time).
pub(super) fn hoist_invariants(
    body: &Graph,
    first_const: usize,
    g: &mut Graph,
    consts: &[NodeId],
) -> Result<(Graph, Vec<NodeId>)> {
    let n = body.len();
    let nodes = body.nodes();
    let is_input = |i: usize| matches!(nodes[i].op, Op::Input(_));
    let mut inv = vec![false; n];
    let mut input_no = vec![usize::MAX; n];
    let mut k = 0;
    for (i, node) in nodes.iter().enumerate() {
        inv[i] = match node.op {
            Op::Input(_) => {
                input_no[i] = k;
                k += 1;
                k > first_const
            }
            Op::Param(_) => false,
            _ => node.inputs.iter().all(|x| inv[x.index()]),
        };
    }
    let mut hoist = vec![false; n];
    let worth = |i: usize| inv[i] && !is_input(i) && !nodes[i].inputs.is_empty();
    for node in nodes.iter().enumerate().filter(|&(i, _)| !inv[i]).map(|(_, node)| node) {
        for x in &node.inputs {
            hoist[x.index()] |= worth(x.index());
        }
    }
    for o in body.outputs() {
        hoist[o.index()] |= worth(o.index());
    }
    if !hoist.contains(&true) {
        return Ok((body.clone(), vec![]));
    }
    // The hoisted nodes and what they read, computed in `g`.
    let mut need = hoist.clone();
    for i in (0..n).rev() {
        if need[i] {
            for x in &nodes[i].inputs {
                need[x.index()] = true;
            }
        }
    }
    let mut outer: Vec<Option<NodeId>> = vec![None; n];
    for i in (0..n).filter(|&i| need[i]) {
        outer[i] = Some(if is_input(i) {
            *consts
                .get(input_no[i] - first_const)
                .ok_or_else(|| transform_err("vjp", NodeId(i as u32), "a const without an operand".into()))?
        } else {
            let ins: Vec<NodeId> = nodes[i].inputs.iter().filter_map(|x| outer[x.index()]).collect();
            g.try_add(nodes[i].op.clone(), &ins)?
        });
    }
    // The new body: the old inputs, then one per hoisted node, then the rest.
    let mut out = Graph::new(body.name());
    let mut map: Vec<Option<NodeId>> = vec![None; n];
    for (id, name) in body.inputs() {
        map[id.index()] = Some(out.input(name, nodes[id.index()].ty.clone()));
    }
    let mut hoisted = vec![];
    for i in (0..n).filter(|&i| hoist[i]) {
        map[i] = Some(out.input(&format!("hoisted{i}"), nodes[i].ty.clone()));
        hoisted.push(outer[i].unwrap_or(NodeId(0)));
    }
    for (i, node) in nodes.iter().enumerate() {
        if map[i].is_none() {
            let ins: Vec<NodeId> = node.inputs.iter().map(|x| map[x.index()].unwrap_or(*x)).collect();
            map[i] = Some(out.add_node(node.op.clone(), &ins));
        }
    }
    out.set_outputs(body.outputs().iter().map(|o| map[o.index()].unwrap_or(*o)).collect());
    out.check()?;
    Ok((out, hoisted))
}

/// `inline` of `body` into `g` where node `i` of `body` becomes `given[i]` when that is set
/// (its operands are then not needed for it). None when `body` has params.
fn inline_given(g: &mut Graph, body: &Graph, args: &[NodeId], given: &[Option<NodeId>]) -> Option<Vec<NodeId>> {
    let mut map = Vec::with_capacity(body.len());
    let mut next_arg = 0;
    for (i, n) in body.nodes().iter().enumerate() {
        let id = match (&n.op, given.get(i).copied().flatten()) {
            (Op::Input(_), _) => {
                next_arg += 1;
                *args.get(next_arg - 1)?
            }
            (Op::Param(_), _) => return None,
            (_, Some(x)) => x,
            (op, None) => {
                let ins: Vec<NodeId> = n.inputs.iter().map(|x| map[x.index()]).collect();
                g.add_node(op.clone(), &ins)
            }
        };
        map.push(id);
    }
    Some(body.outputs().iter().map(|o| map[o.index()]).collect())
}

/// The trip count of `s` applied to `ins` in `g`.
pub(super) fn trips_of(s: &Scan, g: &Graph, ins: &[NodeId]) -> std::result::Result<usize, String> {
    let shapes: Vec<Shape> =
        ins.iter().map(|&x| g.shape(x).cloned().unwrap_or(Shape::scalar(crate::DType::F32))).collect();
    s.trips(&shapes.iter().collect::<Vec<_>>())
}

impl NestedRules for Scan {
    fn jvp_nested(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        tangents: &[Option<NodeId>],
        out: NodeId,
        tx: &dyn Transforms,
    ) -> Option<Result<NodeId>> {
        Some(self.jvp_rule(g, ins, tangents, out, tx))
    }
    fn vjp_nested(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        out: NodeId,
        cotangent: NodeId,
        tx: &dyn Transforms,
    ) -> Option<Result<Vec<Option<NodeId>>>> {
        Some(self.vjp_any(g, ins, out, &[(self.output, self.index, cotangent)], tx))
    }
    fn joins(&self, other: &Op) -> bool {
        matches!(other, Op::Scan(s) if s.same_loop(self))
    }
    fn batch_nested(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        batched: &[bool],
        size: usize,
        tx: &dyn Transforms,
    ) -> Option<Result<NodeId>> {
        Some(self.batch_rule(g, ins, batched, size, tx))
    }
    fn vjp_joint(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        out: NodeId,
        results: &[(Op, NodeId)],
        tx: &dyn Transforms,
    ) -> Option<Result<Vec<Option<NodeId>>>> {
        let cts: Vec<(ScanOutput, usize, NodeId)> = results
            .iter()
            .filter_map(|(op, c)| match op {
                Op::Scan(s) if s.same_loop(self) => Some((s.output, s.index, *c)),
                _ => None,
            })
            .collect();
        Some(self.vjp_any(g, ins, out, &cts, tx))
    }
}

impl NestedRules for WhileLoop {
    fn jvp_nested(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        tangents: &[Option<NodeId>],
        out: NodeId,
        tx: &dyn Transforms,
    ) -> Option<Result<NodeId>> {
        Some(self.jvp_loop(g, ins, tangents, out, tx))
    }
    fn batch_nested(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        batched: &[bool],
        size: usize,
        tx: &dyn Transforms,
    ) -> Option<Result<NodeId>> {
        Some(self.batch_loop(g, ins, batched, size, tx))
    }
    fn vjp_nested(
        &self,
        _g: &mut Graph,
        _ins: &[NodeId],
        out: NodeId,
        _cotangent: NodeId,
        _tx: &dyn Transforms,
    ) -> Option<Result<Vec<Option<NodeId>>>> {
        Some(Err(Error::Transform {
            transform: "vjp",
            op: "while_loop".into(),
            node: out.0,
            reason: "while_loop is forward-mode only (as in JAX): its trip count depends on the data, so \
                     reverse mode is not defined; use jvp, or scan / fori_loop (a static trip count) for \
                     gradients"
                .into(),
        }))
    }
}

/// The sum of the cotangents in `cts` given for result `o` / `i`.
pub(super) fn given(g: &mut Graph, cts: &[(ScanOutput, usize, NodeId)], o: ScanOutput, i: usize) -> Option<NodeId> {
    let mut sum: Option<NodeId> = None;
    for &(_, _, c) in cts.iter().filter(|(co, ci, _)| *co == o && *ci == i) {
        sum = Some(match sum {
            Some(s) => g.add(s, c),
            None => c,
        });
    }
    sum
}
