//! `Device::Wgpu` through the Session API: with the `wgpu` feature the same graph runs on the
//! GPU (lavapipe in CI) and matches the CPU; without it, the device says why it is unavailable.
//! `RLX_WGPU_SKIP=1` skips the GPU test explicitly on machines without Vulkan.

use rlx_driver::Device;
use rlx_ir::{DType, Graph, Shape};
use rlx_runtime::Session;

fn block() -> Graph {
    let mut g = Graph::new("block");
    let x = g.input("x", Shape::new(&[4, 8], DType::F32));
    let w = g.param("w", Shape::new(&[8, 8], DType::F32));
    let gm = g.param("gamma", Shape::new(&[8], DType::F32));
    let bt = g.param("beta", Shape::new(&[8], DType::F32));
    let h = g.matmul(x, w);
    let h = g.gelu(h);
    let h = g.layer_norm(h, gm, bt, 1e-5);
    let y = g.softmax(h, -1);
    g.set_outputs(vec![y]);
    g
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_session_matches_cpu() {
    if std::env::var("RLX_WGPU_SKIP").is_ok_and(|v| v == "1") {
        eprintln!("wgpu test SKIPPED: RLX_WGPU_SKIP=1");
        return;
    }
    let gpu = Session::new(Device::Wgpu);
    if let Some(why) = Device::Wgpu.unavailable_reason() {
        panic!("Device::Wgpu is unavailable: {why} (set RLX_WGPU_SKIP=1 on machines without Vulkan)");
    }
    let mut runs = vec![];
    for s in [Session::new(Device::Cpu), gpu] {
        let mut c = s.compile(block()).unwrap();
        let w: Vec<f32> = (0..64).map(|i| ((i * 37 % 17) as f32 - 8.0) / 8.0).collect();
        c.set_param("w", &w).unwrap();
        c.set_param("gamma", &[1.0, 0.5, 2.0, 1.5, 1.0, 0.25, 1.0, 0.75]).unwrap();
        c.set_param("beta", &[0.0, 0.1, -0.1, 0.2, 0.0, 0.3, -0.2, 0.0]).unwrap();
        let mut outs = vec![];
        for k in 0..2 {
            let x: Vec<f32> = (0..32).map(|i| ((i * 7 + k * 5) % 11) as f32 / 5.0 - 1.0).collect();
            outs.push(c.run(&[("x", &x)]).unwrap());
        }
        runs.push(outs);
    }
    for (cpu, gpu) in runs[0].iter().zip(&runs[1]) {
        for (a, b) in cpu[0].iter().zip(&gpu[0]) {
            assert!((a - b).abs() <= 1e-5 + 1e-4 * a.abs(), "cpu {a} vs wgpu {b}");
        }
    }
}

#[cfg(not(feature = "wgpu"))]
#[test]
fn wgpu_without_the_feature_says_so() {
    let err = Session::new(Device::Wgpu).compile(block()).err().expect("no wgpu in this build");
    assert!(err.to_string().contains("`wgpu` feature"), "{err}");
    assert!(!Device::Wgpu.is_available());
}
