//! `rlx.Session(device).compile(graph)` gives a `CompiledGraph` that takes and returns numpy
//! arrays: contiguous inputs are read in place, outputs are written into fresh numpy arrays.

use crate::convert::{ArrayIn, array_in, check_array, dims_py, empty, host_to_numpy};
use crate::errors::{IntoPy, guard, to_py};
use crate::graph::PyGraph;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use rlx::driver::Device;
use rlx::ir::{Error, Shape};
use rlx::runtime::{CompiledGraph, Session};
use std::sync::Mutex;

/// A device from its name (`cpu`, `wgpu`, ...).
pub fn device_arg(name: &str) -> PyResult<Device> {
    Device::from_name(name).map_err(PyValueError::new_err)
}

/// Compiles graphs for one device.
#[pyclass(name = "Session", module = "rlx", frozen)]
pub struct PySession {
    device: Device,
}

#[pymethods]
impl PySession {
    /// A session for `device` ("cpu"; "wgpu" when built with it). An unavailable device is
    /// reported by `compile`.
    #[new]
    #[pyo3(signature = (device = "cpu"))]
    fn new(device: &str) -> PyResult<Self> {
        Ok(PySession { device: device_arg(device)? })
    }

    /// The device name.
    #[getter]
    fn device(&self) -> String {
        self.device.to_string()
    }

    fn __repr__(&self) -> String {
        format!("rlx.Session({:?})", self.device.to_string())
    }

    /// Verifies, optimizes, legalizes and compiles `graph`.
    fn compile(&self, py: Python<'_>, graph: PyRef<'_, PyGraph>) -> PyResult<PyCompiledGraph> {
        let g = graph.g.clone();
        let device = self.device;
        let c = py.detach(|| guard("compile", || Session::new(device).compile(g).py()))?;
        Ok(PyCompiledGraph::new(c))
    }
}

/// A compiled graph: set params once, then run many times.
#[pyclass(name = "CompiledGraph", module = "rlx")]
pub struct PyCompiledGraph {
    inner: Mutex<CompiledGraph>,
    inputs: Vec<(String, Shape)>,
    params: Vec<(String, Shape)>,
    outputs: Vec<Shape>,
    names: Vec<Py<PyString>>,
}

impl PyCompiledGraph {
    fn new(c: CompiledGraph) -> Self {
        let inputs = c.inputs().to_vec();
        let names = Python::attach(|py| inputs.iter().map(|(n, _)| PyString::intern(py, n).unbind()).collect());
        PyCompiledGraph {
            inputs,
            params: c.params().to_vec(),
            outputs: c.outputs().to_vec(),
            names,
            inner: Mutex::new(c),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CompiledGraph> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs with arrays in graph input order, returning fresh numpy arrays.
    pub fn run_arrays<'py>(&self, py: Python<'py>, arrays: &[ArrayIn<'py>]) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let mut outs = Vec::with_capacity(self.outputs.len());
        let mut ptrs = Vec::with_capacity(self.outputs.len());
        for s in &self.outputs {
            let (a, p) = empty(py, s)?;
            outs.push(a);
            ptrs.push((p, s.size_bytes().unwrap_or(0)));
        }
        let ins: Vec<&[u8]> = arrays.iter().map(|a| a.bytes()).collect();
        let run = || {
            let mut c = self.lock();
            // SAFETY: each pointer is the start of a fresh numpy array of exactly `len` bytes,
            // kept alive by `outs` and not shared with anything else during the run.
            let mut out_slices: Vec<&mut [u8]> =
                ptrs.iter()
                    .map(|&(p, len)| {
                        if len == 0 {
                            &mut [][..]
                        } else {
                            unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) }
                        }
                    })
                    .collect();
            guard("run", || c.run_into(&ins, &mut out_slices).py())
        };
        // Small graphs run faster without releasing the GIL; large ones let other threads go.
        let work: usize = self.outputs.iter().filter_map(|s| s.size_bytes()).sum::<usize>()
            + ins.iter().map(|b| b.len()).sum::<usize>();
        if work < 1 << 16 {
            run()?
        } else {
            py.detach(run)?
        };
        Ok(outs)
    }
}

fn info<'py>(
    py: Python<'py>,
    list: &[(String, Shape)],
) -> PyResult<Vec<(String, Bound<'py, pyo3::types::PyTuple>, &'static str)>> {
    list.iter().map(|(n, s)| Ok((n.clone(), dims_py(py, s)?, s.dtype.name()))).collect()
}

#[pymethods]
impl PyCompiledGraph {
    /// Sets a param from an array of exactly its shape and dtype (lists are converted).
    fn set_param(&self, name: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let Some((_, shape)) = self.params.iter().find(|(n, _)| n == name) else {
            let known = self.params.iter().map(|(n, s)| format!("{n}: {s}")).collect();
            return Err(to_py(Error::UnknownName { kind: "param", name: name.into(), known }));
        };
        let a = array_in(value, Some(shape.dtype))?;
        check_array(&a, "param", name, shape)?;
        let mut c = self.lock();
        guard("set_param", || c.set_param_typed(name, a.bytes(), shape.dtype).py())
    }

    /// A param's current value (after `set_param`, and after the updates of each run).
    fn get_param<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let t = guard("get_param", || self.lock().get_param(name).py())?;
        host_to_numpy(py, &t)
    }

    /// Runs with inputs by name (a dict and/or keywords); returns one numpy array per output.
    #[pyo3(signature = (inputs = None, **kwargs))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: Option<&Bound<'py, PyDict>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let given = inputs.map_or(0, |d| d.len()) + kwargs.map_or(0, |d| d.len());
        let mut arrays = Vec::with_capacity(self.inputs.len());
        for ((name, shape), key) in self.inputs.iter().zip(&self.names) {
            let key = key.bind(py);
            let v = match inputs.map(|d| d.get_item(key)).transpose()?.flatten() {
                Some(v) => v,
                None => match kwargs.map(|d| d.get_item(key)).transpose()?.flatten() {
                    Some(v) => v,
                    None => return Err(to_py(Error::MissingInput { name: name.clone(), shape: shape.clone() })),
                },
            };
            let a = array_in(&v, Some(shape.dtype))?;
            check_array(&a, "input", name, shape)?;
            arrays.push(a);
        }
        if given != self.inputs.len() {
            self.unknown_input(inputs, kwargs)?;
        }
        PyList::new(py, self.run_arrays(py, &arrays)?)
    }

    /// Runs with inputs as positional arrays in graph input order.
    #[pyo3(signature = (*args))]
    fn call<'py>(&self, py: Python<'py>, args: Vec<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyList>> {
        if args.len() != self.inputs.len() {
            return Err(PyValueError::new_err(format!(
                "call: the graph takes {} inputs ({}), got {}",
                self.inputs.len(),
                self.inputs.iter().map(|(n, s)| format!("{n}: {s}")).collect::<Vec<_>>().join(", "),
                args.len()
            )));
        }
        let mut arrays = Vec::with_capacity(args.len());
        for ((name, shape), v) in self.inputs.iter().zip(&args) {
            let a = array_in(v, Some(shape.dtype))?;
            check_array(&a, "input", name, shape)?;
            arrays.push(a);
        }
        PyList::new(py, self.run_arrays(py, &arrays)?)
    }

    /// Inputs as (name, dims, dtype), in graph order.
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<(String, Bound<'py, pyo3::types::PyTuple>, &'static str)>> {
        info(py, &self.inputs)
    }

    /// Params as (name, dims, dtype), in graph order.
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Vec<(String, Bound<'py, pyo3::types::PyTuple>, &'static str)>> {
        info(py, &self.params)
    }

    /// Outputs as (dims, dtype), in order.
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<(Bound<'py, pyo3::types::PyTuple>, &'static str)>> {
        self.outputs.iter().map(|s| Ok((dims_py(py, s)?, s.dtype.name()))).collect()
    }

    /// How each op was dispatched (native / decomposed), as text.
    fn dispatch_report(&self) -> String {
        self.lock().dispatch_report().to_string()
    }
}

/// Seconds per run of `iters` back-to-back runs done entirely in Rust (`run_into` with buffers
/// allocated once), on the arrays in `args` (graph input order): the baseline that
/// tools/pyrlx_bench.py compares Python's `run` overhead with.
#[pyfunction]
pub fn _time_rust_run(
    py: Python<'_>,
    compiled: &PyCompiledGraph,
    args: Vec<Bound<'_, PyAny>>,
    iters: usize,
) -> PyResult<f64> {
    let arrays = args.iter().map(|a| array_in(a, None)).collect::<PyResult<Vec<_>>>()?;
    let ins: Vec<&[u8]> = arrays.iter().map(|a| a.bytes()).collect();
    let mut outs: Vec<Vec<u8>> = compiled.outputs.iter().map(|s| vec![0u8; s.size_bytes().unwrap_or(0)]).collect();
    py.detach(|| {
        let mut c = compiled.lock();
        let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(|b| b.as_mut_slice()).collect();
        c.run_into(&ins, &mut refs).py()?;
        let t = std::time::Instant::now();
        for _ in 0..iters {
            c.run_into(&ins, &mut refs).py()?;
        }
        Ok(t.elapsed().as_secs_f64() / iters.max(1) as f64)
    })
}

impl PyCompiledGraph {
    /// Raises KeyError for the first given name that is not an input.
    fn unknown_input(&self, inputs: Option<&Bound<'_, PyDict>>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
        let mut seen = std::collections::HashSet::new();
        for d in [inputs, kwargs].into_iter().flatten() {
            for k in d.keys() {
                let k: String = k.extract()?;
                if !self.inputs.iter().any(|(n, _)| *n == k) {
                    let known = self.inputs.iter().map(|(n, s)| format!("{n}: {s}")).collect();
                    return Err(to_py(Error::UnknownName { kind: "input", name: k, known }));
                }
                if !seen.insert(k.clone()) {
                    return Err(PyValueError::new_err(format!("run: input `{k}` was given twice")));
                }
            }
        }
        Ok(())
    }
}
