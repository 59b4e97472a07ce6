//! MiniLM-L6 on a whole-graph backend against the framework underneath it, same machine, same
//! run: rlx-pjrt (`Device::Tpu` on the PJRT plugin named by `RLX_PJRT_PLUGIN`) against JAX jit,
//! both handing XLA one graph; rlx-mlx (`Device::Mlx`) against the same model in MLX's Python
//! API. The ratio measures the graph RLX builds and its per-run overhead, not another compiler.

use crate::minilm::{min_cosine, model_dir, tokens};
use crate::peers::PyPeers;
use crate::stats::{Timer, median};
use rlx_driver::Device;
use rlx_models::SentenceEmbedder;
use std::time::Instant;

/// `rlx-bench pjrt [BATCH..]` / `rlx-bench mlx [BATCH..]`: forward time, compile time and
/// per-run overhead on `device` (Tpu or Mlx) against its framework's Python peer.
pub fn compare(
    device: Device,
    batch: usize,
    seq: usize,
    rounds: usize,
    py: &mut Option<PyPeers>,
) -> Result<(), String> {
    let reps = if batch == 1 { 10 } else { 3 };
    let (peer, peer_mod, peer_name, target) = match device {
        Device::Mlx => ("mlx_minilm", "mlx", "MLX Python (mx.compile)", 1.1),
        _ => ("jax_minilm", "jax", "JAX jit (jaxlib's XLA)", 1.15),
    };
    println!(
        "\n## MiniLM-L6 forward {batch}x{seq} on {device} (ms, median of {} runs each; {rounds} rounds)",
        rounds * reps
    );
    let session = rlx_runtime::Session::new(device);
    if let Some(why) = device.unavailable_reason() {
        return Err(format!("Device::{device} is unavailable: {why}"));
    }
    let dir = model_dir()?;
    let mut cpu = SentenceEmbedder::load(&dir, Device::Cpu).map_err(|e| e.to_string())?;
    let t = tokens(&cpu, batch, seq)?;
    let e_cpu = cpu.embed_tokens(&t).map_err(|e| e.to_string())?;
    drop(cpu);
    let mut m = SentenceEmbedder::load(&dir, device).map_err(|e| e.to_string())?;
    let c0 = Instant::now();
    m.prepare(batch, seq).map_err(|e| e.to_string())?;
    let compile_s = c0.elapsed().as_secs_f64();
    let e_x = m.embed_tokens(&t).map_err(|e| e.to_string())?;
    let cos_cpu = min_cosine(&e_x, &e_cpu);
    let p = py.as_mut().filter(|p| p.has(peer_mod) && p.has("safetensors") && p.has("tokenizers"));
    let Some(p) = p else {
        return Err(format!("peer unavailable: python modules {peer_mod}, safetensors, tokenizers"));
    };
    let dir_s = dir.display().to_string();
    let (mut t_x, mut t_j) = (Timer::default(), vec![]);
    let (mut first_j, mut cos_j) = (f64::NAN, f64::NAN);
    session.reset_profile();
    for round in 0..rounds {
        m.embed_tokens(&t).map_err(|e| e.to_string())?;
        for _ in 0..reps {
            t_x.time(|| m.embed_tokens(&t).map(|_| ()).map_err(|e| e.to_string()))?;
        }
        let v = p.ask(&format!("{peer} {dir_s} {batch} {seq} {reps}"))?;
        t_j.extend(PyPeers::ms(&v));
        if round == 0 {
            first_j = v.get("first_call").and_then(|x| x.as_f64()).unwrap_or(f64::NAN);
            cos_j = min_cosine(&e_x, &crate::minilm::embeddings(&v));
        }
    }
    let (x, j) = (t_x.median_ms(), median(&t_j));
    let ours = if device == Device::Mlx {
        "RLX on MLX (rlx-mlx)".to_string()
    } else {
        format!("RLX on XLA (rlx-pjrt, {})", plugin_name())
    };
    println!("| runtime | ms | / peer (<= {target} is the target) |");
    println!("|---|---|---|");
    println!("| {ours} | {x:.2} | {:.3}x |", x / j);
    println!("| {peer_name} | {j:.2} | 1.000x |");
    println!(
        "compile: RLX prepare (graph, pipeline, lowering, backend compile, params upload) {compile_s:.2} s; peer first call (trace + compile + run) {first_j:.2} s"
    );
    print!("per run: {}", session.profile_report());
    println!("embeddings: min cosine vs RLX CPU {cos_cpu:.7}, vs the peer {cos_j:.7}");
    Ok(())
}

fn plugin_name() -> String {
    std::env::var("RLX_PJRT_PLUGIN")
        .ok()
        .and_then(|p| std::path::Path::new(&p).file_name().map(|f| f.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "libtpu".into())
}
