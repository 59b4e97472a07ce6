//! The models on `Device::Tpu` (XLA through the PJRT plugin named by `RLX_PJRT_PLUGIN`) against
//! the CPU backend and the f64 reference: the tiny GGUF fixtures (Qwen3 / Llama, f16, Q8_0,
//! Q4_K_M) and MiniLM-L6 embeddings. Without the variable the tests say so and pass (CI sets it).

mod device_models;

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

#[test]
fn quantized_models_follow_the_exact_reference() {
    if plugin() {
        device_models::quantized_models_follow_the_exact_reference(Device::Tpu);
    }
}
