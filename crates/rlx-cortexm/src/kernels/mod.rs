//! The INT8 kernels, NHWC / row-major like TFLite Micro's reference kernels, whose loops (and so
//! results) they follow: every accumulator is exact int32 arithmetic, then [`requantize`].
//!
//! [`requantize`]: crate::requant::requantize

mod conv;
mod elementwise;
mod pool;
pub(crate) mod softmax;

pub use conv::{ConvParams, DepthwiseParams, FcParams, conv2d, depthwise_conv2d, fully_connected};
pub use elementwise::{AddParams, ReluParams, add, relu, relu6};
pub use pool::{PoolParams, avg_pool2d, max_pool2d};
pub use softmax::{SoftmaxParams, softmax};

use crate::Error;

/// Output quantization shared by the requantizing kernels: the output zero point and the
/// clamp of the fused activation (`-128..=127` for none, `zp..=127` for ReLU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutQuant {
    /// The output zero point, added after requantization.
    pub offset: i32,
    /// The smallest output value.
    pub act_min: i32,
    /// The largest output value.
    pub act_max: i32,
}

impl OutQuant {
    /// No fused activation: the whole int8 range.
    pub const fn none(offset: i32) -> Self {
        OutQuant { offset, act_min: -128, act_max: 127 }
    }

    #[inline(always)]
    fn finish(&self, v: i32) -> i8 {
        (v + self.offset).clamp(self.act_min, self.act_max) as i8
    }
}

/// An NHWC shape `[batch, height, width, channels]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nhwc {
    /// Batch.
    pub n: usize,
    /// Height.
    pub h: usize,
    /// Width.
    pub w: usize,
    /// Channels.
    pub c: usize,
}

impl Nhwc {
    /// A shape.
    pub const fn new(n: usize, h: usize, w: usize, c: usize) -> Self {
        Nhwc { n, h, w, c }
    }

    /// Elements.
    pub const fn len(&self) -> usize {
        self.n * self.h * self.w * self.c
    }

    /// Whether the shape holds no element.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline(always)]
    fn at(&self, n: usize, y: usize, x: usize, c: usize) -> usize {
        ((n * self.h + y) * self.w + x) * self.c + c
    }
}

/// A 2-D window: kernel, stride, dilation and the padding before the first row / column (TFLite's
/// SAME padding puts any odd extra after; the output size is part of the output shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Kernel height and width.
    pub kernel: [usize; 2],
    /// Stride along height and width.
    pub stride: [usize; 2],
    /// Dilation along height and width (1: dense).
    pub dilation: [usize; 2],
    /// Padding before the first row and column.
    pub pad: [usize; 2],
}

/// Checks per-channel requantization parameters against `channels` output channels.
pub(crate) fn check_requant(op: &'static str, r: &crate::requant::Requant, channels: usize) -> Result<(), Error> {
    if !r.fits(channels) {
        return Err(Error::Shape { op, what: "requant", expected: channels, got: r.channels() });
    }
    if !r.in_range() {
        return Err(Error::Param { op, what: "a requantization shift outside -31..=30 or a negative multiplier" });
    }
    Ok(())
}

pub(crate) fn check_len(op: &'static str, what: &'static str, expected: usize, got: usize) -> Result<(), Error> {
    if expected == got { Ok(()) } else { Err(Error::Shape { op, what, expected, got }) }
}

/// The input row / column a window tap reads, or None in the padding.
#[inline(always)]
fn tap(out: usize, k: usize, stride: usize, dilation: usize, pad: usize, size: usize) -> Option<usize> {
    let p = (out * stride + k * dilation).checked_sub(pad)?;
    (p < size).then_some(p)
}
