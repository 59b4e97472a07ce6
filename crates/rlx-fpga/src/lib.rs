//! `rlx export fpga`: an INT8 rlx graph becomes synthesizable SystemVerilog.
//!
//! The graph is lowered by `rlx-cortexm-export` (the same QAT checkpoint, the same `QModel`, the
//! same requantization parameters as `rlx export cortexm`), so the hardware is checked against
//! the one host INT8 reference both exports share. Each fully connected layer becomes a MAC
//! array of `ceil(n_in / reuse)` 8x8 multipliers with its weights in a ROM (`$readmemh`), an
//! accumulator that starts at the bias, TFLite Micro's requantization with saturation, and
//! valid/ready handshakes to its neighbours; an argmax gives the class ([`design`], [`emit`]).
//! With a test set the export also writes a testbench and its vectors ([`bench`]), and
//! [`sim`] runs them in iverilog or verilator when those are installed.

#![warn(missing_docs)]

pub mod bench;
pub mod design;
pub mod device;
pub mod emit;
pub mod error;
pub mod sim;

pub use design::Design;
pub use device::{Device, Estimate};
pub use error::{FpgaError, Result};

use rlx_cortexm_export::{ExportOptions, TestSet, check_host, load_checkpoint, prepare, quantize_input};
use std::path::{Path, PathBuf};

/// The file listing the design's sources (one `rlx_*.sv` per module), for `iverilog -c`,
/// `verilator -f` and scripts.
pub const SOURCES_FILE: &str = "sources.f";
/// The testbench file.
pub const TESTBENCH_FILE: &str = "tb.sv";

/// What the export may use and write.
#[derive(Debug, Clone)]
pub struct FpgaOptions {
    /// Multiplications per multiplier per output channel (1: one multiplier per input).
    pub reuse: usize,
    /// The device the design must fit.
    pub device: Device,
    /// A test set to write as testbench vectors, with the host INT8 reference's outputs.
    pub testset: Option<TestSet>,
}

impl Default for FpgaOptions {
    fn default() -> Self {
        FpgaOptions { reuse: 4, device: Device::Hx8k, testset: None }
    }
}

/// The host check of a test set.
#[derive(Debug, Clone, PartialEq)]
pub struct HostCheck {
    /// Samples.
    pub samples: usize,
    /// Samples on which the Rust model of the datapath ([`Design::run`]) and the Cortex-M kernels
    /// both equal the rlx INT8 reference in every byte.
    pub identical: usize,
    /// The reference's accuracy against the labels, percent.
    pub accuracy: f64,
}

/// What an export produced.
#[derive(Debug, Clone)]
pub struct Report {
    /// The planned datapath.
    pub design: Design,
    /// Its estimated size.
    pub estimate: Estimate,
    /// Files written.
    pub files: Vec<PathBuf>,
    /// The test set check, when one was asked for.
    pub host_check: Option<HostCheck>,
}

fn write(path: PathBuf, text: &str, files: &mut Vec<PathBuf>) -> Result<()> {
    std::fs::write(&path, text).map_err(|e| FpgaError::Io { path: path.display().to_string(), source: e })?;
    files.push(path);
    Ok(())
}

/// Exports the checkpoint at `ckpt` into `out_dir`: `rlx_top.sv` and the ROM files, and with a
/// test set `tb.sv` and its vectors.
pub fn export(ckpt: &Path, out_dir: &Path, opts: &FpgaOptions) -> Result<Report> {
    let (g, params) = load_checkpoint(ckpt)?;
    let (q, plan, _) = prepare(&g, &params, &ExportOptions::default())?;
    let design = Design::new(&q, opts.reuse)?;
    let estimate = device::check_fit(&design, opts.device)?;
    std::fs::create_dir_all(out_dir).map_err(|e| FpgaError::Io { path: out_dir.display().to_string(), source: e })?;
    let mut files = vec![];
    let origin = ckpt.file_name().map(|f| f.to_string_lossy().to_string()).unwrap_or_default();
    let sources = emit::design_sources(&design, &origin);
    let list: String = sources.iter().map(|(n, _)| format!("{n}\n")).collect();
    for (name, text) in sources {
        write(out_dir.join(name), &text, &mut files)?;
    }
    write(out_dir.join(SOURCES_FILE), &list, &mut files)?;
    for (k, l) in design.layers.iter().enumerate() {
        for (name, text) in emit::rom_files(k, l) {
            write(out_dir.join(name), &text, &mut files)?;
        }
    }
    let mut host_check = None;
    if let Some(TestSet::Digits) = opts.testset {
        let (_, _, xte, yte) = rlx_nn::data::digits(0, 0.2);
        let per = q.tensors[q.input].len();
        let inputs: Vec<Vec<i8>> = xte.chunks(per).map(|x| quantize_input(&q, x)).collect();
        // The reference's outputs; `same` counts the Cortex-M kernels agreeing with it.
        let (want, _) = check_host(&q, &plan, &inputs)?;
        let mut identical = 0;
        for (x, w) in inputs.iter().zip(&want) {
            if &design.run(x) == w && &rlx_cortexm_export::qmodel::run_host(&q, &plan.slots, plan.arena_size, x)? == w {
                identical += 1;
            }
        }
        let labels: Vec<u8> = yte.iter().map(|&y| y as u8).collect();
        let hits = want.iter().zip(&labels).filter(|(o, l)| rlx_cortexm_export::argmax(o) == **l as usize).count();
        host_check =
            Some(HostCheck { samples: labels.len(), identical, accuracy: 100.0 * hits as f64 / labels.len() as f64 });
        write(out_dir.join(TESTBENCH_FILE), &bench::testbench(&design, inputs.len()), &mut files)?;
        for (name, text) in bench::vectors(&inputs, &want, &labels) {
            write(out_dir.join(name), &text, &mut files)?;
        }
    }
    Ok(Report { design, estimate, files, host_check })
}
