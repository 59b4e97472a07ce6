//! Repacked quantized weights: once `prepare` has repacked them (one copy shared by the decode
//! and prefill graphs), the memory-mapped file's pages of those weights are released, and the
//! model still gives llama.cpp's logits and greedy tokens.

use rlx_driver::Device;
use rlx_ir::DType;
use rlx_ir::QuantScheme;
use rlx_models::llm::{LlmModel, ParamKind};
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llm")
}

#[test]
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn prepare_releases_the_file_pages_of_repacked_weights() {
    // Repacking needs AVX2; RLX_QUANT_REPACK=0, RLX_QUANT_RELEASE=0 or RLX_QUANT_ISA=scalar
    // turn it off on purpose.
    let is = |v: &str, x: &str| std::env::var(v).is_ok_and(|v| v == x);
    let off = is("RLX_QUANT_REPACK", "0") || is("RLX_QUANT_RELEASE", "0") || is("RLX_QUANT_ISA", "scalar");
    if !std::is_x86_feature_detected!("avx2") || off {
        eprintln!("no repacked path here: skipped");
        return;
    }
    let text = std::fs::read_to_string(fixtures().join("qwen3k-q4_k_m.json")).expect("fixture (tools/tiny_llm.py)");
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = |k: &str| r[k].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<_>>();
    let (prompt, greedy) = (ids("prompt_ids"), ids("greedy"));
    let want: Vec<f32> = r["logits"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    // llama.cpp's reference ran with an f32 cache.
    let mut m = LlmModel::load(fixtures().join("qwen3k-q4_k_m.gguf"), Device::Cpu, 64)
        .unwrap()
        .with_kv_dtype(DType::F32)
        .unwrap();
    let (before, copies) = (rlx_cpu::kernels::quant_released_bytes(), rlx_cpu::kernels::quant_repacks());
    m.prepare(1, prompt.len()).unwrap();
    let released = rlx_cpu::kernels::quant_released_bytes() - before;
    // Every K-quant linear weight (the tied LM head too) loses its whole 4 KiB pages.
    let w = m.weights();
    let (mut whole, mut packed) = (0usize, 0u64);
    for p in w.params() {
        if matches!(p.kind, ParamKind::Packed(QuantScheme::Q4_K | QuantScheme::Q6_K)) && p.weight.is_linear() {
            let b = w.bytes(p);
            let (lo, hi) =
                ((b.as_ptr() as usize).next_multiple_of(4096), (b.as_ptr() as usize + b.len()) / 4096 * 4096);
            whole += hi.saturating_sub(lo);
            packed += 1;
        }
    }
    assert!(whole > 0 && packed > 0);
    assert!(released as usize >= whole, "released {released} bytes, want at least {whole}");
    assert!(rlx_cpu::kernels::quant_repacks() - copies >= packed);
    // Prefill (m > 1) and decode read only the shared copy: llama.cpp's logits of the last
    // prompt position and its greedy tokens.
    let logits = m.prefill(std::slice::from_ref(&prompt)).unwrap().remove(0);
    let tail = &want[want.len() - logits.len()..];
    let err = logits.iter().zip(tail).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max)
        / tail.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(err < 1e-3, "logits differ from llama.cpp by {err} (relative)");
    let mut got = vec![];
    let mut next = argmax(&logits);
    while got.len() < greedy.len() {
        got.push(next);
        if got.len() < greedy.len() {
            next = argmax(&m.decode(&[next]).unwrap()[0]);
        }
    }
    assert_eq!(got, greedy, "greedy tokens differ from llama.cpp");
}

fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32
}
