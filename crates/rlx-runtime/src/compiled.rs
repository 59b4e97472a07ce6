//! `CompiledGraph`: named, validated access to a backend executable.

use rlx_driver::{DispatchReport, Executable, ParamShare};
use rlx_ir::{DType, Error, Graph, HostTensor, Result, Shape};
use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

/// A compiled graph: set params once, then run many times.
///
/// It is `Send` but not `Sync`, and `run` takes `&mut self` (runs write its arena): to serve
/// several threads, put it behind a `Mutex`, or compile copies that share its params
/// (`share_params_from`): they run at once while every shared param is read-only
/// (`bind_param_external`), and take turns (one lock per run) once one is writable
/// (`tests/concurrency.rs`).
pub struct CompiledGraph {
    exe: Box<dyn Executable>,
    inputs: Vec<(String, Shape)>,
    params: Vec<(String, Shape)>,
    param_set: Vec<bool>,
    input_bytes: Vec<usize>,
    /// Inputs set ahead of `run` (`set_input`), in each input's dtype.
    preset: Vec<Option<Vec<u8>>>,
    outputs: Vec<Shape>,
    report: DispatchReport,
    source: crate::CompileSource,
    device: rlx_driver::Device,
}

fn known(list: &[(String, Shape)]) -> Vec<String> {
    list.iter().map(|(n, s)| format!("{n}: {s}")).collect()
}

impl CompiledGraph {
    pub(crate) fn new(
        g: &Graph,
        exe: Box<dyn Executable>,
        report: DispatchReport,
        source: crate::CompileSource,
        device: rlx_driver::Device,
    ) -> Self {
        let ty = |id: rlx_ir::NodeId| g.shape(id).cloned().unwrap_or(Shape::scalar(DType::F32));
        let inputs: Vec<(String, Shape)> = g.inputs().iter().map(|(id, n)| (n.to_string(), ty(*id))).collect();
        let params: Vec<(String, Shape)> = g.params().iter().map(|(id, n)| (n.to_string(), ty(*id))).collect();
        let outputs = g.outputs().iter().map(|&o| ty(o)).collect();
        let input_bytes = inputs.iter().map(|(_, s)| s.size_bytes().unwrap_or(0)).collect();
        let preset = vec![None; inputs.len()];
        CompiledGraph {
            exe,
            param_set: vec![false; params.len()],
            inputs,
            params,
            input_bytes,
            preset,
            outputs,
            report,
            source,
            device,
        }
    }

    /// The device this graph runs on (the one `Device::Auto` chose, for such a session).
    pub fn device(&self) -> rlx_driver::Device {
        self.device
    }

    /// Input names and types, in graph order.
    pub fn inputs(&self) -> &[(String, Shape)] {
        &self.inputs
    }

    /// Param names and types, in graph order.
    pub fn params(&self) -> &[(String, Shape)] {
        &self.params
    }

    /// Output types, in `set_outputs` order.
    pub fn outputs(&self) -> &[Shape] {
        &self.outputs
    }

    /// How each op was dispatched (native / decomposed).
    pub fn dispatch_report(&self) -> &DispatchReport {
        &self.report
    }

    /// Where the optimized graph came from: the compile cache (memory or disk) or the optimizer.
    pub fn compile_source(&self) -> crate::CompileSource {
        self.source
    }

    fn param_index(&self, name: &str) -> Result<usize> {
        self.params.iter().position(|(n, _)| n == name).ok_or_else(|| Error::UnknownName {
            kind: "param",
            name: name.into(),
            known: known(&self.params),
        })
    }

    /// A param's current value: what `set_param` stored, as changed by the graph's state updates
    /// (`Graph::update_param`) in every run since. Errors if it was never set.
    pub fn get_param(&self, name: &str) -> Result<HostTensor> {
        let i = self.param_index(name)?;
        if !self.param_set[i] {
            let (name, shape) = &self.params[i];
            return Err(Error::ParamNotSet { name: name.clone(), shape: shape.clone() });
        }
        let bytes = self.exe.get_param(i)?;
        HostTensor::from_bytes(self.params[i].1.clone(), &bytes)
    }

    /// Sets a param from f32 values; they are converted to the param's dtype.
    pub fn set_param(&mut self, name: &str, data: &[f32]) -> Result<()> {
        let i = self.param_index(name)?;
        let bytes = f32_bytes("param", name, &self.params[i].1, data)?;
        self.set_param_index(i, &bytes)
    }

    /// Sets a param from little-endian bytes of exactly its dtype.
    pub fn set_param_typed(&mut self, name: &str, bytes: &[u8], dtype: DType) -> Result<()> {
        let i = self.param_index(name)?;
        check_bytes("param", name, &self.params[i].1, bytes, dtype)?;
        self.set_param_index(i, bytes)
    }

    /// Sets a param from a host tensor of exactly its type.
    pub fn set_param_tensor(&mut self, name: &str, t: &HostTensor) -> Result<()> {
        self.set_param_typed(name, &t.to_bytes(), t.dtype())
    }

    fn set_param_index(&mut self, i: usize, bytes: &[u8]) -> Result<()> {
        self.exe.set_param(i, bytes)?;
        self.param_set[i] = true;
        Ok(())
    }

    /// Makes the params `names` of this graph use `source`'s buffers, with no copy: a write
    /// through either graph (`set_param`, a state update such as a KV cache) is seen by both.
    /// Each name must be a param of both graphs with the same type, set in `source`.
    /// Graphs sharing writable params never run at the same time (a lock they share), so
    /// they may live on different threads; a graph joins one such group only.
    pub fn share_params_from(&mut self, source: &CompiledGraph, names: &[&str]) -> Result<()> {
        for &name in names {
            let (i, j) = (self.param_index(name)?, source.param_index(name)?);
            let (here, there) = (&self.params[i].1, &source.params[j].1);
            if here.dtype != there.dtype {
                return Err(Error::DTypeMismatch {
                    kind: "shared param",
                    name: name.into(),
                    expected: here.dtype,
                    got: there.dtype,
                });
            }
            if here != there {
                let reason = format!("param `{name}` is {here} here but {there} in the graph it is shared from");
                return Err(Error::eval("share_params_from", reason));
            }
            if !source.param_set[j] {
                return Err(Error::ParamNotSet { name: name.into(), shape: there.clone() });
            }
            let share = source.exe.share_param(j)?;
            self.exe.bind_param(i, share)?;
            self.param_set[i] = true;
        }
        Ok(())
    }

    /// The buffer behind param `name` (to compare identities, or to bind elsewhere).
    pub fn param_share(&self, name: &str) -> Result<ParamShare> {
        self.exe.share_param(self.param_index(name)?)
    }

    /// Binds param `name` to bytes `range` of `owner` (a memory-mapped weight file), read-only
    /// and with no copy; `dtype` must be the param's and the length exact. Such a param can be
    /// shared (`share_params_from`) but not written (`set_param`, state updates).
    pub fn bind_param_external(
        &mut self,
        name: &str,
        owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
        range: Range<usize>,
        dtype: DType,
    ) -> Result<()> {
        let i = self.param_index(name)?;
        let shape = &self.params[i].1;
        if dtype != shape.dtype {
            return Err(Error::DTypeMismatch { kind: "param", name: name.into(), expected: shape.dtype, got: dtype });
        }
        check_len("param", name, shape, range.len())?;
        // Kernels read params as typed slices: the bytes must be aligned for the dtype.
        let addr = (*owner).as_ref().as_ptr() as usize + range.start;
        let align = dtype.size_bytes().max(1);
        if !addr.is_multiple_of(align) {
            let reason = format!(
                "param `{name}`: external bytes at offset {} are not {align}-byte aligned for {dtype:?}; copy them with set_param",
                range.start
            );
            return Err(Error::eval("bind_param_external", reason));
        }
        self.exe.bind_param(i, ParamShare::external(owner, range)?)?;
        self.param_set[i] = true;
        Ok(())
    }

    fn input_index(&self, name: &str) -> Result<usize> {
        self.inputs.iter().position(|(n, _)| n == name).ok_or_else(|| Error::UnknownName {
            kind: "input",
            name: name.into(),
            known: known(&self.inputs),
        })
    }

    /// Sets input `name` from f32 values (converted to its dtype) ahead of `run`: every later
    /// run that does not name it uses this value (a mask, positions, anything that seldom
    /// changes). An input given to `run` wins for that run.
    pub fn set_input(&mut self, name: &str, data: &[f32]) -> Result<()> {
        let i = self.input_index(name)?;
        let bytes = f32_bytes("input", name, &self.inputs[i].1, data)?.into_owned();
        self.preset[i] = Some(bytes);
        Ok(())
    }

    /// As `set_input`, from little-endian bytes of exactly the input's dtype.
    pub fn set_input_typed(&mut self, name: &str, bytes: &[u8], dtype: DType) -> Result<()> {
        let i = self.input_index(name)?;
        check_bytes("input", name, &self.inputs[i].1, bytes, dtype)?;
        self.preset[i] = Some(bytes.to_vec());
        Ok(())
    }

    /// As `set_input`, from a host tensor of exactly the input's type.
    pub fn set_input_tensor(&mut self, name: &str, t: &HostTensor) -> Result<()> {
        self.set_input_typed(name, &t.to_bytes(), t.dtype())
    }

    /// Forgets every input set with `set_input`.
    pub fn clear_inputs(&mut self) {
        self.preset.iter_mut().for_each(|p| *p = None);
    }

    /// Orders named inputs by graph order, checking names, and that every param was set. An
    /// input not given is None when `set_input` set it, else an error.
    fn order<'a, T>(&self, given: &'a [(&str, T)]) -> Result<Vec<Option<&'a T>>> {
        if let Some(i) = self.param_set.iter().position(|s| !s) {
            let (name, shape) = &self.params[i];
            return Err(Error::ParamNotSet { name: name.clone(), shape: shape.clone() });
        }
        for (k, (name, _)) in given.iter().enumerate() {
            if !self.inputs.iter().any(|(n, _)| n == name) {
                return Err(Error::UnknownName { kind: "input", name: name.to_string(), known: known(&self.inputs) });
            }
            if given[..k].iter().any(|(n, _)| n == name) {
                return Err(Error::eval("run", format!("input `{name}` was given twice")));
            }
        }
        self.inputs
            .iter()
            .zip(&self.preset)
            .map(|((name, shape), preset)| match given.iter().find(|(n, _)| n == name) {
                Some((_, v)) => Ok(Some(v)),
                None if preset.is_some() => Ok(None),
                None => Err(Error::MissingInput { name: name.clone(), shape: shape.clone() }),
            })
            .collect()
    }

    /// Runs with f32 inputs (converted to each input's dtype); outputs are converted to f32.
    /// f32 inputs are read in place and f32 outputs written straight into the returned vectors.
    pub fn run(&mut self, inputs: &[(&str, &[f32])]) -> Result<Vec<Vec<f32>>> {
        let ordered = self.order(inputs)?;
        let mut bytes = Vec::with_capacity(ordered.len());
        for (((name, shape), data), preset) in self.inputs.iter().zip(ordered).zip(&self.preset) {
            bytes.push(match (data, preset) {
                (Some(data), _) => f32_bytes("input", name, shape, data)?,
                (None, Some(p)) => Cow::Borrowed(&p[..]),
                (None, None) => unreachable!("`order` reports an input neither given nor set"),
            });
        }
        let refs: Vec<&[u8]> = bytes.iter().map(|b| &b[..]).collect();
        let mut outs: Vec<Output> = self.outputs.iter().map(Output::new).collect();
        let mut out_refs: Vec<&mut [u8]> = outs.iter_mut().map(Output::bytes_mut).collect();
        self.exe.run(&refs, &mut out_refs)?;
        outs.into_iter().zip(&self.outputs).map(|(o, s)| o.into_f32(s)).collect()
    }

    /// Runs with little-endian inputs of exactly each input's dtype.
    pub fn run_typed(&mut self, inputs: &[(&str, &[u8], DType)]) -> Result<Vec<(Vec<u8>, DType)>> {
        let pairs: Vec<(&str, (&[u8], DType))> = inputs.iter().map(|(n, b, d)| (*n, (*b, *d))).collect();
        let ordered = self.order(&pairs)?;
        let mut refs: Vec<&[u8]> = Vec::with_capacity(ordered.len());
        for (((name, shape), given), preset) in self.inputs.iter().zip(&ordered).zip(&self.preset) {
            match (given, preset) {
                (Some((b, d)), _) => {
                    check_bytes("input", name, shape, b, *d)?;
                    refs.push(b);
                }
                (None, Some(p)) => refs.push(p),
                (None, None) => unreachable!("`order` reports an input neither given nor set"),
            }
        }
        let mut outs: Vec<Vec<u8>> =
            self.outputs.iter().map(|s| rlx_driver::huge_pages::zeroed_vec(s.size_bytes().unwrap_or(0))).collect();
        let mut out_refs: Vec<&mut [u8]> = outs.iter_mut().map(|b| b.as_mut_slice()).collect();
        self.exe.run(&refs, &mut out_refs)?;
        Ok(outs.into_iter().zip(&self.outputs).map(|(b, s)| (b, s.dtype)).collect())
    }

    /// Runs with host tensors, returning host tensors.
    pub fn run_tensors(&mut self, inputs: &[(&str, &HostTensor)]) -> Result<Vec<HostTensor>> {
        let bytes: Vec<(&str, Vec<u8>, DType)> = inputs.iter().map(|(n, t)| (*n, t.to_bytes(), t.dtype())).collect();
        let typed: Vec<(&str, &[u8], DType)> = bytes.iter().map(|(n, b, d)| (*n, b.as_slice(), *d)).collect();
        let outs = self.run_typed(&typed)?;
        outs.into_iter().zip(&self.outputs).map(|((b, _), s)| HostTensor::from_bytes(s.clone(), &b)).collect()
    }

    /// Runs into caller-owned output buffers (no allocation on the CPU backend). Inputs are
    /// byte slices in graph input order, already of each input's dtype and length.
    pub fn run_into(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<()> {
        if let Some(i) = self.param_set.iter().position(|s| !s) {
            let (name, shape) = &self.params[i];
            return Err(Error::ParamNotSet { name: name.clone(), shape: shape.clone() });
        }
        for (((name, shape), b), &n) in self.inputs.iter().zip(inputs).zip(&self.input_bytes) {
            // Byte sizes computed once at compile time.
            if b.len() != n {
                check_len("input", name, shape, b.len())?;
            }
        }
        self.exe.run(inputs, outputs)
    }
}

fn check_len(kind: &'static str, name: &str, shape: &Shape, bytes: usize) -> Result<()> {
    let n = shape.numel().unwrap_or(0);
    let size = shape.dtype.size_bytes();
    if bytes != n * size {
        return Err(Error::DataLength {
            kind,
            name: name.into(),
            shape: shape.clone(),
            expected: n,
            got: bytes / size,
        });
    }
    Ok(())
}

fn check_bytes(kind: &'static str, name: &str, shape: &Shape, bytes: &[u8], dtype: DType) -> Result<()> {
    if dtype != shape.dtype {
        return Err(Error::DTypeMismatch { kind, name: name.into(), expected: shape.dtype, got: dtype });
    }
    check_len(kind, name, shape, bytes.len())
}

/// `data` as the bytes of `shape`'s dtype: the f32 values themselves when the dtype is f32
/// (no copy), else converted with `HostTensor::cast`'s semantics.
fn f32_bytes<'a>(kind: &'static str, name: &str, shape: &Shape, data: &'a [f32]) -> Result<Cow<'a, [u8]>> {
    if shape.dtype == DType::F32 && cfg!(target_endian = "little") {
        let n = shape.numel().unwrap_or(0);
        if data.len() != n {
            return Err(Error::DataLength {
                kind,
                name: name.into(),
                shape: shape.clone(),
                expected: n,
                got: data.len(),
            });
        }
        return Ok(Cow::Borrowed(bytemuck::cast_slice(data)));
    }
    Ok(Cow::Owned(f32_tensor(kind, name, shape, data)?.to_bytes()))
}

/// One output of `run`: f32 values the backend writes in place, or bytes of another dtype.
enum Output {
    F32(Vec<f32>),
    Bytes(Vec<u8>),
}

impl Output {
    fn new(s: &Shape) -> Output {
        if s.dtype == DType::F32 && cfg!(target_endian = "little") {
            Output::F32(rlx_driver::huge_pages::zeroed_vec(s.numel().unwrap_or(0)))
        } else {
            Output::Bytes(rlx_driver::huge_pages::zeroed_vec(s.size_bytes().unwrap_or(0)))
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Output::F32(v) => bytemuck::cast_slice_mut(v),
            Output::Bytes(b) => b,
        }
    }

    fn into_f32(self, s: &Shape) -> Result<Vec<f32>> {
        match self {
            Output::F32(v) => Ok(v),
            Output::Bytes(b) => HostTensor::from_bytes(s.clone(), &b)?.to_f32_vec(),
        }
    }
}

fn f32_tensor(kind: &'static str, name: &str, shape: &Shape, data: &[f32]) -> Result<HostTensor> {
    let n = shape.numel().unwrap_or(0);
    if data.len() != n {
        return Err(Error::DataLength { kind, name: name.into(), shape: shape.clone(), expected: n, got: data.len() });
    }
    Ok(HostTensor::from_f32(&shape.fixed_dims().unwrap_or_default(), data)?.cast(shape.dtype))
}
