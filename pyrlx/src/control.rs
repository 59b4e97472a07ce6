//! `rlx.Graph.scan_n`: the general scan (any number of carries, scanned sequences and stacked
//! outputs) that `rlx.lax.scan` traces pytrees into.

use crate::graph::{Id, PyGraph, PyNode, ids};
use pyo3::prelude::*;

fn nodes(v: Vec<rlx::ir::NodeId>) -> Vec<PyNode> {
    v.into_iter().map(Into::into).collect()
}

#[pymethods]
impl PyGraph {
    /// `jax.lax.scan` over the leading axis of every `xs`: `body(carries..., x_ts..., consts...)
    /// -> (carries..., ys...)`; returns (final carries, stacked ys). `reverse` runs from the last
    /// element to the first (the stacked ys keep the elements' order).
    #[pyo3(signature = (body, inits, xs, consts = vec![], reverse = false))]
    fn scan_n(
        &mut self,
        body: PyRef<'_, PyGraph>,
        inits: Vec<Id>,
        xs: Vec<Id>,
        consts: Vec<Id>,
        reverse: bool,
    ) -> PyResult<(Vec<PyNode>, Vec<PyNode>)> {
        let body = body.g.clone();
        let (i, x, c) = (ids(&inits), ids(&xs), ids(&consts));
        let (carries, ys) = self.build(|g| g.scan_n(body, &i, &x, &c, reverse))?;
        Ok((nodes(carries), nodes(ys)))
    }
}
