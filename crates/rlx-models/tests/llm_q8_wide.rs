//! A Qwen3 quantized to Q8_0 throughout by llama.cpp, the token embedding too and tied as the LM
//! head (hidden 128, 4 heads and 2 KV heads of dim 32, ffn 384, vocabulary 512, 4 layers:
//! `tools/tiny_llm.py --q8-wide`), where the other Q8_0 fixtures have hidden 64 and vocabularies
//! of 299 and 319 rows. Held against llama.cpp and an f64 numpy forward over the dequantized
//! weights (`tools/qwen3_numpy.py`): logits at every prompt position and 32 greedy tokens, for a
//! 9-token prompt (decode and int8 prefill kernels) and a 40-token one (AMX prefill where the CPU
//! has it), under the default paths and under every `RLX_QUANT_*` setting a user can force.

use rlx_driver::Device;
use rlx_ir::DType;
use rlx_models::llm::{GenerateOptions, LlmModel, generate};
use rlx_models::sampling::SamplerConfig;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llm")
}

struct Reference {
    prompt: Vec<u32>,
    vocab: usize,
    llama_logits: Vec<f32>,
    f64_logits: Vec<f32>,
    greedy: Vec<u32>,
}

fn reference(name: &str) -> Reference {
    let text = std::fs::read_to_string(fixtures().join(format!("{name}.json")))
        .expect("fixture (tools/tiny_llm.py --q8-wide)");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = |k: &str| v[k].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<_>>();
    let floats = |k: &str| v[k].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect::<Vec<_>>();
    let greedy = ids("greedy");
    // The tool keeps only models whose two references agree on every greedy token.
    assert_eq!(greedy, ids("f64_greedy"), "{name}: the fixture's references disagree");
    Reference {
        prompt: ids("prompt_ids"),
        vocab: v["vocab"].as_u64().unwrap() as usize,
        llama_logits: floats("logits"),
        f64_logits: floats("f64_logits"),
        greedy,
    }
}

/// max |a - b| over max |b|.
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let d = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    d / b.iter().map(|y| y.abs()).fold(0.0f32, f32::max)
}

/// The paths a user can force, each run in a child process of this test binary (the settings
/// are read from the environment when kernels are built).
const PATHS: [&[(&str, &str)]; 6] = [
    &[("RLX_QUANT_REPACK", "0")],
    &[("RLX_QUANT_AMX", "0")],
    &[("RLX_QUANT_GEMM", "0"), ("RLX_QUANT_REPACK", "0")],
    &[("RLX_QUANT_ISA", "avx2")],
    &[("RLX_QUANT_ISA", "scalar")],
    &[("RLX_QUANT_RELEASE", "0"), ("RLX_GEMM_KERNEL", "avx2")],
];

/// Marks a child run (so it does not spawn children of its own).
const CHILD: &str = "RLX_Q8_WIDE_CHILD";

fn check(name: &str) {
    let r = reference(name);
    let ctx = r.prompt.len() + r.greedy.len();
    // Both references keep f32 keys and values.
    let mut m = LlmModel::load(fixtures().join("qwen3w-q8_0.gguf"), Device::Cpu, ctx)
        .unwrap()
        .with_kv_dtype(DType::F32)
        .unwrap();
    assert_eq!(m.config().vocab_size, r.vocab);
    let logits = m.forward_all(std::slice::from_ref(&r.prompt)).unwrap().remove(0);
    // Quantized activations move the logits by a few percent on both sides (int8 on llama.cpp's
    // side; int8 or bf16 on AMX on ours); a wrong path moves them by tens of percents.
    let near = |what: &str, ours: &[f32], llama: &[f32], exact: &[f32]| {
        let (e, e_llama) = (rel_err(ours, exact), rel_err(llama, exact));
        eprintln!("{name}: {what} from the f64 reference: RLX {e:.2e}, llama.cpp {e_llama:.2e} (relative)");
        assert!(
            e <= 1.25 * e_llama + 2e-3 && e < 5e-2,
            "{name}: {what}: RLX {e} from the f64 reference, llama.cpp {e_llama}"
        );
    };
    near("logits", &logits, &r.llama_logits, &r.f64_logits);
    // The cache path's last position (its LM head takes one row, where forward_all's takes all).
    let last = m.prefill(std::slice::from_ref(&r.prompt)).unwrap().remove(0);
    let at = (r.prompt.len() - 1) * r.vocab;
    near("prefill's last logits", &last, &r.llama_logits[at..], &r.f64_logits[at..]);
    let opts = GenerateOptions { max_tokens: r.greedy.len(), sampler: SamplerConfig::default(), stop_tokens: vec![] };
    let got = generate(&mut m, &r.prompt, &opts, |_| true).unwrap().tokens;
    assert_eq!(got, r.greedy, "{name}: greedy tokens differ from llama.cpp's and the f64 reference's");
}

#[test]
fn qwen3_q8_0_tied_wide_matches_llama_cpp_and_the_f64_reference_on_every_path() {
    check("qwen3w-q8_0");
    check("qwen3w-q8_0-long");
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let test = "qwen3_q8_0_tied_wide_matches_llama_cpp_and_the_f64_reference_on_every_path";
    for path in PATHS {
        let out = std::process::Command::new(&exe)
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .envs(path.iter().copied())
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("1 passed"), "under {path:?}:\n{text}");
        eprintln!("{path:?}: passed");
    }
}
