//! `rlx serve`: an OpenAI-compatible HTTP server for a Qwen3 / Llama model (rlx-serve).

use rlx::prelude::*;
use std::path::PathBuf;

/// The arguments of `rlx serve` (`--threads` is the global flag).
#[derive(clap::Args)]
pub struct ServeArgs {
    /// A Qwen3 / Llama model: a `.gguf` file or a Hugging Face checkpoint folder.
    #[arg(long)]
    model: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Tokens per request, prompt and generated (default: the model's context, at most 4096).
    #[arg(long)]
    ctx: Option<usize>,
    /// Sequences run together: each step decodes one token of every running request (and
    /// prefills chunks of new ones) in one forward pass.
    #[arg(long, default_value_t = 8)]
    max_batch: usize,
    /// Tokens per step, all sequences together: long prompts are prefilled in chunks of this
    /// size at most, so they never stall running requests for long.
    #[arg(long, default_value_t = 256)]
    max_step_tokens: usize,
    /// Tokens per KV-cache page.
    #[arg(long, default_value_t = 16)]
    page_size: usize,
    /// KV-cache pages in the pool (default: room for --max-batch full contexts); requests wait,
    /// or are preempted and recomputed, when pages run out.
    #[arg(long, conflicts_with = "kv_memory")]
    kv_pages: Option<usize>,
    /// KV-cache size in bytes (suffixes K, M, G: 512M), instead of --kv-pages.
    #[arg(long, value_parser = parse_bytes)]
    kv_memory: Option<u64>,
    /// Requests that may wait for the engine; more get 429 with Retry-After.
    #[arg(long, default_value_t = 64)]
    queue: usize,
}

/// Runs `rlx serve` until SIGINT / SIGTERM.
pub fn serve(a: &ServeArgs, device: Device) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = rlx_serve::ServeConfig {
        model: a.model.clone(),
        host: a.host.clone(),
        port: a.port,
        ctx: a.ctx,
        max_batch: a.max_batch,
        max_step_tokens: a.max_step_tokens,
        page_size: a.page_size,
        kv_pages: a.kv_pages,
        kv_memory: a.kv_memory,
        queue: a.queue,
        device,
        handle_signals: true,
    };
    let server = rlx_serve::Server::start(cfg)?;
    // Scripts wait for this line (and read the port from it when --port 0).
    eprintln!("rlx serve: listening on http://{}", server.addr());
    server.wait()?;
    eprintln!("rlx serve: stopped");
    Ok(())
}

/// `512M`, `2G`, `65536`: bytes with an optional binary suffix.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mul) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = num.trim().parse().map_err(|_| format!("`{s}` is not a byte count (e.g. 65536, 512M, 2G)"))?;
    n.checked_mul(mul).ok_or_else(|| format!("`{s}` is too large"))
}
