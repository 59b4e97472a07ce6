//! Token generation over `LlmModel`: prefill, then sample and decode one token at a time,
//! streaming each token to a callback; batched over several prompts.

use super::model::LlmModel;
use crate::sampling::{Sampler, SamplerConfig};
use rlx_ir::{Error, Result};
use std::time::Instant;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    /// At most this many new tokens.
    pub max_tokens: usize,
    /// How each token is picked.
    pub sampler: SamplerConfig,
    /// Generation stops at any of these (the stop token itself is not returned).
    pub stop_tokens: Vec<u32>,
}

/// The generated tokens and the time taken.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateStats {
    /// The new tokens (stop token excluded).
    pub tokens: Vec<u32>,
    /// Prompt tokens run by prefill.
    pub prompt_tokens: usize,
    /// Seconds spent compiling graphs (before prefill; 0 when they were compiled already).
    pub compile_secs: f64,
    /// Seconds of prefill.
    pub prefill_secs: f64,
    /// Decode steps run.
    pub decode_steps: usize,
    /// Seconds of decode steps.
    pub decode_secs: f64,
}

impl GenerateStats {
    /// Prompt tokens per second.
    pub fn prefill_tok_s(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill_secs.max(1e-12)
    }

    /// Decoded tokens per second.
    pub fn decode_tok_s(&self) -> f64 {
        self.decode_steps as f64 / self.decode_secs.max(1e-12)
    }
}

/// Generates from one prompt. `on_token` sees each new token as it is picked and returns false
/// to stop early.
pub fn generate(
    model: &mut LlmModel,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<GenerateStats> {
    let mut sampler = Sampler::new(opts.sampler.clone())?;
    if prompt.len() + opts.max_tokens > model.max_ctx() + 1 {
        let reason = format!(
            "{} prompt tokens + {} new tokens exceed the context of {}",
            prompt.len(),
            opts.max_tokens,
            model.max_ctx()
        );
        return Err(Error::eval("generate", reason));
    }
    let t0 = Instant::now();
    model.prepare(1, prompt.len())?;
    let compile_secs = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let mut t = sampler.sample(model.prefill_logits(&[prompt.to_vec()])?, prompt)?;
    let prefill_secs = t0.elapsed().as_secs_f64();
    let mut history = Vec::with_capacity(prompt.len() + opts.max_tokens);
    history.extend_from_slice(prompt);
    let mut tokens = Vec::with_capacity(opts.max_tokens);
    let (mut steps, mut decode_secs) = (0, 0.0);
    while tokens.len() < opts.max_tokens {
        if opts.stop_tokens.contains(&t) {
            break;
        }
        tokens.push(t);
        history.push(t);
        if !on_token(t) || tokens.len() == opts.max_tokens {
            break;
        }
        let t1 = Instant::now();
        let logits = model.decode_logits(&[t])?;
        decode_secs += t1.elapsed().as_secs_f64();
        steps += 1;
        t = sampler.sample(logits, &history)?;
    }
    Ok(GenerateStats {
        tokens,
        prompt_tokens: prompt.len(),
        compile_secs,
        prefill_secs,
        decode_steps: steps,
        decode_secs,
    })
}

/// Generates from several prompts at once (one batched decode step per token); each sequence
/// samples with its own RNG (seed + index) and stops on its own.
pub fn generate_batch(model: &mut LlmModel, prompts: &[Vec<u32>], opts: &GenerateOptions) -> Result<Vec<Vec<u32>>> {
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    if longest + opts.max_tokens > model.max_ctx() + 1 {
        let reason = format!(
            "{longest} prompt tokens + {} new tokens exceed the context of {}",
            opts.max_tokens,
            model.max_ctx()
        );
        return Err(Error::eval("generate", reason));
    }
    let mut samplers = (0..prompts.len())
        .map(|i| Sampler::new(SamplerConfig { seed: opts.sampler.seed.wrapping_add(i as u64), ..opts.sampler.clone() }))
        .collect::<Result<Vec<_>>>()?;
    let mut logits = model.prefill(prompts)?;
    let mut history: Vec<Vec<u32>> = prompts.to_vec();
    let mut out = vec![vec![]; prompts.len()];
    let mut done = vec![opts.max_tokens == 0; prompts.len()];
    let mut last = vec![0u32; prompts.len()];
    loop {
        for i in 0..prompts.len() {
            if done[i] {
                continue;
            }
            let t = samplers[i].sample(&logits[i], &history[i])?;
            if opts.stop_tokens.contains(&t) {
                done[i] = true;
                continue;
            }
            out[i].push(t);
            history[i].push(t);
            last[i] = t;
            done[i] = out[i].len() == opts.max_tokens;
        }
        if done.iter().all(|&d| d) {
            return Ok(out);
        }
        // Finished sequences keep feeding their last token; their logits are ignored.
        logits = model.decode(&last)?;
    }
}
