//! `rlx.Graph`: the graph builder of `rlx::ir::Graph`, one to one, with shape inference. Builder
//! errors are raised at once (ValueError with the op, node and input types) and the graph is
//! left as it was before the failing call.

use crate::convert::{dims_arg, dims_py, dtype_arg, host_tensor, numpy_name};
use crate::errors::{IntoPy, guard, to_py};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};
use rlx::ir::{DType, Error, Graph, NodeId, Op, Shape};
use serde_json::Value;

/// A node of a graph (its id); ints are accepted wherever a node is.
#[pyclass(name = "Node", module = "rlx", frozen, eq, hash)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyNode {
    /// The node's index in its graph.
    #[pyo3(get)]
    pub id: u32,
}

#[pymethods]
impl PyNode {
    #[new]
    fn new(id: u32) -> Self {
        PyNode { id }
    }
    fn __repr__(&self) -> String {
        format!("%{}", self.id)
    }
    fn __int__(&self) -> u32 {
        self.id
    }
    fn __index__(&self) -> u32 {
        self.id
    }
}

impl From<NodeId> for PyNode {
    fn from(n: NodeId) -> Self {
        PyNode { id: n.0 }
    }
}

/// A node argument: a `Node` or an int.
#[derive(Debug, Clone, Copy)]
pub struct Id(pub NodeId);

impl<'py> FromPyObject<'py> for Id {
    fn extract_bound(ob: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(n) = ob.downcast::<PyNode>() {
            return Ok(Id(NodeId(n.get().id)));
        }
        match ob.extract::<u32>() {
            Ok(i) => Ok(Id(NodeId(i))),
            Err(_) => Err(PyTypeError::new_err(format!("expected a Node (or a node index), got {}", ob.repr()?))),
        }
    }
}

/// Node ids from node arguments.
pub fn ids(xs: &[Id]) -> Vec<NodeId> {
    xs.iter().map(|x| x.0).collect()
}

/// A computation graph built with shape inference (`rlx::ir::Graph`).
#[pyclass(name = "Graph", module = "rlx")]
#[derive(Debug, Clone)]
pub struct PyGraph {
    /// The Rust graph.
    pub g: Graph,
}

impl PyGraph {
    /// Runs a builder on the graph; on a recorded error (or a panic) restores the graph as it
    /// was and raises the error.
    pub fn build<R>(&mut self, f: impl FnOnce(&mut Graph) -> R) -> PyResult<R> {
        let (n, errs, ups) = (self.g.len(), self.g.errors().len(), self.g.updates().len());
        let outs = self.g.outputs().to_vec();
        let err = match guard("the graph builder", || Ok(f(&mut self.g))) {
            Ok(r) if self.g.errors().len() == errs => return Ok(r),
            Ok(_) => to_py(self.g.errors()[errs].clone()),
            Err(e) => e,
        };
        self.rollback(n, errs, ups, outs);
        Err(err)
    }

    /// Rebuilds the graph from its first `n` nodes and `ups` updates (an O(n) copy, on the
    /// error path only).
    fn rollback(&mut self, n: usize, errs: usize, ups: usize, outs: Vec<NodeId>) {
        let old = std::mem::replace(&mut self.g, Graph::new(""));
        let mut g = Graph::new(old.name());
        for node in &old.nodes()[..n.min(old.len())] {
            if let Err(e) = g.try_add(node.op.clone(), &node.inputs) {
                g.record(e);
            }
        }
        for &(p, v) in &old.updates()[..ups.min(old.updates().len())] {
            g.update_param(p, v);
        }
        for e in &old.errors()[..errs] {
            g.record(e.clone());
        }
        g.set_outputs(outs);
        self.g = g;
    }

    fn node_shape(&self, x: Id) -> PyResult<&Shape> {
        self.g.shape(x.0).ok_or_else(|| {
            PyValueError::new_err(format!(
                "node {} does not exist in graph `{}` ({} nodes)",
                x.0,
                self.g.name(),
                self.g.len()
            ))
        })
    }
}

/// A Python attribute value as JSON, for the serde form of `Op`.
pub fn to_json(v: &Bound<'_, PyAny>) -> PyResult<Value> {
    if v.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(g) = v.downcast::<PyGraph>() {
        return serde_json::to_value(&g.borrow().g).map_err(|e| PyValueError::new_err(e.to_string()));
    }
    if let Ok(b) = v.downcast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if v.is_instance_of::<PyInt>() {
        if let Ok(i) = v.extract::<i64>() {
            return Ok(Value::from(i));
        }
        return Ok(Value::from(v.extract::<u64>()?));
    }
    if let Ok(f) = v.downcast::<PyFloat>() {
        let x = f.value();
        return Ok(serde_json::Number::from_f64(x).map(Value::Number).unwrap_or_else(|| Value::String(x.to_string())));
    }
    if let Ok(s) = v.downcast::<PyString>() {
        return Ok(Value::String(s.to_cow()?.into_owned()));
    }
    if let Ok(d) = v.downcast::<PyDict>() {
        let mut m = serde_json::Map::new();
        for (k, val) in d.iter() {
            m.insert(k.extract::<String>()?, to_json(&val)?);
        }
        return Ok(Value::Object(m));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        return v.try_iter()?.map(|x| to_json(&x?)).collect::<PyResult<Vec<_>>>().map(Value::Array);
    }
    if let Ok(t) = v.downcast::<PyType>() {
        return Ok(Value::String(dtype_arg(t.as_any())?.name().into()));
    }
    if v.hasattr("__array_interface__")? {
        let t = host_tensor(v, None)?;
        return serde_json::to_value(&t).map_err(|e| PyValueError::new_err(e.to_string()));
    }
    // numpy dtypes and scalar types become the RLX dtype name.
    if let Ok(dt) = dtype_arg(v) {
        return Ok(Value::String(dt.name().into()));
    }
    Err(PyTypeError::new_err(format!("cannot use {} as an op attribute", v.repr()?)))
}

#[pymethods]
impl PyGraph {
    /// An empty graph.
    #[new]
    #[pyo3(signature = (name = "graph"))]
    fn new(name: &str) -> Self {
        PyGraph { g: Graph::new(name) }
    }

    /// The graph's name.
    #[getter]
    fn name(&self) -> &str {
        self.g.name()
    }

    fn __len__(&self) -> usize {
        self.g.len()
    }

    fn __repr__(&self) -> String {
        format!("<rlx.Graph {:?}: {} nodes, {} outputs>", self.g.name(), self.g.len(), self.g.outputs().len())
    }

    /// The text form (parses back with `Graph.from_text`).
    fn __str__(&self) -> String {
        self.g.to_text()
    }

    fn __copy__(&self) -> Self {
        self.clone()
    }

    fn __deepcopy__(&self, _memo: &Bound<'_, PyAny>) -> Self {
        self.clone()
    }

    /// A copy of the graph.
    fn copy(&self) -> Self {
        self.clone()
    }

    /// A named runtime input of `shape` (ints, or strings for symbolic dims) and `dtype`.
    #[pyo3(signature = (name, shape, dtype = None))]
    fn input(&mut self, name: &str, shape: &Bound<'_, PyAny>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<PyNode> {
        let s = shape_or_f32(shape, dtype)?;
        self.build(|g| g.input(name, s)).map(Into::into)
    }

    /// A named parameter (weights), set once on the compiled graph with `set_param`.
    #[pyo3(signature = (name, shape, dtype = None))]
    fn param(&mut self, name: &str, shape: &Bound<'_, PyAny>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<PyNode> {
        let s = shape_or_f32(shape, dtype)?;
        self.build(|g| g.param(name, s)).map(Into::into)
    }

    /// A constant tensor from an array-like (`dtype` converts it; default: numpy's inference).
    #[pyo3(signature = (value, dtype = None))]
    fn constant(&mut self, value: &Bound<'_, PyAny>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<PyNode> {
        let dt = dtype.map(dtype_arg).transpose()?;
        let t = host_tensor(value, dt)?;
        self.build(|g| g.constant(t)).map(Into::into)
    }

    /// A rank-0 constant.
    #[pyo3(signature = (value, dtype = None))]
    fn scalar(&mut self, value: f64, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<PyNode> {
        let dt = dtype.map(dtype_arg).transpose()?.unwrap_or(DType::F32);
        self.build(|g| g.scalar(value, dt)).map(Into::into)
    }

    /// A tensor of `shape` filled with `value`.
    #[pyo3(signature = (shape, value, dtype = None))]
    fn full(&mut self, shape: &Bound<'_, PyAny>, value: f64, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<PyNode> {
        let s = shape_or_f32(shape, dtype)?;
        self.build(|g| g.full(s, value)).map(Into::into)
    }

    /// `start + step * i` for i in 0..n.
    #[pyo3(signature = (start, step, n, dtype = None))]
    fn arange(&mut self, start: f64, step: f64, n: usize, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<PyNode> {
        let dt = dtype.map(dtype_arg).transpose()?.unwrap_or(DType::F32);
        self.build(|g| g.arange(start, step, n, dt)).map(Into::into)
    }

    /// Any op by its serde name (`Graph.op_names()`) and attributes, e.g.
    /// `g.op("reduce", [x], kind="sum", axes=[-1], keep_dims=False)`.
    #[pyo3(signature = (name, inputs, **attrs))]
    fn op(&mut self, name: &str, inputs: Vec<Id>, attrs: Option<&Bound<'_, PyDict>>) -> PyResult<PyNode> {
        let mut m = serde_json::Map::new();
        m.insert("op".into(), Value::String(name.into()));
        if let Some(a) = attrs {
            for (k, v) in a.iter() {
                m.insert(k.extract::<String>()?, to_json(&v)?);
            }
        }
        let op: Op = serde_json::from_value(Value::Object(m)).map_err(|e| {
            let known = Op::variant_tags();
            let hint = if known.iter().any(|k| k == name) {
                String::new()
            } else {
                format!("; ops are [{}]", known.join(", "))
            };
            PyValueError::new_err(format!("op `{name}`: bad attributes: {e}{hint}"))
        })?;
        let ins = ids(&inputs);
        self.build(|g| g.try_add(op, &ins)).and_then(|r| r.py()).map(Into::into)
    }

    /// Sets the outputs, in the order `run` returns them.
    fn set_outputs(&mut self, outputs: Vec<Id>) -> PyResult<()> {
        let outs = ids(&outputs);
        self.build(|g| g.set_outputs(outs))
    }

    /// The declared outputs.
    #[getter]
    fn outputs(&self) -> Vec<PyNode> {
        self.g.outputs().iter().map(|&o| o.into()).collect()
    }

    /// Inputs as (name, node), in creation order.
    fn inputs(&self) -> Vec<(String, PyNode)> {
        self.g.inputs().into_iter().map(|(id, n)| (n.to_string(), id.into())).collect()
    }

    /// Params as (name, node), in creation order.
    fn params(&self) -> Vec<(String, PyNode)> {
        self.g.params().into_iter().map(|(id, n)| (n.to_string(), id.into())).collect()
    }

    /// A node's dims (ints, strings for symbolic dims).
    fn shape<'py>(&self, py: Python<'py>, x: Id) -> PyResult<Bound<'py, PyTuple>> {
        dims_py(py, self.node_shape(x)?)
    }

    /// A node's dtype name (`f32`).
    fn dtype(&self, x: Id) -> PyResult<&'static str> {
        Ok(self.node_shape(x)?.dtype.name())
    }

    /// A node's numpy dtype name (`float32`).
    fn numpy_dtype(&self, x: Id) -> PyResult<&'static str> {
        Ok(numpy_name(self.node_shape(x)?.dtype))
    }

    /// A node's type as text (`f32[2,3]`).
    fn type_of(&self, x: Id) -> PyResult<String> {
        Ok(self.node_shape(x)?.to_string())
    }

    /// A node's op in its serde form, as JSON text (`{"op":"unary","kind":"tanh"}`).
    fn op_of(&self, x: Id) -> PyResult<String> {
        let n = self.g.node(x.0).ok_or_else(|| PyValueError::new_err(format!("node {} does not exist", x.0)))?;
        serde_json::to_string(&n.op).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// A node's inputs.
    fn inputs_of(&self, x: Id) -> PyResult<Vec<PyNode>> {
        let n = self.g.node(x.0).ok_or_else(|| PyValueError::new_err(format!("node {} does not exist", x.0)))?;
        Ok(n.inputs.iter().map(|&i| i.into()).collect())
    }

    /// Raises the first error recorded while building, if any.
    fn check(&self) -> PyResult<()> {
        self.g.check().py()
    }

    /// Re-infers every node and checks the structure; raises the first problem.
    fn verify(&self) -> PyResult<()> {
        guard("verify", || self.g.verify().py())
    }

    /// The text form.
    fn to_text(&self) -> String {
        self.g.to_text()
    }

    /// Parses the text form.
    #[staticmethod]
    fn from_text(text: &str) -> PyResult<PyGraph> {
        guard("from_text", || Graph::from_text(text).py().map(|g| PyGraph { g }))
    }

    /// The JSON form.
    fn to_json(&self) -> String {
        self.g.to_json()
    }

    /// Parses and verifies the JSON form.
    #[staticmethod]
    fn from_json(text: &str) -> PyResult<PyGraph> {
        guard("from_json", || Graph::from_json(text).py().map(|g| PyGraph { g }))
    }

    /// A copy with symbolic dims bound to sizes: `g.bind_dims({"batch": 8})`.
    fn bind_dims(&self, bindings: std::collections::HashMap<String, usize>) -> PyResult<PyGraph> {
        let b: Vec<(&str, usize)> = bindings.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        guard("bind_dims", || self.g.bind_dims(&b).py().map(|g| PyGraph { g }))
    }

    /// Copies `body` into this graph with its inputs bound to `args` (in order); returns the
    /// body's outputs here. Bodies with params cannot be inlined.
    fn inline(&mut self, body: PyRef<'_, PyGraph>, args: Vec<Id>) -> PyResult<Vec<PyNode>> {
        body.g.check().py()?;
        let nin = body.g.inputs().len();
        if !body.g.params().is_empty() || nin != args.len() {
            return Err(PyValueError::new_err(format!(
                "inline: graph `{}` takes {nin} inputs and {} params; got {} args (params cannot be inlined)",
                body.g.name(),
                body.g.params().len(),
                args.len()
            )));
        }
        let a = ids(&args);
        let body = body.g.clone();
        let r = self.build(|g| rlx::ir::ops::control::inline(g, &body, &a))?;
        r.map(|v| v.into_iter().map(Into::into).collect())
            .ok_or_else(|| to_py(Error::InvalidGraph { graph: self.g.name().into(), reason: "inline failed".into() }))
    }

    /// The serde names of every op, for `Graph.op`.
    #[staticmethod]
    fn op_names() -> Vec<String> {
        Op::variant_tags()
    }
}

fn shape_or_f32(dims: &Bound<'_, PyAny>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<Shape> {
    let dt = dtype.map(dtype_arg).transpose()?.unwrap_or(DType::F32);
    Ok(Shape::with_dims(dims_arg(dims)?, dt))
}

/// Module-level helpers: dtype lists and op kinds.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(dtypes, m)?)?;
    m.add_function(wrap_pyfunction!(canonical_dtype, m)?)?;
    Ok(())
}

/// Every RLX dtype name.
#[pyfunction]
fn dtypes() -> Vec<&'static str> {
    DType::ALL.iter().map(|d| d.name()).collect()
}

/// The RLX name of a dtype argument (a name, a numpy dtype or scalar type).
#[pyfunction]
fn canonical_dtype(dtype: &Bound<'_, PyAny>) -> PyResult<&'static str> {
    Ok(dtype_arg(dtype)?.name())
}
