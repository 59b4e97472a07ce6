//! Decode throughput of the paged, continuously batched engine against the contiguous cache of
//! `generate`, on one GGUF file:
//!
//! ```text
//! cargo run --release -p rlx-models --example paged_decode -- MODEL.gguf [TOKENS] [QUANT] [BATCHES...]
//! ```
//!
//! `QUANT` (`q4_k`, `q8_0` or `none`) quantizes float weights on load.
//! Prints tokens per second of `generate` (one sequence, contiguous f16 cache), then of
//! `generate_paged` with 1, 4, 8 ... sequences (16-token prompts, `TOKENS` new tokens each,
//! greedy, one sequence row per prompt), the median of 3 runs each. With `RLX_PROFILE=1` each
//! figure is followed by its per-kernel time table (all runs, warm-up included).

use rlx_driver::Device;
use rlx_models::llm::{
    BatchScheduler, GenerateOptions, LlmModel, LoadOptions, PagedConfig, PagedModel, generate, generate_paged,
};
use rlx_models::sampling::SamplerConfig;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Under `RLX_PROFILE=1`, prints the kernel table of the runs so far and clears it.
fn print_profile() {
    if rlx_cpu::kernels::profile::enabled() {
        print!("{}", rlx_cpu::kernels::profile::report());
        rlx_cpu::kernels::profile::reset();
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args.first().ok_or("usage: paged_decode MODEL.gguf [TOKENS] [QUANT] [BATCHES...]")?;
    let tokens: usize = args.get(1).map_or(Ok(64), |s| s.parse())?;
    let quantize = match args.get(2).map(String::as_str) {
        None | Some("none") => None,
        Some("q4_k") => Some(rlx_gguf::GgmlType::Q4_K),
        Some("q8_0") => Some(rlx_gguf::GgmlType::Q8_0),
        Some(q) => return Err(format!("QUANT must be q4_k, q8_0 or none, got {q}").into()),
    };
    let load = LoadOptions { quantize };
    let batches: Vec<usize> =
        if args.len() > 3 { args[3..].iter().map(|s| s.parse()).collect::<Result<_, _>>()? } else { vec![1, 4, 8] };
    let ctx = 16 + tokens + 1;
    let greedy = SamplerConfig { temperature: 0.0, ..SamplerConfig::default() };
    let prompt = |i: usize| -> Vec<u32> { (0..16).map(|j| 300 + (i * 16 + j) as u32 % 20000).collect() };

    let mut m = LlmModel::load_with(path, Device::Cpu, ctx, &load)?;
    m.warm_weights(|_, _| {});
    let opts = GenerateOptions { max_tokens: tokens, sampler: greedy.clone(), stop_tokens: vec![] };
    generate(&mut m, &prompt(0), &opts, |_| true)?;
    let runs: Vec<f64> = (0..3)
        .map(|_| generate(&mut m, &prompt(0), &opts, |_| true).map(|s| s.decode_tok_s()))
        .collect::<Result<_, _>>()?;
    println!("generate (contiguous cache), 1 sequence: {:.1} tok/s decode", median(runs));
    print_profile();
    drop(m);

    for &b in &batches {
        let m = LlmModel::load_with(path, Device::Cpu, ctx, &load)?;
        let mut pm = PagedModel::new(m, PagedConfig { max_step_tokens: 256.max(b), ..PagedConfig::full(b, ctx) })?;
        pm.prepare(16 * b)?;
        let mut sched = BatchScheduler::new(pm);
        let prompts: Vec<Vec<u32>> = (0..b).map(prompt).collect();
        generate_paged(&mut sched, &prompts, tokens, &greedy, &[])?;
        let runs: Vec<f64> = (0..3)
            .map(|_| {
                let t0 = Instant::now();
                let out = generate_paged(&mut sched, &prompts, tokens, &greedy, &[])?;
                let n: usize = out.iter().map(|(t, _)| t.len()).sum();
                Ok::<_, rlx_ir::Error>(n as f64 / t0.elapsed().as_secs_f64())
            })
            .collect::<Result<_, _>>()?;
        println!("generate_paged, {b} sequences: {:.1} tok/s (prefill included)", median(runs));
        print_profile();
    }
    Ok(())
}
