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
    /// Sequences decoded together. Requests run one at a time for now (no continuous batching
    /// yet); the value is checked and kept for the batched scheduler.
    #[arg(long, default_value_t = 1)]
    max_batch: usize,
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
