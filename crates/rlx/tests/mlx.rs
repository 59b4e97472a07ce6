//! `Device::Mlx` through the `rlx` facade with its `mlx` feature, on the libmlx rlx-mlx was built
//! against (CI installs the mlx[cpu] wheel): the core contract checked against the CPU backend.
//! Without libmlx they fail saying why, unless `RLX_MLX_SKIP=1`.

mod contract;

use rlx::prelude::*;

fn ready() -> bool {
    let session = Session::new(Device::Mlx);
    if let Some(why) = Device::Mlx.unavailable_reason() {
        return skip(why);
    }
    assert_eq!(session.backend().map(|b| b.name()).ok(), Some("mlx"));
    true
}

#[test]
fn quickstart_mlp_matches_the_cpu() -> Result<()> {
    if !ready() {
        return Ok(());
    }
    contract::quickstart_mlp_matches_the_cpu(Device::Mlx)
}

#[test]
fn f64_mlp_gradients_match_the_cpu_to_1e_12() -> Result<()> {
    if !ready() {
        return Ok(());
    }
    contract::f64_mlp_gradients_match_the_cpu_to_1e_12(Device::Mlx)
}

#[test]
fn causal_attention_and_norms_match_the_cpu() -> Result<()> {
    if !ready() {
        return Ok(());
    }
    contract::causal_attention_and_norms_match_the_cpu(Device::Mlx)
}

#[test]
fn bad_inputs_are_errors() -> Result<()> {
    if !ready() {
        return Ok(());
    }
    contract::bad_inputs_are_errors(Device::Mlx)
}

#[test]
fn state_updates_stay_on_the_device() -> Result<()> {
    if !ready() {
        return Ok(());
    }
    contract::state_updates_stay_on_the_device(Device::Mlx)
}

#[test]
fn shared_params_see_each_others_updates() -> Result<()> {
    if !ready() {
        return Ok(());
    }
    contract::shared_params_see_each_others_updates(Device::Mlx)
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
