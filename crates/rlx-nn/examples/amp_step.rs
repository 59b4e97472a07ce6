//! Times the char-GPT training step at `rlx train`'s default shape (batch 16, ctx 64, 2 layers,
//! dim 128) under a precision policy, and prints the loss of every step (to compare curves):
//! `cargo run --release -p rlx-nn --example amp_step -- f32|f16|bf16 [STEPS]`.
//! With `RLX_PROFILE=1` it also prints the per-kernel time table.

use rlx_nn::gpt::{self, GptConfig};
use rlx_nn::optim::Schedule;
use rlx_nn::{Adam, MixedPrecision, ParamStore, Rng, TrainConfig, TrainStep};
use std::time::Instant;

fn main() -> rlx_ir::Result<()> {
    let mut args = std::env::args().skip(1);
    let amp_name = args.next().unwrap_or_else(|| "f32".into());
    let steps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(30);
    let amp = match amp_name.as_str() {
        "f32" => None,
        "f16" => Some(MixedPrecision::f16()),
        "bf16" => Some(MixedPrecision::bf16()),
        other => return Err(rlx_ir::Error::eval("amp_step", format!("unknown policy `{other}`: f32, f16 or bf16"))),
    };
    let vocab: String = (0..65u8).map(|i| (b' ' + i) as char).collect();
    let cfg = GptConfig { ctx: 64, layers: 2, heads: 4, dim: 128, ..GptConfig::small(vocab) };
    let (g, specs) = gpt::loss_graph(&cfg, 16)?;
    let store = ParamStore::init(&specs, 0)?;
    let opt = Adam { b2: 0.99, ..Adam::adamw(Schedule::Constant(3e-3), 0.1) };
    let tc = TrainConfig { amp, ..TrainConfig::default() };
    let mut step = TrainStep::new(&g, &store, &opt, &tc)?;
    let mut rng = Rng::new(1);
    // Text with structure (a repeating phrase), so the loss falls steadily.
    let phrase: Vec<i64> = "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG. ".bytes().map(|b| (b - b' ') as i64).collect();
    let tokens: Vec<i64> = (0..100_000).map(|i| phrase[i % phrase.len()]).collect();
    let mut ts = vec![];
    let mut losses = vec![];
    for i in 0..steps + 2 {
        let (x, y) = gpt::batch(&tokens, 16, cfg.ctx, &mut rng)?;
        let t = Instant::now();
        losses.push(step.step(&[("x", &x), ("y", &y)])?);
        if i >= 2 {
            ts.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let mut sorted = ts.clone();
    sorted.sort_by(f64::total_cmp);
    let med = sorted[sorted.len() / 2];
    println!("amp {amp_name}: median step {med:.2} ms (best {:.2}) over {steps} steps", sorted[0]);
    let curve: Vec<String> = losses.iter().map(|l| format!("{l:.4}")).collect();
    println!("losses: {}", curve.join(" "));
    eprint!("{}", rlx_cpu::kernels::profile::report());
    Ok(())
}
