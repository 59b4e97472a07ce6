//! Times the char-GPT training step (batch 16, ctx 128, the JAX peer's shape):
//! `cargo run --release -p rlx-nn --example gpt_step [REPS]`.

use rlx_nn::gpt::{self, GptConfig};
use rlx_nn::optim::Schedule;
use rlx_nn::{Adam, ParamStore, Rng, TrainConfig, TrainStep};
use std::time::Instant;

fn main() -> rlx_ir::Result<()> {
    let reps: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(20);
    let vocab: String = (0..65u8).map(|i| (b' ' + i) as char).collect();
    let cfg = GptConfig::small(vocab);
    let (g, specs) = gpt::loss_graph(&cfg, 16)?;
    let store = ParamStore::init(&specs, 0)?;
    let opt = Adam { b2: 0.99, ..Adam::adamw(Schedule::Constant(1e-3), 0.1) };
    let t0 = Instant::now();
    let mut step = TrainStep::new(&g, &store, &opt, &TrainConfig::default())?;
    let compile = t0.elapsed().as_secs_f64();
    let mut rng = Rng::new(1);
    let tokens: Vec<i64> = (0..100_000).map(|_| rng.below(65) as i64).collect();
    let batches: Vec<_> = (0..8).map(|_| gpt::batch(&tokens, 16, 128, &mut rng)).collect::<Result<_, _>>()?;
    let t1 = Instant::now();
    let first = step.step(&[("x", &batches[0].0), ("y", &batches[0].1)])?;
    let first_ms = t1.elapsed().as_secs_f64() * 1e3;
    let mut ts = vec![];
    let mut loss = first;
    for i in 0..reps + 3 {
        let (x, y) = &batches[i % 8];
        let t = Instant::now();
        loss = step.step(&[("x", x), ("y", y)])?;
        if i >= 3 {
            ts.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    ts.sort_by(f64::total_cmp);
    let med = ts[ts.len() / 2];
    println!(
        "rlx gpt train step B16xT128 ({:.3}M params): median {med:.2} ms (best {:.2}) {:.0} tok/s  compile {:.0} ms  first-call {first_ms:.0} ms  loss {first:.3} -> {loss:.3}  reps {reps}",
        store.numel() as f64 / 1e6,
        ts[0],
        16.0 * 128.0 / (med / 1e3),
        compile * 1e3
    );
    // RLX_PROFILE=1 prints where the time went, per kernel.
    eprint!("{}", rlx_cpu::kernels::profile::report());
    Ok(())
}
