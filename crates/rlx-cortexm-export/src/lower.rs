//! Lowering a QAT graph to a [`QModel`]: weights are read through their `fake_quant` (int8,
//! symmetric, per output channel), activations take the scale and zero point of the
//! `fake_quant` that follows them, and `matmul` / `conv2d` with their bias add, ReLU and output
//! `fake_quant` become one fused layer, as the TFLite converter fuses them.
//!
//! Ops: input, param, constant (and anything computed from constants alone, folded through the
//! op's reference), fake_quant, matmul, conv2d (plain or depthwise), add of a bias, add of two
//! int8 tensors (a residual, with its own output quantization), relu (fused into the layer before
//! it), max_pool2d, avg_pool2d, reshape and softmax (last axis).

use crate::error::{ExportError, Result};
use crate::qmodel::{QLayer, QModel, QOp, QTensor};
use rlx_cortexm::kernels::Window;
use rlx_cortexm::params::Activation;
use rlx_ir::ops::UnaryKind;
use rlx_ir::{Graph, HostTensor, NodeId, Op};
use std::collections::HashMap;

const SUPPORTED: &str = "matmul, conv2d (plain or depthwise), bias add, add of two int8 tensors, relu, \
                         max_pool2d, avg_pool2d, reshape, softmax, fake_quant, and ops on constants";

/// A weight read through its fake_quant: integers, dims and one scale per output channel.
#[derive(Debug, Clone)]
struct QWeight {
    q: Vec<i32>,
    dims: Vec<usize>,
    scales: Vec<f64>,
    axis: Option<usize>,
}

impl QWeight {
    /// The scale of output channel `c` along `axis` (per-tensor weights share one).
    fn scale(&self, c: usize) -> f32 {
        (if self.scales.len() == 1 { self.scales[0] } else { self.scales[c] }) as f32
    }
}

/// A contraction awaiting its bias, activation and output quantization.
#[derive(Debug, Clone)]
struct Pending {
    input: usize,
    weight: QWeight,
    conv: Option<(Window, usize)>,
    bias: Option<Vec<f64>>,
    act: Activation,
    out_dims: Vec<usize>,
    node: NodeId,
}

#[derive(Debug, Clone)]
enum Val {
    /// A float activation (the graph input) not yet quantized.
    Float,
    /// A constant.
    Const(HostTensor),
    /// A fake-quantized weight.
    Weight(QWeight),
    /// An int8 activation tensor; `nchw` holds `[c, h, w]` when it is an NHWC tensor flattened in
    /// rlx's NCHW order.
    Act { tensor: usize, nchw: Option<[usize; 3]> },
    /// An int32 accumulator.
    Acc(Box<Pending>),
    /// The sum of two int8 tensors awaiting an activation and its output quantization.
    Sum { a: usize, b: usize, act: Activation, node: NodeId },
}

fn unsupported(n: &rlx_ir::Node, id: NodeId) -> ExportError {
    ExportError::UnsupportedOp { op: n.op.def().name().to_string(), node: id.to_string(), supported: SUPPORTED }
}

fn scheme(id: NodeId, reason: impl Into<String>) -> ExportError {
    ExportError::Scheme { node: id.to_string(), reason: reason.into() }
}

/// `[n, c, h, w]` dims (rlx) as NHWC dims.
fn nhwc_dims(d: &[usize]) -> Vec<usize> {
    match d {
        [n, c, h, w] => vec![*n, *h, *w, *c],
        _ => d.to_vec(),
    }
}

struct Lowering<'g> {
    g: &'g Graph,
    params: &'g HashMap<String, HostTensor>,
    vals: Vec<Val>,
    model: QModel,
}

/// Lowers `g` (one float input, one output) with its params to a quantized model.
pub fn lower(g: &Graph, params: &HashMap<String, HostTensor>) -> Result<QModel> {
    let mut l = Lowering {
        g,
        params,
        vals: Vec::with_capacity(g.len()),
        model: QModel { tensors: vec![], layers: vec![], input: usize::MAX, output: usize::MAX },
    };
    for (i, n) in g.nodes().iter().enumerate() {
        let v = l.node(NodeId(i as u32), n)?;
        l.vals.push(v);
    }
    let out = *g.outputs().first().ok_or_else(|| scheme(NodeId(0), "the graph has no output"))?;
    match &l.vals[out.index()] {
        Val::Act { tensor, .. } => l.model.output = *tensor,
        Val::Acc(p) => {
            return Err(ExportError::Unquantized {
                what: format!("the output of `{}`", op_name(g, p.node)),
                node: out.to_string(),
                consumer: "the model output".into(),
            });
        }
        _ => {
            return Err(ExportError::Unquantized {
                what: "the model output".into(),
                node: out.to_string(),
                consumer: "the model output".into(),
            });
        }
    }
    if l.model.input == usize::MAX {
        return Err(scheme(out, "the graph input is never quantized"));
    }
    Ok(l.model)
}

fn op_name(g: &Graph, id: NodeId) -> &'static str {
    g.node(id).map(|n| n.op.def().name()).unwrap_or("?")
}

impl Lowering<'_> {
    fn tensor(&mut self, t: QTensor) -> usize {
        self.model.tensors.push(t);
        self.model.tensors.len() - 1
    }

    fn describe(&self, id: NodeId) -> String {
        match self.g.node(id).map(|n| &n.op) {
            Some(Op::Param(p)) => format!("weight `{}`", p.name),
            Some(Op::Input(_)) => "the model input".to_string(),
            Some(op) => format!("the output of `{}`", op.def().name()),
            None => format!("node {id}"),
        }
    }

    fn unquantized(&self, x: NodeId, consumer: &str) -> ExportError {
        ExportError::Unquantized { what: self.describe(x), node: x.to_string(), consumer: consumer.to_string() }
    }

    fn node(&mut self, id: NodeId, n: &rlx_ir::Node) -> Result<Val> {
        let ins: Vec<&Val> = n.inputs.iter().map(|x| &self.vals[x.index()]).collect();
        // Anything computed from constants alone is folded through the op's reference.
        if !n.inputs.is_empty() && !matches!(n.op, Op::FakeQuant(_)) && ins.iter().all(|v| matches!(v, Val::Const(_))) {
            let ts: Vec<&HostTensor> =
                ins.iter().map(|v| if let Val::Const(t) = v { t } else { unreachable!() }).collect();
            return Ok(Val::Const(n.op.def().reference(&ts, &n.ty)?));
        }
        Ok(match &n.op {
            Op::Input(_) => Val::Float,
            Op::Param(p) => Val::Const(
                self.params.get(&p.name).cloned().ok_or_else(|| ExportError::MissingParam { name: p.name.clone() })?,
            ),
            Op::Constant(c) => Val::Const(c.value.clone()),
            Op::Full(_) | Op::Arange(_) => Val::Const(n.op.def().reference(&[], &n.ty)?),
            Op::FakeQuant(fq) => self.fake_quant(id, n, fq)?,
            Op::MatMul(mm) => {
                if mm.transpose_a || mm.transpose_b {
                    return Err(unsupported(n, id));
                }
                let input = self.act_input(n.inputs[0], "matmul")?;
                let Val::Weight(w) = &self.vals[n.inputs[1].index()] else {
                    return Err(self.unquantized(n.inputs[1], "matmul"));
                };
                if w.dims.len() != 2 || !matches!(w.axis, None | Some(1)) {
                    return Err(scheme(id, format!("matmul weight dims {:?} need [in, out] per column", w.dims)));
                }
                let out_dims = n.ty.fixed_dims().unwrap_or_default();
                Val::Acc(Box::new(Pending {
                    input: input.0,
                    weight: w.clone(),
                    conv: None,
                    bias: None,
                    act: Activation::None,
                    out_dims,
                    node: id,
                }))
            }
            Op::Conv2d(c) => {
                let input = self.act_input(n.inputs[0], "conv2d")?;
                let Val::Weight(w) = &self.vals[n.inputs[1].index()] else {
                    return Err(self.unquantized(n.inputs[1], "conv2d"));
                };
                let in_c = self.model.tensors[input.0].nhwc().c;
                let (o, cg) = (w.dims[0], w.dims[1]);
                let mult = if c.groups == 1 {
                    0
                } else if c.groups == in_c && cg == 1 {
                    o / in_c
                } else {
                    return Err(scheme(
                        id,
                        format!("conv2d with {} groups over {in_c} channels (only 1 or depthwise)", c.groups),
                    ));
                };
                if !matches!(w.axis, None | Some(0)) {
                    return Err(scheme(id, "conv2d weights need per-output-channel scales (axis 0)"));
                }
                let window =
                    Window { kernel: [w.dims[2], w.dims[3]], stride: c.stride, dilation: c.dilation, pad: c.padding };
                let out_dims = nhwc_dims(&n.ty.fixed_dims().unwrap_or_default());
                Val::Acc(Box::new(Pending {
                    input: input.0,
                    weight: w.clone(),
                    conv: Some((window, mult)),
                    bias: None,
                    act: Activation::None,
                    out_dims,
                    node: id,
                }))
            }
            Op::Binary(b) if b.kind == rlx_ir::ops::BinaryKind::Add => {
                let (a, c) = match (ins[0], ins[1]) {
                    (Val::Acc(p), Val::Const(t)) | (Val::Const(t), Val::Acc(p)) => (p, t),
                    (Val::Act { tensor: x, .. }, Val::Act { tensor: y, .. }) => {
                        let (dx, dy) = (&self.model.tensors[*x].dims, &self.model.tensors[*y].dims);
                        if dx != dy {
                            return Err(scheme(id, format!("add of {dx:?} and {dy:?} (no broadcasting kernel)")));
                        }
                        return Ok(Val::Sum { a: *x, b: *y, act: Activation::None, node: id });
                    }
                    (Val::Acc(_), Val::Acc(_) | Val::Act { .. }) | (Val::Act { .. }, Val::Acc(_)) => {
                        return Err(scheme(id, "add of an int32 accumulator: quantize each side first"));
                    }
                    (Val::Float | Val::Weight(_), _) => return Err(self.unquantized(n.inputs[0], "add")),
                    _ => return Err(self.unquantized(n.inputs[1], "add")),
                };
                if a.bias.is_some() || a.act != Activation::None {
                    return Err(scheme(id, "a second bias add, or a bias after the activation"));
                }
                let oc = *a.weight.dims.get(if a.conv.is_some() { 0 } else { 1 }).unwrap_or(&0);
                let v = c.to_f64_vec()?;
                if v.len() != oc {
                    return Err(scheme(id, format!("bias of {} values for {oc} output channels", v.len())));
                }
                let mut p = (**a).clone();
                p.bias = Some(v);
                Val::Acc(Box::new(p))
            }
            Op::Unary(u) if u.kind == UnaryKind::Relu => match ins[0] {
                Val::Acc(a) if a.act == Activation::None => {
                    let mut p = (**a).clone();
                    p.act = Activation::Relu;
                    Val::Acc(Box::new(p))
                }
                Val::Sum { a, b, act: Activation::None, node } => {
                    Val::Sum { a: *a, b: *b, act: Activation::Relu, node: *node }
                }
                Val::Act { .. } | Val::Acc(_) => {
                    return Err(scheme(id, "relu is fused into a preceding matmul / conv2d only"));
                }
                _ => return Err(self.unquantized(n.inputs[0], "relu")),
            },
            Op::MaxPool2d(p) => {
                self.pool(id, n, QOp::MaxPool2d { kernel: p.kernel, stride: p.stride, pad: p.padding })?
            }
            Op::AvgPool2d(p) => {
                self.pool(id, n, QOp::AvgPool2d { kernel: p.kernel, stride: p.stride, pad: p.padding })?
            }
            Op::Reshape(r) => match ins[0] {
                Val::Act { tensor, nchw } => {
                    let t = &self.model.tensors[*tensor];
                    // Flattening [n, c, h, w] keeps NHWC bytes; the reader permutes its weights.
                    let nchw = match (t.dims.as_slice(), r.dims.as_slice()) {
                        ([_, h, w, c], [_, _]) if *h * *w > 1 && *c > 1 => Some([*c, *h, *w]),
                        (_, [_, _]) => *nchw,
                        _ => return Err(scheme(id, format!("reshape of {:?} to {:?}", t.dims, r.dims))),
                    };
                    let root = t.alias_of.unwrap_or(*tensor);
                    let t = QTensor { dims: r.dims.clone(), alias_of: Some(root), ..t.clone() };
                    Val::Act { tensor: self.tensor(t), nchw }
                }
                _ => return Err(self.unquantized(n.inputs[0], "reshape")),
            },
            Op::Softmax(s) => {
                let (input, _) = self.act_input(n.inputs[0], "softmax")?;
                let t = self.model.tensors[input].clone();
                if s.axis != -1 && s.axis != t.dims.len() as i64 - 1 {
                    return Err(scheme(id, "softmax over an axis other than the last"));
                }
                let out =
                    self.tensor(QTensor { dims: t.dims.clone(), scale: 1.0 / 256.0, zero_point: -128, alias_of: None });
                self.model.layers.push(QLayer {
                    op: QOp::Softmax { beta: 1.0 },
                    input,
                    input2: None,
                    output: out,
                    node: id.to_string(),
                });
                Val::Act { tensor: out, nchw: None }
            }
            _ => return Err(unsupported(n, id)),
        })
    }

    fn act_input(&self, x: NodeId, consumer: &str) -> Result<(usize, Option<[usize; 3]>)> {
        match &self.vals[x.index()] {
            Val::Act { tensor, nchw } => Ok((*tensor, *nchw)),
            Val::Acc(_) => Err(ExportError::Unquantized {
                what: format!("{} (an int32 accumulator)", self.describe(x)),
                node: x.to_string(),
                consumer: consumer.into(),
            }),
            _ => Err(self.unquantized(x, consumer)),
        }
    }

    fn pool(&mut self, id: NodeId, n: &rlx_ir::Node, op: QOp) -> Result<Val> {
        let (input, _) = self.act_input(n.inputs[0], op.name())?;
        let t = self.model.tensors[input].clone();
        let out = self.tensor(QTensor { dims: nhwc_dims(&n.ty.fixed_dims().unwrap_or_default()), alias_of: None, ..t });
        self.model.layers.push(QLayer { op, input, input2: None, output: out, node: id.to_string() });
        Ok(Val::Act { tensor: out, nchw: None })
    }

    fn fake_quant(&mut self, id: NodeId, n: &rlx_ir::Node, fq: &rlx_ir::ops::FakeQuant) -> Result<Val> {
        let consts = |k: usize| match &self.vals[n.inputs[k].index()] {
            Val::Const(t) => t.to_f64_vec().map_err(ExportError::from),
            _ => Err(scheme(id, "fake_quant with a scale or zero point that is not a constant")),
        };
        let (s, z) = (consts(1)?, consts(2)?);
        if fq.bits != 8 {
            return Err(scheme(id, format!("{}-bit fake_quant (int8 only)", fq.bits)));
        }
        match &self.vals[n.inputs[0].index()] {
            Val::Const(w) => {
                if !fq.signed || z.iter().any(|&z| z != 0.0) {
                    return Err(scheme(id, "weights must be quantized symmetric (signed, zero point 0)"));
                }
                let dims = w.dims();
                let axis = fq.axis.map(|a| if a < 0 { (dims.len() as i64 + a) as usize } else { a as usize });
                let inner: usize = axis.map(|a| dims[a + 1..].iter().product()).unwrap_or(1);
                let ch = axis.map(|a| dims[a]).unwrap_or(1);
                let (lo, hi) = fq.range();
                let q = w
                    .to_f64_vec()?
                    .iter()
                    .enumerate()
                    .map(|(i, &x)| {
                        (x / s[if s.len() == 1 { 0 } else { (i / inner) % ch }]).round().clamp(lo, hi) as i32
                    })
                    .collect();
                Ok(Val::Weight(QWeight { q, dims, scales: s, axis }))
            }
            Val::Float => {
                let (scale, zp) = act_quant(id, fq, &s, &z)?;
                let dims = nhwc_dims(&n.ty.fixed_dims().unwrap_or_default());
                let t = self.tensor(QTensor { dims, scale, zero_point: zp, alias_of: None });
                if self.model.input != usize::MAX {
                    return Err(scheme(id, "more than one quantized graph input"));
                }
                self.model.input = t;
                Ok(Val::Act { tensor: t, nchw: None })
            }
            Val::Acc(p) => {
                let (scale, zp) = act_quant(id, fq, &s, &z)?;
                let p = (**p).clone();
                Ok(Val::Act { tensor: self.finish(p, scale, zp)?, nchw: None })
            }
            Val::Act { tensor, nchw } => {
                let t = &self.model.tensors[*tensor];
                let (scale, zp) = act_quant(id, fq, &s, &z)?;
                if (scale - t.scale).abs() > t.scale * 1e-6 || zp != t.zero_point {
                    return Err(scheme(
                        id,
                        "fake_quant re-quantizing an int8 tensor to another scale (no requantize kernel)",
                    ));
                }
                Ok(Val::Act { tensor: *tensor, nchw: *nchw })
            }
            Val::Sum { a, b, act, node } => {
                let (scale, zp) = act_quant(id, fq, &s, &z)?;
                let (a, b, act, node) = (*a, *b, *act, *node);
                let dims = self.model.tensors[a].dims.clone();
                let out = self.tensor(QTensor { dims, scale, zero_point: zp, alias_of: None });
                self.model.layers.push(QLayer {
                    op: QOp::Add { act },
                    input: a,
                    input2: Some(b),
                    output: out,
                    node: node.to_string(),
                });
                Ok(Val::Act { tensor: out, nchw: None })
            }
            Val::Weight(_) => Err(scheme(id, "fake_quant of a weight already quantized")),
        }
    }

    /// Emits a fused layer for `p` with output quantization `(scale, zp)`.
    fn finish(&mut self, p: Pending, scale: f32, zp: i32) -> Result<usize> {
        let ti = self.model.tensors[p.input].clone();
        let nchw = match &self.vals[self.g.node(p.node).map(|n| n.inputs[0].index()).unwrap_or(0)] {
            Val::Act { nchw, .. } => *nchw,
            _ => None,
        };
        let out = self.tensor(QTensor { dims: p.out_dims.clone(), scale, zero_point: zp, alias_of: None });
        let w = &p.weight;
        let op = match p.conv {
            None => {
                // rlx's [in, out] becomes TFLite's [out, in]; an input flattened from NCHW reads its
                // features in NHWC order, so the weight columns are permuted to match.
                let (nin, nout) = (w.dims[0], w.dims[1]);
                let row_of = |j: usize| match nchw {
                    Some([c, h, ww]) => {
                        let (ci, rest) = (j % c, j / c);
                        let (y, x) = (rest / ww, rest % ww);
                        ci * h * ww + y * ww + x
                    }
                    None => j,
                };
                let mut weights = vec![0i8; nin * nout];
                for o in 0..nout {
                    for j in 0..nin {
                        weights[o * nin + j] = w.q[row_of(j) * nout + o] as i8;
                    }
                }
                let w_scales: Vec<f32> = (0..nout).map(|o| w.scale(o)).collect();
                let bias = quantize_bias(&p.bias, ti.scale, &w_scales);
                QOp::FullyConnected { weights, bias, w_scales, act: p.act }
            }
            Some((window, mult)) => {
                // OIHW (rlx) to OHWI, or to [1, kh, kw, out] for depthwise.
                let (o, cg, kh, kw) = (w.dims[0], w.dims[1], w.dims[2], w.dims[3]);
                let mut weights = vec![0i8; o * cg * kh * kw];
                for oc in 0..o {
                    for ic in 0..cg {
                        for y in 0..kh {
                            for x in 0..kw {
                                let v = w.q[((oc * cg + ic) * kh + y) * kw + x] as i8;
                                let at =
                                    if mult == 0 { ((oc * kh + y) * kw + x) * cg + ic } else { (y * kw + x) * o + oc };
                                weights[at] = v;
                            }
                        }
                    }
                }
                let w_scales: Vec<f32> = (0..o).map(|c| w.scale(c)).collect();
                let bias = quantize_bias(&p.bias, ti.scale, &w_scales);
                QOp::Conv2d { weights, bias, w_scales, window, depthwise_multiplier: mult, act: p.act }
            }
        };
        self.model.layers.push(QLayer { op, input: p.input, input2: None, output: out, node: p.node.to_string() });
        Ok(out)
    }
}

/// The int32 bias at `s_in * s_w[c]`, rounded half away from zero.
fn quantize_bias(bias: &Option<Vec<f64>>, s_in: f32, w_scales: &[f32]) -> Vec<i32> {
    w_scales
        .iter()
        .enumerate()
        .map(|(c, &sw)| {
            let b = bias.as_ref().map(|b| b[c]).unwrap_or(0.0);
            (b / (s_in as f64 * sw as f64)).round().clamp(i32::MIN as f64, i32::MAX as f64) as i32
        })
        .collect()
}

/// An activation's int8 scale and zero point from a per-tensor fake_quant: a signed grid keeps
/// its zero point, an unsigned 0..=255 grid moves down by 128.
fn act_quant(id: NodeId, fq: &rlx_ir::ops::FakeQuant, s: &[f64], z: &[f64]) -> Result<(f32, i32)> {
    if s.len() != 1 || z.len() != 1 || fq.axis.is_some() {
        return Err(scheme(id, "activations need one scale per tensor"));
    }
    if fq.narrow {
        return Err(scheme(id, "activations need the full int8 grid (narrow is for weights)"));
    }
    let zp = z[0].round() as i32 - if fq.signed { 0 } else { 128 };
    if !(-128..=127).contains(&zp) {
        return Err(scheme(id, format!("activation zero point {zp} is outside int8")));
    }
    Ok((s[0] as f32, zp))
}
