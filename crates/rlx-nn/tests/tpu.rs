//! Char-GPT training on `Device::Tpu` (XLA through the PJRT plugin named by `RLX_PJRT_PLUGIN`)
//! against the CPU: 20 AdamW steps with gradient clipping, losses within 1e-4 of the CPU's at
//! every step. Without the variable the test says so and passes (CI sets it).

mod device_train;

use rlx_driver::Device;

#[test]
fn twenty_char_gpt_steps_match_the_cpu() {
    if std::env::var_os("RLX_PJRT_PLUGIN").is_none() {
        eprintln!("RLX_PJRT_PLUGIN is not set; skipping");
        return;
    }
    rlx_runtime::register_backends();
    if let Some(why) = Device::Tpu.unavailable_reason() {
        panic!("Device::Tpu is unavailable: {why}");
    }
    device_train::twenty_char_gpt_steps_match_the_cpu(Device::Tpu);
}
