//! Char-GPT training on `Device::Mlx` (the libmlx rlx-mlx was built against) against the CPU: 20
//! AdamW steps with gradient clipping, losses within 1e-4 of the CPU's at every step. Without
//! libmlx it fails saying why (CI installs the mlx[cpu] wheel), unless `RLX_MLX_SKIP=1`.

mod device_train;

use rlx_driver::Device;

#[test]
fn twenty_char_gpt_steps_match_the_cpu() {
    rlx_runtime::register_backends();
    if let Some(why) = Device::Mlx.unavailable_reason() {
        skip(why);
        return;
    }
    device_train::twenty_char_gpt_steps_match_the_cpu(Device::Mlx);
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
