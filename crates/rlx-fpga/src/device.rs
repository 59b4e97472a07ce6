//! Target devices and a resource estimate, so a design that cannot fit is refused at export
//! with the resource named, before minutes of synthesis. The estimate is coarse (fitted to
//! yosys `synth_ice40` on the digits MLP, see BENCHMARKS.md); the synthesis report is the truth.

use crate::design::{Design, FcPlan};
use crate::error::{FpgaError, Result};

/// An FPGA to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// Lattice iCE40 HX8K (CT256): 7,680 LUTs, 32 block RAMs of 4 Kbit, no DSP.
    Hx8k,
    /// Lattice iCE40 UP5K (SG48): 5,280 LUTs, 30 block RAMs of 4 Kbit, 8 DSPs (unused here).
    Up5k,
    /// No limit (to synthesize a design for its numbers alone).
    Any,
}

impl Device {
    /// The name `rlx export fpga --part` takes.
    pub fn name(self) -> &'static str {
        match self {
            Device::Hx8k => "iCE40 HX8K",
            Device::Up5k => "iCE40 UP5K",
            Device::Any => "any device",
        }
    }

    /// Parses `hx8k`, `up5k` or `any`.
    pub fn parse(s: &str) -> Option<Device> {
        match s.to_ascii_lowercase().as_str() {
            "hx8k" => Some(Device::Hx8k),
            "up5k" => Some(Device::Up5k),
            "any" => Some(Device::Any),
            _ => None,
        }
    }

    /// (LUTs, block RAMs).
    pub fn capacity(self) -> (usize, usize) {
        match self {
            Device::Hx8k => (7680, 32),
            Device::Up5k => (5280, 30),
            Device::Any => (usize::MAX, usize::MAX),
        }
    }
}

/// Estimated use of a design.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// 4-input LUTs.
    pub luts: usize,
    /// 4 Kbit block RAMs.
    pub brams: usize,
}

/// Block RAMs for a ROM of `depth` words of `width` bits: the best of the iCE40 RAM's shapes
/// (256x16, 512x8, 1024x4, 2048x2).
pub fn rom_brams(width: usize, depth: usize) -> usize {
    [(16, 256), (8, 512), (4, 1024), (2, 2048)]
        .iter()
        .map(|&(w, d)| width.div_ceil(w) * depth.div_ceil(d))
        .min()
        .unwrap_or(0)
}

/// LUTs of one layer: per lane an 8x8 multiplier, its share of the adder tree and of the
/// input-chunk mux; the requantization's `shifted_bits x k` multiplier; and the rest (the
/// channel ROMs in logic, the shifts and rounding, the output register's decoder, control).
/// Fitted to yosys `synth_ice40` on the digits MLP: reuse 16 took 4,455 LUTs (estimate 4,456)
/// and reuse 4 10,304 (estimate 10,504).
fn layer_luts(l: &FcPlan) -> usize {
    const PER_LANE: usize = 230;
    const REST: usize = 1220;
    let (bits, _) = l.requant_steps();
    l.lanes * PER_LANE + l.shifted_bits as usize * bits * 2 + REST
}

/// The estimate for `d`.
pub fn estimate(d: &Design) -> Estimate {
    Estimate {
        luts: d.layers.iter().map(layer_luts).sum(),
        brams: d.layers.iter().map(|l| rom_brams(8 * l.lanes, l.words())).sum(),
    }
}

/// Refuses a design whose estimate exceeds `device`.
pub fn check_fit(d: &Design, device: Device) -> Result<Estimate> {
    let e = estimate(d);
    let (luts, brams) = device.capacity();
    if e.brams > brams {
        return Err(FpgaError::DoesNotFit {
            resource: "BRAM blocks",
            device: device.name(),
            need: e.brams,
            have: brams,
        });
    }
    if e.luts > luts {
        return Err(FpgaError::DoesNotFit { resource: "LUTs", device: device.name(), need: e.luts, have: luts });
    }
    Ok(e)
}
