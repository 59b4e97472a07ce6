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

/// The three modes chosen per session through `CompileOptions::mode` (whatever `RLX_MLX_MODE`
/// says) give the CPU's results; a failure in eager mode names the op that failed.
#[test]
fn each_execution_mode_from_compile_options_matches_the_cpu() -> Result<()> {
    if !ready() {
        return Ok(());
    }
    let graph = || {
        let mut g = Graph::new("modes");
        let x = g.input("x", Shape::new(&[2, 4], DType::F32));
        let w = g.param("w", Shape::new(&[4, 3], DType::F32));
        let y = g.matmul(x, w);
        let y = g.tanh(y);
        let y = g.softmax(y, -1);
        g.set_outputs(vec![y]);
        g
    };
    let w: Vec<f32> = (0..12).map(|i| (i as f32 - 5.5) * 0.2).collect();
    let x = [0.5f32, -1.0, 2.0, 0.25, 1.5, 0.0, -0.5, 1.0];
    let run = |session: Session| -> Result<Vec<f32>> {
        let mut c = session.compile(graph())?;
        c.set_param("w", &w)?;
        Ok(c.run(&[("x", &x)])?.remove(0))
    };
    let want = run(Session::new(Device::Cpu))?;
    for mode in [ExecutionMode::Lazy, ExecutionMode::Eager, ExecutionMode::Compiled] {
        let opts = CompileOptions { mode: Some(mode), ..Default::default() };
        let got = run(Session::new(Device::Mlx).with_options(opts))?;
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 1e-5, "{mode:?}: {got:?} vs {want:?}");
        }
    }
    Ok(())
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
