//! Files the loaders must refuse (or read correctly) without panicking: cases the fuzz targets
//! of crates/rlx-models/fuzz found, and the in-memory readers they drive checked against the
//! file readers.

use rlx_gguf::{Array, Gguf, GgufWriter, Value};
use rlx_ir::Error;
use rlx_models::{BertConfig, GgufTokenizer, SafetensorsFile, TextTokenizer, bert};
use std::path::{Path, PathBuf};

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel)
}

/// A SentencePiece-style GGUF tokenizer of four tokens, with extra metadata.
fn spm_gguf(extra: &[(&str, Value)]) -> Gguf {
    let mut w = GgufWriter::new();
    let tokens = ["<unk>", "<s>", "a", "\u{2581}a"].map(String::from).to_vec();
    w.add_metadata("tokenizer.ggml.model", Value::String("llama".into())).unwrap();
    w.add_metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens))).unwrap();
    w.add_metadata("tokenizer.ggml.scores", Value::Array(Array::F32(vec![0.0, 0.0, -1.0, -0.5]))).unwrap();
    for (k, v) in extra {
        w.add_metadata(*k, v.clone()).unwrap();
    }
    Gguf::parse(&w.to_bytes().unwrap()).unwrap()
}

#[test]
fn gguf_special_token_ids_are_range_checked_before_narrowing() {
    let ok = spm_gguf(&[("tokenizer.ggml.bos_token_id", Value::U32(1))]);
    assert_eq!(GgufTokenizer::from_gguf(&ok, "t.gguf").unwrap().bos, Some(1));
    // 2^32 + 1 used to wrap to the valid id 1.
    let wrapped = spm_gguf(&[("tokenizer.ggml.bos_token_id", Value::U64((1 << 32) + 1))]);
    assert_eq!(GgufTokenizer::from_gguf(&wrapped, "t.gguf").unwrap().bos, None);
}

#[test]
fn safetensors_from_bytes_reads_what_open_reads() {
    let path = fixture("tiny-bert/model.safetensors");
    let a = SafetensorsFile::open(&path).unwrap();
    let b = SafetensorsFile::from_bytes(std::fs::read(&path).unwrap(), &path).unwrap();
    assert_eq!(a.entries(), b.entries());
    for e in a.entries() {
        assert_eq!(a.f32_tensor(&e.name, &e.shape).unwrap(), b.f32_tensor(&e.name, &e.shape).unwrap());
    }
    let e = SafetensorsFile::from_bytes(b"\x08\0\0\0\0\0\0\0{}".to_vec(), "bad.safetensors").unwrap_err();
    assert!(matches!(&e, Error::ModelFile { path, .. } if path == "bad.safetensors"), "{e}");
}

#[test]
fn tokenizer_json_from_bytes_loads_and_names_the_file_in_errors() {
    let path = fixture("tiny-bert/tokenizer.json");
    let tok = TextTokenizer::from_bytes(&std::fs::read(&path).unwrap(), &path, 8).unwrap();
    let b = tok.encode_batch(&["hello world", "a"]).unwrap();
    assert_eq!((b.batch, b.ids.len()), (2, 2 * b.seq));
    let e = TextTokenizer::from_bytes(b"{\"model\": 3}", "tok.json", 8).unwrap_err().to_string();
    assert!(e.contains("tok.json") && e.contains("bad tokenizer"), "{e}");
}

#[test]
fn tokenizer_json_that_tokenizers_would_panic_on_is_an_error() {
    // A control character inside the decoder: `tokenizers` unwrapped this JSON error.
    let e = TextTokenizer::from_bytes(b"{\n  \"decoder\": \"\x00\x00\"}", "tok.json", 8).unwrap_err().to_string();
    assert!(e.contains("tok.json") && e.contains("bad tokenizer JSON") && e.contains("control character"), "{e}");
}

#[test]
fn tokenizer_json_whose_decoder_holds_what_a_json_value_cannot_is_an_error() {
    // Well-formed JSON syntax that is no JSON value inside the decoder: `tokenizers` unwrapped
    // the error its decoder reader gets (a key that is not UTF-8 was the fuzz finding; the
    // syntax check skipped strings' bytes and numbers' range).
    for (bytes, why) in [
        (&b"{\n  \"decoder\": {\"paddi\xff\xffng\": 100}}"[..], "invalid unicode code point"),
        (b"{\"decoder\": {\"type\": \"\xc3\"}}", "invalid unicode code point"),
        (b"{\"decoder\": [1e400]}", "number out of range"),
        (b"{\"decoder\": \"\\ud800\"}", "hex escape"),
    ] {
        let e = TextTokenizer::from_bytes(bytes, "tok.json", 8).unwrap_err().to_string();
        assert!(e.contains("tok.json") && e.contains("bad tokenizer JSON") && e.contains(why), "{e}");
    }
}

/// The tiny-bert tokenizer with its post-processor changed by `edit`.
fn edited_tokenizer(edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let text = std::fs::read_to_string(fixture("tiny-bert/tokenizer.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut v["post_processor"]);
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn template_post_processors_that_would_panic_while_encoding_are_refused() {
    // `tokenizers` checks these when it builds a template, not when it reads one; encoding
    // then indexed a missing special token or a second sequence that one text does not have.
    let missing = edited_tokenizer(|p| {
        p["special_tokens"].as_object_mut().unwrap().remove("[SEP]");
    });
    let e = TextTokenizer::from_bytes(&missing, "tok.json", 8).unwrap_err().to_string();
    assert!(e.contains("`[SEP]`") && e.contains("not defined"), "{e}");
    let uses_b = edited_tokenizer(|p| p["single"][1]["Sequence"]["id"] = "B".into());
    let e = TextTokenizer::from_bytes(&uses_b, "tok.json", 8).unwrap_err().to_string();
    assert!(e.contains("`$B`"), "{e}");
    let nested = edited_tokenizer(|p| {
        let inner = p.clone();
        *p = serde_json::json!({"type": "Sequence", "processors": [inner]});
        p["processors"][0]["special_tokens"].as_object_mut().unwrap().remove("[CLS]");
    });
    let e = TextTokenizer::from_bytes(&nested, "tok.json", 8).unwrap_err().to_string();
    assert!(e.contains("`[CLS]`"), "{e}");
}

#[test]
fn a_bert_config_with_more_layers_than_memory_fails_at_the_first_missing_layer() {
    let text = std::fs::read_to_string(fixture("tiny-bert/config.json")).unwrap();
    let big = text.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1000000000000000");
    assert_ne!(big, text);
    let cfg = BertConfig::from_bytes(big.as_bytes(), Path::new("config.json")).unwrap();
    let weights = SafetensorsFile::open(fixture("tiny-bert/model.safetensors")).unwrap();
    // The list of every weight was built first: 1.6e16 entries.
    let e = bert::check_weights(&cfg, &weights, "bert.").unwrap_err();
    assert!(matches!(&e, Error::MissingTensor { name, .. } if name.starts_with("bert.encoder.layer.2.")), "{e}");
    let e = BertConfig::from_bytes(b"{\"vocab_size\": -1}", Path::new("c.json")).unwrap_err().to_string();
    assert!(e.contains("c.json") && e.contains("bad BERT config"), "{e}");
}
