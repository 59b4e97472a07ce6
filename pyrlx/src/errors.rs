//! Rust errors and panics become Python exceptions carrying the same message.

use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use rlx::ir::Error;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Maps an RLX error to the Python exception of its kind: ValueError for shapes, dtypes and
/// invalid graphs, KeyError for unknown or missing names, RuntimeError otherwise.
pub fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::UnknownName { .. } | Error::MissingInput { .. } => PyKeyError::new_err(msg),
        Error::Infer { .. }
        | Error::BadNodeId { .. }
        | Error::InvalidGraph { .. }
        | Error::DataLength { .. }
        | Error::DTypeMismatch { .. }
        | Error::UnboundDim { .. }
        | Error::Parse { .. }
        | Error::Transform { .. } => PyValueError::new_err(msg),
        _ => PyRuntimeError::new_err(msg),
    }
}

/// Extension: `.py()?` turns an RLX result into a Python one.
pub trait IntoPy<T> {
    /// Converts the error with `to_py`.
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for rlx::ir::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// Runs `f`, turning a Rust panic into a RuntimeError instead of unwinding into Python.
pub fn guard<T>(what: &str, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let detail = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(PyRuntimeError::new_err(format!("internal error in {what} (a Rust panic, please report it): {detail}")))
        }
    }
}

/// Panics inside `guard`: lets the tests check that a Rust panic reaches Python as a
/// RuntimeError instead of aborting the interpreter.
#[pyfunction]
pub fn _panic_for_test(message: &str) -> PyResult<()> {
    guard("_panic_for_test", || panic!("{message}"))
}
