//! pyrlx: the Python bindings of RLX (`import rlx`). The native module `rlx._rlx` holds the graph
//! builder, sessions, transforms and models; the Python package adds the JAX-style front end.

use pyo3::prelude::*;

mod builders;
mod convert;
mod errors;
mod graph;
mod llm;
mod llm_batch;
mod models;
mod session;
mod transforms;

/// The native module, `rlx._rlx`.
#[pymodule]
fn _rlx(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<graph::PyGraph>()?;
    m.add_class::<graph::PyNode>()?;
    m.add_class::<session::PySession>()?;
    m.add_class::<session::PyCompiledGraph>()?;
    m.add_class::<models::PyEmbedder>()?;
    m.add_class::<llm::PyLlm>()?;
    m.add_class::<llm::PyGeneration>()?;
    m.add_function(wrap_pyfunction!(session::_time_rust_run, m)?)?;
    m.add_function(wrap_pyfunction!(errors::_panic_for_test, m)?)?;
    transforms::register(m)?;
    graph::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
