//! The rewrite engine: nodes are rebuilt in topological order into a hash-consed arena, and every
//! new node goes through the rules before it is interned (as in Cranelift's egraph mid-end). A
//! rule returns a replacement; the engine accepts it only when the types match and it is never
//! worse than the node it replaces. Passes repeat until none fires; emission drops dead nodes.

use rlx_ir::{Error, Graph, Node, NodeId, Op, OpTraits, Result, Shape};
use std::collections::{BTreeMap, HashMap};

/// A rewrite rule: given the op, its (already rewritten) inputs and the inferred output type,
/// returns an equivalent node built with `Rewriter::add`, or None.
pub type RuleFn = fn(&mut Rewriter, &Op, &[NodeId], &Shape) -> Option<NodeId>;

/// One named rule.
#[derive(Clone, Copy)]
pub struct Rule {
    /// Name in reports (`add-zero`).
    pub name: &'static str,
    /// The rewrite.
    pub apply: RuleFn,
}

/// A named set of rules, run together by `rewrite`.
#[derive(Clone, Copy)]
pub struct RuleSet {
    /// Name in reports and golden tests.
    pub name: &'static str,
    /// The rules, tried in order.
    pub rules: &'static [Rule],
    /// Legalization sets may add nodes (explicit broadcasts); optimization sets never do.
    pub may_grow: bool,
}

/// What a rewrite did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RewriteStats {
    /// Times each rule fired.
    pub fired: BTreeMap<&'static str, usize>,
    /// Nodes merged by hash-consing (common subexpressions).
    pub cse_merged: usize,
    /// Nodes before and after (after dead-code elimination).
    pub nodes_before: usize,
    /// Nodes after.
    pub nodes_after: usize,
    /// Passes run until nothing fired.
    pub passes: usize,
}

/// Relative cost of one node: contractions dominate, leaves are free.
fn weight(op: &Op) -> usize {
    let t = op.def().traits();
    if t.contains(OpTraits::LEAF) {
        0
    } else if t.contains(OpTraits::CONTRACTION) {
        100
    } else {
        1
    }
}

/// The arena rules build into: hash-consed nodes with their types.
pub struct Rewriter<'a> {
    nodes: Vec<Node>,
    memo: HashMap<(String, Vec<NodeId>), NodeId>,
    sets: &'a [RuleSet],
    /// Largest constant (elements) that folding may create.
    pub fold_limit: usize,
    stats: RewriteStats,
    depth: usize,
    graph: String,
    /// Users (inputs of other nodes, plus outputs) each arena node had in the pass's input graph.
    source_users: Vec<usize>,
}

impl<'a> Rewriter<'a> {
    fn new(graph: &str, sets: &'a [RuleSet]) -> Self {
        Rewriter {
            nodes: vec![],
            memo: HashMap::new(),
            sets,
            fold_limit: 1 << 16,
            stats: RewriteStats::default(),
            depth: 0,
            graph: graph.into(),
            source_users: vec![],
        }
    }

    /// A node of the arena.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    /// A node's op.
    pub fn op(&self, id: NodeId) -> &Op {
        &self.nodes[id.index()].op
    }

    /// A node's type.
    pub fn ty(&self, id: NodeId) -> &Shape {
        &self.nodes[id.index()].ty
    }

    /// How many users the value `id` had in the graph this pass rewrites (0 for a node a rule
    /// created). A rule that would duplicate work when a value is also read elsewhere checks it.
    pub fn source_users(&self, id: NodeId) -> usize {
        self.source_users.get(id.index()).copied().unwrap_or(0)
    }

    /// Infers the type of `op` on `inputs`, as the graph builder does.
    pub fn infer(&self, op: &Op, inputs: &[NodeId]) -> Result<Shape> {
        let def = op.def();
        let tys: Vec<&Shape> = inputs.iter().map(|x| &self.nodes[x.index()].ty).collect();
        let wrap = |reason: String| Error::Infer {
            op: def.name().into(),
            node: self.nodes.len() as u32,
            inputs: tys.iter().map(|t| (*t).clone()).collect(),
            reason,
        };
        if !def.arity().accepts(inputs.len()) {
            return Err(wrap(format!("takes {} inputs, got {}", def.arity(), inputs.len())));
        }
        def.infer(&tys).map_err(wrap)
    }

    /// Adds a node: rules first (the result of a rule goes through the rules again), then
    /// hash-consing. Fed leaves (inputs, params) are never merged or rewritten.
    pub fn add(&mut self, op: impl Into<Op>, inputs: &[NodeId]) -> Result<NodeId> {
        let op = op.into();
        let ty = self.infer(&op, inputs)?;
        let fed = matches!(op, Op::Input(_) | Op::Param(_));
        if !fed && self.depth < 16 {
            for si in 0..self.sets.len() {
                let set = self.sets[si];
                for rule in set.rules {
                    let mark = self.nodes.len();
                    self.depth += 1;
                    let r = (rule.apply)(self, &op, inputs, &ty);
                    self.depth -= 1;
                    if let Some(r) = r
                        && self.nodes[r.index()].ty == ty
                        && (set.may_grow || self.no_worse(mark, &op))
                    {
                        *self.stats.fired.entry(rule.name).or_default() += 1;
                        return Ok(r);
                    }
                }
            }
        }
        let key = (if fed { String::new() } else { serde_json::to_string(&op).unwrap_or_default() }, inputs.to_vec());
        if !fed && let Some(&id) = self.memo.get(&key) {
            self.stats.cse_merged += 1;
            return Ok(id);
        }
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(Node { op, inputs: inputs.to_vec(), ty });
        if !fed {
            self.memo.insert(key, id);
        }
        Ok(id)
    }

    /// A replacement is no worse when the nodes it created weigh at most what it replaces, and
    /// the constants it created stay under the fold limit.
    fn no_worse(&self, mark: usize, old: &Op) -> bool {
        let created = &self.nodes[mark..];
        let w: usize = created.iter().map(|n| weight(&n.op)).sum();
        let consts_ok = created
            .iter()
            .all(|n| !matches!(n.op, Op::Constant(_)) || n.ty.numel().unwrap_or(usize::MAX) <= self.fold_limit);
        w <= weight(old) && consts_ok
    }

    /// Emits the live part of the arena as a graph: everything reachable from `outputs`, plus
    /// every input and param (the graph's interface), in arena order.
    fn emit(&self, outputs: &[NodeId]) -> Result<Graph> {
        let mut live = vec![false; self.nodes.len()];
        let mut stack: Vec<NodeId> = outputs.to_vec();
        for (i, n) in self.nodes.iter().enumerate() {
            if matches!(n.op, Op::Input(_) | Op::Param(_)) {
                stack.push(NodeId(i as u32));
            }
        }
        while let Some(x) = stack.pop() {
            if !std::mem::replace(&mut live[x.index()], true) {
                stack.extend(&self.nodes[x.index()].inputs);
            }
        }
        let mut g = Graph::new(self.graph.clone());
        let mut map = vec![NodeId(u32::MAX); self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            if live[i] {
                let ins: Vec<NodeId> = n.inputs.iter().map(|x| map[x.index()]).collect();
                map[i] = g.try_add(n.op.clone(), &ins)?;
            }
        }
        g.set_outputs(outputs.iter().map(|o| map[o.index()]).collect());
        Ok(g)
    }
}

/// Rewrites `g` with the rule sets until no rule fires (at most 8 passes), merging common
/// subexpressions and dropping dead nodes. Values are preserved exactly or within rounding of
/// reassociation-free rewrites; the soundness property test checks this on random graphs.
pub fn rewrite(g: &Graph, sets: &[RuleSet]) -> Result<(Graph, RewriteStats)> {
    g.verify()?;
    let mut stats = RewriteStats { nodes_before: g.len(), ..Default::default() };
    let mut cur = g.clone();
    for _ in 0..8 {
        let mut rw = Rewriter::new(g.name(), sets);
        let mut users = vec![0usize; cur.len()];
        for x in cur.nodes().iter().flat_map(|n| &n.inputs).chain(cur.outputs()) {
            users[x.index()] += 1;
        }
        let mut map: Vec<NodeId> = Vec::with_capacity(cur.len());
        for (n, &u) in cur.nodes().iter().zip(&users) {
            let ins: Vec<NodeId> = n.inputs.iter().map(|x| map[x.index()]).collect();
            let id = rw.add(n.op.clone(), &ins)?;
            if rw.source_users.len() <= id.index() {
                rw.source_users.resize(id.index() + 1, 0);
            }
            // Merged nodes (CSE) add up their users.
            rw.source_users[id.index()] += u;
            map.push(id);
        }
        let outs: Vec<NodeId> = cur.outputs().iter().map(|o| map[o.index()]).collect();
        let next = rw.emit(&outs)?;
        stats.passes += 1;
        stats.cse_merged += rw.stats.cse_merged;
        let fired = rw.stats.fired.values().sum::<usize>();
        for (k, v) in rw.stats.fired {
            *stats.fired.entry(k).or_default() += v;
        }
        let done = fired == 0 && next.len() == cur.len();
        cur = next;
        if done {
            break;
        }
    }
    cur.verify()?;
    stats.nodes_after = cur.len();
    Ok((cur, stats))
}
