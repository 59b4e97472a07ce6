//! The graph: nodes in topological order, built with shape inference.

use crate::ops::{Cast, Constant, Input, Param};
use crate::{DType, Dim, Error, HostTensor, Op, Result, Shape};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fmt;

/// Index of a node in its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The index as usize.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// One op application with its inferred output type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The op.
    pub op: Op,
    /// Input nodes, all earlier in the graph.
    pub inputs: Vec<NodeId>,
    /// The inferred output type.
    pub ty: Shape,
}

/// A computation graph. Builders infer each output type; the first error is kept and reported
/// by `check`, `verify` and compile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Graph {
    name: String,
    nodes: Vec<Node>,
    outputs: Vec<NodeId>,
    /// State updates `(param, value)`: after every run the param holds the value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    updates: Vec<(NodeId, NodeId)>,
    #[serde(skip)]
    errors: Vec<Error>,
}

impl Graph {
    /// An empty graph.
    pub fn new(name: impl Into<String>) -> Self {
        Graph { name: name.into(), nodes: vec![], outputs: vec![], updates: vec![], errors: vec![] }
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// All nodes in topological order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// A node, if the id belongs to this graph.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.index())
    }

    /// A node's type, if the id belongs to this graph.
    pub fn shape(&self, id: NodeId) -> Option<&Shape> {
        self.node(id).map(|n| &n.ty)
    }

    /// The declared outputs.
    pub fn outputs(&self) -> &[NodeId] {
        &self.outputs
    }

    /// Sets the outputs, in the order `run` returns them.
    pub fn set_outputs(&mut self, outputs: Vec<NodeId>) {
        for (i, &o) in outputs.iter().enumerate() {
            if o.index() >= self.nodes.len() {
                self.record(Error::BadNodeId {
                    op: "set_outputs".into(),
                    index: i,
                    node: o.0,
                    graph: self.name.clone(),
                    len: self.nodes.len(),
                });
            }
        }
        self.outputs = outputs;
    }

    /// State updates `(param, value)` in the order they were declared.
    pub fn updates(&self) -> &[(NodeId, NodeId)] {
        &self.updates
    }

    /// After every run, `param` takes the value of `value` (same shape and dtype): optimizer
    /// steps, KV caches, running statistics. Backends write the value into the param's storage
    /// (in place where the plan allows); the value is not returned as an output.
    pub fn update_param(&mut self, param: NodeId, value: NodeId) {
        let dup = self.updates.iter().any(|(q, _)| *q == param);
        if let Err(e) = self.check_update(param, value, dup) {
            self.record(e);
        }
        self.updates.push((param, value));
    }

    fn check_update(&self, param: NodeId, value: NodeId, duplicate: bool) -> Result<()> {
        let invalid = |reason: String| Error::InvalidGraph { graph: self.name.clone(), reason };
        let Some(p) = self.nodes.get(param.index()) else {
            return Err(invalid(format!("update_param: param node {param} does not exist")));
        };
        let Op::Param(pp) = &p.op else {
            return Err(invalid(format!("update_param: node {param} is a `{}`, not a param", p.op.def().name())));
        };
        let Some(v) = self.nodes.get(value.index()) else {
            return Err(invalid(format!("update_param `{}`: value node {value} does not exist", pp.name)));
        };
        if v.ty != p.ty {
            return Err(invalid(format!(
                "update_param `{}`: the param is {} but the value {value} is {}",
                pp.name, p.ty, v.ty
            )));
        }
        if duplicate {
            return Err(invalid(format!("update_param `{}`: the param already has an update", pp.name)));
        }
        Ok(())
    }

    /// Moves the state updates into the outputs: returns the graph with the update values
    /// appended as outputs (and no updates), and `(param name, output index)` per update.
    pub fn lower_updates(&self) -> (Graph, Vec<(String, usize)>) {
        let mut g = self.clone();
        let mut map = Vec::with_capacity(self.updates.len());
        for &(p, v) in &self.updates {
            let name = match self.nodes.get(p.index()).map(|n| &n.op) {
                Some(Op::Param(pp)) => pp.name.clone(),
                _ => continue,
            };
            map.push((name, g.outputs.len()));
            g.outputs.push(v);
        }
        g.updates.clear();
        (g, map)
    }

    /// Errors recorded while building, first first.
    pub fn errors(&self) -> &[Error] {
        &self.errors
    }

    /// Ok if no builder call failed; otherwise the first error.
    pub fn check(&self) -> Result<()> {
        match self.errors.first() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Input nodes in creation order, with their names.
    pub fn inputs(&self) -> Vec<(NodeId, &str)> {
        self.leaves(|op| match op {
            Op::Input(i) => Some(i.name.as_str()),
            _ => None,
        })
    }

    /// Param nodes in creation order, with their names.
    pub fn params(&self) -> Vec<(NodeId, &str)> {
        self.leaves(|op| match op {
            Op::Param(p) => Some(p.name.as_str()),
            _ => None,
        })
    }

    fn leaves<'a>(&'a self, f: impl Fn(&'a Op) -> Option<&'a str>) -> Vec<(NodeId, &'a str)> {
        let mut out = vec![];
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(name) = f(&n.op) {
                out.push((NodeId(i as u32), name));
            }
        }
        out
    }

    /// Records a builder error (kept; the first one is reported).
    pub fn record(&mut self, e: Error) {
        self.errors.push(e);
    }

    /// Rewrites each node's op in place, given its operands' types; the rewrite must keep the
    /// node's type (an attribute that does not change values, such as a scan's checkpoint).
    pub(crate) fn map_ops(&mut self, mut f: impl FnMut(&mut Op, &[&Shape])) {
        for i in 0..self.nodes.len() {
            let tys: Vec<Shape> = self.nodes[i].inputs.iter().map(|x| self.nodes[x.index()].ty.clone()).collect();
            let refs: Vec<&Shape> = tys.iter().collect();
            f(&mut self.nodes[i].op, &refs);
        }
    }

    /// Adds a node, inferring its type. On error the node gets a placeholder type and the error is
    /// recorded; `check`/`verify`/compile report it.
    pub fn add_node(&mut self, op: impl Into<Op>, inputs: &[NodeId]) -> NodeId {
        let op = op.into();
        let id = NodeId(self.nodes.len() as u32);
        let ty = match self.infer_node(&op, inputs, id) {
            Ok(t) => t,
            Err(e) => {
                self.record(e);
                Shape::scalar(DType::F32)
            }
        };
        self.nodes.push(Node { op, inputs: inputs.to_vec(), ty });
        id
    }

    /// Like `add_node`, but returns the inference error instead of recording it.
    pub fn try_add(&mut self, op: impl Into<Op>, inputs: &[NodeId]) -> Result<NodeId> {
        let op = op.into();
        let id = NodeId(self.nodes.len() as u32);
        let ty = self.infer_node(&op, inputs, id)?;
        self.nodes.push(Node { op, inputs: inputs.to_vec(), ty });
        Ok(id)
    }

    fn infer_node(&self, op: &Op, inputs: &[NodeId], id: NodeId) -> Result<Shape> {
        let def = op.def();
        let mut tys = Vec::with_capacity(inputs.len());
        for (i, &x) in inputs.iter().enumerate() {
            match self.nodes.get(x.index()) {
                Some(n) if x.0 < id.0 => tys.push(&n.ty),
                _ => {
                    return Err(Error::BadNodeId {
                        op: def.name().into(),
                        index: i,
                        node: x.0,
                        graph: self.name.clone(),
                        len: self.nodes.len(),
                    });
                }
            }
        }
        let wrap = |reason: String| Error::Infer {
            op: def.name().into(),
            node: id.0,
            inputs: tys.iter().map(|t| (*t).clone()).collect(),
            reason,
        };
        if !def.arity().accepts(inputs.len()) {
            return Err(wrap(format!("takes {} inputs, got {}", def.arity(), inputs.len())));
        }
        def.infer(&tys).map_err(wrap)
    }

    /// A named runtime input.
    pub fn input(&mut self, name: &str, shape: Shape) -> NodeId {
        self.check_new_name(name);
        self.add_node(Input { name: name.into(), shape }, &[])
    }

    /// A named parameter (weights), set once with `set_param` and kept across runs.
    pub fn param(&mut self, name: &str, shape: Shape) -> NodeId {
        self.check_new_name(name);
        self.add_node(Param { name: name.into(), shape }, &[])
    }

    fn check_new_name(&mut self, name: &str) {
        let taken = self.inputs().iter().chain(self.params().iter()).any(|(_, n)| *n == name);
        if taken || name.is_empty() {
            let e = Error::InvalidGraph {
                graph: self.name.clone(),
                reason: format!("input/param name `{name}` is empty or already used"),
            };
            self.record(e);
        }
    }

    /// A constant tensor baked into the graph.
    pub fn constant(&mut self, value: HostTensor) -> NodeId {
        self.add_node(Constant { value }, &[])
    }

    /// A rank-0 constant.
    pub fn scalar(&mut self, value: f64, dtype: DType) -> NodeId {
        match HostTensor::full(&Shape::scalar(dtype), value) {
            Ok(t) => self.constant(t),
            Err(e) => {
                self.record(e);
                self.add_node(
                    Constant {
                        value: HostTensor { shape: Shape::scalar(DType::F32), data: crate::Data::F(vec![0.0]) },
                    },
                    &[],
                )
            }
        }
    }

    /// The dtype of a node (f32 for an invalid id; the error is recorded by the op that uses it).
    pub fn dtype(&self, id: NodeId) -> DType {
        self.shape(id).map(|s| s.dtype).unwrap_or(DType::F32)
    }

    /// Casts to `to` unless the node already has that dtype.
    pub fn cast_to(&mut self, x: NodeId, to: DType) -> NodeId {
        if self.shape(x).is_some_and(|s| s.dtype == to) { x } else { self.add_node(Cast { to }, &[x]) }
    }

    /// Re-runs inference on every node and checks the structure: the DAG order, arities, unique
    /// names, outputs. Returns the first problem.
    pub fn verify(&self) -> Result<()> {
        self.check()?;
        let invalid = |reason: String| Error::InvalidGraph { graph: self.name.clone(), reason };
        let mut names = HashSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let id = NodeId(i as u32);
            if let Some(name) = match &n.op {
                Op::Input(x) => Some(&x.name),
                Op::Param(x) => Some(&x.name),
                _ => None,
            } && !names.insert(name.clone())
            {
                return Err(invalid(format!("name `{name}` is used twice")));
            }
            let ty = self.infer_node(&n.op, &n.inputs, id)?;
            if ty != n.ty {
                return Err(invalid(format!(
                    "node {id} ({}) records type {} but infers {ty}",
                    n.op.def().name(),
                    n.ty
                )));
            }
        }
        if self.outputs.is_empty() {
            return Err(invalid("no outputs: call set_outputs".into()));
        }
        for o in &self.outputs {
            if o.index() >= self.nodes.len() {
                return Err(invalid(format!("output {o} does not exist")));
            }
        }
        self.verify_updates()
    }

    fn verify_updates(&self) -> Result<()> {
        let mut seen = HashSet::new();
        for &(p, v) in &self.updates {
            let dup = !seen.insert(p);
            self.check_update(p, v, dup)?;
        }
        Ok(())
    }

    /// A copy with dynamic dims replaced by sizes; re-infers every node.
    pub fn bind_dims(&self, bindings: &[(&str, usize)]) -> Result<Graph> {
        self.check()?;
        let map: HashMap<&str, usize> = bindings.iter().copied().collect();
        let bind = |s: &Shape| Shape {
            dims: s
                .dims
                .iter()
                .map(|d| match d {
                    Dim::Sym(n) => map.get(n.as_str()).map_or(d.clone(), |&v| Dim::Fixed(v)),
                    _ => d.clone(),
                })
                .collect(),
            dtype: s.dtype,
        };
        let mut g = Graph::new(self.name.clone());
        for n in &self.nodes {
            let op = match &n.op {
                Op::Input(i) => Op::Input(Input { name: i.name.clone(), shape: bind(&i.shape) }),
                Op::Param(p) => Op::Param(Param { name: p.name.clone(), shape: bind(&p.shape) }),
                other => other.clone(),
            };
            g.try_add(op, &n.inputs)?;
        }
        g.outputs = self.outputs.clone();
        g.updates = self.updates.clone();
        g.verify_updates()?;
        Ok(g)
    }

    /// The first dynamic symbol left in any node type, with the node.
    pub fn first_symbol(&self) -> Option<(NodeId, String)> {
        self.nodes
            .iter()
            .enumerate()
            .find_map(|(i, n)| n.ty.symbols().next().map(|s| (NodeId(i as u32), s.to_string())))
    }

    /// Parses the JSON form and verifies it.
    pub fn from_json(s: &str) -> Result<Graph> {
        let g: Graph = serde_json::from_str(s).map_err(|e| Error::Parse { line: e.line(), reason: e.to_string() })?;
        g.verify()?;
        Ok(g)
    }

    /// The JSON form.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}
