//! Fuzzes the safetensors reader as `rlx inspect` and `rlx embed` use it: any bytes must parse or
//! give an error, never panic or over-allocate. Every tensor of a file that parses is checked
//! against its own shape and read as f32; then the file is checked and read as the weights of
//! the committed tiny-bert config, as `SentenceEmbedder::load` does.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rlx_models::{BertConfig, BertWeight, SafetensorsFile, bert};
use std::sync::OnceLock;

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

fn tiny_bert() -> &'static BertConfig {
    static CFG: OnceLock<BertConfig> = OnceLock::new();
    CFG.get_or_init(|| {
        serde_json::from_str(include_str!("../../tests/fixtures/tiny-bert/config.json")).expect("fixture config")
    })
}

fuzz_target!(|data: &[u8]| {
    let data = file_bytes(data);
    let len = data.len();
    let Ok(f) = SafetensorsFile::from_bytes(data, "fuzz.safetensors") else { return };
    // What `rlx inspect` prints.
    let _ = f.metadata();
    let entries = f.entries();
    let _bytes: usize = entries.iter().map(|e| e.offsets.1 - e.offsets.0).sum();
    for e in &entries {
        assert!(e.offsets.0 <= e.offsets.1 && e.offsets.1 <= len, "{e:?} outside {len} bytes");
        if f.check(&e.name, &e.shape).is_err() {
            continue;
        }
        let n: usize = e.shape.iter().product();
        assert_eq!(f.f32_tensor(&e.name, &e.shape).expect("checked tensor reads").len(), n);
        if let Some((bytes, range)) = f.f32_bytes(&e.name, &e.shape).expect("checked tensor maps") {
            assert_eq!((*bytes).as_ref()[range].len(), n * 4);
        }
    }
    // What `rlx embed` does with a model directory's weights.
    let cfg = tiny_bert();
    let first = BertWeight::WordEmb.hf_name();
    let prefix = if !f.contains(&first) && f.contains(&format!("bert.{first}")) { "bert." } else { "" };
    if bert::check_weights(cfg, &f, prefix).is_ok() {
        for w in BertWeight::all(cfg) {
            bert::weight_bytes(cfg, &f, prefix, w).expect("checked weights convert");
        }
    }
});
