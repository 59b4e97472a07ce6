//! The char-GPT training step (batch 16, ctx 128, AdamW) of RLX against JAX's jitted step,
//! interleaved round by round (`tools/jax_gpt_step.py` is the JAX side).

use crate::peers::LineServer;
use crate::probe::load_avg;
use crate::stats::median;
use rlx_nn::gpt::{self, GptConfig};
use rlx_nn::optim::Schedule;
use rlx_nn::{Adam, ParamStore, Rng, TrainConfig, TrainStep};
use std::time::Instant;

/// The RLX step of the same model, batch and optimizer, with its first-call time.
/// The compiled step, its (tokens, targets) batches and the compile time in ms.
type RlxStep = (TrainStep, Vec<(rlx_ir::HostTensor, rlx_ir::HostTensor)>, f64);

fn rlx_step() -> Result<RlxStep, String> {
    let e = |e: rlx_ir::Error| e.to_string();
    let vocab: String = (0..65u8).map(|i| (b' ' + i) as char).collect();
    let cfg = GptConfig::small(vocab);
    let (g, specs) = gpt::loss_graph(&cfg, 16).map_err(e)?;
    let store = ParamStore::init(&specs, 0).map_err(e)?;
    let opt = Adam { b2: 0.99, ..Adam::adamw(Schedule::Constant(1e-3), 0.1) };
    let t0 = Instant::now();
    let mut step = TrainStep::new(&g, &store, &opt, &TrainConfig::default()).map_err(e)?;
    let mut rng = Rng::new(1);
    let tokens: Vec<i64> = (0..100_000).map(|_| rng.below(65) as i64).collect();
    let batches: Vec<_> =
        (0..8).map(|_| gpt::batch(&tokens, 16, 128, &mut rng)).collect::<Result<_, _>>().map_err(e)?;
    step.step(&[("x", &batches[0].0), ("y", &batches[0].1)]).map_err(e)?;
    Ok((step, batches, t0.elapsed().as_secs_f64() * 1e3))
}

/// `rounds` rounds, each `per` RLX steps then `per` JAX steps; prints medians and the ratio.
pub fn compare(rounds: usize, per: usize) -> Result<(), String> {
    println!("\n## Char-GPT training step (B16 x T128, 4 layers, d 128, AdamW; fwd + bwd + update)\n");
    let (mut step, batches, rlx_first) = rlx_step()?;
    let mut jax =
        match LineServer::spawn(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/jax_gpt_step.py"), "JAX step server")
            .and_then(|mut j| j.ask("init").map(|v| (j, v)))
        {
            Ok(j) => Some(j),
            Err(e) => {
                println!("JAX peer skipped: {e}");
                None
            }
        };
    let (mut rt, mut jt) = (vec![], vec![]);
    let mut loss = f32::NAN;
    let mut loads = vec![];
    for r in 0..rounds + 1 {
        loads.push(load_avg());
        let mut ts = vec![];
        for i in 0..per {
            let (x, y) = &batches[(r * per + i) % batches.len()];
            let t = Instant::now();
            loss = step.step(&[("x", x), ("y", y)]).map_err(|e| e.to_string())?;
            ts.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let js = match &mut jax {
            Some((j, _)) => crate::peers::PyPeers::ms(&j.ask(&format!("run {per}"))?),
            None => vec![],
        };
        if r > 0 {
            // Round 0 warms both up.
            rt.extend(ts);
            jt.extend(js);
        }
    }
    let (rm, jm) = (median(&rt), median(&jt));
    println!("| impl | median ms/step | best ms | tok/s | first call ms |");
    println!("|---|---|---|---|---|");
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    println!("| RLX | {rm:.2} | {:.2} | {:.0} | {rlx_first:.0} |", best(&rt), 2048.0 / (rm / 1e3));
    if let Some((_, init)) = &jax {
        let first = crate::peers::PyPeers::ms(init).first().copied().unwrap_or(f64::NAN);
        println!("| JAX jit | {jm:.2} | {:.2} | {:.0} | {first:.0} |", best(&jt), 2048.0 / (jm / 1e3));
        println!("\nRLX / JAX = {:.2}x (below 1 is faster)", rm / jm);
    }
    println!(
        "{rounds} rounds x {per} steps each, interleaved; RLX loss {loss:.3}; load average {:.2}-{:.2}",
        loads.iter().copied().fold(f64::INFINITY, f64::min),
        loads.iter().copied().fold(0.0, f64::max)
    );
    Ok(())
}
