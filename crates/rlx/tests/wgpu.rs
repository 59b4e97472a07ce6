//! A program that depends on `rlx` alone, with its `wgpu` feature, runs `Device::Wgpu` (on
//! lavapipe in CI). `RLX_WGPU_SKIP=1` skips it explicitly on machines without Vulkan.

use rlx::prelude::*;

#[test]
fn wgpu_through_the_facade() -> rlx::Result<()> {
    if std::env::var("RLX_WGPU_SKIP").is_ok_and(|v| v == "1") {
        eprintln!("wgpu test SKIPPED: RLX_WGPU_SKIP=1");
        return Ok(());
    }
    // Creating a session registers the backends this build has, so the device can answer.
    let session = Session::new(Device::Wgpu);
    if let Some(why) = Device::Wgpu.unavailable_reason() {
        panic!("Device::Wgpu is unavailable: {why} (set RLX_WGPU_SKIP=1 on machines without Vulkan)");
    }
    let mut g = Graph::new("facade");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let w = g.param("w", Shape::new(&[3, 2], DType::F32));
    let y = g.matmul(x, w);
    let y = g.relu(y);
    g.set_outputs(vec![y]);

    assert_eq!(session.backend()?.name(), "wgpu");
    let mut c = session.compile(g)?;
    c.set_param("w", &[1.0, -1.0, 0.5, 2.0, -2.0, 0.0])?;
    let out = c.run(&[("x", &[1.0, 2.0, 3.0, -1.0, 0.0, 1.0])])?;
    // x @ w = [[1+1-6, -1+4+0], [-1+0-2, 1+0+0]] = [[-4, 3], [-3, 1]], then relu.
    assert_eq!(out, vec![vec![0.0, 3.0, 0.0, 1.0]]);
    Ok(())
}

/// `Device::Auto` with the CPU and a wgpu adapter (lavapipe in CI): a MiniLM-shaped encoder goes
/// to the device with the lowest modelled time, never lavapipe (it runs shaders on the same cores,
/// slower than the CPU backend's kernels), and the choice names the estimates. With the `tpu`
/// feature and an XLA CPU plugin that device runs on the same cores too, and may model faster.
#[test]
fn auto_picks_the_cpu_for_minilm_and_says_why() -> rlx::Result<()> {
    if std::env::var("RLX_WGPU_SKIP").is_ok_and(|v| v == "1") {
        eprintln!("wgpu test SKIPPED: RLX_WGPU_SKIP=1");
        return Ok(());
    }
    let session = Session::new(Device::Auto);
    let g = rlx_opt::zoo::bert_encoder(128, 384, 12, 1536, 6);
    let choice = session.choose_device(&g)?;
    let text = choice.to_string();
    eprintln!("{text}");
    let estimate = |d: Device| choice.candidates.iter().find(|(c, _)| *c == d).and_then(|(_, s)| s.clone().ok());
    let (cpu, gpu) = (estimate(Device::Cpu), estimate(Device::Wgpu));
    assert!(cpu.is_some() && gpu.is_some() && cpu < gpu, "{text}");
    assert_ne!(choice.device, Device::Wgpu, "{text}");
    let best = choice
        .candidates
        .iter()
        .filter_map(|(d, s)| s.clone().ok().map(|s| (s, *d)))
        .min_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(best.map(|(_, d)| d), Some(choice.device), "{text}");
    assert!(text.contains(&format!("chose {}", choice.device)) && text.contains("wgpu"), "{text}");
    let compiled = session.compile(g)?;
    assert_eq!(compiled.device(), choice.device);
    Ok(())
}
