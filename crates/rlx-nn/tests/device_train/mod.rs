//! Char-GPT training every device backend runs against the CPU; each device's test file (`tpu.rs`,
//! `mlx.rs`) calls it with its device.

use rlx_driver::Device;
use rlx_nn::gpt::{self, GptConfig};
use rlx_nn::optim::{Adam, Schedule};
use rlx_nn::{ParamStore, Rng, TrainConfig, TrainStep};

/// 20 AdamW steps with gradient clipping on `device` and on the CPU: losses within 1e-4 at every
/// step, and falling.
pub fn twenty_char_gpt_steps_match_the_cpu(device: Device) {
    let text = "the quick brown fox jumps over the lazy dog. ".repeat(40);
    let cfg =
        GptConfig { ctx: 32, layers: 2, heads: 4, dim: 64, mlp_mult: 4, ..GptConfig::small(gpt::vocab_of(&text)) };
    let tokens = cfg.encode(&text).unwrap();
    let (g, specs) = gpt::loss_graph(&cfg, 8).unwrap();
    let store = ParamStore::init(&specs, 0).unwrap();
    let opt =
        Adam { b2: 0.99, ..Adam::adamw(Schedule::WarmupCosine { peak: 5e-3, warmup: 5, total: 20, end: 0.0 }, 0.1) };
    let mut losses = vec![];
    for device in [Device::Cpu, device] {
        let tc = TrainConfig { clip_norm: Some(1.0), device, ..TrainConfig::default() };
        let mut step = TrainStep::new(&g, &store, &opt, &tc).unwrap();
        let mut rng = Rng::new(3);
        let mut l = vec![];
        for _ in 0..20 {
            let (x, y) = gpt::batch(&tokens, 8, cfg.ctx, &mut rng).unwrap();
            l.push(step.step(&[("x", &x), ("y", &y)]).unwrap());
        }
        losses.push(l);
    }
    let worst = losses[0].iter().zip(&losses[1]).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    eprintln!("losses cpu {:?}\nlosses {device} {:?}\nmax |diff| {worst:.2e}", losses[0], losses[1]);
    assert!(worst <= 1e-4, "losses differ by {worst}");
    assert!(losses[1][19] < losses[1][0] - 0.5, "the loss fell on device");
}
