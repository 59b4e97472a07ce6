//! `rlx export cortexm`: a QAT-trained, quantized checkpoint to static data and a planned arena
//! for the `rlx-cortexm` kernels (see crates/rlx-cortexm-export); `rlx export fpga`: the same
//! INT8 model as SystemVerilog (see crates/rlx-fpga).

use rlx_cortexm_export::{ExportOptions, TestSet};
use std::io::Write;
use std::path::PathBuf;

/// `rlx export TARGET ...`.
#[derive(clap::Args)]
pub struct ExportArgs {
    #[command(subcommand)]
    target: Target,
}

#[derive(clap::Subcommand)]
enum Target {
    /// ARM Cortex-M (rlx-cortexm, int8): writes model.rs (const arrays, layer table, arena size)
    /// and prints the arena and flash sizes.
    Cortexm(CortexmArgs),
    /// FPGA (rlx-fpga, int8): writes rlx_top.sv (a MAC array per layer, weight ROMs, valid/ready
    /// handshakes) and the ROM files; with --testset a testbench and its vectors.
    Fpga(FpgaArgs),
}

#[derive(clap::Args)]
struct FpgaArgs {
    /// A checkpoint holding a quantized graph (e.g. data/cortexm/digits_mlp_qat.safetensors).
    #[arg(long)]
    model: PathBuf,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Reuse factor: each multiplier does this many multiplications per output channel, so a
    /// layer with N inputs has ceil(N / reuse) multipliers.
    #[arg(long, default_value_t = 4)]
    reuse: usize,
    /// The FPGA the design must fit: hx8k, up5k or any (`--device` is rlx's compute device).
    #[arg(long, default_value = "hx8k", value_parser = ["hx8k", "up5k", "any"])]
    part: String,
    /// Also write tb.sv and its vectors: the bundled digits test split with the host INT8
    /// reference's outputs.
    #[arg(long, value_parser = ["digits"])]
    testset: Option<String>,
}

#[derive(clap::Args)]
struct CortexmArgs {
    /// A checkpoint holding a quantized graph (e.g. data/cortexm/digits_mlp_qat.safetensors).
    #[arg(long)]
    model: PathBuf,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Fail if the model's constant data exceeds this (bytes; K and M suffixes are KiB, MiB).
    #[arg(long, value_parser = bytes)]
    flash_budget: Option<usize>,
    /// Fail if the arena exceeds this (bytes; K and M suffixes are KiB, MiB).
    #[arg(long, value_parser = bytes)]
    ram_budget: Option<usize>,
    /// Also write testset.rs: the bundled digits test split, quantized, with the host INT8
    /// reference's predictions (and check the kernels against that reference on it).
    #[arg(long, value_parser = ["digits"])]
    testset: Option<String>,
}

fn bytes(s: &str) -> Result<usize, String> {
    let (num, mult) = match s.trim().to_ascii_uppercase() {
        t if t.ends_with('K') => (t[..t.len() - 1].to_string(), 1024),
        t if t.ends_with('M') => (t[..t.len() - 1].to_string(), 1024 * 1024),
        t => (t, 1),
    };
    num.parse::<usize>().map(|n| n * mult).map_err(|e| format!("`{s}`: {e}"))
}

/// Runs the export and prints what it made.
pub fn export(out: &mut impl Write, args: &ExportArgs) -> Result<(), Box<dyn std::error::Error>> {
    let a = match &args.target {
        Target::Cortexm(a) => a,
        Target::Fpga(f) => return export_fpga(out, f),
    };
    let opts = ExportOptions {
        flash_budget: a.flash_budget,
        ram_budget: a.ram_budget,
        testset: a.testset.as_deref().map(|_| TestSet::Digits),
    };
    let r = rlx_cortexm_export::export(&a.model, &a.out, &opts)?;
    let q = &r.model;
    writeln!(out, "cortexm: {} layers", q.layers.len())?;
    for l in &q.layers {
        let (i, o) = (&q.tensors[l.input], &q.tensors[l.output]);
        let (si, so) = (r.plan.slots[l.input], r.plan.slots[l.output]);
        writeln!(
            out,
            "  {:<17} {:?} @{} -> {:?} @{}  (rlx node {})",
            l.op.name(),
            i.dims,
            si.offset,
            o.dims,
            so.offset,
            l.node
        )?;
    }
    writeln!(out, "MACs per inference: {}", q.macs())?;
    writeln!(out, "arena (RAM): {} bytes (one slot per tensor would take {})", r.plan.arena_size, r.plan.naive_size)?;
    writeln!(out, "model data (flash): {} bytes (weights, biases, multipliers, shifts)", r.flash_bytes)?;
    if let Some(c) = &r.host_check {
        writeln!(
            out,
            "host check: {}/{} samples bit-identical (Cortex-M kernels on the host vs the rlx INT8 reference); reference accuracy {:.2}%",
            c.bit_identical, c.samples, c.accuracy
        )?;
        if c.bit_identical != c.samples {
            return Err(format!("{} samples differ from the INT8 reference", c.samples - c.bit_identical).into());
        }
    }
    for f in &r.files {
        writeln!(out, "wrote {}", f.display())?;
    }
    Ok(())
}

fn export_fpga(out: &mut impl Write, a: &FpgaArgs) -> Result<(), Box<dyn std::error::Error>> {
    let opts = rlx_fpga::FpgaOptions {
        reuse: a.reuse,
        device: rlx_fpga::Device::parse(&a.part).ok_or("unknown device")?,
        testset: a.testset.as_deref().map(|_| TestSet::Digits),
    };
    let r = rlx_fpga::export(&a.model, &a.out, &opts)?;
    writeln!(out, "fpga: {} layers, reuse {}", r.design.layers.len(), r.design.reuse)?;
    for (k, l) in r.design.layers.iter().enumerate() {
        writeln!(
            out,
            "  layer{k}: fully_connected {} -> {}: {} multipliers x {} cycles per channel, {}-bit accumulator (rlx node {})",
            l.inputs, l.outputs, l.lanes, l.chunks, l.acc_bits, l.node
        )?;
    }
    writeln!(out, "cycles per inference: {}", r.design.cycles())?;
    writeln!(
        out,
        "estimate for the {}: about {} LUTs, {} BRAM blocks",
        opts.device.name(),
        r.estimate.luts,
        r.estimate.brams
    )?;
    if let Some(c) = &r.host_check {
        writeln!(
            out,
            "host check: {}/{} samples bit-identical (datapath model and Cortex-M kernels vs the rlx INT8 reference); reference accuracy {:.2}%",
            c.identical, c.samples, c.accuracy
        )?;
        if c.identical != c.samples {
            return Err(format!("{} samples differ from the INT8 reference", c.samples - c.identical).into());
        }
    }
    for f in &r.files {
        writeln!(out, "wrote {}", f.display())?;
    }
    Ok(())
}
