//! CPU wall time of a MiniLM-L6-shaped encoder (6 layers, d 384, 12 heads, ffn 1536, 1 x 128
//! tokens) and a Qwen3-style decoder layer, compiled with and without the optimizer, side by
//! side in one run. Prints node counts, arena bytes and the median of several runs.
//!
//! `cargo run --release -p rlx-opt --example pipeline_bench [runs]`

use rlx_driver::{Executable, legalize};
use rlx_ir::{Graph, Result};
use rlx_opt::{CompileOptions, FusionKind, PrecisionPolicy, compile_pipeline, compile_with, plan, zoo};
use std::time::Instant;

mod common;
use common::prepare;

fn median_ms(exe: &mut dyn Executable, g: &Graph, runs: usize) -> Result<(f64, Vec<u8>)> {
    let inputs = prepare(exe, g)?;
    let refs: Vec<&[u8]> = inputs.iter().map(|b| b.as_slice()).collect();
    let mut out: Vec<Vec<u8>> =
        g.outputs().iter().map(|&o| vec![0u8; g.shape(o).and_then(|s| s.size_bytes()).unwrap_or(0)]).collect();
    let mut times = vec![];
    for _ in 0..runs + 1 {
        let mut outs: Vec<&mut [u8]> = out.iter_mut().map(|b| b.as_mut_slice()).collect();
        let t = Instant::now();
        exe.run(&refs, &mut outs)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.remove(0); // warm-up
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], out.concat()))
}

fn bench(g: Graph, runs: usize) -> Result<()> {
    let cpu = rlx_cpu::CpuBackend::new();
    let (plain, _) = legalize(&g, &cpu)?;
    let plain_naive = plan(&plain, &|_| false)?.naive_bytes;
    let (opt, report) = compile_pipeline(g.clone(), &cpu, PrecisionPolicy::F32)?;
    // Compile time: optimizer pipeline plus the CPU executable (kernels, arena), median of 5.
    let mut compile_ms = vec![];
    for _ in 0..5 {
        let t = Instant::now();
        let (o, _) = compile_pipeline(g.clone(), &cpu, PrecisionPolicy::F32)?;
        let t_pipe = t.elapsed().as_secs_f64() * 1e3;
        let _exe = rlx_driver::compile_graph(&cpu, &o)?;
        compile_ms.push(t.elapsed().as_secs_f64() * 1e3);
        if std::env::var_os("RLX_COMPILE_SPLIT").is_some() {
            println!("  pipeline {t_pipe:.1} ms, executable {:.1} ms", compile_ms.last().unwrap_or(&0.0) - t_pipe);
        }
    }
    compile_ms.sort_by(f64::total_cmp);
    // The same pipeline without fusion: simplify, legalize, memory plan.
    let (nofuse, nf_report) = compile_with(g.clone(), &cpu, &CompileOptions { fuse: false, ..Default::default() })?;
    let mut a = rlx_driver::compile_graph(&cpu, &plain)?;
    let mut b = rlx_driver::compile_graph(&cpu, &opt)?;
    let mut c = rlx_driver::compile_graph(&cpu, &nofuse)?;
    // Alternate the three so load changes hit all alike.
    let (mut ta, mut tb, mut tc) = (vec![], vec![], vec![]);
    let (mut oa, mut ob) = (vec![], vec![]);
    for _ in 0..3 {
        let (t, o) = median_ms(a.as_mut(), &plain, runs)?;
        ta.push(t);
        oa = o;
        let (t, o) = median_ms(b.as_mut(), &opt, runs)?;
        tb.push(t);
        ob = o;
        tc.push(median_ms(c.as_mut(), &nofuse, runs)?.0);
    }
    for t in [&mut ta, &mut tb, &mut tc] {
        t.sort_by(f64::total_cmp);
    }
    let (fa, fb) = (f32s(&oa), f32s(&ob));
    let diff = fa.iter().zip(&fb).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    println!("{}:", g.name());
    println!("  nodes: {} (legalized, unoptimized) -> {} (optimized)", plain.len(), opt.len());
    println!(
        "  arena: {} bytes (one slot per node, unoptimized) -> {} bytes (planned, optimized; naive {} )",
        plain_naive, report.memory.arena_bytes, report.memory.naive_bytes
    );
    println!("  compile (pipeline + cpu executable): median {:.1} ms", compile_ms[2]);
    println!("  without fusion: {} nodes, arena {} bytes", nofuse.len(), nf_report.memory.arena_bytes);
    println!(
        "  fusion: {} regions, {} matmul epilogues, {} norm prologues, {} candidates not fused",
        report.fusion.count(FusionKind::Elementwise),
        report.fusion.count(FusionKind::MatMulEpilogue),
        report.fusion.count(FusionKind::NormPrologue),
        report.fusion.not_fused.len()
    );
    println!(
        "  cpu median: {:.2} ms unoptimized, {:.2} ms optimized without fusion, {:.2} ms optimized \
         (ratio {:.2}x vs unoptimized, {:.2}x vs no fusion); max |diff| {diff:.2e}",
        ta[1],
        tc[1],
        tb[1],
        ta[1] / tb[1],
        tc[1] / tb[1]
    );
    Ok(())
}

/// Decodes little-endian f32 outputs.
fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn main() -> Result<()> {
    let runs = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    bench(zoo::bert_encoder(128, 384, 12, 1536, 6), runs)?;
    bench(zoo::qwen3_decoder(128, 1024, 16, 8, 128, 3072), runs)?;
    Ok(())
}
