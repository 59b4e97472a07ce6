//! The KV cache path against the full forward pass: decode step by step, batched sequences of
//! different lengths (left-padded), errors on misuse.

use rlx_driver::Device;
use rlx_ir::DType;
use rlx_models::llm::{GenerateOptions, LlmModel, generate, generate_batch};
use rlx_models::sampling::SamplerConfig;
use std::path::PathBuf;

/// The model with an f32 cache: it holds exactly the K and V the full pass computes, so the
/// cache path is held to the full pass's logits and tokens (half caches: `half_precision_caches_...`).
fn model(file: &str, ctx: usize) -> LlmModel {
    model_with(file, ctx, DType::F32)
}

fn model_with(file: &str, ctx: usize, kv: DType) -> LlmModel {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llm").join(file);
    LlmModel::load(p, Device::Cpu, ctx).unwrap().with_kv_dtype(kv).unwrap()
}

/// max |a - b| over max |b| (F16 weights round activations to f16 as ggml does, so the GEMV of
/// decode and the GEMM of prefill may land one f16 step apart).
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    let d = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
    d / b.iter().map(|y| y.abs()).fold(0.0, f32::max)
}

#[test]
fn decode_steps_match_the_full_forward_pass() {
    for file in ["qwen3-f16.gguf", "llama-q8_0.gguf", "qwen3k-q4_k_m.gguf"] {
        let mut m = model(file, 16);
        let v = m.config().vocab_size;
        let seq: Vec<u32> = vec![5, 77, 120, 3, 250, 9, 41, 100];
        let full = m.forward_all(std::slice::from_ref(&seq)).unwrap().remove(0);
        let mut got = m.prefill(&[seq[..3].to_vec()]).unwrap().remove(0);
        for (i, &t) in seq.iter().enumerate().skip(3) {
            let want = &full[(i - 1) * v..i * v];
            assert!(max_diff(&got, want) < 1e-3, "{file}: position {}: {}", i - 1, max_diff(&got, want));
            got = m.decode(&[t]).unwrap().remove(0);
        }
        assert!(max_diff(&got, &full[(seq.len() - 1) * v..]) < 1e-3, "{file}: last position");
        assert_eq!(m.position(), seq.len());
    }
}

#[test]
fn half_precision_caches_hold_half_the_bytes_and_stay_near_the_full_pass() {
    use rlx_models::llm::{GraphSpec, k_cache_name, v_cache_name};
    let seq: Vec<u32> = vec![5, 77, 120, 3, 250, 9, 41, 100];
    // Measured (max over positions): f16 1.8e-3 of the logits' range, bf16 (8-bit mantissa)
    // 8.2e-3 on the F16 files; the 8-bit activations of quantized weights turn any change in the
    // attention output into whole quantization steps (q8_0: 1.3-2.0e-2 whatever the cache dtype).
    for (file, kv, tol) in [
        ("qwen3-f16.gguf", DType::F16, 3e-3),
        ("llama-f16.gguf", DType::F16, 3e-3),
        ("qwen3-f16.gguf", DType::BF16, 1.5e-2),
        ("llama-f16.gguf", DType::BF16, 1.5e-2),
        ("qwen3k-q4_k_m.gguf", DType::F16, 5e-2),
    ] {
        let mut m = model_with(file, 16, kv);
        assert_eq!(m.kv_dtype(), kv);
        let v = m.config().vocab_size;
        let full = m.forward_all(std::slice::from_ref(&seq)).unwrap().remove(0);
        let mut got = m.prefill(&[seq[..3].to_vec()]).unwrap().remove(0);
        for (i, &t) in seq.iter().enumerate().skip(3) {
            let d = max_diff(&got, &full[(i - 1) * v..i * v]);
            assert!(d < tol, "{file} {kv}: position {}: {d}", i - 1);
            got = m.decode(&[t]).unwrap().remove(0);
        }
        let dec = m.compiled(&GraphSpec { batch: 1, seq: 1, cache: Some(16), all_logits: false }).unwrap();
        let cfg = m.config();
        for name in [k_cache_name(0), v_cache_name(cfg.layers - 1)] {
            let bytes = dec.param_share(&name).unwrap().buffer.len();
            assert_eq!(bytes, cfg.kv_heads * 16 * cfg.head_dim * 2, "{file}: {name}");
        }
    }
    // The dtype is chosen before the graphs compile, and only among the float caches.
    let mut m = model_with("qwen3-f16.gguf", 8, DType::F16);
    assert!(
        LlmModel::load(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llm/qwen3-f16.gguf"),
            Device::Cpu,
            8
        )
        .unwrap()
        .with_kv_dtype(DType::I32)
        .unwrap_err()
        .to_string()
        .contains("f32, f16 or bf16")
    );
    m.prefill(&[vec![1, 2]]).unwrap();
    assert!(m.with_kv_dtype(DType::F32).unwrap_err().to_string().contains("before any graph"));
}

#[test]
fn a_long_cache_with_few_filled_slots_gives_the_logits_of_a_tight_cache() {
    // The same left-padded batch in a 12-slot cache and in a 1024-slot one: attention visits
    // only the filled slots, so each step's logits agree to rounding.
    let prompts = vec![vec![1u32, 202, 215, 191], vec![1, 170]];
    for file in ["llama-q8_0.gguf", "qwen3-f16.gguf"] {
        let (mut tight, mut long) = (model(file, 12), model(file, 1024));
        let (mut a, mut b) = (tight.prefill(&prompts).unwrap(), long.prefill(&prompts).unwrap());
        for step in 0..8u32 {
            for (x, y) in a.iter().zip(&b) {
                assert!(max_diff(y, x) < 1e-5, "{file}: step {step}: {}", max_diff(y, x));
            }
            let next = [7 + step, 40 + 3 * step];
            (a, b) = (tight.decode(&next).unwrap(), long.decode(&next).unwrap());
        }
        assert_eq!((tight.position(), long.position()), (12, 12));
    }
}

#[test]
fn a_batch_of_different_lengths_generates_what_each_prompt_does_alone() {
    let prompts = vec![vec![1u32, 302, 315, 291, 289], vec![1, 270], vec![1, 275, 286, 298, 10, 11, 12]];
    let opts = GenerateOptions { max_tokens: 12, sampler: SamplerConfig::default(), stop_tokens: vec![] };
    let mut m = model("llama-f16.gguf", 32);
    let batched = generate_batch(&mut m, &prompts, &opts).unwrap();
    for (p, b) in prompts.iter().zip(&batched) {
        let alone = generate(&mut m, p, &opts, |_| true).unwrap();
        assert_eq!(&alone.tokens, b, "prompt {p:?}");
    }
}

#[test]
fn stop_tokens_end_generation_and_the_callback_can_stop_it() {
    let opts = GenerateOptions { max_tokens: 10, sampler: SamplerConfig::default(), stop_tokens: vec![] };
    let mut m = model("llama-f16.gguf", 32);
    let all = generate(&mut m, &[1, 302, 315], &opts, |_| true).unwrap().tokens;
    assert_eq!(all.len(), 10);
    let stop = GenerateOptions { stop_tokens: vec![all[3]], ..opts.clone() };
    let first = all.iter().position(|&t| t == all[3]).unwrap();
    assert_eq!(generate(&mut m, &[1, 302, 315], &stop, |_| true).unwrap().tokens, all[..first]);
    let mut n = 0;
    let some = generate(&mut m, &[1, 302, 315], &opts, |_| {
        n += 1;
        n < 4
    })
    .unwrap();
    assert_eq!(some.tokens, all[..4]);
    // Sampling with a seed repeats; another seed (almost surely) differs somewhere.
    let hot = |seed| GenerateOptions {
        sampler: SamplerConfig { temperature: 1.5, seed, ..Default::default() },
        ..opts.clone()
    };
    let a = generate(&mut m, &[1, 302], &hot(7), |_| true).unwrap().tokens;
    assert_eq!(a, generate(&mut m, &[1, 302], &hot(7), |_| true).unwrap().tokens);
    assert_ne!(a, generate(&mut m, &[1, 302], &hot(8), |_| true).unwrap().tokens);
}

#[test]
fn misuse_is_an_error() {
    let mut m = model("qwen3-f16.gguf", 4);
    assert!(m.decode(&[1]).unwrap_err().to_string().contains("before prefill"));
    assert!(m.prefill(&[vec![1, 2, 3, 4, 5]]).unwrap_err().to_string().contains("exceeds the context"));
    assert!(m.prefill(&[vec![100000]]).unwrap_err().to_string().contains("outside the vocabulary"));
    m.prefill(&[vec![1, 2, 3]]).unwrap();
    assert!(m.decode(&[1, 2]).unwrap_err().to_string().contains("batch of 1"));
    m.decode(&[4]).unwrap();
    assert!(m.decode(&[5]).unwrap_err().to_string().contains("is full"));
}

#[test]
fn a_missing_or_misshaped_tensor_names_itself_and_both_shapes() {
    use rlx_gguf::{GgufFile, GgufWriter};
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llm");
    let src = GgufFile::open(dir.join("qwen3-f16.gguf")).unwrap();
    let write = |skip: &str, shrink: &str| {
        let mut w = GgufWriter::new();
        for (k, v) in src.gguf().metadata() {
            w.add_metadata(k.clone(), v.clone()).unwrap();
        }
        for t in src.tensors().filter(|t| t.info.name != skip) {
            if t.info.name == shrink {
                let d = [t.info.dims[0], t.info.dims[1] - 1];
                let n = (d[0] * d[1]) as usize * 2;
                w.add_tensor(t.info.name.clone(), &d, t.info.ty, t.data[..n].to_vec()).unwrap();
            } else {
                w.add_tensor(t.info.name.clone(), &t.info.dims, t.info.ty, t.data.to_vec()).unwrap();
            }
        }
        let p = std::env::temp_dir().join(format!("rlx-{}-{skip}{shrink}.gguf", std::process::id()));
        w.write_file(&p).unwrap();
        p
    };
    let p = write("blk.1.ffn_up.weight", "");
    let e = LlmModel::load(&p, Device::Cpu, 8).unwrap_err().to_string();
    assert!(e.contains("blk.1.ffn_up.weight") && e.contains("[64, 64]") && e.contains("missing"), "{e}");
    std::fs::remove_file(p).unwrap();
    let p = write("", "blk.0.attn_k.weight");
    let e = LlmModel::load(&p, Device::Cpu, 8).unwrap_err().to_string();
    assert!(e.contains("blk.0.attn_k.weight") && e.contains("[31, 64]") && e.contains("[32, 64]"), "{e}");
    std::fs::remove_file(p).unwrap();
}

#[test]
fn prefill_and_decode_share_weights_and_cache_without_copies() {
    use rlx_models::llm::{GraphSpec, k_cache_name};
    use std::sync::Arc;
    let mut m = model("qwen3k-q4_k_m.gguf", 16);
    let v = m.config().vocab_size;
    let seq: Vec<u32> = vec![5, 77, 120, 3, 250, 9];
    let full = m.forward_all(std::slice::from_ref(&seq)).unwrap().remove(0);
    m.prefill_logits(&[seq[..4].to_vec()]).unwrap();
    m.decode_logits(&[seq[4]]).unwrap();
    let got = m.decode_logits(&[seq[5]]).unwrap().to_vec();
    assert!(max_diff(&got, &full[5 * v..]) < 1e-3);
    let pre = m.compiled(&GraphSpec { batch: 1, seq: 4, cache: Some(16), all_logits: false }).unwrap();
    let dec = m.compiled(&GraphSpec { batch: 1, seq: 1, cache: Some(16), all_logits: false }).unwrap();
    let all = m.compiled(&GraphSpec { batch: 1, seq: 6, cache: None, all_logits: true }).unwrap();
    let same = |a: &rlx_runtime::CompiledGraph, b: &rlx_runtime::CompiledGraph, name: &str| {
        Arc::ptr_eq(&a.param_share(name).unwrap().buffer, &b.param_share(name).unwrap().buffer)
    };
    // One cache buffer, written in place by prefill and by each decode step.
    assert!(same(pre, dec, &k_cache_name(0)));
    for p in m.weights().params() {
        let name = p.weight.gguf_name();
        assert!(same(pre, dec, &name) && same(all, dec, &name), "{name}");
        // Weights used unchanged point into the memory-mapped file: read-only, never copied.
        if m.weights().file_range(p).is_some() {
            assert!(!dec.param_share(&name).unwrap().buffer.is_writable(), "{name}");
        }
    }
}

#[test]
fn llama_q_k_and_half_embeddings_are_used_from_the_file_without_a_copy() {
    use rlx_models::llm::{LayerWeight, LlmWeight, ParamKind};
    // Llama's Q/K rows stay in the file's RoPE order (the graph's rope rotates adjacent pairs).
    let m = model("llama-q8_0.gguf", 8);
    for p in m.weights().params() {
        if let LlmWeight::Layer(_, LayerWeight::Q | LayerWeight::K) = p.weight {
            assert!(m.weights().file_range(p).is_some(), "{}", p.weight.gguf_name());
        }
    }
    // An F16 token embedding is gathered as F16 rows, not widened to f32 at load.
    let m = model("llama-f16.gguf", 8);
    let emb = m.weights().params().iter().find(|p| p.weight == LlmWeight::TokenEmbd).unwrap();
    assert_eq!(emb.kind, ParamKind::Half(DType::F16));
    assert!(m.weights().file_range(emb).is_some());
}
