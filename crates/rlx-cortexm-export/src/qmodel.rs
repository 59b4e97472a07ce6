//! The quantized model between the rlx graph and the Cortex-M tables: int8 tensors with their
//! scale and zero point (4-D tensors laid out NHWC), and layers holding int8 weights, int32
//! biases and float weight scales. Kernel parameters are derived from the scales by
//! `rlx_cortexm::params`, exactly as TFLite Micro derives them.

use rlx_cortexm::kernels::{ConvParams, DepthwiseParams, FcParams, Nhwc, OutQuant, PoolParams, Window};
use rlx_cortexm::params::{self, Activation};
use rlx_cortexm::requant::Requant;
use rlx_cortexm::{Layer, Model, Op, Slot};

/// An int8 activation tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct QTensor {
    /// Dims: `[n, features]`, or `[n, h, w, c]` (NHWC).
    pub dims: Vec<usize>,
    /// Scale.
    pub scale: f32,
    /// Zero point (-128..=127).
    pub zero_point: i32,
    /// The tensor whose bytes this one shares (a reshape), planned into the same slot.
    pub alias_of: Option<usize>,
}

impl QTensor {
    /// Elements.
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// Whether the tensor is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The NHWC shape of a 4-D tensor, or `[n, 1, 1, features]` for a 2-D one.
    pub fn nhwc(&self) -> Nhwc {
        match self.dims.as_slice() {
            [n, h, w, c] => Nhwc::new(*n, *h, *w, *c),
            [n, f] => Nhwc::new(*n, 1, 1, *f),
            d => Nhwc::new(1, 1, 1, d.iter().product()),
        }
    }
}

/// A layer's kernel and its constant data.
#[derive(Debug, Clone, PartialEq)]
pub enum QOp {
    /// Fully connected: weights `[out, in]`.
    FullyConnected {
        /// Int8 weights, row-major `[out, in]`.
        weights: Vec<i8>,
        /// Int32 bias at `s_in * s_w[o]`.
        bias: Vec<i32>,
        /// Weight scale per output channel.
        w_scales: Vec<f32>,
        /// Fused activation.
        act: Activation,
    },
    /// Conv2d, weights OHWI; depthwise when `depthwise` (weights `[1, kh, kw, out]`).
    Conv2d {
        /// Int8 weights.
        weights: Vec<i8>,
        /// Int32 bias.
        bias: Vec<i32>,
        /// Weight scale per output channel.
        w_scales: Vec<f32>,
        /// Window.
        window: Window,
        /// Depthwise (groups = input channels) with this channel multiplier, or a plain conv (0).
        depthwise_multiplier: usize,
        /// Fused activation.
        act: Activation,
    },
    /// Max pooling (output quantization = input's).
    MaxPool2d {
        /// Kernel.
        kernel: [usize; 2],
        /// Stride.
        stride: [usize; 2],
        /// Padding before.
        pad: [usize; 2],
    },
    /// Average pooling (output quantization = input's).
    AvgPool2d {
        /// Kernel.
        kernel: [usize; 2],
        /// Stride.
        stride: [usize; 2],
        /// Padding before.
        pad: [usize; 2],
    },
    /// Softmax over the last axis (output scale 1/256, zero point -128).
    Softmax {
        /// Beta.
        beta: f32,
    },
    /// Elementwise add of `input` and `input2` (equal dims), with a fused activation.
    Add {
        /// Fused activation.
        act: Activation,
    },
}

impl QOp {
    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        match self {
            QOp::FullyConnected { .. } => "fully_connected",
            QOp::Conv2d { depthwise_multiplier: 0, .. } => "conv2d",
            QOp::Conv2d { .. } => "depthwise_conv2d",
            QOp::MaxPool2d { .. } => "max_pool2d",
            QOp::AvgPool2d { .. } => "avg_pool2d",
            QOp::Softmax { .. } => "softmax",
            QOp::Add { .. } => "add",
        }
    }
}

/// A layer: op, input tensor(s) and output tensor (ids into `QModel::tensors`).
#[derive(Debug, Clone, PartialEq)]
pub struct QLayer {
    /// The op.
    pub op: QOp,
    /// Input tensor.
    pub input: usize,
    /// The second input of `Add`.
    pub input2: Option<usize>,
    /// Output tensor.
    pub output: usize,
    /// The rlx node it came from (for messages).
    pub node: String,
}

/// A quantized model: a chain of layers over int8 tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct QModel {
    /// Tensors.
    pub tensors: Vec<QTensor>,
    /// Layers in execution order.
    pub layers: Vec<QLayer>,
    /// The input tensor.
    pub input: usize,
    /// The output tensor.
    pub output: usize,
}

/// Kernel parameters derived from one layer's scales, owned so `Layer`s can borrow them.
#[derive(Debug, Clone, PartialEq)]
pub struct Derived {
    /// Q31 multiplier per output channel (empty for ops without one).
    pub multiplier: Vec<i32>,
    /// Shift per output channel.
    pub shift: Vec<i32>,
    /// Output zero point and activation clamp.
    pub out: OutQuant,
}

impl QModel {
    /// Multiply-accumulates per inference (conv, depthwise and fully connected layers).
    pub fn macs(&self) -> u64 {
        self.layers
            .iter()
            .map(|l| {
                let (i, o) = (&self.tensors[l.input], &self.tensors[l.output]);
                match &l.op {
                    QOp::FullyConnected { weights, .. } => (weights.len() * i.nhwc().n) as u64,
                    QOp::Conv2d { window, depthwise_multiplier, .. } => {
                        let per_out = window.kernel[0] * window.kernel[1];
                        let per_out = if *depthwise_multiplier == 0 { per_out * i.nhwc().c } else { per_out };
                        (o.len() * per_out) as u64
                    }
                    _ => 0,
                }
            })
            .sum()
    }

    /// Bytes of constant data (weights, biases, multipliers, shifts).
    pub fn weight_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| match &l.op {
                QOp::FullyConnected { weights, bias, .. } | QOp::Conv2d { weights, bias, .. } => {
                    weights.len() + 4 * bias.len() * 3
                }
                _ => 0,
            })
            .sum()
    }

    /// The requantization parameters of every layer, from its scales.
    pub fn derive(&self) -> Vec<Derived> {
        self.layers
            .iter()
            .map(|l| {
                let (i, o) = (&self.tensors[l.input], &self.tensors[l.output]);
                match &l.op {
                    QOp::FullyConnected { w_scales, act, .. } | QOp::Conv2d { w_scales, act, .. } => {
                        let (multiplier, shift) =
                            w_scales.iter().map(|&w| params::channel_multiplier(i.scale, w, o.scale)).unzip();
                        Derived { multiplier, shift, out: params::out_quant(*act, o.scale, o.zero_point) }
                    }
                    _ => Derived { multiplier: vec![], shift: vec![], out: OutQuant::none(o.zero_point) },
                }
            })
            .collect()
    }

    /// The `rlx_cortexm` layer table over `slots` (one per tensor), borrowing this model's data
    /// and `derived` (from [`QModel::derive`]).
    pub fn layers<'a>(&'a self, derived: &'a [Derived], slots: &[Slot]) -> Vec<Layer<'a>> {
        self.layers
            .iter()
            .zip(derived)
            .map(|(l, d)| {
                let (ti, to) = (&self.tensors[l.input], &self.tensors[l.output]);
                let requant = Requant { multiplier: &d.multiplier, shift: &d.shift };
                let op = match &l.op {
                    QOp::FullyConnected { weights, bias, .. } => {
                        let inputs = *ti.dims.last().unwrap_or(&0);
                        Op::FullyConnected(FcParams {
                            batch: ti.len() / inputs.max(1),
                            inputs,
                            outputs: bias.len(),
                            weights,
                            bias,
                            input_offset: -ti.zero_point,
                            requant,
                            out: d.out,
                        })
                    }
                    QOp::Conv2d { weights, bias, window, depthwise_multiplier: 0, .. } => Op::Conv2d(ConvParams {
                        input: ti.nhwc(),
                        output: to.nhwc(),
                        window: *window,
                        weights,
                        bias,
                        input_offset: -ti.zero_point,
                        requant,
                        out: d.out,
                    }),
                    QOp::Conv2d { weights, bias, window, depthwise_multiplier, .. } => {
                        Op::DepthwiseConv2d(DepthwiseParams {
                            input: ti.nhwc(),
                            output: to.nhwc(),
                            window: *window,
                            multiplier: *depthwise_multiplier,
                            weights,
                            bias,
                            input_offset: -ti.zero_point,
                            requant,
                            out: d.out,
                        })
                    }
                    QOp::MaxPool2d { kernel, stride, pad } | QOp::AvgPool2d { kernel, stride, pad } => {
                        let p = PoolParams {
                            input: ti.nhwc(),
                            output: to.nhwc(),
                            kernel: *kernel,
                            stride: *stride,
                            pad: *pad,
                            act_min: -128,
                            act_max: 127,
                        };
                        if matches!(l.op, QOp::MaxPool2d { .. }) { Op::MaxPool2d(p) } else { Op::AvgPool2d(p) }
                    }
                    QOp::Softmax { beta } => {
                        let depth = *ti.dims.last().unwrap_or(&1);
                        Op::Softmax(params::softmax_params(ti.len() / depth.max(1), depth, *beta, ti.scale))
                    }
                    QOp::Add { act } => {
                        let t2 = &self.tensors[l.input2.unwrap_or(l.input)];
                        Op::Add(params::add_params(
                            ti.scale,
                            ti.zero_point,
                            t2.scale,
                            t2.zero_point,
                            to.scale,
                            to.zero_point,
                            *act,
                        ))
                    }
                };
                let second = slots[l.input2.unwrap_or(l.input)];
                Layer { op, inputs: [slots[l.input], second], output: slots[l.output] }
            })
            .collect()
    }
}

/// Runs `model` on the host with the Cortex-M kernels over a plan: one int8 input, the int8
/// output.
pub fn run_host(q: &QModel, slots: &[Slot], arena_size: usize, input: &[i8]) -> crate::Result<Vec<i8>> {
    let derived = q.derive();
    let layers = q.layers(&derived, slots);
    let model = Model { layers: &layers, arena_size, input: slots[q.input], output: slots[q.output] };
    let mut arena = vec![0i8; arena_size];
    model.input_mut(&mut arena)?.copy_from_slice(input);
    model.invoke(&mut arena)?;
    Ok(model.output(&arena)?.to_vec())
}
