//! Resident memory of an LLM at each stage (Linux): load, weights paged in, graphs compiled,
//! prefill, decode; with RLX_PROFILE=1 the kernel times too.
//! `cargo run --release -p rlx-models --example llm_memory -- FILE.gguf`

use rlx_driver::Device;
use rlx_models::llm::LlmModel;

fn rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok());
    kb.unwrap_or(0.0) / 1024.0
}

/// Repacked copies made and their file bytes released so far.
fn repacked() -> String {
    let (n, mib) =
        (rlx_cpu::kernels::quant_repacks(), rlx_cpu::kernels::quant_released_bytes() as f64 / (1 << 20) as f64);
    format!("({n} weights repacked, {mib:.1} MiB of file pages released)")
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: llm_memory FILE.gguf")?;
    let file_mib = std::fs::metadata(&path)?.len() as f64 / (1 << 20) as f64;
    println!("file:               {file_mib:8.1} MiB");
    println!("start:              {:8.1} MiB", rss_mib());
    let mut m = LlmModel::load(&path, Device::Cpu, 96)?;
    println!("loaded:             {:8.1} MiB", rss_mib());
    m.warm_weights(|_, _| {});
    println!("weights paged in:   {:8.1} MiB", rss_mib());
    m.prepare(1, 1)?;
    println!("decode compiled:    {:8.1} MiB {}", rss_mib(), repacked());
    m.prepare(1, 16)?;
    println!("prefill compiled:   {:8.1} MiB", rss_mib());
    let prompt: Vec<u32> = (300..316).collect();
    m.prefill_logits(&[prompt])?;
    println!("after prefill:      {:8.1} MiB {}", rss_mib(), repacked());
    let t0 = std::time::Instant::now();
    for i in 0..64 {
        m.decode_logits(&[300 + i % 10])?;
    }
    let secs = t0.elapsed().as_secs_f64();
    println!("after 64 decodes:   {:8.1} MiB ({:.2} tok/s)", rss_mib(), 64.0 / secs);
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(peak) = s.lines().find(|l| l.starts_with("VmHWM:")) {
        println!("peak ({})", peak.split_whitespace().skip(1).collect::<Vec<_>>().join(" "));
    }
    if rlx_cpu::kernels::profile::enabled() {
        println!("{}", rlx_cpu::kernels::profile::report());
    }
    Ok(())
}
