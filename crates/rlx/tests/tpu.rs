//! `Device::Tpu` through the `rlx` facade with its `tpu` feature, on the PJRT plugin named by
//! `RLX_PJRT_PLUGIN` (CI installs an XLA CPU plugin from PyPI): the core contract checked
//! against the CPU backend. Without the variable the tests say so and pass.

mod contract;

use rlx::prelude::*;

fn ready() -> bool {
    if std::env::var_os("RLX_PJRT_PLUGIN").is_none() {
        eprintln!("RLX_PJRT_PLUGIN is not set; skipping");
        return false;
    }
    let session = Session::new(Device::Tpu);
    if let Some(why) = Device::Tpu.unavailable_reason() {
        panic!("Device::Tpu is unavailable: {why}");
    }
    assert_eq!(session.backend().map(|b| b.name()).ok(), Some("pjrt"));
    true
}

#[test]
fn quickstart_mlp_matches_the_cpu() -> Result<()> {
    if !ready() {
        return Ok(());
    }
    contract::quickstart_mlp_matches_the_cpu(Device::Tpu)
}

#[test]
fn f64_mlp_gradients_match_the_cpu_to_1e_12() -> Result<()> {
    if !ready() {
        return Ok(());
    }
    contract::f64_mlp_gradients_match_the_cpu_to_1e_12(Device::Tpu)
}

#[test]
fn causal_attention_and_norms_match_the_cpu() -> Result<()> {
    if !ready() {
        return Ok(());
    }
    contract::causal_attention_and_norms_match_the_cpu(Device::Tpu)
}

#[test]
fn bad_inputs_are_errors() -> Result<()> {
    if !ready() {
        return Ok(());
    }
    contract::bad_inputs_are_errors(Device::Tpu)
}

#[test]
fn state_updates_stay_on_the_device() -> Result<()> {
    if !ready() {
        return Ok(());
    }
    contract::state_updates_stay_on_the_device(Device::Tpu)
}

#[test]
fn shared_params_see_each_others_updates() -> Result<()> {
    if !ready() {
        return Ok(());
    }
    contract::shared_params_see_each_others_updates(Device::Tpu)
}

#[test]
fn the_disk_cache_serves_a_second_compile() -> Result<()> {
    if !ready() {
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("rlx-pjrt-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let session =
        Session::new(Device::Tpu).with_options(CompileOptions { cache_dir: Some(dir.clone()), ..Default::default() });
    let mut g = Graph::new("cached");
    let x = g.input("x", Shape::new(&[4], DType::F32));
    let y = g.exp(x);
    let y = g.mul(y, x);
    g.set_outputs(vec![y]);
    let (_, stores0) = rlx_pjrt::cache::counters();
    let first = session.compile(g.clone())?.run(&[("x", &[0.0, 1.0, -1.0, 2.0])])?;
    let (hits1, stores1) = rlx_pjrt::cache::counters();
    let second = session.compile(g)?.run(&[("x", &[0.0, 1.0, -1.0, 2.0])])?;
    let (hits2, _) = rlx_pjrt::cache::counters();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(first, second);
    // No other test compiles this module, so the store and the hit are ours.
    assert!(stores1 > stores0, "the first compile wrote the cache");
    assert!(hits2 > hits1, "the second compile loaded it");
    Ok(())
}
