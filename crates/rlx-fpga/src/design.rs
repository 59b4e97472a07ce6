//! The datapath plan of each layer, derived from the INT8 model that `rlx-cortexm-export` lowers
//! (the same `QModel` the Cortex-M kernels and the rlx INT8 reference run), and a bit-exact Rust
//! model of what the emitted hardware computes.
//!
//! A fully connected layer with `n_in` inputs runs `lanes = ceil(n_in / reuse)` multipliers for
//! `chunks = ceil(n_in / lanes)` cycles per output channel, one output channel after another. Two
//! changes keep the hardware narrow without changing a single result:
//! - the input zero point is folded into the bias (`b' = b + input_offset * sum(w)`), so the
//!   multipliers are 8x8 bits; in wrapping 32-bit arithmetic `sum(w * (x + off)) + b` and
//!   `sum(w * x) + b'` are the same number;
//! - the accumulator is as wide as the largest `|b'| + 128 * sum|w|` of the layer needs (at most
//!   32 bits, where it wraps as the host's `i32` does).

use crate::error::{FpgaError, Result};
use rlx_cortexm::requant::requantize;
use rlx_cortexm_export::qmodel::{QModel, QOp};

/// The ops with a datapath.
pub const SUPPORTED: &str = "fully_connected (with fused ReLU / ReLU6 and per-channel requantization), then argmax";

/// One fully connected layer as a MAC array.
#[derive(Debug, Clone, PartialEq)]
pub struct FcPlan {
    /// Inputs.
    pub inputs: usize,
    /// Outputs (channels).
    pub outputs: usize,
    /// Multipliers working in parallel (`ceil(inputs / reuse)`).
    pub lanes: usize,
    /// Cycles per output channel (`ceil(inputs / lanes)`).
    pub chunks: usize,
    /// Weights `[outputs][chunks * lanes]`, zero-padded past `inputs`.
    pub weights: Vec<i8>,
    /// Biases with the input zero point folded in.
    pub bias: Vec<i32>,
    /// Q31 multiplier per channel.
    pub multiplier: Vec<i32>,
    /// Shift per channel (positive: left).
    pub shift: Vec<i32>,
    /// Output zero point.
    pub out_zero_point: i32,
    /// Activation clamp, low.
    pub act_min: i32,
    /// Activation clamp, high.
    pub act_max: i32,
    /// Signed bits holding every accumulator value (17..=32).
    pub acc_bits: u32,
    /// Signed bits of the accumulator after the requantization's left shift (at most 32).
    pub shifted_bits: u32,
    /// The rlx node the layer came from.
    pub node: String,
}

impl FcPlan {
    /// ROM words (`outputs * chunks`), each `8 * lanes` bits.
    pub fn words(&self) -> usize {
        self.outputs * self.chunks
    }

    /// Cycles from accepting an input to holding the output: one issue per ROM word, then the
    /// pipeline (ROM read, multiply, adder tree, accumulate, requantize multiply, round) drains.
    pub fn cycles(&self) -> usize {
        self.words() + PIPELINE_DEPTH + self.requant_steps().1 - 1
    }

    /// The requantization multiplies by the 32-bit multiplier `bits` bits a cycle over `steps`
    /// cycles (most significant first), as many cycles as a channel's accumulation takes: a
    /// `shifted_bits x bits` multiplier instead of a `shifted_bits x 32` one, the largest block of
    /// the layer otherwise. (bits, steps).
    pub fn requant_steps(&self) -> (usize, usize) {
        let bits = 32usize.div_ceil(self.chunks);
        (bits, 32usize.div_ceil(bits))
    }
}

/// Cycles a layer adds to its ROM words (besides the requantization's extra steps): the
/// acceptance, the five pipeline registers (ROM word, products, lane sum, accumulator,
/// requantization product) and the output register.
pub const PIPELINE_DEPTH: usize = 6;

/// The whole design: fully connected layers in order, then an argmax.
#[derive(Debug, Clone, PartialEq)]
pub struct Design {
    /// Layers.
    pub layers: Vec<FcPlan>,
    /// The reuse factor asked for.
    pub reuse: usize,
}

/// Signed bits holding `-b..=b`.
fn signed_bits(b: u64) -> u32 {
    (64 - b.leading_zeros()) + 1
}

impl Design {
    /// Plans every layer of `q` with reuse factor `reuse`; an op without a datapath is an error
    /// naming it.
    pub fn new(q: &QModel, reuse: usize) -> Result<Design> {
        if reuse == 0 {
            return Err(FpgaError::BadReuse);
        }
        let derived = q.derive();
        let mut layers = vec![];
        for (l, d) in q.layers.iter().zip(&derived) {
            let QOp::FullyConnected { weights, bias, .. } = &l.op else {
                return Err(FpgaError::UnsupportedOp {
                    op: l.op.name().to_string(),
                    node: l.node.clone(),
                    supported: SUPPORTED,
                });
            };
            let (ti, to) = (&q.tensors[l.input], &q.tensors[l.output]);
            let inputs = *ti.dims.last().unwrap_or(&0);
            let outputs = bias.len();
            if ti.len() != inputs || to.len() != outputs {
                // The datapath holds one sample; a batch would need a loop around it.
                return Err(FpgaError::UnsupportedOp {
                    op: format!("fully_connected on a batch of {}", ti.len() / inputs.max(1)),
                    node: l.node.clone(),
                    supported: SUPPORTED,
                });
            }
            let lanes = inputs.div_ceil(reuse).max(1);
            let chunks = inputs.div_ceil(lanes).max(1);
            let off = -ti.zero_point;
            let mut w_pad = vec![0i8; outputs * chunks * lanes];
            let mut folded = vec![0i32; outputs];
            let mut bound = 0u64;
            for o in 0..outputs {
                let row = &weights[o * inputs..(o + 1) * inputs];
                w_pad[o * chunks * lanes..o * chunks * lanes + inputs].copy_from_slice(row);
                let sum: i32 = row.iter().map(|&w| w as i32).sum();
                folded[o] = bias[o].wrapping_add(off.wrapping_mul(sum));
                let abs: u64 = row.iter().map(|&w| (w as i64).unsigned_abs()).sum();
                bound = bound.max((folded[o] as i64).unsigned_abs() + 128 * abs);
            }
            // 17 bits at least: one 8x8 product needs 16, and the lane sums one more.
            let acc_bits = signed_bits(bound).clamp(17, 32);
            let max_left = d.shift.iter().map(|&s| s.max(0) as u32).max().unwrap_or(0);
            layers.push(FcPlan {
                inputs,
                outputs,
                lanes,
                chunks,
                weights: w_pad,
                bias: folded,
                multiplier: d.multiplier.clone(),
                shift: d.shift.clone(),
                out_zero_point: d.out.offset,
                act_min: d.out.act_min,
                act_max: d.out.act_max,
                acc_bits,
                shifted_bits: (acc_bits + max_left).min(32),
                node: l.node.clone(),
            });
        }
        if layers.is_empty() {
            return Err(FpgaError::UnsupportedOp {
                op: "an empty model".into(),
                node: "-".into(),
                supported: SUPPORTED,
            });
        }
        Ok(Design { layers, reuse })
    }

    /// Input bytes.
    pub fn inputs(&self) -> usize {
        self.layers[0].inputs
    }

    /// Output bytes (logits).
    pub fn outputs(&self) -> usize {
        self.layers[self.layers.len() - 1].outputs
    }

    /// Cycles per inference when one input is in flight (the layers one after another), from
    /// the edge that takes the input to the one that hands the output on; the iverilog test
    /// checks this against the testbench's count.
    pub fn cycles(&self) -> usize {
        self.layers.iter().map(|l| l.cycles()).sum()
    }

    /// What the emitted hardware computes for one input, in its own order and widths: the lane
    /// sums of 8x8 products chunk by chunk from the folded bias, wrapped to the accumulator's
    /// width, then the shared requantization.
    pub fn run(&self, input: &[i8]) -> Vec<i8> {
        let mut x: Vec<i8> = input.to_vec();
        for l in &self.layers {
            let mut y = vec![0i8; l.outputs];
            let row = l.chunks * l.lanes;
            for (o, y) in y.iter_mut().enumerate() {
                let mut acc = l.bias[o];
                for c in 0..l.chunks {
                    let mut sum = 0i32;
                    for i in 0..l.lanes {
                        let k = c * l.lanes + i;
                        let xv = if k < l.inputs { x[k] as i32 } else { 0 };
                        sum = sum.wrapping_add(l.weights[o * row + k] as i32 * xv);
                    }
                    acc = wrap(acc.wrapping_add(sum), l.acc_bits);
                }
                let v = requantize(acc, l.multiplier[o], l.shift[o]).wrapping_add(l.out_zero_point);
                *y = v.clamp(l.act_min, l.act_max) as i8;
            }
            x = y;
        }
        x
    }
}

/// `v` wrapped to `bits` signed bits (two's complement), as a register of that width holds it.
fn wrap(v: i32, bits: u32) -> i32 {
    if bits >= 32 { v } else { (v << (32 - bits)) >> (32 - bits) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_bits_cover_the_range() {
        assert_eq!(signed_bits(127), 8);
        assert_eq!(signed_bits(128), 9);
        assert_eq!(signed_bits(16384), 16);
        assert_eq!(wrap(1 << 20, 21), -(1 << 20));
        assert_eq!(wrap(-5, 17), -5);
    }
}
