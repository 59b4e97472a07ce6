//! The models on `Device::Mlx` (the libmlx rlx-mlx was built against) against the CPU backend:
//! the GGUF fixtures (f16 greedy tokens; quantized ones against the f64 reference) and MiniLM-L6
//! embeddings. Without libmlx the tests fail saying why, unless `RLX_MLX_SKIP=1`.

mod device_models;

use rlx_driver::Device;

fn plugin() -> bool {
    rlx_runtime::register_backends();
    if let Some(why) = Device::Mlx.unavailable_reason() {
        return skip(why);
    }
    true
}

#[test]
fn float_models_give_the_cpus_greedy_tokens() {
    if plugin() {
        device_models::float_models_give_the_cpus_greedy_tokens(Device::Mlx);
    }
}

#[test]
fn quantized_models_follow_the_exact_reference() {
    if plugin() {
        device_models::quantized_models_follow_the_exact_reference(Device::Mlx);
    }
}

#[test]
fn minilm_embeddings_match_the_cpu() {
    if plugin() {
        device_models::minilm_embeddings_match_the_cpu(Device::Mlx);
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
