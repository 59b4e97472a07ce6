//! Single-op timings of the native composite kernels (attention, layer_norm, softmax), RLX only:
//! for tuning, and to show what one op costs inside a model.

use crate::stats::Timer;
use rlx_driver::Device;
use rlx_ir::ops::MaskKind;
use rlx_ir::{DType, Graph, Shape};
use rlx_runtime::Session;

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32 / 16_777_216.0) - 0.5)
        .collect()
}

fn time_graph(label: &str, g: Graph, feeds: Vec<(String, Vec<f32>)>, runs: usize) -> Result<(), String> {
    time_graph_with(label, g, &[], feeds, runs)
}

/// `time_graph` with `params` set once before the runs (weights: kernels may pack them once).
fn time_graph_with(
    label: &str,
    g: Graph,
    params: &[(&str, Vec<f32>)],
    feeds: Vec<(String, Vec<f32>)>,
    runs: usize,
) -> Result<(), String> {
    if FILTER.get().is_some_and(|f| !label.contains(f.as_str())) {
        return Ok(());
    }
    let mut c = Session::new(Device::Cpu).compile(g).map_err(|e| e.to_string())?;
    for (name, v) in params {
        c.set_param(name, v).map_err(|e| e.to_string())?;
    }
    // Raw bytes in graph input order and a preallocated output: times the kernels, not conversions.
    let names: Vec<String> = c.inputs().iter().map(|(n, _)| n.clone()).collect();
    let bytes: Vec<Vec<u8>> = names
        .iter()
        .map(|n| feeds.iter().find(|(f, _)| f == n).map(|(_, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect::<Option<_>>()
        .ok_or("a feed is missing")?;
    let ins: Vec<&[u8]> = bytes.iter().map(|b| b.as_slice()).collect();
    let mut outs: Vec<Vec<u8>> = c.outputs().iter().map(|s| vec![0; s.size_bytes().unwrap_or(0)]).collect();
    let mut t = Timer::default();
    for i in 0..=runs {
        let mut o: Vec<&mut [u8]> = outs.iter_mut().map(|b| b.as_mut_slice()).collect();
        if i == 0 {
            c.run_into(&ins, &mut o).map_err(|e| e.to_string())?;
            continue;
        }
        t.time(|| c.run_into(&ins, &mut o).map_err(|e| e.to_string()))?;
    }
    println!("  {label:<48} median {:>9.3} ms", t.median_ms());
    if rlx_cpu::kernels::profile::enabled() {
        print!("{}", rlx_cpu::kernels::profile::report());
        rlx_cpu::kernels::profile::reset();
    }
    Ok(())
}

/// Only the cases whose label contains this are timed (`rlx-bench ops RUNS FILTER`).
static FILTER: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Times attention at a few shapes and masks, and the row kernels at MiniLM's shapes; with
/// `filter`, only the cases whose label contains it.
pub fn run(runs: usize, filter: Option<&str>) -> Result<(), String> {
    if let Some(f) = filter {
        FILTER.set(f.to_string()).map_err(|_| "ops: filter set twice")?;
    }
    println!("single ops (RLX, median of {runs}):");
    let cases = [
        (1, 12, 12, 128, 128, 32, MaskKind::None),
        (8, 12, 12, 128, 128, 32, MaskKind::None),
        (1, 16, 8, 128, 128, 128, MaskKind::Causal),
        (1, 16, 8, 1024, 1024, 64, MaskKind::Causal),
        (1, 16, 8, 2048, 2048, 64, MaskKind::Causal),
        (1, 16, 8, 1024, 1024, 64, MaskKind::SlidingWindow(128)),
        (1, 16, 8, 1, 4096, 64, MaskKind::Causal),
    ];
    for (b, h, kvh, s, t, d, mask) in cases {
        let mut g = Graph::new("attn");
        let q = g.input("q", Shape::new(&[b, h, s, d], DType::F32));
        let k = g.input("k", Shape::new(&[b, kvh, t, d], DType::F32));
        let v = g.input("v", Shape::new(&[b, kvh, t, d], DType::F32));
        let y = g.attention(q, k, v, mask, 1.0 / (d as f32).sqrt());
        g.set_outputs(vec![y]);
        let feeds = vec![
            ("q".into(), values(b * h * s * d, 1)),
            ("k".into(), values(b * kvh * t * d, 2)),
            ("v".into(), values(b * kvh * t * d, 3)),
        ];
        time_graph(&format!("attention b{b} h{h}/kv{kvh} s{s} t{t} d{d} {mask:?}"), g, feeds, runs)?;
    }
    // MiniLM's attention reading [batch, seq, heads, dim] values in place.
    let (b, h, s, d) = (1, 12, 128, 32);
    let mut g = Graph::new("attn_bshd");
    let ins: Vec<_> = ["q", "k", "v"].iter().map(|n| g.input(n, Shape::new(&[b, s, h, d], DType::F32))).collect();
    let op =
        rlx_ir::ops::Attention::new(MaskKind::None, 1.0 / (d as f64).sqrt()).with_layout(rlx_ir::ops::HeadLayout::Bshd);
    let y = g.add_node(op, &ins);
    g.set_outputs(vec![y]);
    let feeds = (1..=3).map(|i| (["q", "k", "v"][i - 1].to_string(), values(b * h * s * d, i as u32))).collect();
    time_graph(&format!("attention b{b} s{s} h{h} d{d} None, [b, s, h, d] layout"), g, feeds, runs)?;
    for (m, k, n, epi) in [
        (128, 384, 384, 0),
        (128, 384, 1536, 0),
        (128, 384, 1536, 1),
        (128, 384, 1536, 2),
        (128, 1536, 384, 1),
        (1024, 384, 384, 0),
        (1024, 384, 1536, 0),
        (1024, 384, 1536, 2),
        (1024, 1536, 384, 0),
        (1024, 1536, 384, 1),
    ] {
        let mut g = Graph::new("mm");
        let x = g.input("x", Shape::new(&[m, k], DType::F32));
        let w = g.param("w", Shape::new(&[k, n], DType::F32));
        let mut y = g.matmul(x, w);
        if epi >= 1 {
            let bias = g.param("b", Shape::new(&[n], DType::F32));
            y = g.add(y, bias);
        }
        if epi >= 2 {
            y = g.gelu(y);
        }
        g.set_outputs(vec![y]);
        let what = ["", " + bias", " + bias, gelu"][epi];
        let params = [("w", values(k * n, 9)), ("b", values(n, 10))];
        let used = if epi >= 1 { &params[..] } else { &params[..1] };
        let label = format!("matmul [{m},{k}]x[{k},{n}]{what} (params)");
        time_graph_with(&label, g, used, vec![("x".into(), values(m * k, 8))], runs)?;
    }
    // Sibling projections of one input as one stacked matmul over param weights (K/V of a Qwen3
    // layer at 128 tokens; Q/K/V of a 2048-wide model at 512 tokens).
    for (m, k, n, groups) in [(128, 1024, 1024, 2), (512, 2048, 2048, 3), (1024, 384, 384, 3)] {
        let mut g = Graph::new("stacked");
        let x = g.input("x", Shape::new(&[m, k], DType::F32));
        let names: Vec<String> = (0..groups).map(|i| format!("w{i}")).collect();
        let ws: Vec<_> = names.iter().map(|nm| g.param(nm, Shape::new(&[k, n], DType::F32))).collect();
        let y = g.stacked_matmul(x, &ws, false);
        g.set_outputs(vec![y]);
        let params: Vec<(&str, Vec<f32>)> =
            names.iter().enumerate().map(|(i, nm)| (nm.as_str(), values(k * n, 20 + i as u32))).collect();
        let label = format!("stacked_matmul [{m},{k}] x {groups} x [{k},{n}] (params)");
        time_graph_with(&label, g, &params, vec![("x".into(), values(m * k, 19))], runs)?;
    }
    // Attention's head transposes at MiniLM's shape ([B, S, H, D] to [B, H, S, D]).
    let mut g = Graph::new("tr");
    let x = g.input("x", Shape::new(&[1, 128, 12, 32], DType::F32));
    let y = g.transpose(x, &[0, 2, 1, 3]);
    g.set_outputs(vec![y]);
    time_graph("transpose [1,128,12,32] -> [1,12,128,32]", g, vec![("x".into(), values(128 * 384, 11))], runs)?;
    let mut g = Graph::new("ln");
    let x = g.input("x", Shape::new(&[128, 384], DType::F32));
    let gm = g.input("g", Shape::new(&[384], DType::F32));
    let bt = g.input("b", Shape::new(&[384], DType::F32));
    let y = g.layer_norm(x, gm, bt, 1e-12);
    g.set_outputs(vec![y]);
    let feeds = vec![("x".into(), values(128 * 384, 4)), ("g".into(), values(384, 5)), ("b".into(), values(384, 6))];
    time_graph("layer_norm [128, 384]", g, feeds, runs)?;
    let mut g = Graph::new("sm");
    let x = g.input("x", Shape::new(&[12, 128, 128], DType::F32));
    let y = g.softmax(x, -1);
    g.set_outputs(vec![y]);
    time_graph("softmax [12, 128, 128]", g, vec![("x".into(), values(12 * 128 * 128, 7))], runs)?;
    Ok(())
}
