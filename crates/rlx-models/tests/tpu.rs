//! The models on `Device::Tpu` (XLA through the PJRT plugin named by `RLX_PJRT_PLUGIN`) against
//! the CPU backend and the f64 reference: the tiny GGUF fixtures (Qwen3 / Llama, f16, Q8_0,
//! Q4_K_M) and MiniLM-L6 embeddings. Without the variable the tests say so and pass (CI sets it).

mod device_models;

use device_models::*;
use rlx_driver::Device;

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

#[test]
fn float_models_give_the_cpus_greedy_tokens() {
    if plugin() {
        device_models::float_models_give_the_cpus_greedy_tokens(Device::Tpu);
    }
}

#[test]
fn minilm_embeddings_match_the_cpu() {
    if plugin() {
        device_models::minilm_embeddings_match_the_cpu(Device::Tpu);
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
