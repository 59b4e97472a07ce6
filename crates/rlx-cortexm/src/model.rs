//! A model as static data: a table of layers whose tensors live at offsets of one arena that the
//! exporter planned (liveness and first-fit placement), so a run allocates nothing.

use crate::Error;
use crate::kernels::{self, AddParams, ConvParams, DepthwiseParams, FcParams, PoolParams, ReluParams, SoftmaxParams};

/// Where a tensor lives in the arena: `len` int8 values from `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Byte offset in the arena.
    pub offset: usize,
    /// Elements (bytes).
    pub len: usize,
}

impl Slot {
    /// A slot.
    pub const fn new(offset: usize, len: usize) -> Self {
        Slot { offset, len }
    }

    /// The end offset.
    pub const fn end(&self) -> usize {
        self.offset + self.len
    }

    fn overlaps(&self, o: &Slot) -> bool {
        self.len > 0 && o.len > 0 && self.offset < o.end() && o.offset < self.end()
    }
}

/// One layer's kernel and parameters.
#[derive(Debug, Clone, Copy)]
pub enum Op<'a> {
    /// Fully connected.
    FullyConnected(FcParams<'a>),
    /// 2-D convolution.
    Conv2d(ConvParams<'a>),
    /// Depthwise 2-D convolution.
    DepthwiseConv2d(DepthwiseParams<'a>),
    /// Average pooling.
    AvgPool2d(PoolParams),
    /// Max pooling.
    MaxPool2d(PoolParams),
    /// Requantizing ReLU.
    Relu(ReluParams),
    /// ReLU6 as a clamp to `[zero, six]`.
    Relu6 {
        /// The zero point.
        zero: i8,
        /// The code of 6.0.
        six: i8,
    },
    /// Add of the two inputs.
    Add(AddParams),
    /// Softmax.
    Softmax(SoftmaxParams),
    /// A copy (a reshape the plan could not alias).
    Copy,
}

impl Op<'_> {
    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        match self {
            Op::FullyConnected(_) => "fully_connected",
            Op::Conv2d(_) => "conv2d",
            Op::DepthwiseConv2d(_) => "depthwise_conv2d",
            Op::AvgPool2d(_) => "avg_pool2d",
            Op::MaxPool2d(_) => "max_pool2d",
            Op::Relu(_) => "relu",
            Op::Relu6 { .. } => "relu6",
            Op::Add(_) => "add",
            Op::Softmax(_) => "softmax",
            Op::Copy => "copy",
        }
    }
}

/// A layer: its op, its inputs (the second is used by `Add` only) and its output.
#[derive(Debug, Clone, Copy)]
pub struct Layer<'a> {
    /// The kernel.
    pub op: Op<'a>,
    /// Input slots.
    pub inputs: [Slot; 2],
    /// Output slot; never overlaps an input of the same layer.
    pub output: Slot,
}

/// A planned model.
#[derive(Debug, Clone, Copy)]
pub struct Model<'a> {
    /// Layers in execution order.
    pub layers: &'a [Layer<'a>],
    /// Arena bytes the plan needs.
    pub arena_size: usize,
    /// The model input.
    pub input: Slot,
    /// The model output.
    pub output: Slot,
}

fn check_slot(s: Slot, arena: usize) -> Result<(), Error> {
    if s.end() <= arena { Ok(()) } else { Err(Error::Arena { need: s.end(), got: arena }) }
}

impl<'a> Model<'a> {
    /// The input tensor in `arena`, to be filled before [`Model::invoke`].
    pub fn input_mut<'b>(&self, arena: &'b mut [i8]) -> Result<&'b mut [i8], Error> {
        check_slot(self.input, arena.len())?;
        Ok(&mut arena[self.input.offset..self.input.end()])
    }

    /// The output tensor in `arena`, valid after [`Model::invoke`].
    pub fn output<'b>(&self, arena: &'b [i8]) -> Result<&'b [i8], Error> {
        check_slot(self.output, arena.len())?;
        Ok(&arena[self.output.offset..self.output.end()])
    }

    /// Runs every layer over `arena` (at least `arena_size` bytes), input and output in place.
    pub fn invoke(&self, arena: &mut [i8]) -> Result<(), Error> {
        if arena.len() < self.arena_size {
            return Err(Error::Arena { need: self.arena_size, got: arena.len() });
        }
        for layer in self.layers {
            run_layer(layer, arena)?;
        }
        Ok(())
    }
}

/// The argmax of an int8 tensor (the first of equal maxima, like numpy's).
pub fn argmax(x: &[i8]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

fn run_layer(layer: &Layer, arena: &mut [i8]) -> Result<(), Error> {
    let [a, b] = layer.inputs;
    let out = layer.output;
    for s in [a, b, out] {
        check_slot(s, arena.len())?;
    }
    if out.overlaps(&a) || (matches!(layer.op, Op::Add(_)) && out.overlaps(&b)) {
        return Err(Error::Param { op: layer.op.name(), what: "the output slot overlaps an input" });
    }
    let base = arena.as_mut_ptr();
    // SAFETY: all three slots are inside `arena` (checked above) and the output is disjoint from
    // the inputs, so the shared input slices never alias the mutable output slice; the inputs
    // may alias each other, which shared borrows allow. All three live no longer than `arena`.
    let (x, x2, y) = unsafe {
        (
            core::slice::from_raw_parts(base.add(a.offset) as *const i8, a.len),
            core::slice::from_raw_parts(base.add(b.offset) as *const i8, b.len),
            core::slice::from_raw_parts_mut(base.add(out.offset), out.len),
        )
    };
    match &layer.op {
        Op::FullyConnected(p) => kernels::fully_connected(p, x, y),
        Op::Conv2d(p) => kernels::conv2d(p, x, y),
        Op::DepthwiseConv2d(p) => kernels::depthwise_conv2d(p, x, y),
        Op::AvgPool2d(p) => kernels::avg_pool2d(p, x, y),
        Op::MaxPool2d(p) => kernels::max_pool2d(p, x, y),
        Op::Relu(p) => kernels::relu(p, x, y),
        Op::Relu6 { zero, six } => kernels::relu6(*zero, *six, x, y),
        Op::Add(p) => kernels::add(p, x, x2, y),
        Op::Softmax(p) => kernels::softmax(p, x, y),
        Op::Copy => {
            if x.len() != y.len() {
                return Err(Error::Shape { op: "copy", what: "output", expected: x.len(), got: y.len() });
            }
            y.copy_from_slice(x);
            Ok(())
        }
    }
}
