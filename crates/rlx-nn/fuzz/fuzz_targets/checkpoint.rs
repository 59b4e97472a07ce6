//! Fuzzes the char-GPT checkpoint reader: `gpt::resume_from_bytes` is what `rlx train --resume`
//! runs, `gpt::from_bytes` then `CharGpt::new` what `rlx generate` runs on a checkpoint. Any
//! bytes must load or give an error, never panic, hang or over-allocate; a checkpoint that loads
//! gives the training graph of its config and a sampler its params fit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rlx_driver::Device;
use rlx_nn::gpt::{self, CharGpt};
use std::path::Path;

/// Bytes are a file as is, unless they start with `JSON`: then they are `JSON<header>\0<data>`
/// and the harness writes the header's length prefix, so that mutations which grow or shrink the
/// header keep the file well-formed and reach the checks behind the header parse. (A JSON header
/// holds no raw NUL, so the first one ends it.)
fn file_bytes(data: &[u8]) -> Vec<u8> {
    let Some(rest) = data.strip_prefix(b"JSON") else { return data.to_vec() };
    let (header, tensors) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let mut file = Vec::with_capacity(8 + rest.len());
    file.extend_from_slice(&(header.len() as u64).to_le_bytes());
    file.extend_from_slice(header);
    file.extend_from_slice(tensors);
    file
}

fuzz_target!(|data: &[u8]| {
    let data = &file_bytes(data)[..];
    let path = Path::new("model.safetensors");
    // `resume_from_bytes` reads what `from_bytes` reads, and more: only a checkpoint that loads
    // is resumed (half the work for the many inputs that do not).
    let Ok((cfg, store, _meta)) = gpt::from_bytes(data, path) else { return };
    let _ = CharGpt::new(cfg, &store, Device::Cpu);
    if let Ok((cfg, store, _step)) = gpt::resume_from_bytes(data, path) {
        // What `rlx train` does next, short of compiling: the text's tokens and the step graph.
        let ids = cfg.encode("ab\n").unwrap_or_default();
        let _ = cfg.decode(&ids);
        gpt::loss_graph(&cfg, 2).expect("a resumable config builds its training graph");
        gpt::model_params(&cfg, &store).expect("resumed params fit the config");
    }
});
