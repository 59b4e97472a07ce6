//! Sibling matmuls merged: matmuls (or `fused_matmul`s) that read the same left input with
//! weights of one type (Q/K/V, SwiGLU's gate and up, grouped-query K/V) become one
//! `stacked_matmul` whose output stacks their results; each old value is a leading-axis slice
//! of it, which the memory plan keeps as a view. Runs after epilogue fusion, so the per-group
//! bias and activation move into the stacked op when every sibling has the same epilogue.

use crate::report::{Fusion, FusionKind, FusionReport, Reason};
use rlx_ir::ops::{Fused, Reshape, StackedMatMul};
use rlx_ir::{Graph, Node, NodeId, Op, Result, Shape};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// A merge candidate: a matmul (or fused matmul) with its left input, weight and extras.
struct Cand<'g> {
    node: usize,
    x: NodeId,
    w: NodeId,
    transpose_b: bool,
    epilogue: Option<&'g Fused>,
    extras: &'g [NodeId],
}

fn candidate(i: usize, nd: &Node) -> Option<Cand<'_>> {
    let (mm, epilogue, extras) = match &nd.op {
        Op::MatMul(mm) => (mm, None, &nd.inputs[2..]),
        Op::FusedMatMul(f) => (&f.matmul, Some(&f.epilogue), &nd.inputs[2..]),
        _ => return None,
    };
    (!mm.transpose_a).then_some(Cand {
        node: i,
        x: nd.inputs[0],
        w: nd.inputs[1],
        transpose_b: mm.transpose_b,
        epilogue,
        extras,
    })
}

/// Why `c` cannot join a group led by `lead` (None: it can).
fn mismatch(g: &Graph, lead: &Cand<'_>, c: &Cand<'_>) -> Option<String> {
    let ty = |x: NodeId| &g.nodes()[x.index()].ty;
    if ty(c.w).rank() != 2 {
        return Some(format!("weight {} is not 2-D", ty(c.w)));
    }
    if ty(c.w) != ty(lead.w) || c.transpose_b != lead.transpose_b {
        return Some(format!("weight {} differs from the sibling's {} (k, n or dtype)", ty(c.w), ty(lead.w)));
    }
    if c.epilogue != lead.epilogue || c.extras.len() != lead.extras.len() {
        return Some("its epilogue differs from the sibling's".into());
    }
    if c.extras.iter().zip(lead.extras).any(|(a, b)| ty(*a) != ty(*b)) {
        return Some("its epilogue inputs differ in type from the sibling's".into());
    }
    None
}

/// Marks every node that depends on one of `from` (the nodes themselves included).
fn downstream(g: &Graph, from: &[usize]) -> Vec<bool> {
    let mut hit = vec![false; g.len()];
    let first = from.iter().copied().min().unwrap_or(g.len());
    from.iter().for_each(|&i| hit[i] = true);
    for i in first..g.len() {
        if !hit[i] && g.nodes()[i].inputs.iter().any(|x| hit[x.index()]) {
            hit[i] = true;
        }
    }
    hit
}

/// One node of the rewritten graph, before ordering.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Item {
    /// An original node that stays.
    Orig(usize),
    /// The stacked matmul of group `k`.
    Group(usize),
    /// A merged member, read back as a slice of its group.
    View(usize),
}

/// Merges sibling matmuls of `g` into `stacked_matmul` nodes where `supports` says the backend
/// runs them, recording each merge (and each sibling left out, with why) in `report`.
pub fn merge_sibling_matmuls(
    g: &Graph,
    supports: &dyn Fn(&Node, &[&Shape]) -> bool,
    report: &mut FusionReport,
) -> Result<Graph> {
    let nodes = g.nodes();
    let kind = FusionKind::StackedMatMul;
    // Candidates by left input, in node order.
    let mut by_x: HashMap<NodeId, Vec<Cand<'_>>> = HashMap::new();
    let mut xs = vec![];
    for (i, nd) in nodes.iter().enumerate() {
        if let Some(c) = candidate(i, nd) {
            if !by_x.contains_key(&c.x) {
                xs.push(c.x);
            }
            by_x.entry(c.x).or_default().push(c);
        }
    }
    // Groups of members (node ids) with the op they become.
    let mut groups: Vec<(Vec<usize>, StackedMatMul, Vec<NodeId>)> = vec![];
    for x in xs {
        let mut rest = by_x.remove(&x).unwrap_or_default();
        while rest.len() >= 2 {
            let lead = rest.remove(0);
            let (mut members, mut left) = (vec![lead], vec![]);
            for c in rest {
                match mismatch(g, &members[0], &c) {
                    None => members.push(c),
                    Some(why) => {
                        report.reject(c.node, nodes[c.node].op.def().name(), kind, Reason::NotMergeable(why));
                        left.push(c);
                    }
                }
            }
            rest = left;
            // A member whose weight or epilogue inputs depend on a sibling would form a cycle.
            loop {
                let ids: Vec<usize> = members.iter().map(|c| c.node).collect();
                let hit = downstream(g, &ids);
                let Some(p) = members
                    .iter()
                    .position(|c| std::iter::once(&c.w).chain(c.extras).chain([&c.x]).any(|x| hit[x.index()]))
                else {
                    break;
                };
                let c = members.remove(p);
                let why = "its weight or epilogue input depends on a sibling".to_string();
                report.reject(c.node, nodes[c.node].op.def().name(), kind, Reason::NotMergeable(why));
            }
            if members.len() < 2 {
                continue;
            }
            let op = StackedMatMul {
                groups: members.len(),
                transpose_b: members[0].transpose_b,
                epilogue: members[0].epilogue.cloned(),
            };
            let mut ins = vec![x];
            ins.extend(members.iter().map(|c| c.w));
            members.iter().for_each(|c| ins.extend_from_slice(c.extras));
            let tys: Vec<&Shape> = ins.iter().map(|i| &nodes[i.index()].ty).collect();
            let ty = match rlx_ir::OpDef::infer(&op, &tys) {
                Ok(t) => t,
                Err(_) => {
                    report.reject(members[0].node, "matmul", kind, Reason::TypeWouldChange);
                    continue;
                }
            };
            let probe = Node { op: Op::StackedMatMul(op.clone()), inputs: ins.clone(), ty: ty.clone() };
            if !supports(&probe, &tys) {
                let what = format!("stacked_matmul {ty}");
                report.reject(members[0].node, "matmul", kind, Reason::BackendLacksKernel(what));
                continue;
            }
            groups.push((members.iter().map(|c| c.node).collect(), op, ins));
        }
    }
    if groups.is_empty() {
        return Ok(g.clone());
    }
    emit(g, &groups, report)
}

/// Rewrites `g` with the groups, ordering nodes topologically and as close to the original order
/// as dependencies allow (a group goes where its first member was, once its inputs exist).
fn emit(g: &Graph, groups: &[(Vec<usize>, StackedMatMul, Vec<NodeId>)], report: &mut FusionReport) -> Result<Graph> {
    let nodes = g.nodes();
    let n = nodes.len();
    let mut group_of: Vec<Option<(usize, usize)>> = vec![None; n];
    for (k, (members, _, _)) in groups.iter().enumerate() {
        members.iter().enumerate().for_each(|(j, &m)| group_of[m] = Some((k, j)));
    }
    let item_of = |x: NodeId| if group_of[x.index()].is_some() { Item::View(x.index()) } else { Item::Orig(x.index()) };
    // Dependencies of each item, and the items waiting on each.
    let mut deps: HashMap<Item, Vec<Item>> = HashMap::new();
    for (i, nd) in nodes.iter().enumerate() {
        let it = match group_of[i] {
            Some((k, _)) => {
                deps.insert(Item::View(i), vec![Item::Group(k)]);
                continue;
            }
            None => Item::Orig(i),
        };
        deps.insert(it, nd.inputs.iter().map(|&x| item_of(x)).collect());
    }
    for (k, (_, _, ins)) in groups.iter().enumerate() {
        deps.insert(Item::Group(k), ins.iter().map(|&x| item_of(x)).collect());
    }
    let prio = |it: Item| match it {
        Item::Orig(i) | Item::View(i) => i,
        Item::Group(k) => groups[k].0[0],
    };
    let mut waiting: HashMap<Item, Vec<Item>> = HashMap::new();
    let mut missing: HashMap<Item, usize> = HashMap::new();
    let mut heap = BinaryHeap::new();
    for (&it, ds) in &deps {
        missing.insert(it, ds.len());
        ds.iter().for_each(|&d| waiting.entry(d).or_default().push(it));
        if ds.is_empty() {
            heap.push(Reverse((prio(it), it)));
        }
    }
    let mut out = Graph::new(g.name());
    let mut map = vec![NodeId(u32::MAX); n];
    let mut stacked: Vec<Option<NodeId>> = vec![None; groups.len()];
    // The report follows each merged member to its stacked node.
    let mut report_map: Vec<u32> = vec![u32::MAX; n];
    let mut merged = vec![];
    while let Some(Reverse((_, it))) = heap.pop() {
        match it {
            Item::Orig(i) => {
                let ins: Vec<NodeId> = nodes[i].inputs.iter().map(|x| map[x.index()]).collect();
                map[i] = out.try_add(nodes[i].op.clone(), &ins)?;
                report_map[i] = map[i].0;
            }
            Item::Group(k) => {
                let (members, op, ins) = &groups[k];
                let ins: Vec<NodeId> = ins.iter().map(|x| map[x.index()]).collect();
                let s = out.try_add(op.clone(), &ins)?;
                stacked[k] = Some(s);
                members.iter().for_each(|&m| report_map[m] = s.0);
                merged.push(Fusion {
                    kind: FusionKind::StackedMatMul,
                    node: s.0,
                    ops: members.len(),
                    inputs: ins.len(),
                });
            }
            Item::View(i) => {
                let (k, j) = group_of[i].expect("a member");
                let s = stacked[k].expect("a group precedes its views");
                let sl = out.slice_axis(s, 0, j, j + 1);
                map[i] = out.try_add(Reshape { dims: nodes[i].ty.fixed_dims().unwrap_or_default() }, &[sl])?;
            }
        }
        for &w in waiting.get(&it).map(Vec::as_slice).unwrap_or(&[]) {
            let m = missing.get_mut(&w).expect("every item counted");
            *m -= 1;
            if *m == 0 {
                heap.push(Reverse((prio(w), w)));
            }
        }
    }
    if map.iter().any(|m| m.0 == u32::MAX) {
        return Err(rlx_ir::Error::eval("merge_matmul", "a cycle through merged matmuls (a bug of the pass)"));
    }
    out.set_outputs(g.outputs().iter().map(|o| map[o.index()]).collect());
    out.verify()?;
    report.remap(&report_map);
    report.fused.extend(merged);
    report.fused.sort_by_key(|f| f.node);
    Ok(out)
}
