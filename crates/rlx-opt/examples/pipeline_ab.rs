//! A/B of one pipeline switch on the CPU in one process: sibling matmul merging
//! (`stacked_matmul`, `merge`) or per-head values read in place (`head_layout`). The
//! MiniLM-shaped encoder (1 x 128) and a Qwen3-style decoder layer (prefill 128, decode 1),
//! compiled with and without the switch, run alternately, and (merge) a SwiGLU MLP block alone
//! (gate and up combined); prints node counts, kernel steps and medians.
//!
//! `cargo run --release -p rlx-opt --example pipeline_ab [merge|head_layout] [runs] [rounds]`
//! (this was `merge_ab [runs] [rounds]`)

use rlx_driver::Executable;
use rlx_ir::{DType, Graph, OpTraits, Result};
use rlx_opt::{CompileOptions, FusionKind, compile_with, zoo};
use std::time::Instant;

mod common;
use common::prepare;

/// Median ms of `runs` runs (after two warm-up runs, which also pack the weights).
fn median_ms(exe: &mut dyn Executable, inputs: &[Vec<u8>], out: &mut [Vec<u8>], runs: usize) -> Result<f64> {
    let refs: Vec<&[u8]> = inputs.iter().map(|b| b.as_slice()).collect();
    let mut times = vec![];
    for i in 0..runs + 2 {
        let mut outs: Vec<&mut [u8]> = out.iter_mut().map(|b| b.as_mut_slice()).collect();
        let t = Instant::now();
        exe.run(&refs, &mut outs)?;
        if i >= 2 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Nodes that run a kernel (not leaves, not views).
fn steps(g: &Graph) -> usize {
    let plan = rlx_opt::plan(g, &rlx_opt::memory::fused_in_place).map(|p| p.slots);
    let views = plan.map(|s| s.iter().filter(|s| matches!(s.kind, rlx_opt::SlotKind::View(_))).count()).unwrap_or(0);
    g.nodes().iter().filter(|n| !n.op.def().traits().contains(OpTraits::LEAF) && !n.inputs.is_empty()).count() - views
}

/// The pipeline switch under test.
#[derive(Clone, Copy, PartialEq)]
enum Switch {
    Merge,
    HeadLayout,
}

fn ab(g: Graph, switch: Switch, runs: usize, rounds: usize) -> Result<()> {
    let cpu = rlx_cpu::CpuBackend::new();
    let on = CompileOptions::default();
    let off = match switch {
        Switch::Merge => CompileOptions { merge_matmuls: false, ..on.clone() },
        Switch::HeadLayout => CompileOptions { head_layout: false, ..on.clone() },
    };
    let (ga, ra) = compile_with(g.clone(), &cpu, &off)?;
    let (gb, rb) = compile_with(g.clone(), &cpu, &on)?;
    let (mut a, mut b) = (rlx_driver::compile_graph(&cpu, &ga)?, rlx_driver::compile_graph(&cpu, &gb)?);
    let (ia, ib) = (prepare(a.as_mut(), &ga)?, prepare(b.as_mut(), &gb)?);
    let outs = |g: &Graph| -> Vec<Vec<u8>> {
        g.outputs().iter().map(|&o| vec![0u8; g.shape(o).and_then(|s| s.size_bytes()).unwrap_or(0)]).collect()
    };
    let (mut oa, mut ob) = (outs(&ga), outs(&gb));
    let (mut ta, mut tb) = (vec![], vec![]);
    for _ in 0..rounds {
        ta.push(median_ms(a.as_mut(), &ia, &mut oa, runs)?);
        tb.push(median_ms(b.as_mut(), &ib, &mut ob, runs)?);
    }
    ta.sort_by(f64::total_cmp);
    tb.sort_by(f64::total_cmp);
    let diff = oa
        .concat()
        .chunks_exact(4)
        .zip(ob.concat().chunks_exact(4))
        .map(|(x, y)| {
            let f = |c: &[u8]| f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            (f(x) - f(y)).abs()
        })
        .fold(0.0f32, f32::max);
    let (ma, mb) = (ta[rounds / 2], tb[rounds / 2]);
    println!("{}:", g.name());
    println!("  nodes {} -> {}, kernel steps {} -> {}", ga.len(), gb.len(), steps(&ga), steps(&gb));
    println!(
        "  stacked matmuls: {}, combined (SwiGLU): {}; arena {} -> {} bytes",
        rb.fusion.count(FusionKind::StackedMatMul),
        rb.fusion.count(FusionKind::CombinedMatMul),
        ra.memory.arena_bytes,
        rb.memory.arena_bytes
    );
    println!(
        "  cpu median of {rounds} rounds (each a median of {runs} runs): {ma:.3} ms without, {mb:.3} ms with (ratio {:.3}x); max |diff| {diff:.2e}",
        ma / mb
    );
    println!("  rounds without: {ta:.3?}\n  rounds with:    {tb:.3?}");
    Ok(())
}

/// A SwiGLU MLP block alone: `down(silu(x @ gate^T) * (x @ up^T))` on `[s, d]`.
fn swiglu_mlp(s: usize, d: usize, ffn: usize) -> Graph {
    let mut g = Graph::new("swiglu_mlp");
    let x = g.input("x", rlx_ir::Shape::new(&[s, d], DType::F32));
    let gate = zoo::linear(&mut g, x, "gate_proj", d, ffn, false);
    let up = zoo::linear(&mut g, x, "up_proj", d, ffn, false);
    let act = g.silu(gate);
    let m = g.mul(act, up);
    let y = zoo::linear(&mut g, m, "down_proj", ffn, d, false);
    g.set_outputs(vec![y]);
    g
}

fn main() -> Result<()> {
    let switch = match std::env::args().nth(1).as_deref() {
        None | Some("merge") => Switch::Merge,
        Some("head_layout") => Switch::HeadLayout,
        Some(other) => {
            return Err(rlx_ir::Error::eval("pipeline_ab", format!("unknown switch `{other}`: merge or head_layout")));
        }
    };
    let arg = |i: usize, d: usize| std::env::args().nth(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (runs, rounds) = (arg(2, 20), arg(3, 7));
    ab(zoo::bert_encoder(128, 384, 12, 1536, 6), switch, runs, rounds)?;
    ab(zoo::qwen3_decoder(128, 1024, 16, 8, 128, 3072), switch, runs.div_ceil(4), rounds)?;
    ab(zoo::qwen3_decoder(1, 1024, 16, 8, 128, 3072), switch, runs, rounds)?;
    if switch == Switch::Merge {
        ab(swiglu_mlp(128, 1024, 3072), switch, runs.div_ceil(4), rounds)?;
        ab(swiglu_mlp(1, 1024, 3072), switch, runs, rounds)?;
    }
    Ok(())
}
