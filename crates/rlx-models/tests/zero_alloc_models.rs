//! Whole models run without heap allocation once warm: a tiny BERT's compiled graph (`run_into`)
//! and LLM decode steps (`decode_logits`, which reuses its host buffers), each model format the
//! fixtures hold (f16, q8_0 and Q4_K_M weights; f32 and f16 KV caches). A counting allocator
//! sees every thread, pool workers included; the file runs without libtest (`harness = false`),
//! whose own threads could allocate while runs are counted.

use rlx_driver::Device;
use rlx_driver::alloc_count::{CountingAllocator, count};
use rlx_ir::DType;
use rlx_models::SentenceEmbedder;
use rlx_models::llm::LlmModel;
use std::path::Path;

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

fn fixtures() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"))
}

/// The tiny BERT (embeddings, masked attention, GELU, layer norms, pooling) at batch 2 x 16.
fn tiny_bert() {
    let mut m = SentenceEmbedder::load(fixtures().join("tiny-bert"), Device::Cpu).unwrap();
    let (batch, seq) = (2, 16);
    let c = m.prepare(batch, seq).unwrap();
    let ids: Vec<u8> = (0..batch * seq).flat_map(|i| ((i * 7 % 20) as i64 + 1).to_le_bytes()).collect();
    let types = vec![0u8; batch * seq * 8];
    // The second sequence is padded after 9 tokens.
    let mask: Vec<u8> = (0..batch * seq).flat_map(|i| i64::from(i < seq || i % seq < 9).to_le_bytes()).collect();
    let mut out: Vec<Vec<u8>> = c.outputs().iter().map(|s| vec![0u8; s.size_bytes().unwrap()]).collect();
    let mut outs: Vec<&mut [u8]> = out.iter_mut().map(|o| o.as_mut_slice()).collect();
    let mut run = || c.run_into(&[&ids, &types, &mask], &mut outs).unwrap();
    run();
    run();
    let n = count(|| (0..5).for_each(|_| run()));
    assert_eq!(n, 0, "tiny BERT: {n} allocations in 5 warm runs");
}

/// Prefill, two warm decode steps, then five counted ones, for each LLM fixture.
fn llm_decode_steps() {
    for (file, kv) in [
        ("qwen3-f16.gguf", DType::F32),
        ("llama-q8_0.gguf", DType::F32),
        ("qwen3k-q4_k_m.gguf", DType::F32),
        ("qwen3-q8_0.gguf", DType::F16),
    ] {
        let path = fixtures().join("llm").join(file);
        let mut m = LlmModel::load(path, Device::Cpu, 32).unwrap().with_kv_dtype(kv).unwrap();
        m.prefill(&[vec![5, 77, 120, 3], vec![9, 41, 100, 2]]).unwrap();
        for t in [11, 12] {
            m.decode_logits(&[t, t + 1]).unwrap();
        }
        let n = count(|| {
            for t in 20..25 {
                m.decode_logits(&[t, t + 3]).unwrap();
            }
        });
        assert_eq!(n, 0, "{file} ({kv} cache): {n} allocations in 5 warm decode steps");
    }
}

fn main() {
    tiny_bert();
    llm_decode_steps();
    println!("zero_alloc_models: warm runs of whole models allocate nothing");
}
