//! The memory plan: one arena, liveness intervals, best-fit reuse of freed blocks, in-place
//! updates for ops whose input dies at them, and views that share their parent's buffer.

use rlx_ir::{Error, Graph, Node, NodeId, Op, OpTraits, Result};
use std::fmt;

/// Every block starts on a 64-byte boundary.
pub const ALIGN: usize = 64;

fn align(n: usize) -> usize {
    n.max(1).div_ceil(ALIGN) * ALIGN
}

/// How a node got its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotKind {
    /// A block of its own (possibly reused after an earlier value died).
    Own,
    /// Shares the buffer of this input, which dies here: the kernel updates it in place.
    InPlace(NodeId),
    /// A view (reshape-like) of this input: same bytes, no work at run time.
    View(NodeId),
    /// Params and constants: a block never reused, written outside `run`.
    Permanent,
}

/// Where one node's value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Byte offset in the arena (64-byte aligned).
    pub offset: usize,
    /// Size in bytes.
    pub bytes: usize,
    /// How it was placed.
    pub kind: SlotKind,
}

/// The arena layout of a graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    /// One slot per node.
    pub slots: Vec<Slot>,
    /// Arena size: the peak of the plan.
    pub arena_bytes: usize,
    /// Bytes with one aligned slot per node (no reuse): the naive sum.
    pub naive_bytes: usize,
}

impl MemoryPlan {
    /// Counts of in-place and view slots.
    pub fn counts(&self) -> (usize, usize) {
        let ip = self.slots.iter().filter(|s| matches!(s.kind, SlotKind::InPlace(_))).count();
        let v = self.slots.iter().filter(|s| matches!(s.kind, SlotKind::View(_))).count();
        (ip, v)
    }
}

impl fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (ip, v) = self.counts();
        let pct = 100.0 * self.arena_bytes as f64 / self.naive_bytes.max(1) as f64;
        write!(
            f,
            "memory plan: peak {} bytes vs naive {} bytes ({pct:.1}%), {ip} in place, {v} views",
            self.arena_bytes, self.naive_bytes
        )
    }
}

/// The in-place rule the CPU backend uses: `fused` kernels read each chunk before writing it.
pub fn fused_in_place(n: &Node) -> bool {
    matches!(n.op, Op::Fused(_))
}

/// Free blocks, sorted by offset, coalesced; allocation is best fit.
#[derive(Default)]
struct FreeList {
    blocks: Vec<(usize, usize)>,
    top: usize,
}

impl FreeList {
    fn alloc(&mut self, size: usize) -> usize {
        let best = self.blocks.iter().enumerate().filter(|(_, b)| b.1 >= size).min_by_key(|(_, b)| b.1).map(|(i, _)| i);
        if let Some(i) = best {
            let (off, len) = self.blocks[i];
            if len == size {
                self.blocks.remove(i);
            } else {
                self.blocks[i] = (off + size, len - size);
            }
            return off;
        }
        // Grow the arena, starting inside a free block that ends at the top.
        if let Some(&(off, len)) = self.blocks.last()
            && off + len == self.top
        {
            self.blocks.pop();
            self.top = off + size;
            return off;
        }
        let off = self.top;
        self.top += size;
        off
    }

    fn free(&mut self, off: usize, size: usize) {
        let i = self.blocks.partition_point(|b| b.0 < off);
        self.blocks.insert(i, (off, size));
        if i + 1 < self.blocks.len() && self.blocks[i].0 + self.blocks[i].1 == self.blocks[i + 1].0 {
            self.blocks[i].1 += self.blocks[i + 1].1;
            self.blocks.remove(i + 1);
        }
        if i > 0 && self.blocks[i - 1].0 + self.blocks[i - 1].1 == self.blocks[i].0 {
            self.blocks[i - 1].1 += self.blocks[i].1;
            self.blocks.remove(i);
        }
    }
}

/// The byte offset of a `slice` whose elements are one contiguous run of its input (step 1,
/// whole trailing axes, one index on the axes before the sliced one), so it can be a view.
fn contiguous_slice(g: &Graph, nd: &Node) -> Option<usize> {
    let Op::Slice(s) = &nd.op else { return None };
    let x = &g.nodes()[nd.inputs[0].index()].ty;
    let d = x.fixed_dims()?;
    if s.steps.iter().any(|&st| st != 1) || s.starts.len() != d.len() || s.ends.len() != d.len() {
        return None;
    }
    // The innermost axis not taken whole; axes before it must hold one index each.
    let p = (0..d.len()).rev().find(|&a| s.starts[a] != 0 || s.ends[a] != d[a]).unwrap_or(0);
    if (0..p).any(|a| s.ends[a] - s.starts[a] != 1) {
        return None;
    }
    let elem = x.dtype.size_bytes();
    if x.size_bytes()? != d.iter().product::<usize>() * elem {
        return None;
    }
    let before: usize = (0..d.len()).map(|a| s.starts[a] * d[a + 1..].iter().product::<usize>()).sum();
    Some(before * elem)
}

/// Plans `g`'s arena. `in_place(node)` says whether the backend's kernel for the node may write
/// over an input of the same type (it is asked only when such an input dies at the node).
pub fn plan(g: &Graph, in_place: &dyn Fn(&Node) -> bool) -> Result<MemoryPlan> {
    plan_with_updates(g, in_place, &[])
}

/// Whether node `v` may write its value straight into param `p`'s block: a
/// node that updates `p` as its operand (`OpTraits::UPDATES_OPERAND`: `dynamic_update_slice`,
/// `paged_kv_write`) or a `fused` region reading `p` (both read what they overwrite
/// first or never), and no later step reads the old value.
fn writes_param_in_place(g: &Graph, v: usize, p: NodeId, last_read: usize) -> bool {
    let nd = &g.nodes()[v];
    let fits = match nd.op {
        Op::Fused(_) => nd.inputs.contains(&p),
        _ => nd.op.def().traits().contains(OpTraits::UPDATES_OPERAND) && nd.inputs.first() == Some(&p),
    };
    fits && last_read == v && !g.outputs().contains(&p)
}

/// The plan every compile hands its backend: `fused_in_place` nodes write over a dying input,
/// and each state update (param index, output index in `g`'s order) is placed on its param's
/// block where `plan_with_updates` allows it.
pub fn plan_updates(g: &Graph, updates: &[crate::ParamUpdate]) -> Result<MemoryPlan> {
    let params = g.params();
    let pairs = updates
        .iter()
        .map(|u| match (params.get(u.param), g.outputs().get(u.output)) {
            (Some(&(p, _)), Some(&v)) => Ok((p, v)),
            _ => Err(Error::eval(
                "memory plan",
                format!(
                    "state update {u:?} names a param or output graph `{}` lacks ({} params, {} outputs)",
                    g.name(),
                    params.len(),
                    g.outputs().len()
                ),
            )),
        })
        .collect::<Result<Vec<_>>>()?;
    plan_with_updates(g, &fused_in_place, &pairs)
}

/// Like `plan`, for a graph whose outputs include state updates `(param, value)` (see
/// `Graph::lower_updates`): a value that can be computed in place over its param gets the
/// param's block (a KV cache written at one position, an optimizer step), so no copy is needed.
pub fn plan_with_updates(
    g: &Graph,
    in_place: &dyn Fn(&Node) -> bool,
    updates: &[(NodeId, NodeId)],
) -> Result<MemoryPlan> {
    plan_inner(g, in_place, updates, false)
}

/// The plan of a loop body, run once per trip on the loop's own buffers: like `plan_updates`
/// without updates, except that the inputs live to the end (no step writes over them, nor
/// reuses their bytes), so the backend can point them at the loop's carries and sequences in
/// place every trip instead of copying each into the arena first.
pub fn plan_body(g: &Graph) -> Result<MemoryPlan> {
    plan_inner(g, &fused_in_place, &[], true)
}

/// The graphs a node holds: a loop's body (and condition), a branch's two bodies.
fn held_graphs(op: &Op) -> Vec<&Graph> {
    match op {
        Op::Scan(s) => vec![&*s.body],
        Op::WhileLoop(w) => vec![&*w.cond, &*w.body],
        Op::Cond(c) => vec![&*c.then_body, &*c.else_body],
        _ => vec![],
    }
}

/// Bytes the arenas of `g`'s loop and branch bodies take when `backend` runs them natively
/// (each compiled once, pruned and legalized as the backend does, planned by `plan_body`, and
/// nested bodies counted too); ops the backend unrolls hold no body after legalization, so a
/// legalized `g` counts only what the backend really allocates. The results of one loop share
/// one body. What a whole compile needs at its peak is this plus the graph's own arena, since
/// every body's arena lives as long as the executable.
pub fn body_arena_bytes(g: &Graph, backend: &dyn crate::Backend) -> Result<usize> {
    let mut seen: Vec<&Graph> = vec![];
    let mut total = 0;
    for n in g.nodes() {
        for body in held_graphs(&n.op) {
            if seen.contains(&body) {
                continue;
            }
            seen.push(body);
            let pruned = rlx_ir::ops::control::prune(body);
            let (legal, _) = crate::legalize(&pruned, backend)?;
            total += plan_body(&legal)?.arena_bytes + body_arena_bytes(&legal, backend)?;
        }
    }
    Ok(total)
}

fn plan_inner(
    g: &Graph,
    in_place: &dyn Fn(&Node) -> bool,
    updates: &[(NodeId, NodeId)],
    keep_inputs: bool,
) -> Result<MemoryPlan> {
    let nodes = g.nodes();
    let n = nodes.len();
    let mut bytes = Vec::with_capacity(n);
    for (i, nd) in nodes.iter().enumerate() {
        bytes.push(nd.ty.size_bytes().ok_or_else(|| Error::UnboundDim {
            symbol: nd.ty.symbols().next().unwrap_or("?").into(),
            context: format!("node %{i} ({}) in the memory plan", nd.op.def().name()),
        })?);
    }
    // Buffer owner of each node: views share their input's buffer.
    let mut root: Vec<usize> = (0..n).collect();
    // Byte offset of each view into its input: reshape-like views at 0, contiguous slices inside.
    let mut view_at: Vec<Option<usize>> = vec![None; n];
    for (i, nd) in nodes.iter().enumerate() {
        let same = nd.inputs.len() == 1 && nodes[nd.inputs[0].index()].ty.size_bytes() == nd.ty.size_bytes();
        view_at[i] =
            if nd.op.def().traits().contains(OpTraits::VIEW) && same { Some(0) } else { contiguous_slice(g, nd) };
        if view_at[i].is_some() {
            root[i] = root[nd.inputs[0].index()];
        }
    }
    // Liveness: the last step reading any alias of a buffer; outputs live to the end.
    let mut end = vec![0usize; n];
    for (i, nd) in nodes.iter().enumerate() {
        end[root[i]] = end[root[i]].max(i);
        for x in &nd.inputs {
            let r = root[x.index()];
            end[r] = end[r].max(i);
        }
    }
    for o in g.outputs() {
        end[root[o.index()]] = usize::MAX;
    }
    if keep_inputs {
        for (id, _) in g.inputs() {
            end[root[id.index()]] = usize::MAX;
        }
    }
    let permanent = |nd: &Node| nd.inputs.is_empty() && !matches!(nd.op, Op::Input(_));
    let mut free = FreeList::default();
    let mut slots: Vec<Option<Slot>> = vec![None; n];
    // Leaves first: inputs are written before the first step, params and constants outside run.
    for (i, nd) in nodes.iter().enumerate() {
        if nd.inputs.is_empty() {
            let kind = if permanent(nd) { SlotKind::Permanent } else { SlotKind::Own };
            slots[i] = Some(Slot { offset: free.alloc(align(bytes[i])), bytes: bytes[i], kind });
        }
    }
    let mut dying: Vec<Vec<usize>> = vec![vec![]; n];
    for i in 0..n {
        if root[i] == i && end[i] != usize::MAX && !permanent(&nodes[i]) {
            dying[end[i].min(n - 1)].push(i);
        }
    }
    let mut onto_param: Vec<Option<NodeId>> = vec![None; n];
    for &(p, v) in updates {
        let (pi, vi) = (p.index(), v.index());
        if pi < n && vi < n && root[vi] == vi && onto_param[vi].is_none() && writes_param_in_place(g, vi, p, end[pi]) {
            onto_param[vi] = Some(p);
        }
    }
    for (i, nd) in nodes.iter().enumerate() {
        let mut taken = None;
        if nd.inputs.is_empty() {
        } else if let Some(p) = onto_param[i] {
            let s = slots[p.index()].expect("params are placed first");
            slots[i] = Some(Slot { offset: s.offset, bytes: bytes[i], kind: SlotKind::InPlace(p) });
        } else if root[i] != i {
            let parent = slots[nd.inputs[0].index()].expect("parents are placed first");
            let offset = parent.offset + view_at[i].unwrap_or(0);
            slots[i] = Some(Slot { offset, bytes: bytes[i], kind: SlotKind::View(nd.inputs[0]) });
        } else {
            let donor = nd.inputs.iter().find(|x| {
                let (xi, r) = (x.index(), root[x.index()]);
                end[r] == i
                    && !permanent(&nodes[r])
                    && nodes[xi].ty.dtype == nd.ty.dtype
                    && nodes[xi].ty.numel() == nd.ty.numel()
                    && align(bytes[r]) == align(bytes[i])
            });
            if let Some(&x) = donor
                && in_place(nd)
            {
                let r = root[x.index()];
                let s = slots[r].expect("inputs are placed first");
                slots[i] = Some(Slot { offset: s.offset, bytes: bytes[i], kind: SlotKind::InPlace(x) });
                taken = Some(r);
            } else {
                slots[i] = Some(Slot { offset: free.alloc(align(bytes[i])), bytes: bytes[i], kind: SlotKind::Own });
            }
        }
        // Free what dies here (after placing the output, so it never overlaps a live input).
        for &d in &dying[i] {
            if Some(d) != taken {
                let s = slots[d].expect("placed");
                free.free(s.offset, align(bytes[d]));
            }
        }
    }
    let slots: Vec<Slot> = slots.into_iter().map(|s| s.expect("every node placed")).collect();
    let naive_bytes = bytes.iter().map(|&b| align(b)).sum();
    Ok(MemoryPlan { slots, arena_bytes: free.top, naive_bytes })
}
