//! `rlx export cortexm`: a QAT-trained, quantized rlx graph (a checkpoint whose metadata holds the
//! inference graph's text) becomes static data for `rlx-cortexm`: int8 weights, int32 biases,
//! per-channel multipliers and shifts, a layer table and a planned static arena, written as Rust
//! source (`model.rs`) for a firmware to `include!`.
//!
//! The same model also becomes an rlx graph in exact integer arithmetic ([`reference`]), run by
//! rlx's reference interpreter: the export checks the Cortex-M kernels (run on the host) against
//! it bit for bit, and with a test set writes its predictions next to the model so a firmware can
//! count how many of its own equal them.

#![warn(missing_docs)]

pub mod codegen;
pub mod digits;
pub mod error;
pub mod lower;
pub mod plan;
pub mod qmodel;
pub mod reference;

pub use error::{ExportError, Result};

use qmodel::QModel;
use rlx_ir::{Graph, HostTensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The checkpoint metadata key holding the inference graph's text.
pub const GRAPH_KEY: &str = "rlx.graph";

/// A test set to write with the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestSet {
    /// The bundled digits test split (`rlx_nn::data::digits(0, 0.2)`, 359 images of 8x8).
    Digits,
}

/// What the export may use and write.
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// Flash bytes the model's constant data may take.
    pub flash_budget: Option<usize>,
    /// RAM bytes the arena may take.
    pub ram_budget: Option<usize>,
    /// A test set to quantize and write as `testset.rs`, with the host reference's predictions.
    pub testset: Option<TestSet>,
}

/// The host check of a test set.
#[derive(Debug, Clone, PartialEq)]
pub struct HostCheck {
    /// Samples.
    pub samples: usize,
    /// Samples whose Cortex-M kernel output (run on the host) equals the rlx INT8 reference's, all bytes.
    pub bit_identical: usize,
    /// Accuracy of the reference's argmax against the labels, percent.
    pub accuracy: f64,
}

/// What an export produced.
#[derive(Debug, Clone)]
pub struct Report {
    /// The quantized model.
    pub model: QModel,
    /// The arena plan.
    pub plan: plan::Plan,
    /// Bytes of constant model data (weights, biases, multipliers, shifts).
    pub flash_bytes: usize,
    /// Files written.
    pub files: Vec<PathBuf>,
    /// The test set check, when one was asked for.
    pub host_check: Option<HostCheck>,
}

fn ckpt_err(path: &Path, reason: impl Into<String>) -> ExportError {
    ExportError::Checkpoint { path: path.display().to_string(), reason: reason.into() }
}

/// Reads a checkpoint: the graph from its metadata and its tensors by name.
pub fn load_checkpoint(path: &Path) -> Result<(Graph, HashMap<String, HostTensor>)> {
    let (store, meta) = rlx_nn::checkpoint::load(path)?;
    let text = meta.get(GRAPH_KEY).ok_or_else(|| {
        ckpt_err(path, format!("no `{GRAPH_KEY}` metadata: not a quantized graph saved for export (see rlx_cortexm_export::digits::save)"))
    })?;
    let g = Graph::from_text(text)?;
    let params = store.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
    Ok((g, params))
}

/// Lowers a graph with its params, plans it and checks the budgets.
pub fn prepare(
    g: &Graph,
    params: &HashMap<String, HostTensor>,
    opts: &ExportOptions,
) -> Result<(QModel, plan::Plan, usize)> {
    let q = lower::lower(g, params)?;
    let plan = plan::plan(&q);
    let flash = q.weight_bytes();
    if let Some(b) = opts.flash_budget.filter(|&b| flash > b) {
        return Err(ExportError::OverBudget { what: "flash", need: flash, budget: b });
    }
    if let Some(b) = opts.ram_budget.filter(|&b| plan.arena_size > b) {
        return Err(ExportError::OverBudget { what: "RAM", need: plan.arena_size, budget: b });
    }
    Ok((q, plan, flash))
}

/// Quantizes float inputs with the model input's scale and zero point (round half away from
/// zero, clamp to int8), as TFLite's `Quantize` does.
pub fn quantize_input(q: &QModel, x: &[f32]) -> Vec<i8> {
    let t = &q.tensors[q.input];
    x.iter()
        .map(|&v| ((v as f64 / t.scale as f64).round() as i64 + t.zero_point as i64).clamp(-128, 127) as i8)
        .collect()
}

/// The index of the largest value (the first of equal ones).
pub fn argmax(x: &[i8]) -> usize {
    rlx_cortexm::model::argmax(x)
}

/// Runs the Cortex-M kernels (on the host) and the rlx INT8 reference on `inputs`: the
/// reference's outputs, and how many samples agree in every byte.
pub fn check_host(q: &QModel, plan: &plan::Plan, inputs: &[Vec<i8>]) -> Result<(Vec<Vec<i8>>, usize)> {
    let want = reference::run(q, inputs)?;
    let mut same = 0;
    for (x, w) in inputs.iter().zip(&want) {
        if &qmodel::run_host(q, &plan.slots, plan.arena_size, x)? == w {
            same += 1;
        }
    }
    Ok((want, same))
}

fn write(path: PathBuf, text: &str, files: &mut Vec<PathBuf>) -> Result<()> {
    std::fs::write(&path, text).map_err(|e| ExportError::Io { path: path.display().to_string(), source: e })?;
    files.push(path);
    Ok(())
}

/// Exports the checkpoint at `ckpt` into `out_dir` (`model.rs`, and `testset.rs` with a test set).
pub fn export(ckpt: &Path, out_dir: &Path, opts: &ExportOptions) -> Result<Report> {
    let (g, params) = load_checkpoint(ckpt)?;
    let (q, plan, flash_bytes) = prepare(&g, &params, opts)?;
    std::fs::create_dir_all(out_dir).map_err(|e| ExportError::Io { path: out_dir.display().to_string(), source: e })?;
    let mut files = vec![];
    let origin = ckpt.file_name().map(|f| f.to_string_lossy().to_string()).unwrap_or_default();
    write(out_dir.join("model.rs"), &codegen::model_source(&q, &plan, &origin), &mut files)?;
    let mut host_check = None;
    if let Some(TestSet::Digits) = opts.testset {
        let (_, _, xte, yte) = rlx_nn::data::digits(0, 0.2);
        let per = q.tensors[q.input].len();
        let inputs: Vec<Vec<i8>> = xte.chunks(per).map(|x| quantize_input(&q, x)).collect();
        let (want, bit_identical) = check_host(&q, &plan, &inputs)?;
        let preds: Vec<u8> = want.iter().map(|o| argmax(o) as u8).collect();
        let labels: Vec<u8> = yte.iter().map(|&y| y as u8).collect();
        let hits = preds.iter().zip(&labels).filter(|(p, l)| p == l).count();
        host_check = Some(HostCheck {
            samples: labels.len(),
            bit_identical,
            accuracy: 100.0 * hits as f64 / labels.len() as f64,
        });
        let src = codegen::testset_source(&inputs, &labels, &preds, "digits test split, seed 0, 20%");
        write(out_dir.join("testset.rs"), &src, &mut files)?;
    }
    Ok(Report { model: q, plan, flash_bytes, files, host_check })
}
