//! The transforms of `rlx::autodiff` on graphs: grad, grad_with_loss, vjp, jvp, hvp, vmap,
//! jacfwd, jacrev. Each returns a new graph.

use crate::errors::{IntoPy, guard};
use crate::graph::{Id, PyGraph};
use pyo3::prelude::*;
use rlx::ir::{Graph, NodeId};

/// A `wrt` entry: an input or param name, or a node.
#[derive(FromPyObject)]
pub enum Wrt {
    /// By name.
    Name(String),
    /// By node.
    Node(Id),
}

fn wrt_ids(g: &Graph, wrt: &[Wrt]) -> PyResult<Vec<NodeId>> {
    wrt.iter()
        .map(|w| match w {
            Wrt::Name(n) => rlx::autodiff::leaf(g, n).py(),
            Wrt::Node(id) => Ok(id.0),
        })
        .collect()
}

fn wrt_names(g: &Graph, wrt: &[Wrt]) -> PyResult<Vec<String>> {
    let leaves: Vec<(NodeId, String)> =
        g.inputs().into_iter().chain(g.params()).map(|(id, n)| (id, n.to_string())).collect();
    wrt.iter()
        .map(|w| match w {
            Wrt::Name(n) => Ok(n.clone()),
            Wrt::Node(id) => leaves.iter().find(|(l, _)| *l == id.0).map(|(_, n)| n.clone()).ok_or_else(|| {
                pyo3::exceptions::PyValueError::new_err(format!("node {} is not an input or param", id.0))
            }),
        })
        .collect()
}

fn wrap(what: &str, f: impl FnOnce() -> rlx::ir::Result<Graph>) -> PyResult<PyGraph> {
    guard(what, || f().py().map(|g| PyGraph { g }))
}

/// Gradient of the graph's one scalar output w.r.t. `wrt`: outputs `[d/dwrt_0, ...]`.
#[pyfunction]
fn grad(g: PyRef<'_, PyGraph>, wrt: Vec<Wrt>) -> PyResult<PyGraph> {
    let w = wrt_ids(&g.g, &wrt)?;
    wrap("grad", || rlx::autodiff::grad(&g.g, &w))
}

/// Like `grad`, with the loss first: outputs `[loss, d/dwrt_0, ...]`.
#[pyfunction]
fn grad_with_loss(g: PyRef<'_, PyGraph>, wrt: Vec<Wrt>) -> PyResult<PyGraph> {
    let w = wrt_ids(&g.g, &wrt)?;
    wrap("grad_with_loss", || rlx::autodiff::grad_with_loss(&g.g, &w))
}

/// Reverse mode: adds an input `cotangent_<i>` per output; outputs `[outputs..., vjp_wrt...]`.
#[pyfunction]
fn vjp(g: PyRef<'_, PyGraph>, wrt: Vec<Wrt>) -> PyResult<PyGraph> {
    let w = wrt_ids(&g.g, &wrt)?;
    wrap("vjp", || rlx::autodiff::vjp(&g.g, &w))
}

/// Forward mode: adds an input `tangent_<name>` per name; outputs `[outputs..., tangents...]`.
#[pyfunction]
fn jvp(g: PyRef<'_, PyGraph>, wrt: Vec<Wrt>) -> PyResult<PyGraph> {
    let names = wrt_names(&g.g, &wrt)?;
    let n: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    wrap("jvp", || rlx::autodiff::jvp(&g.g, &n))
}

/// Hessian-vector product: adds `tangent_<name>`; outputs `[loss, grads..., hvps...]`.
#[pyfunction]
fn hvp(g: PyRef<'_, PyGraph>, wrt: Vec<Wrt>) -> PyResult<PyGraph> {
    let names = wrt_names(&g.g, &wrt)?;
    let n: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    wrap("hvp", || rlx::autodiff::hvp(&g.g, &n))
}

/// Vectorizes over a new leading axis of `size` on the named inputs; params stay shared.
#[pyfunction]
fn vmap(g: PyRef<'_, PyGraph>, batched: Vec<Wrt>, size: usize) -> PyResult<PyGraph> {
    let names = wrt_names(&g.g, &batched)?;
    let n: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    wrap("vmap", || rlx::autodiff::vmap(&g.g, &n, size))
}

/// Jacobian of every output w.r.t. one input, forward mode.
#[pyfunction]
fn jacfwd(g: PyRef<'_, PyGraph>, wrt: Wrt) -> PyResult<PyGraph> {
    let names = wrt_names(&g.g, &[wrt])?;
    wrap("jacfwd", || rlx::autodiff::jacfwd(&g.g, &names[0]))
}

/// Jacobian of every output w.r.t. one input, reverse mode.
#[pyfunction]
fn jacrev(g: PyRef<'_, PyGraph>, wrt: Wrt) -> PyResult<PyGraph> {
    let names = wrt_names(&g.g, &[wrt])?;
    wrap("jacrev", || rlx::autodiff::jacrev(&g.g, &names[0]))
}

/// Adds the transform functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(grad, m)?)?;
    m.add_function(wrap_pyfunction!(grad_with_loss, m)?)?;
    m.add_function(wrap_pyfunction!(vjp, m)?)?;
    m.add_function(wrap_pyfunction!(jvp, m)?)?;
    m.add_function(wrap_pyfunction!(hvp, m)?)?;
    m.add_function(wrap_pyfunction!(vmap, m)?)?;
    m.add_function(wrap_pyfunction!(jacfwd, m)?)?;
    m.add_function(wrap_pyfunction!(jacrev, m)?)?;
    Ok(())
}
