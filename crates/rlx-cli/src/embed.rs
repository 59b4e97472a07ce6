//! `rlx embed`: one JSON array per text, the sentence embedding of a BERT-family model.

use indicatif::{ProgressBar, ProgressStyle};
use rlx::prelude::*;
use std::io::{IsTerminal, Write};
use std::path::Path;

type Res = Result<(), Box<dyn std::error::Error>>;

/// A spinner on stderr with a message, or a hidden one when stderr is not a terminal or `quiet`.
pub fn spinner(msg: &str, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    pb.set_style(ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("static template"));
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(std::time::Duration::from_millis(100));
    pb
}

/// A byte progress bar on stderr, hidden when stderr is not a terminal or `quiet`.
pub fn bytes_bar(total: u64, msg: &str, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    let style = ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec})")
        .expect("static template")
        .progress_chars("=> ");
    pb.set_style(style);
    pb.set_message(msg.to_string());
    pb
}

/// Runs `rlx embed`: loads the model (a spinner on stderr), then prints one array per text.
pub fn embed(out: &mut impl Write, model: &Path, texts: &[String], device: Device) -> Res {
    let pb = spinner(&format!("loading {}", model.display()), false);
    let m = rlx::models::SentenceEmbedder::load(model, device);
    pb.finish_and_clear();
    let mut m = m?;
    let refs: Vec<&str> = texts.iter().map(|t| t.as_str()).collect();
    let pb = spinner(&format!("embedding {} texts", texts.len()), false);
    let embs = m.embed(&refs);
    pb.finish_and_clear();
    for e in embs? {
        writeln!(out, "{}", serde_json::to_string(&e)?)?;
    }
    Ok(())
}
