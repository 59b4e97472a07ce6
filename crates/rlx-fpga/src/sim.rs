//! Runs an exported design's testbench in iverilog or verilator, when installed, and reads what
//! it printed.

use crate::bench::{ACCURACY, AGREEMENT, CYCLES, read_number, read_ratio};
use crate::{SOURCES_FILE, TESTBENCH_FILE};
use std::path::Path;
use std::process::Command;

/// What a simulation printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimResult {
    /// Samples whose logits equal the host INT8 run.
    pub agree: usize,
    /// Samples whose class equals the label.
    pub correct: usize,
    /// Samples.
    pub samples: usize,
    /// Cycles per inference (the last sample's).
    pub cycles: usize,
}

/// Whether `tool` runs (`tool --version` or `-V`).
pub fn has_tool(tool: &str) -> bool {
    ["--version", "-V"].iter().any(|a| Command::new(tool).arg(a).output().map(|o| o.status.success()).unwrap_or(false))
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("{cmd:?} failed:\n{text}"));
    }
    Ok(text)
}

/// Reads a testbench's log.
pub fn parse(log: &str) -> Result<SimResult, String> {
    let (agree, samples) = read_ratio(log, AGREEMENT).ok_or_else(|| format!("no agreement line in:\n{log}"))?;
    let (correct, _) = read_ratio(log, ACCURACY).ok_or_else(|| format!("no accuracy line in:\n{log}"))?;
    let cycles = read_number(log, CYCLES).ok_or_else(|| format!("no cycles line in:\n{log}"))?;
    Ok(SimResult { agree, correct, samples, cycles })
}

/// `iverilog -g2012` then `vvp` in `dir` (the `$readmemh` files are read from there).
pub fn iverilog(dir: &Path) -> Result<SimResult, String> {
    run(Command::new("iverilog").current_dir(dir).args([
        "-g2012",
        "-o",
        "tb.vvp",
        "-c",
        SOURCES_FILE,
        TESTBENCH_FILE,
    ]))?;
    parse(&run(Command::new("vvp").current_dir(dir).args(["-n", "tb.vvp"]))?)
}

/// `verilator --lint-only -Wall` on the design (not the testbench): the warnings, or empty.
pub fn verilator_lint(dir: &Path) -> Result<String, String> {
    run(Command::new("verilator").current_dir(dir).args([
        "--lint-only",
        "-Wall",
        "--top-module",
        "rlx_board",
        "-f",
        SOURCES_FILE,
    ]))
}

/// `verilator --binary` on the testbench and the design, then the binary, in `dir`.
pub fn verilator(dir: &Path) -> Result<SimResult, String> {
    run(Command::new("verilator").current_dir(dir).args([
        "--binary",
        "-j",
        "2",
        "--top-module",
        "tb",
        "-Mdir",
        "obj_dir",
        "-f",
        SOURCES_FILE,
        TESTBENCH_FILE,
    ]))?;
    parse(&run(Command::new("./obj_dir/Vtb").current_dir(dir))?)
}
