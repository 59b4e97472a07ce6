//! The `rlx` command line. Today: `inspect` a graph in the text form and list `ops`; train,
//! generate, embed and bench arrive with their issues.

use clap::{Parser, Subcommand};
use rlx::ir::{Graph, Op, OpDef};
use rlx::prelude::*;
use std::collections::BTreeMap;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "rlx", version, about = "RLX: a machine-learning compiler and runtime")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Parse and verify a graph in the text form; print its types and the CPU dispatch report.
    Inspect {
        /// A graph file in the RLX text form.
        file: std::path::PathBuf,
    },
    /// List every op with its traits and number of conformance samples.
    Ops,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Inspect { file } => inspect(&file),
        Cmd::Ops => {
            ops();
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn inspect(file: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let g = Graph::from_text(&text)?;
    println!("graph `{}`: {} nodes", g.name(), g.len());
    for (id, name) in g.inputs() {
        println!("  input  {name}: {}", g.shape(id).map(|s| s.to_string()).unwrap_or_default());
    }
    for (id, name) in g.params() {
        println!("  param  {name}: {}", g.shape(id).map(|s| s.to_string()).unwrap_or_default());
    }
    for (i, &o) in g.outputs().iter().enumerate() {
        println!("  output {i}: {}", g.shape(o).map(|s| s.to_string()).unwrap_or_default());
    }
    print!("{}", Session::new(Device::Cpu).dispatch_report(&g)?);
    Ok(())
}

fn ops() {
    let mut by_name: BTreeMap<String, (String, usize)> = BTreeMap::new();
    for s in Op::all_samples() {
        let def: &dyn OpDef = s.op.def();
        let e = by_name.entry(def.name().to_string()).or_insert_with(|| (format!("{:?}", def.traits()), 0));
        e.1 += 1;
    }
    println!("{:<14} {:>7}  traits", "op", "samples");
    for (name, (traits, n)) in &by_name {
        println!("{name:<14} {n:>7}  {traits}");
    }
    println!("{} ops with samples", by_name.len());
}
