//! Tiny Qwen3 and Llama Hugging Face checkpoints (tools/hf_tiny_llm.py): logits against an f64
//! numpy forward of HF's modeling equations, greedy tokens against the same weights converted to
//! GGUF (llama.cpp's q/k permutation for Llama) through the GGUF path, the tokenizer against the
//! `tokenizers` package, on-load quantization, and typed errors for broken folders.

use rlx_driver::Device;
use rlx_gguf::GgmlType;
use rlx_ir::DType;
use rlx_models::llm::{GenerateOptions, LlmModel, LoadOptions, ParamKind, generate};
use rlx_models::sampling::SamplerConfig;
use rlx_models::{HfTokenizer, LlmTokenizer, load_tokenizer};
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf")
}

struct Reference {
    prompt: String,
    ids: Vec<u32>,
    vocab: usize,
    logits: Vec<f32>,
    greedy: Vec<u32>,
    json: serde_json::Value,
}

fn reference(arch: &str) -> Reference {
    let text =
        std::fs::read_to_string(fixtures().join(format!("{arch}.json"))).expect("fixture (tools/hf_tiny_llm.py)");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    Reference {
        prompt: v["prompt"].as_str().unwrap().into(),
        ids: ids(&v["prompt_ids"]),
        vocab: v["vocab"].as_u64().unwrap() as usize,
        logits: floats(&v["logits"]),
        greedy: ids(&v["greedy"]),
        json: v,
    }
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// A fresh temp folder holding a copy of fixture folder `name` (one per call: tests run at once).
fn copy_folder(name: &str) -> PathBuf {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dst = std::env::temp_dir().join(format!("rlx-hf-{}-{call}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(fixtures().join(name)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    dst
}

/// The tensors of a safetensors file: (name, dtype, shape, bytes).
type Tensors = Vec<(String, Dtype, Vec<usize>, Vec<u8>)>;

fn read_shard(path: &Path) -> Tensors {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.tensors().into_iter().map(|(n, t)| (n, t.dtype(), t.shape().to_vec(), t.data().to_vec())).collect()
}

fn write_shard(path: &Path, tensors: &Tensors) {
    let views: Vec<(String, TensorView<'_>)> =
        tensors.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

fn shards(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    v.sort();
    v
}

/// An F32 checkpoint: the bf16 fixture with every shard widened (exactly: the values are bf16's).
fn f32_folder(arch: &str) -> PathBuf {
    let dir = copy_folder(&format!("{arch}-bf16"));
    for shard in shards(&dir) {
        let mut t = read_shard(&shard);
        for (_, dtype, _, bytes) in &mut t {
            *bytes = bytes
                .chunks_exact(2)
                .flat_map(|c| ((u16::from_le_bytes([c[0], c[1]]) as u32) << 16).to_le_bytes())
                .collect();
            *dtype = Dtype::F32;
        }
        write_shard(&shard, &t);
    }
    dir
}

/// The bf16 fixture folder with every tensor in f16 (bf16 values fit f16's range here; the
/// rounding differs in the last bits).
fn f16_folder(arch: &str) -> PathBuf {
    let dir = copy_folder(&format!("{arch}-bf16"));
    for shard in shards(&dir) {
        let mut t = read_shard(&shard);
        for (_, dtype, _, bytes) in &mut t {
            *bytes = bytes
                .chunks_exact(2)
                .flat_map(|c| {
                    let v = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
                    half::f16::from_f32(v).to_le_bytes()
                })
                .collect();
            *dtype = Dtype::F16;
        }
        write_shard(&shard, &t);
    }
    dir
}

fn edit_json(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// The model with an f32 KV cache (the reference keeps every value exact).
fn load(path: &Path, opts: &LoadOptions) -> LlmModel {
    LlmModel::load_with(path, Device::Cpu, 64, opts).unwrap().with_kv_dtype(DType::F32).unwrap()
}

fn greedy(m: &mut LlmModel, prompt: &[u32], n: usize) -> Vec<u32> {
    let opts = GenerateOptions { max_tokens: n, sampler: SamplerConfig::default(), stop_tokens: vec![] };
    generate(m, prompt, &opts, |_| true).unwrap().tokens
}

fn check_f32(arch: &str) {
    let r = reference(arch);
    let dir = f32_folder(arch);
    let mut m = load(&dir, &LoadOptions::default());
    assert_eq!(m.config().vocab_size, r.vocab);
    // Every weight of an aligned F32 checkpoint is used in place from the memory-mapped shards.
    for p in m.weights().params() {
        assert_eq!(p.kind, ParamKind::Dense, "{}", p.weight.hf_name());
        assert!(m.weights().file_range(p).is_some(), "{} was copied", p.weight.hf_name());
    }
    let logits = m.forward_all(std::slice::from_ref(&r.ids)).unwrap().remove(0);
    let e = max_abs_diff(&logits, &r.logits);
    eprintln!("{arch} f32 checkpoint: logits max |error| vs f64 = {e:.2e}");
    assert!(e < 1e-4, "{arch}: logits differ from the f64 reference by {e}");
    // Greedy through the KV cache: the reference's margins are >= 0.1, far above f32 rounding.
    assert_eq!(greedy(&mut m, &r.ids, r.greedy.len()), r.greedy, "{arch}: greedy tokens");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn qwen3_f32_checkpoint_matches_the_f64_reference() {
    check_f32("qwen3");
}

#[test]
fn llama_f32_checkpoint_matches_the_f64_reference() {
    check_f32("llama");
}

/// BF16 linear weights run as GGUF's BF16 weights do (ggml's convention): each product rounds its
/// activations to bf16 (8 significant bits, relative error up to 2^-9) and accumulates in f32,
/// while the reference multiplies unrounded f64 activations. Over 2 layers of 7 products that
/// moves the logits by about 1% of their largest magnitude (measured: 0.5% Qwen3, 1.5% Llama,
/// whose untied LM head gives logits up to ~16; the products of bf16 weights also come out in
/// bf16, as PyTorch's do), so the bound is 3% relative to the largest logit; `greedy_tokens_equal_the_gguf_conversion` holds the bf16 arithmetic itself exactly.
#[test]
fn bf16_checkpoints_match_the_f64_reference_within_bf16_rounding() {
    for arch in ["qwen3", "llama"] {
        let r = reference(arch);
        let mut m = load(&fixtures().join(format!("{arch}-bf16")), &LoadOptions::default());
        let logits = m.forward_all(std::slice::from_ref(&r.ids)).unwrap().remove(0);
        let (e, scale) = (max_abs_diff(&logits, &r.logits), r.logits.iter().fold(0.0f32, |a, x| a.max(x.abs())));
        eprintln!("{arch} bf16 checkpoint: logits max |error| vs f64 = {e:.2e} (max |logit| {scale:.2})");
        assert!(e / scale < 0.03, "{arch}: bf16 logits differ from the f64 reference by {e} (max |logit| {scale})");
        // The token embedding is gathered as bf16 rows from the map, not widened at load; the
        // CPU multiplies bf16 natively, so every linear weight stays in the map as stored too.
        let emb = &m.weights().params()[0];
        assert_eq!(emb.kind, ParamKind::Half(DType::BF16));
        assert!(m.weights().file_range(emb).is_some());
        for p in m.weights().params().iter().filter(|p| p.weight.is_linear()) {
            assert_eq!(p.kind, ParamKind::Half(DType::BF16), "{:?}", p.weight);
            assert!(m.weights().file_range(p).is_some(), "{:?} was copied", p.weight);
        }
    }
}

/// An f16 checkpoint keeps its linear weights in the map as stored too (products in f16, as
/// PyTorch's f16 layers give them), within f16 rounding of the f64 reference.
#[test]
fn f16_checkpoints_keep_their_weights_as_stored() {
    for arch in ["qwen3", "llama"] {
        let r = reference(arch);
        let mut m = load(&f16_folder(arch), &LoadOptions::default());
        for p in m.weights().params().iter().filter(|p| p.weight.is_linear()) {
            assert_eq!(p.kind, ParamKind::Half(DType::F16), "{:?}", p.weight);
            assert!(m.weights().file_range(p).is_some(), "{:?} was copied", p.weight);
        }
        let logits = m.forward_all(std::slice::from_ref(&r.ids)).unwrap().remove(0);
        let (e, scale) = (max_abs_diff(&logits, &r.logits), r.logits.iter().fold(0.0f32, |a, x| a.max(x.abs())));
        eprintln!("{arch} f16 checkpoint: logits max |error| vs f64 = {e:.2e} (max |logit| {scale:.2})");
        // f16 keeps 11 bits: an order of magnitude inside the bf16 bound.
        assert!(e / scale < 0.005, "{arch}: f16 logits differ from the f64 reference by {e} (max |logit| {scale})");
    }
}

/// The same bf16 weights through the GGUF path (llama.cpp's layout: Llama's q/k rows permuted
/// for adjacent-pair RoPE) give the same greedy tokens and logits as through the HF path.
#[test]
fn greedy_tokens_equal_the_gguf_conversion() {
    for arch in ["qwen3", "llama"] {
        let r = reference(arch);
        let mut hf = load(&fixtures().join(format!("{arch}-bf16")), &LoadOptions::default());
        let mut gg = load(&fixtures().join(format!("{arch}-bf16.gguf")), &LoadOptions::default());
        assert!(!hf.config().rope_interleaved);
        assert_eq!(gg.config().rope_interleaved, arch == "llama");
        let (a, b) = (
            hf.forward_all(std::slice::from_ref(&r.ids)).unwrap(),
            gg.forward_all(std::slice::from_ref(&r.ids)).unwrap(),
        );
        let e = max_abs_diff(&a[0], &b[0]);
        eprintln!("{arch}: HF vs GGUF path logits max |diff| = {e:.2e}");
        assert!(e < 1e-4, "{arch}: HF and GGUF logits differ by {e}");
        let (ta, tb) = (greedy(&mut hf, &r.ids, 16), greedy(&mut gg, &r.ids, 16));
        assert_eq!(ta, tb, "{arch}: greedy tokens differ between the HF folder and its GGUF conversion");
    }
}

#[test]
fn llama3_rope_scaling_matches_the_reference_and_other_types_are_refused() {
    let r = reference("llama");
    let dir = f32_folder("llama");
    let scaling = r.json["rope_scaling"].clone();
    edit_json(&dir.join("config.json"), |v| v["rope_scaling"] = scaling);
    let mut m = load(&dir, &LoadOptions::default());
    assert!(m.config().rope_scaling.is_some());
    let logits = m.forward_all(std::slice::from_ref(&r.ids)).unwrap().remove(0);
    let e = max_abs_diff(&logits, &floats(&r.json["rope_scaling_logits"]));
    eprintln!("llama3 rope_scaling: logits max |error| vs f64 = {e:.2e}");
    assert!(e < 1e-4, "llama3-scaled logits differ by {e}");
    // The scaling changes the logits (else the check above would prove nothing).
    assert!(max_abs_diff(&logits, &r.logits) > 1e-2);
    // Cache path = full forward with the scaled table too.
    let last = m.prefill(std::slice::from_ref(&r.ids)).unwrap().remove(0);
    assert!(max_abs_diff(&last, &logits[(r.ids.len() - 1) * r.vocab..]) < 1e-5);
    edit_json(&dir.join("config.json"), |v| {
        v["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 4.0})
    });
    let e = LlmModel::load(&dir, Device::Cpu, 8).unwrap_err().to_string();
    assert!(e.contains("config.json") && e.contains("`yarn` is not supported"), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn tokenizer_matches_the_tokenizers_package_and_the_gguf_conversion() {
    for arch in ["qwen3", "llama"] {
        let r = reference(arch);
        let dir = fixtures().join(format!("{arch}-bf16"));
        let tok = HfTokenizer::from_dir(&dir).unwrap();
        assert_eq!(tok.encode(&r.prompt).unwrap(), r.ids, "{arch}");
        assert_eq!(tok.add_bos, arch == "llama", "{arch}: BOS from the post-processor");
        assert_eq!(tok.decode(&r.ids), r.prompt);
        let streamed: Vec<u8> = r.ids.iter().flat_map(|&t| tok.piece_bytes(t)).collect();
        assert_eq!(String::from_utf8(streamed).unwrap(), r.prompt);
        let chat = r.json["chat"].as_str().unwrap();
        assert_eq!(tok.encode_special(chat, false).unwrap(), ids(&r.json["chat_ids"]), "{arch}: chat");
        assert_eq!(tok.stop, ids(&r.json["stop_ids"]), "{arch}: stop tokens");
        let template = tok.chat_template.as_deref().unwrap();
        assert!(template.contains(if arch == "qwen3" { "<|im_start|>" } else { "<|start_header_id|>" }));
        // The GGUF conversion's embedded tokenizer agrees; both through `load_tokenizer`.
        let gg = load_tokenizer(fixtures().join(format!("{arch}-bf16.gguf"))).unwrap();
        let hf: Box<dyn LlmTokenizer> = load_tokenizer(&dir).unwrap();
        assert_eq!(gg.encode(&r.prompt).unwrap(), r.ids, "{arch}: GGUF tokenizer");
        assert_eq!(hf.encode_special(chat, false).unwrap(), gg.encode_special(chat, false).unwrap());
        assert_eq!(hf.eos(), gg.eos());
        assert_eq!(hf.chat_template(), gg.chat_template());
    }
}

#[test]
fn quantized_on_load_to_q8_0_and_q4_k_refused_for_short_rows() {
    let r = reference("qwen3");
    let dir = fixtures().join("qwen3-bf16");
    let opts = LoadOptions { quantize: Some(GgmlType::Q8_0) };
    let mut m = load(&dir, &opts);
    let kinds: Vec<ParamKind> = m.weights().params().iter().filter(|p| p.weight.is_linear()).map(|p| p.kind).collect();
    assert!(kinds.iter().all(|k| matches!(k, ParamKind::Packed(_))), "{kinds:?}");
    let logits = m.forward_all(std::slice::from_ref(&r.ids)).unwrap().remove(0);
    let scale = r.logits.iter().fold(0.0f32, |a, x| a.max(x.abs()));
    let e = max_abs_diff(&logits, &r.logits) / scale;
    eprintln!("qwen3 Q8_0 on load: logits max |error| / max |logit| = {e:.2e}");
    // Measured 2.7%: the Q8_0 weights alone move this tiny model's logits by 2.4% (gguf-py's
    // Q8_0 round trip through the f64 forward), the Q8 activations of rlx-cpu the rest.
    assert!(e < 0.05, "Q8_0 logits differ by {e} (relative)");
    let e = LlmModel::load_with(&dir, Device::Cpu, 8, &LoadOptions { quantize: Some(GgmlType::Q4_K) }).unwrap_err();
    let e = e.to_string();
    assert!(e.contains("model.embed_tokens.weight") && e.contains("q4_K") || e.contains("Q4_K"), "{e}");
}

fn load_err(dir: &Path) -> String {
    let e = LlmModel::load(dir, Device::Cpu, 8).unwrap_err().to_string();
    std::fs::remove_dir_all(dir).unwrap();
    e
}

#[test]
fn a_missing_shard_is_an_error_naming_it() {
    let dir = copy_folder("llama-bf16");
    std::fs::remove_file(dir.join("model-00002-of-00002.safetensors")).unwrap();
    let e = load_err(&dir);
    assert!(e.contains("model-00002-of-00002.safetensors") && e.contains("shard is missing"), "{e}");
}

#[test]
fn a_tensor_missing_from_the_index_or_of_the_wrong_shape_or_dtype_is_an_error_naming_it() {
    let q = "model.layers.0.self_attn.q_proj.weight";
    let dir = copy_folder("qwen3-bf16");
    edit_json(&dir.join("model.safetensors.index.json"), |v| {
        v["weight_map"].as_object_mut().unwrap().remove(q);
    });
    let e = load_err(&dir);
    assert!(e.contains("model.safetensors.index.json") && e.contains(q) && e.contains("missing"), "{e}");

    for (what, dtype, shape, want) in [
        ("shape", Dtype::BF16, vec![32, 64], "has shape [32, 64]"),
        ("dtype", Dtype::I16, vec![64, 64], "has dtype I16"),
    ] {
        let dir = copy_folder("qwen3-bf16");
        let shard = dir.join("model-00001-of-00002.safetensors");
        let mut t = read_shard(&shard);
        let entry = t.iter_mut().find(|(n, ..)| n == q).unwrap();
        entry.3.truncate(shape.iter().product::<usize>() * 2);
        (entry.1, entry.2) = (dtype, shape);
        write_shard(&shard, &t);
        let e = load_err(&dir);
        assert!(e.contains("model-00001-of-00002.safetensors") && e.contains(q) && e.contains(want), "{what}: {e}");
    }
}

#[test]
fn bad_configs_are_errors_naming_config_json_and_the_field() {
    let cases: [(&str, serde_json::Value, &str); 6] = [
        ("model_type", "gpt2".into(), "architecture `gpt2` (model_type) is not supported"),
        ("num_key_value_heads", 3.into(), "multiple of head_count_kv 3"),
        ("hidden_size", (-64).into(), "`hidden_size` must be a non-negative integer"),
        ("intermediate_size", (1u64 << 40).into(), "out of range"),
        ("rms_norm_eps", "tiny".into(), "`rms_norm_eps` must be a number"),
        ("attention_bias", true.into(), "`attention_bias: true` is not supported"),
    ];
    for (key, value, want) in cases {
        let dir = copy_folder("llama-bf16");
        edit_json(&dir.join("config.json"), |v| v[key] = value.clone());
        let e = load_err(&dir);
        assert!(e.contains("config.json") && e.contains(want), "{key}: {e}");
    }
    let dir = copy_folder("llama-bf16");
    std::fs::remove_file(dir.join("config.json")).unwrap();
    let e = load_err(&dir);
    assert!(e.contains("config.json"), "{e}");
}

/// An unsharded checkpoint (`model.safetensors`, no index) loads the same weights; a folder with
/// neither is an error naming what is missing.
#[test]
fn an_unsharded_checkpoint_loads_and_a_folder_without_weights_is_an_error() {
    let r = reference("qwen3");
    let dir = copy_folder("qwen3-bf16");
    let mut all: Tensors = vec![];
    for shard in shards(&dir) {
        all.extend(read_shard(&shard));
        std::fs::remove_file(shard).unwrap();
    }
    std::fs::remove_file(dir.join("model.safetensors.index.json")).unwrap();
    write_shard(&dir.join("model.safetensors"), &all);
    let mut m = load(&dir, &LoadOptions::default());
    let mut sharded = load(&fixtures().join("qwen3-bf16"), &LoadOptions::default());
    let a = m.forward_all(std::slice::from_ref(&r.ids)).unwrap().remove(0);
    assert_eq!(a, sharded.forward_all(std::slice::from_ref(&r.ids)).unwrap().remove(0));
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let e = load_err(&dir);
    assert!(e.contains("no model.safetensors or model.safetensors.index.json"), "{e}");
}
