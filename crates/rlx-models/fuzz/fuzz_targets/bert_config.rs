//! Fuzzes a BERT model directory's `config.json` as `rlx embed` reads it: any bytes must parse
//! or give an error, never panic, hang or over-allocate. A config that parses is checked against
//! the committed tiny-bert weights (as `SentenceEmbedder::load` does), and one that fits them
//! builds its encoder graph, which must verify.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rlx_models::{BertConfig, Pooling, SafetensorsFile, SentenceOptions, bert};
use std::path::Path;
use std::sync::OnceLock;

fn tiny_bert_weights() -> &'static SafetensorsFile {
    static W: OnceLock<SafetensorsFile> = OnceLock::new();
    W.get_or_init(|| {
        let bytes = include_bytes!("../../tests/fixtures/tiny-bert/model.safetensors").to_vec();
        SafetensorsFile::from_bytes(bytes, "model.safetensors").expect("fixture weights")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(cfg) = BertConfig::from_bytes(data, Path::new("config.json")) else { return };
    // The fixture keeps the encoder under `bert.`, as BertFor* checkpoints do.
    if bert::check_weights(&cfg, tiny_bert_weights(), "bert.").is_ok() {
        for pooling in [Pooling::Mean, Pooling::Cls] {
            let g = bert::bert_graph(&cfg, SentenceOptions { pooling, normalize: true }, 2, 3);
            g.verify().expect("a config that fits its weights builds a valid graph");
        }
    }
});
