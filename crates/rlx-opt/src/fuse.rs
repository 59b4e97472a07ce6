//! Elementwise fusion: maximal single-use chains of elementwise ops (asked through op traits and
//! the unary/binary families, never op names) become one `fused` node that backends run as one
//! loop. Scalar constants are inlined into the program.

use crate::report::{Fusion, FusionKind, FusionReport, Reason};
use rlx_ir::ops::{Fused, FusedMatMul, Instr};
use rlx_ir::shape::broadcast_dims;
use rlx_ir::{Data, Graph, Node, NodeId, Op, OpTraits, Result, Shape};
use std::collections::HashMap;

/// Whether a node can join an elementwise region.
pub(crate) fn candidate(n: &Node) -> bool {
    let elementwise = n.op.def().traits().contains(OpTraits::ELEMENTWISE);
    elementwise && matches!(n.op, Op::Unary(_) | Op::Binary(_) | Op::Fused(_)) && n.ty.dtype.is_float()
}

/// Compute instructions a member contributes.
pub(crate) fn op_count(n: &Node) -> usize {
    match &n.op {
        Op::Fused(f) => f.program.iter().filter(|i| matches!(i, Instr::Unary(..) | Instr::Binary(..))).count(),
        _ => 1,
    }
}

/// The value of a one-element constant that broadcasts into `dims` without changing them.
fn scalar_const(n: &Node, dims: &[rlx_ir::Dim]) -> Option<f64> {
    let Op::Constant(c) = &n.op else { return None };
    let Data::F(v) = &c.value.data else { return None };
    let fits = broadcast_dims(&n.ty.dims, dims).ok().as_deref() == Some(dims);
    (v.len() == 1 && fits).then(|| v[0])
}

struct Builder<'g> {
    g: &'g Graph,
    owner: &'g [Option<usize>],
    root: usize,
    inline_consts: bool,
    program: Vec<Instr>,
    ext: Vec<NodeId>,
    memo: HashMap<usize, usize>,
}

impl Builder<'_> {
    fn emit(&mut self, x: NodeId) -> usize {
        if let Some(&k) = self.memo.get(&x.index()) {
            return k;
        }
        let n = &self.g.nodes()[x.index()];
        let k = if self.owner[x.index()] == Some(self.root) {
            match &n.op {
                Op::Unary(u) => {
                    let a = self.emit(n.inputs[0]);
                    self.push(Instr::Unary(u.kind, a))
                }
                Op::Binary(b) => {
                    let (a, c) = (self.emit(n.inputs[0]), self.emit(n.inputs[1]));
                    self.push(Instr::Binary(b.kind, a, c))
                }
                Op::Fused(f) => {
                    let mut local = Vec::with_capacity(f.program.len());
                    for ins in &f.program {
                        let k = match *ins {
                            Instr::Input(i) => self.emit(n.inputs[i]),
                            Instr::Const(c) => self.push(Instr::Const(c)),
                            Instr::Unary(u, a) => self.push(Instr::Unary(u, local[a])),
                            Instr::Binary(b, a, c) => self.push(Instr::Binary(b, local[a], local[c])),
                        };
                        local.push(k);
                    }
                    *local.last().unwrap_or(&0)
                }
                _ => unreachable!("only candidates join a region"),
            }
        } else if let Some(v) =
            self.inline_consts.then(|| scalar_const(n, &self.g.nodes()[self.root].ty.dims)).flatten()
        {
            self.push(Instr::Const(v))
        } else {
            let i = self.ext.len();
            self.ext.push(x);
            self.push(Instr::Input(i))
        };
        self.memo.insert(x.index(), k);
        k
    }

    fn push(&mut self, i: Instr) -> usize {
        self.program.push(i);
        self.program.len() - 1
    }
}

/// Fuses elementwise regions of `g`. `supports` says whether the backend runs a `fused` node
/// with these input types natively; regions it would not run stay unfused.
pub fn fuse_elementwise(g: &Graph, supports: &dyn Fn(&Node, &[&Shape]) -> bool) -> Result<(Graph, FusionReport)> {
    g.verify()?;
    let nodes = g.nodes();
    let n = nodes.len();
    let uses = use_counts(g);
    let mut report = FusionReport::default();
    let ew = FusionKind::Elementwise;
    let mut owner: Vec<Option<usize>> = vec![None; n];
    let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
    for r in (0..n).rev() {
        if !candidate(&nodes[r]) || owner[r].is_some() {
            continue;
        }
        owner[r] = Some(r);
        let mut list = vec![r];
        let mut stack = vec![r];
        while let Some(m) = stack.pop() {
            for &p in &nodes[m].inputs {
                let (pi, pn) = (p.index(), &nodes[p.index()]);
                if let Op::Cast(_) = pn.op {
                    let from = nodes[pn.inputs[0].index()].ty.dtype.to_string();
                    report.reject(pi, "cast", ew, Reason::DtypeChange { from, to: pn.ty.dtype.to_string() });
                }
                if !candidate(pn) || owner[pi].is_some() {
                    continue;
                }
                if uses[pi] != 1 {
                    report.reject(pi, pn.op.def().name(), ew, Reason::MultipleConsumers(uses[pi]));
                } else if pn.ty.dims != nodes[r].ty.dims {
                    let reason = Reason::Broadcast { from: pn.ty.to_string(), to: nodes[r].ty.to_string() };
                    report.reject(pi, pn.op.def().name(), ew, reason);
                } else {
                    owner[pi] = Some(r);
                    list.push(pi);
                    stack.push(pi);
                }
            }
        }
        members.insert(r, list);
    }
    // Build each region's program; dissolve those that would not help or the backend lacks.
    let mut fused_at: HashMap<usize, (Fused, Vec<NodeId>)> = HashMap::new();
    for (&r, list) in &members {
        let ops: usize = list.iter().map(|&m| op_count(&nodes[m])).sum();
        let already = list.len() == 1 && matches!(nodes[r].op, Op::Fused(_));
        if ops < 2 || already {
            continue;
        }
        let mut built = None;
        for inline_consts in [true, false] {
            let mut b = Builder {
                g,
                owner: &owner,
                root: r,
                inline_consts,
                program: vec![],
                ext: vec![],
                memo: HashMap::new(),
            };
            b.emit(NodeId(r as u32));
            let f = Fused { program: b.program };
            let tys: Vec<&Shape> = b.ext.iter().map(|x| &nodes[x.index()].ty).collect();
            if !tys.is_empty() && rlx_ir::OpDef::infer(&f, &tys).ok().as_ref() == Some(&nodes[r].ty) {
                built = Some((f, b.ext));
                break;
            }
        }
        let Some((f, ext)) = built else {
            report.reject(r, nodes[r].op.def().name(), ew, Reason::TypeWouldChange);
            continue;
        };
        let tys: Vec<&Shape> = ext.iter().map(|x| &nodes[x.index()].ty).collect();
        let probe = Node { op: Op::Fused(f.clone()), inputs: ext.clone(), ty: nodes[r].ty.clone() };
        if !supports(&probe, &tys) {
            let what = format!("fused {} with {} inputs", nodes[r].ty, tys.len());
            report.reject(r, nodes[r].op.def().name(), ew, Reason::BackendLacksKernel(what));
            continue;
        }
        fused_at.insert(r, (f, ext));
    }
    let mut out = Graph::new(g.name());
    let mut map = vec![NodeId(u32::MAX); n];
    for (i, nd) in nodes.iter().enumerate() {
        if let Some(r) = owner[i]
            && r != i
            && fused_at.contains_key(&r)
        {
            continue;
        }
        if let Some((f, ext)) = fused_at.get(&i) {
            let ins: Vec<NodeId> = ext.iter().map(|x| map[x.index()]).collect();
            map[i] = out.try_add(f.clone(), &ins)?;
            let ops = members[&i].iter().map(|&m| op_count(&nodes[m])).sum();
            report.fused.push(Fusion { kind: ew, node: i as u32, ops, inputs: ins.len() });
            continue;
        }
        let ins: Vec<NodeId> = nd.inputs.iter().map(|x| map[x.index()]).collect();
        map[i] = out.try_add(nd.op.clone(), &ins)?;
    }
    // Members of a region map to the region's node.
    for i in 0..n {
        if let Some(r) = owner[i]
            && fused_at.contains_key(&r)
        {
            map[i] = map[r];
        }
    }
    out.set_outputs(g.outputs().iter().map(|o| map[o.index()]).collect());
    out.verify()?;
    report.remap(&map.iter().map(|m| m.0).collect::<Vec<_>>());
    Ok((out, report))
}

/// How many times each node is read (graph outputs count as reads).
pub(crate) fn use_counts(g: &Graph) -> Vec<usize> {
    let mut uses = vec![0usize; g.len()];
    for nd in g.nodes() {
        for x in &nd.inputs {
            uses[x.index()] += 1;
        }
    }
    for o in g.outputs() {
        uses[o.index()] += 1;
    }
    uses
}

/// The elementwise consumer of a matmul as a program over its inputs.
pub(crate) fn as_program(n: &Node) -> Option<Vec<Instr>> {
    Some(match &n.op {
        Op::Fused(f) => f.program.clone(),
        Op::Unary(u) => vec![Instr::Input(0), Instr::Unary(u.kind, 0)],
        Op::Binary(b) => vec![Instr::Input(0), Instr::Input(1), Instr::Binary(b.kind, 0, 1)],
        _ => return None,
    })
}

/// Epilogue fusion: an elementwise node (or region) whose input is a single-use matmul of the
/// same type becomes one `fused_matmul`: bias, activation and residual run over the matmul's
/// output while it is hot, and the intermediate buffer disappears.
pub fn fuse_matmul_epilogues(
    g: &Graph,
    supports: &dyn Fn(&Node, &[&Shape]) -> bool,
    report: &mut FusionReport,
) -> Result<Graph> {
    let nodes = g.nodes();
    let uses = use_counts(g);
    let kind = FusionKind::MatMulEpilogue;
    // consumer -> (matmul node, fused op)
    let mut plan: HashMap<usize, (usize, FusedMatMul, Vec<NodeId>)> = HashMap::new();
    for (i, nd) in nodes.iter().enumerate() {
        let Some(program) = as_program(nd).filter(|_| candidate(nd)) else { continue };
        let single = |x: &NodeId| uses[x.index()] == nd.inputs.iter().filter(|y| *y == x).count();
        let is_mm = |x: &&NodeId| matches!(nodes[x.index()].op, Op::MatMul(_));
        let Some(&m) = nd.inputs.iter().filter(is_mm).find(|x| single(x) && nodes[x.index()].ty == nd.ty) else {
            // Say why each matmul input stayed a plain matmul.
            for x in nd.inputs.iter().filter(is_mm) {
                let reason = if !single(x) {
                    Reason::MultipleConsumers(uses[x.index()])
                } else {
                    Reason::Broadcast { from: nodes[x.index()].ty.to_string(), to: nd.ty.to_string() }
                };
                report.reject(x.index(), "matmul", kind, reason);
            }
            continue;
        };
        let Op::MatMul(mm) = &nodes[m.index()].op else { continue };
        // Input(0) is the matmul; the other inputs follow in order of first appearance.
        let mut extras: Vec<NodeId> = vec![];
        let remap: Vec<usize> = nd
            .inputs
            .iter()
            .map(|&x| {
                if x == m {
                    0
                } else if let Some(p) = extras.iter().position(|&e| e == x) {
                    p + 1
                } else {
                    extras.push(x);
                    extras.len()
                }
            })
            .collect();
        let program: Vec<Instr> = program
            .into_iter()
            .map(|ins| if let Instr::Input(k) = ins { Instr::Input(remap[k]) } else { ins })
            .collect();
        let op = FusedMatMul { matmul: mm.clone(), epilogue: Fused { program } };
        let mut ins = nodes[m.index()].inputs.clone();
        ins.extend(&extras);
        let tys: Vec<&Shape> = ins.iter().map(|x| &nodes[x.index()].ty).collect();
        if rlx_ir::OpDef::infer(&op, &tys).ok().as_ref() != Some(&nd.ty) {
            report.reject(m.index(), "matmul", kind, Reason::TypeWouldChange);
            continue;
        }
        let probe = Node { op: Op::FusedMatMul(op.clone()), inputs: ins.clone(), ty: nd.ty.clone() };
        if !supports(&probe, &tys) {
            let what = format!("fused_matmul {} with {} inputs", nd.ty, tys.len());
            report.reject(m.index(), "matmul", kind, Reason::BackendLacksKernel(what));
            continue;
        }
        plan.insert(i, (m.index(), op, ins));
    }
    let count = |_: usize, op: &FusedMatMul| {
        op.epilogue.program.iter().filter(|i| matches!(i, Instr::Unary(..) | Instr::Binary(..))).count()
    };
    emit_absorbing(g, &plan, count, kind, report)
}

/// Whether `op` over `ins` (replacing node `nd` and absorbing producer `x`) keeps `nd`'s type and
/// runs natively on the backend; otherwise the reason goes in the report.
#[allow(clippy::too_many_arguments)]
pub(crate) fn admissible<O: rlx_ir::OpDef + Clone + Into<Op>>(
    op: &O,
    ins: &[NodeId],
    nd: &Node,
    nodes: &[Node],
    x: usize,
    kind: FusionKind,
    supports: &dyn Fn(&Node, &[&Shape]) -> bool,
    report: &mut FusionReport,
) -> bool {
    let name = nodes[x].op.def().name();
    let tys: Vec<&Shape> = ins.iter().map(|i| &nodes[i.index()].ty).collect();
    if op.infer(&tys).ok().as_ref() != Some(&nd.ty) {
        report.reject(x, name, kind, Reason::TypeWouldChange);
        return false;
    }
    let probe = Node { op: op.clone().into(), inputs: ins.to_vec(), ty: nd.ty.clone() };
    if !supports(&probe, &tys) {
        let what = format!("{} {} with {} inputs", op.name(), nd.ty, tys.len());
        report.reject(x, name, kind, Reason::BackendLacksKernel(what));
        return false;
    }
    true
}

/// Emits `g` with each planned node (key) replaced by its fused op on the given inputs and the
/// node it absorbed dropped (mapped to the fused node), recording each fusion in the report;
/// `count(absorbed, op)` is the number of ops the fusion folded in.
pub(crate) fn emit_absorbing<O: Clone + Into<Op>>(
    g: &Graph,
    plan: &HashMap<usize, (usize, O, Vec<NodeId>)>,
    count: impl Fn(usize, &O) -> usize,
    kind: FusionKind,
    report: &mut FusionReport,
) -> Result<Graph> {
    let nodes = g.nodes();
    let absorbed: std::collections::HashSet<usize> = plan.values().map(|p| p.0).collect();
    let mut out = Graph::new(g.name());
    let mut map = vec![NodeId(u32::MAX); nodes.len()];
    for (i, nd) in nodes.iter().enumerate() {
        if absorbed.contains(&i) {
            continue;
        }
        if let Some((x, op, ins)) = plan.get(&i) {
            let ins: Vec<NodeId> = ins.iter().map(|x| map[x.index()]).collect();
            map[i] = out.try_add(op.clone(), &ins)?;
            report.fused.push(Fusion { kind, node: i as u32, ops: count(*x, op), inputs: ins.len() });
            continue;
        }
        let ins: Vec<NodeId> = nd.inputs.iter().map(|x| map[x.index()]).collect();
        map[i] = out.try_add(nd.op.clone(), &ins)?;
    }
    // The absorbed node is reported as part of the fusion; it maps to the fused node.
    for (&i, (x, _, _)) in plan {
        map[*x] = map[i];
    }
    report.fused.retain(|f| f.kind == kind || !absorbed.contains(&(f.node as usize)));
    out.set_outputs(g.outputs().iter().map(|o| map[o.index()]).collect());
    out.verify()?;
    report.remap(&map.iter().map(|m| m.0).collect::<Vec<_>>());
    Ok(out)
}
