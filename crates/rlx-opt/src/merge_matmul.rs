//! Sibling matmuls merged: matmuls (or `fused_matmul`s) that read the same left input with
//! weights of one type (Q/K/V, SwiGLU's gate and up, grouped-query K/V) become one
//! `stacked_matmul` whose output stacks their results; each old value is a leading-axis slice
//! of it, which the memory plan keeps as a view. Runs after epilogue fusion, so the per-group
//! bias and activation move into the stacked op when every sibling has the same epilogue.
//! SwiGLU's gate and up, where one sibling's epilogue reads the other (`silu(g) * u`), become one
//! combining `stacked_matmul` whose epilogue joins both products into the single output.

use crate::report::{Fusion, FusionKind, FusionReport, Reason};
use rlx_ir::ops::{Fused, Instr, Reshape, StackedMatMul};
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

/// What becomes of a merged member.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Read back as slice `j` of its group's stacked output.
    Slice(usize),
    /// It is the group's (combined) output.
    Whole,
    /// Folded into the combining epilogue; nothing reads it any more.
    Gone,
}

/// A group: its members with their roles, the op they become, and its inputs.
struct Group {
    members: Vec<(usize, Role)>,
    op: StackedMatMul,
    ins: Vec<NodeId>,
}

/// Consumers of every node (graph outputs count as one each).
fn use_counts(g: &Graph) -> Vec<usize> {
    let mut uses = vec![0; g.len()];
    g.nodes().iter().flat_map(|n| &n.inputs).for_each(|x| uses[x.index()] += 1);
    g.outputs().iter().for_each(|x| uses[x.index()] += 1);
    uses
}

/// The combining program of `a`'s epilogue reading sibling `b`: inputs are a's product, b's
/// product, then `extras` (a's extras other than b, then b's). None when a's result is b itself.
fn combine_program(a: &Cand<'_>, b: &Cand<'_>) -> Option<(Fused, Vec<NodeId>)> {
    let bid = NodeId(b.node as u32);
    let mut extras: Vec<NodeId> = a.extras.iter().copied().filter(|&x| x != bid).collect();
    let b_first = extras.len();
    extras.extend_from_slice(b.extras);
    let mut prog = vec![];
    // b's epilogue on its product (Input(1)); its extras after a's.
    let rb = match b.epilogue {
        None => {
            prog.push(Instr::Input(1));
            0
        }
        Some(f) => {
            for ins in &f.program {
                prog.push(match *ins {
                    Instr::Input(0) => Instr::Input(1),
                    Instr::Input(i) => Instr::Input(2 + b_first + i - 1),
                    other => other,
                });
            }
            prog.len() - 1
        }
    };
    // a's epilogue: its product is Input(0); reads of b alias b's result.
    let base = prog.len();
    let mut map = Vec::with_capacity(a.epilogue?.program.len());
    for ins in &a.epilogue?.program {
        let r = |x: usize| map[x];
        let new = match *ins {
            Instr::Input(0) => Instr::Input(0),
            Instr::Input(i) if a.extras[i - 1] == bid => {
                map.push(rb);
                continue;
            }
            Instr::Input(i) => {
                // Position of extra i - 1 among a's extras that are not b.
                Instr::Input(2 + a.extras[..i - 1].iter().filter(|&&x| x != bid).count())
            }
            Instr::Const(c) => Instr::Const(c),
            Instr::Unary(k, x) => Instr::Unary(k, r(x)),
            Instr::Binary(k, x, y) => Instr::Binary(k, r(x), r(y)),
        };
        map.push(prog.len());
        prog.push(new);
    }
    (map.last() == Some(&(prog.len() - 1)) && prog.len() > base).then_some((Fused { program: prog }, extras))
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

/// Why `b` cannot be folded into sibling `a`'s combining epilogue (None: it can). `a`'s
/// epilogue reads `b`; `hit` marks what depends on either.
fn combine_mismatch(g: &Graph, a: &Cand<'_>, b: &Cand<'_>, uses: &[usize]) -> Option<String> {
    let ty = |x: NodeId| &g.nodes()[x.index()].ty;
    if ty(a.w).rank() != 2 || ty(a.w) != ty(b.w) || a.transpose_b != b.transpose_b {
        return Some(format!("weight {} differs from the gate's {} (k, n or dtype)", ty(b.w), ty(a.w)));
    }
    if uses[b.node] != 1 {
        return Some(format!("its product has {} consumers, not only the sibling reading it", uses[b.node]));
    }
    let hit = downstream(g, &[a.node, b.node]);
    let bid = NodeId(b.node as u32);
    let ins =
        [a.w, b.w].into_iter().chain(a.extras.iter().copied().filter(|&x| x != bid)).chain(b.extras.iter().copied());
    if ins.clone().any(|x| hit[x.index()]) {
        return Some("a weight or epilogue input depends on the pair".into());
    }
    None
}

/// Finds, among `rest` (siblings of one left input `x`), pairs where one's epilogue reads the
/// other (SwiGLU), turns each into a combining group, and removes both from `rest`.
fn take_combines<'g>(
    g: &'g Graph,
    x: NodeId,
    rest: &mut Vec<Cand<'g>>,
    uses: &[usize],
    supports: &dyn Fn(&Node, &[&Shape]) -> bool,
    report: &mut FusionReport,
    groups: &mut Vec<Group>,
) {
    let nodes = g.nodes();
    let kind = FusionKind::CombinedMatMul;
    let mut ai = 0;
    while ai < rest.len() {
        let a = &rest[ai];
        let Some(bi) = rest.iter().position(|b| b.node != a.node && a.extras.contains(&NodeId(b.node as u32))) else {
            ai += 1;
            continue;
        };
        let b = &rest[bi];
        let name = nodes[b.node].op.def().name();
        if let Some(why) = combine_mismatch(g, a, b, uses) {
            report.reject(b.node, name, kind, Reason::NotMergeable(why));
            ai += 1;
            continue;
        }
        let Some((program, extras)) = combine_program(a, b) else {
            ai += 1;
            continue;
        };
        let op = StackedMatMul { groups: 2, transpose_b: a.transpose_b, epilogue: Some(program), combine: true };
        let mut ins = vec![x, a.w, b.w];
        ins.extend(extras);
        let tys: Vec<&Shape> = ins.iter().map(|i| &nodes[i.index()].ty).collect();
        match rlx_ir::OpDef::infer(&op, &tys) {
            Ok(ty) if ty == nodes[a.node].ty => {
                let probe = Node { op: Op::StackedMatMul(op.clone()), inputs: ins.clone(), ty: ty.clone() };
                if !supports(&probe, &tys) {
                    report.reject(
                        a.node,
                        name,
                        kind,
                        Reason::BackendLacksKernel(format!("combining stacked_matmul {ty}")),
                    );
                    ai += 1;
                    continue;
                }
            }
            _ => {
                report.reject(a.node, name, kind, Reason::TypeWouldChange);
                ai += 1;
                continue;
            }
        }
        let members = vec![(a.node, Role::Whole), (b.node, Role::Gone)];
        groups.push(Group { members, op, ins });
        let (hi, lo) = (ai.max(bi), ai.min(bi));
        rest.remove(hi);
        rest.remove(lo);
        ai = lo;
    }
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
    let uses = use_counts(g);
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
    let mut groups: Vec<Group> = vec![];
    for x in xs {
        let mut rest = by_x.remove(&x).unwrap_or_default();
        // SwiGLU pairs first: combining saves the products' round trip through memory.
        take_combines(g, x, &mut rest, &uses, supports, report, &mut groups);
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
                combine: false,
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
            let members = members.iter().enumerate().map(|(j, c)| (c.node, Role::Slice(j))).collect();
            groups.push(Group { members, op, ins });
        }
    }
    if groups.is_empty() {
        return Ok(g.clone());
    }
    emit(g, &groups, report)
}

/// Rewrites `g` with the groups, ordering nodes topologically and as close to the original order
/// as dependencies allow (a group goes where its first member was, once its inputs exist).
fn emit(g: &Graph, groups: &[Group], report: &mut FusionReport) -> Result<Graph> {
    let nodes = g.nodes();
    let n = nodes.len();
    let mut group_of: Vec<Option<(usize, Role)>> = vec![None; n];
    for (k, grp) in groups.iter().enumerate() {
        grp.members.iter().for_each(|&(m, role)| group_of[m] = Some((k, role)));
    }
    let item_of = |x: NodeId| if group_of[x.index()].is_some() { Item::View(x.index()) } else { Item::Orig(x.index()) };
    // Dependencies of each item, and the items waiting on each.
    let mut deps: HashMap<Item, Vec<Item>> = HashMap::new();
    for (i, nd) in nodes.iter().enumerate() {
        let it = match group_of[i] {
            Some((_, Role::Gone)) => continue,
            Some((k, _)) => {
                deps.insert(Item::View(i), vec![Item::Group(k)]);
                continue;
            }
            None => Item::Orig(i),
        };
        deps.insert(it, nd.inputs.iter().map(|&x| item_of(x)).collect());
    }
    for (k, grp) in groups.iter().enumerate() {
        deps.insert(Item::Group(k), grp.ins.iter().map(|&x| item_of(x)).collect());
    }
    let prio = |it: Item| match it {
        Item::Orig(i) | Item::View(i) => i,
        Item::Group(k) => groups[k].members.iter().map(|m| m.0).min().unwrap_or(0),
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
                let grp = &groups[k];
                let ins: Vec<NodeId> = grp.ins.iter().map(|x| map[x.index()]).collect();
                let s = out.try_add(grp.op.clone(), &ins)?;
                stacked[k] = Some(s);
                grp.members.iter().for_each(|&(m, _)| report_map[m] = s.0);
                let kind = if grp.op.combine { FusionKind::CombinedMatMul } else { FusionKind::StackedMatMul };
                merged.push(Fusion { kind, node: s.0, ops: grp.members.len(), inputs: ins.len() });
            }
            Item::View(i) => {
                let (k, role) = group_of[i].expect("a member");
                let s = stacked[k].expect("a group precedes its views");
                map[i] = match role {
                    Role::Slice(j) => {
                        let sl = out.slice_axis(s, 0, j, j + 1);
                        out.try_add(Reshape { dims: nodes[i].ty.fixed_dims().unwrap_or_default() }, &[sl])?
                    }
                    Role::Whole | Role::Gone => s,
                };
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
    let gone = |i: usize| matches!(group_of[i], Some((_, Role::Gone)));
    if map.iter().enumerate().any(|(i, m)| m.0 == u32::MAX && !gone(i)) {
        return Err(rlx_ir::Error::eval("merge_matmul", "a cycle through merged matmuls (a bug of the pass)"));
    }
    out.set_outputs(g.outputs().iter().map(|o| map[o.index()]).collect());
    out.verify()?;
    report.remap(&report_map);
    report.fused.extend(merged);
    report.fused.sort_by_key(|f| f.node);
    Ok(out)
}
