//! Decode of a GGUF model as a user runs it (`generate`: one sequence, greedy, the contiguous
//! cache), as GB/s of weights streamed per second against the read probe of `qmatmul`, run in
//! the same rounds on the same threads: the fraction of the memory's bandwidth decode uses.

use crate::qmatmul::read_gbs;
use crate::stats::median;
use rlx_driver::Device;
use rlx_models::llm::{GenerateOptions, LlmModel, LoadOptions, generate};
use rlx_models::sampling::SamplerConfig;

/// Bytes of weights one decoded token reads: every tensor, but the token embedding only where
/// the output head is tied to it (otherwise one row of it is gathered).
fn weight_bytes(path: &str) -> Result<u64, String> {
    let file = rlx_gguf::GgufFile::open(path).map_err(|e| format!("{path}: {e}"))?;
    let t = file.gguf().tensors();
    let tied = !t.iter().any(|i| i.name == "output.weight");
    Ok(t.iter().filter(|i| tied || i.name != "token_embd.weight").map(|i| i.n_bytes).sum())
}

/// Prints one row per round and the medians.
pub fn run(path: &str, tokens: usize, rounds: usize) -> Result<(), String> {
    let bytes = weight_bytes(path)?;
    let ctx = 16 + tokens + 1;
    let mut m = LlmModel::load_with(path, Device::Cpu, ctx, &LoadOptions::default()).map_err(|e| e.to_string())?;
    m.warm_weights(|_, _| {});
    let prompt: Vec<u32> = (0..16).map(|j| 300 + j).collect();
    let greedy = SamplerConfig { temperature: 0.0, ..SamplerConfig::default() };
    let opts = GenerateOptions { max_tokens: tokens, sampler: greedy, stop_tokens: vec![] };
    let decode = |m: &mut LlmModel| -> Result<f64, String> {
        generate(m, &prompt, &opts, |_| true).map(|s| s.decode_tok_s()).map_err(|e| e.to_string())
    };
    decode(&mut m)?;
    // Under RLX_PROFILE=1 the table after the rounds covers only the timed decodes.
    rlx_cpu::kernels::profile::reset();
    let probe_buf = rlx_driver::huge_pages::vec(128usize << 20, 1u32);
    println!("\n## Decode of {path} ({:.1} MB of weights per token, {tokens} tokens, greedy)", bytes as f64 / 1e6);
    println!("| round | tok/s | weights GB/s | read probe GB/s | weights / probe |");
    println!("|---|---|---|---|---|");
    let (mut toks, mut probes, mut ratios) = (vec![], vec![], vec![]);
    for r in 0..rounds {
        let p = read_gbs(&probe_buf);
        let t = decode(&mut m)?;
        let w = bytes as f64 * t / 1e9;
        println!("| {r} | {t:.1} | {w:.1} | {p:.1} | {:.2} |", w / p);
        toks.push(t);
        probes.push(p);
        ratios.push(w / p);
    }
    let t = median(&toks);
    println!("| median | {t:.1} | {:.1} | {:.1} | {:.2} |", bytes as f64 * t / 1e9, median(&probes), median(&ratios));
    if rlx_cpu::kernels::profile::enabled() {
        print!("\nKernel time over the timed rounds (RLX_PROFILE=1):\n{}", rlx_cpu::kernels::profile::report());
    }
    Ok(())
}
