//! The typed builder methods of `rlx.Graph`, one per builder of `rlx::ir::Graph`. Families are
//! generated from name lists; every other op is also reachable through `Graph.op`.

use crate::convert::dtype_arg;
use crate::errors::IntoPy;
use crate::graph::{Id, PyGraph, PyNode, ids};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rlx::ir::ops::{Attention, BinaryKind, CompareKind, CustomFn, HeadLayout, ReduceKind, UnaryKind};
use rlx::ir::{Graph, MaskKind, NodeId, QuantScheme};

macro_rules! unary_methods {
    ($($f:ident),* $(,)?) => {
        #[pymethods]
        impl PyGraph {
            $(
                #[doc = concat!("Elementwise `", stringify!($f), "(x)`.")]
                fn $f(&mut self, x: Id) -> PyResult<PyNode> {
                    self.build(|g| g.$f(x.0)).map(Into::into)
                }
            )*
        }
    };
}

unary_methods! {
    neg, abs, exp, log, sqrt, rsqrt, recip, square, sin, cos, tanh, sigmoid, relu, gelu, gelu_tanh,
    silu, erf, softplus, floor, round, sign,
}

macro_rules! binary_methods {
    ($($f:ident),* $(,)?) => {
        #[pymethods]
        impl PyGraph {
            $(
                #[doc = concat!("Elementwise `", stringify!($f), "(a, b)` with numpy broadcasting and promotion.")]
                fn $f(&mut self, a: Id, b: Id) -> PyResult<PyNode> {
                    self.build(|g| g.$f(a.0, b.0)).map(Into::into)
                }
            )*
        }
    };
}

binary_methods! { add, sub, mul, div, pow, maximum, minimum, eq, ne, lt, le, gt, ge }

/// The axes of a reduction: the given ones, or all of them.
fn axes_or_all(g: &Graph, x: NodeId, axes: Option<Vec<i64>>) -> Vec<i64> {
    axes.unwrap_or_else(|| (0..g.shape(x).map_or(0, |s| s.rank()) as i64).collect())
}

macro_rules! reduce_methods {
    ($($f:ident),* $(,)?) => {
        #[pymethods]
        impl PyGraph {
            $(
                #[doc = concat!("Reduces `x` by `", stringify!($f), "` over `axes` (default: all).")]
                #[pyo3(signature = (x, axes = None, keep_dims = false))]
                fn $f(&mut self, x: Id, axes: Option<Vec<i64>>, keep_dims: bool) -> PyResult<PyNode> {
                    self.build(|g| { let a = axes_or_all(g, x.0, axes); g.$f(x.0, &a, keep_dims) }).map(Into::into)
                }
            )*
        }
    };
}

reduce_methods! { sum, mean, max, min, prod }

/// A family member from its serde name (`"tanh"`, `"add"`, `"lt"`, `"sum"`).
fn kind<T: serde::de::DeserializeOwned>(family: &str, name: &str) -> PyResult<T> {
    serde_json::from_value(serde_json::Value::String(name.into()))
        .map_err(|e| PyValueError::new_err(format!("{family} kind `{name}`: {e}")))
}

fn scheme(name: &str) -> PyResult<QuantScheme> {
    QuantScheme::from_name(name).py()
}

fn mask_arg(mask: &Bound<'_, PyAny>) -> PyResult<MaskKind> {
    if mask.is_none() {
        return Ok(MaskKind::None);
    }
    if let Ok(n) = mask.extract::<usize>() {
        return Ok(MaskKind::SlidingWindow(n));
    }
    match mask.extract::<String>()?.as_str() {
        "none" => Ok(MaskKind::None),
        "causal" => Ok(MaskKind::Causal),
        other => Err(PyValueError::new_err(format!(
            "attention mask `{other}`: use \"none\", \"causal\", an int window (sliding window) or \
             attention_with_mask for a custom mask"
        ))),
    }
}

fn layout_arg(layout: &str) -> PyResult<HeadLayout> {
    match layout {
        "bhsd" => Ok(HeadLayout::Bhsd),
        "bshd" => Ok(HeadLayout::Bshd),
        other => Err(PyValueError::new_err(format!(
            "attention layout `{other}`: use \"bhsd\" ([batch, heads, seq, dim]) or \"bshd\" ([batch, seq, heads, dim])"
        ))),
    }
}

#[pymethods]
impl PyGraph {
    /// Any unary elementwise op by name (`"tanh"`).
    #[pyo3(name = "unary")]
    fn unary_kind(&mut self, kind_name: &str, x: Id) -> PyResult<PyNode> {
        let k: UnaryKind = kind("unary", kind_name)?;
        self.build(|g| g.unary(k, x.0)).map(Into::into)
    }

    /// Any binary arithmetic op by name (`"add"`), with broadcasting and promotion.
    #[pyo3(name = "binary")]
    fn binary_kind(&mut self, kind_name: &str, a: Id, b: Id) -> PyResult<PyNode> {
        let k: BinaryKind = kind("binary", kind_name)?;
        self.build(|g| g.binary(k, a.0, b.0)).map(Into::into)
    }

    /// Any comparison by name (`"lt"`), with broadcasting and promotion.
    #[pyo3(name = "compare")]
    fn compare_kind(&mut self, kind_name: &str, a: Id, b: Id) -> PyResult<PyNode> {
        let k: CompareKind = kind("compare", kind_name)?;
        self.build(|g| g.compare(k, a.0, b.0)).map(Into::into)
    }

    /// Any reduction by name (`"sum"`) over `axes` (default: all).
    #[pyo3(name = "reduce", signature = (kind_name, x, axes = None, keep_dims = false))]
    fn reduce_kind(&mut self, kind_name: &str, x: Id, axes: Option<Vec<i64>>, keep_dims: bool) -> PyResult<PyNode> {
        let k: ReduceKind = kind("reduce", kind_name)?;
        self.build(|g| {
            let a = axes_or_all(g, x.0, axes);
            g.reduce(k, x.0, &a, keep_dims)
        })
        .map(Into::into)
    }

    /// `x[start : start + size]` along `axis`, `start` an integer scalar node (clamped).
    fn dynamic_slice(&mut self, x: Id, start: Id, axis: i64, size: usize) -> PyResult<PyNode> {
        self.build(|g| g.dynamic_slice(x.0, start.0, axis, size)).map(Into::into)
    }

    /// `x` with `update` written at `start` along `axis` (clamped so it fits).
    fn dynamic_update_slice(&mut self, x: Id, update: Id, start: Id, axis: i64) -> PyResult<PyNode> {
        self.build(|g| g.dynamic_update_slice(x.0, update.0, start.0, axis)).map(Into::into)
    }

    /// A user function `body(args...)` with optional derivative rules: `jvp_body(primals...,
    /// tangents...)` and `vjp_body(primals..., cotangent)` (one cotangent per arg).
    #[pyo3(signature = (args, body, jvp_body = None, vjp_body = None, name = "custom"))]
    fn custom_fn(
        &mut self,
        args: Vec<Id>,
        body: PyRef<'_, PyGraph>,
        jvp_body: Option<PyRef<'_, PyGraph>>,
        vjp_body: Option<PyRef<'_, PyGraph>>,
        name: &str,
    ) -> PyResult<PyNode> {
        let f = CustomFn {
            name: name.into(),
            body: Box::new(body.g.clone()),
            jvp_body: jvp_body.map(|b| Box::new(b.g.clone())),
            vjp_body: vjp_body.map(|b| Box::new(b.g.clone())),
        };
        let a = ids(&args);
        self.build(|g| g.custom_fn(f, &a)).map(Into::into)
    }

    /// After every run, `param` takes the value of `value` (optimizer steps, caches).
    fn update_param(&mut self, param: Id, value: Id) -> PyResult<()> {
        self.build(|g| g.update_param(param.0, value.0))
    }

    /// The declared state updates as (param, value) pairs.
    fn updates(&self) -> Vec<(PyNode, PyNode)> {
        self.g.updates().iter().map(|&(p, v)| (p.into(), v.into())).collect()
    }

    /// Sum over every axis.
    fn sum_all(&mut self, x: Id) -> PyResult<PyNode> {
        self.build(|g| g.sum_all(x.0)).map(Into::into)
    }

    /// Index of the maximum along `axis`.
    #[pyo3(signature = (x, axis = -1, keep_dims = false))]
    fn argmax(&mut self, x: Id, axis: i64, keep_dims: bool) -> PyResult<PyNode> {
        self.build(|g| g.argmax(x.0, axis, keep_dims)).map(Into::into)
    }

    /// Matrix product with numpy batching rules.
    fn matmul(&mut self, a: Id, b: Id) -> PyResult<PyNode> {
        self.build(|g| g.matmul(a.0, b.0)).map(Into::into)
    }

    /// Matrix product with either operand transposed in its last two axes.
    #[pyo3(signature = (a, b, transpose_a = false, transpose_b = false))]
    fn matmul_t(&mut self, a: Id, b: Id, transpose_a: bool, transpose_b: bool) -> PyResult<PyNode> {
        self.build(|g| g.matmul_t(a.0, b.0, transpose_a, transpose_b)).map(Into::into)
    }

    /// Softmax along `axis`.
    #[pyo3(signature = (x, axis = -1))]
    fn softmax(&mut self, x: Id, axis: i64) -> PyResult<PyNode> {
        self.build(|g| g.softmax(x.0, axis)).map(Into::into)
    }

    /// Log-softmax along `axis`.
    #[pyo3(signature = (x, axis = -1))]
    fn log_softmax(&mut self, x: Id, axis: i64) -> PyResult<PyNode> {
        self.build(|g| g.log_softmax(x.0, axis)).map(Into::into)
    }

    /// Same elements, new dims.
    fn reshape(&mut self, x: Id, dims: Vec<usize>) -> PyResult<PyNode> {
        self.build(|g| g.reshape(x.0, &dims)).map(Into::into)
    }

    /// Permutes axes.
    fn transpose(&mut self, x: Id, perm: Vec<usize>) -> PyResult<PyNode> {
        self.build(|g| g.transpose(x.0, &perm)).map(Into::into)
    }

    /// Broadcasts to `dims` (numpy rules).
    fn broadcast_to(&mut self, x: Id, dims: Vec<usize>) -> PyResult<PyNode> {
        self.build(|g| g.broadcast_to(x.0, &dims)).map(Into::into)
    }

    /// Inserts a size-1 axis.
    fn expand_dims(&mut self, x: Id, axis: i64) -> PyResult<PyNode> {
        self.build(|g| g.expand_dims(x.0, axis)).map(Into::into)
    }

    /// Removes size-1 axes (all of them when `axes` is empty).
    #[pyo3(signature = (x, axes = vec![]))]
    fn squeeze(&mut self, x: Id, axes: Vec<i64>) -> PyResult<PyNode> {
        self.build(|g| g.squeeze(x.0, &axes)).map(Into::into)
    }

    /// `x[starts:ends:steps]` per axis.
    #[pyo3(signature = (x, starts, ends, steps = None))]
    fn slice(&mut self, x: Id, starts: Vec<usize>, ends: Vec<usize>, steps: Option<Vec<usize>>) -> PyResult<PyNode> {
        let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
        self.build(|g| g.slice(x.0, &starts, &ends, &steps)).map(Into::into)
    }

    /// `x[start:end]` along one axis.
    fn slice_axis(&mut self, x: Id, axis: i64, start: usize, end: usize) -> PyResult<PyNode> {
        self.build(|g| g.slice_axis(x.0, axis, start, end)).map(Into::into)
    }

    /// Joins tensors along `axis`.
    #[pyo3(signature = (xs, axis = 0))]
    fn concat(&mut self, xs: Vec<Id>, axis: i64) -> PyResult<PyNode> {
        let xs = ids(&xs);
        self.build(|g| g.concat(&xs, axis)).map(Into::into)
    }

    /// Picks slices of `x` along `axis` by integer `indices`.
    #[pyo3(signature = (x, indices, axis = 0))]
    fn gather(&mut self, x: Id, indices: Id, axis: i64) -> PyResult<PyNode> {
        self.build(|g| g.gather(x.0, indices.0, axis)).map(Into::into)
    }

    /// Adds `updates` into `target` at `indices` along `axis`.
    #[pyo3(signature = (target, indices, updates, axis = 0))]
    fn scatter_add(&mut self, target: Id, indices: Id, updates: Id, axis: i64) -> PyResult<PyNode> {
        self.build(|g| g.scatter_add(target.0, indices.0, updates.0, axis)).map(Into::into)
    }

    /// Cumulative sum along `axis`.
    #[pyo3(signature = (x, axis = -1, reverse = false, exclusive = false))]
    fn cumsum(&mut self, x: Id, axis: i64, reverse: bool, exclusive: bool) -> PyResult<PyNode> {
        self.build(|g| g.cumsum_with(x.0, axis, reverse, exclusive)).map(Into::into)
    }

    /// The `k` largest values along the last axis and their indices: (values, indices).
    fn topk(&mut self, x: Id, k: usize) -> PyResult<(PyNode, PyNode)> {
        self.build(|g| g.topk(x.0, k)).map(|(v, i)| (v.into(), i.into()))
    }

    /// Layer normalization over the last axis.
    #[pyo3(signature = (x, gamma, beta, eps = 1e-5))]
    fn layer_norm(&mut self, x: Id, gamma: Id, beta: Id, eps: f32) -> PyResult<PyNode> {
        self.build(|g| g.layer_norm(x.0, gamma.0, beta.0, eps)).map(Into::into)
    }

    /// RMS normalization over the last axis.
    #[pyo3(signature = (x, gamma, eps = 1e-6))]
    fn rms_norm(&mut self, x: Id, gamma: Id, eps: f32) -> PyResult<PyNode> {
        self.build(|g| g.rms_norm(x.0, gamma.0, eps)).map(Into::into)
    }

    /// Scaled dot-product attention over `[batch, heads, seq, dim]` (`layout="bhsd"`) or
    /// `[batch, seq, heads, dim]` (`"bshd"`); `mask` is "none", "causal" or an int (sliding window).
    #[pyo3(signature = (q, k, v, mask = None, scale = None, layout = "bhsd"))]
    fn attention(
        &mut self,
        q: Id,
        k: Id,
        v: Id,
        mask: Option<&Bound<'_, PyAny>>,
        scale: Option<f32>,
        layout: &str,
    ) -> PyResult<PyNode> {
        let m = match mask {
            Some(m) => mask_arg(m)?,
            None => MaskKind::None,
        };
        let l = layout_arg(layout)?;
        self.build(|g| {
            let d = g.shape(q.0).and_then(|s| s.dims.last()?.fixed()).unwrap_or(1);
            let op = Attention::new(m, scale.unwrap_or(1.0 / (d as f32).sqrt()) as f64).with_layout(l);
            g.add_node(op, &[q.0, k.0, v.0])
        })
        .map(Into::into)
    }

    /// Attention with a custom mask tensor (bool: may attend; float: added to the scores),
    /// broadcastable to `[batch, heads, s, t]` whatever the `layout` of q, k and v.
    #[pyo3(signature = (q, k, v, mask, scale = None, layout = "bhsd"))]
    fn attention_with_mask(
        &mut self,
        q: Id,
        k: Id,
        v: Id,
        mask: Id,
        scale: Option<f32>,
        layout: &str,
    ) -> PyResult<PyNode> {
        let l = layout_arg(layout)?;
        self.build(|g| {
            let d = g.shape(q.0).and_then(|s| s.dims.last()?.fixed()).unwrap_or(1);
            let op = Attention::new(MaskKind::Custom, scale.unwrap_or(1.0 / (d as f32).sqrt()) as f64).with_layout(l);
            g.add_node(op, &[q.0, k.0, v.0, mask.0])
        })
        .map(Into::into)
    }

    /// Rotary position embedding of `x` at integer `positions`: rotates the two halves of each
    /// row, or adjacent pairs with `interleaved=True` (GPT-J style).
    #[pyo3(signature = (x, positions, theta = 10000.0, interleaved = false))]
    fn rope(&mut self, x: Id, positions: Id, theta: f32, interleaved: bool) -> PyResult<PyNode> {
        self.build(|g| {
            if interleaved { g.rope_interleaved(x.0, positions.0, theta) } else { g.rope(x.0, positions.0, theta) }
        })
        .map(Into::into)
    }

    /// 2-D convolution (NCHW, OIHW weights, zero padding).
    #[pyo3(signature = (x, w, stride = [1, 1], padding = [0, 0], dilation = [1, 1], groups = 1))]
    fn conv2d(
        &mut self,
        x: Id,
        w: Id,
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
    ) -> PyResult<PyNode> {
        self.build(|g| g.conv2d(x.0, w.0, stride, padding, dilation, groups)).map(Into::into)
    }

    /// 2-D max pooling (NCHW).
    #[pyo3(signature = (x, kernel, stride, padding = [0, 0]))]
    fn max_pool2d(&mut self, x: Id, kernel: [usize; 2], stride: [usize; 2], padding: [usize; 2]) -> PyResult<PyNode> {
        self.build(|g| g.max_pool2d(x.0, kernel, stride, padding)).map(Into::into)
    }

    /// 2-D average pooling (NCHW).
    #[pyo3(signature = (x, kernel, stride, padding = [0, 0]))]
    fn avg_pool2d(&mut self, x: Id, kernel: [usize; 2], stride: [usize; 2], padding: [usize; 2]) -> PyResult<PyNode> {
        self.build(|g| g.avg_pool2d(x.0, kernel, stride, padding)).map(Into::into)
    }

    /// Dequantizes ggml-packed rows (u8) of `k` values with `scheme` (`"Q4_0"`, `"Q8_0"`, ...).
    fn dequantize(&mut self, packed: Id, scheme_name: &str, k: usize) -> PyResult<PyNode> {
        let s = scheme(scheme_name)?;
        self.build(|g| g.dequantize(packed.0, s, k)).map(Into::into)
    }

    /// `x @ dequantize(w).T` with ggml-packed weights.
    fn qmatmul(&mut self, x: Id, w: Id, scheme_name: &str, k: usize) -> PyResult<PyNode> {
        let s = scheme(scheme_name)?;
        self.build(|g| g.qmatmul(x.0, w.0, s, k)).map(Into::into)
    }

    /// Converts to dtype `to`.
    fn cast(&mut self, x: Id, to: &Bound<'_, PyAny>) -> PyResult<PyNode> {
        let dt = dtype_arg(to)?;
        self.build(|g| g.cast(x.0, dt)).map(Into::into)
    }

    /// Converts to dtype `to` unless the node already has it.
    fn cast_to(&mut self, x: Id, to: &Bound<'_, PyAny>) -> PyResult<PyNode> {
        let dt = dtype_arg(to)?;
        self.build(|g| g.cast_to(x.0, dt)).map(Into::into)
    }

    /// `cond ? a : b` elementwise, with broadcasting.
    fn where_(&mut self, cond: Id, a: Id, b: Id) -> PyResult<PyNode> {
        self.build(|g| g.where_(cond.0, a.0, b.0)).map(Into::into)
    }

    /// `then_body(args)` if `pred` else `else_body(args)`.
    fn cond(
        &mut self,
        pred: Id,
        then_body: PyRef<'_, PyGraph>,
        else_body: PyRef<'_, PyGraph>,
        args: Vec<Id>,
    ) -> PyResult<PyNode> {
        let (t, e, a) = (then_body.g.clone(), else_body.g.clone(), ids(&args));
        self.build(|g| g.cond(pred.0, t, e, &a)).map(Into::into)
    }

    /// `jax.lax.scan`: `body(carry, x_t, consts...) -> (carry, y_t)`; returns (carry, ys).
    #[pyo3(signature = (body, init, xs, consts = vec![]))]
    fn scan(&mut self, body: PyRef<'_, PyGraph>, init: Id, xs: Id, consts: Vec<Id>) -> PyResult<(PyNode, PyNode)> {
        let (b, c) = (body.g.clone(), ids(&consts));
        self.build(|g| g.scan(b, init.0, xs.0, &c)).map(|(c, y)| (c.into(), y.into()))
    }

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
        let (b, i, x, c) = (body.g.clone(), ids(&inits), ids(&xs), ids(&consts));
        let (carries, ys) = self.build(|g| g.scan_n(b, &i, &x, &c, reverse))?;
        let nodes = |v: Vec<NodeId>| v.into_iter().map(Into::into).collect();
        Ok((nodes(carries), nodes(ys)))
    }

    /// `jax.lax.associative_scan` along `axis`: `combine(a_leaves..., b_leaves..., consts...)
    /// -> leaves...`; returns one node per leaf of the inclusive scan.
    #[pyo3(signature = (combine, elems, consts = vec![], axis = 0, reverse = false))]
    fn associative_scan(
        &mut self,
        combine: PyRef<'_, PyGraph>,
        elems: Vec<Id>,
        consts: Vec<Id>,
        axis: i64,
        reverse: bool,
    ) -> PyResult<Vec<PyNode>> {
        let (b, e, c) = (combine.g.clone(), ids(&elems), ids(&consts));
        let outs = self.build(|g| g.associative_scan(b, &e, &c, axis, reverse))?;
        Ok(outs.into_iter().map(Into::into).collect())
    }

    /// `while cond(x, consts...): x = body(x, consts...)`, at most `max_trips` times.
    #[pyo3(signature = (cond, body, init, consts = vec![], max_trips = 1_000_000))]
    fn while_loop(
        &mut self,
        cond: PyRef<'_, PyGraph>,
        body: PyRef<'_, PyGraph>,
        init: Id,
        consts: Vec<Id>,
        max_trips: usize,
    ) -> PyResult<PyNode> {
        let (c, b, k) = (cond.g.clone(), body.g.clone(), ids(&consts));
        self.build(|g| g.while_loop(c, b, init.0, &k, max_trips)).map(Into::into)
    }
}
