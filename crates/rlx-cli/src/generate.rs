//! `rlx generate`: text from a Qwen3 / Llama model, a GGUF file or a Hugging Face checkpoint
//! folder (streamed, or one JSON object), or from a char-GPT checkpoint written by `rlx train`
//! (`.safetensors`).

use crate::embed::{bytes_bar, spinner};
use rlx::models::llm::{GenerateOptions, LlmModel, LoadOptions, generate as run_generate};
use rlx::models::{SamplerConfig, load_tokenizer};
use rlx::prelude::*;
use std::io::Write;
use std::path::PathBuf;

type Res = Result<(), Box<dyn std::error::Error>>;

/// The arguments of `rlx generate`.
#[derive(clap::Args)]
pub struct GenerateArgs {
    /// A Qwen3 / Llama model: a `.gguf` file or a Hugging Face checkpoint folder (config.json,
    /// safetensors shards, tokenizer.json); or a `.safetensors` char-GPT checkpoint from `rlx train`.
    #[arg(long)]
    model: PathBuf,
    /// Quantize the float weights on load (linear weights and the token embedding): q8_0, or
    /// q4_k (rows must be a multiple of 256). Already-quantized GGUF weights stay as they are.
    #[arg(long, value_parser = ["q8_0", "q4_k"])]
    quantize: Option<String>,
    /// The prompt text (tokenized with the model's own tokenizer).
    #[arg(long, conflicts_with = "prompt_ids")]
    prompt: Option<String>,
    /// The prompt as token ids, e.g. `1,2,3`.
    #[arg(long, value_delimiter = ',')]
    prompt_ids: Option<Vec<u32>>,
    /// New tokens to generate (at most).
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    /// Keep the k most likely tokens (0: all).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Nucleus sampling: keep the most likely tokens up to this probability.
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Repetition penalty over the last 64 tokens (1: off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Keep going past the end-of-sequence token.
    #[arg(long)]
    ignore_eos: bool,
    /// The KV cache's dtype (Qwen3 / Llama models): f16 (the default on the CPU, as llama.cpp's), bf16 or
    /// f32. Half precision halves the cache's memory and what each decode step reads.
    #[arg(long, value_parser = ["f32", "f16", "bf16"])]
    kv_dtype: Option<String>,
    /// Print one JSON object {"tokens", "text", "prefill_tok_s", "decode_tok_s"} instead of
    /// streaming the text.
    #[arg(long)]
    json: bool,
}

/// Writes the longest complete UTF-8 prefix of `pending` and keeps the rest for later.
fn flush_utf8(out: &mut impl Write, pending: &mut Vec<u8>) -> std::io::Result<()> {
    let n = match std::str::from_utf8(pending) {
        Ok(s) => s.len(),
        // A truncated sequence at the end waits; invalid bytes in the middle are replaced.
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => pending.len(),
    };
    out.write_all(String::from_utf8_lossy(&pending[..n]).as_bytes())?;
    out.flush()?;
    pending.drain(..n);
    Ok(())
}

/// Runs `rlx generate`.
pub fn generate(out: &mut impl Write, a: &GenerateArgs, device: Device) -> Res {
    if a.model.is_dir() {
        return generate_llm(out, a, device);
    }
    match a.model.extension().and_then(|e| e.to_str()) {
        Some("gguf") => generate_llm(out, a, device),
        // Branch point for checkpoints written by `rlx train` (char-level GPT, rlx-nn).
        Some("safetensors") => {
            if a.prompt_ids.is_some()
                || a.json
                || a.top_p != 0.95
                || a.repeat_penalty != 1.0
                || a.kv_dtype.is_some()
                || a.quantize.is_some()
            {
                return Err("a char-GPT checkpoint takes --prompt, --max-tokens, --temperature, --top-k and \
                            --seed only (no --prompt-ids, --top-p, --repeat-penalty, --kv-dtype, --quantize or --json)"
                    .into());
            }
            let opts = rlx::nn::gpt::SampleOptions { temperature: a.temperature, top_k: a.top_k, seed: a.seed };
            let prompt = a.prompt.as_deref().unwrap_or("\n");
            crate::train::generate_char_gpt(out, &a.model, prompt, a.max_tokens, opts, device)
        }
        _ => {
            let m = a.model.display();
            Err(format!("{m}: expected a .gguf model, a Hugging Face checkpoint folder or a .safetensors checkpoint from `rlx train`").into())
        }
    }
}

fn generate_llm(out: &mut impl Write, a: &GenerateArgs, device: Device) -> Res {
    let tok = load_tokenizer(&a.model)?;
    let prompt = match (&a.prompt, &a.prompt_ids) {
        (Some(p), None) => tok.encode(p)?,
        (None, Some(ids)) => ids.clone(),
        _ => return Err("give the prompt with --prompt TEXT or --prompt-ids 1,2,3".into()),
    };
    if prompt.is_empty() {
        return Err("the prompt is empty: give at least one token".into());
    }
    let ctx = prompt.len() + a.max_tokens;
    let quantize = match a.quantize.as_deref() {
        Some("q8_0") => Some(rlx::gguf::GgmlType::Q8_0),
        Some(_) => Some(rlx::gguf::GgmlType::Q4_K),
        None => None,
    };
    let mut m = LlmModel::load_with(&a.model, device, ctx, &LoadOptions { quantize })?;
    if let Some(dt) = &a.kv_dtype {
        let dt = match dt.as_str() {
            "f32" => DType::F32,
            "bf16" => DType::BF16,
            _ => DType::F16,
        };
        m = m.with_kv_dtype(dt)?;
    }
    if ctx > m.config().context_length {
        return Err(format!("{ctx} tokens exceed the model's context length {}", m.config().context_length).into());
    }
    // Load the mapped weights and compile both graphs before the timed prefill and decode.
    let pb = bytes_bar(0, "loading weights", a.json);
    m.warm_weights(|done, total| {
        pb.set_length(total);
        pb.set_position(done);
    });
    pb.finish_and_clear();
    let pb = spinner("compiling prefill and decode graphs", a.json);
    let prepared = m.prepare(1, prompt.len());
    pb.finish_and_clear();
    prepared?;
    let sampler = SamplerConfig {
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        repetition_penalty: a.repeat_penalty,
        repeat_last_n: 64,
        seed: a.seed,
    };
    let stop_tokens = if a.ignore_eos { vec![] } else { tok.stop_tokens() };
    let opts = GenerateOptions { max_tokens: a.max_tokens, sampler, stop_tokens };
    // `RLX_PROFILE=1`: the backend's kernel times over prefill and decode, on stderr at the end.
    let session = Session::new(device);
    session.reset_profile();
    if a.json {
        let stats = run_generate(&mut m, &prompt, &opts, |_| true)?;
        eprint!("{}", session.profile_report());
        let obj = serde_json::json!({
            "tokens": stats.tokens,
            "text": tok.decode(&stats.tokens),
            "prefill_tok_s": stats.prefill_tok_s(),
            "decode_tok_s": stats.decode_tok_s(),
        });
        writeln!(out, "{obj}")?;
        return Ok(());
    }
    if let Some(p) = &a.prompt {
        write!(out, "{p}")?;
    }
    let mut pending = vec![];
    let mut err = None;
    let stats = run_generate(&mut m, &prompt, &opts, |t| {
        pending.extend(tok.piece_bytes(t));
        err = flush_utf8(out, &mut pending).err();
        err.is_none()
    })?;
    if let Some(e) = err {
        return Err(e.into());
    }
    pending.extend(b"\n");
    flush_utf8(out, &mut pending)?;
    eprintln!(
        "{} prompt tokens at {:.1} tok/s, {} new tokens at {:.1} tok/s",
        stats.prompt_tokens,
        stats.prefill_tok_s(),
        stats.tokens.len(),
        stats.decode_tok_s()
    );
    eprint!("{}", session.profile_report());
    Ok(())
}
