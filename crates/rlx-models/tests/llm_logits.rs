//! Tiny Qwen3 and Llama GGUF models (tools/tiny_llm.py) against llama.cpp: logits of every
//! prompt position within 1e-3 relative, and the same 32 greedy tokens through the KV cache.

use rlx_driver::Device;
use rlx_gguf::{GgmlType, GgufFile, GgufWriter, Value};
use rlx_ir::DType;
use rlx_models::llm::{GenerateOptions, LlmModel, generate};
use rlx_models::sampling::SamplerConfig;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llm")
}

struct Reference {
    prompt: Vec<u32>,
    vocab: usize,
    logits: Vec<f32>,
    greedy: Vec<u32>,
}

fn reference(name: &str) -> Reference {
    let text = std::fs::read_to_string(fixtures().join(format!("{name}.json"))).expect("fixture (tools/tiny_llm.py)");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = |k: &str| v[k].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<_>>();
    Reference {
        prompt: ids("prompt_ids"),
        vocab: v["vocab"].as_u64().unwrap() as usize,
        logits: v["logits"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect(),
        greedy: ids("greedy"),
    }
}

/// max |a - b| over max |b|.
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let d = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    d / b.iter().map(|y| y.abs()).fold(0.0f32, f32::max)
}

/// Writes an F32 copy of a fixture (every F16 tensor widened) to the temp dir, as
/// tools/tiny_llm.py did for llama.cpp's F32 reference.
fn f32_copy(file: &str) -> PathBuf {
    let src = GgufFile::open(fixtures().join(file)).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.gguf().metadata() {
        let v = if k == "general.file_type" { Value::U32(0) } else { v.clone() };
        w.add_metadata(k.clone(), v).unwrap();
    }
    for t in src.tensors() {
        let data: Vec<u8> = t.to_f32().unwrap().iter().flat_map(|x| x.to_le_bytes()).collect();
        w.add_tensor(t.info.name.clone(), &t.info.dims, GgmlType::F32, data).unwrap();
    }
    // One file per call: tests running at once may copy the same fixture.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("rlx-{}-{call}-{file}-f32.gguf", std::process::id()));
    w.write_file(&out).unwrap();
    out
}

/// `reference` names the llama.cpp run; `file` the GGUF file our side reads.
fn check(reference_name: &str, file: impl AsRef<Path>) {
    let r = reference(reference_name);
    let ctx = (r.prompt.len() + r.greedy.len()).max(64);
    // llama.cpp ran with an f32 cache (tools/tiny_llm.py): so does this side.
    let mut m = LlmModel::load(fixtures().join(file), Device::Cpu, ctx).unwrap().with_kv_dtype(DType::F32).unwrap();
    assert_eq!(m.config().vocab_size, r.vocab);
    let logits = m.forward_all(std::slice::from_ref(&r.prompt)).unwrap().remove(0);
    let e = rel_err(&logits, &r.logits);
    assert!(e < 1e-3, "{reference_name}: logits differ from llama.cpp by {e} (relative)");

    // The cache path gives the same last-position logits as the full forward pass.
    let last = m.prefill(std::slice::from_ref(&r.prompt)).unwrap().remove(0);
    let tail = &logits[(r.prompt.len() - 1) * r.vocab..];
    assert!(rel_err(&last, tail) < 1e-5, "{reference_name}: prefill differs from forward_all");

    let opts = GenerateOptions { max_tokens: r.greedy.len(), sampler: SamplerConfig::default(), stop_tokens: vec![] };
    let mut streamed = vec![];
    let stats = generate(&mut m, &r.prompt, &opts, |t| {
        streamed.push(t);
        true
    })
    .unwrap();
    assert_eq!(stats.tokens, r.greedy, "{reference_name}: greedy tokens differ from llama.cpp");
    assert_eq!(streamed, r.greedy);
}

#[test]
fn qwen3_f32_matches_llama_cpp() {
    // llama.cpp ran an F32 copy of the F16 file: the same values, computed in f32.
    let f = f32_copy("qwen3-f16.gguf");
    check("qwen3-f32", &f);
    std::fs::remove_file(f).unwrap();
}

#[test]
fn qwen3_f16_matches_llama_cpp() {
    check("qwen3-f16", "qwen3-f16.gguf");
}

// llama.cpp rounds the scale of its Q8_0 activation blocks to f16 (ggml's block_q8_0); rlx-cpu
// keeps it f32, which moves these logits ~1.5% (measured; rlx-cpu's `quantize_q80` owns the fix).
#[test]
fn qwen3_q8_0_matches_llama_cpp() {
    check("qwen3-q8_0", "qwen3-q8_0.gguf");
}

#[test]
fn qwen3_q4_k_m_matches_llama_cpp() {
    check("qwen3k-q4_k_m", "qwen3k-q4_k_m.gguf");
}

/// 56 prompt tokens: two 48-row blocks of queries in the attention kernel, which the 9-token
/// prompt never splits.
#[test]
fn qwen3_f32_long_prompt_matches_llama_cpp() {
    let f = f32_copy("qwen3-f16.gguf");
    check("qwen3-f32-long", &f);
    std::fs::remove_file(f).unwrap();
}

/// The default f16 KV cache against llama.cpp's default, the same (tools/tiny_llm.py
/// --f16-cache-reference): the 56-token prompt through the F32 Qwen3 model, the last prompt
/// position's logits and 32 greedy tokens, each decode step reading every earlier key and value
/// rounded to f16 on both sides (llama.cpp also rounds the queries and probabilities to f16).
#[test]
fn qwen3_f16_kv_cache_matches_llama_cpp() {
    let (r, f32_kv) = (reference("qwen3-f32-long-kvf16"), reference("qwen3-f32-long"));
    let f = f32_copy("qwen3-f16.gguf");
    let mut m = LlmModel::load(&f, Device::Cpu, r.prompt.len() + r.greedy.len()).unwrap();
    assert_eq!(m.kv_dtype(), DType::F16);
    let last = m.prefill(std::slice::from_ref(&r.prompt)).unwrap().remove(0);
    let tail = |l: &[f32]| l[(r.prompt.len() - 1) * r.vocab..].to_vec();
    let (e, e_kv) = (rel_err(&last, &tail(&r.logits)), rel_err(&tail(&f32_kv.logits), &tail(&r.logits)));
    eprintln!("f16 KV cache: RLX vs llama.cpp {e:.2e}; llama.cpp f16 vs f32 cache {e_kv:.2e} (relative)");
    assert!(e < 1e-3, "last-position logits differ from llama.cpp's by {e} (relative)");
    let opts = GenerateOptions { max_tokens: r.greedy.len(), sampler: SamplerConfig::default(), stop_tokens: vec![] };
    assert_eq!(generate(&mut m, &r.prompt, &opts, |_| true).unwrap().tokens, r.greedy);
    std::fs::remove_file(f).unwrap();
}

/// 56 prompt tokens through the Q4_K_M model: prefill runs the batched kernels (AMX tiles with
/// bf16 activations where the CPU has AMX), which the 9-token prompt never reaches. Quantizing the
/// activations moves these logits by percents in llama.cpp too (Q8_K), so both are held against
/// exact f32 arithmetic on the dequantized weights: RLX must come at least as close as llama.cpp
/// (measured: llama.cpp and the int8 kernels 1.8% off, AMX 0.5%), and greedy decoding must
/// give llama.cpp's tokens.
#[test]
fn qwen3_q4_k_m_long_prompt_is_as_close_to_exact_as_llama_cpp() {
    let r = reference("qwen3k-q4_k_m-long");
    let ctx = r.prompt.len() + r.greedy.len();
    let f = f32_copy("qwen3k-q4_k_m.gguf");
    let exact = LlmModel::load(&f, Device::Cpu, ctx).unwrap().forward_all(std::slice::from_ref(&r.prompt)).unwrap();
    std::fs::remove_file(f).unwrap();
    let mut m = LlmModel::load(fixtures().join("qwen3k-q4_k_m.gguf"), Device::Cpu, ctx)
        .unwrap()
        .with_kv_dtype(DType::F32)
        .unwrap();
    let ours = m.forward_all(std::slice::from_ref(&r.prompt)).unwrap();
    let (e_ours, e_llama) = (rel_err(&ours[0], &exact[0]), rel_err(&r.logits, &exact[0]));
    assert!(e_llama > 1e-3, "the reference should show quantized activations' error ({e_llama})");
    assert!(e_ours <= 1.05 * e_llama, "RLX {e_ours} from exact, llama.cpp {e_llama}");
    let opts = GenerateOptions { max_tokens: r.greedy.len(), sampler: SamplerConfig::default(), stop_tokens: vec![] };
    assert_eq!(generate(&mut m, &r.prompt, &opts, |_| true).unwrap().tokens, r.greedy);
}

#[test]
fn llama_f32_matches_llama_cpp() {
    let f = f32_copy("llama-f16.gguf");
    check("llama-f32", &f);
    std::fs::remove_file(f).unwrap();
}

#[test]
fn llama_f16_matches_llama_cpp() {
    check("llama-f16", "llama-f16.gguf");
}

// llama.cpp rounds the scale of its Q8_0 activation blocks to f16 (ggml's block_q8_0); rlx-cpu
// keeps it f32, which moves these logits ~1.5% (measured; rlx-cpu's `quantize_q80` owns the fix).
#[test]
fn llama_q8_0_matches_llama_cpp() {
    check("llama-q8_0", "llama-q8_0.gguf");
}
