//! `rlx generate` end to end on the tiny committed GGUF models (tools/tiny_llm.py): greedy
//! tokens equal llama.cpp's, streamed text, JSON output, and errors.

use std::path::PathBuf;
use std::process::{Command, Output};

fn rlx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlx")).args(args).output().expect("the rlx binary runs")
}

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rlx-models/tests/fixtures/llm").join(name);
    p.to_str().unwrap().to_string()
}

#[test]
fn greedy_json_gives_llama_cpp_tokens() {
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("llama-f16.json")).unwrap()).unwrap();
    let ids: Vec<String> = r["prompt_ids"].as_array().unwrap().iter().map(|x| x.to_string()).collect();
    let model = fixture("llama-f16.gguf");
    let ids = ids.join(",");
    let args = ["generate", "--threads", "1", "--model", &model, "--prompt-ids", &ids, "--max-tokens", "32"];
    // llama.cpp's reference ran with an f32 KV cache.
    let opts = ["--temperature", "0", "--ignore-eos", "--json", "--kv-dtype", "f32"];
    let out = rlx(&[&args[..], &opts].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tokens"], r["greedy"]);
    assert!(v["text"].is_string() && v["prefill_tok_s"].as_f64().unwrap() > 0.0);
    assert!(v["decode_tok_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn text_prompts_stream_after_the_prompt() {
    let model = fixture("qwen3-f16.gguf");
    let out = rlx(&["generate", "--model", &model, "--prompt", "hello world", "--max-tokens", "5", "--seed", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("hello world"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tok/s"));
}

#[test]
fn bad_arguments_are_errors() {
    let model = fixture("qwen3-f16.gguf");
    let out = rlx(&["generate", "--model", &model, "--max-tokens", "5"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--prompt"));
    let out = rlx(&["generate", "--model", &model, "--prompt-ids", "1,99999", "--max-tokens", "2"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("outside the vocabulary"));
    let out = rlx(&["generate", "--model", "x.bin", "--prompt", "a"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains(".gguf"));
    let out = rlx(&["generate", "--model", &model, "--prompt", "a", "--top-p", "0"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("top_p"));
    let out = rlx(&["generate", "--model", &model, "--prompt", "a", "--kv-dtype", "q4"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("f16"));
}

/// A Hugging Face checkpoint folder (tools/hf_tiny_llm.py): the same greedy tokens as its GGUF
/// conversion, the text prompt through tokenizer.json, `--quantize`, and a typed error naming the
/// tensor a quantizer cannot take.
#[test]
fn a_hugging_face_folder_generates_like_its_gguf_conversion() {
    let hf = |n: &str| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rlx-models/tests/fixtures/hf").join(n);
    let (dir, gguf) = (hf("llama-bf16"), hf("llama-bf16.gguf"));
    let opts = ["--prompt", "hello world, the tiny model", "--max-tokens", "16", "--temperature", "0", "--json"];
    let tokens = |model: &PathBuf, extra: &[&str]| {
        let out = rlx(&[&["generate", "--model", model.to_str().unwrap()], &opts[..], extra].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["tokens"].clone()
    };
    let t = tokens(&dir, &["--ignore-eos"]);
    assert_eq!(t.as_array().unwrap().len(), 16);
    assert_eq!(t, tokens(&gguf, &["--ignore-eos"]));
    assert!(tokens(&dir, &["--quantize", "q8_0"]).is_array());
    let out = rlx(&["generate", "--model", dir.to_str().unwrap(), "--prompt", "a", "--quantize", "q4_k"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("model.embed_tokens.weight") && err.contains("Q4_K"), "{err}");
}
