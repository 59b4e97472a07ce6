//! Shows that a Hugging Face checkpoint is memory-mapped, not copied: resident memory (Linux
//! `/proc/self/statm`) before and after `LlmModel::load` and after every weight page is read,
//! split into file-backed pages (the mapped shards, which the kernel may drop and re-read) and
//! anonymous memory (copies), against the checkpoint's size.
//! `cargo run --release -p rlx-models --example hf_memory -- DIR` (DIR: e.g. from
//! `tools/hf_tiny_llm.py --big DIR` (f32) or `--big-bf16 DIR`: on the CPU, whose bf16 products run natively, the linear weights of either are used in place).

use rlx_driver::Device;
use rlx_models::llm::LlmModel;

/// (resident, file-backed resident) in MiB.
fn statm() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let f: Vec<f64> = s.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
    let page = 4096.0 / (1 << 20) as f64;
    (f.get(1).copied().unwrap_or(0.0) * page, f.get(2).copied().unwrap_or(0.0) * page)
}

fn line(what: &str) {
    let (rss, shared) = statm();
    println!("{what:20} resident {rss:8.1} MiB = file-backed {shared:8.1} + anonymous {:8.1}", rss - shared);
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: hf_memory CHECKPOINT_DIR")?;
    let mut size = 0u64;
    for e in std::fs::read_dir(&dir)? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "safetensors") {
            size += std::fs::metadata(&p)?.len();
        }
    }
    println!("checkpoint shards:   {:8.1} MiB", size as f64 / (1 << 20) as f64);
    line("start");
    let m = LlmModel::load(&dir, Device::Cpu, 64)?;
    line("loaded");
    let copied: usize = m
        .weights()
        .params()
        .iter()
        .filter(|p| m.weights().file_range(p).is_none())
        .map(|p| m.weights().bytes(p).len())
        .sum();
    m.warm_weights(|_, _| {});
    line("weights paged in");
    println!(
        "converted copies:    {:8.1} MiB ({} of {} weights used in place from the map)",
        copied as f64 / (1 << 20) as f64,
        m.weights().params().iter().filter(|p| m.weights().file_range(p).is_some()).count(),
        m.weights().params().len()
    );
    Ok(())
}
